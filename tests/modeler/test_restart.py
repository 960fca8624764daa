"""The restart model: restart time from the state a change restores, and its calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from modeler.errors import CalibrationError, ConfigError, ModelError
from modeler.modelfile import parse_model
from modeler.restart import (DEFAULT_RESTART_BASE_S, RestartFitConfig, apply_restart_fit,
                             changed_operators, compress_restart, fit_restart_model,
                             restart_estimate, restart_time_s, state_moved_mb)


def _model(state=(0.0, 0.0), base=None, rate=None):
    data = {
        "augury": 1, "job": "j",
        "operators": [
            {"name": "src", "role": "source"},
            {"name": "a", "parallelism": 2, "service_time_ms": 1.0, "state_mb": state[0]},
            {"name": "b", "parallelism": 2, "service_time_ms": 1.0, "state_mb": state[1]},
        ],
        "edges": [{"from": "src", "to": "a"}, {"from": "a", "to": "b", "grouping": "key"}],
    }
    if base is not None:
        data["restart_base_s"] = base
    if rate is not None:
        data["restore_mb_per_s"] = rate
    return parse_model(data, "m.yaml")


def test_no_state_and_no_restart_model_is_the_default_fixed_restart():
    model = _model()
    est = restart_estimate(model, None, {"a": 3})
    assert est.restart_s == DEFAULT_RESTART_BASE_S == 10.0 and est.base_assumed
    assert est.state_mb == 0.0 and est.changed == ("a",)
    # the caller's default (the testbed's restart_s) is today's restart time
    assert restart_time_s(model, None, {"a": 3}, default_base_s=30.0) == 30.0


def test_no_change_no_restart():
    model = _model((500.0, 0.0), base=5.0, rate=50.0)
    assert restart_time_s(model, None, None) == 0.0
    assert restart_time_s(model, {"a": 2}, {"b": 2}) == 0.0
    assert restart_estimate(model, model.config, model.config).changed == ()


def test_base_plus_all_of_the_jobs_state_over_the_restore_rate():
    model = _model((500.0, 1500.0), base=5.0, rate=50.0)
    # any change restores the whole job's state (Flink restarts the whole job)
    for to in ({"a": 3}, {"b": 4}, {"a": 1, "b": 1}):
        est = restart_estimate(model, None, to)
        assert est.state_mb == 2000.0 and est.restart_s == pytest.approx(5.0 + 2000.0 / 50.0)
        assert not est.base_assumed
    assert state_moved_mb(model, {"a": 3}, {"a": 3}) == 0.0
    assert changed_operators(model, {"a": 3}, None) == ("a",)
    d = restart_estimate(model, None, {"a": 3}).to_dict()
    assert d == {"restart_s": 45.0, "base_s": 5.0, "state_mb": 2000.0, "restore_mb_per_s": 50.0,
                 "base_assumed": False, "changed": ["a"]}


def test_errors_name_the_field():
    model = _model((100.0, 0.0), base=1.0, rate=10.0)
    with pytest.raises(ConfigError) as err:
        restart_time_s(model, None, {"nope": 2})
    assert err.value.field == "to_config" and err.value.value == "nope"
    # a model built in code with state but no restore rate
    from dataclasses import replace
    with pytest.raises(ModelError) as err:
        restart_time_s(replace(model, restore_mb_per_s=None), None, {"a": 3})
    assert err.value.field == "restore_mb_per_s" and "m.yaml" in str(err.value)
    with pytest.raises(ModelError):
        restart_time_s(_model(), None, {"a": 3}, default_base_s=-1.0)


def test_compressed_restart_model_scales_the_restart_time():
    model = _model((300.0, 0.0), base=20.0, rate=10.0)
    fast = compress_restart(model, 10.0)
    assert restart_time_s(fast, None, {"a": 3}) == pytest.approx(restart_time_s(model, None, {"a": 3}) / 10)
    assert compress_restart(_model(), 4.0).restart_base_s is None
    with pytest.raises(ModelError):
        compress_restart(model, 0.0)


_state = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(a=_state, b=_state, extra=_state, base=st.floats(0.0, 1e4), rate=st.floats(1e-3, 1e6))
def test_restart_time_is_monotone_in_state_and_at_least_the_base(a, b, extra, base, rate):
    small = _model((a, b), base=base, rate=rate)
    large = _model((a + extra, b), base=base, rate=rate)
    t_small = restart_time_s(small, None, {"b": 3})
    t_large = restart_time_s(large, None, {"b": 3})
    assert base <= t_small <= t_large
    # a faster restore never lengthens a restart
    assert restart_time_s(_model((a, b), base=base, rate=rate * 2), None, {"b": 3}) <= t_small


# ------------------------------------------------------------------ calibration


def test_fit_recovers_base_and_rate_exactly_on_a_line():
    samples = [(mb, 8.0 + mb / 40.0) for mb in (0.0, 200.0, 1000.0, 4000.0)]
    fit = fit_restart_model(samples)
    assert fit.base_s == pytest.approx(8.0) and fit.restore_mb_per_s == pytest.approx(40.0)
    assert fit.trusted and fit.reasons == () and fit.samples == 4
    assert fit.predict_s(2000.0) == pytest.approx(58.0)


def test_fit_recovers_base_and_rate_from_noisy_restarts():
    rng = np.random.default_rng(3)
    mb = rng.uniform(0, 6000, 40)
    secs = 15.0 + mb / 120.0 + rng.normal(0, 1.0, 40)
    fit = fit_restart_model(zip(mb.tolist(), secs.tolist()))
    assert fit.base_s == pytest.approx(15.0, rel=0.1)
    assert fit.restore_mb_per_s == pytest.approx(120.0, rel=0.05)
    assert fit.trusted and fit.rms_error_s == pytest.approx(1.0, rel=0.3)


@pytest.mark.parametrize("samples,field", [
    ([], "restarts"),
    ([(100.0, 12.0)], "restarts"),
    ([(100.0, 12.0), (100.0, 13.0), (100.0, 11.0)], "restarts.state_mb"),  # collinear in x
    ([(0.0, 12.0), (1000.0, 11.0)], "restarts"),  # slope <= 0
    ([(0.0, 1.0), (-5.0, 2.0)], "restarts[1].state_mb"),
    ([(0.0, 1.0), (5.0, float("nan"))], "restarts[1].restart_s"),
    ([(0.0, 1.0), "x"], "restarts[1]"),
])
def test_fit_errors_are_typed_and_name_the_field(samples, field):
    with pytest.raises(CalibrationError) as err:
        fit_restart_model(samples)
    assert err.value.field == field


def test_weak_fits_are_returned_untrusted_with_reasons():
    two = fit_restart_model([(0.0, 10.0), (1000.0, 20.0)])
    assert not two.trusted and math.isnan(two.holdout_error)
    assert any("min_samples" in r for r in two.reasons)
    narrow = fit_restart_model([(1000.0, 20.0), (1010.0, 20.1), (1020.0, 20.2)])
    assert not narrow.trusted and any("min_state_spread" in r for r in narrow.reasons)
    noisy = fit_restart_model([(0.0, 10.0), (100.0, 40.0), (200.0, 12.0), (300.0, 60.0)])
    assert not noisy.trusted and any("leave-one-out" in r for r in noisy.reasons)
    negative = fit_restart_model([(100.0, 1.0), (200.0, 3.0), (300.0, 5.0)])
    assert negative.base_s == 0.0 and any("origin" in r for r in negative.reasons)
    assert fit_restart_model([(0.0, 10.0), (1000.0, 20.0)],
                             RestartFitConfig(min_samples=2)).reasons == ()


def test_apply_restart_fit_writes_the_model_and_its_diagnostics():
    model = _model((1000.0, 0.0), base=1.0, rate=1.0)
    fit = fit_restart_model([(0.0, 6.0), (500.0, 11.0), (1000.0, 16.0)])
    fitted = apply_restart_fit(model, fit)
    assert fitted.restart_base_s == pytest.approx(6.0) and fitted.restore_mb_per_s == pytest.approx(100.0)
    assert fitted.calibration["restart"]["trusted"] is True
    assert restart_time_s(fitted, None, {"a": 3}) == pytest.approx(16.0)
