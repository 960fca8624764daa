"""flink-accuracy's bookkeeping (no cluster): errors, the 15 % goal and the one-step verdict."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from experiments.flink.jobs import SleepPipelineSpec
from experiments.harness import ExperimentContext
from experiments.suite import flink_accuracy as fa


def _measure(rate, bp=0.0, lat=20.0):
    return {"sink_rate": rate, "backpressure_max": bp, "backpressure_mean": bp,
            "busy_max": {"Enrich": 0.5, "Aggregate": 0.6}, "latency_mean_ms": lat}


def _outcome(after_rate, after_bp):
    tests = [fa._config(1, 2), fa._config(2, 1), fa._config(3, 3)]
    proposal = SimpleNamespace(prediction=SimpleNamespace(operators={
        "Enrich": SimpleNamespace(max_utilization=0.6), "Aggregate": SimpleNamespace(max_utilization=0.7)}))
    return {"tests": tests, "predicted": {0: 180.0, 1: 120.0, 2: 300.0},
            "measured": {0: _measure(200.0), 1: _measure(100.0), 2: _measure(310.0)},
            "nominal": [200.0, 125.0, 375.0], "lat_rate": 80.0,
            "lat_measured": {0: _measure(80.0, lat=100.0), 1: _measure(80.0, lat=50.0), 2: _measure(80.0)},
            "lat_predicted": {0: 110.0, 1: None, 2: 20.0}, "rescales": [3.0, 4.0],
            "target": 400.0, "start": fa._config(1, 1), "planned": fa._config(4, 5), "proposal": proposal,
            "before": _measure(118.0, bp=0.6), "after": _measure(after_rate, bp=after_bp), "restart_s": 5.0,
            "calib_rows": [{"config": fa._config(1, 1), "rate": 90.0, **_measure(90.0)}],
            "service": {"Enrich": 5.4, "Aggregate": 8.5}}


def test_errors_goal_and_one_step_verdict():
    s = fa._settings(quick=True)
    res = fa._result(ExperimentContext(quick=True), SleepPipelineSpec(), s, _outcome(392.0, 0.01), 100.0)
    table = res.tables["configurations"]
    assert list(table["max_rate_error"]) == pytest.approx([-0.1, 0.2, -0.0323], abs=1e-4)
    assert res.metrics["configs_within_15pct"] == 2 and res.metrics["test_configs"] == 3
    assert res.metrics["max_rate_abs_error_max"] == pytest.approx(0.2)
    assert res.metrics["latency_abs_error_mean"] == pytest.approx(0.1 / 2 + 0.0 / 2)  # None is left out
    assert res.metrics["one_step_success"] == 1.0 and res.metrics["rescale_s_mean"] == pytest.approx(4.0)
    assert "goal missed" in res.summary and "success" in res.summary


@pytest.mark.parametrize("rate, bp", [(370.0, 0.0), (399.0, 0.2)])
def test_one_step_fails_short_of_the_rate_or_back_pressured(rate, bp):
    res = fa._result(ExperimentContext(), SleepPipelineSpec(), fa._settings(quick=False), _outcome(rate, bp), 1.0)
    assert res.metrics["one_step_success"] == 0.0 and "FAILED" in res.summary
