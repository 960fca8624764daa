"""``Forecaster`` (the model: configuration) -> ``ForecastResult`` (fitted) -> ``Forecast``.

Everything happens on log values ``z = log(y + c)`` (``c``: ``log_offset``, by default 1 %
of the median positive value, so zeros are allowed). Point forecasts and quantiles are
transformed back, so they are never negative.

Fitting (``Forecaster.fit``):

1. The series is put on its regular grid (``regularize``); missing points are interpolated
   for fitting and counted (``ForecastResult.n_missing``). At most ``fit_window_s`` of the
   most recent history is used.
2. Seasonality: the daily period ``m = 1 day / step``. Unless ``season_length`` is given,
   the daily cycle is kept when the autocorrelation of ``z`` at lag ``m`` reaches
   ``acf_threshold``, and a weekly cycle is added (Fourier terms in ``autoreg``) when the
   history covers two weeks and the autocorrelation at one week reaches the threshold too.
   Detection needs two days of history; a seasonal method needs two seasons. Too little
   history raises ``ForecastError`` naming the minimum.
3. Validation (rolling origin on the history itself): the last ``validation_s`` are held
   out; each candidate method is fitted on what precedes them and forecasts
   ``horizon_s`` ahead from *every* grid point of the held-out stretch with its
   parameters fixed. ``auto`` picks the candidate with the lowest MASE there.
4. The chosen method is refitted on the whole history.

Quantiles (``ForecastResult.forecast``): for horizon step ``h`` and quantile ``q``,
``exp(zhat_h + Q_h(q)) - c`` where ``Q_h(q)`` is the empirical ``q``-quantile of the
held-out log residuals at step ``h`` (a split-conformal interval, one per step). The point
forecast is the back-transformed ``zhat_h`` plus the held-out median residual at step
``h`` (so it is a median forecast), unless ``median_correction`` is off; the seasonal
naive point forecast is never corrected (it stays the value one season earlier).

Pure: values in, values out. Units: times in seconds, rates as given.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import pandas as pd

from modeler.errors import ForecastError
from modeler.forecast.grid import RegularSeries, regularize
from modeler.forecast.methods import DAY_S, METHODS, WEEK_S, MethodSpec, fit_method, min_history
from modeler.forecast.metrics import seasonal_naive_scale

AUTO = "auto"


def single_threaded_blas():
    """The regressions here are small (thousands x tens): a multi-threaded BLAS only adds
    contention (20x slower SVDs on a busy 2-core machine), so fits run single-threaded."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


@dataclass(frozen=True)
class Seasonality:
    """The seasonal structure found in (or given for) a series."""

    season_steps: int
    """Primary season in samples (1 = none)."""
    weekly: bool
    """Whether a weekly cycle is modelled on top."""
    daily_steps: int
    """Samples per day at this step."""
    acf_daily: float
    """Autocorrelation of the log series at one day (``nan`` when not measured)."""
    acf_weekly: float
    """Autocorrelation of the log series at one week (``nan`` when not measured)."""
    detected: bool
    """True when found from the data, False when given."""


def autocorrelation(z: np.ndarray, lag: int) -> float:
    """Sample autocorrelation (overall mean, full-series variance) at ``lag``."""
    z = np.asarray(z, float)
    if lag <= 0 or lag >= len(z):
        return float("nan")
    d = z - z.mean()
    den = float(np.dot(d, d))
    if den == 0:
        return float("nan")
    return float(np.dot(d[lag:], d[:-lag]) / den)


def detect_seasonality(z: np.ndarray, step_s: float, threshold: float = 0.3) -> Seasonality:
    """Daily cycle if the lag-one-day autocorrelation of ``z`` >= ``threshold``; weekly
    on top when two weeks are covered and the lag-one-week autocorrelation >= threshold."""
    daily = max(1, int(round(DAY_S / step_s)))
    weekly_lag = max(1, int(round(WEEK_S / step_s)))
    acf_d = autocorrelation(z, daily) if len(z) >= 2 * daily and daily > 1 else float("nan")
    acf_w = autocorrelation(z, weekly_lag) if len(z) >= 2 * weekly_lag and weekly_lag > 1 else float("nan")
    has_daily = bool(acf_d >= threshold)
    has_weekly = bool(acf_w >= threshold)
    if has_daily:
        season = daily
    elif has_weekly:
        season = weekly_lag
    else:
        season = 1
    return Seasonality(season_steps=season, weekly=has_weekly and season == daily,
                       daily_steps=daily, acf_daily=acf_d, acf_weekly=acf_w, detected=True)


@dataclass(frozen=True)
class Forecast:
    """A forecast over a horizon: one row per future grid point."""

    timestamps: pd.DatetimeIndex
    """The forecast grid points (the step after the last observation onwards)."""
    point: np.ndarray
    """Point (median) forecast, in the series' units."""
    quantiles: pd.DataFrame
    """One column per requested quantile (column name = the quantile as a float),
    indexed by ``timestamps``."""
    method: str
    """The method that produced it."""
    step_s: float
    """Grid step in seconds."""

    def to_frame(self) -> pd.DataFrame:
        """``timestamp`` index, ``point`` and one ``q<quantile>`` column per quantile."""
        frame = pd.DataFrame({"point": self.point}, index=self.timestamps)
        for q in self.quantiles.columns:
            frame[f"q{q:g}"] = self.quantiles[q].to_numpy()
        frame.index.name = "timestamp"
        return frame


def _validate_quantiles(quantiles: Sequence[float]) -> tuple[float, ...]:
    out = []
    for q in quantiles:
        try:
            qf = float(q)
        except (TypeError, ValueError):
            raise ForecastError("a quantile must be a number in (0, 1)", field="quantiles", value=q) from None
        if not (0.0 < qf < 1.0):
            raise ForecastError("a quantile must lie strictly between 0 and 1", field="quantiles", value=q)
        out.append(qf)
    return tuple(out)


@dataclass(frozen=True)
class ForecastResult:
    """A fitted forecaster: forecasts from the end of its series (``forecast``), or from the
    end of a longer series with the same parameters (``update``)."""

    method: str
    """The method fitted (chosen by validation when the forecaster's method is ``auto``)."""
    step_s: float
    """Grid step in seconds."""
    seasonality: Seasonality
    """Seasonal structure used."""
    n_obs: int
    """Grid points used for fitting (after ``fit_window_s``)."""
    n_missing: int
    """Of those, points with no observation (interpolated for fitting)."""
    log_offset: float
    """``c`` in ``z = log(y + c)``."""
    last_timestamp: pd.Timestamp
    """The last grid point of the history; the forecast starts one step later."""
    selection: dict
    """Validation MASE of each candidate (``None`` when it could not be fitted); the key
    ``method`` was chosen."""
    validation_origins: int
    """Number of rolling origins in the validation stretch (residuals per horizon step)."""
    forecaster: "Forecaster" = field(repr=False)
    """The configuration that produced this result."""
    _y: np.ndarray = field(repr=False, compare=False)
    _missing: np.ndarray = field(repr=False, compare=False)
    _t0: pd.Timestamp = field(repr=False, compare=False)
    _fit: object = field(repr=False, compare=False)
    _val_fit: object = field(repr=False, compare=False)
    _val_cut: int = field(repr=False, compare=False)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    # ------------------------------------------------------------------ internals
    @property
    def _z(self) -> np.ndarray:
        z = self._cache.get("z")
        if z is None:
            z = np.log(self._y + self.log_offset)
            self._cache["z"] = z
        return z

    def _t_s(self) -> np.ndarray:
        t = self._cache.get("t_s")
        if t is None:
            t = self._t0.value / 1e9 + self.step_s * np.arange(len(self._y))
            self._cache["t_s"] = t
        return t

    def _residuals(self, horizon: int) -> np.ndarray:
        """Held-out log residuals, shape (origins, horizon); ``NaN`` at missing actuals."""
        key = ("res", horizon)
        if key in self._cache:
            return self._cache[key]
        n_val_end = self._val_cut + self.validation_origins + self._cache["val_h"] - 1
        origins = np.arange(self._val_cut, n_val_end - horizon + 1)
        if len(origins) < 10:
            raise ForecastError(
                f"the validation stretch holds only {len(origins)} origins for a "
                f"{horizon}-step horizon; use a longer history or a shorter horizon",
                field="horizon_steps", value=horizon)
        z, t = self._z, self._t_s()
        pred = self._val_fit.paths(z, t, origins, horizon)
        target = origins[:, None] + np.arange(horizon)[None, :]
        res = z[target] - pred
        res[self._missing[target]] = np.nan
        self._cache[key] = res
        return res

    def _paths(self, origins: np.ndarray, horizon: int, quantiles: tuple[float, ...]):
        """Point and quantile forecasts (original units) from positions ``origins``."""
        pred = self._fit.paths(self._z, self._t_s(), origins, horizon)
        res = self._residuals(horizon)
        correct = self.forecaster.median_correction and self.method != "seasonal-naive"
        correction = np.nanmedian(res, axis=0) if correct else 0.0
        c = self.log_offset
        point = np.maximum(np.exp(pred + correction) - c, 0.0)
        qs = {}
        for q in quantiles:
            offs = np.nanquantile(res, q, axis=0)
            qs[q] = np.maximum(np.exp(pred + offs) - c, 0.0)
        return point, qs

    # ------------------------------------------------------------------ public
    def forecast(self, horizon_steps: int, quantiles: Sequence[float] = (0.5, 0.9)) -> Forecast:
        """Forecast ``horizon_steps`` grid points past the last observation."""
        if not isinstance(horizon_steps, (int, np.integer)) or horizon_steps < 1:
            raise ForecastError("the horizon must be a positive number of steps",
                                field="horizon_steps", value=horizon_steps)
        qs = _validate_quantiles(quantiles)
        n = len(self._y)
        point, qv = self._paths(np.array([n]), int(horizon_steps), qs)
        stamps = pd.date_range(self.last_timestamp + pd.Timedelta(seconds=self.step_s),
                               periods=int(horizon_steps), freq=pd.Timedelta(seconds=self.step_s))
        table = pd.DataFrame({q: v[0] for q, v in qv.items()}, index=stamps)
        return Forecast(timestamps=stamps, point=point[0], quantiles=table,
                        method=self.method, step_s=self.step_s)

    def update(self, series: pd.Series) -> "ForecastResult":
        """The same fitted parameters, conditioned on ``series`` (which must extend the
        fitted history on the same grid): forecasts then start after its last point.
        Cheap, so a control loop can fit now and then and update every few minutes."""
        reg = regularize(series, step_s=self.step_s)
        later = reg.values[reg.values.index > self.last_timestamp]
        if later.empty:
            return self
        offset = (later.index[0] - self.last_timestamp) / pd.Timedelta(seconds=self.step_s)
        if abs(offset - round(offset)) > 0.25:
            raise ForecastError(f"new points are not on the fitted {self.step_s:g} s grid",
                                field="series.index", value=str(later.index[0]))
        gap = int(round(offset)) - 1
        add = np.concatenate([np.full(gap, np.nan), later.to_numpy()])
        missing = np.isnan(add)
        y_all = np.concatenate([self._y, add])
        idx = pd.date_range(self._t0, periods=len(y_all), freq=pd.Timedelta(seconds=self.step_s))
        filled = pd.Series(y_all, index=idx).interpolate(method="time").ffill().to_numpy()
        cache = {"val_h": self._cache["val_h"]}
        for key, value in self._cache.items():
            if isinstance(key, tuple) and key[0] == "res":
                cache[key] = value  # held-out residuals do not change with new data
        return replace(
            self, _y=filled, _missing=np.concatenate([self._missing, missing]),
            last_timestamp=idx[-1], n_missing=self.n_missing + int(missing.sum()), _cache=cache)


@dataclass(frozen=True)
class Forecaster:
    """The forecasting model (configuration). ``fit(series)`` returns a ``ForecastResult``."""

    method: str = AUTO
    """``auto`` (choose by rolling-origin validation), ``seasonal-naive``, ``autoreg``
    (AutoReg + Fourier terms on log values), ``holt-winters`` (damped additive, log values)
    or ``theta``."""
    season_length: int | None = None
    """Primary season in samples; ``None`` detects the daily cycle; 1 means no season."""
    weekly: bool | None = None
    """Model a weekly cycle on top (``autoreg``); ``None`` detects it."""
    horizon_s: float = 7200.0
    """Horizon in seconds that ``auto`` optimizes for (validation forecasts this far)."""
    validation_s: float = 7 * DAY_S
    """Held-out stretch at the end of the history, in seconds, for choosing the method and
    calibrating the quantiles (shortened, down to ``min_validation_origins`` origins, when
    the history is short)."""
    min_validation_origins: int = 24
    """Fewest rolling origins the validation stretch must provide."""
    fit_window_s: float | None = 28 * DAY_S
    """Use at most this much recent history, in seconds (``None``: all)."""
    log_offset: float | None = None
    """``c`` in ``log(y + c)``; ``None`` uses 1 % of the median positive value."""
    acf_threshold: float = 0.3
    """Autocorrelation at the daily / weekly lag above which that cycle is modelled."""
    ar_order: int = 3
    """Short lags 1..p of ``autoreg`` (the daily lag is added when there is a season)."""
    daily_harmonics: int = 8
    """Daily Fourier harmonics (sin/cos pairs) in ``autoreg``."""
    weekly_harmonics: int = 4
    """Weekly Fourier harmonics in ``autoreg``."""
    candidates: tuple[str, ...] = METHODS
    """Methods ``auto`` chooses from."""
    median_correction: bool = True
    """Add the held-out median log residual per step to the point forecast."""

    def _spec(self, season: Seasonality, step_s: float) -> MethodSpec:
        return MethodSpec(season_steps=season.season_steps, weekly=season.weekly, step_s=step_s,
                          ar_order=self.ar_order, daily_harmonics=self.daily_harmonics,
                          weekly_harmonics=self.weekly_harmonics)

    def _check(self) -> None:
        if self.method != AUTO and self.method not in METHODS:
            raise ForecastError(f"unknown method; choose from {', '.join((AUTO,) + METHODS)}",
                                field="method", value=self.method)
        for name in self.candidates:
            if name not in METHODS:
                raise ForecastError("unknown candidate method", field="candidates", value=name)
        if self.season_length is not None and (int(self.season_length) != self.season_length
                                               or self.season_length < 1):
            raise ForecastError("the season length must be a positive number of samples",
                                field="season_length", value=self.season_length)
        if not (self.horizon_s > 0):
            raise ForecastError("the horizon must be positive", field="horizon_s", value=self.horizon_s)

    def fit(self, series: pd.Series | RegularSeries) -> ForecastResult:
        """Fit on ``series`` (timestamps -> non-negative values; gaps allowed)."""
        with single_threaded_blas():
            return self._fit(series)

    def _fit(self, series: pd.Series | RegularSeries) -> ForecastResult:
        self._check()
        reg = series if isinstance(series, RegularSeries) else regularize(series)
        step = reg.step_s
        values = reg.values
        if self.fit_window_s is not None:
            keep = max(1, int(math.floor(self.fit_window_s / step)))
            values = values.iloc[-keep:]
        missing = values.isna().to_numpy()
        y = values.interpolate(method="time").ffill().bfill().to_numpy()
        n = len(y)
        if np.isnan(y).all():
            raise ForecastError("the series has no values", field="series", value=n)
        pos = y[y > 0]
        if self.log_offset is not None:
            c = float(self.log_offset)
            if not (c > 0 or (c == 0 and y.min() > 0)):
                raise ForecastError("log_offset must be positive (or 0 for a positive series)",
                                    field="log_offset", value=self.log_offset)
        else:
            c = 0.01 * float(np.median(pos)) if pos.size else 1.0
        z = np.log(y + c)
        horizon = max(1, int(math.ceil(self.horizon_s / step - 1e-9)))
        season = self._seasonality(z, step, n)
        spec = self._spec(season, step)

        methods = list(self.candidates) if self.method == AUTO else [self.method]
        if "seasonal-naive" not in methods and self.method == AUTO:
            methods.append("seasonal-naive")
        need_train = {m: min_history(m, spec) for m in methods}
        min_val = horizon + self.min_validation_origins - 1
        smallest = min(need_train.values())
        if n < smallest + min_val:
            what = (f"{methods[0]} needs" if len(methods) == 1 else "the forecaster needs")
            seasons = (f" (two seasons of {spec.season_steps} samples for fitting"
                       if spec.season_steps > 1 else " (for fitting")
            raise ForecastError(
                f"too little history: {what} at least {smallest + min_val} samples"
                f"{seasons}, plus {min_val} to validate a {horizon}-step horizon)"
                f", got {n} at {step:g} s steps",
                field="series", value=n)
        n_val = max(min_val, int(round(self.validation_s / step)))
        n_val = min(n_val, n - smallest)
        cut = n - n_val
        t_s = values.index.asi8 / 1e9
        origins = np.arange(cut, n - horizon + 1)
        target = origins[:, None] + np.arange(horizon)[None, :]
        actual = y[target]
        actual = np.where(missing[target], np.nan, actual)
        scale = seasonal_naive_scale(np.where(missing[:cut], np.nan, y[:cut]), spec.season_steps)
        if not (scale > 0):
            scale = seasonal_naive_scale(np.where(missing[:cut], np.nan, y[:cut]), 1)

        selection: dict[str, float | None] = {}
        val_fits = {}
        for name in methods:
            if cut < need_train[name]:
                selection[name] = None
                continue
            try:
                fit = fit_method(name, z[:cut], t_s[:cut], spec)
                pred = fit.paths(z, t_s, origins, horizon)
            except (ValueError, np.linalg.LinAlgError, FloatingPointError):
                selection[name] = None
                continue
            if not np.isfinite(pred).all():
                selection[name] = None
                continue
            res = z[target] - pred
            correct = self.median_correction and name != "seasonal-naive"
            med = np.nanmedian(np.where(missing[target], np.nan, res), axis=0) if correct else 0.0
            point = np.maximum(np.exp(pred + med) - c, 0.0)
            err = np.nanmean(np.abs(actual - point))
            selection[name] = float(err / scale) if scale > 0 else float(err)
            val_fits[name] = fit
        usable = {k: v for k, v in selection.items() if v is not None and np.isfinite(v)}
        if not usable:
            raise ForecastError(f"no method could be fitted ({', '.join(methods)})",
                                field="method", value=self.method)
        chosen = min(usable, key=lambda k: (usable[k], METHODS.index(k)))
        final = fit_method(chosen, z, t_s, spec)
        result = ForecastResult(
            method=chosen, step_s=step, seasonality=season, n_obs=n, n_missing=int(missing.sum()),
            log_offset=c, last_timestamp=values.index[-1], selection=selection,
            validation_origins=len(origins), forecaster=self, _y=y, _missing=missing,
            _t0=values.index[0], _fit=final, _val_fit=val_fits[chosen], _val_cut=cut)
        result._cache["z"] = z
        result._cache["val_h"] = horizon
        return result

    def _seasonality(self, z: np.ndarray, step: float, n: int) -> Seasonality:
        daily = max(1, int(round(DAY_S / step)))
        weekly_lag = max(1, int(round(WEEK_S / step)))
        if self.season_length is not None:
            m = int(self.season_length)
            if m > 1 and n < 2 * m:
                raise ForecastError(
                    f"too little history for a season of {m} samples: a seasonal method needs "
                    f"at least two seasons = {2 * m} samples, got {n}",
                    field="season_length", value=m)
            weekly = bool(self.weekly) if self.weekly is not None else bool(
                m == daily and n >= 2 * weekly_lag
                and autocorrelation(z, weekly_lag) >= self.acf_threshold)
            if weekly and n < 2 * weekly_lag:
                raise ForecastError(
                    f"too little history for a weekly cycle: needs two weeks = {2 * weekly_lag} "
                    f"samples, got {n}", field="weekly", value=True)
            return Seasonality(season_steps=m, weekly=weekly, daily_steps=daily,
                               acf_daily=autocorrelation(z, daily), acf_weekly=autocorrelation(z, weekly_lag),
                               detected=False)
        if daily > 1 and n < 2 * daily:
            raise ForecastError(
                f"too little history to detect daily seasonality: needs at least two days = "
                f"{2 * daily} samples at {step:g} s, got {n} (pass season_length=1 for a "
                "non-seasonal series)", field="series", value=n)
        season = detect_seasonality(z, step, self.acf_threshold)
        if self.weekly is not None:
            if self.weekly and n < 2 * weekly_lag:
                raise ForecastError(
                    f"too little history for a weekly cycle: needs two weeks = {2 * weekly_lag} "
                    f"samples, got {n}", field="weekly", value=True)
            season = replace(season, weekly=bool(self.weekly))
        return season
