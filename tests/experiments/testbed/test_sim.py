"""The testbed against closed forms, Ciw, and the engine behaviours it must reproduce."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.testbed import (ConstantRate, HotKey, PiecewiseRate, Rescale, SlowInstance, Testbed,
                                 TestbedConfig)
from history.schema import TIME_TOLERANCE
from modeler.keys import instance_shares, key_group_weights
from modeler.modelfile import load_model, parse_model
from scheduler.loop import InstanceRestarter
from scheduler.interfaces import RAW_COLUMNS, ActuationFailed, Actuator, MetricsSource, MetricsUnavailable
from tests.conftest import EXAMPLES
from tests.experiments.testbed.conftest import chain, per_window


def _sojourn_after(tb, warmup_s, total_s):
    tb.advance(warmup_s)
    before = {k: (v["processed"], v["mean_sojourn_ms"] * v["processed"]) for k, v in tb.operator_stats().items()}
    tb.advance(total_s - warmup_s)
    out = {}
    for k, v in tb.operator_stats().items():
        n0, s0 = before[k]
        out[k] = (v["mean_sojourn_ms"] * v["processed"] - s0) / (v["processed"] - n0)
    return out


def test_jackson_network_matches_closed_forms():
    # random split + exponential service + Poisson input + big queues: M/M/1 per instance
    # (A: 2 instances at 150/s each, mu 400/s; B: Burke -> Poisson 300/s, mu 500/s).
    model = chain(a_ms=2.5, b_ms=2.0, p_a=2)
    tb = Testbed(model, 300.0, TestbedConfig(seed=11, shuffle="random", queue_capacity=1_000_000))
    soj = _sojourn_after(tb, 20, 2000)
    assert soj["A"] == pytest.approx(1000.0 / (400 - 150), rel=0.05)
    assert soj["B"] == pytest.approx(1000.0 / (500 - 300), rel=0.05)
    assert tb.conservation().balanced()


@pytest.mark.slow
def test_round_robin_gamma_chain_matches_ciw():
    from tests.experiments.testbed.ciw_chain import chain_sojourns

    model = chain(a_ms=4.0, b_ms=1.6, p_a=2, a_scv=0.5)
    tb = Testbed(model, 300.0, TestbedConfig(seed=5, queue_capacity=1_000_000))
    soj = _sojourn_after(tb, 20, 2000)
    ciw_a, ciw_b, n = chain_sojourns(0.3, 2, 4.0, 0.5, 1.6, horizon_ms=300_000, warmup_ms=5_000, seed=3)
    assert n > 50_000
    assert soj["A"] == pytest.approx(ciw_a, rel=0.05)
    assert soj["B"] == pytest.approx(ciw_b, rel=0.05)


def test_back_pressure_throttles_sources_to_the_bottleneck():
    model = chain(a_ms=1.0, b_ms=0.5)  # A saturates at 1000 tuples/s
    tb = Testbed(model, 1500.0, TestbedConfig(seed=2, queue_capacity=100))
    tb.advance(200)
    f = tb.frame()
    late = lambda s: s[s.index >= s.index[0] + pd.Timedelta(seconds=50)]  # noqa: E731
    achieved = late(per_window(f, "records_out", "src")) / 10.0
    assert achieved.mean() == pytest.approx(1000.0, rel=0.05)
    lag = per_window(f, "source_lag", "src")
    slope = np.polyfit(np.arange(len(lag)) * 10.0, lag.to_numpy(), 1)[0]
    assert slope == pytest.approx(1500.0 - achieved.mean(), rel=0.05)
    assert slope == pytest.approx(500.0, rel=0.05)
    bp = late(per_window(f, "backpressured_ms", "src"))
    assert (bp > 5000).all()  # the source spends most of its time blocked
    busy_a = late(per_window(f, "busy_ms", "A"))
    assert (busy_a > 9900).all()
    assert (late(per_window(f, "backpressured_ms", "B")) == 0).all()


def test_back_pressure_drains_the_backlog_when_capacity_returns():
    model = chain(a_ms=1.0, b_ms=0.5)
    load = PiecewiseRate(times_s=(0.0, 30.0), rates=(1400.0, 500.0))
    tb = Testbed(model, load, TestbedConfig(seed=4, queue_capacity=100))
    tb.advance(30)
    lag_peak = tb.read().rows
    peak = max(r[6] for r in lag_peak if r[5] == "source_lag")
    assert peak > 8000  # ~400/s for 30 s
    tb.advance(60)  # 500 spare tuples/s drain ~12,000 in ~24 s
    lag = per_window(tb.frame(), "source_lag", "src")
    assert lag.iloc[-1] == 0
    assert tb.conservation().balanced()


def test_key_skew_shares_follow_flink_key_groups_and_the_hottest_saturates_first():
    model = load_model(EXAMPLES / "wordcount.yaml").with_config({"count": 4, "split": 4})
    spec = next(e for e in model.edges if e.target == "count").keys
    expected = instance_shares(key_group_weights(spec, 128), 4)
    tb = Testbed(model, 400.0, TestbedConfig(seed=7))
    tb.advance(100)
    f = tb.frame()
    got = np.array([per_window(f, "records_in", "count", i).sum() for i in range(4)])
    np.testing.assert_allclose(got / got.sum(), expected, atol=0.005)

    # push until the hottest instance saturates: the others keep headroom, split is throttled
    hot = int(np.argmax(expected))
    rate = 0.98 * 1000.0 / (7.0 * 0.2 * expected[hot])  # just above the hottest instance's capacity
    tb = Testbed(model, rate * 1.1, TestbedConfig(seed=7, queue_capacity=200))
    tb.advance(80)
    f = tb.frame()
    f = f[f.ts >= f.ts.min() + pd.Timedelta(seconds=30)]
    busy = np.array([per_window(f, "busy_ms", "count", i).mean() / 10_000 for i in range(4)])
    assert busy[hot] > 0.98
    assert np.delete(busy, hot).max() < 0.9
    assert per_window(f, "backpressured_ms", "split").mean() > 0


def test_reconfiguration_pauses_keeps_every_tuple_and_reports_the_new_parallelism():
    model = load_model(EXAMPLES / "wordcount.yaml")
    tb = Testbed(model, 900.0, TestbedConfig(seed=3, restart_s=20.0, queue_capacity=100))
    tb.advance(30)
    assert tb.conservation().balanced()
    act = tb.apply({"split": 3, "count": 4}, reason="test")
    assert act.applied and act.restart_s == 20.0 and tb.current()["count"] == 4
    for _ in range(6):
        tb.advance(5)
        c = tb.conservation()
        assert c.balanced(), c
    tb.advance(30)
    c = tb.conservation()
    assert c.balanced()
    f = tb.frame()
    for op in ("split", "count"):
        done = per_window(f, "records_in", op)
        # windows [30, 40) and [40, 50) lie inside the restart: nothing processed
        assert done.iloc[3] == 0 and done.iloc[4] == 0
        assert done.iloc[2] > 0 and done.iloc[6] > 0
    src = per_window(f, "records_out", "src" if "src" in f.operator.values else "source")
    assert src.iloc[3] < src.iloc[1]  # blocked by back pressure during the restart
    par = f[f.metric == "parallelism"].pivot_table(index="ts", columns="operator", values="value")
    assert par["count"].iloc[2] == 2 and par["count"].iloc[-1] == 4
    last = f[f.ts == f.ts.max()]
    assert sorted(last[(last.operator == "count") & (last.metric == "records_in")].instance) == [0, 1, 2, 3]
    events = [e["event"] for e in tb.events]
    assert events.count("reconfigure") == 1 and events.count("restart_done") == 2
    assert not tb.apply({"count": 4}).applied


def test_job_scope_restart_pauses_every_operator_and_keeps_the_backlog():
    model = load_model(EXAMPLES / "wordcount.yaml")
    tb = Testbed(model, 500.0, TestbedConfig(seed=3, restart_s=10.0, restart_scope="job"))
    tb.advance(20)
    tb.apply({"count": 3})
    tb.advance(10)
    lag = per_window(tb.frame(), "source_lag", "source")
    assert lag.iloc[-1] > 4000  # 10 s of arrivals waiting outside the job
    tb.advance(30)
    assert per_window(tb.frame(), "source_lag", "source").iloc[-1] < 50
    assert tb.conservation().balanced()


def test_same_seed_same_metrics_other_seed_other_metrics():
    model = load_model(EXAMPLES / "diamond.yaml")
    faults = (SlowInstance("enrich", 1, 2.0, 10, 30), Rescale(35, {"merge": 3}))

    def run(seed):
        tb = Testbed(model, 900.0, TestbedConfig(seed=seed, network_delay_distribution="exponential"),
                     faults=faults)
        tb.advance(60)
        return tb.frame(), tb.events_frame()

    (f1, e1), (f2, e2), (f3, _) = run(1), run(1), run(2)
    pd.testing.assert_frame_equal(f1, f2)
    pd.testing.assert_frame_equal(e1, e2)
    assert not f1["value"].equals(f3["value"])


def test_metrics_source_and_actuator_contract():
    model = load_model(EXAMPLES / "pipeline.yaml")
    tb = Testbed(model, 600.0, TestbedConfig(seed=1, window_s=5.0))
    assert isinstance(tb, MetricsSource) and isinstance(tb, Actuator)
    with pytest.raises(MetricsUnavailable):
        tb.read()  # no complete window yet
    tb.advance(12)  # two complete windows, one partial
    batch = tb.read()
    assert batch.window_s == 5.0 and batch.config == tb.current()
    starts = sorted({r[0] for r in batch.rows})
    assert len(starts) == 2 and all(len(r) == len(RAW_COLUMNS) for r in batch.rows)
    assert batch.as_of_s == pd.Timestamp("2026-01-01T00:00:10Z").timestamp()
    with pytest.raises(MetricsUnavailable):
        tb.read(batch.as_of_s)
    tb.advance(3)
    newer = tb.read(batch.as_of_s)
    assert {r[0] for r in newer.rows} == {pd.Timestamp("2026-01-01T00:00:10Z")}
    frame = newer.to_frame()
    times = frame[frame.metric.isin(["busy_ms", "backpressured_ms", "idle_ms"])]
    total = times.groupby(["operator", "instance"]).value.sum()
    assert (total <= 5000 * (1 + TIME_TOLERANCE)).all()
    assert (frame.value >= 0).all()
    # the sink carries latency rows; records_out only with a target
    assert {"latency_ms_mean", "latency_ms_p99"} <= set(frame[frame.operator == "sink"].metric)
    assert frame[frame.metric != "records_out"].target.isna().all()


def test_slow_instance_fault_multiplies_its_service_time():
    model = chain(a_ms=1.0, b_ms=0.2, p_a=2)
    faults = (SlowInstance("A", 1, 3.0, 20, 40),)
    tb = Testbed(model, 500.0, TestbedConfig(seed=9), faults=faults)
    tb.advance(60)
    f = tb.frame()
    busy = per_window(f, "busy_ms", "A", 1)
    n = per_window(f, "records_in", "A", 1)
    per_tuple = (busy / n).to_numpy()
    assert per_tuple[:2].mean() == pytest.approx(1.0, rel=0.1)
    assert per_tuple[2:4].mean() == pytest.approx(3.0, rel=0.1)
    assert per_tuple[4:].mean() == pytest.approx(1.0, rel=0.1)
    kinds = [(e["event"], e["detail"].get("type")) for e in tb.events]
    assert ("fault_start", "slow_instance") in kinds and ("fault_end", "slow_instance") in kinds



def test_restart_instance_ends_its_slow_fault_and_survives_the_fault_end():
    model = chain(a_ms=1.0, b_ms=0.2, p_a=2)
    faults = (SlowInstance("A", 1, 3.0, 10, 40),)
    tb = Testbed(model, 500.0, TestbedConfig(seed=9), faults=faults)
    assert isinstance(tb, InstanceRestarter)
    tb.advance(30)
    act = tb.restart_instance("A", 1, reason="slow")
    assert act.applied and act.config == tb.current()
    tb.advance(30)  # passes the fault's scheduled end at 40 s
    f = tb.frame()
    per_tuple = (per_window(f, "busy_ms", "A", 1) / per_window(f, "records_in", "A", 1)).to_numpy()
    assert per_tuple[1:3].mean() == pytest.approx(3.0, rel=0.1)
    assert per_tuple[3:].mean() == pytest.approx(1.0, rel=0.1)
    restart = next(e for e in tb.events if e["event"] == "restart_instance")
    assert restart["operator"] == "A" and restart["detail"]["slow_faults_ended"] == 1
    with pytest.raises(ActuationFailed, match="instance"):
        tb.restart_instance("A", 2)
    with pytest.raises(ActuationFailed, match="operator"):
        tb.restart_instance("nope", 0)

def test_hot_key_fault_sends_its_share_to_one_instance():
    model = load_model(EXAMPLES / "wordcount.yaml").with_config({"count": 4})
    spec = next(e for e in model.edges if e.target == "count").keys
    base = instance_shares(key_group_weights(spec, 128), 4)
    tb = Testbed(model, 300.0, TestbedConfig(seed=5), faults=(HotKey("split", "count", 0.5, 30),))
    tb.advance(80)
    hot = next(e for e in tb.events if e["event"] == "fault_start")["detail"]["instance"]
    f = tb.frame()
    after = f[f.ts >= f.ts.min() + pd.Timedelta(seconds=30)]
    got = np.array([per_window(after, "records_in", "count", i).sum() for i in range(4)])
    want = 0.5 * base
    want[hot] += 0.5
    np.testing.assert_allclose(got / got.sum(), want, atol=0.01)


def test_output_batching_adds_the_flush_wait_and_loses_nothing():
    model = chain(a_ms=0.2, b_ms=0.2, p_a=2, p_b=2)
    plain = Testbed(model, 200.0, TestbedConfig(seed=1))
    batched = Testbed(model, 200.0, TestbedConfig(seed=1, buffer_timeout_ms=20.0, buffer_records=1000))
    plain.advance(30)
    batched.advance(30)
    lat_plain, lat_batched = plain.latencies_ms().mean(), batched.latencies_ms().mean()
    assert lat_plain < 2
    # each hop after a source or A waits up to the 20 ms timeout (buffers rarely fill at 200/s)
    assert 15 < lat_batched < 45
    assert batched.conservation().balanced()
    assert batched.operator_stats()["B"]["processed"] == pytest.approx(
        plain.operator_stats()["B"]["processed"], rel=0.05)


def test_broadcast_and_forward_groupings():
    model = parse_model({
        "augury": 1, "job": "groupings",
        "operators": [{"name": "src", "role": "source", "parallelism": 2},
                      {"name": "fw", "parallelism": 2, "service_time_ms": 0.1},
                      {"name": "bc", "parallelism": 3, "service_time_ms": 0.1}],
        "edges": [{"from": "src", "to": "fw", "grouping": "forward"},
                  {"from": "fw", "to": "bc", "grouping": "broadcast", "selectivity": 0.5}],
    })
    tb = Testbed(model, 1000.0, TestbedConfig(seed=2))
    tb.advance(20)
    st = tb.operator_stats()
    assert st["fw"]["processed"] == st["src"]["processed"] - 0  # forward: one to one
    f = tb.frame()
    out = per_window(f, "records_out", "fw", target="bc").sum()
    assert st["bc"]["processed"] == pytest.approx(out, abs=5)
    assert out == pytest.approx(0.5 * 3 * st["fw"]["processed"], rel=0.03)
    each = [per_window(f, "records_in", "bc", i).sum() for i in range(3)]
    assert max(each) - min(each) <= 3  # every instance gets every copy


def test_contention_overhead_slows_instances_as_parallelism_grows():
    model = chain(a_ms=1.0, b_ms=0.1, p_a=4)
    tb = Testbed(model, 400.0, TestbedConfig(seed=1, contention_overhead=0.1))
    tb.advance(30)
    f = tb.frame()
    per_tuple = per_window(f, "busy_ms", "A").sum() / per_window(f, "records_in", "A").sum()
    assert per_tuple == pytest.approx(1.3, rel=0.05)  # 1 + 0.1 * (4 - 1)


def test_constant_rate_and_sources_with_service_time():
    model = parse_model({
        "augury": 1, "job": "srv",
        "operators": [{"name": "src", "role": "source", "parallelism": 2, "service_time_ms": 1.0},
                      {"name": "sink", "service_time_ms": 0.1}],
        "edges": [{"from": "src", "to": "sink"}],
    })
    tb = Testbed(model, ConstantRate(1000.0), TestbedConfig(seed=3))
    tb.advance(30)
    f = tb.frame()
    busy = per_window(f, "busy_ms", "src") / 20_000  # two instances
    assert busy.mean() == pytest.approx(0.5, rel=0.05)  # 500/s per instance at 1 ms
    assert per_window(f, "records_in", "src").sum() == pytest.approx(30_000, rel=0.03)
