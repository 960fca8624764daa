"""Baseline policies on hand-made window statistics."""

from __future__ import annotations

import networkx as nx
import pandas as pd
import pytest

from experiments.baselines import (DhalionPolicy, DS2Policy, FlinkAutoscalerPolicy, OperatorStats,
                                   StaticPolicy, window_stats)


def _graph():
    g = nx.DiGraph()
    g.add_node("src", max_parallelism=128, min_parallelism=1)
    g.add_node("a", max_parallelism=128, min_parallelism=1)
    g.add_node("b", max_parallelism=128, min_parallelism=1)
    g.add_edge("src", "a")
    g.add_edge("a", "b")
    return g


def _stats(arrival, a_busy=0.5, a_p=2, b_busy=0.2, src_bp=0.0, a_bp=0.0):
    processed = 1000.0
    return {
        "src": OperatorStats(1, processed, arrival, 0.0, 0.0, src_bp, {"a": processed}),
        "a": OperatorStats(a_p, processed, processed, a_busy, a_busy, a_bp, {"b": 2 * processed}),
        "b": OperatorStats(1, 2 * processed, 2 * processed, b_busy, b_busy, 0.0, {}),
    }


def test_window_stats_from_normalized_rows():
    rows = []
    for i, (rin, busy, bp) in enumerate([(600, 3000, 0), (400, 2000, 500)]):
        rows += [("a", i, "records_in", rin, None), ("a", i, "busy_ms", busy, None),
                 ("a", i, "backpressured_ms", bp, None), ("a", i, "records_out", 2 * rin, "b")]
    rows += [("src", 0, "records_in", 1000, None), ("src", 0, "source_lag", 500, None)]
    frame = pd.DataFrame(rows, columns=["operator", "instance", "metric", "value", "target"])
    stats = window_stats(frame, window_s=10.0, lag_before={"src": 300})
    a = stats["a"]
    assert a.parallelism == 2 and a.processed_rate == pytest.approx(100.0)
    assert a.busy_mean == pytest.approx(0.25) and a.busy_max == pytest.approx(0.3)
    assert a.backpressure_max == pytest.approx(0.05) and a.output_rates == {"b": pytest.approx(200.0)}
    # 1000 tuples in 10 s plus a backlog that grew by 200: 120 tuples/s arrived.
    assert stats["src"].arrival_rate == pytest.approx(120.0)
    assert a.true_rate_per_instance == pytest.approx(100.0 / 0.5)


def test_ds2_sizes_every_operator_from_true_rates():
    # a: 1000 tuples/s on 2 instances at 50 % busy -> 1000 tuples per busy second per instance.
    new = DS2Policy(_graph()).decide(0.0, _stats(arrival=3000.0), {"src": 1, "a": 2, "b": 1})
    # a needs 3000/1000 = 3; b gets 6000/s, true rate 2000/0.2 = 10000 -> 1.
    assert new == {"src": 1, "a": 3, "b": 1}


def test_flink_rules_target_utilization_and_band():
    policy = FlinkAutoscalerPolicy(_graph(), time_scale=1.0)
    config = {"src": 1, "a": 2, "b": 1}
    # Every vertex inside [0.4, 1.0]: no action.
    assert policy.decide(0.0, _stats(arrival=1000.0, b_busy=0.5), config) is None
    new = policy.decide(1.0, _stats(arrival=3000.0, a_busy=1.0), config)
    # Window averages of both samples: arrival 2000/s; a's MAX busy 0.75 -> true rate 1000/(0.75*2)
    # = 666.7 per instance; target capacity 2000 / 0.7 + 2000 * 300 s restart / 1800 s catch-up
    # = 3190.5 -> ceil(3190.5 / 666.7) = 5. b: 4000/s at true rate 2000/0.35 = 5714 per instance;
    # 4000 / 0.7 + 4000 / 6 = 6381 -> 2 (without the restart term exactly 1).
    assert new == {"src": 1, "a": 5, "b": 2}
    no_restart = FlinkAutoscalerPolicy(_graph(), time_scale=1.0, restart_s=0.0)
    no_restart.decide(0.0, _stats(arrival=1000.0, b_busy=0.5), config)
    assert no_restart.decide(1.0, _stats(arrival=3000.0, a_busy=1.0), config) == {"src": 1, "a": 5, "b": 1}
    # Stabilization: no new action within 5 minutes.
    assert policy.decide(100.0, _stats(arrival=9000.0, a_busy=1.0), new) is None


def test_flink_rules_scale_down_only_after_delay_and_by_at_most_60_percent():
    policy = FlinkAutoscalerPolicy(_graph(), metrics_window_s=1.0, stabilization_s=0.0)
    config = {"src": 1, "a": 10, "b": 1}
    low = _stats(arrival=1000.0, a_busy=0.1, a_p=10, b_busy=0.5)
    assert policy.decide(0.0, low, config) is None  # wants fewer, but the 1 h delay has not passed
    new = policy.decide(3601.0, low, config)
    # wants ceil(1000 / (1000*0.7)) = 2, but at most -60 % per step: 10 -> 4.
    assert new["a"] == 4


def test_dhalion_scales_one_bottleneck_by_its_factor_and_waits():
    policy = DhalionPolicy(_graph())
    config = {"src": 1, "a": 2, "b": 1}
    new = policy.decide(0.0, _stats(arrival=3000.0, src_bp=0.5), config)
    assert new == {"src": 1, "a": 4, "b": 1}  # 2 * (1 + 0.5 / 0.5)
    assert policy.decide(60.0, _stats(arrival=3000.0, src_bp=0.5), new) is None  # 3 min wait
    assert DhalionPolicy(_graph()).decide(0.0, _stats(arrival=1000.0), config) is None  # no back pressure


def test_static_never_acts():
    assert StaticPolicy().decide(0.0, _stats(arrival=1e6, src_bp=1.0), {"a": 1}) is None


def test_oracle_plans_for_the_peak_of_the_next_interval_plus_restart():
    from experiments.baselines import OraclePolicy
    from modeler.modelfile import load_model
    from scheduler.plan import plan

    model = load_model("examples/wordcount.yaml")
    rate_at = lambda t: 300.0 if t < 1000 else 3000.0  # noqa: E731
    low, high = dict(plan(model, 300.0).config), dict(plan(model, 3000.0).config)
    assert sum(high.values()) > sum(low.values())
    config = dict(model.config)
    oracle = OraclePolicy(model, rate_at, interval_s=900.0, restart_s=30.0, sample_s=10.0)
    first = oracle.decide(0.0, {}, config)
    assert first == low  # the peak of [0, 930] s is still 300/s
    assert oracle.decide(60.0, {}, first) is None  # decides once per interval
    # At 900 s the window [900, 1830] holds the step: sized for 3000/s before it arrives.
    assert oracle.decide(900.0, {}, first) == high
    # The restart time counts: at 0 s with interval 980 s, [0, 1010] s reaches the step.
    assert OraclePolicy(model, rate_at, interval_s=980.0, restart_s=30.0, sample_s=10.0).decide(
        0.0, {}, config) == high
    assert OraclePolicy(model, rate_at, interval_s=980.0, restart_s=0.0, sample_s=10.0).decide(
        0.0, {}, config) == low
