"""Load forecasting: quantile forecasts of a rate series, and rolling-origin backtests.

Model/result split as in statsmodels::

    result = Forecaster(method="auto").fit(series)        # series: timestamps -> rate
    fc = result.forecast(24, quantiles=(0.5, 0.9))         # Forecast (frozen dataclass)
    fc.quantiles[0.9]                                      # plan on the upper quantile
    result.update(longer_series).forecast(24)              # same parameters, newer origin

    bt = backtest(series, Forecaster(), horizon_steps=24, folds=50)
    bt.mase, bt.smape, bt.coverage, bt.baseline.mase

Methods (statsmodels underneath, all on log values): ``seasonal-naive`` (baseline),
``autoreg`` (AutoReg + Fourier seasonal terms), ``holt-winters`` (damped additive), ``theta``;
``auto`` chooses by rolling-origin validation on the history itself. See ``docs/forecast.md``.
Pure: values in, values out (no files, clocks or tracking here).
"""

from modeler.forecast.backtest import Backtest, Scores, backtest
from modeler.forecast.grid import RegularSeries, infer_step_s, regularize, resample
from modeler.forecast.methods import METHODS
from modeler.forecast.metrics import coverage, mase, seasonal_naive_scale, smape
from modeler.forecast.model import (
    AUTO,
    Forecast,
    Forecaster,
    ForecastResult,
    Seasonality,
    autocorrelation,
    detect_seasonality,
)

__all__ = [
    "AUTO", "METHODS", "Backtest", "Forecast", "ForecastResult", "Forecaster", "RegularSeries",
    "Scores", "Seasonality", "autocorrelation", "backtest", "coverage", "detect_seasonality",
    "infer_step_s", "mase", "regularize", "resample", "seasonal_naive_scale", "smape",
]
