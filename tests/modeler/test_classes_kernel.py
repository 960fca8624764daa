"""The key-grouped operators' class sum (``modeler._classes_kernel``, ``_OpDist._classes_transform``)
equals the computation it replaced: the padded [rows, classes] grid, class by class, with two
complex exponentials per class for the in-clump wait (``_OpDist._classes_transform_grid``), and the
p95/p99 it feeds equal the ones that computation gave (issue 22: the what-if speed on key-grouped
models)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from modeler import _classes_kernel, queueing
from modeler.modelfile import load_model, parse_model
from modeler.queueing import _BETA, compile_model, predict, predict_batch
from tests.conftest import EXAMPLES


def _keyed(selectivity: float, exponent: float, count: int, two_inputs: bool):
    """src -> a -> agg (key-grouped, Zipf keys) [-> agg from b by shuffle too] -> out."""
    ops = [{"name": "src", "role": "source"},
           {"name": "a", "parallelism": 2, "service_time_ms": 0.3},
           {"name": "agg", "parallelism": 4, "service_time_ms": 0.2, "max_parallelism": 64},
           {"name": "out", "service_time_ms": 0.1}]
    edges = [{"from": "src", "to": "a"},
             {"from": "a", "to": "agg", "grouping": "key", "selectivity": selectivity,
              "keys": {"distribution": "zipf", "exponent": exponent, "count": count}},
             {"from": "agg", "to": "out", "selectivity": 0.5}]
    if two_inputs:  # a second stream into the key-grouped operator: superposed classes
        ops.insert(2, {"name": "b", "parallelism": 1, "service_time_ms": 0.1})
        edges += [{"from": "src", "to": "b"}, {"from": "b", "to": "agg", "selectivity": 2.0}]
    return parse_model({"augury": 1, "job": "t", "operators": ops, "edges": edges})


def _batch(model, rng, n=40):
    compiled = compile_model(model)
    P = np.repeat(compiled.config_array([{}]), n, axis=0)
    agg, a = compiled.index["agg"], compiled.index["a"]
    P[:, agg] = rng.integers(1, 65, size=n)
    P[:, a] = rng.integers(1, 9, size=n)
    rate = predict(compiled, None, 1.0).max_rate * rng.uniform(0.05, 1.2, size=n)
    return compiled, predict_batch(compiled, P, rate)


def _points(n, rng, scale_s):
    """Laplace points s = beta / t of the Euler inversion at t around the latencies (s^-1)."""
    t = scale_s * rng.uniform(0.2, 20.0, size=n)
    return (_BETA[None, :] / t[:, None]).astype(np.complex128)


@settings(max_examples=40, deadline=None)
@given(selectivity=st.sampled_from([0.5, 1.0, 3.0, 7.0, 40.0, 150.0]), exponent=st.floats(0.0, 1.3),
       count=st.sampled_from([5, 50, 10_000]), two_inputs=st.booleans(), seed=st.integers(0, 2**16))
def test_class_sum_equals_the_padded_grid(selectivity, exponent, count, two_inputs, seed):
    # 150 makes clump sizes above the running sum's limit (_DIRECT_N): the closed form per pair.
    rng = np.random.default_rng(seed)
    compiled, batch = _batch(_keyed(selectivity, exponent, count, two_inputs), rng)
    rows = np.arange(len(batch.rate))
    batch.tail.prepare(rows)
    dist = batch.tail.ops[compiled.index["agg"]].take(rows)
    assert dist.weight.shape[1] > 1  # several instance classes: the path under test
    s = _points(len(rows), rng, float(dist.es.mean()))
    x = s * dist.es[:, None]
    grid = dist._classes_transform_grid(s, x)
    scale = np.abs(grid).max(axis=1, keepdims=True)
    for got in (dist._classes_transform(s, x), dist._classes_transform_numpy(s, x)):
        err = np.abs(got - grid) / scale
        assert err.max() <= 1e-13, err.max()


def test_the_compiled_loop_is_used():
    # numba is a dependency: the compiled loop, not the numpy fallback, is what runs.
    assert _classes_kernel.HAVE_NUMBA


@pytest.mark.parametrize("example,rates", [("wordcount.yaml", (500.0, 3000.0, 6000.0))])
def test_quantiles_equal_the_grid_computation(example, rates, monkeypatch):
    """p95/p99 over a 16 x 16 sweep of the bundled wordcount (Zipf keys, selectivity 7), with the
    class sum as it is and with the padded grid (the computation before) put back, and per row
    through ``predict`` (one configuration at a time)."""
    model = load_model(EXAMPLES / example)
    compiled = compile_model(model)
    split, count = compiled.index["split"], compiled.index["count"]
    P = np.repeat(compiled.config_array([{}]), 256 * len(rates), axis=0)
    grid = np.array([(a, b) for a in range(1, 17) for b in range(1, 17) for _ in rates])
    P[:, split], P[:, count] = grid[:, 0], grid[:, 1] * 4
    R = np.tile(np.array(rates), 256)
    fast = predict_batch(compiled, P, R)
    fast_q = {stat: fast.latency(stat) for stat in ("p95", "p99")}
    assert np.isfinite(fast_q["p99"]).sum() > 300  # most rows below saturation

    def padded(self, s, x):
        return self._classes_transform_grid(s, x)

    monkeypatch.setattr(queueing._OpDist, "_classes_transform", padded)
    slow = predict_batch(compiled, P, R)
    for stat in ("p95", "p99"):
        np.testing.assert_allclose(fast_q[stat], slow.latency(stat), rtol=1e-9, equal_nan=True)
    monkeypatch.undo()
    for i in range(0, len(R), 37):
        single = predict(compiled, {"split": int(P[i, split]), "count": int(P[i, count])}, float(R[i]))
        if single.saturated:
            assert np.isnan(fast_q["p99"][i])
        else:
            assert single.latency_ms["p99"] == pytest.approx(fast_q["p99"][i], rel=1e-9)
            assert single.latency_ms["p95"] == pytest.approx(fast_q["p95"][i], rel=1e-9)
