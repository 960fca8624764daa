"""``scheduler.targets.Targets``: one validated value; the utilization target's default depends
on whether a latency SLO sizes the plan."""

from __future__ import annotations

import pytest

from modeler.modelfile import parse_model_text
from scheduler.errors import SchedulerError
from scheduler.plan import PlanConfig, plan
from scheduler.targets import SLO_UTILIZATION_CEILING, UTILIZATION_TARGET, Targets
from tests.scheduler.synth import model_text


def test_default_utilization_is_a_ceiling_under_an_slo():
    assert Targets().utilization_target == UTILIZATION_TARGET == 0.7
    assert Targets(latency_slo_ms=50.0).utilization_target == SLO_UTILIZATION_CEILING == 0.9
    assert Targets(utilization_target=0.6, latency_slo_ms=50.0).utilization_target == 0.6
    assert Targets(latency_slo_ms=50.0) == Targets(utilization_target=0.9, latency_slo_ms=50.0)
    assert PlanConfig(latency_slo_ms=50.0).utilization_target == 0.9  # the legacy keywords too


@pytest.mark.parametrize("kwargs,field", [({"utilization_target": 0.0}, "utilization_target"),
                                          ({"utilization_target": 1.5}, "utilization_target"),
                                          ({"latency_slo_ms": -1.0}, "latency_slo_ms"),
                                          ({"latency_stat": "p50"}, "latency_stat"),
                                          ({"headroom": -0.1}, "headroom"),
                                          ({"catch_up_s": 0.0}, "catch_up_s")])
def test_bad_values_name_the_field(kwargs, field):
    with pytest.raises(SchedulerError) as info:
        Targets(**kwargs)
    assert info.value.field == field


def test_an_slo_that_allows_it_sizes_hotter_than_0_7():
    # one operator at 1 ms: at 2,400/s a 0.7 target needs ceil(2.4 / 0.7) = 4 instances; a loose
    # p99 SLO with the 0.9 ceiling needs ceil(2.4 / 0.9) = 3, a tight one more
    model = parse_model_text(model_text({"a": 1.0}, {"a": 1}))
    fixed = plan(model, 2400.0, PlanConfig(Targets(utilization_target=0.7)))
    loose = plan(model, 2400.0, PlanConfig(Targets(latency_slo_ms=1000.0)))
    assert fixed.config["a"] == 4 and loose.config["a"] == 3
    tight = plan(model, 2400.0, PlanConfig(Targets(latency_slo_ms=loose.prediction.latency_ms["p99"] * 0.5)))
    assert tight.config["a"] > loose.config["a"]
