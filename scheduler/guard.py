"""Guard rails: a pure function that bounds what a decision may do.

``guard(decision, state, rails, view) -> (decision, state)``: no clock, no store, no I/O; the
loop passes the time, the configuration in force, the operators' bounds and the active blacklist
entries in ``GuardView``, and keeps the returned ``GuardState`` for the next step. In order:

1. **Undo** of a failed scale-down passes (bounded by the parallelism limits only).
2. **Stabilization**: nothing for ``stabilization_s`` after the last action (``hold``).
3. **Blackout**: nothing inside a daily UTC window (``hold``).
4. **Daily budget**: at most ``max_reconfigurations_per_day`` applied reconfigurations in any
   ``budget_window_s`` (24 h unless scaled; a restart of one instance is not a reconfiguration);
   with ``budget_spares_scale_ups`` a spent budget stops scale-downs only; with
   ``budget_per_calendar_day`` the budget counts the changes since the day began instead.
5. **Bounds and step cap**: every operator within ``[min, max]`` parallelism (global and the
   model's per-operator bounds), at most ``max_change_per_step`` instances gained or lost.
6. **Scale-down delay**: a pure scale-down must be recommended continuously for
   ``scale_down_delay_s``; the highest recommendation over that time is applied.
7. **Blacklist**: an operator whose (action, operator, diagnosis, load band) is banned keeps its
   parallelism; a banned instance restart or move off a host (keyed by the host) is dropped.
8. **Advisor mode**: the decision is marked advisory (logged, never applied).

When a decision is blocked entirely, its ``fallbacks`` are tried in order (through 4-7). Times
in seconds (source clock); parallelism in instances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Mapping, Sequence

from scheduler.decision import Decision, DecisionKind

DAY_S = 86400.0


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
    bounded steps."""
    stabilization_s: float = 60.0
    """No new action for this many seconds after one (s, source clock)."""
    settle_s: float = 10.0
    """Windows starting before action + restart + this are not used (s)."""
    scale_down_delay_s: float = 300.0
    """A scale-down must be recommended continuously this long; the highest recommendation over
    the delay is applied (s)."""
    blackout: tuple[tuple[str, str], ...] = ()
    """Daily UTC windows ``("HH:MM", "HH:MM")`` in which nothing is changed (may wrap midnight)."""
    max_reconfigurations_per_day: int | None = None
    """Most applied reconfigurations in any ``budget_window_s`` (None = no budget)."""
    budget_window_s: float = DAY_S
    """The daily budget's window (s): a day (scaled with the other times in a compressed replay)."""
    budget_spares_scale_ups: bool = False
    """A scale-up (no operator scaled down) passes a spent daily budget, which then stops
    scale-downs only: a load the plan missed is still met (a spent budget otherwise holds an
    under-provisioned job for up to a day). Changes stay bounded: with no scale-down allowed,
    each one past the budget adds instances, up to the parallelism limits."""
    budget_per_calendar_day: bool = False
    """The daily budget counts the reconfigurations since the current day began (days of
    ``budget_window_s`` from ``budget_day_origin_s``) instead of in the last ``budget_window_s``:
    a day's spent budget is free again at midnight, not 24 h after its first change."""
    budget_day_origin_s: float = 0.0
    """A midnight on the source clock (s): the calendar days' origin (0: the epoch, UTC
    midnights of an epoch clock; a compressed replay puts it at its start)."""
    advisor: bool = False
    """Decide and log, never act."""


@dataclass(frozen=True)
class GuardState:
    """What the guard rails remember between steps."""

    last_action_s: float = -math.inf
    """When the last action was applied (s)."""
    down_since_s: float | None = None
    """Since when a scale-down has been recommended without a break (s), None = none pending."""
    down_max: Mapping[str, int] = field(default_factory=dict)
    """The highest recommended configuration over the pending scale-down's delay."""
    changes_s: tuple[float, ...] = ()
    """When the reconfigurations of the last budget window were applied (s)."""

    def after_action(self, at_s: float, reconfiguration: bool, budget_window_s: float) -> "GuardState":
        """The state once an action was applied at ``at_s``. Reconfigurations older than
        ``budget_window_s`` (the rails' ``budget_window_s``: a day, or the scaled day of a
        compressed replay) are forgotten: the budget no longer counts them."""
        changes = tuple(t for t in self.changes_s if t > at_s - budget_window_s)
        if reconfiguration:
            changes += (float(at_s),)
        return replace(self, last_action_s=float(at_s), down_since_s=None, down_max={}, changes_s=changes)


@dataclass(frozen=True)
class GuardView:
    """What the guard rails look at, as values."""

    now_s: float
    current: Mapping[str, int]
    """The configuration in force."""
    bounds: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Per operator (min, max) parallelism from the model."""
    bans: Mapping[tuple, str] = field(default_factory=dict)
    """Active blacklist entries: (action, operator, diagnosis, load band) -> why banned."""
    band: int = 0
    """The load band of the offered rate now (``scheduler.state.load_band``)."""


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


def budget_since(now_s: float, rails: GuardRails) -> float:
    """From when the daily budget counts changes at ``now_s`` (s): the start of the current day
    with ``budget_per_calendar_day``, else just after ``now_s - budget_window_s``."""
    if rails.budget_per_calendar_day:
        w, o = rails.budget_window_s, rails.budget_day_origin_s
        return o + math.floor((now_s - o) / w) * w
    return math.nextafter(now_s - rails.budget_window_s, math.inf)


def _minutes(hhmm: str) -> int:
    h, m = str(hhmm).split(":")
    return int(h) * 60 + int(m)


def clamp(config: Mapping[str, int], current: Mapping[str, int], rails: GuardRails,
          bounds: Mapping[str, tuple[int, int]] | None = None) -> dict[str, int]:
    """Apply min/max parallelism (global and per operator) and the max change per step."""
    bounds = bounds or {}
    out = dict(current)
    for name, p in config.items():
        if name not in current:
            continue
        op_lo, op_hi = bounds.get(name, (1, rails.max_parallelism))
        lo = max(rails.min_parallelism, op_lo)
        hi = min(rails.max_parallelism, op_hi)
        cur = int(current[name])
        p = max(cur - rails.max_change_per_step, min(cur + rails.max_change_per_step, int(p)))
        out[name] = int(max(lo, min(hi, p)))
    return out


def _fmt(config: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def guard(decision: Decision, state: GuardState, rails: GuardRails,
          view: GuardView) -> tuple[Decision, GuardState]:
    """The decision the rails allow and the rails' new state (see the module docstring)."""
    advisor = rails.advisor
    now, current = view.now_s, dict(view.current)
    kind = decision.kind
    if kind == DecisionKind.UNDO:
        target = clamp(decision.config or {}, current, rails, view.bounds)
        return replace(decision, config=target, advisor=advisor, fallbacks=()), state
    actionable = kind in (DecisionKind.SCALE, DecisionKind.RESTART_INSTANCE, DecisionKind.MOVE_OFF_HOST) \
        or bool(decision.fallbacks)
    if kind not in (DecisionKind.SCALE,) and not _has_scale(decision):
        state = replace(state, down_since_s=None, down_max={})
    if not actionable:
        return replace(decision, advisor=advisor, fallbacks=()), state
    if now - state.last_action_s < rails.stabilization_s:
        note = f"stabilizing: {now - state.last_action_s:.0f}s since the last action (< {rails.stabilization_s:g}s)"
        return _hold(decision, note, advisor), state
    if in_blackout(now, rails.blackout):
        return _hold(decision, "blackout window", advisor), state
    blocked: list[str] = list(decision.blocked)
    for candidate in (decision,) + tuple(decision.fallbacks):
        allowed, state, notes = _one(candidate, state, rails, view)
        blocked += notes
        if allowed is not None:
            return replace(allowed, blocked=tuple(blocked), advisor=advisor, fallbacks=(),
                           reports=decision.reports or allowed.reports), state
    reasons = tuple(decision.reasons) + tuple(n for n in blocked if n not in decision.reasons)
    return Decision(kind=DecisionKind.NONE, path=decision.path, config=None, reasons=reasons or ("nothing to do",),
                    reports=decision.reports, blocked=tuple(blocked), advisor=advisor), state


def _has_scale(decision: Decision) -> bool:
    return any(f.kind == DecisionKind.SCALE for f in decision.fallbacks)


def _hold(decision: Decision, note: str, advisor: bool) -> Decision:
    return Decision(kind=DecisionKind.HOLD, path="guard", config=None, reasons=tuple(decision.reasons) + (note,),
                    reports=decision.reports, blocked=tuple(decision.blocked) + (note,), advisor=advisor)


def _one(d: Decision, state: GuardState, rails: GuardRails,
         view: GuardView) -> tuple[Decision | None, GuardState, list[str]]:
    """One candidate through the budget, bounds, scale-down delay and blacklist."""
    now, current = view.now_s, dict(view.current)
    notes: list[str] = []
    if d.kind == DecisionKind.RESTART_INSTANCE:
        op = d.operators[0] if d.operators else ""
        ban = view.bans.get(("restart_instance", op, d.diagnosis, view.band))
        if ban is not None:
            return None, state, [f"blacklisted: restart {op}[{d.instance}] ({ban})"]
        return d, state, notes
    if d.kind == DecisionKind.MOVE_OFF_HOST:
        ban = view.bans.get(("move_off_host", d.host or "", d.diagnosis, view.band))
        if ban is not None:
            return None, state, [f"blacklisted: move off {d.host} for {d.diagnosis} ({ban})"]
        return d, state, notes
    if d.kind != DecisionKind.SCALE or not d.config:
        return None, state, notes
    budget = rails.max_reconfigurations_per_day
    target = clamp(d.config, current, rails, view.bounds)
    if budget is not None:
        used = sum(1 for t in state.changes_s if t >= budget_since(now, rails))
        if used >= budget:
            span = "since the day began" if rails.budget_per_calendar_day else f"in the last {rails.budget_window_s:g} s"
            spent = f"daily budget spent: {used} reconfigurations {span} (max_reconfigurations_per_day = {budget})"
            if not rails.budget_spares_scale_ups:
                return None, state, [spent]
            # only the scale-up part passes: nothing is scaled down past a spent budget
            target = {k: max(v, current[k]) for k, v in target.items()}
            if all(target[k] == current[k] for k in target):
                return None, state, [spent]
            notes.append(spent + ": a scale-up passes (budget_spares_scale_ups)")
    down = [k for k in target if target[k] < current[k]]
    up = [k for k in target if target[k] > current[k]]
    if down and not up:
        if state.down_since_s is None:
            state = replace(state, down_since_s=now, down_max=dict(target))
        else:
            state = replace(state, down_max={k: max(state.down_max.get(k, v), v) for k, v in target.items()})
        if now - state.down_since_s < rails.scale_down_delay_s:
            notes.append(f"scale-down of {', '.join(down)} waits: recommended for "
                         f"{now - state.down_since_s:.0f}s of {rails.scale_down_delay_s:g}s")
            return None, state, notes
        target = {k: min(current[k], state.down_max.get(k, v)) for k, v in target.items()}
    else:
        state = replace(state, down_since_s=None, down_max={})
    for k in list(target):
        if target[k] != current[k]:
            ban = view.bans.get(("scale", k, d.diagnosis, view.band))
            if ban is not None:
                notes.append(f"blacklisted: scale {k} for {d.diagnosis} in load band {view.band} ({ban})")
                target[k] = current[k]
    changed = tuple(k for k in target if target[k] != current[k])
    if not changed:
        return None, state, notes
    state = replace(state, down_since_s=None, down_max={})
    return replace(d, config=target, operators=changed), state, notes
