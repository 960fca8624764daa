"""Forecast-driven sizing for the control loop: a ``LoadForecast`` from a rate history.

``HistoryLoadForecast(read_history, LoadForecastConfig())`` is the ``load_forecast`` that
``scheduler.loop.ControlLoop`` calls with the end of each metric window (epoch seconds). It fits a
``modeler.forecast.Forecaster`` on the history up to then, refits every ``refit_s`` and in
between conditions the fit on the newest history (``ForecastResult.update``, cheap), and answers
the highest ``quantile`` forecast from now until ``lookahead_s`` later: the load a change decided
now must carry once it is in place (the engine's restart time plus a margin). The loop sizes for
``max(offered, forecast)`` on its trusted path, so it scales up before a forecast rise and never
scales down below what the forecast needs.

``read_history()`` returns a ``pandas.Series`` of input rates (tuples/s) indexed by UTC
timestamps (naive or aware): ``store_history(store, job)`` reads the history store's
``source_rates`` (what arrived, summed over the job's sources, per window), ``series_history(path)``
a timestamp,value CSV of rates (as ``augury schedule --series`` reads). Times in s.

Assumptions: the history is on a regular grid (gaps are interpolated by the forecaster); with
less than ``min_history_s`` of it there is no forecast (``None``: the loop sizes for the offered
rate alone). A failing read or fit raises; the loop catches it, notes it in the decision's
reasons and sizes reactively.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from scheduler.errors import SchedulerError


@dataclass(frozen=True)
class LoadForecastConfig:
    """How the loop's load forecast is made."""

    quantile: float = 0.9
    """Forecast quantile the loop sizes for (0 < q < 1)."""
    lookahead_s: float = 600.0
    """The answer is the highest forecast over [now, now + lookahead_s] (s): a change's lead time
    (longer when the loop has measured a longer restart + settle time on the engine)."""
    refit_s: float = 3600.0
    """Refit the forecaster this often (s); in between, the fit is updated with new history."""
    method: str = "auto"
    """``modeler.forecast.Forecaster`` method."""
    min_history_s: float = 2 * 86400.0
    """No forecast from less history than this (s): a daily cycle needs a few days."""

    def check(self) -> None:
        if not (isinstance(self.quantile, (int, float)) and 0 < self.quantile < 1):
            raise SchedulerError("must lie strictly between 0 and 1", field="forecast.quantile",
                                 value=self.quantile)
        for name in ("lookahead_s", "refit_s", "min_history_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise SchedulerError("must be a finite number >= 0", field=f"forecast.{name}", value=v)


def _naive_utc(series: pd.Series) -> pd.Series:
    index = pd.DatetimeIndex(series.index)
    if index.tz is not None:
        index = index.tz_convert("UTC").tz_localize(None)
    return pd.Series(series.to_numpy(dtype=float), index=index).sort_index()


class HistoryLoadForecast:
    """``(now_s) -> highest forecast rate over the lookahead`` from ``read_history()``.

    Fitted state (for inspection): ``result_`` (the ``ForecastResult`` in use), ``fitted_at_s_``
    (when it was last refitted), ``fits_`` (how many fits so far).
    """

    def __init__(self, read_history: Callable[[], pd.Series],
                 config: LoadForecastConfig = LoadForecastConfig()) -> None:
        self.read_history = read_history
        self.config = config

    def __call__(self, now_s: float, lead_time_s: float | None = None) -> float | None:
        """The highest ``quantile`` forecast over [now, now + lookahead], the lookahead being
        ``lookahead_s`` or the loop's measured ``lead_time_s`` (restart + settle), whichever is
        longer."""
        from modeler.forecast import Forecaster

        c = self.config
        c.check()
        lookahead_s = max(c.lookahead_s, float(lead_time_s or 0.0))
        now = pd.Timestamp(float(now_s), unit="s")
        history = _naive_utc(self.read_history())
        history = history[history.index <= now]
        if len(history) < 3 or (history.index[-1] - history.index[0]).total_seconds() < c.min_history_s:
            return None
        fitted_at = getattr(self, "fitted_at_s_", None)
        if fitted_at is None or now_s - fitted_at >= c.refit_s:
            self.result_ = Forecaster(method=c.method, horizon_s=max(lookahead_s, 600.0)).fit(history)
            self.fitted_at_s_ = float(now_s)
            self.fits_ = getattr(self, "fits_", 0) + 1
        result = self.result_.update(history)
        steps = max(1, int(math.ceil((now - result.last_timestamp).total_seconds() + lookahead_s)
                           / result.step_s) + 1)
        fc = result.forecast(steps, quantiles=(c.quantile,))
        stamps = pd.DatetimeIndex(fc.timestamps)
        path = np.asarray(fc.quantiles[c.quantile], dtype=float)
        # The grid points covering [now, now + lookahead]: the step holding now and those after.
        keep = (stamps > now - pd.Timedelta(seconds=result.step_s)) & \
               (stamps <= now + pd.Timedelta(seconds=lookahead_s))
        window = path[keep] if keep.any() else path[:1]
        return float(np.max(window))


def store_history(store: str | Path, job: str) -> Callable[[], pd.Series]:
    """``read_history`` over the history store: the job's external input rate per window
    (``source_rates.arrival_rate`` summed over its sources), re-read on every call so that new
    summaries are picked up."""
    from history.store import MetricStore

    def read() -> pd.Series:
        rates = MetricStore(store).source_rates(job)
        if rates.empty:
            raise SchedulerError("the store has no source_rates for the job yet (run `augury history "
                                 "summarize`)", file=str(store), field="job", value=job)
        total = rates.groupby("window_start")["arrival_rate"].sum()
        return _naive_utc(total)

    return read


def series_history(path: str | Path, time_col: str | None = None,
                   value_col: str | None = None) -> Callable[[], pd.Series]:
    """``read_history`` over a timestamp,value CSV of input rates (tuples/s), re-read each call."""
    from history.series import load_series

    def read() -> pd.Series:
        return _naive_utc(load_series(str(path), time_col=time_col, value_col=value_col))

    return read
