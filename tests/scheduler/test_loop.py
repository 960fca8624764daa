import random
from dataclasses import replace

import pytest

from modeler.modelfile import parse_model_text
from scheduler.loop import ControlLoop, GuardRails, LoopConfig, clamp_config, format_step, in_blackout
from scheduler.state import InMemoryStateStore, SQLiteStateStore
from scheduler.targets import Targets
from scheduler.trust import TrustConfig
from tests.scheduler.synth import T0, Flaky, FluidJob, model_text

SERVICE = {"a": 1.0, "b": 0.5}


def _setup(rate=1000.0, config=None, factor=1.0, **loop_kw):
    config = config or {"a": 2, "b": 1}
    job = FluidJob(service_ms=SERVICE, config=dict(config), rate=rate)
    model = parse_model_text(model_text({k: v * factor for k, v in SERVICE.items()}, config))
    cfg = LoopConfig(**loop_kw)
    return job, model, cfg


def test_trusted_model_scales_once_on_a_load_step():
    job, model, cfg = _setup(guard=GuardRails(stabilization_s=30, settle_s=0))
    loop = ControlLoop(model, job, job, cfg)
    loop.run(iterations=6, wait=job.advance)
    assert loop.trust.state == "trusted" and job.applied == []
    job.rate = 3000.0
    steps = loop.run(iterations=15, wait=job.advance)
    assert len(job.applied) == 1
    scale = [s for s in steps if s.result.applied][0]
    assert scale.decision.path == "model" and scale.decision.reasons
    assert scale.decision.expected["busy_max"] <= 0.7
    cap_a = job.config["a"] * 1000.0
    assert cap_a * 0.7 >= 3000.0 and job.config["b"] * 2000.0 * 0.7 >= 3000.0


def test_wrong_model_is_distrusted_recalibrated_and_reactive_meanwhile():
    job, model, cfg = _setup(factor=2.0, trust=TrustConfig(bad_windows=3, good_windows=3))
    loop = ControlLoop(model, job, job, cfg)
    steps = loop.run(iterations=3, wait=job.advance)
    assert steps[-1].evaluation.recalibration is not None
    assert loop.model.operator("a").service_time_ms == pytest.approx(1.0, rel=0.02)
    steps = loop.run(iterations=3, wait=job.advance)
    assert steps[-1].evaluation.trust.state == "trusted"


def test_advisor_decides_and_logs_but_never_acts():
    job, model, cfg = _setup(rate=3000.0, guard=GuardRails(advisor=True))
    store = InMemoryStateStore()
    loop = ControlLoop(model, job, job, cfg, store=store)
    steps = loop.run(iterations=10, wait=job.advance)
    assert job.applied == []
    advised = [r for r in store.actions() if r.advisor]
    assert advised and all(r.outcome == "advised" and not r.applied for r in advised)
    assert any("advisor" in format_step(s) for s in steps)


def test_stabilization_and_blackout_hold():
    job, model, cfg = _setup(rate=3000.0, guard=GuardRails(stabilization_s=10_000, settle_s=0))
    loop = ControlLoop(model, job, job, cfg)
    loop.last_action_s = T0.timestamp()
    steps = loop.run(iterations=8, wait=job.advance)
    assert job.applied == [] and any(s.decision.kind == "hold" and s.decision.blocked for s in steps)
    assert in_blackout(T0.timestamp() + 3600 * 2.5, [("02:00", "03:00")])
    assert in_blackout(T0.timestamp() + 3600 * 23.5, [("23:00", "01:00")])
    assert not in_blackout(T0.timestamp() + 3600 * 12, [("23:00", "01:00")])
    job2, model2, cfg2 = _setup(rate=3000.0, guard=GuardRails(blackout=(("00:00", "23:59"),)))
    ControlLoop(model2, job2, job2, cfg2).run(iterations=8, wait=job2.advance)
    assert job2.applied == []


def test_scale_down_waits_for_the_delay():
    job, model, cfg = _setup(rate=200.0, config={"a": 8, "b": 4},
                             guard=GuardRails(scale_down_delay_s=100, stabilization_s=0, settle_s=0))
    loop = ControlLoop(model, job, job, cfg)
    loop.run(iterations=8, wait=job.advance)   # trusted after 3, then 100 s of recommendation
    assert job.applied == []
    loop.run(iterations=6, wait=job.advance)
    assert len(job.applied) == 1 and job.config["a"] < 8 and job.config["a"] >= 1


def test_clamp_respects_bounds_and_step():
    model = parse_model_text(model_text(SERVICE, {"a": 2, "b": 1}, max_p=10))
    g = GuardRails(min_parallelism=2, max_parallelism=64, max_change_per_step=3)
    out = clamp_config({"a": 50, "b": 0}, {"source": 1, "a": 2, "b": 3}, model, g)
    assert out == {"source": 1, "a": 5, "b": 2}


@pytest.mark.slow
def test_fault_injection_on_the_fluid_job():
    # The 1,000 iterations run against the testbed
    # (tests/scheduler/test_closed_loop.py::test_fault_injection_1000_iterations_on_the_testbed);
    # here 400 on the fluid job, whose load levels change every 60 steps.
    rng = random.Random(7)
    g = GuardRails(min_parallelism=1, max_parallelism=12, max_change_per_step=3, stabilization_s=20,
                   settle_s=0, scale_down_delay_s=60)
    job, model, cfg = _setup(guard=g)
    flaky = Flaky(job, rng)
    loop = ControlLoop(model, flaky, flaky, cfg)
    rates = [300.0, 1000.0, 3000.0, 6000.0, 800.0]
    prev = dict(job.config)
    acted_steps = 0
    for i in range(400):
        if i % 60 == 0:
            job.rate = rates[(i // 60) % len(rates)]
        job.advance(cfg.interval_s)
        s = loop.step()  # never raises
        if s.result.attempted:
            acted_steps += 1
            assert flaky.read_ok[-1], "acted on a failed read"
            assert s.observation.ok and s.observation.windows
        for op, p in job.config.items():
            assert 1 <= p <= 12
            assert abs(p - prev[op]) <= 3
        prev = dict(job.config)
    assert flaky.read_ok.count(False) > 80
    assert acted_steps >= 5 and len(job.applied) >= 3
    # stabilization: no two changes closer than stabilization_s (the job's clock)
    times = [t for t, _ in job.applied]
    assert all(b - a >= g.stabilization_s for a, b in zip(times, times[1:])), times
    assert any(r.outcome == "failed" for r in loop.store.actions()) or len(flaky.applies) < 10


def test_action_log_and_blacklist_survive_a_restart(tmp_path):
    db = tmp_path / "state.db"
    job, model, cfg = _setup(guard=GuardRails(stabilization_s=30, settle_s=0))
    loop = ControlLoop(model, job, job, cfg, store=SQLiteStateStore(db))
    loop.run(iterations=5, wait=job.advance)
    job.rate = 3000.0
    loop.run(iterations=10, wait=job.advance)
    from scheduler.state import strike, BlacklistConfig
    loop.store.put_blacklist(strike(None, "scale", "a", "over_provisioned", 5, 1e12, "test", BlacklistConfig()))
    actions = [r.to_dict() for r in loop.store.actions()]
    assert actions
    loop.store.close()

    again = ControlLoop(model, job, job, cfg, store=SQLiteStateStore(db))
    assert [r.to_dict() for r in again.store.actions()] == actions
    assert [e.key for e in again.store.blacklist()] == [("scale", "a", "over_provisioned", 5)]
    assert again.trust.state == loop.trust.state and again.last_action_s == loop.last_action_s
    again.run(iterations=2, wait=job.advance)
    assert len(again.store.actions()) >= len(actions)


def test_a_scale_down_that_did_not_help_is_undone_and_blacklisted():
    # A trusted model whose planner proposes too small a configuration: the scale-down saturates
    # the job, is judged against its expectation once settled, undone, and banned for its key.
    from types import SimpleNamespace

    from modeler.queueing import predict
    from scheduler.state import load_band

    job, model, cfg = _setup(rate=1500.0, config={"a": 8, "b": 4}, evaluate_after_s=20.0,
                             targets=Targets(catch_up_s=30.0),
                             guard=GuardRails(stabilization_s=30, settle_s=0, scale_down_delay_s=0))

    def too_small(m, rate, targets):
        c = {"source": 1, "a": 1, "b": 1}
        return SimpleNamespace(config=c, feasible=True, prediction=predict(m, c, rate), reasons=())

    loop = ControlLoop(model, job, job, cfg, planner=too_small)
    loop.trust.restore({"state": "trusted", "good_streak": 3})
    steps = loop.run(iterations=10, wait=job.advance)
    assert [c for _, c in job.applied] == [{"a": 1, "b": 1}, {"a": 8, "b": 4}]
    first = next(r for r in loop.store.actions() if r.diagnosis == "planned")
    assert first.outcome == "did_not_help" and first.measured["busy_max"] >= 0.98
    assert any(s.decision.kind == "undo" and s.result.applied for s in steps)
    band = load_band(1500.0)
    assert {e.key for e in loop.store.blacklist()} == {("scale", "a", "planned", band),
                                                       ("scale", "b", "planned", band)}
    assert all(e.until_s > steps[-1].at_s for e in loop.store.blacklist())
    # the same scale-down is proposed again and blocked by the blacklist
    assert any("blacklisted: scale a for planned" in b for s in steps for b in s.decision.blocked)


def test_a_backlog_already_there_at_the_first_window_is_not_taken_for_arrivals():
    # the source's first window already carries a backlog (40,000 tuples, draining at 1,000/s):
    # with nothing measured before it, the window counts no backlog growth (offered = accepted),
    # neither the backlog as arrivals nor a drop from an assumed empty one; the next batch's
    # window has the one before it and measures the true offered rate
    from scheduler.interfaces import InMemoryActuator, InMemoryMetricsSource

    job, model, cfg = _setup(rate=1000.0)
    job.lag = 50_000.0
    job.advance(10)
    source = InMemoryMetricsSource([job.read()])
    loop = ControlLoop(model, source, InMemoryActuator(job.current()), cfg)
    first = loop.step().observation.windows[0]
    assert first.backlog == pytest.approx(40_000.0) and first.input_rate == pytest.approx(2000.0)
    assert first.offered_rate == pytest.approx(first.input_rate)
    job.advance(10)
    source.push(job.read(first.end_s))
    second = loop.step().observation.windows[0]
    assert second.backlog == pytest.approx(30_000.0) and second.offered_rate == pytest.approx(1000.0)


def test_windows_dropped_after_an_action_still_measure_the_backlog_before_the_next_one():
    # a load step backs the job up; the scale-up's unsettled window (dropped) drains the backlog:
    # the first settled window's arrivals count the backlog change since the dropped window, not
    # since the last settled one (which spread two windows' drain over one)
    job, model, cfg = _setup(guard=GuardRails(stabilization_s=30, settle_s=10))
    loop = ControlLoop(model, job, job, cfg)
    loop.run(iterations=6, wait=job.advance)
    job.rate = 3000.0
    steps = loop.run(iterations=8, wait=job.advance)
    assert len(job.applied) == 1 and sum(s.observation.dropped for s in steps) >= 1
    kept = [w for s in steps for w in s.observation.windows]
    acted_s = T0.timestamp() + job.applied[0][0]
    before, after = [w for w in kept if w.end_s <= acted_s], [w for w in kept if w.start_s > acted_s]
    assert before[-1].backlog > 10_000.0 and after[0].backlog < before[-1].backlog  # drained meanwhile
    assert all(w.offered_rate == pytest.approx(3000.0) for w in kept)


def test_a_rescale_made_outside_the_loop_is_adopted_through_external_change():
    """Someone else rescales the job: without being told, the loop keeps the old configuration as
    in force and drops every later window as measured under another one; ``external_change``
    re-reads it from the actuator and counts it as the last action."""
    service, config = {"a": 1.0, "b": 0.5}, {"a": 2, "b": 1}
    model = parse_model_text(model_text(service, config))
    job = FluidJob(service_ms=service, config=dict(config), rate=500.0)
    loop = ControlLoop(model, job, job, LoopConfig(interval_s=10.0))
    job.advance(20.0)
    assert loop.step().observation.windows
    job.config = {"a": 3, "b": 1}  # rescaled by someone else
    job.advance(20.0)
    assert not loop.step().observation.windows  # measured under a configuration it does not know
    at = T0.timestamp() + job.t_s
    loop.external_change(at)
    job.advance(20.0)
    s = loop.step()
    assert s.observation.windows and loop.config_in_force["a"] == 3
    assert loop.last_action_s == at
