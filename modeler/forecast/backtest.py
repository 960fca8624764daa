"""Rolling-origin backtests of a ``Forecaster`` against the seasonal-naive baseline.

``folds`` forecast origins, ``stride_steps`` apart (default: the horizon, so the scored
windows do not overlap), end at the last point that still leaves a full horizon. At the
first origin the forecaster is fitted on everything before it (``auto`` chooses its method
there, from that history only); it is refitted at the first origin at least
``refit_every_s`` after the previous fit, and in between forecasts from each origin with
its parameters fixed and the data up to the origin (``ForecastResult.update``). Nothing after
an origin is ever used for the forecast from that origin.

The baseline is the seasonal naive forecast with the primary season the forecaster found
(``Backtest.season_steps``; the daily period when a daily cycle is detected), with quantiles
calibrated the same way. MASE is scaled by the in-sample mean absolute error of that
seasonal naive forecast over the history before the first origin. Missing actuals are not
scored.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import pandas as pd

from modeler.errors import ForecastError
from modeler.forecast.grid import RegularSeries, regularize
from modeler.forecast.methods import DAY_S
from modeler.forecast.metrics import coverage, mase, seasonal_naive_scale, smape
from modeler.forecast.model import Forecaster, ForecastResult, _validate_quantiles


@dataclass(frozen=True)
class Scores:
    """Accuracy of one forecaster over all backtest folds."""

    method: str
    """Method used (for ``auto``: the methods chosen, with how many fits chose each)."""
    mase: float
    """Mean absolute error / in-sample seasonal-naive MAE (lag ``Backtest.season_steps``)."""
    smape: float
    """Symmetric MAPE in percent (0-200)."""
    coverage: dict
    """{quantile: fraction of actuals at or below the quantile forecast}."""


@dataclass(frozen=True)
class Backtest:
    """A rolling-origin backtest: the forecaster's scores and the baseline's."""

    method: str
    """See ``Scores.method``."""
    mase: float
    """See ``Scores.mase``."""
    smape: float
    """See ``Scores.smape``."""
    coverage: dict
    """See ``Scores.coverage``."""
    baseline: Scores
    """Seasonal naive (lag ``season_steps``) with calibrated quantiles."""
    horizon_steps: int
    """Steps forecast from each origin."""
    folds: int
    """Number of origins."""
    stride_steps: int
    """Steps between origins."""
    step_s: float
    """Grid step in seconds."""
    season_steps: int
    """Season (samples) of the baseline and of the MASE scale."""
    mase_scale: float
    """The MASE denominator (series units)."""
    n_points: int
    """Forecast points scored (missing actuals excluded)."""
    n_missing: int
    """Grid points of the whole series with no observation (interpolated for fitting)."""
    n_fits: int
    """How many times the forecaster was (re)fitted."""
    first_origin: pd.Timestamp
    """Time of the first forecast point of the first fold."""
    last_origin: pd.Timestamp
    """Time of the first forecast point of the last fold."""
    forecasts: pd.DataFrame = field(repr=False)
    """One row per scored point: origin, timestamp, step, actual, point, baseline, q<...>."""

    def as_dict(self) -> dict:
        return {
            "method": self.method, "mase": self.mase, "smape": self.smape,
            "coverage": {str(q): v for q, v in self.coverage.items()},
            "baseline": {"method": self.baseline.method, "mase": self.baseline.mase,
                         "smape": self.baseline.smape,
                         "coverage": {str(q): v for q, v in self.baseline.coverage.items()}},
            "horizon_steps": self.horizon_steps, "folds": self.folds,
            "stride_steps": self.stride_steps, "step_s": self.step_s,
            "season_steps": self.season_steps, "mase_scale": self.mase_scale,
            "n_points": self.n_points, "n_missing": self.n_missing, "n_fits": self.n_fits,
            "first_origin": str(self.first_origin), "last_origin": str(self.last_origin),
        }


def _prefix(reg: RegularSeries, end: int) -> RegularSeries:
    values = reg.values.iloc[:end]
    return RegularSeries(values=values, step_s=reg.step_s, n_missing=int(values.isna().sum()))


def _run(result: ForecastResult, reg: RegularSeries, origins: np.ndarray, horizon: int,
         quantiles: tuple[float, ...]):
    upto = int(origins.max())
    updated = result.update(reg.values.iloc[:upto])
    start = int(round((updated._t0 - reg.values.index[0]) / pd.Timedelta(seconds=reg.step_s)))
    return updated._paths(origins - start, horizon, quantiles)


def backtest(series: pd.Series | RegularSeries, forecaster: Forecaster | None = None,
             horizon_steps: int | None = None, folds: int = 50, stride_steps: int | None = None,
             refit_every_s: float | None = DAY_S,
             quantiles: Sequence[float] = (0.5, 0.9)) -> Backtest:
    """Rolling-origin backtest of ``forecaster`` (default ``Forecaster()``) on ``series``.

    ``horizon_steps`` defaults to the forecaster's ``horizon_s``; ``refit_every_s=None``
    fits once, at the first origin.
    """
    forecaster = forecaster or Forecaster()
    reg = series if isinstance(series, RegularSeries) else regularize(series)
    step = reg.step_s
    if horizon_steps is None:
        horizon_steps = max(1, int(math.ceil(forecaster.horizon_s / step - 1e-9)))
    horizon = int(horizon_steps)
    if horizon < 1:
        raise ForecastError("the horizon must be a positive number of steps",
                            field="horizon_steps", value=horizon_steps)
    if int(folds) != folds or folds < 1:
        raise ForecastError("folds must be a positive integer", field="folds", value=folds)
    stride = horizon if stride_steps is None else int(stride_steps)
    if stride < 1:
        raise ForecastError("the stride must be a positive number of steps",
                            field="stride_steps", value=stride_steps)
    qs = _validate_quantiles(quantiles)
    # the forecaster validates on horizon_s; make it match the backtest's horizon
    forecaster = replace(forecaster, horizon_s=horizon * step)
    n = len(reg.values)
    origins = n - horizon - stride * np.arange(folds - 1, -1, -1)
    if origins[0] < 2:
        raise ForecastError(
            f"the series is too short for {folds} folds of {horizon} steps, {stride} apart "
            f"({n} samples)", field="folds", value=folds)

    refit_steps = None if refit_every_s is None else max(1, int(round(refit_every_s / step)))
    blocks: list[list[int]] = []
    for o in origins:
        if not blocks or (refit_steps is not None and o - blocks[-1][0] >= refit_steps):
            blocks.append([int(o)])
        else:
            blocks[-1].append(int(o))

    y = reg.values.to_numpy()
    rows = []
    chosen: Counter = Counter()
    season = None
    for block in blocks:
        history = _prefix(reg, block[0])
        try:
            result = forecaster.fit(history)
        except ForecastError as err:
            raise ForecastError(f"at the backtest origin {reg.values.index[block[0]]}: {err.message}",
                                field=err.field, value=err.value) from None
        if season is None:
            season = result.seasonality.season_steps
        base = Forecaster(method="seasonal-naive", season_length=season, weekly=False,
                          horizon_s=forecaster.horizon_s, validation_s=forecaster.validation_s,
                          min_validation_origins=forecaster.min_validation_origins,
                          fit_window_s=forecaster.fit_window_s, log_offset=result.log_offset)
        base_result = base.fit(history)
        chosen[result.method] += 1
        o = np.array(block)
        point, qv = _run(result, reg, o, horizon, qs)
        bpoint, bqv = _run(base_result, reg, o, horizon, qs)
        for i, origin in enumerate(block):
            for j in range(horizon):
                row = {"origin": reg.values.index[origin], "timestamp": reg.values.index[origin + j],
                       "step": j + 1, "actual": y[origin + j], "point": point[i, j],
                       "baseline": bpoint[i, j], "method": result.method}
                for q in qs:
                    row[f"q{q:g}"] = qv[q][i, j]
                    row[f"baseline_q{q:g}"] = bqv[q][i, j]
                rows.append(row)
    frame = pd.DataFrame(rows)
    scored = frame[frame["actual"].notna()]
    scale = seasonal_naive_scale(y[: origins[0]], season)
    if not (scale > 0):
        raise ForecastError(f"the seasonal naive error (lag {season}) of the history is zero; "
                            "MASE is undefined", field="series", value=scale)
    method = (next(iter(chosen)) if len(chosen) == 1
              else ", ".join(f"{k} x{v}" for k, v in chosen.most_common()))
    a = scored["actual"].to_numpy()
    baseline = Scores(
        method="seasonal-naive", mase=mase(a, scored["baseline"], scale),
        smape=smape(a, scored["baseline"]),
        coverage={q: coverage(a, scored[f"baseline_q{q:g}"]) for q in qs})
    return Backtest(
        method=method, mase=mase(a, scored["point"], scale), smape=smape(a, scored["point"]),
        coverage={q: coverage(a, scored[f"q{q:g}"]) for q in qs}, baseline=baseline,
        horizon_steps=horizon, folds=int(folds), stride_steps=stride, step_s=step,
        season_steps=int(season), mase_scale=float(scale), n_points=int(len(scored)),
        n_missing=reg.n_missing, n_fits=len(blocks),
        first_origin=reg.values.index[origins[0]], last_origin=reg.values.index[origins[-1]],
        forecasts=frame)
