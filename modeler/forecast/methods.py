"""The forecasting methods, on log values, with fixed-parameter forecasts from any origin.

Each method estimates its parameters with statsmodels on a training stretch of the log
series ``z`` and returns a fitted object whose ``paths(z, origins, horizon)`` gives the
``horizon``-step forecast (log scale) from every origin ``o`` in ``origins``, using the
observations ``z[:o]`` and the parameters fixed at fit time (statsmodels'
``append(refit=False)`` idea, vectorized over origins). That is what makes rolling-origin
selection, interval calibration and backtests cheap: one fit, then filter passes.

Positions index a regular grid; ``t_s`` holds each position's time in epoch seconds, so
seasonal phases (Fourier terms, seasonal states) follow the clock, not the array start.
The arrays given to ``paths`` must extend the arrays the method was fitted on (same grid,
same first position), which ``ForecastResult`` guarantees.

- ``seasonal-naive``: the value one season earlier (``m = 1``: the last value).
- ``autoreg``: ``z_t = c + sum_l a_l z_{t-l} + Fourier(t) b``: statsmodels ``AutoReg``
  with lags 1..p and the season lag, daily (and weekly, when present) Fourier terms as
  exogenous regressors.
- ``holt-winters``: additive damped-trend Holt-Winters (statsmodels
  ``ExponentialSmoothing``, heuristic initial states) with the primary season.
- ``theta``: the Theta method (statsmodels ``ThetaModel``, theta = 2) on the series
  deseasonalized by classical additive decomposition.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

DAY_S = 86400.0
WEEK_S = 7 * DAY_S

METHODS = ("seasonal-naive", "autoreg", "holt-winters", "theta")


@dataclass(frozen=True)
class MethodSpec:
    """What a method needs to know about the series besides its values."""

    season_steps: int
    """Primary season in samples (1 = none)."""
    weekly: bool
    """Whether a weekly cycle is modelled (Fourier terms in ``autoreg``)."""
    step_s: float
    """Grid step in seconds."""
    ar_order: int = 3
    """Short autoregressive lags 1..p of ``autoreg``."""
    daily_harmonics: int = 8
    """Daily Fourier harmonics of ``autoreg`` (capped by the Nyquist limit)."""
    weekly_harmonics: int = 4
    """Weekly Fourier harmonics of ``autoreg`` (when ``weekly``)."""


def min_history(method: str, spec: MethodSpec) -> int:
    """Fewest training samples a method accepts (two seasons for a seasonal method)."""
    m = spec.season_steps
    if method == "seasonal-naive":
        return max(2 * m, 2)
    if method == "autoreg":
        return max(2 * m, 2 * spec.ar_order + 20)
    if method == "holt-winters":
        return max(2 * m, 10)
    if method == "theta":
        return max(2 * m, 10)
    raise ValueError(method)


# ----------------------------------------------------------------------------- seasonal naive


class SeasonalNaiveFit:
    name = "seasonal-naive"

    def __init__(self, spec: MethodSpec, n_train: int) -> None:
        self.m = spec.season_steps
        self.n_train = n_train

    def paths(self, z: np.ndarray, t_s: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
        j = np.arange(horizon)
        lag = self.m * (j // self.m + 1)
        idx = origins[:, None] + j[None, :] - lag[None, :]
        return z[idx]


# ----------------------------------------------------------------------------- autoreg + Fourier


def fourier_terms(t_s: np.ndarray, spec: MethodSpec) -> np.ndarray:
    """sin/cos pairs of the daily (and weekly) cycle at epoch seconds ``t_s``."""
    cols = []
    periods = []
    if spec.season_steps > 1:
        periods.append((spec.season_steps * spec.step_s, spec.daily_harmonics, spec.season_steps))
    if spec.weekly:
        periods.append((WEEK_S, spec.weekly_harmonics, int(round(WEEK_S / spec.step_s))))
    for period_s, harmonics, samples in periods:
        k_max = min(harmonics, samples // 2 - (1 if samples % 2 == 0 else 0))
        phase = 2.0 * np.pi * np.mod(t_s, period_s) / period_s
        for k in range(1, k_max + 1):
            cols.append(np.sin(k * phase))
            cols.append(np.cos(k * phase))
    if not cols:
        return np.empty((len(t_s), 0))
    return np.column_stack(cols)


class AutoRegFit:
    name = "autoreg"

    def __init__(self, z: np.ndarray, t_s: np.ndarray, spec: MethodSpec) -> None:
        from statsmodels.tsa.ar_model import AutoReg

        self.spec = spec
        lags = list(range(1, spec.ar_order + 1))
        m = spec.season_steps
        if m > spec.ar_order and len(z) >= 3 * m:
            lags.append(m)
        exog = fourier_terms(t_s, spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = AutoReg(z, lags=lags, trend="c", exog=exog if exog.shape[1] else None).fit()
        params = dict(zip(res.model.exog_names, np.asarray(res.params)))
        self.const = params["const"]
        self.lags = np.array(lags)
        self.coefs = np.array([params[f"y.L{lag}"] for lag in lags])
        self.beta = np.array([params[f"x{i + 1}"] for i in range(exog.shape[1])])
        self.n_train = len(z)
        self._statsmodels_result = res

    def paths(self, z: np.ndarray, t_s: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
        step = self.spec.step_s
        n_o = len(origins)
        maxlag = int(self.lags.max())
        # buffer[:, i] holds z at position origin - maxlag + i, predictions appended
        base = origins[:, None] - maxlag + np.arange(maxlag)[None, :]
        buf = np.empty((n_o, maxlag + horizon))
        buf[:, :maxlag] = z[base]
        t_future = t_s[origins - 1][:, None] + step * (1 + np.arange(horizon))[None, :]
        if self.beta.size:
            season = fourier_terms(t_future.ravel(), self.spec) @ self.beta
            season = season.reshape(n_o, horizon)
        else:
            season = np.zeros((n_o, horizon))
        for j in range(horizon):
            pos = maxlag + j
            buf[:, pos] = self.const + season[:, j] + buf[:, pos - self.lags] @ self.coefs
        return buf[:, maxlag:]


# ----------------------------------------------------------------------------- Holt-Winters


class HoltWintersFit:
    name = "holt-winters"

    def __init__(self, z: np.ndarray, t_s: np.ndarray, spec: MethodSpec) -> None:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        m = spec.season_steps
        seasonal = m > 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ExponentialSmoothing(
                z, trend="add", damped_trend=True,
                seasonal="add" if seasonal else None,
                seasonal_periods=m if seasonal else None,
                initialization_method="heuristic" if len(z) >= max(2 * m, 10) + (m if seasonal else 0)
                else "estimated",
            ).fit(use_brute=False)
        p = res.params
        self.alpha = float(p["smoothing_level"])
        self.beta = float(p["smoothing_trend"])
        self.gamma = float(p["smoothing_seasonal"]) if seasonal else 0.0
        self.phi = float(p["damping_trend"])
        self.m = m if seasonal else 1
        init_season = np.asarray(p["initial_seasons"], float) if seasonal else np.zeros(1)
        self.n_train = len(z)
        self._statsmodels_result = res
        # states after each position: level[i], trend[i], season[i] (season[i] = s at pos i)
        self._level0 = float(p["initial_level"])
        self._trend0 = float(p["initial_trend"])
        self._season0 = init_season
        self._state_cache: tuple | None = None

    def _filter(self, z: np.ndarray, upto: int):
        """Level, trend and season after observing each position < ``upto``.

        Returns arrays indexed by position (season has ``m`` extra leading initial states).
        """
        cached = self._state_cache
        if cached is not None and cached[0] >= upto and (
                cached[4] is z or np.array_equal(cached[4][:upto], z[:upto])):
            return cached[1], cached[2], cached[3]
        a, b, g, phi, m = self.alpha, self.beta, self.gamma, self.phi, self.m
        lev = np.empty(upto)
        tr = np.empty(upto)
        se = np.empty(upto + m)
        se[:m] = self._season0
        l_prev, b_prev = self._level0, self._trend0
        zz = z[:upto].tolist()
        for i in range(upto):
            s_old = se[i]
            y = zz[i]
            lb = l_prev + phi * b_prev
            l_new = a * (y - s_old) + (1.0 - a) * lb
            b_new = b * (l_new - l_prev) + (1.0 - b) * phi * b_prev
            se[i + m] = g * (y - lb) + (1.0 - g) * s_old
            lev[i], tr[i] = l_new, b_new
            l_prev, b_prev = l_new, b_new
        self._state_cache = (upto, lev, tr, se, z)
        return lev, tr, se

    def paths(self, z: np.ndarray, t_s: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
        lev, tr, se = self._filter(z, int(origins.max()))
        last = origins - 1
        h = np.arange(1, horizon + 1)
        damp = np.cumsum(self.phi ** h)
        m = self.m
        # the season for position last + h is the state written m positions earlier
        k = (h - 1) // m + 1
        season_pos = last[:, None] + h[None, :] - m * k[None, :] + m
        out = lev[last][:, None] + damp[None, :] * tr[last][:, None]
        if m > 1:
            out = out + se[season_pos]
        return out


# ----------------------------------------------------------------------------- Theta


class ThetaFit:
    name = "theta"

    def __init__(self, z: np.ndarray, t_s: np.ndarray, spec: MethodSpec) -> None:
        from statsmodels.tsa.forecasting.theta import ThetaModel
        from statsmodels.tsa.seasonal import seasonal_decompose

        m = spec.season_steps
        self.m = m
        if m > 1:
            dec = seasonal_decompose(z, model="additive", period=m)
            self.season = np.asarray(dec.seasonal[:m], float)  # by position mod m
        else:
            self.season = np.zeros(1)
        x = z - self._season_at(np.arange(len(z)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ThetaModel(x, deseasonalize=False).fit()
        self.b0 = float(res.params["b0"])
        self.alpha = float(res.params["alpha"])
        self.level0 = float(x[0])
        self.n_train = len(z)
        self._statsmodels_result = res

    def _season_at(self, pos: np.ndarray) -> np.ndarray:
        if self.m <= 1:
            return np.zeros(np.shape(pos))
        return self.season[np.mod(pos, self.m)]

    def paths(self, z: np.ndarray, t_s: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
        upto = int(origins.max())
        x = z[:upto] - self._season_at(np.arange(upto))
        a = self.alpha
        # SES level after each observation: l_i = a x_i + (1-a) l_{i-1}, l_{-1} = x_0
        level, _ = lfilter([a], [1.0, -(1.0 - a)], x, zi=[(1.0 - a) * self.level0])
        last = origins - 1
        nobs = origins.astype(float)
        h = np.arange(horizon, dtype=float)[None, :]
        if a > 0:
            h = h + 1.0 / a - ((1.0 - a) ** nobs[:, None]) / a
        trend = 0.5 * self.b0 * h
        pos = origins[:, None] + np.arange(horizon)[None, :]
        return level[last][:, None] + trend + self._season_at(pos)


def fit_method(method: str, z: np.ndarray, t_s: np.ndarray, spec: MethodSpec):
    """Estimate ``method`` on the log series ``z`` (times ``t_s``, epoch seconds)."""
    if method == "seasonal-naive":
        return SeasonalNaiveFit(spec, len(z))
    if method == "autoreg":
        return AutoRegFit(z, t_s, spec)
    if method == "holt-winters":
        return HoltWintersFit(z, t_s, spec)
    if method == "theta":
        return ThetaFit(z, t_s, spec)
    raise ValueError(f"unknown method {method!r}")
