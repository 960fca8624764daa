"""Reading a rate series (timestamps -> value) from a CSV file into a ``pandas.Series``.

``load_series(path, time_col=None, value_col=None)``: the time column defaults to the first
column whose name looks like time (``timestamp``, ``time``, ``ts``, ``period``, ``date``,
``datetime``), else the first column; the value column defaults to the only other column
(or the one named ``value``, ``count``, ``rate``). Timestamps must all parse; values must all
be numeric (empty cells are allowed and stay ``NaN``: a missing observation). Every problem
raises ``HistoryError`` naming the file, the column and the offending value (with its row).

The series is returned sorted by time; timezone-aware timestamps are converted to UTC and
made naive (naive ones mixed with aware ones are read as UTC). No reindexing or gap filling happens here (``modeler.forecast.regularize``
does that and reports the gaps).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd

from modeler.errors import AuguryError

try:  # the history package owns its error types; fall back until they exist
    from history.errors import HistoryError  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the history package's progress
    class HistoryError(AuguryError):  # type: ignore[no-redef]
        """A history input (file, row, field) is invalid."""

_TIME_NAMES = ("timestamp", "time", "ts", "period", "date", "datetime")
_VALUE_NAMES = ("value", "count", "rate", "values")


def load_series(path: str | Path, time_col: str | None = None,
                value_col: str | None = None) -> pd.Series:
    """The CSV at ``path`` as a ``Series`` of floats indexed by timestamps."""
    path = Path(path)
    file = str(path)
    if not path.is_file():
        raise HistoryError("no such file", file=file)
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise HistoryError(f"not a readable CSV file ({str(err).splitlines()[0]})", file=file) from None
    columns = list(frame.columns)
    if len(columns) < 2 and (time_col is None or value_col is None):
        raise HistoryError("expected at least two columns (time, value)", file=file,
                           field="columns", value=",".join(columns))
    lower = {c.strip().lower(): c for c in columns}
    if time_col is None:
        time_col = next((lower[n] for n in _TIME_NAMES if n in lower), columns[0])
    elif time_col not in columns:
        raise HistoryError(f"no such column (columns: {', '.join(columns)})", file=file,
                           field="--time-col", value=time_col)
    if value_col is None:
        others = [c for c in columns if c != time_col]
        named = [lower[n] for n in _VALUE_NAMES if n in lower and lower[n] != time_col]
        if named:
            value_col = named[0]
        elif len(others) == 1:
            value_col = others[0]
        else:
            raise HistoryError(f"several value columns ({', '.join(others)}); choose one",
                               file=file, field="--value-col", value=None)
    elif value_col not in columns:
        raise HistoryError(f"no such column (columns: {', '.join(columns)})", file=file,
                           field="--value-col", value=value_col)
    if frame.empty:
        raise HistoryError("the file has no rows", file=file)

    raw_t = frame[time_col].str.strip()
    with warnings.catch_warnings():  # pandas' "Could not infer format", "mixed time zones": handled here
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
        times = pd.to_datetime(raw_t, errors="coerce")
        if times.isna().any():  # one format inferred from the first row did not fit all rows
            times = pd.to_datetime(raw_t, errors="coerce", format="mixed")
        if not pd.api.types.is_datetime64_any_dtype(times):  # naive and aware mixed: naive ones are UTC
            times = pd.to_datetime(raw_t, errors="coerce", format="mixed", utc=True)
    bad = times.isna()
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        raise HistoryError(f"unparseable timestamp (row {row + 2})", file=file,
                           field=time_col, value=raw_t.iloc[row])
    if getattr(times.dt, "tz", None) is not None:
        times = times.dt.tz_convert("UTC").dt.tz_localize(None)

    raw_v = frame[value_col].str.strip()
    values = pd.to_numeric(raw_v.replace("", None), errors="coerce")
    bad = values.isna() & (raw_v != "") & ~raw_v.str.lower().isin(["nan", "na", "null"])
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        raise HistoryError(f"not a number (row {row + 2})", file=file, field=value_col,
                           value=raw_v.iloc[row])
    series = pd.Series(values.to_numpy(dtype=float), index=pd.DatetimeIndex(times), name=value_col)
    series.index.name = time_col
    return series.sort_index(kind="stable")
