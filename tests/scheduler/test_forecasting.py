"""scheduler.forecasting: the loop's load forecast from a rate history, and the loop sizing for it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from modeler.modelfile import parse_model_text
from scheduler.errors import SchedulerError
from scheduler.forecasting import HistoryLoadForecast, LoadForecastConfig, series_history
from scheduler.loop import ControlLoop, GuardRails, LoopConfig
from tests.scheduler.synth import FluidJob, model_text

STEP_S = 300.0


def daily(days: float, base=1000.0, amp=800.0, start="2024-05-01", noise=0.02, seed=1) -> pd.Series:
    """A daily cycle peaking at 14:00 UTC, every 5 minutes."""
    idx = pd.date_range(start, periods=int(days * 86400 / STEP_S), freq=f"{int(STEP_S)}s")
    hours = (idx - idx.normalize()).total_seconds().to_numpy() / 3600.0
    values = base + amp * np.cos((hours - 14.0) / 24.0 * 2 * math.pi)
    rng = np.random.default_rng(seed)
    return pd.Series(values * rng.lognormal(0.0, noise, len(idx)), index=idx)


def epoch(ts: str) -> float:
    return pd.Timestamp(ts).timestamp()


def test_forecast_covers_the_rise_within_the_lookahead():
    history = daily(8)
    fc = HistoryLoadForecast(lambda: history, LoadForecastConfig(lookahead_s=3600.0, quantile=0.9))
    now = "2024-05-07T09:00:00"
    ahead = fc(epoch(now))
    truth_next_hour = history[(history.index > pd.Timestamp(now))
                              & (history.index <= pd.Timestamp(now) + pd.Timedelta(hours=1))]
    # Rising towards the 14:00 peak: the answer is the load an hour ahead, not the load now.
    assert ahead > float(history[history.index <= pd.Timestamp(now)].iloc[-1]) * 1.05
    assert ahead == pytest.approx(float(truth_next_hour.max()), rel=0.1)
    assert ahead >= float(truth_next_hour.median())


def test_history_after_now_is_not_used_and_refits_are_periodic():
    history = daily(8)
    fc = HistoryLoadForecast(lambda: history, LoadForecastConfig(refit_s=3600.0))
    t0 = epoch("2024-05-06T00:00:00")
    fc(t0)
    assert fc.result_.last_timestamp <= pd.Timestamp("2024-05-06T00:00:00")
    fc(t0 + 600)
    fc(t0 + 1800)
    assert fc.fits_ == 1  # updated, not refitted, within the hour
    fc(t0 + 3600)
    assert fc.fits_ == 2 and fc.fitted_at_s_ == t0 + 3600


def test_a_measured_lead_time_longer_than_the_lookahead_widens_it():
    history = daily(8)
    now = epoch("2024-05-07T09:00:00")
    short = HistoryLoadForecast(lambda: history, LoadForecastConfig(lookahead_s=600.0))
    # a 3 h restart + settle measured on the engine: the forecast must cover the rise up to 12:00
    assert short(now, 3 * 3600.0) > short(now) * 1.2
    assert short(now, 60.0) == short(now)  # a shorter measured lead time changes nothing


def test_the_loop_passes_its_measured_restart_time_to_the_forecast():
    from scheduler.interfaces import Actuation

    class SlowRestartJob(FluidJob):
        def apply(self, config, reason=""):
            a = super().apply(config, reason)
            return Actuation(applied=a.applied, config=a.config, restart_s=45.0 if a.applied else 0.0,
                             detail=a.detail)

    seen = []
    job = SlowRestartJob(service_ms=SERVICE, config={"a": 2, "b": 1}, rate=1000.0)
    model = parse_model_text(model_text(SERVICE, {"a": 2, "b": 1}))
    loop = ControlLoop(model, job, job, LoopConfig(guard=GuardRails(stabilization_s=30, settle_s=5)),
                       load_forecast=lambda now_s, lead_s: seen.append(lead_s) or 3000.0)
    loop.run(iterations=12, wait=job.advance)
    assert job.applied and seen[0] is None  # nothing measured before the first change
    assert seen[-1] == pytest.approx(45.0 + 5.0) and loop.measured_restart_s == 45.0


def test_too_little_history_gives_no_forecast():
    fc = HistoryLoadForecast(lambda: daily(1), LoadForecastConfig(min_history_s=2 * 86400))
    assert fc(epoch("2024-05-01T23:00:00")) is None


def test_bad_quantile_is_a_typed_error():
    fc = HistoryLoadForecast(lambda: daily(3), LoadForecastConfig(quantile=1.5))
    with pytest.raises(SchedulerError, match="quantile"):
        fc(epoch("2024-05-03T12:00:00"))


def test_series_history_reads_a_csv(tmp_path):
    s = daily(3)
    path = tmp_path / "rates.csv"
    pd.DataFrame({"timestamp": s.index.strftime("%Y-%m-%d %H:%M:%S"), "value": s.to_numpy()}).to_csv(path, index=False)
    read = series_history(path)()
    assert len(read) == len(s) and read.iloc[10] == pytest.approx(s.iloc[10])


# -- the loop sizes for max(offered, forecast)

SERVICE = {"a": 1.0, "b": 0.5}


def _loop(forecast):
    job = FluidJob(service_ms=SERVICE, config={"a": 2, "b": 1}, rate=1000.0)
    model = parse_model_text(model_text(SERVICE, {"a": 2, "b": 1}))
    cfg = LoopConfig(guard=GuardRails(stabilization_s=30, settle_s=0))
    return job, ControlLoop(model, job, job, cfg, load_forecast=forecast)


def test_loop_scales_up_before_a_forecast_rise():
    job, loop = _loop(None)
    loop.run(iterations=6, wait=job.advance)
    assert loop.trust.state == "trusted" and job.applied == []
    loop.decider.load_forecast = lambda now_s, lead_s: 3000.0  # the forecast sees a rise the offered rate has not
    steps = loop.run(iterations=6, wait=job.advance)
    assert len(job.applied) == 1 and job.rate == 1000.0
    scale = next(s for s in steps if s.result.applied)
    assert scale.decision.path == "model"
    assert any("forecast" in r for r in scale.decision.reasons)
    assert job.config["a"] * 1000.0 * 0.7 >= 3000.0 and job.config["b"] * 2000.0 * 0.7 >= 3000.0


def test_loop_never_scales_down_below_the_forecast():
    job, loop = _loop(lambda now_s, lead_s: 2000.0)
    job.config = {"a": 5, "b": 3}  # sized for ~3,000/s; 1,000/s offered, 2,000/s forecast
    loop.run(iterations=60, wait=job.advance)
    assert job.applied, "scales down to what the forecast needs"
    # the plan for 2,000/s at utilization 0.7, not for the 1,000/s offered ({a: 2, b: 1})
    assert {k: job.config[k] for k in ("a", "b")} == {"a": 3, "b": 2}


def test_failing_forecast_is_noted_and_the_loop_goes_on():
    def broken(now_s):
        raise RuntimeError("store unreachable")

    job, loop = _loop(broken)
    loop.run(iterations=6, wait=job.advance)
    job.rate = 3000.0
    steps = loop.run(iterations=6, wait=job.advance)
    scale = next(s for s in steps if s.result.applied)
    assert any("forecast unavailable" in r for r in scale.decision.reasons)
