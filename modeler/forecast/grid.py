"""Putting a rate series onto a regular time grid, without silently losing anything.

A series arrives as a ``pandas.Series`` indexed by timestamps (``DatetimeIndex``).
``regularize`` infers the sampling step (the smallest common gap between consecutive
timestamps), reindexes onto the full regular grid from the first to the last
timestamp and reports how many grid points had no observation. Missing points stay
``NaN`` in ``RegularSeries.values``; ``RegularSeries.filled()`` interpolates them
linearly (in time) for fitting. ``resample`` aggregates a series to a coarser step
(mean per bucket, so a rate stays a rate). Units: steps in seconds; values are
whatever the series holds (tuples/s for source rates).

Pure: values in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from modeler.errors import ForecastError


@dataclass(frozen=True)
class RegularSeries:
    """A series on a regular grid (missing points are ``NaN``)."""

    values: pd.Series
    """The series reindexed onto the grid; ``NaN`` where nothing was observed."""
    step_s: float
    """Grid step in seconds."""
    n_missing: int
    """Number of grid points with no observation (missing rows or ``NaN`` values)."""

    @property
    def missing_mask(self) -> np.ndarray:
        return self.values.isna().to_numpy()

    def filled(self) -> pd.Series:
        """Missing points interpolated linearly in time (ends: nearest observation)."""
        if self.n_missing == 0:
            return self.values
        return self.values.interpolate(method="time").ffill().bfill()


def _as_series(series: pd.Series, name: str) -> pd.Series:
    if not isinstance(series, pd.Series):
        raise ForecastError("expected a pandas Series indexed by timestamps", field=name,
                            value=type(series).__name__)
    if not isinstance(series.index, pd.DatetimeIndex):
        raise ForecastError("the series must be indexed by timestamps (DatetimeIndex)",
                            field=name, value=type(series.index).__name__)
    if series.index.tz is not None:
        series = series.tz_convert("UTC").tz_localize(None)
    try:
        values = pd.to_numeric(series, errors="raise").astype(float)
    except (TypeError, ValueError) as err:
        raise ForecastError(f"values must be numeric ({err})", field=name) from None
    finite = values.dropna()
    if np.isinf(finite.to_numpy()).any():
        bad = finite[np.isinf(finite.to_numpy())]
        raise ForecastError("values must be finite", field=f"{name}[{bad.index[0]}]",
                            value=float(bad.iloc[0]))
    if (finite < 0).any():
        bad = finite[finite < 0]
        raise ForecastError("rates cannot be negative", field=f"{name}[{bad.index[0]}]",
                            value=float(bad.iloc[0]))
    return values


def infer_step_s(index: pd.DatetimeIndex) -> float:
    """The sampling step in seconds: the smallest gap between consecutive timestamps that
    makes up at least 10 % of all gaps (so missing rows, which make multiples of the step,
    and a rare jittered timestamp do not mislead it)."""
    if len(index) < 2:
        raise ForecastError("need at least two timestamps to infer the sampling step",
                            field="index", value=len(index))
    diffs = np.diff(index.sort_values().asi8) / 1e9
    diffs = diffs[diffs > 0]
    if diffs.size == 0:
        raise ForecastError("all timestamps are equal", field="index", value=str(index[0]))
    values, counts = np.unique(np.round(diffs, 6), return_counts=True)
    # the smallest gap that is common (>= 10 % of gaps): gaps are multiples of the step
    common = values[counts >= max(1, 0.1 * counts.sum())]
    return float(common.min()) if common.size else float(values[np.argmax(counts)])


def regularize(series: pd.Series, step_s: float | None = None, name: str = "series") -> RegularSeries:
    """Reindex ``series`` onto a regular grid of ``step_s`` seconds (inferred when ``None``).

    The grid starts at the first timestamp. Each observation goes to the nearest grid
    point; an observation more than a quarter step off the grid, or two observations on
    the same grid point, is an error (aggregate with ``resample`` first). Grid points
    without an observation are ``NaN`` and counted in ``n_missing``.
    """
    values = _as_series(series, name)
    values = values.sort_index()
    dup = values.index.duplicated()
    if dup.any():
        raise ForecastError("duplicate timestamp", field=f"{name}.index",
                            value=str(values.index[dup][0]))
    if step_s is None:
        step_s = infer_step_s(values.index)
    if not (step_s > 0):
        raise ForecastError("the step must be positive", field="step_s", value=step_s)
    t0 = values.index[0]
    offset = (values.index.asi8 - t0.value) / (step_s * 1e9)
    pos = np.rint(offset).astype(np.int64)
    off = np.abs(offset - pos) > 0.25
    if off.any():
        raise ForecastError(f"timestamp is not on the {step_s:g} s grid starting at {t0}; "
                            "resample the series first", field=f"{name}.index",
                            value=str(values.index[off][0]))
    clash = np.diff(pos) == 0
    if clash.any():
        raise ForecastError(f"two timestamps fall on the same {step_s:g} s grid point",
                            field=f"{name}.index", value=str(values.index[1:][clash][0]))
    n = int(pos[-1]) + 1
    grid = pd.date_range(t0, periods=n, freq=pd.Timedelta(seconds=step_s))
    out = np.full(n, np.nan)
    out[pos] = values.to_numpy()
    regular = pd.Series(out, index=grid, name=series.name)
    return RegularSeries(values=regular, step_s=float(step_s), n_missing=int(np.isnan(out).sum()))


def resample(series: pd.Series, step_s: float, name: str = "series") -> pd.Series:
    """Mean per bucket of ``step_s`` seconds (buckets with no observation are dropped here,
    and show up as missing points when the result is regularized)."""
    values = _as_series(series, name).sort_index()
    if not (step_s > 0):
        raise ForecastError("the step must be positive", field="step_s", value=step_s)
    out = values.resample(pd.Timedelta(seconds=step_s)).mean()
    return out.dropna()
