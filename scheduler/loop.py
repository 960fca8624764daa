"""The control loop: collect -> evaluate -> decide -> act, on an interval.

Each stage returns a frozen value (``Observation``, ``Evaluation``, ``Decision``, ``ActResult``;
together a ``Step``). Times are the metrics source's clock in seconds (``MetricsBatch.as_of_s``);
rates in tuples/s, latencies in ms.

* **collect** reads the complete windows newer than the last read. A failed, malformed or
  partial read (``MetricsUnavailable``, ``MalformedMetrics``, anything else raised) gives an
  ``Observation`` with ``ok=False`` and no windows; windows measured under another configuration
  than the one in force, or before the job settled after an action, are dropped as stale.
* **evaluate** updates model trust (``scheduler.trust``), recalibrates when the model became
  untrusted, runs the reactive detectors and diagnosers (``scheduler.reactive``), and evaluates
  logged actions whose effect has settled (outcome, blacklist strike, undo of a failed
  scale-down).
* **decide**: with a trusted model, when the configuration in force leaves the utilization band
  (or misses the latency SLO) at the offered rate, or at the forecast when a ``load_forecast`` is
  given (``scheduler.forecasting``: sizes for ``max(offered, forecast over the lead time)``), or
  when a plan would save at least ``scale_down_saving`` of the instances, plan in one step with
  the planner (``scheduler.plan.plan``), a backlog drained with the target's headroom; otherwise
  the reactive resolvers propose. Slow instances are
  restarted and data skew reported in either case. Guard rails then apply: min/max parallelism,
  maximum change per step, stabilization after an action, scale-down delay (with the highest
  recommendation over the delay), blackout windows, the blacklist, and advisor mode.
* **act** applies the decision (unless advisor mode) and logs it with its reasons and expected
  outcome in the ``StateStore``. Actuator errors are logged; the loop never stops on them.
"""

from __future__ import annotations

import logging
import math
import time as _time
import traceback
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from modeler.modelfile import JobModel, model_to_dict, parse_model, to_graph
from modeler.queueing import compile_model, predict
from scheduler.interfaces import Actuation, ActuationFailed, Actuator, MetricsSource
from scheduler.observe import JobWindow, job_windows
from scheduler.reactive import Detectors, Diagnosis, Proposal, ReactiveConfig, Symptom, diagnose, resolve
from scheduler.state import (ActionRecord, BlacklistConfig, InMemoryStateStore, StateStore, active_ban,
                             find_entry, load_band, strike)
from scheduler.trust import Recalibration, TrustAssessment, TrustConfig, TrustMonitor, recalibrate

log = logging.getLogger("augury.loop")


@runtime_checkable
class InstanceRestarter(Protocol):
    """An actuator that can restart (reschedule elsewhere) one instance. Raises ``ActuationFailed``."""

    def restart_instance(self, operator: str, instance: int, reason: str = "") -> Actuation: ...


Planner = Callable[[JobModel, float], Any]
LoadForecast = Callable[[float, "float | None"], "float | None"]
"""``(now_s, lead_time_s) -> the highest forecast input rate (tuples/s) from now until a change
decided now would be in place``, or None when there is no forecast for now. ``lead_time_s`` is the
loop's measured lead time (the engine's last measured restart time plus the settle time; None
until a change has been measured): the forecast looks at least that far ahead. On the trusted
path the loop sizes for ``max(offered, forecast)``: scale-ups happen before a forecast rise, and
a scale-down never goes below what the forecast needs (see ``scheduler.forecasting``)."""
"""``(model, rate) -> Plan`` (``scheduler.plan.Plan``: ``.config``, ``.feasible``, ``.prediction``,
``.reasons``)."""


# ------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class GuardRails:
    """Limits no decision may cross."""

    min_parallelism: int = 1
    """Lowest parallelism of any operator (the model's per-operator bounds apply too)."""
    max_parallelism: int = 128
    """Highest parallelism of any operator."""
    max_change_per_step: int = 128
    """Most instances one operator may gain or lose in one step. The default (the default
    max_parallelism) caps nothing, so a trusted plan lands in one step; set it lower to move in
    bounded steps (the convergence experiment measured 5 steps from 16x over-provisioned with 16)."""
    stabilization_s: float = 60.0
    """No new action for this many seconds after one (s, source clock)."""
    settle_s: float = 10.0
    """Windows starting before action + restart + this are not used (s)."""
    scale_down_delay_s: float = 300.0
    """A scale-down must be recommended continuously this long; the highest recommendation over
    the delay is applied (s)."""
    blackout: tuple[tuple[str, str], ...] = ()
    """Daily UTC windows ``("HH:MM", "HH:MM")`` in which nothing is changed (may wrap midnight)."""
    advisor: bool = False
    """Decide and log, never act."""


@dataclass(frozen=True)
class LoopConfig:
    """The control loop's settings. Times in s, rates in tuples/s."""

    interval_s: float = 10.0
    """Time between steps (s)."""
    utilization_target: float = 0.7
    """Target utilization of the hottest instance when planning / sizing."""
    utilization_band: tuple[float, float] = (0.3, 0.85)
    """Trusted path: act only when the predicted hottest utilization leaves this band."""
    latency_slo_ms: float | None = None
    """End-to-end latency SLO (ms) on ``latency_stat``; None = none."""
    latency_stat: str = "p99"
    confirm_windows: int = 2
    """Trusted path: the band must be left in this many consecutive windows before acting."""
    catch_up_s: float = 300.0
    """Drain the external backlog within this many seconds (s)."""
    catch_up_utilization: float = 0.9
    """While the backlog drains the hottest instance may run this busy: the plan is for
    ``max(offered, (offered + backlog / catch_up_s) x utilization_target / catch_up_utilization)``,
    so a backlog the target's headroom drains in time costs no extra instances."""
    scale_down_saving: float = 0.1
    """Trusted path: also scale down (inside the band) when the plan for the offered rate needs at
    least this fraction fewer instances than the configuration in force (and at least one)."""
    evaluate_after_s: float = 60.0
    """An action is evaluated once the job has run settled this long after it (s)."""
    history_windows: int = 120
    """Settled windows kept in memory (detectors, recalibration)."""
    guard: GuardRails = GuardRails()
    trust: TrustConfig = TrustConfig()
    reactive: ReactiveConfig = ReactiveConfig()
    blacklist: BlacklistConfig = BlacklistConfig()


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


@dataclass(frozen=True)
class ActionEvaluation:
    """The verdict on one logged action once settled."""

    action_id: int
    outcome: str
    measured: Mapping[str, float]
    undo: Mapping[str, int] | None = None
    """For a failed scale-down: the configuration to go back to."""


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


@dataclass(frozen=True)
class Decision:
    """decide: what to do, why, and what is expected."""

    kind: str
    """none | hold | scale | restart_instance | undo (a report_skew rides along in ``reports``)."""
    path: str
    """model | reactive | guard | -."""
    config: Mapping[str, int] | None
    reasons: tuple[str, ...]
    expected: Mapping[str, float] = field(default_factory=dict)
    operators: tuple[str, ...] = ()
    diagnosis: str = ""
    instance: int | None = None
    reports: tuple[Proposal, ...] = ()
    blocked: tuple[str, ...] = ()
    """Proposals the guard rails or blacklist stopped, and why."""
    advisor: bool = False

    def to_dict(self) -> dict:
        return {"kind": self.kind, "path": self.path, "config": dict(self.config) if self.config else None,
                "reasons": list(self.reasons), "expected": dict(self.expected),
                "operators": list(self.operators), "diagnosis": self.diagnosis, "instance": self.instance,
                "reports": [r.to_dict() for r in self.reports], "blocked": list(self.blocked),
                "advisor": self.advisor}


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
            "action_evaluations": [{"id": a.action_id, "outcome": a.outcome, "measured": dict(a.measured)}
                                   for a in e.actions],
            "decision": self.decision.to_dict(),
            "applied": self.result.applied, "act_error": self.result.error,
        }


# ------------------------------------------------------------------ helpers


def in_blackout(at_s: float, blackout: Sequence[tuple[str, str]]) -> bool:
    """Is the UTC time of day of ``at_s`` inside any ``(start, end)`` "HH:MM" window?"""
    if not blackout:
        return False
    t = datetime.fromtimestamp(at_s, tz=timezone.utc)
    minute = t.hour * 60 + t.minute
    for start, end in blackout:
        a, b = _minutes(start), _minutes(end)
        if (a <= minute < b) if a <= b else (minute >= a or minute < b):
            return True
    return False


def _minutes(hhmm: str) -> int:
    h, m = str(hhmm).split(":")
    return int(h) * 60 + int(m)


def clamp_config(config: Mapping[str, int], current: Mapping[str, int], model: JobModel,
                 guard: GuardRails) -> dict[str, int]:
    """Apply min/max parallelism (global and per operator) and the max change per step."""
    out = dict(current)
    for name, p in config.items():
        if name not in current:
            continue
        spec = model.operator(name) if name in model.config else None
        lo = max(guard.min_parallelism, spec.min_parallelism if spec else 1)
        hi = min(guard.max_parallelism, spec.max_parallelism if spec else guard.max_parallelism)
        cur = int(current[name])
        p = max(cur - guard.max_change_per_step, min(cur + guard.max_change_per_step, int(p)))
        out[name] = int(max(lo, min(hi, p)))
    return out


def _fmt_config(config: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


# ------------------------------------------------------------------ the loop


class ControlLoop:
    """``ControlLoop(model, source, actuator, config, store, planner)``; ``step()`` runs one
    collect -> evaluate -> decide -> act; ``run(iterations=..., duration_s=...)`` repeats it."""

    def __init__(self, model: JobModel, source: MetricsSource, actuator: Actuator,
                 config: LoopConfig = LoopConfig(), store: StateStore | None = None,
                 planner: Planner | None = None, load_forecast: LoadForecast | None = None) -> None:
        self.load_forecast = load_forecast
        self.measured_restart_s: float | None = None
        """The engine's restart time measured on the last applied change (s)."""
        self.config = config
        self.source = source
        self.actuator = actuator
        self.store = store if store is not None else InMemoryStateStore()
        self.planner = planner or self._default_planner
        self.model = model
        self.trust = TrustMonitor(config.trust)
        self.detectors = Detectors(config.reactive)
        self.history: list[JobWindow] = []
        self.last_as_of: float | None = None
        self.last_action_s = -math.inf
        self.settled_after_s = -math.inf
        self.config_in_force: dict[str, int] | None = None
        self._out_of_band = 0
        self._down_since: float | None = None
        self._down_max: dict[str, int] = {}
        self._restore()

    # -- persistence of the loop's own memory
    def _restore(self) -> None:
        meta = self.store.get_meta("loop")
        if not meta:
            return
        self.trust.restore(meta.get("trust"))
        self.last_action_s = float(meta.get("last_action_s", -math.inf) or -math.inf)
        self.settled_after_s = float(meta.get("settled_after_s", -math.inf) or -math.inf)
        self.last_as_of = meta.get("last_as_of")
        if meta.get("measured_restart_s") is not None:
            self.measured_restart_s = float(meta["measured_restart_s"])
        if meta.get("model") is not None:
            try:
                self.model = parse_model(meta["model"], source="state:model")
            except Exception:  # a model the current code cannot read: keep the configured one
                log.warning("stored model unreadable; using the configured one")

    def _save(self, with_model: bool = False) -> None:
        meta = self.store.get_meta("loop") or {}
        meta.update({"trust": self.trust.snapshot(), "last_action_s": _finite(self.last_action_s),
                     "settled_after_s": _finite(self.settled_after_s), "last_as_of": self.last_as_of,
                     "measured_restart_s": self.measured_restart_s})
        if with_model:
            meta["model"] = model_to_dict(self.model)
        self.store.put_meta("loop", meta)

    def _default_planner(self, model: JobModel, rate: float):
        from scheduler.plan import PlanConfig, plan

        c = self.config
        return plan(model, rate, PlanConfig(utilization_target=c.utilization_target,
                                            latency_slo_ms=c.latency_slo_ms, latency_stat=c.latency_stat))

    # -- stage 1
    def collect(self) -> Observation:
        try:
            batch = self.source.read(self.last_as_of)
            if self.config_in_force is None:
                self.config_in_force = {k: int(v) for k, v in self.actuator.current().items()}
            sources = [op.name for op in self.model.sources]
            lag_before = {}
            if self.history:
                lag_before = {s.operator: s.source_lag for s in self.history[-1].sources}
            windows = job_windows(batch, sources=sources, lag_before=lag_before)
        except Exception as err:  # noqa: BLE001 - any failed read is a failed read
            return Observation(ok=False, as_of_s=None, windows=(), error=_err(err))
        if self.last_as_of is not None and batch.as_of_s <= self.last_as_of:
            return Observation(ok=False, as_of_s=batch.as_of_s, windows=(),
                               error=f"stale batch (as of {batch.as_of_s:g} <= {self.last_as_of:g})")
        self.last_as_of = float(batch.as_of_s)
        fresh = [w for w in windows if dict(w.config) == self.config_in_force
                 and w.start_s >= self.settled_after_s and w.end_s <= batch.as_of_s + 1e-6]
        return Observation(ok=True, as_of_s=float(batch.as_of_s), windows=tuple(fresh),
                           dropped=len(windows) - len(fresh))

    # -- stage 2
    def evaluate(self, obs: Observation) -> Evaluation:
        if not obs.ok or not obs.windows:
            return Evaluation(window=None, trust=None, recalibration=None, recalibration_error=None,
                              symptoms=(), diagnoses=(), error=obs.error)
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
            symptoms: tuple[Symptom, ...] = ()
            shares = self._expected_shares(obs.windows[-1])
            for k in range(len(self.history) - len(obs.windows), len(self.history)):
                symptoms = self.detectors.update(self.history[: k + 1], shares)
            window = self.history[-1]
            diagnoses = diagnose(window, symptoms, to_graph(self.model), self.config.reactive)
            verdicts = self._evaluate_actions(window)
            self._save()
            return Evaluation(window=window, trust=trust, recalibration=recal, recalibration_error=recal_err,
                              symptoms=symptoms, diagnoses=diagnoses, actions=verdicts)
        except Exception as err:  # noqa: BLE001
            log.error("evaluate failed: %s", traceback.format_exc())
            return Evaluation(window=None, trust=None, recalibration=None, recalibration_error=None,
                              symptoms=(), diagnoses=(), error=_err(err))

    def _expected_shares(self, w: JobWindow) -> dict[str, float]:
        """Busiest instance's share of each operator that the model's key distributions explain."""
        try:
            known = {k: v for k, v in w.config.items() if k in self.model.config}
            pred = predict(self.model, known, max(w.input_rate, 1e-9))
            return {k: o.hot_share for k, o in pred.operators.items()}
        except Exception:  # noqa: BLE001 - fall back to even shares
            return {}

    def _evaluate_actions(self, window: JobWindow) -> tuple[ActionEvaluation, ...]:
        out = []
        for rec in self.store.actions(limit=20):
            if rec.outcome != "pending" or not rec.applied:
                continue
            if window.start_s < max(rec.at_s + self.config.evaluate_after_s, self.settled_after_s):
                continue
            # The backlog built up during the restart drains at full speed (the hottest instance
            # saturated): judge the action on a window that started drained (the one before it
            # ended with no backlog), or catch_up_s later at the latest.
            def drained(w: JobWindow) -> bool:
                return w.backlog <= max(w.offered_rate, 1.0)

            before = self.history[-2] if len(self.history) >= 2 else None
            clean = drained(window) and before is not None and before.end_s > rec.at_s and drained(before)
            if not clean and window.start_s < rec.at_s + self.config.evaluate_after_s + self.config.catch_up_s:
                continue
            measured = self._measure(window, rec)
            helped = self._helped(rec, measured)
            outcome = "helped" if helped else "did_not_help"
            undo = None
            if not helped:
                band = rec.load_band
                for op in rec.operators:
                    key = (rec.kind, op, rec.diagnosis, band)
                    self.store.put_blacklist(strike(find_entry(self.store, key), rec.kind, op, rec.diagnosis,
                                                    band, window.end_s, f"action {rec.id} did not help",
                                                    self.config.blacklist))
                if rec.kind == "scale" and rec.diagnosis in ("over_provisioned", "planned") and \
                        any(rec.to_config.get(k, 0) < v for k, v in rec.from_config.items()):
                    undo = dict(rec.from_config)
            self.store.update_action(replace(rec, outcome=outcome, evaluated_at_s=window.end_s,
                                             measured=measured))
            out.append(ActionEvaluation(action_id=int(rec.id), outcome=outcome, measured=measured, undo=undo))
        return tuple(out)

    @staticmethod
    def _measure(window: JobWindow, rec: ActionRecord) -> dict[str, float]:
        ops = [window.operators[o] for o in rec.operators if o in window.operators]
        m = {"busy_max": max((o.busy_max for o in ops), default=0.0),
             "backpressure_max": max((o.backpressure_max for o in window.operators.values()), default=0.0),
             "throughput": window.input_rate, "offered": window.offered_rate, "backlog": window.backlog}
        if rec.kind == "restart_instance" and ops:
            sts = [i.service_time_ms for i in ops[0].instances if i.service_time_ms]
            if len(sts) >= 2:
                m["rate_skew"] = max(sts) / sorted(sts)[len(sts) // 2]
        return m

    def _helped(self, rec: ActionRecord, m: Mapping[str, float]) -> bool:
        rc = self.config.reactive
        if rec.kind == "restart_instance":
            return m.get("rate_skew", 1.0) < rc.rate_skew_enter
        # scaling: no saturation left and the job keeps up with (or drains towards) its input
        keeps_up = m["throughput"] >= 0.95 * m["offered"] or m["backlog"] <= m["offered"]
        return m["busy_max"] < 0.98 and m["backpressure_max"] < rc.backpressure_enter and keeps_up

    # -- stage 3
    def decide(self, ev: Evaluation) -> Decision:
        g = self.config.guard
        advisor = g.advisor
        if ev.window is None:
            return Decision(kind="none", path="-", config=None, advisor=advisor,
                            reasons=(f"no new settled metrics ({ev.error})" if ev.error else "no new settled metrics",))
        w = ev.window
        now = w.end_s
        current = dict(self.config_in_force or w.config)
        for a in ev.actions:
            if a.undo is not None:
                return Decision(kind="undo", path="guard", config=clamp_config(a.undo, current, self.model, g),
                                reasons=(f"action {a.action_id} (scale-down) did not help: back to "
                                         f"{_fmt_config(a.undo)}",), diagnosis="undo",
                                operators=tuple(k for k in a.undo if a.undo[k] != current.get(k)), advisor=advisor)
        offered_hist = [{s.operator: s.arrival_rate for s in h.sources} for h in self.history
                        if h.end_s > now - g.scale_down_delay_s and dict(h.config) == current]
        proposals = list(resolve(w, ev.diagnoses, self.model, offered_hist, self.config.reactive,
                                 history=self.history))
        reports = tuple(p for p in proposals if p.kind == "report_skew")
        restarts = [p for p in proposals if p.kind == "restart_instance"]
        trusted = ev.trust is not None and ev.trust.trusted
        if trusted:
            scale = self._model_proposal(w, current)
            path = "model"
        else:
            scale = next((p for p in proposals if p.kind == "scale"), None)
            path = "reactive"
            self._out_of_band = 0
        trust_note = ev.trust.reasons if ev.trust else ()
        blocked: list[str] = []

        # guard rails that stop everything
        if now - self.last_action_s < g.stabilization_s:
            if scale or restarts:
                blocked.append(f"stabilizing: {now - self.last_action_s:.0f}s since the last action "
                               f"(< {g.stabilization_s:g}s)")
            return Decision(kind="hold", path="guard", config=None, reasons=tuple(trust_note) + tuple(blocked),
                            reports=reports, blocked=tuple(blocked), advisor=advisor)
        if in_blackout(now, g.blackout):
            if scale or restarts:
                blocked.append("blackout window")
            return Decision(kind="hold", path="guard", config=None, reasons=tuple(trust_note) + tuple(blocked),
                            reports=reports, blocked=tuple(blocked), advisor=advisor)

        band = load_band(w.offered_rate, self.config.blacklist.band_ratio)
        if scale is not None:
            target = clamp_config(scale.config, current, self.model, g)
            down = [k for k in target if target[k] < current[k]]
            up = [k for k in target if target[k] > current[k]]
            if down and not up:
                # scale-down delay: recommended continuously, take the highest recommendation
                if self._down_since is None:
                    self._down_since, self._down_max = now, dict(target)
                else:
                    self._down_max = {k: max(self._down_max.get(k, v), v) for k, v in target.items()}
                if now - self._down_since < g.scale_down_delay_s:
                    blocked.append(f"scale-down of {', '.join(down)} waits: recommended for "
                                   f"{now - self._down_since:.0f}s of {g.scale_down_delay_s:g}s")
                    target = current
                else:
                    target = {k: min(current[k], self._down_max.get(k, v)) for k, v in target.items()}
            else:
                self._down_since, self._down_max = None, {}
            for k in list(target):
                if target[k] != current[k]:
                    ban = active_ban(self.store, ("scale", k, scale.diagnosis, band), now)
                    if ban is not None:
                        blocked.append(f"blacklisted: scale {k} for {scale.diagnosis} in load band {band} "
                                       f"until {ban.until_s:.0f} (strike {ban.strikes}: {ban.reason})")
                        target[k] = current[k]
            changed = tuple(k for k in target if target[k] != current[k])
            if changed:
                if not any(target[k] < current[k] for k in changed):
                    self._down_since, self._down_max = None, {}
                else:
                    self._down_since, self._down_max = None, {}
                return Decision(kind="scale", path=path, config=target, operators=changed,
                                diagnosis=scale.diagnosis, reasons=tuple(trust_note) + tuple(scale.reasons),
                                expected=scale.expected, reports=reports, blocked=tuple(blocked),
                                advisor=advisor)
        else:
            self._down_since, self._down_max = None, {}
        for r in restarts:
            ban = active_ban(self.store, ("restart_instance", r.operators[0], r.diagnosis, band), now)
            if ban is not None:
                blocked.append(f"blacklisted: restart {r.operators[0]}[{r.instance}] until {ban.until_s:.0f}")
                continue
            return Decision(kind="restart_instance", path="reactive", config=None, operators=r.operators,
                            instance=r.instance, diagnosis=r.diagnosis, reasons=tuple(trust_note) + r.reasons,
                            expected=r.expected, reports=reports, blocked=tuple(blocked), advisor=advisor)
        reasons = tuple(trust_note) + tuple(blocked)
        if reports:
            reasons += tuple(f"data skew on {r.operators[0]}: {r.reasons[-1]}" for r in reports)
        return Decision(kind="none", path=path, config=None, reasons=reasons or ("nothing to do",),
                        reports=reports, blocked=tuple(blocked), advisor=advisor)

    def _forecast_rate(self, w: JobWindow) -> tuple[float | None, str | None]:
        if self.load_forecast is None:
            return None, None
        try:
            lead = (self.measured_restart_s + self.config.guard.settle_s
                    if self.measured_restart_s is not None else None)
            ahead = self.load_forecast(w.end_s, lead)
        except Exception as err:  # noqa: BLE001 - a failed forecast leaves the reactive sizing
            return None, f"forecast unavailable ({_err(err)})"
        if ahead is None or not math.isfinite(float(ahead)) or float(ahead) < 0:
            return None, None
        return float(ahead), None

    def _model_proposal(self, w: JobWindow, current: Mapping[str, int]) -> Proposal | None:
        c = self.config
        offered = w.offered_rate
        ahead, forecast_note = self._forecast_rate(w)
        rate = max(offered, ahead) if ahead is not None else offered
        known = {k: v for k, v in current.items() if k in self.model.config}
        pred = predict(self.model, known, rate)
        hottest = max((o.max_utilization for o in pred.operators.values()), default=0.0)
        lat = pred.latency_ms.get(c.latency_stat)
        lo, hi = c.utilization_band
        slo_miss = c.latency_slo_ms is not None and (lat is None or lat > c.latency_slo_ms)
        high = pred.saturated or hottest > hi or slo_miss
        drained = w.backlog <= max(offered, 1.0)
        low = not high and hottest < lo and drained
        plan = None
        if not (high or low) and drained and hottest < c.utilization_target:
            # Inside the band but sized for more than the offered rate needs (e.g. after the load
            # fell by less than the band's width): scale down when the saving is material.
            plan = self.planner(self.model, rate)
            variable = [k for k in current if k in self.model.config and not self.model.operator(k).is_source]
            now_n = sum(current[k] for k in variable)
            plan_n = sum(int(plan.config.get(k, current[k])) for k in variable)
            low = plan.feasible and now_n - plan_n >= max(1.0, c.scale_down_saving * now_n)
        if not (high or low):
            self._out_of_band = 0
            return None
        self._out_of_band += 1
        if high and self._out_of_band < c.confirm_windows:
            return None
        eff = rate
        if high and w.backlog > 0:
            drain = rate + w.backlog / c.catch_up_s
            eff = max(rate, drain * c.utilization_target / c.catch_up_utilization)
        if plan is None or eff != rate:
            plan = self.planner(self.model, eff)
        target = {k: int(v) for k, v in plan.config.items() if k in current}
        why = ("saturated" if pred.saturated else
               f"{c.latency_stat} latency {lat} ms > SLO {c.latency_slo_ms} ms" if slo_miss else
               f"hottest instance at {hottest:.0%} (band {lo:.0%}-{hi:.0%})" if high or hottest < lo else
               f"hottest instance at {hottest:.0%}, sized for more than the offered rate needs")
        load = (f"{offered:,.0f}/s offered" if rate == offered else
                f"{rate:,.0f}/s forecast within the lead time ({offered:,.0f}/s offered now)")
        reasons = [f"model: at {load} the configuration in force is {why}",
                   f"planned for {eff:,.0f}/s (backlog {w.backlog:,.0f} drained within "
                   f"{c.catch_up_s:g}s at <= {c.catch_up_utilization:.0%} busy): "
                   f"{_fmt_config(target)}" + ("" if plan.feasible else " (closest; infeasible)")]
        reasons += list(getattr(plan, "reasons", ()))[:3]
        if forecast_note:
            reasons.append(forecast_note)
        p = plan.prediction
        expected = {"busy_max": max((o.max_utilization for o in p.operators.values()), default=0.0),
                    "throughput": p.throughput, "backpressure_max": 0.0}
        if p.latency_ms.get(c.latency_stat) is not None:
            expected[f"latency_{c.latency_stat}_ms"] = p.latency_ms[c.latency_stat]
        return Proposal(kind="scale", operators=tuple(k for k in target if target[k] != current.get(k)),
                        diagnosis="planned", config=target, reasons=tuple(reasons), expected=expected)

    # -- stage 4
    def act(self, d: Decision, at_s: float | None) -> ActResult:
        if d.kind in ("none", "hold"):
            return ActResult(attempted=False, applied=False)
        current = dict(self.config_in_force or {})
        rate = self.history[-1].offered_rate if self.history else 0.0
        rec = ActionRecord(
            at_s=float(at_s or 0.0), kind="scale" if d.kind in ("scale", "undo") else d.kind,
            operators=d.operators, diagnosis=d.diagnosis,
            load_band=load_band(rate, self.config.blacklist.band_ratio), from_config=current,
            to_config=dict(d.config) if d.config else current, reasons=d.reasons, expected=d.expected,
            applied=False, advisor=d.advisor,
            detail=f"instance {d.instance}" if d.instance is not None else "", outcome="advised" if d.advisor else "pending")
        if d.advisor:
            rec = self.store.add_action(rec)
            return ActResult(attempted=False, applied=False, action_id=rec.id)
        try:
            if d.kind == "restart_instance":
                if not isinstance(self.actuator, InstanceRestarter):
                    raise ActuationFailed("the actuator cannot restart single instances", field="actuator",
                                          value=type(self.actuator).__name__)
                actuation = self.actuator.restart_instance(d.operators[0], int(d.instance), "; ".join(d.reasons))
            else:
                actuation = self.actuator.apply(dict(d.config), "; ".join(d.reasons))
        except Exception as err:  # noqa: BLE001 - a failed actuation is logged, the loop goes on
            rec = self.store.add_action(replace(rec, outcome="failed", detail=_err(err)))
            return ActResult(attempted=True, applied=False, error=_err(err), action_id=rec.id)
        if actuation.applied:
            if d.kind != "restart_instance":
                self.config_in_force = {k: int(v) for k, v in actuation.config.items()}
            self.last_action_s = float(at_s or 0.0)
            self.settled_after_s = self.last_action_s + float(actuation.restart_s or 0.0) + self.config.guard.settle_s
            if d.kind != "restart_instance" and actuation.restart_s and actuation.restart_s > 0:
                # The engine's measured restart time: a forecast-driven change must be decided at
                # least this long (plus settling) before the load it is for.
                self.measured_restart_s = float(actuation.restart_s)
            self.detectors.reset()
            self._out_of_band = 0
        rec = self.store.add_action(replace(rec, applied=bool(actuation.applied),
                                            outcome="pending" if actuation.applied else "failed",
                                            detail=(rec.detail + " " + actuation.detail).strip()))
        self._save()
        return ActResult(attempted=True, applied=bool(actuation.applied), actuation=actuation, action_id=rec.id)

    # -- one iteration
    def step(self) -> Step:
        obs = self.collect()
        ev = self.evaluate(obs)
        try:
            decision = self.decide(ev)
        except Exception as err:  # noqa: BLE001
            log.error("decide failed: %s", traceback.format_exc())
            decision = Decision(kind="none", path="-", config=None, reasons=(f"decide failed: {_err(err)}",))
        at = ev.window.end_s if ev.window is not None else obs.as_of_s
        result = self.act(decision, at) if ev.window is not None else ActResult(attempted=False, applied=False)
        step = Step(at_s=at, observation=obs, evaluation=ev, decision=decision, result=result)
        try:
            if obs.ok and obs.windows:
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


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _err(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


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
    if d.advisor and d.kind not in ("none", "hold"):
        verb += " (advisor: not applied)"
    elif step.result.attempted:
        verb += " -> applied" if step.result.applied else f" -> FAILED ({step.result.error})"
    lines = [head, f"  decision: {verb} [{d.path}]"]
    for diag in step.evaluation.diagnoses:
        if diag.causes:
            lines.append(f"  diagnosis {diag.operator}: {', '.join(diag.causes)} {dict(diag.scores)}")
    lines += [f"  - {r}" for r in d.reasons]
    for r in d.reports:
        lines.append(f"  report: {r.detail.get('suggestion', '')}")
    if d.expected:
        lines.append("  expected: " + ", ".join(f"{k} {v:,.3g}" for k, v in d.expected.items()))
    return "\n".join(lines)
