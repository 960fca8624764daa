"""The normalized raw schema itself, as CSV, JSON lines or Parquet (chosen by file extension).

Required fields: ts, job, operator, instance, metric, value; optional: window_s (default 10),
target, host. CSV cells are read as text (an empty cell is a missing value); JSON lines are one object
per line (a line that is not a JSON object is quarantined as ``malformed_row``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from history.adapters._common import CANDIDATE_COLUMNS, AdapterOptions, AdapterResult, candidates
from history.errors import AdapterError

REQUIRED = ("ts", "job", "operator", "instance", "metric", "value")
OPTIONAL = ("window_s", "target", "host")
EXTENSIONS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
              ".parquet": "parquet", ".pq": "parquet"}


def read_normalized(path: Path, options: AdapterOptions = AdapterOptions()) -> AdapterResult:
    path = Path(path)
    kind = EXTENSIONS.get(path.suffix.lower())
    if kind is None:
        raise AdapterError(f"unknown extension; expected one of {', '.join(sorted(EXTENSIONS))}",
                           file=str(path), field="extension", value=path.suffix)
    if kind == "csv":
        frame = _read_csv(path)
    elif kind == "parquet":
        frame = _read_parquet(path)
    else:
        return AdapterResult(_finish(_read_jsonl(path), path, options, first_line=1))
    return AdapterResult(_finish(frame, path, options, first_line=2 if kind == "csv" else 1))


def _check_columns(columns, path: Path) -> None:
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise AdapterError(f"missing required column(s) {', '.join(missing)} "
                           f"(columns: {', '.join(map(str, columns))})",
                           file=str(path), field="columns", value=",".join(missing))


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise AdapterError("empty file (no header)", file=str(path)) from None
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise AdapterError(f"not a readable CSV file ({str(err).splitlines()[0]})", file=str(path)) from None
    frame.columns = [c.strip() for c in frame.columns]
    _check_columns(frame.columns, path)
    frame = frame.astype(object)
    for column in frame.columns:
        frame[column] = frame[column].map(lambda s: None if s is None or str(s).strip() == "" else str(s).strip())
    return frame


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise AdapterError(f"not a readable Parquet file ({err})", file=str(path)) from None
    _check_columns(table.column_names, path)
    frame = table.to_pandas().astype(object)
    return frame.where(frame.notna(), None)


def _read_jsonl(path: Path) -> pd.DataFrame:
    records: list[dict] = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise AdapterError(f"not UTF-8 text ({err.reason})", file=str(path)) from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            records.append({"line": number, "reason": "malformed_row",
                            "detail": f"not JSON ({err.msg}): {line[:80]}"})
            continue
        except (ValueError, RecursionError) as err:  # a 5,000-digit integer; nesting too deep
            records.append({"line": number, "reason": "malformed_row",
                            "detail": f"not usable JSON ({type(err).__name__}): {line[:80]}"})
            continue
        if not isinstance(obj, dict):
            records.append({"line": number, "reason": "malformed_row",
                            "detail": f"not a JSON object: {line[:80]}"})
            continue
        row = {k: obj.get(k) for k in REQUIRED + OPTIONAL}
        row["line"] = number
        records.append(row)
    if records and all(r.get("reason") for r in records) and len(records) > 1:
        raise AdapterError("no line is a JSON object; is this JSON lines?", file=str(path))
    return candidates(records)


def _finish(frame: pd.DataFrame, path: Path, options: AdapterOptions, first_line: int) -> pd.DataFrame:
    frame = frame.copy()
    if "line" not in frame.columns or frame["line"].isna().all():
        frame["line"] = range(first_line, first_line + len(frame))
    for column in CANDIDATE_COLUMNS:
        if column not in frame.columns:
            frame[column] = None
    if options.window_s is not None:
        frame["window_s"] = frame["window_s"].map(lambda v: options.window_s if v is None else v)
    if options.job is not None:
        frame["job"] = options.job
    frame["file"] = str(path)
    return frame[list(CANDIDATE_COLUMNS)]
