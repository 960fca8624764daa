"""External load: a constant Poisson rate, a piecewise-constant rate function, or a real trace.

Rates are tuples/s of the whole job (split over sources by ``rate_share``, then evenly over a
source's instances, each instance an independent arrival process whose inter-arrival SCV is the
source's ``arrival_scv``: 1 = Poisson). A rate change re-times each pending arrival so the
process is exactly a (piecewise) time-changed renewal process.

**Traces** (``load_trace``): a CSV of counts per interval (``timestamp,value``; e.g. the bundled
real traces, ``experiments.bundled.trace(name)``). The interval is the median spacing of the timestamps; rows are binned onto a
regular grid of that interval starting at the first timestamp (``resample_s`` re-bins to another
interval), and missing intervals (no row, or an empty cell) are **linearly interpolated** and
counted in ``TraceLoad.filled`` (never dropped). A count per interval becomes a rate:
``value / interval_s`` tuples/s, then multiplied by ``scale`` or rescaled so the trace's maximum
in the replayed span is ``peak_rate``. **Time compression** ``speedup`` = X maps simulated time
t (s) to trace time ``start + X * t``: a day replays in 86400 / X simulated seconds at the
*same* rates, so utilizations, queueing and back pressure stay as in real time; only the
trace's shape is compressed (each interval lasts interval_s / X). The rate is constant within
an interval (a step function).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.testbed.errors import TestbedError
from modeler.errors import AuguryError


@dataclass(frozen=True)
class ConstantRate:
    """Poisson (or renewal) arrivals at ``rate`` tuples/s."""

    rate: float

    def __post_init__(self) -> None:
        if isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) \
                or not math.isfinite(self.rate) or self.rate < 0:
            raise TestbedError("must be a finite rate >= 0 tuples/s", field="rate", value=self.rate)

    def rate_at(self, t_s: float) -> float:
        return float(self.rate)

    def next_change_s(self, t_s: float) -> float:
        return math.inf

    @property
    def end_s(self) -> float:
        return math.inf

    def describe(self) -> str:
        return f"constant {self.rate:g} tuples/s"


@dataclass(frozen=True)
class PiecewiseRate:
    """A step function: ``rates[k]`` tuples/s from ``times_s[k]`` (s) on; ``times_s[0]`` = 0.

    After the last step the last rate holds; ``end_s`` (if given) is where the data ends.
    """

    times_s: tuple[float, ...]
    rates: tuple[float, ...]
    end_s: float = math.inf

    def __post_init__(self) -> None:
        if len(self.times_s) != len(self.rates) or not self.times_s:
            raise TestbedError("times_s and rates must be non-empty and of equal length",
                               field="rates", value=len(self.rates))
        if self.times_s[0] != 0:
            raise TestbedError("the first step must start at 0 s", field="times_s", value=self.times_s[0])
        if any(b <= a for a, b in zip(self.times_s, self.times_s[1:])):
            raise TestbedError("step times must increase", field="times_s", value=None)
        for k, r in enumerate(self.rates):
            if not math.isfinite(r) or r < 0:
                raise TestbedError("must be a finite rate >= 0 tuples/s", field=f"rates[{k}]", value=r)

    def rate_at(self, t_s: float) -> float:
        k = bisect.bisect_right(self.times_s, t_s) - 1
        return float(self.rates[max(k, 0)])

    def next_change_s(self, t_s: float) -> float:
        k = bisect.bisect_right(self.times_s, t_s)
        return float(self.times_s[k]) if k < len(self.times_s) else math.inf

    def describe(self) -> str:
        return f"piecewise, {len(self.rates)} steps"


@dataclass(frozen=True)
class TraceLoad(PiecewiseRate):
    """A trace replay (a ``PiecewiseRate``) with where it came from."""

    file: str = ""
    interval_s: float = 0.0
    """Trace interval (after resampling), trace seconds."""
    speedup: float = 1.0
    start: str = ""
    """Trace timestamp replayed at simulated time 0."""
    filled: int = 0
    """Missing intervals filled by linear interpolation."""
    factor: float = 1.0
    """Applied multiplier: rate = value / interval_s * factor."""

    def describe(self) -> str:
        return (f"trace {self.file} from {self.start}, interval {self.interval_s:g} s, "
                f"speedup {self.speedup:g}, x{self.factor:.6g}, {self.filled} gaps filled")


def load_trace(path: str | Path, *, speedup: float = 1.0, peak_rate: float | None = None,
               scale: float | None = None, start: str | None = None, duration_s: float | None = None,
               resample_s: float | None = None, time_col: str | None = None,
               value_col: str | None = None) -> TraceLoad:
    """Read a count-per-interval CSV into a replayable ``TraceLoad`` (see the module docstring).

    ``duration_s`` (simulated seconds) limits the replayed span (and the peak used by
    ``peak_rate``); it must fit in the trace after ``start``.
    """
    from history.series import load_series

    file = str(path)
    for name, value in (("speedup", speedup), ("peak_rate", peak_rate), ("scale", scale),
                        ("resample_s", resample_s), ("duration_s", duration_s)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value <= 0:
            raise TestbedError("must be a finite number > 0", file=file, field=name, value=value)
    if peak_rate is not None and scale is not None:
        raise TestbedError("give peak_rate or scale, not both", file=file, field="scale", value=scale)
    try:
        series = load_series(path, time_col=time_col, value_col=value_col)
    except TestbedError:
        raise
    except AuguryError as err:
        raise TestbedError(f"unreadable trace: {err.message}", file=file, field=err.field,
                           value=err.value) from None
    except OSError as err:
        raise TestbedError(f"unreadable trace: {err.strerror}", file=file) from None
    if len(series) < 2:
        raise TestbedError("a trace needs at least two rows", file=file, field="rows", value=len(series))
    if (series.dropna() < 0).any():
        bad = series[series < 0]
        raise TestbedError("negative count in trace", file=file, field=str(bad.index[0]),
                           value=float(bad.iloc[0]))
    diffs = np.diff(series.index.asi8) / 1e9
    interval = float(np.median(diffs))
    if interval <= 0:
        raise TestbedError("timestamps must increase", file=file, field="timestamp", value=None)
    first = series.index[0]
    step = pd.Timedelta(seconds=interval)
    binned = series.resample(step, origin=first).sum(min_count=1)
    if resample_s is not None:
        rstep = pd.Timedelta(seconds=resample_s)
        binned = binned.interpolate(method="time", limit_direction="both")
        binned = (binned.resample(rstep, origin=first).sum(min_count=1)
                  * 1.0)  # counts per new interval
        interval = float(resample_s)
    filled = int(binned.isna().sum())
    binned = binned.interpolate(method="time", limit_direction="both")
    rates = binned.to_numpy(dtype=float) / interval
    times = binned.index
    t0 = first
    if start is not None:
        try:
            t0 = pd.Timestamp(start)
        except (ValueError, TypeError):
            raise TestbedError("not a timestamp", file=file, field="start", value=start) from None
        if t0.tzinfo is not None:
            t0 = t0.tz_convert("UTC").tz_localize(None)
    trace_end = times[-1] + pd.Timedelta(seconds=interval)
    if not times[0] <= t0 < trace_end:
        raise TestbedError(f"outside the trace ({times[0]} .. {trace_end})", file=file,
                           field="start", value=str(start))
    k0 = int(np.searchsorted(times.asi8, t0.value, side="right") - 1)
    offset_trace_s = (t0 - times[k0]).total_seconds()
    span_trace_s = (trace_end - t0).total_seconds()
    if duration_s is not None and duration_s * speedup > span_trace_s + 1e-9:
        raise TestbedError(
            f"the trace holds {span_trace_s / speedup:g} simulated s after {t0} at speedup {speedup:g}",
            file=file, field="duration", value=duration_s)
    rates = rates[k0:]
    sim_times = [0.0] + [(k * interval - offset_trace_s) / speedup for k in range(1, len(rates))]
    used_end = len(rates) if duration_s is None else \
        min(len(rates), int(math.ceil((duration_s * speedup + offset_trace_s) / interval)))
    factor = 1.0 if scale is None else float(scale)
    if peak_rate is not None:
        peak = float(np.max(rates[:used_end]))
        if peak <= 0:
            raise TestbedError("the trace is all zero: cannot scale to a peak rate", file=file,
                               field="peak_rate", value=peak_rate)
        factor = peak_rate / peak
    return TraceLoad(
        times_s=tuple(sim_times), rates=tuple(float(r) * factor for r in rates),
        end_s=span_trace_s / speedup, file=file, interval_s=interval, speedup=float(speedup),
        start=str(t0), filled=filled, factor=factor,
    )


def as_load(load) -> ConstantRate | PiecewiseRate:
    """A number is a constant rate; loads pass through."""
    if isinstance(load, (ConstantRate, PiecewiseRate)):
        return load
    if isinstance(load, (int, float)) and not isinstance(load, bool):
        return ConstantRate(float(load))
    raise TestbedError("expected a rate (tuples/s), ConstantRate, PiecewiseRate or a trace",
                       field="load", value=type(load).__name__)
