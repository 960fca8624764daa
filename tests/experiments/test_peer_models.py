"""The peers' models against closed forms (M/M/1, M/M/k Erlang C, Kingman, Jackson tandem)."""

from __future__ import annotations

import math

import pytest

from experiments.peer_models import (caladrius_predict, drs_predict, erlang_c, kingman_wait,
                                     mmk_sojourn, peer_predict)
from modeler.modelfile import parse_model


def _chain(service_ms=(1.0,), scv=None, parallelism=None, selectivity=1.0, delay_ms=0.0):
    scv = scv or (1.0,) * len(service_ms)
    parallelism = parallelism or (1,) * len(service_ms)
    assert len(scv) == len(parallelism) == len(service_ms)
    ops = [{"name": "src", "role": "source", "parallelism": 1}]
    edges = []
    prev = "src"
    for i, (es, c, p) in enumerate(zip(service_ms, scv, parallelism)):
        ops.append({"name": f"op{i}", "parallelism": p, "service_time_ms": es, "service_scv": c})
        edges.append({"from": prev, "to": f"op{i}", "grouping": "shuffle",
                      "selectivity": selectivity if i > 0 else 1.0})
        prev = f"op{i}"
    return parse_model({"augury": 1, "job": "t", "network_delay_ms": delay_ms,
                        "operators": ops, "edges": edges})


def test_erlang_c_hand_values():
    # M/M/2, a = 1.5: C = (a^2/2 / (1 - 0.75)) / (1 + a + a^2/2 / 0.25) = 4.5 / 7
    assert erlang_c(2, 1.5) == pytest.approx(4.5 / 7)
    # M/M/1: C = rho
    assert erlang_c(1, 0.3) == pytest.approx(0.3)
    assert erlang_c(3, 0.0) == 0.0
    assert erlang_c(3, 3.0) == 1.0
    # direct formula for k = 4, a = 2.8
    k, a = 4, 2.8
    top = a**k / math.factorial(k) / (1 - a / k)
    assert erlang_c(k, a) == pytest.approx(top / (sum(a**n / math.factorial(n) for n in range(k)) + top))


def test_mmk_sojourn_closed_forms():
    # M/M/1: T = 1 / (mu - lambda)
    assert mmk_sojourn(0.6, 1.0, 1) == pytest.approx(1 / 0.4)
    # M/M/2: T = 1 / (mu (1 - rho^2)) with rho = lambda / (2 mu)
    assert mmk_sojourn(1.5, 1.0, 2) == pytest.approx(1 / (1 - 0.75**2))
    assert math.isinf(mmk_sojourn(2.0, 1.0, 2))


def test_kingman_is_exact_for_mm1_and_pk_for_md1():
    assert kingman_wait(0.5, 1.0, 1.0, 2.0) == pytest.approx(0.5 / 0.5 * 2.0)
    # M/D/1 (Pollaczek-Khinchine): Wq = rho E[S] / (2 (1 - rho))
    assert kingman_wait(0.8, 1.0, 0.0, 1.0) == pytest.approx(0.8 / (2 * 0.2))
    assert math.isinf(kingman_wait(1.0, 1.0, 1.0, 1.0))


def test_single_mm1_operator_both_peers():
    model = _chain(service_ms=(2.0,))
    rate = 300.0  # rho = 0.6
    expected = 2.0 / (1 - 0.6)
    assert caladrius_predict(model, None, rate).latency_mean_ms == pytest.approx(expected)
    assert drs_predict(model, None, rate).latency_mean_ms == pytest.approx(expected)
    for name in ("caladrius", "drs"):
        p = peer_predict(name, model, None, rate)
        assert p.max_rate == pytest.approx(500.0)
        assert not p.saturated


def test_tandem_sums_sojourns_with_network_delay():
    model = _chain(service_ms=(1.0, 0.5), scv=(1.0, 0.25), parallelism=(2, 1), delay_ms=0.1)
    rate = 1200.0  # op0: two instances at rho 0.6 each; op1: rho 0.6
    cal = caladrius_predict(model, None, rate)
    t0 = 0.6 / 0.4 * 1.0 + 1.0                  # Kingman, ca2 = cs2 = 1, per instance
    t1 = 0.6 / 0.4 * (1.0 + 0.25) / 2 * 0.5 + 0.5
    assert cal.latency_mean_ms == pytest.approx(t0 + t1 + 2 * 0.1)
    drs = drs_predict(model, None, rate)
    # M/M/2 at lambda 1.2/ms, mu 1/ms; M/M/1 at rho 0.6 (exponential whatever the SCV)
    m0 = 1 / (1.0 * (1 - 0.6**2))
    m1 = 0.5 / (1 - 0.6)
    assert drs.latency_mean_ms == pytest.approx(m0 + m1 + 2 * 0.1)
    assert drs.latency_mean_ms < cal.latency_mean_ms  # shared queue beats per-instance queues


def test_drs_weights_sojourns_by_visits():
    model = _chain(service_ms=(0.5, 0.1), parallelism=(1, 1), selectivity=3.0)
    rate = 400.0  # op0 rho 0.2, op1 gets 1200/s, rho 0.12
    t0 = 0.5 / 0.8
    t1 = 0.1 / 0.88
    drs = drs_predict(model, None, rate)
    assert drs.latency_mean_ms == pytest.approx(t0 + 3 * t1)
    cal = caladrius_predict(model, None, rate)
    assert cal.latency_mean_ms == pytest.approx(t0 + t1)  # per tuple along the path


def test_caladrius_does_not_cap_and_flags_saturation():
    model = _chain(service_ms=(2.0,))
    cal = caladrius_predict(model, None, 800.0)
    assert cal.saturated and cal.throughput == 800.0 and cal.latency_mean_ms is None
    drs = drs_predict(model, None, 800.0)
    assert drs.saturated and drs.throughput == pytest.approx(500.0) and drs.latency_mean_ms is None


def test_unknown_peer():
    with pytest.raises(ValueError):
        peer_predict("dhalion", _chain(), None, 1.0)
