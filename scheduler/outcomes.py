"""Judging a logged action once its effect settled: pure functions over windows and records.

An applied action is judged on a settled window that started ``evaluate_after_s`` after it, and
once the backlog its restart built up has drained (or ``catch_up_s`` later at the latest): a
scaling action *helped* when nothing is saturated or back-pressured and the job keeps up with
its input; an instance restart helped when the operator's rate skew is gone. Rates tuples/s,
times s.

Everything here is pure but ``judge_actions``, the evaluate stage's verdicts: it reads the
action log and writes each verdict (and a blacklist strike for an action that did not help)
back into the ``StateStore``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from scheduler.observe import JobWindow
from scheduler.reactive import ReactiveConfig
from scheduler.state import ActionRecord, BlacklistConfig, StateStore, find_entry, strike


@dataclass(frozen=True)
class ActionEvaluation:
    """The verdict on one logged action once settled."""

    action_id: int
    outcome: str
    measured: Mapping[str, float]
    undo: Mapping[str, int] | None = None
    """For a failed scale-down: the configuration to go back to."""


def drained(w: JobWindow) -> bool:
    """No more than a second of input is waiting at the sources."""
    return w.backlog <= max(w.offered_rate, 1.0)


def ready(rec: ActionRecord, window: JobWindow, history: Sequence[JobWindow], settled_after_s: float,
          evaluate_after_s: float, catch_up_s: float) -> bool:
    """Is ``window`` the one to judge ``rec`` on?"""
    if rec.outcome != "pending" or not rec.applied:
        return False
    if window.start_s < max(rec.at_s + evaluate_after_s, settled_after_s):
        return False
    before = history[-2] if len(history) >= 2 else None
    clean = drained(window) and before is not None and before.end_s > rec.at_s and drained(before)
    return clean or window.start_s >= rec.at_s + evaluate_after_s + catch_up_s


def measure(window: JobWindow, rec: ActionRecord) -> dict[str, float]:
    """What is measured on ``window`` for the action's expectation."""
    ops = [window.operators[o] for o in rec.operators if o in window.operators]
    m = {"busy_max": max((o.busy_max for o in ops), default=0.0),
         "backpressure_max": max((o.backpressure_max for o in window.operators.values()), default=0.0),
         "throughput": window.input_rate, "offered": window.offered_rate, "backlog": window.backlog}
    if window.latency_ms:
        for stat, value in window.latency_ms.items():
            m[f"latency_{stat}_ms"] = float(value)
    if rec.kind == "restart_instance" and ops:
        sts = [i.service_time_ms for i in ops[0].instances if i.service_time_ms]
        if len(sts) >= 2:
            m["rate_skew"] = max(sts) / sorted(sts)[len(sts) // 2]
    return m


def helped(rec: ActionRecord, m: Mapping[str, float], config: ReactiveConfig = ReactiveConfig()) -> bool:
    """Did the action do what it was for?"""
    if rec.kind == "restart_instance":
        return m.get("rate_skew", 1.0) < config.rate_skew_enter
    keeps_up = m["throughput"] >= 0.95 * m["offered"] or m["backlog"] <= m["offered"]
    return m["busy_max"] < 0.98 and m["backpressure_max"] < config.backpressure_enter and keeps_up


def undo_of(rec: ActionRecord) -> dict[str, int] | None:
    """A failed scale-down is undone: the configuration to go back to."""
    if rec.kind == "scale" and rec.diagnosis in ("over_provisioned", "planned") and \
            any(rec.to_config.get(k, 0) < v for k, v in rec.from_config.items()):
        return dict(rec.from_config)
    return None


def judge_actions(store: StateStore, window: JobWindow, history: Sequence[JobWindow], settled_after_s: float,
                  evaluate_after_s: float, catch_up_s: float, reactive: ReactiveConfig = ReactiveConfig(),
                  blacklist: BlacklistConfig = BlacklistConfig()) -> tuple[ActionEvaluation, ...]:
    """Judge the newest logged actions (20) that are ready on ``window``: record each outcome and
    measurement in ``store``, strike an action that did not help on the blacklist (for each of
    its operators), and return the verdicts (with the undo of a failed scale-down)."""
    out = []
    for rec in store.actions(limit=20):
        if not ready(rec, window, history, settled_after_s, evaluate_after_s, catch_up_s):
            continue
        measured = measure(window, rec)
        ok = helped(rec, measured, reactive)
        undo = None
        if not ok:
            for op in rec.operators:
                key = (rec.kind, op, rec.diagnosis, rec.load_band)
                store.put_blacklist(strike(find_entry(store, key), rec.kind, op, rec.diagnosis, rec.load_band,
                                           window.end_s, f"action {rec.id} did not help", blacklist))
            undo = undo_of(rec)
        outcome = "helped" if ok else "did_not_help"
        store.update_action(replace(rec, outcome=outcome, evaluated_at_s=window.end_s, measured=measured))
        out.append(ActionEvaluation(action_id=int(rec.id), outcome=outcome, measured=measured, undo=undo))
    return tuple(out)
