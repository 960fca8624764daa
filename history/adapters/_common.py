"""What every adapter returns: candidate rows (fields as read, not yet validated) plus counts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import pandas as pd

CANDIDATE_COLUMNS: tuple[str, ...] = ("ts", "window_s", "job", "operator", "instance", "metric",
                                      "value", "target", "host", "file", "line", "reason", "detail")
"""Adapters emit these columns. ``reason``/``detail`` are preset (else None) when the adapter
already knows a record is unusable (e.g. a JSON line that does not parse); ``line`` is the
1-based line (or record number) in ``file``."""


@dataclass(frozen=True)
class AdapterOptions:
    """What the command line can tell an adapter that the file itself may not say."""

    job: str | None = None
    """Job name for every row read (overrides the file's)."""
    window_s: float | None = None
    """Window length, s: how per-second gauges become window counts (default: the file's, or 10)."""
    ts: str | None = None
    """Window start (ISO 8601 UTC) for captures that carry no timestamp (Prometheus text)."""
    edges: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    """operator -> downstream operators; an operator with exactly one downstream gets its
    total output attributed to that edge (engines report output per operator, not per edge)."""

    def __post_init__(self) -> None:
        from history.errors import HistoryError
        from history.schema import MAX_NAME_CHARS, job_fits_path

        if self.job is not None:
            job = str(self.job).strip()
            if not job:
                raise HistoryError("the job name is empty", field="--job", value=self.job)
            if len(job) > MAX_NAME_CHARS or not job_fits_path(job):
                raise HistoryError(f"the job name is too long (at most {MAX_NAME_CHARS} characters, fewer "
                                   "when not ASCII: it names a store directory)", field="--job",
                                   value=self.job[:40] + "...")
        if self.window_s is not None and not (isinstance(self.window_s, (int, float)) and
                                              math.isfinite(self.window_s) and self.window_s > 0):
            raise HistoryError("the window must be a positive number of seconds", field="--window",
                               value=self.window_s)


@dataclass(frozen=True)
class AdapterResult:
    """Candidate rows of one file and the engine metrics that the vocabulary does not map."""

    rows: pd.DataFrame
    ignored: Mapping[str, int] = field(default_factory=dict)
    """Engine metric name -> how many samples were read but not mapped (JVM, checkpoints...)."""


_INT64 = (-(2**63), 2**63)


def as_read(value: Any) -> Any:
    """A field as read, safe for a candidate frame: an integer outside 64 bits (JSON holds any:
    ``10**400``) becomes its text, which validation rejects with the row's reason
    (``non_numeric_value``, ``bad_instance``, ``bad_name``...), instead of failing the frame."""
    if isinstance(value, int) and not isinstance(value, bool) and not _INT64[0] <= value < _INT64[1]:
        try:
            return str(value)
        except ValueError:  # beyond Python's int -> str digit limit
            return f"<an integer of {value.bit_length()} bits>"
    return value


def candidates(records: list[dict[str, Any]]) -> pd.DataFrame:
    """A candidate frame from dicts (missing keys become None; fields through ``as_read``)."""
    records = [{k: as_read(v) for k, v in r.items()} for r in records]
    frame = pd.DataFrame.from_records(records, columns=list(CANDIDATE_COLUMNS))
    return frame.astype(object).where(frame.notna(), None) if len(frame) else frame.astype(object)


def load_json(path, file: str) -> Any:
    """The JSON document in ``path``; ``AdapterError`` naming the file when it is not JSON (also:
    not UTF-8, an integer beyond Python's digit limit, nesting too deep to parse)."""
    import json

    from history.errors import AdapterError

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise AdapterError(f"not UTF-8 text ({err.reason})", file=file) from None
    except json.JSONDecodeError as err:
        raise AdapterError(f"not a JSON file ({err})", file=file) from None
    except ValueError as err:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise AdapterError(f"not a usable JSON file ({str(err).split(':')[0][:120]})", file=file) from None
    except RecursionError:
        raise AdapterError("not a usable JSON file (nested too deeply)", file=file) from None


def single_target(options: AdapterOptions, operator: str) -> str | None:
    downstream = options.edges.get(operator, ())
    return downstream[0] if len(downstream) == 1 else None


def parse_edges(text: str | None) -> dict[str, tuple[str, ...]]:
    """'a->b,b->c,b->d' -> {'a': ('b',), 'b': ('c', 'd')}."""
    from history.errors import HistoryError

    edges: dict[str, list[str]] = {}
    if not text:
        return {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        src, sep, dst = part.partition("->")
        if not sep or not src.strip() or not dst.strip():
            raise HistoryError("expected source->target[,source->target...]", field="--edges", value=part)
        edges.setdefault(src.strip(), []).append(dst.strip())
    return {k: tuple(v) for k, v in edges.items()}
