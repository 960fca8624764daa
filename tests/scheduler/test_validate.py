"""scheduler.validate agrees with predict; headroom is where the first violation appears."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from modeler.modelfile import load_model
from modeler.queueing import predict
from scheduler.errors import ProposalError
from scheduler.validate import ValidateConfig, parse_proposal, read_proposal, validate
from tests.conftest import EXAMPLES

MODELS = {n: load_model(EXAMPLES / f"{n}.yaml") for n in ("wordcount", "diamond", "pipeline")}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(MODELS)), load=st.floats(0.05, 1.3), target=st.sampled_from([0.5, 0.7, 1.0]),
       slo_factor=st.one_of(st.none(), st.floats(0.8, 3.0)), stat=st.sampled_from(["mean", "p95", "p99"]),
       data=st.data())
def test_validate_agrees_with_predict(name, load, target, slo_factor, stat, data):
    model = MODELS[name]
    config = {op.name: data.draw(st.integers(op.min_parallelism, min(op.max_parallelism, 8)))
              for op in model.operators if not op.is_source}
    base = predict(model, config, 1.0)
    rate = load * base.max_rate
    pred = predict(model, config, rate)
    slo = None
    if slo_factor is not None:
        slo = slo_factor * predict(model, config, 0.5 * base.max_rate).latency_ms[stat]
    result = validate(model, rate, config, ValidateConfig(target, slo, stat))
    assert result.prediction == pred
    util = {v.operator: v.value for v in result.violations if v.kind == "utilization"}
    assert util == {n: op.max_utilization for n, op in pred.operators.items() if op.max_utilization > target * (1 + 1e-9)}
    assert any(v.kind == "saturation" for v in result.violations) == pred.saturated
    lat = pred.latency_ms[stat]
    assert any(v.kind == "latency" for v in result.violations) == (slo is not None and (lat is None or lat > slo * (1 + 1e-12)))
    assert result.ok == (not result.violations)
    # Headroom: no violation just below max_rate, a violation just above it.
    h = result.headroom
    assert h.max_rate <= target * base.max_rate * (1 + 1e-9)
    if h.max_rate > 0:
        assert validate(model, h.max_rate * (1 - 1e-6), config, ValidateConfig(target, slo, stat)).ok
    above = h.max_rate * (1 + 1e-6) if h.max_rate > 0 else 1e-6 * base.max_rate
    assert not validate(model, above, config, ValidateConfig(target, slo, stat)).ok
    assert h.ratio == pytest.approx(h.max_rate / rate)
    assert result.ok == (h.max_rate >= rate) or abs(h.max_rate - rate) < 1e-6 * rate


def test_headroom_names_what_breaks_first():
    model = MODELS["diamond"]
    pred = predict(model, None, 1.0)
    util_only = validate(model, 100.0)
    assert util_only.headroom.max_rate == pytest.approx(0.7 * pred.max_rate)
    assert util_only.headroom.limited_by == {"kind": "utilization", "operator": pred.bottleneck}
    lat = predict(model, None, 0.3 * pred.max_rate).latency_ms["p99"]
    tight = validate(model, 100.0, None, ValidateConfig(latency_slo_ms=lat))
    assert tight.headroom.limited_by["kind"] == "latency"
    assert tight.headroom.max_rate == pytest.approx(0.3 * pred.max_rate, rel=1e-6)


def test_saturated_configuration_reports_saturation_and_unbounded_latency():
    model = MODELS["wordcount"]
    pred = predict(model, None, 1.0)
    result = validate(model, 2 * pred.max_rate, None, ValidateConfig(latency_slo_ms=100.0))
    kinds = {(v.kind, v.operator) for v in result.violations}
    assert ("saturation", pred.bottleneck) in kinds
    (lat,) = [v for v in result.violations if v.kind == "latency"]
    assert lat.value is None and lat.limit == 100.0
    assert result.headroom.ratio < 1


@pytest.mark.parametrize("data,expected", [
    ({"split": 3, "count": 4}, {"split": 3, "count": 4}),
    ({"split": {"parallelism": 3}}, {"split": 3}),
    ({"split": {"parallelism": {"lowerBound": 1, "upperBound": 5}}}, {"split": 5}),
    ({"vertices": [{"id": "bc76", "name": "split", "parallelism": 2}]}, {"split": 2}),
    ({"pipeline.jobvertex-parallelism-overrides": "split:2,count:6"}, {"split": 2, "count": 6}),
])
def test_proposal_shapes(data, expected, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert read_proposal(path, MODELS["wordcount"]) == expected
    assert parse_proposal(data) == expected


@pytest.mark.parametrize("text,field", [
    ('{"nope": 2}', "nope"), ('{"split": 0}', "split"), ('{"split": "x"}', "split"),
    ('{"split": {"parallelism": {"lowerBound": 1}}}', "split.parallelism"), ("[1]", None), ("{", None),
    ('{"split": ' + "9" * 400 + "}", "split"), ('{"split": 1e400}', "split"),  # no OverflowError (issue 22)
])
def test_bad_proposals_name_file_and_field(text, field, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(ProposalError) as err:
        read_proposal(path, MODELS["wordcount"])
    assert str(path) in str(err.value)
    if field:
        assert f"field '{field}'" in str(err.value)
