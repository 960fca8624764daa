"""The three deciders: model (one-step plan), reactive (Dhalion-style) and pre-emptive.

Each implements ``scheduler.decision.Decider``: ``decide(evaluation, context) -> Decision``.
The control loop asks the *primary* decider (model or pre-emptive) while the trust monitor
trusts the model, the reactive decider otherwise, and always takes the reactive decider's
instance restarts and data-skew reports (``combine``). Rates tuples/s, times s, latency ms.

* ``ModelDecider``: when the configuration in force leaves the utilization band (or misses the
  latency SLO, or saturates) at the offered rate (or at the forecast over the lead time, with a
  ``load_forecast``) in ``confirm_windows`` consecutive windows, or when, inside the band, a plan
  for the offered rate needs at least ``scale_down_saving`` fewer instances: plan in one step
  (``scheduler.plan.plan``) for ``max(offered, forecast)``, a backlog drained within
  ``targets.catch_up_s`` with the hottest instance at most ``catch_up_utilization`` busy.
* ``ReactiveDecider``: the reactive resolvers (``scheduler.reactive.resolve``): DS2 sizing of
  every under-provisioned operator, scale-down by the peak offered rate over the scale-down
  window, slow instances restarted, data skew reported.
* ``PreemptiveDecider``: every ``replan_s`` (and at once when the measured load runs past
  ``reactive_trigger`` of the capacity in force: a forecast miss) forecast the load at
  ``quantile`` from the rate history (what the user's history store or series holds, then what
  the loop measured) and build a timeline with ``scheduler.schedule.schedule``; apply each
  reconfiguration when it is due, with the model decider's plan as a floor (per operator, the
  larger of the two; the floor holds until the next re-plan).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from modeler.modelfile import JobModel
from modeler.queueing import predict
from scheduler.decision import Decision, DecisionContext, DecisionKind, no_action
from scheduler.reactive import Proposal, ReactiveConfig, resolve
from scheduler.targets import Targets

Planner = Callable[[JobModel, float, Targets], Any]
"""``(model, rate, targets) -> Plan`` (``.config``, ``.feasible``, ``.prediction``, ``.reasons``)."""
LoadForecast = Callable[[float, "float | None"], "float | None"]
"""``(now_s, lead_time_s) -> the highest forecast input rate (tuples/s) until a change decided
now is in place`` or None (``scheduler.forecasting.HistoryLoadForecast``)."""


def default_planner(model: JobModel, rate: float, targets: Targets):
    from scheduler.plan import PlanConfig, plan

    return plan(model, rate, PlanConfig(targets))


def _fmt(config: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def _err(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def expected_outcome(pred, targets: Targets) -> dict[str, float]:
    """What a configuration should measure once settled, from the model's ``Prediction``: the
    hottest instance's utilization, the throughput, no back pressure, and the SLO's latency."""
    expected = {"busy_max": max((o.max_utilization for o in pred.operators.values()), default=0.0),
                "throughput": pred.throughput, "backpressure_max": 0.0}
    lat = pred.latency_ms.get(targets.latency_stat)
    if lat is not None:
        expected[f"latency_{targets.latency_stat}_ms"] = lat
    return expected


def undo_decision(evaluation, context: DecisionContext) -> Decision | None:
    """Go back when a logged scale-down did not help (the evaluate stage's verdict)."""
    for a in getattr(evaluation, "actions", ()):
        if a.undo is not None:
            return Decision(kind=DecisionKind.UNDO, path="guard", config=dict(a.undo), diagnosis="undo",
                            reasons=(f"action {a.action_id} (scale-down) did not help: back to {_fmt(a.undo)}",),
                            operators=tuple(k for k in a.undo if a.undo[k] != context.config.get(k)))
    return None


def windows_in_force(ctx: DecisionContext, current: Mapping[str, int], window_s: float) -> list:
    """The history's windows that ended within the last ``window_s`` seconds under ``current``:
    what a scale-down sizes from (the highest rate over the scale-down delay)."""
    return [h for h in ctx.history if h.end_s > ctx.now_s - window_s and dict(h.config) == current]


# ------------------------------------------------------------------ model


@dataclass(frozen=True)
class ModelDeciderConfig:
    """When the model decider acts."""

    utilization_band: tuple[float, float] = (0.3, 0.85)
    """Act only when the predicted hottest utilization leaves this band (fractions)."""
    confirm_windows: int = 2
    """Above the band in this many consecutive windows of the configuration in force before acting."""
    catch_up_utilization: float = 0.9
    """While a backlog drains the hottest instance may run this busy: the plan is for
    ``max(rate, (rate + backlog / catch_up_s) x utilization_target / catch_up_utilization)``."""
    scale_down_saving: float = 0.1
    """Inside the band, scale down when a plan for the rate needs at least this fraction fewer
    instances than the configuration in force (and at least one)."""


class ModelDecider:
    """One-step plans from the (trusted) model. ``load_forecast``: optional forecast sizing."""

    path = "model"

    def __init__(self, config: ModelDeciderConfig = ModelDeciderConfig(), planner: Planner | None = None,
                 load_forecast: LoadForecast | None = None, peak_window_s: float | None = None) -> None:
        self.config = config
        self.planner = planner or default_planner
        self.load_forecast = load_forecast
        self.peak_window_s = peak_window_s
        """A scale-down sizes for the highest offered rate of the configuration in force over
        this many seconds (the guard's scale-down delay, as the reactive decider does): one
        window's rate is noisy, and a plan from a low one undersizes. None = the window's rate."""

    def _peak(self, ctx: DecisionContext, current: Mapping[str, int], offered: float) -> float:
        if not self.peak_window_s:
            return offered
        return max([offered] + [h.offered_rate for h in windows_in_force(ctx, current, self.peak_window_s)])

    def _forecast(self, ctx: DecisionContext) -> tuple[float | None, str | None]:
        if self.load_forecast is None:
            return None, None
        try:
            ahead = self.load_forecast(ctx.now_s, ctx.lead_time_s)
        except Exception as err:  # noqa: BLE001 - a failed forecast leaves the offered-rate sizing
            return None, f"forecast unavailable ({_err(err)})"
        if ahead is None or not math.isfinite(float(ahead)) or float(ahead) < 0:
            return None, None
        return float(ahead), None

    def _state(self, model: JobModel, config: Mapping[str, int], rate: float, targets: Targets):
        known = {k: v for k, v in config.items() if k in model.config}
        pred = predict(model, known, rate)
        hottest = max((o.max_utilization for o in pred.operators.values()), default=0.0)
        lat = pred.latency_ms.get(targets.latency_stat)
        slo_miss = targets.latency_slo_ms is not None and (lat is None or lat > targets.latency_slo_ms)
        high = pred.saturated or hottest > self.config.utilization_band[1] or slo_miss
        return pred, hottest, lat, slo_miss, high

    def decide(self, evaluation, ctx: DecisionContext) -> Decision:
        w = evaluation.window
        if w is None:
            return no_action(self.path, ("no new settled metrics",))
        c, t, model = self.config, ctx.targets, ctx.model
        current = dict(ctx.config)
        offered = w.offered_rate
        ahead, note = self._forecast(ctx)
        rate = max(offered, ahead) if ahead is not None else offered
        # the configuration in force is judged at the rate with the headroom; plans add it themselves
        pred, hottest, lat, slo_miss, high = self._state(model, current, t.planned_rate(rate), t)
        lo, hi = c.utilization_band
        drained = w.backlog <= max(offered, 1.0)
        low = not high and hottest < lo and drained
        # a scale-down is judged and sized at the highest rate over the peak window
        down_rate = max(rate, self._peak(ctx, current, offered)) if not high else rate
        if low and down_rate > rate:
            low = self._state(model, current, t.planned_rate(down_rate), t)[1] < lo
        plan, planned_for = None, None
        if not (high or low) and drained and hottest < t.utilization_target:
            # Inside the band but sized for more than the rate needs: scale down when it saves.
            plan, planned_for = self.planner(model, down_rate, t), down_rate
            variable = [k for k in current if k in model.config and not model.operator(k).is_source]
            now_n = sum(current[k] for k in variable)
            plan_n = sum(int(plan.config.get(k, current[k])) for k in variable)
            low = plan.feasible and now_n - plan_n >= max(1.0, c.scale_down_saving * now_n)
        if not (high or low):
            return no_action(self.path, (f"model: hottest instance at {hottest:.0%} of the band "
                                         f"{lo:.0%}-{hi:.0%} at {rate:,.0f}/s",) + ((note,) if note else ()))
        if high and c.confirm_windows > 1:
            same = [h for h in ctx.history[:-1] if dict(h.config) == current][-(c.confirm_windows - 1):]
            confirmed = len(same) == c.confirm_windows - 1 and all(
                self._state(model, current, t.planned_rate(max(h.offered_rate, ahead or 0.0)), t)[4] for h in same)
            if not confirmed:
                return no_action(self.path, (f"model: out of band at {rate:,.0f}/s; waiting for "
                                             f"{c.confirm_windows} consecutive windows",))
        eff = rate if high else down_rate
        if high and w.backlog > 0:
            drain = rate + w.backlog / t.catch_up_s
            eff = max(rate, drain * t.utilization_target / c.catch_up_utilization)
        if plan is None or eff != planned_for:
            plan = self.planner(model, eff, t)
        target = {k: int(plan.config.get(k, v)) for k, v in current.items()}
        why = ("saturated" if pred.saturated else
               f"{t.latency_stat} latency {lat} ms > SLO {t.latency_slo_ms} ms" if slo_miss else
               f"hottest instance at {hottest:.0%} (band {lo:.0%}-{hi:.0%})" if high or hottest < lo else
               f"hottest instance at {hottest:.0%}, sized for more than the offered rate needs")
        load = (f"{offered:,.0f}/s offered" if ahead is None or ahead <= offered else
                f"{ahead:,.0f}/s forecast within the lead time ({offered:,.0f}/s offered now)")
        reasons = [f"model: at {load} the configuration in force is {why}",
                   f"planned for {eff:,.0f}/s (backlog {w.backlog:,.0f} drained within "
                   f"{t.catch_up_s:g}s at <= {c.catch_up_utilization:.0%} busy): "
                   f"{_fmt(target)}" + ("" if plan.feasible else " (closest; infeasible)")]
        reasons += list(getattr(plan, "reasons", ()))[:3]
        if note:
            reasons.append(note)
        expected = expected_outcome(plan.prediction, t)
        changed = tuple(k for k in target if target[k] != current.get(k))
        if not changed:
            return no_action(self.path, tuple(reasons[:1]) + ("the plan is the configuration in force",))
        return Decision(kind=DecisionKind.SCALE, path=self.path, config=target, operators=changed,
                        diagnosis="planned", reasons=tuple(reasons), expected=expected)


# ------------------------------------------------------------------ reactive


class ReactiveDecider:
    """The reactive policy's resolvers as a decider. ``peak_window_s``: a scale-down sizes for the
    highest offered rate over this many seconds (the guard's scale-down delay)."""

    path = "reactive"

    def __init__(self, config: ReactiveConfig = ReactiveConfig(), peak_window_s: float = 300.0) -> None:
        self.config = config
        self.peak_window_s = peak_window_s

    def decide(self, evaluation, ctx: DecisionContext) -> Decision:
        w = evaluation.window
        if w is None:
            return no_action(self.path, ("no new settled metrics",))
        current = dict(ctx.config)
        offered = [{s.operator: s.arrival_rate for s in h.sources}
                   for h in windows_in_force(ctx, current, self.peak_window_s)]
        proposals = resolve(w, evaluation.diagnoses, ctx.model, offered, self.config,
                            history=ctx.history, targets=ctx.targets)
        return proposals_decision(self.path, proposals)


def _proposal_decision(path: str, p: Proposal) -> Decision:
    return Decision(kind=DecisionKind(p.kind), path=path, config=dict(p.config) if p.config else None,
                    operators=tuple(p.operators), diagnosis=p.diagnosis, instance=p.instance,
                    reasons=tuple(p.reasons), expected=dict(p.expected))


def proposals_decision(path: str, proposals: Sequence[Proposal]) -> Decision:
    """The reactive proposals as one decision: a scale first, instance restarts as fallbacks,
    data-skew reports attached."""
    reports = tuple(p for p in proposals if p.kind == "report_skew")
    actions = [_proposal_decision(path, p) for p in proposals if p.kind == "scale"]
    actions += [_proposal_decision("reactive", p) for p in proposals if p.kind == "restart_instance"]
    if not actions:
        reasons = tuple(f"data skew on {r.operators[0]}: {r.reasons[-1]}" for r in reports)
        return no_action(path, reasons, reports)
    first, rest = actions[0], tuple(actions[1:])
    from dataclasses import replace

    return replace(first, reports=reports, fallbacks=rest)


def combine(primary: Decision | None, reactive: Decision) -> Decision:
    """The primary decider's decision (trusted model) with the reactive decider's instance
    restarts and reports; the reactive decision alone when there is no primary.

    A slow instance is never answered with a scale-up of its operator: when the primary scales
    an operator the reactive decider restarts an instance of, the restart goes first and the
    scale becomes its fallback (applied only when the restart cannot be, e.g. the actuator has
    no instance restarts); whether capacity is still short is judged on the windows after the
    restart. Restarts on operators the primary does not change stay fallbacks of its scale."""
    from dataclasses import replace

    if primary is None:
        return reactive
    restarts = tuple(d for d in (reactive,) + tuple(reactive.fallbacks)
                     if d.kind == DecisionKind.RESTART_INSTANCE)
    reports = reactive.reports
    placement = next((d for d in (reactive,) + tuple(reactive.fallbacks)
                      if d.kind == DecisionKind.SCALE and d.diagnosis == "data_skew"), None)
    if placement is not None and not restarts:
        # A hot key's operator is sized by where its key groups fall (the model's plan assumes
        # the key distribution the hot key broke): the placement's parallelism wins for it.
        if primary.kind == DecisionKind.SCALE:
            placed = {k: int(placement.config[k]) for k in placement.operators}
            config = {**dict(primary.config), **placed}
            ops = tuple(dict.fromkeys(tuple(primary.operators) + tuple(placement.operators)))
            return replace(primary, config=config, operators=ops, reports=reports,
                           reasons=tuple(primary.reasons) + tuple(placement.reasons))
        return replace(placement, reasons=tuple(primary.reasons) + tuple(placement.reasons), reports=reports)
    if primary.kind == DecisionKind.SCALE:
        first = next((r for r in restarts if set(r.operators) & set(primary.operators)), None)
        if first is not None:
            others = tuple(r for r in restarts if r is not first)
            return replace(first, reasons=tuple(first.reasons) + (
                f"restarted before any scale-up of {', '.join(first.operators)}; the model's plan "
                f"({_fmt(dict(primary.config or {}))}) waits for the windows after it",),
                reports=reports, fallbacks=(primary,) + tuple(primary.fallbacks) + others)
        return replace(primary, reports=reports, fallbacks=tuple(primary.fallbacks) + restarts)
    if restarts:
        return replace(restarts[0], reasons=tuple(primary.reasons) + tuple(restarts[0].reasons),
                       reports=reports, fallbacks=restarts[1:])
    reasons = tuple(primary.reasons) + tuple(f"data skew on {r.operators[0]}: {r.reasons[-1]}" for r in reports)
    return replace(primary, reports=reports, reasons=reasons)


# ------------------------------------------------------------------ pre-emptive


@dataclass(frozen=True)
class PreemptiveConfig:
    """The pre-emptive decider. Times in the forecast's seconds (``clock``), rates tuples/s."""

    quantile: float = 0.5
    """Forecast quantile the schedule plans for (0 < q < 1). The median: the schedule already
    takes maxima of the path (over the lead time, the stabilization period, merged segments),
    and a load that runs above the forecast's upper band triggers a re-plan (``band_quantile``).
    Chosen on held-out trace days (``experiments.suite.preemptive.TUNING_DAYS``: 0.5 / 0.7 / 0.9,
    by violation minutes + instance-hours at the schedule's exchange rate), not on the
    evaluation days."""
    forecast_step_s: float = 900.0
    """Grid of the rate history handed to the forecaster (s)."""
    horizon_s: float = 30 * 3600.0
    """Forecast horizon of each re-plan (s)."""
    lead_time_s: float = 600.0
    """A scale-up is issued this long before its segment (s): restart time plus a margin."""
    stabilization_s: float = 3600.0
    """The forecast must stay low this long before a planned scale-down (s)."""
    max_reconfigurations_per_day: int = 6
    """Most planned changes in any 24 h, counting those already made."""
    replan_s: float = 2 * 3600.0
    """Periodic re-plan interval (s)."""
    refit_s: float = 86400.0
    """The forecaster is re-fitted this often (s); re-plans in between condition the fitted
    forecaster on the newest history (cheap)."""
    band_quantile: float = 0.9
    """The forecast's upper band (0 < q < 1): re-plan at once, with the measured load as the
    floor, when the load measured over the last forecasting step leaves it (runs above the
    band's forecast for now): the forecast has missed, whatever the capacity in force. 0 = no
    band trigger."""
    reactive_trigger: float = 1.0
    """Also re-plan at once when a window's measured input exceeds this fraction of the
    capacity (at the utilization target) of the configuration in force (1.0: the load has
    reached the target; the model decider's floor then sizes for it anyway)."""
    quiet_s: float = 900.0
    """After such a re-plan, no other one for this long (s)."""
    history_days: float = 21.0
    """Days of rate history the forecaster sees."""
    method: str = "auto"
    """``modeler.forecast.Forecaster`` method."""
    restart_s: float = 0.0
    """The engine's restart time per change (s), to price the schedule's scale-downs
    (``scheduler.schedule`` step 6: a scale-down is planned only when the instance-hours it
    saves pay for the SLO violation its restarts cost); 0 = no pricing."""
    violation_s_per_instance_hour: float = 60.0
    """The exchange rate of that pricing: seconds of SLO violation one instance-hour saved is
    worth (s per instance-hour)."""
    shift_s: float = 0.0
    """``scheduler.schedule`` step 7: a priced change may move up to this many seconds (a
    scale-up earlier, a scale-down later) to where the forecast load is lower and its restart
    cheaper (s); 0 = at its default time."""
    miss_correction_s: float = 0.0
    """When the load leaves the upper band (a forecast miss), the re-plan scales the forecast
    path by the miss (measured / forecast now) and lets that correction fade with this time
    constant (s): a level the forecaster missed (a match day, a news spike) is planned for in
    one step instead of being chased window by window; 0 = no correction (the measured load
    is only the floor; the default). 7200 (2 h) was measured: see ``safe_scale_down``."""
    miss_utilization_target: float = 1.0
    """When the load leaves the upper band, the forecast has been shown wrong: that re-plan
    sizes at this utilization target (or the targets' own, when lower) instead of the SLO
    ceiling, the margin a reactive scaler keeps (the Flink autoscaler's 0.7), until the next
    periodic re-plan restores the ceiling. 1.0 = the targets' own (the default); 0.7 was
    measured: see ``safe_scale_down``."""
    price_running: bool = False
    """``scheduler.schedule.ScheduleConfig.price_running``: a re-plan may scale the running
    configuration down at once when the saving pays for the restart (priced, with
    ``restart_s``), instead of keeping it through the first segment because it covers it.

    Off by default. Measured on the held-out tuning days only (``TUNING_DAYS``: one day per trace,
    seed 0, WordCount on its true model, 2026-11-29). Off: 16.8 violation min, 322.2 inst-h,
    12 changes. On: 21.9 min, 303.1 inst-h, 15 changes. (The Flink rules on those days:
    21.8 / 291.9 / 11.) So on these days it trades the violation minutes augury saves over the
    Flink rules for 6 % fewer instance-hours. That is a gain at the schedule's own exchange rate
    of 60 s per instance-hour (20,340 -> 19,497 s), but it does not move towards issue 20's
    goals. WC98 alone: 8.8 -> 11.9 min, 89.3 -> 71.3 inst-h. Extrapolating the measured load's
    rising trend 1,200 s ahead on a reactive re-plan was also measured, alone 14.8 / 347.5 and
    with this 23.1 / 321.5, and was not kept."""
    safe_scale_down: bool = True
    """Hold a planned scale-down unless the smaller configuration covers both the forecast's
    upper band (``band_quantile``) over the next ``stabilization_s`` and the highest load
    measured over the last ``stabilization_s`` (at the utilization target). A scale-down
    undone within the hour costs two restarts and their drains; holding it costs a few
    instance-minutes (the asymmetry the Flink autoscaler's 1 h scale-down delay answers).

    On by default, chosen on the held-out tuning days only (``experiments.suite.preemptive``'s
    ``TUNING_DAYS``, one per trace, seed 0, WordCount, augury's learned model; 2026-11-28): off
    48.1 violation minutes / 314.7 instance-hours / 17 changes, on 15.3 / 326.1 / 11 (the Flink
    rules 21.8 / 291.9 / 11); most of the minutes it saves are the first hour's scale-downs below
    a load that had not yet fallen and scale-downs to 0.86 utilization whose p99 broke the SLO.
    ``miss_correction_s`` (7200) on top changed the tuning days little (14.7 / 329.9); the three
    settings together (2 h, 0.7, on) had been worse on the evaluation days (86.8 -> 129.7 min,
    WC98's match-day spikes), so those two stay off. The evaluation days' figures are in
    docs/RESULTS.md (preemptive)."""
    anchored_floor: bool = True
    """Each re-plan hands the schedule the load measured over the last ``stabilization_s``, as
    means per forecasting step (``scheduler.schedule.schedule``'s ``measured``; single windows'
    maxima are spikes): a measured load floors the plan until a stabilization period after it
    was measured. False: only the last window's load, as a floor
    for a stabilization period from the re-plan, so every re-plan (every 15 min while the load
    runs above the forecast's band) pushed a planned scale-down an hour out again."""
    reserved_reconfigurations: int = 0
    """``scheduler.schedule.ScheduleConfig.reserved_reconfigurations``: of the daily budget, this
    many changes a day are left unplanned for re-plans when the load leaves the forecast."""
    surge_escalation_s: float = 0.0
    """A re-plan at once (the load left the band or reached the capacity) within this many
    seconds after a scale-up this decider made plans for the load measured now times its rise
    since that scale-up (at most ``SURGE_ESCALATION_MAX``): a load still rising right after a
    scale-up is met one step ahead instead of window by window (a staircase of restarts that
    also spends the daily budget). 0 = never (the default).

    Measured on the held-out tuning days only (``TUNING_DAYS``, 2 d per trace, WordCount on its
    true model, 2026-12-06), 3600 s against off, violation minutes / instance-hours / changes:
    seed 0 29.7 / 640.1 / 25 vs 38.2 / 624.3 / 25 (WC98 8.4 / 145.1 vs 15.2 / 140.5), seed 1
    57.5 / 657.4 / 29 vs 61.5 / 644.1 / 29. Fewer violation minutes for more instance-hours, the
    sum a little worse at the schedule's exchange rate (1,385 vs 1,368 minute-equivalents over
    both seeds): off by default, the instance-hours being where issue 20 misses by least."""
    budget_per_calendar_day: bool = False
    """``scheduler.schedule.ScheduleConfig.budget_per_calendar_day``: the schedule's daily budget counts per
    calendar day of the forecast's clock, not in every 24 h window (set the guard's
    ``budget_per_calendar_day`` with it).

    Off by default. Measured on the held-out tuning days only (``TUNING_DAYS``, 2 d per trace,
    WordCount on its true model, schedule and guard per calendar day, 2026-12-06; violation
    minutes / instance-hours / changes): seed 0 47.5 / 615.7 / 29 against 38.2 / 624.3 / 25,
    seed 1 70.3 / 609.0 / 33 against 61.5 / 644.1 / 29 (WC98 129.9 instance-hours against 162.0:
    the post-surge hold is gone). Fewer instance-hours for more violation minutes and ~15 % more
    changes (issue 20 asks for at most 4 a day); with ``surge_escalation_s`` 3600 as well 47.8 /
    617.9 / 33 and 66.7 / 622.1 / 33."""
    committed_scale_down: bool = False
    """A scale-down of the running configuration, once a re-plan has scheduled it, is not put
    off by later re-plans (``scheduler.schedule.schedule``'s ``keep_until``): it may come earlier
    (the load fell further), never later, until the configuration changes. Off: the running
    configuration is kept through the first run of equal levels of every re-plan, whose end
    moves with the measured floor and the forecast, so re-plans every 15 min (a load above the
    forecast's band) put the scale-down off by as much each time.

    Off by default. Measured on the held-out tuning days only (``TUNING_DAYS``, 2 d per trace,
    seed 0, WordCount on its true model, 2026-12-06; violation minutes / instance-hours /
    changes): with a perfect forecast it is what the schedule needed on WC98 (10.6 / 123.9 / 8,
    off 9.1 / 137.9 / 7; the Flink rules 9.7 / 127.0 / 6, perfect foresight at 20 s per
    instance-hour 4.7 / 124.8 / 5), but with augury's own forecasts the earlier scale-downs meet
    loads the forecast missed, and the scale-ups they force spend the daily budget: all traces
    52.8 / 642.5 / 30 against 38.2 / 624.3 / 25 off (WC98 19.5 / 165.2 / 9: four instances held
    for 18 h once the budget was spent)."""
    solver: str = "rules"
    """``scheduler.schedule.ScheduleConfig.solver``: ``rules`` (segments, greedy merges, priced
    scale-downs) or ``priced`` (the cheapest timeline over the forecast by dynamic programming:
    instance-hours at ``violation_s_per_instance_hour`` plus every change's restart violation)."""


SURGE_ESCALATION_MAX = 2.0
"""``PreemptiveConfig.surge_escalation_s``: the most a surge's rise multiplies the planned load."""


def epoch_clock(now_s: float) -> pd.Timestamp:
    """Source seconds -> UTC timestamp (naive): a live engine's clock."""
    return pd.Timestamp(float(now_s), unit="s")


def scaled_clock(origin_s: float, start: pd.Timestamp, time_scale: float) -> Callable[[float], pd.Timestamp]:
    """Source seconds -> forecast time when the source runs ``time_scale`` times faster than the
    history it forecasts (a compressed testbed replay): ``start`` at ``origin_s``."""
    start = pd.Timestamp(start)

    def clock(now_s: float) -> pd.Timestamp:
        return start + pd.Timedelta(seconds=(float(now_s) - origin_s) * time_scale)
    return clock


class PreemptiveDecider:
    """Forecast -> schedule -> apply each change when due, with the model decider as the floor.

    ``read_history()``: the rate history before the loop started (tuples/s, DatetimeIndex in
    forecast time; e.g. ``scheduler.forecasting.store_history``), None for none: the loop's
    own measurements are appended (only the last ``history_days`` of them are kept). ``clock``:
    source seconds -> forecast time. ``forecaster``: ``method -> estimator`` whose ``fit(history)``
    returns a result with ``update(history)``, ``method`` and ``forecast(steps, quantiles)``
    (``timestamps``, ``quantiles[q]``), as ``modeler.forecast.Forecaster`` (the default); an
    experiment passes one that knows the load, to separate the forecast's errors from the
    schedule's. Inspection: ``schedules_`` (every schedule built), ``forecast_methods_``,
    ``reactive_replans_``.
    """

    path = "preemptive"

    def __init__(self, config: PreemptiveConfig = PreemptiveConfig(),
                 read_history: Callable[[], pd.Series] | None = None, floor: ModelDecider | None = None,
                 clock: Callable[[float], pd.Timestamp] = epoch_clock,
                 forecaster: Callable[[str], object] | None = None) -> None:
        self.config = config
        self.forecaster = forecaster
        self.read_history = read_history
        self.floor = floor or ModelDecider()
        self.clock = clock
        self.schedules_: list = []
        self.forecast_methods_: list[str] = []
        self.reactive_replans_ = 0
        self._fitted = None
        self._band: pd.Series | None = None
        self.correction_ = 1.0
        """The factor the last re-plan scaled the forecast path by (1.0: none; ``miss_correction_s``)."""
        self._fitted_at: pd.Timestamp | None = None
        self._next_replan: pd.Timestamp | None = None
        self._quiet_until: pd.Timestamp | None = None
        self._floor: dict[str, int] | None = None
        self._measured: OrderedDict[pd.Timestamp, float] = OrderedDict()
        """Offered rate of each measured window by its start (forecast time), oldest first; the
        last ``history_days`` only."""
        self._capacity: dict[tuple, float] = {}
        self._plans: dict = {}
        self._plans_key: tuple | None = None
        self._base: pd.Series | None = None
        self._last_up: tuple[pd.Timestamp, float] | None = None
        """(when, load measured then) of the last scale-up this decider asked for."""
        self._keep_until: tuple[dict, pd.Timestamp] | None = None
        """(running configuration, issue time of its committed scale-down): ``committed_scale_down``."""
        self._grid: pd.Timedelta | None = None
        """The forecasting grid (``grid``), fixed once the given history is read."""

    def capacity(self, model: JobModel, config: Mapping[str, int], targets: Targets) -> float:
        """Input rate at which ``config``'s hottest instance reaches the utilization target."""
        key = (id(model), tuple(sorted(config.items())), targets.utilization_target)
        if key not in self._capacity:
            self._capacity[key] = predict(model, dict(config), 0.0).max_rate * targets.utilization_target
        return self._capacity[key]

    def _given(self) -> pd.Series | None:
        """The given history (read once), on the forecast grid when it is finer than it."""
        if self.read_history is None:
            return None
        if self._base is None:
            from scheduler.forecasting import _naive_utc

            base = _naive_utc(self.read_history())
            step = pd.Timedelta(seconds=self.config.forecast_step_s)
            native = pd.Timedelta(base.index.to_series().diff().median()) if len(base) > 1 else step
            if native < step:
                base = base.resample(step, origin="epoch").mean()
            self._base = base.interpolate(limit_direction="both")
            self._grid = max(step, native)
        return self._base

    def grid(self) -> pd.Timedelta:
        """The forecasting grid: ``forecast_step_s``, or the given history's own step when it is
        coarser (a 30-minute trace stays on 30 minutes; measured windows are binned onto it, so
        the series the forecaster sees is regular). Read once with the history, not per window."""
        self._given()
        return self._grid if self._grid is not None else pd.Timedelta(seconds=self.config.forecast_step_s)

    def history(self, now: pd.Timestamp) -> pd.Series:
        """The rate history on the forecast grid up to ``now``: the given history, then what was
        measured (complete grid steps only)."""
        step = self.grid()
        parts = []
        base = self._given()
        if self._measured:
            binned = self._on_grid(pd.Series(self._measured))
            binned = binned[binned.index + step <= now]
            parts.append(binned)
        if base is not None:
            first = parts[0].index[0] if parts and len(parts[0]) else now
            base = base[(base.index < first) & (base.index + step <= now)
                        & (base.index >= now - pd.Timedelta(days=self.config.history_days))]
            parts.insert(0, base)
        parts = [p for p in parts if len(p)]
        if not parts:
            return pd.Series(dtype=float)
        history = pd.concat(parts)
        return history[history.index >= now - pd.Timedelta(days=self.config.history_days)]

    def _on_grid(self, measured: pd.Series) -> pd.Series:
        """Measured windows (start -> tuples/s) as means per forecasting grid step, the steps
        aligned with the given history's (epoch-aligned without one); empty steps dropped."""
        base = self._given()
        origin = base.index[0] if base is not None and len(base) else "epoch"
        return measured.sort_index().resample(self.grid(), origin=origin).mean().dropna()

    def restart_s(self, model: JobModel, config: Mapping[str, int]) -> float:
        """A change's restart time (s) for pricing: the model's restart model when it has one
        (``modeler.restart``: base + the job's state / restore rate; every change of a job
        restores all its state, so one figure serves every change), else ``restart_s``."""
        from modeler.restart import restart_time_s

        # without a restart model restart_time_s is the default base, the configured restart_s
        some = next((op for op in model.operators if not op.is_source), None)
        if some is None:
            return float(self.config.restart_s)
        current = int(config.get(some.name, some.parallelism))
        other = {some.name: current + 1 if current < some.max_parallelism else current - 1}
        return restart_time_s(model, {some.name: current}, other, default_base_s=self.config.restart_s)

    def recent_load(self, now: pd.Timestamp) -> float:
        """The mean measured rate over the last forecasting step before ``now`` (the band is a
        forecast of grid-step means: a single short window is noisier than it)."""
        since = now - self.grid()
        values = [v for t, v in reversed(self._measured.items()) if t >= since] or \
            [next(reversed(self._measured.values()))]
        return float(sum(values) / len(values))

    def band_at(self, now: pd.Timestamp) -> float | None:
        """The upper band's forecast for the grid step holding ``now`` (None before any)."""
        band = self._band
        if band is None or not len(band):
            return None
        before = band[band.index <= now]
        return float(before.iloc[-1] if len(before) else band.iloc[0])

    def _unsafe_scale_down(self, now: pd.Timestamp, ctx: DecisionContext, target: Mapping[str, int]) -> str | None:
        """Why the scale-down to ``target`` is held (``safe_scale_down``), None when it is safe:
        the smaller configuration's capacity at the utilization target must cover the upper
        band over the next ``stabilization_s`` and the highest load measured over the last."""
        p = self.config
        span = pd.Timedelta(seconds=p.stabilization_s)
        need, why = 0.0, ""
        band = self._band
        if band is not None and len(band):
            ahead = band[(band.index > now - self.grid()) & (band.index <= now + span)]
            if len(ahead) and float(ahead.max()) > need:
                need, why = float(ahead.max()), f"the forecast's {p.band_quantile:g} band reaches"
        seen = [v for t, v in self._measured.items() if t >= now - span]
        if seen and max(seen) > need:
            need, why = max(seen), f"the load measured over the last {p.stabilization_s / 60:g} min reached"
        cap = self.capacity(ctx.model, target, ctx.targets)
        if need <= cap:
            return None
        return (f"scale-down held: {why} {need:,.0f}/s within {p.stabilization_s / 60:g} min, above the "
                f"{cap:,.0f}/s the smaller configuration takes at the utilization target")

    def _forget(self, now: pd.Timestamp) -> None:
        """Drop the measurements older than ``history_days`` before ``now``: ``history`` never
        hands them to the forecaster again, and a long run keeps its memory bounded."""
        oldest = now - pd.Timedelta(days=self.config.history_days)
        while self._measured and next(iter(self._measured)) < oldest:
            self._measured.popitem(last=False)

    def _replan(self, now: pd.Timestamp, measured: float, ctx: DecisionContext, keep_current: bool,
                missed: bool = False, recent: float = 0.0) -> None:
        import numpy as np

        from modeler.forecast import Forecaster
        from scheduler.plan import PlanConfig
        from scheduler.schedule import ScheduleConfig, schedule

        p = self.config
        history = self.history(now)
        if len(history) < 3:
            raise ValueError(f"{len(history)} steps of rate history: too few to forecast")
        if self._fitted is None or self._fitted_at is None or (now - self._fitted_at).total_seconds() >= p.refit_s:
            make = self.forecaster or (lambda method: Forecaster(method=method))
            self._fitted, self._fitted_at = make(p.method).fit(history), now
        else:
            self._fitted = self._fitted.update(history)
        steps = int(math.ceil(p.horizon_s / self.grid().total_seconds())) + 1
        quantiles = (p.quantile,) + ((p.band_quantile,) if 0 < p.band_quantile < 1 else ())
        fc = self._fitted.forecast(steps, quantiles=tuple(dict.fromkeys(quantiles)))
        stamps = pd.DatetimeIndex(fc.timestamps)
        forecast = pd.Series(np.asarray(fc.quantiles[p.quantile], float), index=stamps)
        if 0 < p.band_quantile < 1:
            self._band = pd.Series(np.asarray(fc.quantiles[p.band_quantile], float), index=stamps)
        self.correction_ = 1.0
        if missed and p.miss_correction_s > 0:
            # The forecaster missed the level (the load is above its upper band): scale the path by
            # the miss, fading over miss_correction_s, so the schedule sizes for the level now seen.
            at_now = forecast[forecast.index <= now]
            expected = float(at_now.iloc[-1]) if len(at_now) else float(forecast.iloc[0])
            ratio = float(recent) / expected if expected > 0 else 1.0
            if ratio > 1.0:
                def corrected(path: pd.Series) -> pd.Series:
                    ahead_s = np.maximum((path.index - now).total_seconds().to_numpy(), 0.0)
                    return path * (1.0 + (ratio - 1.0) * np.exp(-ahead_s / p.miss_correction_s))
                forecast = corrected(forecast)
                if self._band is not None:
                    self._band = corrected(self._band)
                self.correction_ = ratio
        forecast = forecast[forecast.index > now]
        targets = ctx.targets
        if missed and p.miss_utilization_target < targets.utilization_target:
            from dataclasses import replace as _replace

            targets = _replace(targets, utilization_target=p.miss_utilization_target)
        cfg = ScheduleConfig(lead_time_s=p.lead_time_s, stabilization_s=p.stabilization_s,
                             max_reconfigurations_per_day=p.max_reconfigurations_per_day,
                             plan=PlanConfig(targets), restart_s=self.restart_s(ctx.model, ctx.config),
                             shift_s=p.shift_s, price_running=p.price_running,
                             violation_s_per_instance_hour=p.violation_s_per_instance_hour,
                             solver=p.solver, reserved_reconfigurations=p.reserved_reconfigurations,
                             budget_per_calendar_day=p.budget_per_calendar_day)
        key = (id(ctx.model), targets)
        if key != self._plans_key:
            self._plans, self._plans_key = {}, key
        recent = [self.clock(t) for t in ctx.recent_changes_s]
        recent = [t for t in recent if t > now - pd.Timedelta(days=1)]
        seen = None
        if p.anchored_floor:
            since = now - pd.Timedelta(seconds=p.stabilization_s)
            seen = pd.Series({t: v for t, v in self._measured.items() if since <= t <= now}, dtype=float)
            if len(seen):  # means over forecasting steps, as the band is compared (recent_load)
                seen = self._on_grid(seen)
        keep_until = None
        running = dict(ctx.config)
        if p.committed_scale_down and self._keep_until is not None and self._keep_until[0] == running:
            keep_until = self._keep_until[1]
        sched = schedule(ctx.model, forecast, float(measured), cfg, now=now,
                         current_config=running if keep_current else None,
                         recent_issues=recent, plan_cache=self._plans, measured=seen, keep_until=keep_until)
        if p.committed_scale_down:
            recs = sched.reconfigurations
            if len(recs) > 1 and recs[0].direction == "keep" and recs[1].direction == "down":
                at = recs[1].issue_at if keep_until is None else min(keep_until, recs[1].issue_at)
                self._keep_until = (running, at)
            elif keep_until is None:
                self._keep_until = None
        self.schedules_.append(sched)
        self.forecast_methods_.append(self._fitted.method)
        self._schedule = sched
        self._floor = None

    def decide(self, evaluation, ctx: DecisionContext) -> Decision:
        w = evaluation.window
        if w is None:
            return no_action(self.path, ("no new settled metrics",))
        p = self.config
        now = self.clock(ctx.now_s)
        window_len = now - self.clock(w.start_s)
        measured = w.offered_rate
        self._measured[self.clock(w.start_s)] = measured
        self._forget(now)
        current = dict(ctx.config)
        scheduled = getattr(self, "_schedule", None) is not None
        quiet = self._quiet_until is not None and now < self._quiet_until
        recent = self.recent_load(now)
        band = self.band_at(now)
        missed = band is not None and recent > band
        hot = scheduled and not quiet and (
            missed or measured > p.reactive_trigger * self.capacity(ctx.model, current, ctx.targets))
        notes: list[str] = []
        planned_load = measured
        if hot and p.surge_escalation_s > 0 and self._last_up is not None:
            t_up, load_up = self._last_up
            applied = any(self.clock(t) >= t_up - window_len for t in ctx.recent_changes_s)
            if applied and 0 < load_up < measured and (now - t_up).total_seconds() <= p.surge_escalation_s:
                rise = min(measured / load_up, SURGE_ESCALATION_MAX)
                planned_load = measured * rise
                notes.append(f"surge: {measured:,.0f}/s is {rise:.2f}x the {load_up:,.0f}/s of the scale-up "
                             f"{(now - t_up).total_seconds() / 60:.0f} min ago; planned for {planned_load:,.0f}/s")
        if self._next_replan is None or now >= self._next_replan or hot:
            try:
                self._replan(now, planned_load, ctx, keep_current=scheduled, missed=missed and hot, recent=recent)
                if hot and self._next_replan is not None and now < self._next_replan:
                    self.reactive_replans_ += 1
                    self._quiet_until = now + pd.Timedelta(seconds=p.quiet_s)
                    notes.append(f"re-planned at once: the load {recent:,.0f}/s left the forecast's "
                                 f"{p.band_quantile:g} quantile band ({band:,.0f}/s)"
                                 + (f"; the forecast path scaled by {self.correction_:.2f}, fading over "
                                    f"{p.miss_correction_s / 3600:g} h" if self.correction_ > 1.0 else "")
                                 if missed else
                                 f"re-planned at once: measured {measured:,.0f}/s is past "
                                 f"{p.reactive_trigger:.0%} of the capacity in force")
                if self._next_replan is None:
                    self._next_replan = now
                while self._next_replan <= now:
                    self._next_replan += pd.Timedelta(seconds=p.replan_s)
            except Exception as err:  # noqa: BLE001 - no forecast: the model decider alone
                note = f"no schedule ({_err(err)}): the model decider alone"
                if not scheduled:
                    d = self.floor.decide(evaluation, ctx)
                    from dataclasses import replace as _replace

                    return _replace(d, reasons=tuple(d.reasons) + (note,))
                notes.append(note)
        floor = self.floor.decide(evaluation, ctx)
        if floor.kind == DecisionKind.SCALE:
            self._floor = dict(floor.config)
        sched = self._schedule
        due = [r for r in sched.reconfigurations if r.issue_at <= now + window_len]
        target = dict(due[-1].config) if due else dict(current)
        reasons = list(notes)
        if due:
            reasons.append(f"schedule ({p.quantile:g} quantile forecast): {due[-1].reason}")
        if self._floor:
            raised = {k: max(int(v), int(self._floor.get(k, v))) for k, v in target.items()}
            if raised != target:
                reasons += [f"floor from the model decider: {r}" for r in floor.reasons[:2]]
            target = raised
        target = {**current, **{k: int(v) for k, v in target.items() if k in current}}
        if p.safe_scale_down and any(target[k] < current[k] for k in target):
            held = self._unsafe_scale_down(now, ctx, target)
            if held is not None:
                target = {k: max(target[k], current[k]) for k in target}
                reasons.append(held)
        changed = tuple(k for k in target if target[k] != current[k])
        if not changed:
            return no_action(self.path, tuple(reasons) or ("the schedule keeps the configuration in force",))
        pred = predict(ctx.model, {k: v for k, v in target.items() if k in ctx.model.config}, measured)
        expected = expected_outcome(pred, ctx.targets)
        if sum(target.values()) > sum(current.values()):
            self._last_up = (now, float(measured))
        return Decision(kind=DecisionKind.SCALE, path=self.path, config=target, operators=changed,
                        diagnosis="planned", reasons=tuple(reasons) + (f"to {_fmt(target)}",), expected=expected)
