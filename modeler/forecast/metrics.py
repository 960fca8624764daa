"""Forecast error measures: MASE, sMAPE and quantile coverage.

- ``mase = mean(|actual - forecast|) / scale`` where ``scale`` is the in-sample mean absolute
  error of the seasonal naive forecast with lag ``m`` on the training history
  (``seasonal_naive_scale``): below 1 beats a one-season-ago forecast made in sample.
- ``smape = mean(200 * |actual - forecast| / (|actual| + |forecast|))`` in percent (0 to 200);
  a point where both are zero contributes 0.
- ``coverage = mean(actual <= quantile_forecast)``: for a calibrated quantile ``q`` it is ``q``.

Points where either side is ``NaN`` (a missing actual, for instance) are left out.
"""

from __future__ import annotations

import numpy as np


def _pair(actual, forecast) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(actual, float).ravel()
    f = np.asarray(forecast, float).ravel()
    if a.shape != f.shape:
        raise ValueError(f"actual and forecast differ in length: {a.size} != {f.size}")
    ok = ~(np.isnan(a) | np.isnan(f))
    return a[ok], f[ok]


def seasonal_naive_scale(history, m: int) -> float:
    """Mean |y_t - y_{t-m}| over the history (pairs with a ``NaN`` are skipped)."""
    y = np.asarray(history, float).ravel()
    if m < 1 or y.size <= m:
        return float("nan")
    d = np.abs(y[m:] - y[:-m])
    d = d[~np.isnan(d)]
    return float(d.mean()) if d.size else float("nan")


def mase(actual, forecast, scale: float) -> float:
    a, f = _pair(actual, forecast)
    if a.size == 0 or not (scale > 0):
        return float("nan")
    return float(np.mean(np.abs(a - f)) / scale)


def smape(actual, forecast) -> float:
    a, f = _pair(actual, forecast)
    if a.size == 0:
        return float("nan")
    den = np.abs(a) + np.abs(f)
    num = 200.0 * np.abs(a - f)
    terms = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    return float(terms.mean())


def coverage(actual, quantile_forecast) -> float:
    a, f = _pair(actual, quantile_forecast)
    if a.size == 0:
        return float("nan")
    return float(np.mean(a <= f))
