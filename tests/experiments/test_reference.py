"""``experiments.reference``: the reference configuration is the fewest instances meeting the
targets (brute force agrees), is found without augury's planner and is confirmed on the testbed."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from experiments.randomdag import RandomDagSpec, random_model
from experiments.reference import (ConfirmSettings, ReferenceError, References, RunTargets, _Space,
                                   count_cheaper, find_reference, measure, oracle, sizing_margin,
                                   utilization_only_config)
from modeler.modelfile import parse_model
from modeler.queueing import predict

SMALL = {"augury": 1, "job": "small", "network_delay_ms": 0.1,
         "operators": [{"name": "src", "role": "source", "parallelism": 1},
                       {"name": "a", "service_time_ms": 2.0, "max_parallelism": 9},
                       {"name": "b", "service_time_ms": 1.0, "max_parallelism": 8,
                        "scaling": {"form": "contention", "overhead": 0.02}},
                       {"name": "c", "service_time_ms": 3.0, "max_parallelism": 10}],
         "edges": [{"from": "src", "to": "a"}, {"from": "a", "to": "b", "grouping": "key",
                                                   "keys": {"distribution": "zipf", "exponent": 0.8, "count": 500}},
                   {"from": "a", "to": "c", "selectivity": 0.7}, {"from": "b", "to": "c"}]}


def _brute_force(model, targets):
    """Fewest instances over EVERY configuration within the bounds (itertools.product)."""
    ops = [op for op in model.operators if not op.is_source]
    best = None
    for ps in itertools.product(*[range(op.min_parallelism, op.max_parallelism + 1) for op in ops]):
        config = {op.name: p for op, p in zip(ops, ps)}
        pred = predict(model, config, targets.rate)
        if pred.saturated:
            continue
        hot = max(pred.operators[op.name].max_utilization for op in ops)
        p99 = pred.latency_ms["p99"]
        if hot <= targets.utilization_ceiling + 1e-12 and p99 is not None and p99 <= targets.latency_slo_ms:
            if best is None or sum(ps) < best:
                best = sum(ps)
    return best


@pytest.mark.parametrize("rate, slo", [(300.0, 1000.0), (600.0, 1000.0), (600.0, 20.0), (800.0, 25.0)])
def test_the_oracle_agrees_with_brute_force(rate, slo):
    model = parse_model(SMALL)
    targets = RunTargets(rate=rate, latency_slo_ms=slo)
    found = oracle(_Space(model), targets)
    assert found.instances == _brute_force(model, targets)
    for choice, p99 in found.winners:
        config = _Space(model).config(choice)
        assert sum(v for k, v in config.items() if k != "src") == found.instances
        assert predict(model, config, rate).latency_ms["p99"] == pytest.approx(p99)
    assert found.utilization_only <= found.instances


def test_count_cheaper_counts_every_configuration_below_a_total():
    lo, hi, w = np.array([1, 2, 1]), np.array([4, 3, 5]), np.array([1, 1, 2])
    brute = sum(1 for a, b, c in itertools.product(range(1, 5), range(2, 4), range(1, 6)) if a + b + 2 * c < 9)
    assert count_cheaper(lo, hi, w, 9) == brute


def test_the_reference_search_never_calls_the_planner(monkeypatch):
    """Ground truth independent of augury: scheduler.plan is not used (it raises here)."""
    import scheduler.plan

    def boom(*args, **kwargs):
        raise AssertionError("the reference search called scheduler.plan")
    monkeypatch.setattr(scheduler.plan, "plan", boom)
    for name in dir(scheduler.plan):
        if name.startswith("plan") and callable(getattr(scheduler.plan, name)):
            monkeypatch.setattr(scheduler.plan, name, boom)
    model = random_model(2, RandomDagSpec(skew="zipf"))
    uc = utilization_only_config(model, 300.0)
    slo = 1.5 * predict(model, uc, 300.0).latency_ms["p99"]
    ref = find_reference(model, RunTargets(rate=300.0, latency_slo_ms=slo), ConfirmSettings(measure_s=15.0))
    assert ref.measured.meets and ref.instances <= ref.oracle_instances + 2
    assert ref.cheaper_configs == ref.screened + ref.unsimulated + sum(
        m.instances < ref.oracle_instances for m in ref.simulated)
    text = open(__import__("experiments.reference", fromlist=["x"]).__file__).read()
    assert "scheduler" not in text.split('"""', 2)[2]  # no import of augury's scheduler in the code


def test_measure_reads_the_testbed():
    model = parse_model(SMALL)
    targets = RunTargets(rate=600.0, latency_slo_ms=1000.0)
    config = {"src": 1, "a": 2, "b": 2, "c": 5}
    m = measure(model, config, targets, ConfirmSettings(measure_s=15.0))
    true = predict(model, config, 600.0)
    assert m.instances == 9 and m.hottest_utilization == pytest.approx(m.true_hottest_utilization, abs=0.05)
    assert m.true_hottest_utilization == pytest.approx(max(o.max_utilization for o in true.operators.values()))
    assert 0 < m.p99_ms < 1000 and m.backlog_s <= 1.0 and m.meets
    over = measure(model, {"src": 1, "a": 1, "b": 1, "c": 1}, targets, ConfirmSettings(measure_s=15.0))
    assert not over.meets and over.hottest_utilization > 0.9  # a at 1.2 offered: saturated


def test_references_are_cached_and_infeasible_targets_say_why():
    model = parse_model(SMALL)
    refs = References(model, ConfirmSettings(measure_s=10.0))
    t = RunTargets(rate=600.0, latency_slo_ms=1000.0)
    assert refs.get(t) is refs.get(RunTargets(rate=600.0 + 1e-12, latency_slo_ms=1000.0)) and len(refs.all()) == 1
    with pytest.raises(ReferenceError, match="no parallelism"):
        refs.get(RunTargets(rate=1e6, latency_slo_ms=1000.0))
    with pytest.raises(ReferenceError, match="p99 SLO"):
        refs.get(RunTargets(rate=600.0, latency_slo_ms=0.5))
    assert math.isfinite(refs.get(t).measured.p99_ms)


def test_sizing_margin_is_the_distance_to_the_nearest_sizing_boundary():
    one = parse_model({"augury": 1, "job": "one", "operators": [
        {"name": "src", "role": "source", "parallelism": 1},
        {"name": "a", "service_time_ms": 1.0, "max_parallelism": 8}], "edges": [{"from": "src", "to": "a"}]})
    # 1 ms per tuple: 1,990/s needs 1.99 instances at 100 %: 2, and 2,000/s is the boundary above
    assert sizing_margin(one, 1990.0, 1.0) == pytest.approx(2000.0 / 1990.0 - 1.0)
    # 2,010/s needs 3; 2,000/s is the boundary below, 0.5 % down
    assert sizing_margin(one, 2010.0, 1.0) == pytest.approx(1.0 - 2000.0 / 2010.0)
    # at a 0.7 ceiling 1,990/s needs 3 (2.84): 1,400/s and 2,100/s bound it, 2,100 is nearer
    assert sizing_margin(one, 1990.0, 0.7) == pytest.approx(2100.0 / 1990.0 - 1.0)
