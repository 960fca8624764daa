"""State-aware restarts on the testbed: the outage of a rescale is the model's restart time for
the change (longer for larger state, backlog piling up meanwhile), the event log records each
restart's measured duration and state, and calibration recovers base and restore rate from them."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from experiments.testbed import Testbed, TestbedConfig
from experiments.testbed.restarts import restart_samples
from modeler.modelfile import parse_model
from modeler.restart import fit_restart_model, restart_time_s
from tests.experiments.testbed.conftest import per_window

RATE = 200.0
WORDCOUNT = {
    "augury": 1, "job": "wordcount", "network_delay_ms": 0.1,
    "operators": [
        {"name": "source", "role": "source", "parallelism": 1},
        {"name": "split", "parallelism": 2, "service_time_ms": 0.5},
        {"name": "count", "parallelism": 2, "service_time_ms": 0.2},
    ],
    "edges": [
        {"from": "source", "to": "split"},
        {"from": "split", "to": "count", "grouping": "key", "selectivity": 7.0,
         "keys": {"distribution": "zipf", "exponent": 1.0, "count": 10000}},
    ],
}


def _model(state_mb=0.0, base=None, rate=None):
    data = copy.deepcopy(WORDCOUNT)
    data["operators"][2]["state_mb"] = state_mb
    if base is not None:
        data["restart_base_s"] = base
    if rate is not None:
        data["restore_mb_per_s"] = rate
    return parse_model(data)


def _outage_s(frame: pd.DataFrame, operator: str) -> float:
    """Seconds instance 0 of ``operator`` accounted no time (busy, back-pressured or idle): the
    restart, measured from the metrics alone."""
    rows = frame[(frame.operator == operator) & (frame.instance == 0)
                 & frame.metric.isin(["busy_ms", "backpressured_ms", "idle_ms"])]
    per = rows.groupby("ts")["value"].sum()
    return float((frame.window_s.iloc[0] * 1000.0 - per).clip(lower=0).sum() / 1000.0)


def _rescaled(model, cfg, until_s=60.0, at_s=10.0):
    tb = Testbed(model, RATE, cfg)
    tb.advance(at_s)
    act = tb.apply({"count": 3}, reason="test")
    tb.advance(until_s - at_s)
    return tb, act


@pytest.mark.parametrize("state_mb", [500.0, 2000.0])
def test_the_outage_of_a_stateful_rescale_is_the_models_restart_time(state_mb):
    model = _model(state_mb, base=4.0, rate=100.0)
    predicted = restart_time_s(model, None, {"count": 3})
    assert predicted == pytest.approx(4.0 + state_mb / 100.0)
    tb, act = _rescaled(model, TestbedConfig(seed=5, window_s=1.0, restart_scope="job"))
    assert act.applied and act.restart_s == pytest.approx(predicted)
    frame = tb.frame()
    for op in ("source", "split", "count"):  # restart_scope job: every operator restarts
        assert _outage_s(frame, op) == pytest.approx(predicted, rel=0.10)
    # nothing is processed during the outage, the backlog piles up outside the job and drains
    done = per_window(frame, "records_in", "count")
    inside = done[(done.index >= done.index[0] + pd.Timedelta(seconds=11))
                  & (done.index < done.index[0] + pd.Timedelta(seconds=9 + predicted))]
    assert len(inside) and (inside == 0).all()
    lag = per_window(frame, "source_lag", "source")
    assert lag.max() == pytest.approx(RATE * predicted, rel=0.15)
    assert lag.iloc[-1] < 0.05 * lag.max()
    assert tb.conservation().balanced()
    # the event log: the state restored and the measured duration
    reconf = next(e for e in tb.events if e["event"] == "reconfigure")["detail"]
    assert reconf["state_mb"] == state_mb and reconf["restart_s"] == pytest.approx(predicted)
    done_events = [e["detail"] for e in tb.events if e["event"] == "restart_done"]
    assert len(done_events) == 3
    assert all(d["restart_s"] == pytest.approx(predicted) and d["state_mb"] == state_mb
               and d["reconfiguration"] == 1 for d in done_events)
    assert restart_samples(tb.events) == [(state_mb, pytest.approx(predicted))]


def test_larger_state_longer_outage_and_operator_scope_pauses_only_the_rescaled():
    cfg = TestbedConfig(seed=2, window_s=1.0)  # restart_scope operator (default)
    small, _ = _rescaled(_model(100.0, base=2.0, rate=50.0), cfg, until_s=40.0)
    large, _ = _rescaled(_model(1000.0, base=2.0, rate=50.0), cfg, until_s=40.0)
    a, b = _outage_s(small.frame(), "count"), _outage_s(large.frame(), "count")
    assert a == pytest.approx(4.0, rel=0.10) and b == pytest.approx(22.0, rel=0.10)
    assert _outage_s(large.frame(), "split") < 1.0  # not restarted (back-pressured, not paused)


def test_a_model_without_state_keeps_the_fixed_restart_s():
    tb, act = _rescaled(_model(), TestbedConfig(seed=1, window_s=1.0, restart_s=7.0), until_s=30.0)
    assert act.restart_s == 7.0
    assert _outage_s(tb.frame(), "count") == pytest.approx(7.0, rel=0.10)
    assert restart_samples(tb.events) == [(0.0, pytest.approx(7.0))]
    # the model's restart_base_s, when given, wins over restart_s; the default is restart_s
    _, act = _rescaled(_model(base=3.0), TestbedConfig(seed=1, restart_s=7.0), until_s=12.0)
    assert act.restart_s == 3.0


def test_calibration_recovers_base_and_restore_rate_from_testbed_restarts():
    # the truth: base 6 s (the testbed's restart_s: the model file gives none), 80 MB/s
    samples = []
    for k, state_mb in enumerate((0.0, 400.0, 1200.0, 2400.0)):
        cfg = TestbedConfig(seed=k, window_s=5.0, restart_s=6.0)
        tb = Testbed(_model(state_mb, rate=80.0), RATE, cfg)
        tb.advance(5.0)
        tb.apply({"count": 3})
        tb.advance(40.0)
        tb.apply({"count": 2})  # a second restart of the same run, once the first is done
        tb.advance(40.0)
        samples += restart_samples(tb.events_frame())  # as written to events.csv
    assert len(samples) == 8
    fit = fit_restart_model(samples)
    assert fit.base_s == pytest.approx(6.0, rel=0.01)
    assert fit.restore_mb_per_s == pytest.approx(80.0, rel=0.01)
    assert fit.trusted


def test_an_interrupted_restart_is_not_a_sample():
    model = _model(1000.0, base=2.0, rate=100.0)  # 12 s restarts
    tb = Testbed(model, RATE, TestbedConfig(seed=4))
    tb.advance(5.0)
    tb.apply({"count": 3})
    tb.advance(4.0)
    tb.apply({"count": 4})  # while count still restarts
    tb.advance(20.0)
    assert restart_samples(tb.events) == [(1000.0, pytest.approx(12.0))]
    detail = [e["detail"] for e in tb.events if e["event"] == "restart_done"]
    assert [d["reconfiguration"] for d in detail] == [2]
