"""The queueing model against closed forms, against Ciw, and its invariants (Hypothesis)."""

from __future__ import annotations

import functools
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from modeler.keys import instance_shares, key_group_weights
from modeler.modelfile import load_model, parse_model, to_graph
from modeler.queueing import compile_model, predict, predict_batch
from tests.conftest import EXAMPLES


def _model(operators, edges, **top):
    return parse_model({"augury": 1, "job": "t", "operators": operators, "edges": edges, **top})


def _single(service_ms=2.0, scv=1.0, p=1):
    return _model(
        [{"name": "src", "role": "source"},
         {"name": "q", "parallelism": p, "service_time_ms": service_ms, "service_scv": scv}],
        [{"from": "src", "to": "q"}],
    )


# ------------------------------------------------------------------ closed forms


@pytest.mark.parametrize("rho", [0.1, 0.5, 0.9])
def test_mm1_sojourn_and_percentiles_exact(rho):
    es = 2.0  # ms
    rate = rho / es * 1000.0
    p = predict(_single(es), None, rate)
    mean = es / (1 - rho)  # M/M/1 sojourn: exponential with mean E[S]/(1-rho)
    assert p.latency_ms["mean"] == pytest.approx(mean, rel=1e-9)
    assert p.latency_ms["p95"] == pytest.approx(-mean * math.log(0.05), rel=1e-6)
    assert p.latency_ms["p99"] == pytest.approx(-mean * math.log(0.01), rel=1e-6)
    assert p.operators["q"].utilization == pytest.approx(rho)


@pytest.mark.parametrize("scv", [0.0, 0.25, 4.0])
@pytest.mark.parametrize("rho", [0.3, 0.8])
def test_mg1_pollaczek_khinchine_exact(scv, rho):
    es = 1.5
    rate = rho / es * 1000.0
    p = predict(_single(es, scv), None, rate)
    wq = rho / (1 - rho) * (1 + scv) / 2 * es  # P-K mean wait
    assert p.latency_ms["mean"] == pytest.approx(wq + es, rel=1e-9)


def test_jackson_tandem_product_form():
    # Poisson input, exponential single-server stations in tandem: sum of E[S_i]/(1-rho_i).
    services = [1.0, 0.5, 2.5, 0.8]
    ops = [{"name": "src", "role": "source"}] + [
        {"name": f"s{i}", "service_time_ms": s} for i, s in enumerate(services)]
    edges = [{"from": "src", "to": "s0"}] + [{"from": f"s{i}", "to": f"s{i+1}"} for i in range(len(services) - 1)]
    model = _model(ops, edges)
    rate = 300.0
    expected = sum(s / (1 - rate * s / 1000) for s in services)
    assert predict(model, None, rate).latency_ms["mean"] == pytest.approx(expected, rel=1e-9)


def test_network_delay_adds_per_hop():
    base = _single(2.0)
    delayed = _model([{"name": "src", "role": "source"}, {"name": "q", "service_time_ms": 2.0}],
                     [{"from": "src", "to": "q"}], network_delay_ms=0.7)
    assert predict(delayed, None, 100).latency_ms["mean"] == pytest.approx(
        predict(base, None, 100).latency_ms["mean"] + 0.7)


def test_saturation_caps_throughput_and_marks_upstream_backpressured():
    model = load_model(EXAMPLES / "wordcount.yaml")
    below = predict(model, None, 100)
    p = predict(model, None, below.max_rate * 2)
    assert p.saturated and p.throughput == pytest.approx(below.max_rate)
    assert p.bottleneck == "count"
    assert p.latency_ms == {"mean": None, "p95": None, "p99": None}
    assert p.operators["split"].backpressured and p.operators["source"].backpressured
    assert not p.operators["count"].backpressured and p.operators["count"].bottleneck
    assert p.operators["count"].max_utilization == pytest.approx(1.0)


def test_key_grouping_uses_flink_key_groups():
    model = load_model(EXAMPLES / "wordcount.yaml")
    edge = model.edges[1]
    for p in (1, 2, 3, 5, 8):
        shares = instance_shares(key_group_weights(edge.keys, 128), p)
        pred = predict(model, {"count": p}, 100.0)
        assert pred.operators["count"].hot_share == pytest.approx(shares.max())
        # max_rate = mu / (visit ratio * hottest share)
        assert pred.max_rate == pytest.approx(
            min(1000 / 0.2 / (7 * shares.max()), 2 * 1000 / 0.5), rel=1e-9)


def test_contention_scaling_slows_instances():
    model = load_model(EXAMPLES / "pipeline.yaml")
    p3 = predict(model, {"score": 3}, 100).operators["score"]
    p9 = predict(model, {"score": 9}, 100).operators["score"]
    # utilization per instance = lambda/p * E[S] * (1 + 0.01 (p-1))
    assert p9.utilization / p3.utilization == pytest.approx((3 / 9) * (1.08 / 1.02))


def test_batch_equals_scalar():
    model = load_model(EXAMPLES / "pipeline.yaml")
    compiled = compile_model(model)
    rng = np.random.default_rng(0)
    configs = [{n: int(rng.integers(1, 6)) for n in ("decode", "dedup", "sessionize", "score")} for _ in range(20)]
    rates = rng.uniform(100, 5000, size=20)
    batch = predict_batch(compiled, compiled.config_array(configs), rates)
    for i, (config, rate) in enumerate(zip(configs, rates)):
        single = predict(model, config, rate)
        assert single.max_rate == pytest.approx(batch.max_rate[i])
        if not single.saturated:
            assert single.latency_ms["p99"] == pytest.approx(batch.latency_p99_ms[i])


# --------------------------------------------------------------------- vs Ciw

CHAIN = ([{"name": "src", "role": "source"},
          {"name": "a", "service_time_ms": 1.0},
          {"name": "b", "parallelism": 2, "service_time_ms": 1.6},
          {"name": "c", "service_time_ms": 0.5}],
         [{"from": "src", "to": "a"}, {"from": "a", "to": "b"}, {"from": "b", "to": "c"}])
DIAMOND = ([{"name": "src", "role": "source"},
            {"name": "parse", "parallelism": 2, "service_time_ms": 1.0},
            {"name": "enrich", "parallelism": 2, "service_time_ms": 2.0},
            {"name": "filter", "service_time_ms": 1.2},
            {"name": "merge", "service_time_ms": 0.4}],
           [{"from": "src", "to": "parse"},
            {"from": "parse", "to": "enrich", "selectivity": 0.6},
            {"from": "parse", "to": "filter", "selectivity": 0.4},
            {"from": "enrich", "to": "merge"}, {"from": "filter", "to": "merge", "selectivity": 0.5}])
SKEWED = ([{"name": "src", "role": "source"},
           {"name": "a", "parallelism": 2, "service_time_ms": 0.5},
           {"name": "agg", "parallelism": 4, "service_time_ms": 1.5, "max_parallelism": 32},
           {"name": "out", "service_time_ms": 0.3}],
          [{"from": "src", "to": "a"},
           {"from": "a", "to": "agg", "grouping": "key",
            "keys": {"distribution": "zipf", "exponent": 0.8, "count": 50}},
           {"from": "agg", "to": "out"}])
TOPOLOGIES = {"chain": CHAIN, "diamond": DIAMOND, "skewed": SKEWED}


def _with_scv(spec, scv):
    ops, edges = spec
    ops = [dict(op, service_scv=scv) if "service_time_ms" in op else op for op in ops]
    return _model(ops, edges)


# Tolerances (from the issue): mean end-to-end latency within 10 % for exponential service and
# within 20 % for service SCV 0.25 and 4; utilizations (each operator's `utilization` and
# `max_utilization`, as `predict` reports them) within 2 %. Tails (the issue sets no figure;
# ours): p95 within 15 % and p99 within 20 % of the simulated quantiles (the model's G/G/1 waits
# are approximations; the simulated p99 of 4,000-120,000 tuples scatters by a few %).
# Utilizations are predicted at the input rate the simulation actually delivered (its Poisson
# count scatters by 1/sqrt(n) around the nominal rate; the model maps rate -> utilization, so it
# is judged at the realized rate). What remains is the routing's own randomness (a selectivity
# split, a key draw: data in an engine): a binomial share s of N tuples scatters by
# sqrt((1 - s) / (s N)) relative, so with exponential service (utilization = rate x E[S] does
# not depend on the service distribution, so once per topology and load is enough) a job with
# random routing runs two replications with N >= 60,000 source tuples between them, which keeps
# 3 standard errors at 1.5 % (under the 2 %) for every share >= 0.4 (the smallest such share
# here: the diamond's filter branch 0.4, the skewed job's hottest instance 0.40); there
# `utilization` and `max_utilization` must be within 2 % strictly. Per instance (colder key
# shares scatter more) the check is 2 % plus 3 standard errors (at most util / sqrt(n)) behind a
# random routing choice, 2 % strictly elsewhere.
# `rho` is the utilization of the bottleneck's hottest instance.
_MIN_SOURCE_TUPLES = 60_000


@pytest.mark.slow
@pytest.mark.parametrize("scv,tolerance", [(1.0, 0.10), (0.25, 0.20), (4.0, 0.20)])
@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_matches_ciw(topology, scv, tolerance):
    from tests.modeler.ciw_network import simulate

    model = _with_scv(TOPOLOGIES[topology], scv)
    max_rate = predict(model, None, 1.0).max_rate
    randomly_routed = _randomly_routed(model)
    for rho in (0.3, 0.6, 0.85):
        rate = rho * max_rate
        # Near saturation the queue's correlation time is long: average two independent
        # replications (seeds) so that sampling error stays well inside the tolerance; with
        # random routing, two replications long enough for the utilization check (above).
        long_runs = bool(randomly_routed) and scv == 1.0
        seeds = (7, 8) if rho > 0.8 or long_runs else (7,)
        warmup = 2_000
        horizon = 15_000 * (1 + (rho > 0.8)) * (1 + 0.5 * (scv > 1))
        if long_runs:
            horizon = max(horizon, warmup + 1000.0 * _MIN_SOURCE_TUPLES / rate / len(seeds))
        runs = [simulate(model, rate, horizon_ms=horizon, warmup_ms=warmup, seed=s) for s in seeds]
        latencies = np.concatenate([run.latencies_ms for run in runs])
        simulated = float(np.mean([run.mean_ms for run in runs]))
        predicted = predict(model, None, rate)
        assert predicted.latency_ms["mean"] == pytest.approx(simulated, rel=tolerance), (topology, scv, rho)
        sim_p95, sim_p99 = np.quantile(latencies, [0.95, 0.99])
        assert predicted.latency_ms["p95"] == pytest.approx(sim_p95, rel=0.15), (topology, scv, rho)
        assert predicted.latency_ms["p99"] == pytest.approx(sim_p99, rel=0.20), (topology, scv, rho)

        delivered = np.mean([sum(sum(run.served[op.name]) for op in model.sources) for run in runs])
        at_delivered = predict(model, None, delivered / ((horizon - warmup) / 1000.0))
        for op in runs[0].utilization:
            pred_op = at_delivered.operators[op]
            if pred_op.utilization == 0:
                continue
            util = np.mean([run.utilization[op] for run in runs], axis=0)
            served = np.sum([run.served[op] for run in runs], axis=0)
            expected = _instance_utilizations(model, op, pred_op)
            hottest = int(np.argmax(expected))  # the instance the model says is hottest
            if scv == 1.0:
                assert util.mean() == pytest.approx(pred_op.utilization, rel=0.02), (op, rho)
                assert util[hottest] == pytest.approx(pred_op.max_utilization, rel=0.02), (op, rho)
            for measured, n, want in zip(util, served, expected):
                limit = 0.02 * want
                if op in randomly_routed:
                    limit += 3 * measured / np.sqrt(max(n, 1))
                assert abs(measured - want) <= limit, (op, rho, measured, want)


def _randomly_routed(model) -> set[str]:
    """Operators whose arrivals pass a random routing choice of the Ciw oracle: a key draw, or an
    upstream operator choosing among out-edges by selectivity (several out-edges, or one with
    selectivity < 1), anywhere upstream."""
    out: set[str] = set()
    for op in nx.topological_sort(to_graph(model)):
        for e in (e for e in model.edges if e.target == op):
            siblings = [x for x in model.edges if x.source == e.source]
            random_choice = e.grouping == "key" or len(siblings) > 1 or e.selectivity != 1.0
            if random_choice or e.source in out:
                out.add(op)
    return out


def _instance_utilizations(model, op, pred_op):
    """Predicted utilization of each instance (key grouping: by the Flink key-group shares)."""
    edge = next((e for e in model.edges if e.target == op and e.grouping == "key"), None)
    if edge is None:
        return [pred_op.utilization] * pred_op.parallelism
    shares = instance_shares(key_group_weights(edge.keys, model.operator(op).max_parallelism), pred_op.parallelism)
    return list(pred_op.utilization * pred_op.parallelism * shares)


# ------------------------------------------------------------------ invariants

@st.composite
def random_dags(draw):
    """Small random DAGs of shuffle/key edges with selectivities and parallelisms."""
    n = draw(st.integers(2, 6))
    ops = [{"name": "src", "role": "source"}]
    edges = []
    for i in range(1, n):
        ops.append({"name": f"o{i}", "parallelism": draw(st.integers(1, 6)),
                    "service_time_ms": draw(st.floats(0.05, 5.0)),
                    "service_scv": draw(st.sampled_from([0.25, 1.0, 2.0])), "max_parallelism": 32})
        parents = draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=2, unique=True))
        for u in parents:
            name_u = "src" if u == 0 else f"o{u}"
            grouping = draw(st.sampled_from(["shuffle", "shuffle", "key"]))
            edge = {"from": name_u, "to": f"o{i}", "grouping": grouping,
                    "selectivity": draw(st.sampled_from([0.5, 1.0, 2.0]))}
            if grouping == "key":
                edge["keys"] = {"distribution": "zipf", "exponent": draw(st.floats(0.0, 1.2)), "count": 40}
            edges.append(edge)
    return _model(ops, edges)


@settings(max_examples=60, deadline=None)
@given(model=random_dags(), lo=st.floats(0.05, 0.9), hi=st.floats(0.05, 0.9))
def test_rising_rate_never_lowers_utilization_or_latency(model, lo, hi):
    lo, hi = sorted((lo, hi))
    max_rate = predict(model, None, 1.0).max_rate
    a, b = predict(model, None, lo * max_rate), predict(model, None, hi * max_rate)
    for name in model.operator_names:
        assert b.operators[name].utilization >= a.operators[name].utilization - 1e-12
        assert b.operators[name].max_utilization >= a.operators[name].max_utilization - 1e-12
    for stat in ("mean", "p95", "p99"):
        assert b.latency_ms[stat] >= a.latency_ms[stat] * (1 - 1e-9)


@settings(max_examples=400, deadline=None)
@given(model=random_dags(), load=st.floats(0.05, 0.9), data=st.data())
def test_more_shuffle_instances_never_raise_utilization_or_latency(model, load, data):
    shuffle_only = [op.name for op in model.operators if not op.is_source
                    and all(e.grouping == "shuffle" for e in model.edges if e.target == op.name)]
    if not shuffle_only:
        return
    name = data.draw(st.sampled_from(shuffle_only))
    rate = load * predict(model, None, 1.0).max_rate
    base = predict(model, None, rate)
    more = predict(model, {name: base.config[name] + data.draw(st.integers(1, 4))}, rate)
    for op in model.operator_names:
        assert more.operators[op].max_utilization <= base.operators[op].max_utilization + 1e-12
    for stat in ("mean", "p95", "p99"):  # tails: the inversion is accurate to ~2e-7
        assert more.latency_ms[stat] <= base.latency_ms[stat] * (1 + (1e-9 if stat == "mean" else 1e-6)), stat
    assert more.max_rate >= base.max_rate * (1 - 1e-12)


@settings(max_examples=60, deadline=None)
@given(model=random_dags(), load=st.floats(0.05, 3.0))
def test_flow_conservation(model, load):
    rate = load * predict(model, None, 1.0).max_rate
    p = predict(model, None, rate)
    assert p.throughput == pytest.approx(min(rate, p.max_rate))
    for op in model.operators:
        incoming = [e for e in model.edges if e.target == op.name]
        expected = (p.throughput * model.source_shares()[op.name] if op.is_source else
                    sum(e.selectivity * p.operators[e.source].processed_rate for e in incoming))
        assert p.operators[op.name].processed_rate == pytest.approx(expected, rel=1e-9, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(model=random_dags())
def test_max_rate_is_where_the_hottest_instance_reaches_one(model):
    p = predict(model, None, 1.0)
    at = predict(model, None, p.max_rate * (1 - 1e-9))
    hottest = max(op.max_utilization for op in at.operators.values())
    assert hottest == pytest.approx(1.0, rel=1e-6)
    assert at.operators[p.bottleneck].max_utilization == pytest.approx(hottest)
    assert not at.saturated and predict(model, None, p.max_rate * 1.001).saturated


def test_batches_longer_than_a_block_equal_one_pass(monkeypatch):
    # predict_batch evaluates in blocks of _BLOCK_ROWS rows; the joined result is the one pass's.
    import dataclasses

    import modeler.queueing as queueing

    compiled = queueing.compile_model(load_model(str(EXAMPLES / "pipeline.yaml")))
    rng = np.random.default_rng(0)
    P = rng.integers(1, 16, size=(2_500, len(compiled.names)))
    R = rng.uniform(10.0, 5_000.0, len(P))
    monkeypatch.setattr(queueing, "_BLOCK_ROWS", 1_000)
    blocked = queueing.predict_batch(compiled, P, R)
    monkeypatch.setattr(queueing, "_BLOCK_ROWS", 10_000)
    whole = queueing.predict_batch(compiled, P, R)
    for f in dataclasses.fields(queueing.BatchPrediction):
        if f.name not in ("operators", "tail"):  # tail: the lazily inverted p95/p99, checked below
            assert np.array_equal(getattr(blocked, f.name), getattr(whole, f.name), equal_nan=True), f.name
    for stat in ("p95", "p99"):
        assert np.allclose(blocked.latency(stat), whole.latency(stat), rtol=1e-9, equal_nan=True), stat


@st.composite
def mixed_dags(draw):
    """Random DAGs with every grouping (shuffle, key, forward), selectivities, contention
    scaling, network delay and sometimes output batching: no broadcast edges, so the
    end-to-end DP may take either form."""
    n = draw(st.integers(3, 8))
    ops = [{"name": "src", "role": "source", "parallelism": draw(st.integers(1, 3))}]
    edges = []
    for i in range(1, n):
        op = {"name": f"o{i}", "parallelism": draw(st.integers(1, 6)),
              "service_time_ms": draw(st.floats(0.05, 3.0)),
              "service_scv": draw(st.sampled_from([0.0, 0.25, 1.0, 2.0])), "max_parallelism": 32}
        if draw(st.booleans()):
            op["scaling"] = {"form": "contention", "overhead": 0.02}
        ops.append(op)
        parents = draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=2, unique=True))
        for u in parents:
            grouping = draw(st.sampled_from(["shuffle", "shuffle", "key", "forward"]))
            edge = {"from": "src" if u == 0 else f"o{u}", "to": f"o{i}", "grouping": grouping,
                    "selectivity": draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))}
            if grouping == "key":
                edge["keys"] = {"distribution": "zipf", "exponent": draw(st.floats(0.0, 1.2)), "count": 40}
            edges.append(edge)
    top = {"network_delay_ms": draw(st.sampled_from([0.0, 0.1]))}
    if draw(st.booleans()):
        top.update(buffer_timeout_ms=1.0, buffer_records=8)
    try:
        return _model(ops, edges, **top)
    except Exception:  # e.g. forward edges between operators of different parallelism
        from hypothesis import reject
        reject()


def test_a_point_mass_latency_has_its_mean_as_every_quantile_in_either_block(monkeypatch):
    # Hypothesis's find in CI (2026-11-29): deterministic services at ~1 % load give a point mass
    # at 2.5 ms; its variance came out 0 in the matrix block and 8e-22 s^2 (rounding) row by
    # row, where the transform's inversion then oscillated to a "p99" of 4.1 ms.
    from modeler import queueing

    model = parse_model({
        "augury": 1, "job": "t", "network_delay_ms": 0.0, "buffer_timeout_ms": 1.0, "buffer_records": 8,
        "operators": [{"name": "src", "role": "source", "parallelism": 1},
                      {"name": "o1", "parallelism": 7, "service_time_ms": 1.0, "service_scv": 0.0},
                      {"name": "o2", "parallelism": 7, "service_time_ms": 0.5, "service_scv": 0.0}],
        "edges": [{"from": "src", "to": "o1", "grouping": "shuffle", "selectivity": 0.5},
                  {"from": "o1", "to": "o2", "grouping": "shuffle", "selectivity": 0.5}]}, "<point mass>")
    compiled = compile_model(model)
    P = compiled.config_array([{}])
    for work in (10**9, 0):
        monkeypatch.setattr(queueing, "_MATRIX_WORK", work)
        b = predict_batch(compiled, P, 201.51345183278613)
        assert b.latency_mean_ms[0] == pytest.approx(2.5)
        for stat in ("p95", "p99"):
            assert b.latency(stat)[0] == pytest.approx(b.latency_mean_ms[0], rel=1e-6)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=mixed_dags(), seed=st.integers(0, 2**16))
def test_end_to_end_dp_as_matrices_equals_row_by_row(model, seed, monkeypatch):
    """Small blocks take the end-to-end DP as matrix products over constant flow fractions,
    large ones row by row: both give the same mean, second moment, deterministic shift and
    exact p99 (to rounding)."""
    from modeler import queueing

    compiled = compile_model(model)
    rng = np.random.default_rng(seed)
    P = np.repeat(compiled.config_array([{}]), 12, axis=0)
    for v in range(len(compiled.names)):
        if compiled.in_edges[v]:
            P[:, v] = rng.integers(compiled.min_p[v], min(compiled.max_p[v], 10) + 1, size=len(P))
    for group in compiled.forward_groups:
        P[:, list(group)] = P[:, [group[0]]]
    rate = predict(compiled, None, 1.0).max_rate * rng.uniform(0.0, 3.0, size=len(P))
    rate[0] = 0.0
    with monkeypatch.context() as m:
        m.setattr(queueing, "_MATRIX_WORK", 10**9)
        matrices = predict_batch(compiled, P, rate)
    with monkeypatch.context() as m:
        m.setattr(queueing, "_MATRIX_WORK", 0)
        rows = predict_batch(compiled, P, rate)
    ok = matrices.tail.valid
    assert np.array_equal(ok, rows.tail.valid)
    for name in ("mean", "var", "shift"):
        a, b = getattr(matrices.tail, name)[ok], getattr(rows.tail, name)[ok]
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-15)
    np.testing.assert_array_equal(np.isnan(matrices.latency_mean_ms), np.isnan(rows.latency_mean_ms))
    # The quantile starts from a rounded point, so the same configuration gets the same p99 in
    # either block (up to a start straddling a rounding boundary: ~1e-10).
    np.testing.assert_allclose(matrices.latency("p99"), rows.latency("p99"), rtol=1e-9)


# ------------------------------------------------------------- bounded buffers (blocking)

def _tandem(s1_ms, s2_ms, buffer, scv=1.0, job_wide=False):
    """source -> u -> v, u's tuples meeting a buffer of ``buffer`` tuples at v (None: unbounded)."""
    edge = {"from": "u", "to": "v"}
    top = {}
    if buffer is not None:
        if job_wide:
            top["buffer_tuples"] = buffer
        else:
            edge["buffer_tuples"] = buffer
    return _model([{"name": "src", "role": "source"},
                   {"name": "u", "service_time_ms": s1_ms, "service_scv": scv},
                   {"name": "v", "service_time_ms": s2_ms, "service_scv": scv}],
                  [{"from": "src", "to": "u"}, edge], **top)


@pytest.mark.parametrize("capacity", [1, 2, 7, 60])
@pytest.mark.parametrize("rho", [0.2, 0.9, 1.0, 1.5])
def test_finite_queue_is_mm1k_exact(rho, capacity):
    from modeler.queueing import finite_queue

    p = np.array([1.0 / (capacity + 1)] * (capacity + 1)) if rho == 1.0 else \
        np.array([(1 - rho) * rho**n / (1 - rho ** (capacity + 1)) for n in range(capacity + 1)])
    n = np.arange(capacity + 1)
    got = finite_queue(np.array([rho]), np.array([float(capacity)]))
    assert got["p0"][0] == pytest.approx(p[0], rel=1e-9, abs=1e-15)
    assert got["p_full"][0] == pytest.approx(p[-1], rel=1e-9, abs=1e-15)
    assert got["mean_number"][0] == pytest.approx((n * p).sum(), rel=1e-9)
    assert got["mean_queue"][0] == pytest.approx((np.maximum(n - 1, 0) * p).sum(), rel=1e-9, abs=1e-15)
    # Little: the mean time in the system of an admitted tuple, E[S] = 1
    assert got["mean_number"][0] / got["utilization"][0] == pytest.approx(
        (n * p).sum() / (rho * (1 - p[-1])), rel=1e-9)


@pytest.mark.parametrize("s1,s2,buffer", [(1.0, 1.0, 0), (1.0, 1.0, 3), (0.5, 1.0, 2), (1.0, 0.7, 5),
                                          (2.0, 0.5, 1), (1.0, 1.0, 1000)])
def test_two_station_tandem_max_rate_exact(s1, s2, buffer):
    # Two exponential stations, the first saturated: the number at the second (a blocked first
    # station's tuple counted) is M/M/1/N with N = K + 2 and intensity mu1/mu2; throughput
    # mu2 (1 - P0). The model's max rate (blocked time lengthening the first station's service)
    # is this exactly.
    r, N = s2 / s1, buffer + 2
    p0 = 1 / (N + 1) if r == 1 else (1 - r) / (1 - r ** (N + 1))
    p = predict(_tandem(s1, s2, buffer), None, 1.0)
    assert p.max_rate == pytest.approx(1000.0 / s2 * (1 - p0), rel=1e-9)
    assert p.max_rate <= predict(_tandem(s1, s2, None), None, 1.0).max_rate


def test_unbounded_and_never_full_buffers_are_todays_model_exactly():
    plain = _tandem(1.0, 0.8, None)
    assert compile_model(plain).buffer_tuples is None
    large = _tandem(1.0, 0.8, 1000, job_wide=True)
    assert large.buffer_tuples == 1000 and compile_model(large).buffer_tuples is not None
    for load in (0.1, 0.5, 0.9):
        rate = load * predict(plain, None, 1.0).max_rate
        a, b = predict(plain, None, rate), predict(large, None, rate)
        assert a.latency_ms == b.latency_ms and a.throughput == b.throughput  # bit for bit
    # a source never blocks (its tuples wait in the backlog in order): nothing changes
    src_only = _model([{"name": "src", "role": "source"}, {"name": "q", "service_time_ms": 1.0}],
                      [{"from": "src", "to": "q", "buffer_tuples": 0}])
    assert compile_model(src_only).buffer_tuples is None


def test_blocking_lowers_capacity_and_raises_sender_latency():
    bounded, plain = _tandem(1.0, 1.0, 2), _tandem(1.0, 1.0, None)
    rate = 0.7 * predict(bounded, None, 1.0).max_rate
    a, b = predict(bounded, None, rate), predict(plain, None, rate)
    assert a.max_rate < b.max_rate
    assert a.operators["u"].sojourn_ms > b.operators["u"].sojourn_ms
    assert a.operators["v"].sojourn_ms == pytest.approx(b.operators["v"].sojourn_ms)
    assert a.operators["u"].utilization == pytest.approx(b.operators["u"].utilization)  # busy time only
    assert a.latency_ms["p99"] > b.latency_ms["p99"]
    assert predict(bounded, None, 1.01 * a.max_rate).saturated


@st.composite
def buffered_dags(draw):
    """``random_dags`` with a bounded buffer (0-30 tuples) on some edges, or job-wide."""
    from dataclasses import replace

    model = draw(random_dags())
    edges = tuple(replace(e, buffer_tuples=draw(st.one_of(st.none(), st.integers(0, 30)))) for e in model.edges)
    return replace(model, edges=edges, buffer_tuples=draw(st.one_of(st.none(), st.integers(0, 30))))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=buffered_dags(), lo=st.floats(0.05, 0.97), hi=st.floats(0.05, 0.97))
def test_blocking_latency_rises_with_load_and_throughput_stays_below_capacity(model, lo, hi):
    from dataclasses import replace

    lo, hi = sorted((lo, hi))
    max_rate = predict(model, None, 1.0).max_rate
    unbounded = replace(model, buffer_tuples=None,
                        edges=tuple(replace(e, buffer_tuples=None) for e in model.edges))
    assert max_rate <= predict(unbounded, None, 1.0).max_rate * (1 + 1e-12)
    a, b = predict(model, None, lo * max_rate), predict(model, None, hi * max_rate)
    for stat in ("mean", "p95", "p99"):
        assert b.latency_ms[stat] >= a.latency_ms[stat] * (1 - 1e-6), stat
    over = predict(model, None, 1.5 * max_rate)
    assert over.saturated and over.throughput == pytest.approx(max_rate) and over.throughput <= max_rate


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=buffered_dags(), load=st.floats(0.05, 0.97), extra=st.integers(1, 50))
def test_larger_buffers_never_raise_latency(model, load, extra):
    from dataclasses import replace

    grow = lambda k: None if k is None else k + extra
    larger = replace(model, buffer_tuples=grow(model.buffer_tuples),
                     edges=tuple(replace(e, buffer_tuples=grow(e.buffer_tuples)) for e in model.edges))
    unbounded = replace(model, buffer_tuples=None,
                        edges=tuple(replace(e, buffer_tuples=None) for e in model.edges))
    rate = load * predict(model, None, 1.0).max_rate
    small, large, inf = (predict(m, None, rate) for m in (model, larger, unbounded))
    assert large.max_rate >= small.max_rate * (1 - 1e-12)
    assert inf.max_rate >= large.max_rate * (1 - 1e-12)
    assert large.latency_ms["mean"] <= small.latency_ms["mean"] * (1 + 1e-9)
    assert inf.latency_ms["mean"] <= large.latency_ms["mean"] * (1 + 1e-9)
    # The tails may rise a little when a buffer grows: a blocked sender's departures are smoother
    # (its effective service is longer and less variable relative to it), so an operator it also
    # feeds waits less, and the path through it can carry the p99. Found by Hypothesis (stop 34,
    # on the model before the copy-pairs term as well): src -> o1 -> {o2, o3 with buffer 0},
    # the unbounded p99 2.0 % above the one at buffer 1 (45.46 vs 44.55 ms). Bounded at 3 %.
    for stat in ("p95", "p99"):
        assert large.latency_ms[stat] <= small.latency_ms[stat] * 1.03, stat
        assert inf.latency_ms[stat] <= large.latency_ms[stat] * 1.03, stat


# Ciw's queue capacities block after service like the engines (``ciw_network``). Two
# exponential stations with a 2-tuple buffer between them: balanced, a fast sender before a slow
# receiver (the case a truncated receiver queue gets wrong: the tuples that do not fit wait
# upstream) and a slow sender before a fast receiver. The same tolerances as test_matches_ciw for
# exponential service (mean 10 %, p95 15 %, p99 20 %), at 0.3 / 0.6 / 0.85 of the model's
# (blocked) max rate; near saturation two 40-s replications (the sampling error of one 30-s run
# at 0.85 was ~5 %). Known miss, kept visible: the balanced tandem's tails at 0.85 are ~15-25 %
# short (its mean is within 3 %): blocking periods come in runs, which the decomposition's
# independent effective service times do not carry into the sender's waiting-time distribution.
_BLOCKING_CASES = {"balanced": (1.0, 1.0, 2), "fast-sender": (0.5, 1.0, 2), "slow-sender": (1.0, 0.5, 2)}


@functools.lru_cache(maxsize=None)
def _blocking_runs(case: str, rho: float):
    from tests.modeler.ciw_network import simulate

    s1, s2, buffer = _BLOCKING_CASES[case]
    model = _tandem(s1, s2, buffer)
    rate = rho * predict(model, None, 1.0).max_rate
    seeds, horizon = ((7, 8), 40_000) if rho > 0.5 else ((7,), 20_000)
    runs = [simulate(model, rate, horizon_ms=horizon, warmup_ms=2_000, seed=s) for s in seeds]
    return predict(model, None, rate), float(np.mean([r.mean_ms for r in runs])), \
        np.concatenate([run.latencies_ms for run in runs])


@pytest.mark.slow
@pytest.mark.parametrize("check", ["mean", pytest.param("tails", marks=pytest.mark.xfail(
    strict=True, reason="balanced tandem, 0.85: the decomposition's tails are ~15-25 % short"))])
def test_blocking_balanced_matches_ciw(check):
    _check_blocking("balanced", check)


@pytest.mark.slow
@pytest.mark.parametrize("check", ["mean", "tails"])
@pytest.mark.parametrize("case", ["fast-sender", "slow-sender"])
def test_blocking_matches_ciw(case, check):
    _check_blocking(case, check)


def _check_blocking(case: str, check: str) -> None:
    for rho in (0.3, 0.6, 0.85):
        predicted, sim_mean, latencies = _blocking_runs(case, rho)
        if check == "mean":
            assert predicted.latency_ms["mean"] == pytest.approx(sim_mean, rel=0.10), rho
        else:
            sim_p95, sim_p99 = np.quantile(latencies, [0.95, 0.99])
            assert predicted.latency_ms["p95"] == pytest.approx(sim_p95, rel=0.15), rho
            assert predicted.latency_ms["p99"] == pytest.approx(sim_p99, rel=0.20), rho


# ------------------------------------------------------- copies that meet again (fork re-merge)


def _fork(p=1, grouping="shuffle", sa=0.5, sc=2.0, sel2=1.0):
    """src -> a -> c and src -> c: every source tuple reaches c twice (via a, and directly)."""
    return _model(
        [{"name": "src", "role": "source"},
         {"name": "a", "service_time_ms": sa},
         {"name": "c", "parallelism": p, "service_time_ms": sc, "max_parallelism": 32}],
        [{"from": "src", "to": "a"}, {"from": "a", "to": "c", "grouping": grouping},
         {"from": "src", "to": "c", "grouping": grouping, "selectivity": sel2}],
        network_delay_ms=0.05)


def test_copy_pairs_weights_closed_form():
    # Fork: one ordered pair each way per source tuple, c receives 2 per tuple: W = 2/2 = 1; the
    # branches differ by a's service time.
    pairs = compile_model(_fork()).copy_pairs
    assert pairs.weight.tolist() == pytest.approx([1.0]) and pairs.delta.tolist() == pytest.approx([0.0005])
    # Diamond: parse emits to enrich (Bernoulli 0.6) and filter (0.4, then 0.5 to merge):
    # ordered pairs 2 x 0.6 x 0.4 x 0.5 per parse tuple over merge's 0.6 + 0.2 = 0.8.
    diamond = compile_model(load_model(EXAMPLES / "diamond.yaml"))
    assert diamond.copy_pairs.weight.tolist() == pytest.approx([0.24 / 0.8])
    assert diamond.names[int(diamond.copy_pairs.target[0])] == "merge"
    # Independent sources merging, a chain, and the model with copies taken as independent: none.
    assert compile_model(load_model(EXAMPLES / "wordcount.yaml")).copy_pairs is None
    assert compile_model(_fork(), copies_correlated=False).copy_pairs is None


def _branching_pairs(model, merge, tuples, rng):
    """Monte Carlo of the branching the model assumes (Bernoulli emission per out-edge for
    selectivity <= 1, Poisson above, independent): ordered pairs of one source tuple's copies
    reaching ``merge`` through different in-edges, per copy reaching it."""
    order = list(nx.topological_sort(to_graph(model)))
    count = {n: np.zeros(tuples) for n in order}
    for s in model.sources:
        count[s.name][:] = 1.0
    via = {}
    for n in order:
        for e in (e for e in model.edges if e.source == n):
            k = count[n].astype(np.int64)
            sent = rng.binomial(k, e.selectivity) if e.selectivity <= 1 else rng.poisson(e.selectivity * k)
            count[e.target] += sent
            if e.target == merge:
                via[e.source] = sent.astype(float)
    per_edge = np.array(list(via.values()))
    total = per_edge.sum(axis=0)
    cross = (total**2 - (per_edge**2).sum(axis=0)).mean()
    return cross / total.mean()


@settings(max_examples=15, deadline=None)
@given(model=random_dags(), seed=st.integers(0, 2**16))
def test_copy_pairs_weight_is_the_branching_processs_pair_rate(model, seed):
    """The weight per merge is the asymptotic covariance term of the merged counts: ordered
    cross-edge pairs per arriving tuple, checked against a simulation of the branching."""
    compiled = compile_model(model)
    pairs = compiled.copy_pairs
    rng = np.random.default_rng(seed)
    merges = [n for n in model.operator_names if sum(e.target == n for e in model.edges) >= 2]
    for name in merges:
        v = compiled.index[name]
        want = float(pairs.weight[pairs.target == v].sum()) if pairs is not None else 0.0
        got = _branching_pairs(model, name, 40_000, rng)
        assert got == pytest.approx(want, rel=0.1, abs=0.02), name


@pytest.mark.parametrize("case", [dict(), dict(p=2), dict(p=2, grouping="key"), dict(sel2=0.5)])
@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_fork_remerge_matches_the_testbed(case, rho):
    """c's sojourn against the testbed (tuple-level, copies emitted together): within 10 % with
    the copies correlated; the independent superposition is 18-33 % short on every case (the
    stop-33 diagnosis of random-2's fan-ins), so the test can fail."""
    from experiments.testbed.config import TestbedConfig
    from experiments.testbed.sim import Testbed

    model = _fork(**case)
    per_unit = predict(model, None, 1.0).operators["c"].arrival_rate
    rate = rho * predict(model, None, 1.0).operators["c"].parallelism / 0.002 / per_unit
    bed = Testbed(model, rate, TestbedConfig(seed=1))
    bed.run_until(400.0)
    measured = bed.operator_stats()["c"]["mean_sojourn_ms"]
    correlated = predict(model, None, rate).operators["c"].sojourn_ms
    independent = predict(compile_model(model, copies_correlated=False), None, rate).operators["c"].sojourn_ms
    assert correlated == pytest.approx(measured, rel=0.10)
    assert independent < 0.85 * measured


@settings(max_examples=60, deadline=None)
@given(model=random_dags(), load=st.floats(0.05, 0.95))
def test_correlated_copies_only_add_latency(model, load):
    """The copy-pairs terms are non-negative, so the model with them is never below the one
    without (what keeps the planner's relaxed bound model, which drops them, a lower bound)."""
    rate = load * predict(model, None, 1.0).max_rate
    with_pairs = predict(model, None, rate)
    without = predict(compile_model(model, copies_correlated=False), None, rate)
    for stat in ("mean", "p95", "p99"):
        assert with_pairs.latency_ms[stat] >= without.latency_ms[stat] * (1 - 1e-6), stat
    assert with_pairs.max_rate == without.max_rate


# ------------------------------------------------------------------ shared cores


def _cores_model(p, cores, cpu_share=1.0, service_ms=10.0):
    top = {} if cores is None else {"resources": {"cores": cores}}
    return _model([{"name": "src", "role": "source"},
                   {"name": "q", "parallelism": p, "service_time_ms": service_ms, "cpu_share": cpu_share}],
                  [{"from": "src", "to": "q"}], **top)


def _testbed_max_rate(model, seed=1, bed_model=None):
    """(the model's max rate, the testbed's: operator ``q``'s processed rate over 30 s after 10 s,
    offered 1.5x the prediction); the testbed runs ``bed_model`` when given (the same job written
    out for it), else ``model``."""
    from experiments.testbed.config import TestbedConfig
    from experiments.testbed.sim import Testbed

    predicted = predict(model, None, 1.0).max_rate
    bed = Testbed(bed_model or model, 1.5 * predicted, TestbedConfig(seed=seed))
    bed.advance(10)
    before = bed.operator_stats()["q"]["processed"]
    bed.advance(30)
    return predicted, (bed.operator_stats()["q"]["processed"] - before) / 30


def _stretch_by_enumeration(own, counts, cores, engine_busy=0.0, engine_threads=0):
    """E[max(1, (1 + M)/cores)] for one tagged instance of each operator, M the other instances
    computing, every instance an independent Bernoulli: all 2^N outcomes enumerated."""
    import itertools

    probs = [(v, p) for v, (p, c) in enumerate(zip(own, counts)) for _ in range(int(c))]
    probs += [(-1, engine_busy / engine_threads)] * int(engine_threads) if engine_threads else []
    out = []
    for v in range(len(own)):
        others = list(probs)
        others.remove(next(x for x in others if x[0] == v))
        total = 0.0
        for outcome in itertools.product((0, 1), repeat=len(others)):
            weight = np.prod([p if o else 1.0 - p for o, (_, p) in zip(outcome, others)])
            total += weight * max(1.0, (1 + sum(outcome)) / cores)
        out.append(total)
    return np.array(out)


@pytest.mark.parametrize("cores", [2.0, 2.5, 4.0])
def test_cpu_stretch_is_the_poisson_binomial_expectation(cores):
    from modeler.queueing import cpu_stretch

    # a saturated source thread, an operator of idle-ish instances, one half computing, the
    # engine's threads: the case a single binomial over averaged probabilities got wrong
    own, counts = np.array([0.97, 0.12, 0.5]), np.array([1.0, 5.0, 2.0])
    engine, threads = 0.3, 2
    instances = counts.sum() + threads
    got = cpu_stretch(own[None], counts[None], np.array([instances]), cores, np.array([engine]), float(threads))
    want = _stretch_by_enumeration(own, counts, cores, engine, threads)
    assert got[0] == pytest.approx(want, rel=1e-10)
    # certainly computing and certainly idle instances are exact too (p = 1, p = 0)
    own = np.array([1.0, 0.0, 0.4])
    got = cpu_stretch(own[None], counts[None], np.array([counts.sum()]), cores)
    assert got[0] == pytest.approx(_stretch_by_enumeration(own, counts, cores), rel=1e-10)


def test_cpu_stretch_is_one_when_cores_suffice():
    from modeler.queueing import cpu_stretch

    # instances that do not outnumber the cores are never stretched, whatever the load
    assert (cpu_stretch(np.array([[1.0, 1.0]]), np.array([[2.0, 1.0]]), np.array([3.0]), 3.0) == 1.0).all()


@pytest.mark.parametrize("p,cores,cpu_share,expected", [
    (2, 1, 1.0, 100.0),    # two instances, one core: the core's work rate
    (8, 2, 1.0, 200.0),    # cores / E[S]
    (3, 4, 1.0, 300.0),    # more cores than instances: p / E[S], never stretched
    (8, 2, 0.0, 800.0),    # no CPU work: cores do not matter
])
def test_shared_cores_capacity_closed_forms(p, cores, cpu_share, expected):
    assert predict(_cores_model(p, cores, cpu_share), None, 1.0).max_rate == pytest.approx(expected, rel=1e-6)


def test_cores_enough_for_every_instance_are_todays_model_exactly():
    for name in ("wordcount", "diamond"):
        plain = load_model(EXAMPLES / f"{name}.yaml")
        from dataclasses import replace

        total = sum(op.max_parallelism for op in plain.operators)
        roomy = replace(plain, cores=float(total))
        for load in (0.2, 0.6, 0.9):
            rate = load * predict(plain, None, 1.0).max_rate
            a, b = predict(plain, None, rate), predict(roomy, None, rate)
            assert a.latency_ms == b.latency_ms and a.max_rate == b.max_rate  # bit for bit
            assert all(a.operators[o].utilization == b.operators[o].utilization for o in plain.operator_names)


def test_shared_cores_slow_service_and_raise_latency():
    plain, shared = _cores_model(4, None), _cores_model(4, 2)
    rate = 0.5 * predict(shared, None, 1.0).max_rate
    a, b = predict(shared, None, rate), predict(plain, None, rate)
    assert a.max_rate == pytest.approx(200.0)  # 2 cores / 10 ms
    assert a.operators["q"].utilization > b.operators["q"].utilization  # busy time includes the stretch
    for stat in ("mean", "p95", "p99"):
        assert a.latency_ms[stat] > b.latency_ms[stat]


@st.composite
def cored_dags(draw):
    """``random_dags`` whose instances share 1-6 cores, with CPU shares 0-1."""
    from dataclasses import replace

    model = draw(random_dags())
    ops = tuple(replace(op, cpu_share=draw(st.sampled_from([0.0, 0.3, 1.0]))) for op in model.operators)
    return replace(model, operators=ops, cores=float(draw(st.sampled_from([1, 1.5, 2, 4, 6]))))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=cored_dags(), lo=st.floats(0.05, 0.95), hi=st.floats(0.05, 0.95))
def test_shared_cores_invariants(model, lo, hi):
    from dataclasses import replace

    from modeler.queueing import cpu_work_per_tuple

    lo, hi = sorted((lo, hi))
    compiled = compile_model(model)
    max_rate = predict(compiled, None, 1.0).max_rate
    # never above the unlimited-cores capacity, nor above the rate whose CPU work fills the cores
    assert max_rate <= predict(replace(model, cores=None), None, 1.0).max_rate * (1 + 1e-9)
    work = float(cpu_work_per_tuple(compiled, compiled.config_array([{}]))[0])
    if work > 0:
        assert max_rate <= model.cores / work * (1 + 1e-9)
    # more cores never lower the capacity
    assert predict(replace(model, cores=model.cores * 2), None, 1.0).max_rate >= max_rate * (1 - 1e-6)
    # utilization and latency rise with the rate; the hottest instance reaches 1 at max_rate
    a, b = predict(compiled, None, lo * max_rate), predict(compiled, None, hi * max_rate)
    for name in model.operator_names:
        assert b.operators[name].utilization >= a.operators[name].utilization - 1e-9
    assert b.latency_ms["mean"] >= a.latency_ms["mean"] * (1 - 1e-9)
    at = predict(compiled, None, max_rate * (1 - 1e-7))
    assert max(op.max_utilization for op in at.operators.values()) == pytest.approx(1.0, rel=1e-4)
    assert predict(compiled, None, max_rate * 1.001).saturated


@pytest.mark.parametrize("p,cores,cpu_share", [(4, 1, 0.5), (4, 2, 0.5), (8, 2, 1.0), (6, 2, 0.8)])
def test_shared_cores_max_rate_and_light_load_latency_match_the_testbed(p, cores, cpu_share):
    """The testbed's processor sharing (``experiments/testbed``) is the ground truth: max rate
    within 6 % (measured -4.4 to +1.2 %), mean latency at 0.3 of it within 7 % (-1.5 to -5.3 %).
    Near saturation the model is short for CPU-bound instances (docs/design.md): not pinned."""
    from experiments.testbed.config import TestbedConfig
    from experiments.testbed.sim import Testbed

    model = _cores_model(p, cores, cpu_share, service_ms=1.0)
    predicted, measured = _testbed_max_rate(model)
    assert predicted == pytest.approx(measured, rel=0.06)
    bed = Testbed(model, 0.3 * measured, TestbedConfig(seed=2))
    bed.advance(10)
    seen = len(bed.latencies_ms())
    bed.advance(40)
    mean = bed.latencies_ms()[seen:].mean()
    assert predict(model, None, 0.3 * measured).latency_ms["mean"] == pytest.approx(mean, rel=0.07)


# ------------------------------------------------------------------ a source's own CPU work


def _source_cpu_model(p, cores, src_ms, service_ms=1.0, src_p=1, cpu_share=1.0):
    top = {} if cores is None else {"resources": {"cores": cores}}
    return _model([{"name": "src", "role": "source", "parallelism": src_p, "cpu_ms_per_tuple": src_ms},
                   {"name": "q", "parallelism": p, "service_time_ms": service_ms, "cpu_share": cpu_share}],
                  [{"from": "src", "to": "q"}], **top)


def test_a_source_cpu_cost_without_cores_is_todays_model_exactly():
    from dataclasses import replace

    for name in ("wordcount", "diamond", "pipeline"):
        plain = load_model(EXAMPLES / f"{name}.yaml")
        costly = replace(plain, operators=tuple(replace(op, cpu_ms_per_tuple=5.0) if op.is_source else op
                                                for op in plain.operators))
        assert compile_model(costly).source_cpu_s is None
        P = compile_model(plain).config_array([{}, {n: 3 for n in plain.operator_names
                                                    if not plain.operator(n).is_source}])
        rates = np.array([0.3, 0.8]) * predict_batch(compile_model(plain), P, 1.0).max_rate
        a, b = predict_batch(compile_model(plain), P, rates), predict_batch(compile_model(costly), P, rates)
        for column in ("max_rate", "bottleneck", "utilization", "sojourn_ms", "latency_mean_ms", "latency_p99_ms"):
            assert np.array_equal(getattr(a, column), getattr(b, column), equal_nan=True), column


@pytest.mark.parametrize("p,cores,src_ms,src_p,expected,bottleneck", [
    (1, 2, 2.0, 1, 500.0, "src"),     # two threads on two cores: the source's 1 / 2 ms
    (1, 2, 0.5, 1, 1000.0, "q"),      # the operator's 1 / 1 ms
    (1, 4, 2.0, 2, 1000.0, "src"),    # two source instances (threads): 2 / 2 ms
    (1, 1, 1.0, 1, 500.0, "q"),       # one core for both: 1 core / (1 + 1) ms of CPU per tuple
])
def test_source_cpu_cost_capacity_closed_forms(p, cores, src_ms, src_p, expected, bottleneck):
    pred = predict(_source_cpu_model(p, cores, src_ms, src_p=src_p), None, 1.0)
    assert pred.max_rate == pytest.approx(expected, rel=1e-6)
    if cores > 1:  # on one core both saturate together: either may be named
        assert pred.bottleneck == bottleneck


def test_source_cpu_work_fills_the_cores_and_slows_the_source_and_the_operators():
    from modeler.queueing import cpu_work_per_tuple

    cheap, costly = _source_cpu_model(8, 2, 1e-9), _source_cpu_model(8, 2, 1.0)
    compiled = compile_model(costly)
    work = float(cpu_work_per_tuple(compiled, compiled.config_array([{}]))[0])
    assert work == pytest.approx(2.0 / 1000.0)  # 1 ms of the source + 1 ms of q, core-seconds
    max_rate = predict(costly, None, 1.0).max_rate
    # below both the cores' 2 / 2 ms and the source thread's 1 / 1 ms: sharing stretches the source
    assert max_rate < 1000.0 * (1 - 1e-3)
    assert predict(costly, None, 1.0).bottleneck == "src"
    assert predict(cheap, None, 1.0).max_rate == pytest.approx(2000.0, rel=1e-3)  # q alone: 2 cores / 1 ms
    rate = 0.5 * max_rate
    a, b = predict(costly, None, rate), predict(cheap, None, rate)
    assert a.operators["q"].utilization > b.operators["q"].utilization  # q waits for cores the source uses
    assert a.latency_ms["mean"] > b.latency_ms["mean"]
    assert a.operators["src"].utilization == 0.0  # engines report no busy time for a generating source
    assert not predict(costly, None, max_rate * (1 - 1e-6)).saturated
    assert predict(costly, None, max_rate * 1.001).saturated


@st.composite
def cored_dags_with_source_cpu(draw):
    """``cored_dags`` whose sources have a CPU cost per generated tuple."""
    from dataclasses import replace

    model = draw(cored_dags())
    costs = st.sampled_from([1e-3, 0.05, 0.5, 2.0])
    ops = tuple(replace(op, cpu_ms_per_tuple=draw(costs)) if op.is_source and op.service_time_ms is None else op
                for op in model.operators)
    return model, replace(model, operators=ops)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=cored_dags_with_source_cpu(), load=st.floats(0.05, 0.95))
def test_source_cpu_cost_invariants(pair, load):
    from modeler.queueing import cpu_work_per_tuple

    without, model = pair
    compiled = compile_model(model)
    max_rate = predict(compiled, None, 1.0).max_rate
    # a source's CPU only takes capacity away, never beyond the cores' or its threads' limits
    assert max_rate <= predict(without, None, 1.0).max_rate * (1 + 1e-9)
    work = float(cpu_work_per_tuple(compiled, compiled.config_array([{}]))[0])
    assert max_rate <= model.cores / work * (1 + 1e-9)
    shares = model.source_shares()
    for op in model.sources:
        if op.cpu_ms_per_tuple is not None and shares[op.name] > 0:
            assert max_rate <= op.parallelism / (shares[op.name] * op.cpu_ms_per_tuple / 1000.0) * (1 + 1e-9)
    # every operator is at least as busy as without the sources' CPU (they wait for cores too)
    a, b = predict(compiled, None, load * max_rate), predict(without, None, load * max_rate)
    for name in model.operator_names:
        assert a.operators[name].utilization >= b.operators[name].utilization * (1 - 1e-9)
    assert not predict(compiled, None, max_rate * (1 - 1e-6)).saturated
    assert predict(compiled, None, max_rate * 1.001).saturated


# ------------------------------------------------------------------ per-instance CPU overhead


def _cored_job(p, resources, cpu_share, service_ms):
    """A source feeding ``q`` (``p`` instances) under ``resources``."""
    return _model([{"name": "src", "role": "source"},
                   {"name": "q", "parallelism": p, "service_time_ms": service_ms, "cpu_share": cpu_share}],
                  [{"from": "src", "to": "q"}], resources=resources)


def _overhead_model(p, cores, h, cpu_share=1.0, service_ms=10.0):
    return _cored_job(p, {"cores": cores, "cpu_overhead_per_instance": h}, cpu_share, service_ms)


@pytest.mark.parametrize("p,cores,h,cpu_share,expected", [
    (8, 2, 0.05, 1.0, 2 / (0.010 * 1.3)),   # 6 instances beyond the cores: m = 1.3, cores / (m E[S])
    (4, 1, 0.1, 1.0, 1 / (0.010 * 1.3)),    # 3 beyond: m = 1.3
    (2, 2, 0.5, 1.0, 200.0),                # no instance beyond the cores: m = 1, p / E[S]
    (8, 2, 0.5, 0.0, 800.0),                # no CPU work: neither the cores nor the overhead matter
])
def test_cpu_overhead_capacity_closed_forms(p, cores, h, cpu_share, expected):
    assert predict(_overhead_model(p, cores, h, cpu_share), None, 1.0).max_rate == pytest.approx(expected, rel=1e-6)


def test_cpu_overhead_grows_only_the_cpu_part_of_the_service():
    from modeler.queueing import cpu_overhead_factor, cpu_work_per_tuple

    model = _overhead_model(8, 2, 0.05, cpu_share=0.4)
    compiled = compile_model(model)
    P = compiled.config_array([{}, {"q": 2}, {"q": 5}])
    assert cpu_overhead_factor(compiled, P) == pytest.approx([1.3, 1.0, 1.15])
    # CPU work: cpu_share x E[S] x m (core-seconds per tuple)
    assert cpu_work_per_tuple(compiled, P) == pytest.approx([0.004 * 1.3, 0.004, 0.004 * 1.15])
    # at light load (no stretch to speak of) busy time per tuple is E[S](1 + c (m - 1)): the
    # service grows by the CPU it adds, not by m
    light = predict(model, {"q": 8}, 1.0)
    assert light.operators["q"].utilization * 8 / 1.0 * 1000 == pytest.approx(10.0 * (1 + 0.4 * 0.3), rel=0.01)


def test_files_without_the_overhead_or_with_enough_cores_are_todays_model_exactly():
    from dataclasses import replace

    for name in ("wordcount", "diamond"):
        plain = load_model(EXAMPLES / f"{name}.yaml")
        cored = replace(plain, cores=2.0)
        assert compile_model(cored).cpu_overhead_per_instance == 0.0
        # without cores the overhead is ignored; with cores at least the instances it never applies
        total = float(sum(op.max_parallelism for op in plain.operators))
        for base, h in ((plain, 0.3), (replace(plain, cores=total), 0.3)):
            grown = replace(base, cpu_overhead_per_instance=h)
            P = compile_model(base).config_array([{}, {n: 3 for n in base.operator_names
                                                       if not base.operator(n).is_source}])
            rates = np.array([0.3, 0.8]) * predict_batch(compile_model(base), P, 1.0).max_rate
            a, b = predict_batch(compile_model(base), P, rates), predict_batch(compile_model(grown), P, rates)
            for column in ("max_rate", "bottleneck", "utilization", "sojourn_ms", "latency_mean_ms", "latency_p99_ms"):
                assert np.array_equal(getattr(a, column), getattr(b, column), equal_nan=True), (name, column)
    # and with instances beyond the cores it does change the model (the comparison above can fail)
    cored_p = compile_model(cored).config_array([{n: 3 for n in cored.operator_names if not cored.operator(n).is_source}])
    grown = compile_model(replace(cored, cpu_overhead_per_instance=0.3))
    assert predict_batch(grown, cored_p, 1.0).max_rate[0] < predict_batch(compile_model(cored), cored_p, 1.0).max_rate[0]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=cored_dags(), h=st.sampled_from([0.01, 0.1, 0.5]), load=st.floats(0.05, 0.95))
def test_cpu_overhead_invariants(model, h, load):
    from dataclasses import replace

    _assert_only_takes_capacity(model, compile_model(replace(model, cpu_overhead_per_instance=h)), load)


def _assert_only_takes_capacity(model, loaded, load):
    """``loaded`` (``model`` with more CPU work) only takes capacity away, never beyond the rate
    whose CPU work fills the cores; every operator at least as busy as without it at the same
    rate; saturation at its max rate."""
    from modeler.queueing import cpu_work_per_tuple

    max_rate = predict(loaded, None, 1.0).max_rate
    assert max_rate <= predict(model, None, 1.0).max_rate * (1 + 1e-9)
    work = float(cpu_work_per_tuple(loaded, loaded.config_array([{}]))[0])
    if work > 0:
        assert max_rate <= model.cores / work * (1 + 1e-9)
    a, b = predict(loaded, None, load * max_rate), predict(model, None, load * max_rate)
    for name in model.operator_names:
        assert a.operators[name].utilization >= b.operators[name].utilization * (1 - 1e-9)
    assert not predict(loaded, None, max_rate * (1 - 1e-6)).saturated
    assert predict(loaded, None, max_rate * 1.001).saturated


@pytest.mark.parametrize("p,cores,cpu_share,h", [(8, 2, 1.0, 0.05), (6, 2, 0.8, 0.1), (4, 1, 0.5, 0.2)])
def test_cpu_overhead_max_rate_matches_the_testbed(p, cores, cpu_share, h):
    """The testbed with the same overhead (``experiments/testbed``: each CPU phase m times longer)
    is the ground truth: max rate within 6 % (the tolerance of the shared-core comparison above;
    measured -3.1 to +0.4 %). The overhead must show: both fall below the model without it."""
    from dataclasses import replace

    model = _overhead_model(p, cores, h, cpu_share, service_ms=1.0)
    predicted, measured = _testbed_max_rate(model)
    assert predicted == pytest.approx(measured, rel=0.06)
    assert measured < 0.95 * predict(replace(model, cpu_overhead_per_instance=0.0), None, 1.0).max_rate


# ------------------------------------------------------------------ the engine's own CPU


def _engine_model(p, cores, e_ms, cpu_share=1.0, service_ms=1.0):
    return _cored_job(p, {"cores": cores, "engine_cpu_ms_per_tuple": e_ms}, cpu_share, service_ms)


@pytest.mark.parametrize("p,cores,e_ms,expected", [
    (8, 2, 1.0, 2 / 0.002),     # many instances, cpu_share 1: the cores fill at K / (E[S] + e)
    (8, 2, 0.25, 2 / 0.00125),
    (8, 1, 0.5, 1 / 0.0015),
])
def test_engine_cpu_capacity_closed_forms(p, cores, e_ms, expected):
    assert predict(_engine_model(p, cores, e_ms), None, 1.0).max_rate == pytest.approx(expected, rel=0.02)


def test_engine_cpu_counts_in_the_work_and_only_takes_capacity_away():
    from dataclasses import replace

    from modeler.queueing import cpu_work_per_tuple

    model = _engine_model(4, 2, 0.3, cpu_share=0.5)
    compiled = compile_model(model)
    P = compiled.config_array([{}])
    assert cpu_work_per_tuple(compiled, P) == pytest.approx([0.0005 + 0.0003])
    without = predict(replace(model, engine_cpu_ms_per_tuple=0.0), None, 1.0).max_rate
    rates = [predict(replace(model, engine_cpu_ms_per_tuple=e), None, 1.0).max_rate for e in (0.0, 0.1, 0.3, 1.0)]
    assert rates[0] == without and all(b < a for a, b in zip(rates, rates[1:])), rates
    # at the same rate every instance is at least as busy (its work stretched by the engine's)
    a, b = predict(model, None, 0.6 * rates[2]), predict(replace(model, engine_cpu_ms_per_tuple=0.0), None, 0.6 * rates[2])
    assert a.operators["q"].utilization > b.operators["q"].utilization
    # without cores it is ignored, and a file without it is the model before it, bit for bit
    assert compile_model(replace(model, cores=None)).engine_cpu_s == 0.0
    plain = load_model(EXAMPLES / "wordcount.yaml")
    cored = replace(plain, cores=2.0)
    P = compile_model(cored).config_array([{n: 3 for n in cored.operator_names if not cored.operator(n).is_source}])
    x = predict_batch(compile_model(cored), P, 1.0)
    y = predict_batch(compile_model(replace(cored, engine_cpu_ms_per_tuple=0.0)), P, 1.0)
    assert np.array_equal(x.max_rate, y.max_rate)
    assert predict_batch(compile_model(replace(cored, engine_cpu_ms_per_tuple=0.05)), P, 1.0).max_rate[0] < x.max_rate[0]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=cored_dags(), e_ms=st.sampled_from([0.01, 0.1, 1.0]), load=st.floats(0.05, 0.95))
def test_engine_cpu_invariants(model, e_ms, load):
    from dataclasses import replace

    _assert_only_takes_capacity(model, compile_model(replace(model, engine_cpu_ms_per_tuple=e_ms)), load)


@pytest.mark.parametrize("p,cores,cpu_share,e_ms", [(8, 2, 1.0, 0.5), (4, 2, 0.6, 0.3), (3, 1, 0.8, 0.2)])
def test_engine_cpu_max_rate_matches_the_testbed(p, cores, cpu_share, e_ms):
    """The testbed running the engine's CPU as what the term stands for (``cores`` threads doing
    e ms of CPU per input tuple, ``experiments.testbed.engine``) is the ground truth: max rate
    within 6 % (the shared-core comparisons' tolerance). The term must show: both below the model
    without it."""
    from dataclasses import replace

    from experiments.testbed.engine import with_engine_threads

    model = _engine_model(p, cores, e_ms, cpu_share, service_ms=1.0)
    predicted, measured = _testbed_max_rate(model, bed_model=with_engine_threads(model))
    assert predicted == pytest.approx(measured, rel=0.06)
    assert measured < 0.95 * predict(replace(model, engine_cpu_ms_per_tuple=0.0), None, 1.0).max_rate
