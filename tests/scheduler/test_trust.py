from dataclasses import replace

import pytest

from modeler.modelfile import parse_model_text
from scheduler.observe import job_windows
from scheduler.trust import TrustConfig, TrustMonitor, recalibrate, window_error
from tests.scheduler.synth import FluidJob, model_text

SERVICE = {"a": 1.0, "b": 0.5}
CONFIG = {"a": 2, "b": 1}


def _windows(seconds=60, rate=1000.0):
    job = FluidJob(service_ms=SERVICE, config=CONFIG, rate=rate)
    job.advance(seconds)
    return job_windows(job.read(), sources=["source"])


def _model(factor=1.0):
    return parse_model_text(model_text({k: v * factor for k, v in SERVICE.items()}, CONFIG))


def test_right_model_small_error_wrong_model_large():
    w = _windows()[-1]
    good, bad = window_error(_model(), w), window_error(_model(2.0), w)
    assert good.ok and good.utilization_error < 0.05
    assert not bad.ok and bad.worst_operator in ("a", "b")


def test_distrust_after_k_bad_windows_and_regain_after_k_good():
    ws = _windows(80)
    mon = TrustMonitor(TrustConfig(bad_windows=3, good_windows=2))
    a = mon.update(_model(2.0), ws[:2])
    assert a.state == "probation" and not a.recalibrate
    a = mon.update(_model(2.0), ws[2:3])
    assert a.state == "untrusted" and a.recalibrate and a.bad_streak == 3
    mon.recalibrated()
    a = mon.update(_model(), ws[3:5])
    assert a.trusted


def test_recalibration_recovers_service_times():
    ws = _windows(60)
    r = recalibrate(_model(2.0), ws)
    st = {op.name: op.service_time_ms for op in r.model.operators if not op.is_source}
    assert st == pytest.approx(SERVICE, rel=0.02)
    assert r.in_sample_score <= 1.0
    assert r.model.config == {"source": 1, **CONFIG}


def test_monitor_state_round_trips():
    mon = TrustMonitor(TrustConfig())
    mon.update(_model(2.0), _windows(40))
    again = TrustMonitor().restore(mon.snapshot())
    assert (again.state, again.bad_streak) == (mon.state, mon.bad_streak) == ("untrusted", 4)
