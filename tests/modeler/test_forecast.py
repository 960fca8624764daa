"""modeler.forecast: hand-derived unit tests on small series, and the acceptance backtests on
the real traces (slow)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modeler.errors import ForecastError
from modeler.forecast import (
    Forecaster,
    autocorrelation,
    backtest,
    coverage,
    detect_seasonality,
    infer_step_s,
    mase,
    regularize,
    resample,
    seasonal_naive_scale,
    smape,
)
from modeler.forecast.methods import AutoRegFit, HoltWintersFit, MethodSpec, ThetaFit


def _series(values, step_s=3600.0, start="2024-01-01 00:00") -> pd.Series:
    idx = pd.date_range(start, periods=len(values), freq=pd.Timedelta(seconds=step_s))
    return pd.Series(np.asarray(values, float), index=idx, name="rate")


def _daily(days: int, step_s: float = 3600.0, noise: float = 0.05, seed: int = 0) -> pd.Series:
    per_day = int(86400 / step_s)
    n = days * per_day
    t = np.arange(n)
    rng = np.random.default_rng(seed)
    shape = 100.0 * np.exp(0.6 * np.sin(2 * np.pi * t / per_day))
    ar = np.zeros(n)
    eps = rng.normal(0, noise, n)
    for i in range(1, n):
        ar[i] = 0.7 * ar[i - 1] + eps[i]
    return _series(shape * np.exp(ar), step_s)


# ----------------------------------------------------------------------------- metrics


def test_metric_formulas_by_hand():
    # |e| = 1, 0, 1 -> mean 2/3; scale 0.5 -> 4/3
    assert mase([1, 2, 3], [2, 2, 2], scale=0.5) == pytest.approx(4 / 3)
    # 200*50/150 = 66.67 and 0/0 counted as 0 -> mean 33.33
    assert smape([100, 0], [50, 0]) == pytest.approx(100 / 3)
    # |3-1|, |5-2| -> 2.5
    assert seasonal_naive_scale([1, 2, 3, 5], m=2) == pytest.approx(2.5)
    # NaN pairs are skipped: |5-2| only
    assert seasonal_naive_scale([1, 2, np.nan, 5], m=2) == pytest.approx(3.0)
    # actuals at or below: 1 <= 1, 2 <= 3, 4 > 3 -> 2/3; the NaN actual is left out
    assert coverage([1, 2, 4, np.nan], [1, 3, 3, 0]) == pytest.approx(2 / 3)
    assert math.isnan(mase([1], [1], scale=0.0))


def test_autocorrelation_by_hand():
    z = np.array([1.0, -1.0, 1.0, -1.0])
    # mean 0, sum of squares 4; lag 1: 3 products of -1 -> -3/4; lag 2: 2 products of 1 -> 2/4
    assert autocorrelation(z, 1) == pytest.approx(-0.75)
    assert autocorrelation(z, 2) == pytest.approx(0.5)


# ----------------------------------------------------------------------------- grid


def test_gaps_reindexed_counted_and_interpolated():
    s = _series([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], step_s=300.0)
    holey = s.drop(s.index[[2, 4]])
    reg = regularize(holey)
    assert reg.step_s == 300.0
    assert reg.n_missing == 2
    assert list(reg.values.index) == list(s.index)
    assert np.isnan(reg.values.iloc[2]) and np.isnan(reg.values.iloc[4])
    # linear interpolation between neighbours: (1+3)/2, (3+5)/2
    assert reg.filled().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_nan_values_count_as_missing_and_order_is_restored():
    s = _series([1.0, np.nan, 3.0], step_s=60.0).iloc[::-1]
    reg = regularize(s)
    assert reg.n_missing == 1
    assert reg.filled().tolist() == [1.0, 2.0, 3.0]


def test_step_inferred_from_most_common_gap_with_offset_seconds():
    idx = pd.to_datetime(["2015-02-26 21:42:53", "2015-02-26 21:47:53", "2015-02-26 21:52:53",
                          "2015-02-26 22:02:53"])
    assert infer_step_s(idx) == 300.0
    reg = regularize(pd.Series([1.0, 2.0, 3.0, 5.0], index=idx))
    assert reg.n_missing == 1 and reg.values.index[3] == pd.Timestamp("2015-02-26 21:57:53")


def test_bad_series_errors_name_the_value():
    s = _series([1.0, 2.0, 3.0])
    with pytest.raises(ForecastError, match="duplicate timestamp"):
        regularize(pd.concat([s, s.iloc[:1]]))
    late = s.index[-1] + pd.Timedelta(minutes=90)  # half a step off the hourly grid
    with pytest.raises(ForecastError, match="not on the") as err:
        regularize(pd.Series([1.0, 2.0, 3.0, 4.0], index=s.index.append(pd.DatetimeIndex([late]))),
                   step_s=3600.0)
    assert str(late) in str(err.value)
    with pytest.raises(ForecastError, match="negative") as err:
        regularize(_series([1.0, -2.0, 3.0]))
    assert "-2.0" in str(err.value)
    with pytest.raises(ForecastError, match="numeric"):
        regularize(pd.Series(["a", "b"], index=s.index[:2]))


def test_resample_is_the_bucket_mean():
    s = _series([1.0, 3.0, 5.0, 7.0, 9.0, 11.0], step_s=300.0)
    out = resample(s, 900.0)
    assert out.tolist() == [3.0, 9.0]


# ----------------------------------------------------------------------------- errors


def test_too_little_history_for_two_seasons_names_the_minimum():
    s = _series(np.arange(1, 51), step_s=1800.0)
    with pytest.raises(ForecastError, match=r"two seasons = 96 samples, got 50"):
        Forecaster(method="seasonal-naive", season_length=48).fit(s)


def test_too_little_history_to_detect_daily_names_two_days():
    s = _series(np.ones(288) + np.arange(288) % 7, step_s=300.0)  # one day of 5-min data
    with pytest.raises(ForecastError, match=r"two days = 576 samples at 300 s, got 288"):
        Forecaster().fit(s)


def test_too_little_history_to_validate_names_the_minimum():
    s = _daily(3)  # 72 hourly points; season 24 -> 48 to fit + (2 + 24 - 1) to validate
    with pytest.raises(ForecastError, match=r"at least 73 samples") as err:
        Forecaster(method="seasonal-naive", season_length=24, horizon_s=7200).fit(s.iloc[:70])
    assert err.value.field == "series" and err.value.value == 70


def test_unknown_method_and_bad_quantile_are_typed_errors():
    with pytest.raises(ForecastError, match="unknown method"):
        Forecaster(method="prophet").fit(_daily(10))
    result = Forecaster(method="seasonal-naive", season_length=24).fit(_daily(10))
    with pytest.raises(ForecastError, match="between 0 and 1"):
        result.forecast(3, quantiles=(0.5, 1.5))
    with pytest.raises(ForecastError, match="positive number of steps"):
        result.forecast(0)


# ----------------------------------------------------------------------------- seasonal naive


def test_seasonal_naive_point_is_the_value_one_season_earlier():
    rng = np.random.default_rng(3)
    y = rng.uniform(10, 20, size=240)
    s = _series(y)
    fc = Forecaster(method="seasonal-naive", season_length=4, horizon_s=6 * 3600).fit(s).forecast(6)
    # steps 1..4 repeat the last season; steps 5, 6 repeat it again (lag 8)
    np.testing.assert_allclose(fc.point, [y[-4], y[-3], y[-2], y[-1], y[-4], y[-3]], rtol=1e-12)
    assert fc.timestamps[0] == s.index[-1] + pd.Timedelta(hours=1)
    assert list(fc.quantiles.columns) == [0.5, 0.9]


def test_exactly_periodic_series_has_zero_width_intervals():
    y = np.tile([5.0, 8.0, 13.0, 8.0], 60)
    fc = Forecaster(method="seasonal-naive", season_length=4, horizon_s=3 * 3600).fit(_series(y)).forecast(3)
    np.testing.assert_allclose(fc.point, [5.0, 8.0, 13.0])
    np.testing.assert_allclose(fc.quantiles[0.9], fc.point, rtol=1e-9)
    np.testing.assert_allclose(fc.quantiles[0.5], fc.point, rtol=1e-9)


def test_update_forecasts_from_the_new_end_and_fills_gaps():
    y = np.tile([5.0, 8.0, 13.0, 8.0], 60)
    s = _series(y)
    result = Forecaster(method="seasonal-naive", season_length=4, horizon_s=3 * 3600).fit(s.iloc[:200])
    extra = s.iloc[:203].drop(s.index[201])  # one new point missing
    updated = result.update(extra)
    assert updated.n_missing == result.n_missing + 1
    assert updated.last_timestamp == s.index[202]
    # 203 and 204 repeat 199 and 200; 205 repeats 201, which was interpolated: (5 + 13) / 2
    np.testing.assert_allclose(updated.forecast(3).point, [y[199], y[200], 9.0])
    assert result.forecast(1).timestamps[0] == s.index[200]


# ----------------------------------------------------------------------------- methods vs statsmodels


def test_fixed_parameter_paths_match_statsmodels_forecasts():
    s = _daily(12, noise=0.1)
    z = np.log(s.to_numpy())
    t = s.index.asi8 / 1e9
    spec = MethodSpec(season_steps=24, weekly=False, step_s=3600.0)
    n, h = len(z), 30
    origin = np.array([n])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hw = HoltWintersFit(z, t, spec)
        # statsmodels forecasts h = m (and 2m, ...) with the seasonal state from before the
        # last update; ours uses the latest one (s_{T+h-m}, Hyndman & Athanasopoulos), so
        # compare the other steps
        ours, theirs = hw.paths(z, t, origin, h)[0], np.asarray(hw._statsmodels_result.forecast(h))
        other = np.arange(1, h + 1) % 24 != 0
        np.testing.assert_allclose(ours[other], theirs[other], rtol=1e-7, atol=1e-7)
        th = ThetaFit(z, t, spec)
        # statsmodels' Theta on the deseasonalized series, reseasonalized by position
        expect = th._statsmodels_result.forecast(h) + th._season_at(np.arange(n, n + h))
        np.testing.assert_allclose(th.paths(z, t, origin, h)[0], expect, rtol=1e-7, atol=1e-7)
        ar = AutoRegFit(z, t, spec)
        from modeler.forecast.methods import fourier_terms

        t_future = t[-1] + 3600.0 * np.arange(1, h + 1)
        expect = ar._statsmodels_result.forecast(h, exog=fourier_terms(t_future, spec))
        np.testing.assert_allclose(ar.paths(z, t, origin, h)[0], expect, rtol=1e-7, atol=1e-7)


def test_holt_winters_filter_reproduces_statsmodels_levels():
    s = _daily(10, noise=0.1, seed=4)
    z = np.log(s.to_numpy())
    t = s.index.asi8 / 1e9
    hw = HoltWintersFit(z, t, MethodSpec(season_steps=24, weekly=False, step_s=3600.0))
    level, _, _ = hw._filter(z, len(z))
    np.testing.assert_allclose(level, hw._statsmodels_result.level, rtol=1e-7, atol=1e-7)


# ----------------------------------------------------------------------------- auto, seasonality


def test_seasonality_detection():
    z = np.log(_daily(20).to_numpy())
    found = detect_seasonality(z, 3600.0)
    assert found.season_steps == 24 and found.acf_daily > 0.3
    flat = np.random.default_rng(1).normal(size=24 * 20)
    assert detect_seasonality(flat, 3600.0).season_steps == 1


def test_auto_picks_the_best_validation_score_and_beats_naive_on_a_seasonal_ar_series():
    s = _daily(35, noise=0.15, seed=2)
    result = Forecaster(horizon_s=3 * 3600).fit(s)
    scores = {k: v for k, v in result.selection.items() if v is not None}
    assert set(scores) == {"seasonal-naive", "autoreg", "holt-winters", "theta"}
    assert result.method == min(scores, key=scores.get)
    assert scores[result.method] < scores["seasonal-naive"]
    assert result.seasonality.season_steps == 24
    bt = backtest(s, Forecaster(), horizon_steps=3, folds=40, refit_every_s=None)
    assert bt.mase < bt.baseline.mase
    assert bt.season_steps == 24 and bt.n_points == 120 and bt.n_fits == 1
    assert 0.7 <= bt.coverage[0.9] <= 1.0


def test_backtest_never_looks_past_the_origin():
    s = _daily(20, noise=0.1, seed=5)
    bt = backtest(s, Forecaster(method="autoreg"), horizon_steps=3, folds=10, refit_every_s=None)
    spoiled = s.copy()
    spoiled.iloc[-30:] = spoiled.iloc[-30:] * 50  # only after the first origin (index n-30)
    bt2 = backtest(spoiled, Forecaster(method="autoreg"), horizon_steps=3, folds=10, refit_every_s=None)
    first = bt.forecasts[bt.forecasts["origin"] == bt.first_origin]
    first2 = bt2.forecasts[bt2.forecasts["origin"] == bt2.first_origin]
    np.testing.assert_allclose(first["point"], first2["point"])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), scale=st.floats(0.01, 1e5),
       qs=st.lists(st.floats(0.02, 0.98), min_size=1, max_size=4, unique=True))
def test_quantiles_are_ordered_non_negative_and_scale_with_the_series(seed, scale, qs):
    s = _daily(6, noise=0.3, seed=seed)
    fit = Forecaster(method="theta", horizon_s=4 * 3600).fit(s)
    fc = fit.forecast(4, quantiles=qs)
    table = fc.quantiles[sorted(qs)].to_numpy()
    assert (np.diff(table, axis=1) >= -1e-9).all()
    assert (table >= 0).all() and (fc.point >= 0).all()
    scaled = Forecaster(method="theta", horizon_s=4 * 3600).fit(s * scale).forecast(4, quantiles=qs)
    np.testing.assert_allclose(scaled.point, fc.point * scale, rtol=1e-6)


# ----------------------------------------------------------------------------- acceptance (traces)


@pytest.fixture(scope="module")
def trace_backtests(traces_dir):
    from experiments.forecast_table import CASES, run_case

    return {case.name: run_case(case, traces_dir) for case in CASES}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["taxi", "wc98", "amzn"])
def test_auto_beats_seasonal_naive_on_the_traces(trace_backtests, name):
    bt = trace_backtests[name]
    assert bt.horizon_steps * bt.step_s == 7200
    assert bt.mase < bt.baseline.mase, bt.as_dict()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["taxi", "wc98", "amzn"])
def test_upper_quantile_coverage_on_the_traces(trace_backtests, name):
    bt = trace_backtests[name]
    assert 0.85 <= bt.coverage[0.9] <= 0.95, bt.as_dict()
    # scored over at least a week, with (almost) every point of every fold
    assert bt.last_origin - bt.first_origin >= pd.Timedelta(days=6.9)
    assert bt.n_points >= 0.99 * bt.folds * bt.horizon_steps


@pytest.mark.slow
def test_elb_gaps_are_reported_and_the_table_covers_it(trace_backtests):
    bt = trace_backtests["elb"]
    assert bt.n_missing == 8
    assert np.isfinite(bt.mase) and 0.0 <= bt.coverage[0.9] <= 1.0
