"""Validation: candidate rows -> typed raw rows + quarantined rows (with a reason). Nothing is dropped.

Checks, in order (a row gets the first reason that applies; see ``schema.Reason``):
``malformed_row`` (preset by the adapter), ``missing_field`` (empty job/operator/metric),
``bad_name`` (a job, operator, target or host longer than ``MAX_NAME_CHARS``, or a job too long to name a
store directory), ``unknown_metric``, ``bad_timestamp`` (not ISO 8601, not epoch seconds, or
outside [``TS_MIN``, ``TS_MAX``)), ``bad_window``
(window_s not a positive number), ``bad_instance`` (not an integer >= 0),
``non_numeric_value`` (text, empty, NaN, +-inf), ``negative_value`` (all metrics are
non-negative), ``unexpected_target`` (a target on a metric other than records_out), then over
the batch: ``duplicate_conflict`` (same row key, different value or window_s: every row of that
key goes to quarantine, since none can be trusted). Exact duplicates are merged and counted.
``time_exceeds_window`` (busy + back-pressured + idle > window) needs the rows already stored for
the same instance-window, so the store applies it (``time_violations``) when it merges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd

from history.adapters._common import CANDIDATE_COLUMNS
from history.schema import (DEFAULT_WINDOW_S, KEY_COLUMNS, MAX_NAME_CHARS, METRIC_NAMES,
                            QUARANTINE_COLUMNS, RAW_COLUMNS, TIME_METRICS, TIME_TOLERANCE, TS_MAX,
                            TS_MIN, Reason, job_fits_path)

_TS_MIN = pd.Timestamp(TS_MIN)
_TS_MAX = pd.Timestamp(TS_MAX)


@dataclass(frozen=True)
class Validated:
    """The outcome of validating one batch of candidate rows."""

    accepted: pd.DataFrame
    """Typed raw rows (``RAW_COLUMNS``, plus ``file`` and ``line`` for later quarantine), unique
    on the row key."""
    quarantined: pd.DataFrame
    """``QUARANTINE_COLUMNS``: the fields as read (text), reason, detail, file, line."""
    duplicates: int
    """Exact duplicate rows merged into one (same key, same value)."""


def _text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, (pd.Timestamp, datetime)):
        return value.isoformat()
    return str(value)


def quarantine_frame(rows: pd.DataFrame, reason, detail) -> pd.DataFrame:
    """Quarantine rows (candidate or typed columns) with ``reason``/``detail`` (scalars or Series)."""
    out = pd.DataFrame(index=rows.index)
    for column in ("ts", "window_s", "job", "operator", "instance", "metric", "value", "target"):
        out[column] = rows[column].map(_text) if column in rows else None
    out["reason"] = reason.value if isinstance(reason, Reason) else reason
    out["detail"] = detail
    out["file"] = rows["file"].map(_text) if "file" in rows else None
    line = rows["line"] if "line" in rows else pd.Series(None, index=rows.index)
    out["line"] = pd.array([None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)
                            for v in line], dtype="Int64")
    return out[list(QUARANTINE_COLUMNS)].reset_index(drop=True)


def parse_timestamps(values: pd.Series) -> pd.Series:
    """ISO 8601 text (naive = UTC), datetimes, or epoch seconds -> UTC timestamps; NaT when not
    a time or outside [``TS_MIN``, ``TS_MAX``) (each value on its own: one bad value never fails
    the others)."""
    out = pd.Series(pd.NaT, index=values.index, dtype="datetime64[ns, UTC]")
    if values.empty:
        return out
    is_dt = values.map(lambda v: isinstance(v, (pd.Timestamp, datetime)))
    if is_dt.any():
        out[is_dt] = pd.to_datetime(values[is_dt].map(_in_range_or_none), utc=True, errors="coerce")
    rest = values[~is_dt & values.notna()]
    is_num = rest.map(lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool))
    text = rest[~is_num].astype(str).str.strip()
    as_num = pd.to_numeric(text, errors="coerce")
    parts = [p for p in (rest[is_num].astype(float), as_num[as_num.notna()]) if len(p)]
    numeric = pd.concat(parts) if parts else pd.Series([], dtype=float)
    seconds = numeric.to_numpy(dtype=float)
    numeric = numeric[np.isfinite(seconds) & (seconds >= _TS_MIN.timestamp()) & (seconds < _TS_MAX.timestamp())]
    if len(numeric):
        out[numeric.index] = pd.to_datetime(numeric.astype(float), unit="s", utc=True)
    text = text[as_num.isna()]
    # pandas shifts naive strings by the offset of aware ones when parsed together: split them.
    aware = text.str.contains(r"(?:Z|[+-]\d{2}(?::?\d{2})?)$", regex=True, case=False)
    if aware.any():
        out[text.index[aware]] = pd.to_datetime(text[aware], utc=True, errors="coerce", format="ISO8601")
    naive = text[~aware]
    if len(naive):
        parsed = pd.to_datetime(naive, errors="coerce", format="ISO8601")
        out[naive.index] = parsed.dt.tz_localize("UTC") if parsed.dt.tz is None else parsed
    return out.where((out >= _TS_MIN) & (out < _TS_MAX))


def _in_range_or_none(value):
    """A datetime inside [TS_MIN, TS_MAX), else None (pandas cannot hold it at ns)."""
    try:
        stamp = pd.Timestamp(value)
    except (ValueError, OverflowError):
        return None
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize("UTC")
    return stamp if _TS_MIN <= stamp < _TS_MAX else None


def _numbers(values: pd.Series) -> pd.Series:
    """Numbers (bools and text that is not a number become NaN)."""
    cleaned = values.map(lambda v: None if isinstance(v, bool) else v)
    return pd.to_numeric(cleaned.map(lambda v: v.strip() if isinstance(v, str) else v),
                         errors="coerce").astype(float)


def _optional_text(v) -> str | None:
    """An optional text field (``target``, ``host``): stripped, None when absent, NaN or blank."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or not str(v).strip():
        return None
    return str(v).strip()


def validate(cands: pd.DataFrame) -> Validated:
    """Split candidate rows (``CANDIDATE_COLUMNS``) into accepted and quarantined rows."""
    df = cands.reset_index(drop=True)
    for column in CANDIDATE_COLUMNS:
        if column not in df:
            df[column] = None
    n = len(df)
    reason = pd.Series([None] * n, dtype=object)
    detail = pd.Series([None] * n, dtype=object)

    def flag(mask: pd.Series, why: Reason, what) -> None:
        mask = mask.fillna(False).astype(bool) & reason.isna()
        if mask.any():
            reason[mask] = why.value
            detail[mask] = what[mask] if isinstance(what, pd.Series) else what

    preset = df["reason"].notna()
    reason[preset] = df["reason"][preset]
    detail[preset] = df["detail"][preset]

    def empty(column: str) -> pd.Series:
        return df[column].map(lambda v: v is None or (isinstance(v, float) and math.isnan(v))
                              or (isinstance(v, str) and not v.strip()))

    for column in ("job", "operator", "metric"):
        flag(empty(column), Reason.MISSING_FIELD, f"{column} is empty")
    for column in ("job", "operator", "target", "host"):
        length = df[column].map(lambda v: len(str(v).strip()) if v is not None else 0)
        flag(length > MAX_NAME_CHARS, Reason.BAD_NAME,
             f"{column} is longer than {MAX_NAME_CHARS} characters: " + length.astype(str) + " characters")
    flag(~df["job"].map(lambda v: v is None or job_fits_path(str(v).strip())), Reason.BAD_NAME,
         "job name too long to name a store directory once URL-quoted")
    metric = df["metric"].map(lambda v: str(v).strip() if v is not None else None)
    flag(~metric.isin(METRIC_NAMES), Reason.UNKNOWN_METRIC,
         "not in the metric vocabulary: " + metric.astype(str))

    ts = parse_timestamps(df["ts"])
    flag(ts.isna(), Reason.BAD_TIMESTAMP,
         f"not an ISO 8601 time or epoch seconds in [{TS_MIN}, {TS_MAX}): " + df["ts"].map(_text).astype(str))

    window = _numbers(df["window_s"].map(lambda v: DEFAULT_WINDOW_S if v is None else v))
    flag(~(np.isfinite(window) & (window > 0)), Reason.BAD_WINDOW,
         "window_s must be a positive number of seconds: " + df["window_s"].map(_text).astype(str))

    instance = _numbers(df["instance"])
    good_instance = np.isfinite(instance) & (instance >= 0) & (instance == np.floor(instance)) \
        & (instance < 2**31)
    flag(~good_instance, Reason.BAD_INSTANCE,
         "instance must be an integer >= 0: " + df["instance"].map(_text).astype(str))

    value = _numbers(df["value"])
    flag(~np.isfinite(value), Reason.NON_NUMERIC_VALUE,
         "value is not a finite number: " + df["value"].map(_text).astype(str))
    flag(value < 0, Reason.NEGATIVE_VALUE, "value is negative: " + value.astype(str))

    target = df["target"].map(_optional_text)
    flag(target.notna() & (metric != "records_out"), Reason.UNEXPECTED_TARGET,
         "only records_out may name a target: " + target.astype(str))

    # host: optional (None when absent or empty); not part of the row key
    host = df["host"].map(_optional_text)

    ok = reason.isna()
    typed = pd.DataFrame({
        "ts": ts[ok].dt.as_unit("us"),
        "window_s": window[ok],
        "job": df["job"][ok].map(lambda v: str(v).strip()),
        "operator": df["operator"][ok].map(lambda v: str(v).strip()),
        "instance": instance[ok].astype("int32"),
        "metric": metric[ok],
        "value": value[ok],
        "target": target[ok],
        "host": host[ok],
        "file": df["file"][ok],
        "line": df["line"][ok],
    })
    # Duplicate keys within the batch: conflicting ones go to quarantine, exact ones are merged.
    key = _key_frame(typed)
    groups = key.groupby(list(KEY_COLUMNS), dropna=False, sort=False)
    distinct = groups["_vw"].transform("nunique")
    conflict = distinct > 1
    if conflict.any():
        summary = groups["_vw"].transform(lambda s: ", ".join(sorted(set(s))))
        idx = typed.index[conflict.to_numpy()]
        reason[idx] = Reason.DUPLICATE_CONFLICT.value
        detail[idx] = ("same key, different values (value@window_s): " + summary[conflict]).to_numpy()
    clean = typed[~conflict.to_numpy()]
    dup = key[~conflict.to_numpy()].duplicated(subset=list(KEY_COLUMNS))
    duplicates = int(dup.sum())
    accepted = clean[~dup.to_numpy()].reset_index(drop=True)

    bad = reason.notna()
    quarantined = quarantine_frame(df[bad], reason[bad], detail[bad])
    return Validated(accepted[list(RAW_COLUMNS) + ["file", "line"]], quarantined, duplicates)


def _key_frame(typed: pd.DataFrame) -> pd.DataFrame:
    key = typed[list(KEY_COLUMNS)].copy()
    key["target"] = key["target"].fillna("\x00")
    key["_vw"] = pd.Series([f"{v!r}@{w!r}" for v, w in zip(typed["value"], typed["window_s"])],
                           index=typed.index, dtype=object)
    return key


def time_violations(rows: pd.DataFrame) -> pd.Series:
    """Boolean mask: rows of an instance-window whose busy + back-pressured + idle ms exceed
    the window (window_s x 1000 x (1 + TIME_TOLERANCE))."""
    timed = rows["metric"].isin(TIME_METRICS)
    if not timed.any():
        return pd.Series(False, index=rows.index)
    group = ["ts", "job", "operator", "instance"]
    sub = rows[timed]
    total = sub.groupby(group, sort=False)["value"].transform("sum")
    limit = sub["window_s"] * 1000.0 * (1.0 + TIME_TOLERANCE)
    over = total > limit
    mask = pd.Series(False, index=rows.index)
    mask[sub.index[over.to_numpy()]] = True
    return mask
