"""The control loop: collect -> evaluate -> decide -> guard -> act -> record, on an interval.

Each stage returns a frozen value (``Observation``, ``Evaluation``, ``Decision``, ``ActResult``;
together a ``Step``). ``ControlLoop`` only orders the stages; what they do lives elsewhere:

* **collect** reads the complete windows newer than the last read (``MetricsSource``) and turns
  them into ``scheduler.observe.JobWindow`` values. A failed, malformed or partial read gives an
  ``Observation`` with ``ok=False``; one partial because whole instances sent no rows (a lost
  host) names them (``vanished``) and is consumed, not re-read: those rows never come; windows measured under another configuration than the one
  in force, or before the job settled after an action, are dropped as stale. A source's
  arrival rate counts its backlog's change since the window read right before (kept or
  dropped); a window with none read right before it (the first, or after a gap) counts no
  change.
* **evaluate** updates model trust (``scheduler.trust``), recalibrates when the model became
  untrusted, runs the reactive detectors and diagnosers (``scheduler.reactive``; the host ones
  too, on a read with vanished instances the lost-host detector only) and judges
  logged actions whose effect has settled (``scheduler.outcomes``; a failed scale-down is
  undone, an action that did not help is blacklisted).
* **decide** (``scheduler.deciders``): an undo first; else, while the model is trusted, the
  primary decider (``ModelDecider``: a one-step plan; or ``PreemptiveDecider``: forecast ->
  schedule with the model decider as the floor), otherwise the ``ReactiveDecider``; instance
  restarts and data-skew reports from the reactive policy ride along (``combine``). A host
  diagnosis (slow host, slow link, lost host) goes first: ``move_off_host`` of the host, the
  decision the deciders made waits as its fallback (applied only when the move is blacklisted),
  so no operator is scaled up in the step that handles the fault; whether capacity is still
  short is judged on the windows after the move.
* **guard** (``scheduler.guard.guard``, a pure function): bounds, step caps, stabilization,
  scale-down delay, blackout windows, the daily reconfiguration budget, the blacklist, advisor
  mode. A ``move_off_host`` goes through them like an instance restart: stabilization, blackout
  and the blacklist of (move_off_host, host, diagnosis, band); it is not a reconfiguration for
  the daily budget. On a lost host's partial read (no whole window) it is judged at the read's
  time.
* **act** applies the decision (unless advisor mode) through the ``Actuator``; **record** logs
  it with its reasons and expected outcome in the ``StateStore``. Actuator errors are logged;
  the loop never stops on them. The loop's own memory (trust, guard state, the last read, the
  recalibrated model) is kept in the store too (``scheduler.loopstate``), so a restarted loop
  continues where it stopped.

Times are the metrics source's clock in seconds (``MetricsBatch.as_of_s``); rates in tuples/s,
latencies in ms. ``LoopConfig.scaled(f)`` multiplies every time constant by ``f`` (a
time-compressed testbed replay runs the loop in simulated seconds).
"""

from __future__ import annotations

import logging
import math
import time as _time
import traceback
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Callable, Mapping, Protocol, runtime_checkable

from modeler.modelfile import JobModel, to_graph
from modeler.queueing import predict
from scheduler import outcomes
from scheduler.decision import Decider, Decision, DecisionContext, DecisionKind
from scheduler.deciders import (LoadForecast, ModelDecider, ModelDeciderConfig, Planner, ReactiveDecider,
                                combine, undo_decision)
from scheduler.guard import GuardRails, GuardState, GuardView, clamp, guard, in_blackout
from scheduler.interfaces import Actuation, ActuationFailed, Actuator, MetricsSource
from scheduler.loopstate import LoopMemory, load_memory, save_memory
from scheduler.observe import JobWindow, MalformedMetrics, job_windows, vanished_instances
from scheduler.outcomes import ActionEvaluation
from scheduler.reactive import (Detectors, Diagnosis, HostDetectors, HostDiagnosis, HostSymptom, ReactiveConfig,
                                Symptom, diagnose, diagnose_hosts, placement, resolve_hosts)
from scheduler.state import ActionRecord, BlacklistConfig, InMemoryStateStore, StateStore, active_ban, load_band
from scheduler.targets import Targets
from scheduler.trust import Recalibration, TrustAssessment, TrustConfig, TrustMonitor, recalibrate

__all__ = ["ActResult", "ActionEvaluation", "ControlLoop", "Decision", "DecisionKind", "Evaluation", "GuardRails",
           "HostMover", "InstanceRestarter", "LoopConfig", "Observation", "Step", "clamp_config", "format_step", "in_blackout"]

log = logging.getLogger("augury.loop")


@runtime_checkable
class InstanceRestarter(Protocol):
    """An actuator that can restart (reschedule elsewhere) one instance. Raises ``ActuationFailed``."""

    def restart_instance(self, operator: str, instance: int, reason: str = "") -> Actuation: ...


@runtime_checkable
class HostMover(Protocol):
    """An actuator that can move every instance off one host and keep them away from it (a slow
    or lost host, the sender of a slow link; Flink's blocklist, a cordoned node). ``host`` is the
    name the metric rows carry (``scheduler.interfaces.OPTIONAL_COLUMNS``). An optional
    capability, like ``InstanceRestarter``: a ``move_off_host`` decision fails on an actuator
    without it. A host already avoided is no change (``applied`` False). Raises
    ``ActuationFailed``."""

    def move_off_host(self, host: str, reason: str = "") -> Actuation: ...


# ------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class LoopConfig:
    """The control loop's settings. Times in s (source clock), rates in tuples/s."""

    interval_s: float = 10.0
    """Time between steps (s)."""
    targets: Targets = Targets()
    """Utilization target, latency SLO, headroom, backlog catch-up: for every decider."""
    model: ModelDeciderConfig = ModelDeciderConfig()
    """When the model decider acts (utilization band, confirmation, catch-up, scale-down saving)."""
    evaluate_after_s: float = 60.0
    """An action is evaluated once the job has run settled this long after it (s)."""
    history_windows: int = 120
    """Settled windows kept in memory (detectors, recalibration)."""
    guard: GuardRails = GuardRails()
    trust: TrustConfig = TrustConfig()
    reactive: ReactiveConfig = ReactiveConfig()
    blacklist: BlacklistConfig = BlacklistConfig()

    def scaled(self, factor: float) -> "LoopConfig":
        """Every time constant multiplied by ``factor`` (policy seconds -> simulated seconds of a
        replay compressed ``1 / factor`` times). The targets' catch-up time included."""
        if factor == 1.0:
            return self
        g = self.guard
        return replace(self, interval_s=self.interval_s * factor, evaluate_after_s=self.evaluate_after_s * factor,
                       targets=replace(self.targets, catch_up_s=self.targets.catch_up_s * factor),
                       guard=replace(g, stabilization_s=g.stabilization_s * factor, settle_s=g.settle_s * factor,
                                     scale_down_delay_s=g.scale_down_delay_s * factor,
                                     budget_window_s=g.budget_window_s * factor),
                       blacklist=replace(self.blacklist, base_s=self.blacklist.base_s * factor,
                                         max_s=self.blacklist.max_s * factor))


def clamp_config(config: Mapping[str, int], current: Mapping[str, int], model: JobModel,
                 rails: GuardRails) -> dict[str, int]:
    """Apply min/max parallelism (global and the model's per operator) and the max change per step."""
    return clamp(config, current, rails, _bounds(model))


def _bounds(model: JobModel) -> dict[str, tuple[int, int]]:
    return {op.name: (op.min_parallelism, op.max_parallelism) for op in model.operators}


# ------------------------------------------------------------------ stage values


@dataclass(frozen=True)
class Observation:
    """collect: the new settled windows (empty when the read failed or nothing new arrived)."""

    ok: bool
    as_of_s: float | None
    windows: tuple[JobWindow, ...]
    dropped: int = 0
    """Windows read but dropped as stale (other config, unsettled)."""
    error: str | None = None
    vanished: tuple[tuple[str, int], ...] = ()
    """A partial read's instances that sent no row at all in its newest window (a lost host)."""


@dataclass(frozen=True)
class Evaluation:
    """evaluate: trust, symptoms, diagnoses, action verdicts."""

    window: JobWindow | None
    trust: TrustAssessment | None
    recalibration: Recalibration | None
    recalibration_error: str | None
    symptoms: tuple[Symptom, ...]
    diagnoses: tuple[Diagnosis, ...]
    actions: tuple[ActionEvaluation, ...] = ()
    error: str | None = None
    host_symptoms: tuple[HostSymptom, ...] = ()
    host_diagnoses: tuple[HostDiagnosis, ...] = ()
    """Per host: slow host, slow link, lost host (``scheduler.reactive.diagnose_hosts``)."""
    host_notes: tuple[str, ...] = ()
    """Checks after a move off a lost host: its instances' rows are back."""


@dataclass(frozen=True)
class ActResult:
    """act: what happened."""

    attempted: bool
    applied: bool
    actuation: Actuation | None = None
    error: str | None = None
    action_id: int | None = None


@dataclass(frozen=True)
class Step:
    at_s: float | None
    observation: Observation
    evaluation: Evaluation
    decision: Decision
    result: ActResult

    def to_dict(self) -> dict:
        e = self.evaluation
        return {
            "at_s": self.at_s, "ok": self.observation.ok, "windows": len(self.observation.windows),
            "read_error": self.observation.error,
            "trust": e.trust.state if e.trust else None,
            "trust_reasons": list(e.trust.reasons) if e.trust else [],
            "recalibrated": e.recalibration is not None, "recalibration_error": e.recalibration_error,
            "diagnoses": [d.to_dict() for d in e.diagnoses if d.causes],
            "host_diagnoses": [d.to_dict() for d in e.host_diagnoses if d.causes],
            "host_notes": list(e.host_notes),
            "action_evaluations": [{"id": a.action_id, "outcome": a.outcome, "measured": dict(a.measured)}
                                   for a in e.actions],
            "decision": self.decision.to_dict(),
            "applied": self.result.applied, "act_error": self.result.error,
        }


# ------------------------------------------------------------------ the loop


class ControlLoop:
    """``ControlLoop(model, source, actuator, config, store, decider=...)``; ``step()`` runs one
    collect -> evaluate -> decide -> guard -> act -> record; ``run(...)`` repeats it.

    ``decider``: the primary decider used while the model is trusted (default: ``ModelDecider``
    with ``planner`` and ``load_forecast``); the reactive decider covers the rest. Read-only
    views for callers: ``model``, ``trust``, ``store``, ``config_in_force``, ``guard_state``,
    ``measured_restart_s``; ``last_action_s`` may be set; ``external_change(at_s)`` reports a
    rescale made outside the loop.
    """

    def __init__(self, model: JobModel, source: MetricsSource, actuator: Actuator,
                 config: LoopConfig = LoopConfig(), store: StateStore | None = None,
                 planner: Planner | None = None, load_forecast: LoadForecast | None = None,
                 decider: Decider | None = None) -> None:
        self.config = config
        self.source = source
        self.actuator = actuator
        self.store = store if store is not None else InMemoryStateStore()
        self.decider = decider or ModelDecider(config.model, planner, load_forecast,
                                               peak_window_s=config.guard.scale_down_delay_s)
        self.reactive = ReactiveDecider(config.reactive, config.guard.scale_down_delay_s)
        self.model = model
        self.trust = TrustMonitor(config.trust)
        self.detectors = Detectors(config.reactive)
        self.host_detectors = HostDetectors(config.reactive)
        self._where: dict[tuple[str, int], str] = {}
        """(operator, instance) -> host in the newest settled window that reported hosts."""
        self._awaiting_rows: dict[str, tuple[int | None, float]] = {}
        """Lost hosts moved off: host -> (action id, when), until their instances report again."""
        self.history: list[JobWindow] = []
        self.guard_state = GuardState()
        self.measured_restart_s: float | None = None
        """The engine's restart time measured on the last applied change (s)."""
        self._last_as_of: float | None = None
        self._settled_after_s = -math.inf
        self._in_force: dict[str, int] | None = None
        self._lags: tuple[float, dict[str, float]] | None = None
        """(end s, backlog per source) of the newest window read, kept or dropped."""
        self._restore()

    @property
    def config_in_force(self) -> dict[str, int] | None:
        return dict(self._in_force) if self._in_force is not None else None

    @property
    def last_action_s(self) -> float:
        return self.guard_state.last_action_s

    @last_action_s.setter
    def last_action_s(self, at_s: float) -> None:
        self.guard_state = replace(self.guard_state, last_action_s=float(at_s))

    def external_change(self, at_s: float) -> None:
        """The job was rescaled outside the loop at ``at_s`` (source seconds): the configuration
        in force is re-read from the actuator at the next collect, the change counts as the last
        action (stabilization), and windows from before it are not judged against the new one."""
        self._in_force = None
        self.last_action_s = at_s
        self._settled_after_s = max(self._settled_after_s, float(at_s))

    # -- persistence of the loop's own memory (scheduler.loopstate)
    def _restore(self) -> None:
        mem = load_memory(self.store)
        if mem is None:
            return
        self.trust.restore(mem.trust)
        self.guard_state, self._settled_after_s, self._last_as_of = (mem.guard_state, mem.settled_after_s,
                                                                     mem.last_as_of)
        if mem.measured_restart_s is not None:
            self.measured_restart_s = mem.measured_restart_s
        if mem.model is not None:
            self.model = mem.model

    def _save(self, with_model: bool = False) -> None:
        save_memory(self.store, LoopMemory(
            trust=self.trust.snapshot(), guard_state=self.guard_state, settled_after_s=self._settled_after_s,
            last_as_of=self._last_as_of, measured_restart_s=self.measured_restart_s,
            model=self.model if with_model else None))

    # -- collect
    def collect(self) -> Observation:
        try:
            batch = self.source.read(self._last_as_of)
            if self._in_force is None:
                self._in_force = {k: int(v) for k, v in self.actuator.current().items()}
            end_s, lags = self._lags or (None, {})
            try:
                windows = job_windows(batch, sources=[op.name for op in self.model.sources], lag_before=lags,
                                      lag_before_s=end_s)
            except MalformedMetrics as err:
                vanished = vanished_instances(batch, self._in_force)
                if not vanished or (self._last_as_of is not None and batch.as_of_s <= self._last_as_of):
                    raise
                # Whole instances sent nothing: dead tasks, not late metrics. Reading these windows
                # again would fail forever, so they are consumed (the next read starts after a gap).
                self._last_as_of = float(batch.as_of_s)
                self._lags = None
                return Observation(ok=False, as_of_s=float(batch.as_of_s), windows=(), error=_err(err),
                                   vanished=vanished)
        except Exception as err:  # noqa: BLE001 - any failed read is a failed read
            return Observation(ok=False, as_of_s=None, windows=(), error=_err(err))
        if self._last_as_of is not None and batch.as_of_s <= self._last_as_of:
            return Observation(ok=False, as_of_s=batch.as_of_s, windows=(),
                               error=f"stale batch (as of {batch.as_of_s:g} <= {self._last_as_of:g})")
        self._last_as_of = float(batch.as_of_s)
        complete = [w for w in windows if w.end_s <= batch.as_of_s + 1e-6]
        if complete:
            self._lags = (complete[-1].end_s, {s.operator: s.source_lag for s in complete[-1].sources})
        fresh = [w for w in complete if dict(w.config) == self._in_force and w.start_s >= self._settled_after_s]
        return Observation(ok=True, as_of_s=float(batch.as_of_s), windows=tuple(fresh),
                           dropped=len(windows) - len(fresh))

    # -- evaluate
    def evaluate(self, obs: Observation) -> Evaluation:
        if not obs.ok or not obs.windows:
            host_symptoms = self.host_detectors.update_vanished(obs.vanished, self._where) if obs.vanished else ()
            return Evaluation(window=None, trust=None, recalibration=None, recalibration_error=None,
                              symptoms=(), diagnoses=(), error=obs.error, host_symptoms=host_symptoms,
                              host_diagnoses=diagnose_hosts(None, host_symptoms, self.config.reactive))
        try:
            self.history.extend(obs.windows)
            del self.history[:-self.config.history_windows]
            trust = self.trust.update(self.model, obs.windows)
            recal, recal_err = None, None
            if trust.recalibrate:
                try:
                    recal = recalibrate(self.model, self.history, self.config.trust)
                    self.model = recal.model
                    self.trust.recalibrated()
                    trust = replace(trust, state=self.trust.state, reasons=trust.reasons + (
                        f"recalibrated on {recal.windows} windows (calibration trust "
                        f"{recal.calibration_trust:.2f}); new model on probation",))
                    self._save(with_model=True)
                except Exception as err:  # noqa: BLE001 - calibration may lack data: stay reactive
                    recal_err = _err(err)
            shares = expected_shares(self.model, obs.windows[-1])
            symptoms: tuple[Symptom, ...] = ()
            host_symptoms: tuple[HostSymptom, ...] = ()
            graph = to_graph(self.model)
            for k in range(len(self.history) - len(obs.windows), len(self.history)):
                symptoms = self.detectors.update(self.history[: k + 1], shares)
                host_symptoms = self.host_detectors.update(self.history[: k + 1], graph)
            window = self.history[-1]
            self._where = placement(window) or self._where
            diagnoses = diagnose(window, symptoms, graph, self.config.reactive, self.config.targets)
            host_diagnoses = diagnose_hosts(window, host_symptoms, self.config.reactive)
            host_notes = self._rows_back(window)
            c = self.config
            verdicts = outcomes.judge_actions(self.store, window, self.history, self._settled_after_s,
                                              c.evaluate_after_s, c.targets.catch_up_s, c.reactive, c.blacklist)
            self._save()
            return Evaluation(window=window, trust=trust, recalibration=recal, recalibration_error=recal_err,
                              symptoms=symptoms, diagnoses=diagnoses, actions=verdicts,
                              host_symptoms=host_symptoms, host_diagnoses=host_diagnoses, host_notes=host_notes)
        except Exception as err:  # noqa: BLE001
            log.error("evaluate failed: %s", traceback.format_exc())
            return Evaluation(window=None, trust=None, recalibration=None, recalibration_error=None,
                              symptoms=(), diagnoses=(), error=_err(err))

    def _rows_back(self, window: JobWindow) -> tuple[str, ...]:
        """A complete window after a move off a lost host: its instances report again (elsewhere).
        The check is written into the move's action record."""
        notes = []
        for host, (action_id, at_s) in sorted(self._awaiting_rows.items()):
            note = (f"verified: the instances of lost {host} report again (on other hosts), "
                    f"{window.end_s - at_s:.0f} s after the move")
            notes.append(note)
            for rec in self.store.actions(limit=20):
                if rec.id == action_id:
                    self.store.update_action(replace(rec, detail=(rec.detail + "; " + note).strip("; ")))
        self._awaiting_rows.clear()
        return tuple(notes)

    # -- decide
    def context(self, window: JobWindow, trusted: bool) -> DecisionContext:
        """What the deciders see now."""
        lead = self.measured_restart_s + self.config.guard.settle_s if self.measured_restart_s is not None else None
        return DecisionContext(now_s=window.end_s, config=dict(self._in_force or window.config), model=self.model,
                               trusted=trusted, history=tuple(self.history), targets=self.config.targets,
                               lead_time_s=lead, recent_changes_s=self.guard_state.changes_s)

    def host_decision(self, ev: Evaluation) -> Decision | None:
        """``move_off_host`` of the first host with a cause (lost, slow, slow link), or None."""
        proposals = resolve_hosts(ev.host_diagnoses)
        if not proposals:
            return None
        p = proposals[0]
        return Decision(kind=DecisionKind.MOVE_OFF_HOST, path="reactive", config=None, reasons=tuple(p.reasons),
                        expected=dict(p.expected), operators=p.operators, diagnosis=p.diagnosis, host=p.operators[0])

    def decide(self, ev: Evaluation) -> Decision:
        host = self.host_decision(ev)
        if ev.window is None and host is not None:
            return host  # the guard marks it advisory in advisor mode, as every decision
        if ev.window is None:
            why = f"no new settled metrics ({ev.error})" if ev.error else "no new settled metrics"
            return Decision(kind=DecisionKind.NONE, path="-", config=None, reasons=(why,),
                            advisor=self.config.guard.advisor)
        trusted = ev.trust is not None and ev.trust.trusted
        ctx = self.context(ev.window, trusted)
        d = undo_decision(ev, ctx)
        if d is None:
            reactive = self.reactive.decide(ev, ctx)
            d = combine(self.decider.decide(ev, ctx) if trusted else None, reactive)
        if ev.trust is not None and ev.trust.reasons:
            d = replace(d, reasons=tuple(ev.trust.reasons) + tuple(d.reasons))
        if host is not None and d.kind != DecisionKind.UNDO:
            # the host first: no operator is scaled up (or restarted in place) for what the host causes
            waits = (f"moved off {host.host} before anything else; the deciders' {d.kind.value} "
                     + (f"of {', '.join(d.operators)} " if d.operators else "")
                     + "waits for the windows after it",) if d.kind not in (DecisionKind.NONE, DecisionKind.HOLD) else ()
            return replace(host, reasons=tuple(host.reasons) + waits, reports=d.reports,
                           fallbacks=(d,) if d.kind not in (DecisionKind.NONE, DecisionKind.HOLD) else ())
        return d

    # -- guard
    def guard(self, d: Decision, window: JobWindow | None) -> Decision:
        """``d`` through the guard rails (``scheduler.guard``). Without a whole window only a
        ``move_off_host`` is judged (a lost host's partial read), at the last read's time and
        the last window's load band."""
        if window is None and d.kind != DecisionKind.MOVE_OFF_HOST:
            return d
        if window is not None:
            now, rate, config = window.end_s, window.offered_rate, window.config
        else:
            now = float(self._last_as_of or 0.0)
            rate = self.history[-1].offered_rate if self.history else 0.0
            config = self.history[-1].config if self.history else {}
        band = load_band(rate, self.config.blacklist.band_ratio)
        view = GuardView(now_s=now, current=dict(self._in_force or config), bounds=_bounds(self.model),
                         bans=active_bans(self.store, d, band, now), band=band)
        d, self.guard_state = guard(d, self.guard_state, self.config.guard, view)
        return d

    # -- act + record
    def act(self, d: Decision, at_s: float | None) -> ActResult:
        if d.kind in (DecisionKind.NONE, DecisionKind.HOLD):
            return ActResult(attempted=False, applied=False)
        rate = self.history[-1].offered_rate if self.history else 0.0
        rec = action_record(d, float(at_s or 0.0), dict(self._in_force or {}),
                            load_band(rate, self.config.blacklist.band_ratio))
        if d.advisor:
            return ActResult(attempted=False, applied=False, action_id=self.store.add_action(rec).id)
        try:
            actuation = actuate(self.actuator, d)
        except Exception as err:  # noqa: BLE001 - a failed actuation is logged, the loop goes on
            rec = self.store.add_action(replace(rec, outcome="failed", detail=_err(err)))
            return ActResult(attempted=True, applied=False, error=_err(err), action_id=rec.id)
        if actuation.applied:
            at = float(at_s or 0.0)
            scale = rec.kind == "scale"
            if scale:
                self._in_force = {k: int(v) for k, v in actuation.config.items()}
                if actuation.restart_s and actuation.restart_s > 0:
                    self.measured_restart_s = float(actuation.restart_s)
            self.guard_state = self.guard_state.after_action(at, scale, self.config.guard.budget_window_s)
            self._settled_after_s = at + float(actuation.restart_s or 0.0) + self.config.guard.settle_s
            self.detectors.reset()
            self.host_detectors.reset()
        rec = self.store.add_action(replace(rec, applied=bool(actuation.applied),
                                            outcome="pending" if actuation.applied else "failed",
                                            detail=(rec.detail + " " + actuation.detail).strip()))
        if actuation.applied and d.kind == DecisionKind.MOVE_OFF_HOST and d.diagnosis == "lost_host":
            self._awaiting_rows[str(d.host)] = (rec.id, float(at_s or 0.0))
        self._save()
        return ActResult(attempted=True, applied=bool(actuation.applied), actuation=actuation, action_id=rec.id)

    # -- one iteration
    def step(self) -> Step:
        obs = self.collect()
        ev = self.evaluate(obs)
        try:
            decision = self.guard(self.decide(ev), ev.window)
        except Exception as err:  # noqa: BLE001
            log.error("decide failed: %s", traceback.format_exc())
            decision = Decision(kind=DecisionKind.NONE, path="-", config=None, reasons=(f"decide failed: {_err(err)}",))
        at = ev.window.end_s if ev.window is not None else obs.as_of_s
        # a lost host is acted on without a complete window (its rows are what is missing)
        acts = ev.window is not None or decision.kind == DecisionKind.MOVE_OFF_HOST
        result = self.act(decision, at) if acts else ActResult(attempted=False, applied=False)
        step = Step(at_s=at, observation=obs, evaluation=ev, decision=decision, result=result)
        try:
            if (obs.ok and obs.windows) or ev.host_diagnoses:
                self.store.add_decision(float(at or 0.0), step.to_dict())
        except Exception:  # noqa: BLE001 - a state write failing must not stop the loop
            log.error("state write failed: %s", traceback.format_exc())
        return step

    def run(self, iterations: int | None = None, duration_s: float | None = None,
            wait: Callable[[float], None] = _time.sleep, on_step: Callable[[Step], None] | None = None,
            clock: Callable[[], float] = _time.monotonic) -> list[Step]:
        """Repeat ``step`` every ``interval_s`` (``wait`` sleeps or advances a simulator) until
        ``iterations`` steps or ``duration_s`` of ``clock`` have passed (both None: forever)."""
        steps: list[Step] = []
        start = clock()
        n = 0
        while (iterations is None or n < iterations) and (duration_s is None or clock() - start < duration_s):
            wait(self.config.interval_s)
            s = self.step()
            n += 1
            if on_step is not None:
                on_step(s)
            steps.append(s)
            if len(steps) > 10_000:
                del steps[:-10_000]
        return steps


# ------------------------------------------------------------------ helpers of the stages


def expected_shares(model: JobModel, w: JobWindow) -> dict[str, float]:
    """Busiest instance's share of each operator that the model's key distributions explain
    (for the skew detectors); empty (even shares) when the model cannot predict ``w``."""
    try:
        known = {k: v for k, v in w.config.items() if k in model.config}
        return {k: o.hot_share for k, o in predict(model, known, max(w.input_rate, 1e-9)).operators.items()}
    except Exception:  # noqa: BLE001 - fall back to even shares
        return {}


def active_bans(store: StateStore, d: Decision, band: int, now_s: float) -> dict[tuple, str]:
    """The blacklist entries active at ``now_s`` for what ``d`` or its fallbacks would do in load
    band ``band``: (action, operator, diagnosis, band) -> why banned."""
    keys = {(k.kind if k.kind != "undo" else "scale", op, k.diagnosis, band)
            for k in (d,) + tuple(d.fallbacks) for op in k.operators}
    keys |= {("scale", op, k.diagnosis, band) for k in (d,) + tuple(d.fallbacks) if k.config
             for op in k.config}
    bans = {}
    for key in keys:
        ban = active_ban(store, key, now_s)
        if ban is not None:
            bans[key] = f"until {ban.until_s:.0f}, strike {ban.strikes}: {ban.reason}"
    return bans


def action_record(d: Decision, at_s: float, current: Mapping[str, int], band: int) -> ActionRecord:
    """The action log's record of ``d`` before it is applied (advised, or pending)."""
    scale = d.kind in (DecisionKind.SCALE, DecisionKind.UNDO)
    return ActionRecord(
        at_s=at_s, kind="scale" if scale else d.kind.value, operators=d.operators, diagnosis=d.diagnosis,
        load_band=band, from_config=dict(current), to_config=dict(d.config) if d.config else dict(current),
        reasons=d.reasons, expected=d.expected, applied=False, advisor=d.advisor,
        detail=f"instance {d.instance}" if d.instance is not None else "",  # a move's host is its operators[0]
        outcome="advised" if d.advisor else "pending")


def actuate(actuator: Actuator, d: Decision) -> Actuation:
    """Apply ``d`` (a configuration, or one instance's restart) through ``actuator``. Raises."""
    if d.kind == DecisionKind.RESTART_INSTANCE:
        if not isinstance(actuator, InstanceRestarter):
            raise ActuationFailed("the actuator cannot restart single instances", field="actuator",
                                  value=type(actuator).__name__)
        return actuator.restart_instance(d.operators[0], int(d.instance), "; ".join(d.reasons))
    if d.kind == DecisionKind.MOVE_OFF_HOST:
        if not isinstance(actuator, HostMover):
            raise ActuationFailed("the actuator cannot move instances off a host", field="actuator",
                                  value=type(actuator).__name__)
        return actuator.move_off_host(str(d.host), "; ".join(d.reasons))
    return actuator.apply(dict(d.config), "; ".join(d.reasons))


def _err(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _fmt_config(config: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def format_step(step: Step) -> str:
    """A readable, multi-line account of one step (``augury run`` prints it)."""
    d = step.decision
    when = datetime.fromtimestamp(step.at_s, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if step.at_s else "-"
    trust = step.evaluation.trust.state if step.evaluation.trust else "-"
    w = step.evaluation.window
    head = f"[{when}] model {trust}"
    if w is not None:
        head += f" | offered {w.offered_rate:,.0f}/s accepted {w.input_rate:,.0f}/s backlog {w.backlog:,.0f}"
    if not step.observation.ok:
        head += f" | read failed: {step.observation.error}"
    verb = {"none": "no action", "hold": "hold"}.get(d.kind, d.kind)
    if d.kind in ("scale", "undo") and d.config:
        verb += f" {_fmt_config({k: d.config[k] for k in d.operators})}"
    if d.kind == "restart_instance":
        verb += f" {d.operators[0]}[{d.instance}]"
    if d.kind == "move_off_host":
        verb += f" {d.host} ({d.diagnosis})"
    if d.advisor and d.kind not in ("none", "hold"):
        verb += " (advisor: not applied)"
    elif step.result.attempted:
        verb += " -> applied" if step.result.applied else f" -> FAILED ({step.result.error})"
    lines = [head, f"  decision: {verb} [{d.path}]"]
    for diag in step.evaluation.diagnoses:
        if diag.causes:
            lines.append(f"  diagnosis {diag.operator}: {', '.join(diag.causes)} {dict(diag.scores)}")
    for diag in step.evaluation.host_diagnoses:
        if diag.causes:
            lines.append(f"  diagnosis {diag.host}: {', '.join(diag.causes)} {dict(diag.scores)}")
    lines += [f"  {n}" for n in step.evaluation.host_notes]
    lines += [f"  - {r}" for r in d.reasons]
    for r in d.reports:
        lines.append(f"  report: {r.detail.get('suggestion', '')}")
    if d.expected:
        lines.append("  expected: " + ", ".join(f"{k} {v:,.3g}" for k, v in d.expected.items()))
    return "\n".join(lines)
