"""scheduler.schedule: lead time, stabilization before scale-down, the reconfiguration budget,
the reactive floor; replay against the actual load."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from modeler.modelfile import load_model
from modeler.queueing import compile_model, predict
from scheduler.errors import SchedulerError
from scheduler.plan import plan
from scheduler.schedule import ScheduleConfig, replay, schedule
from tests.conftest import EXAMPLES

MODEL = compile_model(load_model(EXAMPLES / "diamond.yaml"))
LOW, HIGH = 2000.0, 12000.0
IDX = pd.date_range("2026-01-01", periods=48, freq="30min")


def _peak_series(start=20, end=26):
    values = np.full(len(IDX), LOW)
    values[start:end] = HIGH
    return pd.Series(values, index=IDX)


def test_scale_up_is_issued_lead_time_early_and_down_after_stabilization():
    cfg = ScheduleConfig(lead_time_s=600, stabilization_s=3600, rate_resolution=0)
    s = schedule(MODEL, _peak_series(), LOW, cfg)
    ups = [r for r in s.reconfigurations if r.direction == "up"]
    downs = [r for r in s.reconfigurations if r.direction == "down"]
    assert len(ups) == 1 and len(downs) == 1
    assert ups[0].segment_start == IDX[20]
    assert ups[0].issue_at == IDX[20] - pd.Timedelta(minutes=10)
    assert ups[0].effective_at == IDX[20]
    assert dict(ups[0].config) == dict(plan(MODEL, HIGH).config)
    # The load falls at step 26; one hour (2 steps) later the level may fall.
    assert downs[0].segment_start == IDX[28]
    assert dict(downs[0].config) == dict(plan(MODEL, LOW).config)
    # Replayed against the forecast itself: no interval violates the target.
    assert not replay(MODEL, s, _peak_series()).violation.any()


def test_reactive_floor_keeps_the_measured_load_for_the_stabilization_period():
    cfg = ScheduleConfig(stabilization_s=3600, rate_resolution=0)
    s = schedule(MODEL, _peak_series(), HIGH, cfg)  # measured load is high now, forecast low
    assert dict(s.reconfigurations[0].config) == dict(plan(MODEL, HIGH).config)
    assert s.steps["level"].iloc[0] == HIGH
    assert s.steps["level"].iloc[5] == LOW


def test_reconfiguration_budget_merges_the_cheapest_changes():
    values = np.where(np.arange(len(IDX)) % 6 < 3, HIGH, LOW)  # a peak every 3 h
    forecast = pd.Series(values, index=IDX)
    free = schedule(MODEL, forecast, LOW, ScheduleConfig(stabilization_s=0, max_reconfigurations_per_day=100))
    capped = schedule(MODEL, forecast, LOW, ScheduleConfig(stabilization_s=0, max_reconfigurations_per_day=5))
    assert free.per_day() > 5
    assert capped.per_day() <= 5
    # Never below demand: every step's capacity covers the forecast.
    assert (capped.steps["capacity"] >= capped.steps["forecast"] * (1 - 1e-9)).all()
    assert capped.steps["instances"].sum() >= free.steps["instances"].sum()


def test_capacity_column_is_target_times_max_rate():
    s = schedule(MODEL, _peak_series(), LOW)
    for ts in (IDX[0], IDX[22]):
        cfg = s.config_at(ts)
        assert s.steps.loc[ts, "capacity"] == pytest.approx(0.7 * predict(MODEL, cfg, 1.0).max_rate)


@pytest.mark.parametrize("kwargs", [{"lead_time_s": -1}, {"max_reconfigurations_per_day": 0},
                                    {"rate_resolution": float("nan")}])
def test_bad_config_raises(kwargs):
    with pytest.raises(SchedulerError):
        schedule(MODEL, _peak_series(), LOW, ScheduleConfig(**kwargs))


def test_bad_forecast_raises():
    with pytest.raises(SchedulerError):
        schedule(MODEL, pd.Series([1.0, -1.0], index=IDX[:2]), LOW)
    with pytest.raises(SchedulerError):
        schedule(MODEL, pd.Series([1.0, 2.0]), LOW)
