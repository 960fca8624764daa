"""experiments.replay: SLO-violation time charges a restart its real-time cost (restart + drain),
whatever the replay's time compression."""

from __future__ import annotations

import math

import pytest

from experiments.replay import ReplayConfig, drive, restart_cost_s
from modeler.modelfile import parse_model
from modeler.queueing import predict

CHAIN = parse_model({
    "augury": 1, "job": "chain",
    "operators": [{"name": "src", "role": "source"},
                  {"name": "A", "parallelism": 2, "service_time_ms": 1.0},
                  {"name": "B", "parallelism": 1, "service_time_ms": 0.5}],
    "edges": [{"from": "src", "to": "A"}, {"from": "A", "to": "B"}],
})


def test_restart_cost_is_restart_plus_drain():
    cfg = ReplayConfig(backlog_slo_s=1.0)
    # 60 s stop at 300/s arrivals, 1000/s capacity: the backlog of 18,000 tuples drains at 700/s.
    assert restart_cost_s(cfg, 60.0, 1000.0, 300.0) == pytest.approx(60.0 + 60.0 * 300.0 / 700.0)
    assert restart_cost_s(cfg, 0.5, 1000.0, 300.0) == 0.0          # within the backlog SLO
    assert restart_cost_s(cfg, 60.0, 300.0, 300.0) == math.inf      # never drains


class _OnceAt:
    """Rescales A to 3 instances after the window ending at ``at_s`` (simulated)."""

    name = "once"

    def __init__(self, at_s: float) -> None:
        self.at_s = at_s

    def start(self, bed, cfg) -> None:
        pass

    def step(self, bed, view, stats, config):
        if abs(view.sim_s - self.at_s) < 1e-9:
            return {**config, "A": 3}
        return None


@pytest.mark.parametrize("time_scale", [120.0, 960.0])
def test_a_restart_costs_the_same_whatever_the_compression(time_scale):
    rate = 600.0
    cfg = ReplayConfig(window_s=2.0, time_scale=time_scale, restart_s=30.0, latency_slo_ms=1e6,
                       backlog_slo_s=1.0, seed=3)
    result = drive(CHAIN, rate, _OnceAt(4.0), cfg, CHAIN.config, duration_s=10.0)
    t = result.timeline
    assert result.reconfigurations == 1
    capacity = predict(CHAIN, {"A": 3}, 0.0).max_rate
    owed = restart_cost_s(cfg, 30.0, capacity, float(t["arrival_rate"].iloc[1]))  # decided after window 1
    restarted = t[~t["settled"]]
    assert len(restarted) == 1 and restarted.index[0] == 2  # the window after the change
    assert restarted["violated_s"].iloc[0] == pytest.approx(min(owed, 2.0 * time_scale))
    # Settled windows are charged as measured (here: nothing, the job keeps up).
    assert not t[t["settled"]]["violated"].any()
    assert t[t["settled"]]["violated_s"].sum() == 0.0
    assert result.violation_minutes == pytest.approx(t["violated_s"].sum() / 60.0)
    assert result.violation_minutes == pytest.approx(min(owed, 2.0 * time_scale) / 60.0)


def test_the_first_window_counts_the_backlog_growth_from_zero():
    """The testbed starts with no backlog: the first window's arrival rate is processed plus the
    whole backlog it built (it used to count no growth: the processed rate only)."""
    from experiments.baselines import StaticPolicy
    from experiments.replay import PolicyController

    rate = 6000.0  # CHAIN can do 2000/s: once the queues are full, the backlog grows ~4000/s
    cfg = ReplayConfig(window_s=2.0, restart_s=30.0, latency_slo_ms=1e6, seed=3)
    t = drive(CHAIN, rate, PolicyController(StaticPolicy()), cfg, CHAIN.config, duration_s=6.0).timeline
    assert t["backlog"].iloc[0] > 1000.0
    assert t["arrival_rate"].iloc[0] == pytest.approx(rate, rel=0.05)
    assert t["arrival_rate"].iloc[1:].to_numpy() == pytest.approx(rate, rel=0.05)


@pytest.mark.parametrize("time_scale", [1.0, 120.0])
def test_a_stateful_restart_lasts_the_same_policy_time_whatever_the_compression(time_scale):
    """The truth's restart model (base + state / restore rate) runs compressed like the rest: a
    2 GB job at 100 MB/s with a 5 s base restarts in 25 policy seconds, at any compression; the
    replay actuator reports the same to the loop."""
    from dataclasses import replace as dc_replace

    from experiments.replay import ReplayActuator
    from experiments.testbed import Testbed, TestbedConfig

    stateful = dc_replace(CHAIN, operators=tuple(dc_replace(o, state_mb=2000.0) if o.name == "A" else o
                                                 for o in CHAIN.operators),
                          restart_base_s=5.0, restore_mb_per_s=100.0)
    cfg = ReplayConfig(window_s=2.0, time_scale=time_scale, restart_s=30.0, latency_slo_ms=1e6, seed=3)
    result = drive(stateful, 600.0, _OnceAt(4.0), cfg, CHAIN.config, duration_s=40.0 / time_scale + 8.0)
    assert result.reconfigurations == 1
    [change] = [e for e in result.events if e["event"] == "reconfigure"]
    assert change["detail"]["restart_s"] * time_scale == pytest.approx(25.0)
    assert change["detail"]["state_mb"] == 2000.0
    bed = Testbed(stateful, 600.0, TestbedConfig(seed=1, restart_s=30.0), parallelism=CHAIN.config)
    assert ReplayActuator(bed).apply({**CHAIN.config, "A": 3}).restart_s == pytest.approx(25.0)


def test_the_hindsight_bound_is_the_oracle_per_window_and_below_any_plan():
    import pandas as pd

    from experiments.reference import TrueOracle
    from experiments.tracereplay import hindsight_instance_hours

    timeline = pd.DataFrame({"rate": [300.0, 900.0, 1500.0, 900.0], "dt_s": [1800.0] * 4})
    hours = hindsight_instance_hours(CHAIN, timeline, latency_slo_ms=1e6, ceiling=0.7, resolution=0.0001)
    oracle = TrueOracle(CHAIN, 1e6, 0.7)
    expected = sum(oracle.instances(r * (1 - 1e-4)) for r in timeline["rate"]) * 0.5
    assert hours == pytest.approx(expected)
    # a lower bound: never above the instance-hours of holding, per window, what the planner picks
    from scheduler.plan import PlanConfig, plan

    planned = sum(plan(CHAIN, r, PlanConfig(utilization_target=0.7)).instances for r in timeline["rate"]) * 0.5
    assert hours <= planned + 1e-9
    assert hindsight_instance_hours(CHAIN, timeline.iloc[:0], 1e6) == 0.0
