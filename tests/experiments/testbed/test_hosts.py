"""Hosts in the testbed (issue 26): placement, the host on metric rows, host faults, move_off_host."""

from __future__ import annotations

import pytest

from experiments.testbed import Rescale, SlowInstance, Testbed, TestbedConfig, TestbedError
from experiments.testbed.hosts import host_name, hosts_of_rack, rack_of, slot_host
from tests.experiments.testbed.conftest import chain


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
