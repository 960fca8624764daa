"""Hosts in the testbed (issue 26): placement, the host on metric rows, host faults, move_off_host."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.testbed import Rescale, SlowInstance, Testbed, TestbedConfig, TestbedError, parse_faults
from experiments.testbed import kernel as K
from experiments.testbed.faults import DEFAULT_DETECTION_S, LostHost, LostRack, SlowHost, SlowLink
from experiments.testbed.hosts import host_name, hosts_of_rack, rack_of, slot_host
from scheduler.interfaces import ActuationFailed
from tests.experiments.testbed.conftest import chain, per_window


def _frames_equal(a: Testbed, b: Testbed) -> bool:
    fa, fb = a.frame(), b.frame()
    return fa.equals(fb) and (a.latencies_ms() == b.latencies_ms()).all() and a.hops == b.hops


# ------------------------------------------------------------------ placement


def test_slot_rule_spreads_round_robin_and_gives_excluded_slots_to_the_rest():
    assert [slot_host(l, 3) for l in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    # host 1 excluded: its slots 1, 5, 9 go round-robin over hosts 0, 2, 3
    assert [slot_host(l, 4, {1}) for l in range(12)] == [0, 0, 2, 3, 0, 2, 2, 3, 0, 3, 2, 3]
    assert all(slot_host(l, 4, {1, 2}) in (0, 3) for l in range(20))
    assert rack_of(5, 2) == 2 and rack_of(5, None) == 0 and hosts_of_rack(1, 5, 2) == [2, 3]


def test_placement_is_deterministic_spread_and_kept_by_operators_a_rescale_does_not_restart():
    cfg = TestbedConfig(seed=1, hosts=3, window_s=1)
    tb = Testbed(chain(p_a=4, p_b=2), 500.0, cfg, parallelism={"src": 2})
    place = tb.placement()
    assert place == Testbed(chain(p_a=4, p_b=2), 900.0, cfg, parallelism={"src": 2}).placement()
    assert place == {("src", 0): 0, ("src", 1): 1, ("A", 0): 0, ("A", 1): 1, ("A", 2): 2, ("A", 3): 0,
                     ("B", 0): 0, ("B", 1): 1}
    tb.advance(1)
    tb.apply({"A": 5})
    assert tb.placement() == {**place, ("A", 4): 1}
    # without hosts: one implicit host
    assert set(Testbed(chain(p_a=4), 500.0, TestbedConfig(seed=1)).placement().values()) == {0}


def test_every_per_instance_row_names_its_host():
    tb = Testbed(chain(p_a=3, p_b=2), 800.0, TestbedConfig(seed=1, hosts=2, window_s=1))
    tb.advance(3)
    f = tb.frame()
    place = tb.placement()
    per_instance = f[f.metric != "parallelism"]
    assert per_instance["host"].notna().all()
    assert all(h == host_name(place[(o, i)]) for o, i, h in
               zip(per_instance.operator, per_instance.instance, per_instance.host))
    assert f[f.metric == "parallelism"]["host"].isna().all()
    assert {"latency_ms_p99", "queue_len", "source_lag"} <= set(per_instance.metric)


def test_without_hosts_or_with_hosts_and_no_host_fault_the_run_is_unchanged():
    # batching, random network delay, a slow instance and a rescale: every path the hosts touch
    def run(hosts):
        model = chain(a_ms=1.0, b_ms=0.5, p_a=2, buffer_timeout_ms=5, buffer_records=16, network_delay_ms=1.0)
        tb = Testbed(model, 1500.0, TestbedConfig(seed=2, queue_capacity=100, hosts=hosts,
                                                   network_delay_distribution="exponential"),
                     faults=[SlowInstance("A", 0, 3.0, 2, 8), Rescale(at_s=10, config={"A": 3})])
        tb.advance(20)
        return tb

    base = run(None)
    assert "host" not in base.frame()
    for hosts in (1, 3):
        other = run(hosts)
        assert other.frame()["host"].notna().any()
        assert base.frame().equals(other.frame().drop(columns="host"))
        assert (base.latencies_ms() == other.latencies_ms()).all() and base.hops == other.hops


def test_hosts_settings_are_checked():
    with pytest.raises(TestbedError, match="hosts"):
        TestbedConfig(hosts=0).validate()
    with pytest.raises(TestbedError, match="hosts_per_rack"):
        TestbedConfig(hosts_per_rack=2).validate()


# ------------------------------------------------------------------ fault files


def test_host_faults_parse_with_defaults_and_typed_errors():
    faults = parse_faults({"faults": [
        {"type": "slow_host", "host": 1, "factor": 2.0, "start_s": 5, "end_s": 9},
        {"type": "slow_link", "host": 0, "delay_ms": 20, "start_s": 0},
        {"type": "slow_link", "host": 0, "bandwidth": 500, "start_s": 0, "end_s": 3},
        {"type": "lost_host", "host": 2, "start_s": 10, "detection_s": 4},
        {"type": "lost_rack", "rack": 1, "start_s": 10},
    ]})
    assert faults == (SlowHost(1, 2.0, 5.0, 9.0), SlowLink(0, 0.0, delay_ms=20.0),
                      SlowLink(0, 0.0, 3.0, bandwidth=500.0), LostHost(2, 10.0, 4.0),
                      LostRack(1, 10.0, DEFAULT_DETECTION_S))
    for bad, field in [({"type": "slow_link", "host": 0, "start_s": 0}, "faults[0].delay_ms"),
                       ({"type": "slow_link", "host": 0, "bandwidth": 0, "start_s": 0}, "faults[0].bandwidth"),
                       ({"type": "slow_host", "host": -1, "factor": 2, "start_s": 0}, "faults[0].host"),
                       ({"type": "slow_host", "host": 1.5, "factor": 2, "start_s": 0}, "faults[0].host"),
                       ({"type": "lost_host", "host": 0, "start_s": 0, "end_s": 5}, "faults[0].end_s"),
                       ({"type": "lost_rack", "start_s": 0}, "faults[0].rack")]:
        with pytest.raises(TestbedError) as err:
            parse_faults([bad], "f.yaml")
        assert err.value.field == field and err.value.file == "f.yaml"


@pytest.mark.parametrize("hosts, per_rack, faults, field", [
    (None, None, [SlowHost(0, 2.0, 0.0)], "faults[0].type"),
    (2, None, [SlowLink(2, 0.0, delay_ms=1.0)], "faults[0].host"),
    (4, 2, [LostRack(2, 0.0)], "faults[0].rack"),
    (4, 2, [LostRack(0, 0.0), LostHost(2, 0.0), LostHost(3, 5.0)], "faults[2]"),  # nothing left
    (2, 2, [LostRack(0, 0.0)], "faults[0]"),
])
def test_host_faults_are_checked_against_the_hosts(hosts, per_rack, faults, field):
    with pytest.raises(TestbedError) as err:
        Testbed(chain(), 100.0, TestbedConfig(hosts=hosts, hosts_per_rack=per_rack), faults=faults)
    assert err.value.field == field


# ------------------------------------------------------------------ host faults


def _per_instance(tb: Testbed, metric: str, after_s: float = 0.0) -> dict:
    f = tb.frame()
    f = f[(f.metric == metric) & (f.ts >= f.ts.min() + pd.Timedelta(seconds=after_s))]
    return f.groupby(["operator", "instance"])["value"].mean().to_dict()


def test_slow_host_multiplies_the_service_time_of_exactly_its_instances():
    def run(faults):
        # deterministic service: busy time per tuple is the service time itself
        model = chain(a_ms=1.0, b_ms=0.5, p_a=2, p_b=2, a_scv=0)
        tb = Testbed(model, 300.0, TestbedConfig(seed=1, hosts=2, window_s=1), faults=faults)
        tb.advance(4)
        busy, n = _per_instance(tb, "busy_ms", 2), _per_instance(tb, "records_in", 2)
        return {k: busy[k] / n[k] for k in busy if n[k]}, tb

    base, _ = run([])
    slow, tb = run([SlowHost(1, 3.0, 1.0)])
    on_host = {k for k, h in tb.placement().items() if h == 1}
    assert on_host == {("A", 1), ("B", 1)}
    for k in base:
        assert slow[k] == pytest.approx(base[k] * (3.0 if k in on_host else 1.0), rel=0.1), k
    assert slow[("A", 1)] == pytest.approx(3.0, rel=0.01)
    assert [e["detail"]["instances"] for e in tb.events if e["event"] == "fault_start"] == [["A[1]", "B[1]"]]


def test_lost_host_rows_vanish_then_the_job_restarts_off_the_host_and_keeps_every_tuple():
    tb = Testbed(chain(p_a=3, p_b=3), 600.0, TestbedConfig(seed=1, hosts=3, window_s=1, restart_s=2),
                 faults=[LostHost(1, start_s=3.0, detection_s=2.0)])
    for _ in range(10):
        tb.advance(1)
        assert tb.conservation().balanced()
    f = tb.frame()
    second = (f.ts - f.ts.min()).dt.total_seconds()
    hosts = f.groupby(second)["host"].apply(lambda h: set(h.dropna()))
    assert all(hosts[t] == {"host-0", "host-1", "host-2"} for t in (0, 1, 2))
    assert all(hosts[t] == {"host-0", "host-2"} for t in range(3, 10))  # gone from 3 s on
    rows = f[f.metric == "records_in"].groupby(second)["instance"].apply(
        lambda i: sorted(zip(f.loc[i.index, "operator"], i)))
    assert ("A", 1) not in rows[3] and ("B", 1) not in rows[4] and ("A", 0) in rows[3]
    assert ("A", 1) in rows[5]  # restarted (restarting: nothing processed) on another host
    assert set(tb.placement().values()) == {0, 2}
    events = [(e["t_s"], e["event"], e["detail"].get("type")) for e in tb.events if e["event"] != "run_start"]
    assert events == [(3.0, "fault_start", "lost_host"), (5.0, "failover", "lost_host"),
                      (7.0, "restart_done", None), (7.0, "restart_done", None)]
    failover = next(e for e in tb.events if e["event"] == "failover")["detail"]
    assert failover["restarted"] == ["A", "B"] and failover["restart_s"] == 2.0  # src was not on host 1
    processed = per_window(f, "records_in", "B")
    assert processed.iloc[5:7].sum() == 0 and processed.iloc[7:].min() > 0


def test_lost_rack_kills_its_hosts_and_a_job_scope_failover_restarts_everything():
    tb = Testbed(chain(p_a=4, p_b=4), 600.0,
                 TestbedConfig(seed=1, hosts=4, hosts_per_rack=2, window_s=1, restart_s=1, restart_scope="job"),
                 faults=[LostRack(1, start_s=1.0, detection_s=1.0)])
    tb.advance(4)
    assert tb.conservation().balanced()
    assert set(tb.placement().values()) == {0, 1}
    failover = next(e for e in tb.events if e["event"] == "failover")["detail"]
    assert failover["hosts"] == [2, 3] and failover["restarted"] == ["A", "B", "src"]
    f = tb.frame()
    assert set(f[f.ts == f.ts.min() + pd.Timedelta(seconds=1)]["host"].dropna()) == {"host-0", "host-1"}


def test_slow_link_delays_only_tuples_leaving_its_host_for_another():
    # src, A (one instance each) on host 0 -> B[0] on host 0, B[1] on host 1
    def run(faults, **batching):
        model = chain(a_ms=0.5, b_ms=0.5, p_a=1, p_b=2, a_scv=0, network_delay_ms=1.0, **batching)
        tb = Testbed(model, 200.0, TestbedConfig(seed=1, hosts=2, window_s=1), faults=faults)
        tb.advance(4)
        return _per_instance(tb, "latency_ms_mean", 1), tb

    for batching in ({}, {"buffer_timeout_ms": 5, "buffer_records": 8}):
        base, _ = run([], **batching)
        slow, tb = run([SlowLink(0, 0.0, delay_ms=20.0)], **batching)
        assert slow[("B", 1)] - base[("B", 1)] == pytest.approx(20.0, abs=1.0)  # host 0 -> host 1
        assert slow[("B", 0)] == pytest.approx(base[("B", 0)], abs=1.0)  # host 0 -> host 0
        assert tb.conservation().balanced()


def test_slow_link_bandwidth_back_pressures_the_sender_while_its_downstream_idles():
    # A (host 0) sends half of 400 tuples/s to B[1] on host 1 over a 100 tuples/s link; round-robin
    # makes it wait for that link between its sends to B[0] as well
    model = chain(a_ms=0.5, b_ms=0.5, p_a=1, p_b=2, network_delay_ms=1.0)
    tb = Testbed(model, 400.0, TestbedConfig(seed=1, hosts=2, window_s=1, queue_capacity=200),
                 faults=[SlowLink(0, 1.0, bandwidth=100.0)])
    tb.advance(6)
    bp, idle, busy = (_per_instance(tb, m, 2) for m in ("backpressured_ms", "idle_ms", "busy_ms"))
    n = _per_instance(tb, "records_in", 2)
    assert bp[("A", 0)] > 800 and busy[("A", 0)] < 150  # back-pressured, not busy
    assert idle[("B", 0)] > 900 and idle[("B", 1)] > 900 and bp[("B", 1)] == 0
    assert n[("B", 1)] == pytest.approx(100.0, rel=0.05)  # the link's bandwidth
    lag = per_window(tb.frame(), "source_lag", "src")
    assert lag.iloc[-1] > lag.iloc[2] > 0  # back pressure reached the source
    assert tb.conservation().balanced()


def test_the_kernel_gives_the_same_host_results_as_plain_python(monkeypatch):
    if not K.HAVE_NUMBA:
        pytest.skip("the kernel already runs as plain Python")

    def run():
        model = chain(a_ms=1.0, b_ms=0.5, p_a=2, p_b=2, network_delay_ms=1.0, buffer_timeout_ms=2,
                      buffer_records=4)
        tb = Testbed(model, 800.0, TestbedConfig(seed=3, hosts=2, window_s=0.5, queue_capacity=30, restart_s=0.2),
                     faults=[SlowLink(1, 0.0, delay_ms=3.0, bandwidth=150.0), SlowHost(0, 1.5, 0.2),
                             LostHost(1, 0.6, 0.2)])
        tb.advance(1.5)
        return tb

    compiled = run()
    monkeypatch.setattr(K, "run", K.run.py_func)
    assert _frames_equal(compiled, run())


# ------------------------------------------------------------------ actuator


def test_move_off_host_empties_the_host_at_once_and_ends_its_slowness():
    model = chain(a_ms=1.0, b_ms=0.5, p_a=3, p_b=3, a_scv=0)
    tb = Testbed(model, 600.0, TestbedConfig(seed=1, hosts=3, window_s=1), faults=[SlowHost(1, 2.0, 0.0)])
    tb.advance(2)
    act = tb.move_off_host(1, reason="bad disk")
    assert act.applied and act.restart_s == 0.0 and act.config == tb.current() and "bad disk" in act.detail
    assert 1 not in tb.placement().values()
    event = tb.events[-1]
    assert event["event"] == "move_off_host" and event["detail"]["moved"] == {"A[1]": 0, "B[1]": 0}
    tb.advance(2)
    f = tb.frame()
    late = f[f.ts >= f.ts.min() + pd.Timedelta(seconds=2)]
    assert "host-1" not in set(late["host"]) and "host-1" in set(f["host"])
    busy, n = _per_instance(tb, "busy_ms", 2), _per_instance(tb, "records_in", 2)
    assert busy[("A", 1)] / n[("A", 1)] == pytest.approx(1.0, rel=0.01)  # no longer on the slow host
    assert tb.conservation().balanced()
    assert not tb.move_off_host(1).applied  # already avoided
    tb.apply({"A": 4})  # later placements avoid it too
    assert 1 not in tb.placement().values()
    tb.move_off_host(0)
    assert set(tb.placement().values()) == {2}
    with pytest.raises(ActuationFailed, match="no other live host"):
        tb.move_off_host(2)
    with pytest.raises(ActuationFailed, match="no such host"):
        tb.move_off_host(3)
    with pytest.raises(ActuationFailed, match="no hosts"):
        Testbed(model, 100.0, TestbedConfig()).move_off_host(0)


def test_move_off_a_lost_host_fails_it_over_before_detection():
    tb = Testbed(chain(p_a=2, p_b=2), 300.0, TestbedConfig(seed=1, hosts=2, window_s=1, restart_s=1),
                 faults=[LostHost(1, start_s=1.0, detection_s=30.0)])
    tb.advance(2)
    act = tb.move_off_host(1)
    assert act.applied and act.restart_s == 1.0 and set(tb.placement().values()) == {0}
    tb.advance(2)
    assert tb.conservation().balanced() and per_window(tb.frame(), "records_in", "B").iloc[-1] > 0
