"""Pre-emptive scheduling: a timeline of configurations that are in place before the load.

Units: rates in tuples/s, times in seconds (durations ``*_s``), latency in ms.

``schedule(model, forecast, current_load, ScheduleConfig(...)) -> Schedule`` is pure: the
forecast is a ``pandas.Series`` (timestamps on a regular grid -> the forecast rate at the chosen
quantile, e.g. the 0.9 quantile path of ``modeler.forecast``), ``current_load`` the measured
input rate now (or the peak of the last stabilization period). The CLI (``augury schedule``)
fits the forecaster and calls it.

How the timeline is built (``docs/scheduler.md`` has the same with examples):

1. **Demand.** At grid step i the demand is the forecast at i (then the maximum over the next
   ``lookahead_s``, by default the lead time, in whole steps: a load arriving a little earlier
   than forecast finds the capacity in place).
2. **Scale-down only after a stabilization period.** The level at step i is the maximum demand
   over the window ``[i - stabilization, i]``: capacity follows a rise at once and a fall only
   once the load has stayed low for ``stabilization_s``. The measured load is a floor of the
   level (final recommendation = max of reactive and predictive): a load measured at t (now,
   ``current_load``, or before, ``measured``) floors the steps up to t + ``stabilization_s``, so
   the load has to stay low for a stabilization period after it was measured before anything
   may be sized below it, and a rolling re-plan does not restart that period.
3. **At most ``max_reconfigurations_per_day``** in any 24 h window (per calendar day with
   ``budget_per_calendar_day``), counted as *issued*: the
   change at now (unless ``current_config`` is given and already right), every later change at
   its issue time (a scale-up ``lead_time_s`` before its segment), and the ``recent_issues``
   made before now (e.g. by the previous schedule of a rolling re-plan). While a window has too
   many, the cheapest change in it (merging its two neighbouring segments at the *higher* of
   the two levels, costed in instance-steps) is dropped. With ``reserved_reconfigurations``
   = r, planned changes are merged until no window holds more than the budget minus r, so r
   changes a day stay free for reacting to a load the forecast missed.
4. **Configurations.** Each segment gets ``plan(model, level)`` (fewest instances meeting the
   utilization target and SLO); the model's utilization and latency rise with the rate, so the
   plan for a segment's peak holds through the whole segment. Levels are rounded up to a
   geometric grid (``rate_resolution``) so a day of forecasts needs only a few dozen plans.
5. **Lead time.** A change to a larger configuration is issued ``lead_time_s`` (restart time
   plus margin) before the segment starts, so it runs when the load arrives; a change to a
   smaller one is issued at the segment start (it takes effect ``lead_time_s`` later, while the
   larger configuration still runs). A change that would have to be issued before now is issued
   now and flagged ``late``. With ``current_config`` (the configuration running now), a first
   configuration that differs from it is issued now and takes effect ``lead_time_s`` later
   (``current_config`` is in force until then); an equal one is recorded with direction
   ``keep`` and is not a change.
6. **Priced scale-downs** (``restart_s`` > 0). A change costs SLO violation: the restart plus
   draining the backlog it built, ``restart_s x mu / (mu - lam)`` seconds (``mu`` the new
   configuration's max rate, ``lam`` the forecast load when the change runs; nothing when
   ``restart_s <= backlog_slo_s``; unbounded when ``mu <= lam``), the same charge the replays
   make (``experiments.replay``). A scale-down is kept only when the instance-hours it saves
   until the next change, times ``violation_s_per_instance_hour``, exceed what it costs, plus,
   when the next change goes back to the same configuration, what that change costs. Otherwise
   the larger configuration stays through the segment (it meets the segment's targets: it was
   planned for a higher level), which also saves a change of the daily budget.
   With ``price_running`` the running configuration is priced the same way: it is kept through
   the first segment only while scaling it down now, to that segment's plan, does not pay.
7. **Restart-aware issue times** (``restart_s`` > 0 and ``shift_s`` > 0). A change's restart
   costs less where the forecast load is lower (the backlog drains at ``mu - lam``): a scale-up
   may be issued up to ``shift_s`` earlier than its lead time, a scale-down up to ``shift_s``
   later than its segment start, at the grid time with the least restart violation plus the
   instance-hours the larger configuration is held for longer (at the exchange rate of step 6).
8. **The priced solver** (``solver = "priced"``, instead of steps 3-7). After steps 1-2 every
   grid step has its level; the configurations are the plans for the distinct levels (and the
   running one). A dynamic program over (step, configuration in force) finds the timeline of
   least cost: instance-hours x ``violation_s_per_instance_hour`` plus, per change, its restart
   violation at the forecast load when it is issued (``lead_time_s`` before it is in force),
   with every configuration that may run meeting the targets at every step's level (from a
   change's issue on, the old and the new). Merges, scale-down pricing and restart-aware issue
   times all follow from the one objective. The daily budget is kept by a price per change,
   raised until no 24 h window holds more than ``max_reconfigurations_per_day -
   reserved_reconfigurations`` (``recent_issues`` counted). O(steps x configurations) per pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from modeler.modelfile import JobModel
from modeler.queueing import CompiledModel, compile_model, predict, predict_batch
from scheduler.errors import SchedulerError
from scheduler.plan import Plan, PlanConfig, plan
from scheduler.targets import Targets

DAY_S = 86400.0
SOLVERS = ("rules", "priced")
"""``ScheduleConfig.solver`` values."""


@dataclass(frozen=True)
class ScheduleConfig:
    """How the timeline is built."""

    lead_time_s: float = 300.0
    """Seconds between issuing a scale-up and needing it (engine restart time plus a margin)."""
    stabilization_s: float = 3600.0
    """Seconds the load must stay low before a scale-down (Flink's autoscaler uses 1 h)."""
    max_reconfigurations_per_day: int = 12
    """Most configuration changes in any 24 h window (the first change at now included)."""
    reserved_reconfigurations: int = 0
    """Of the daily budget, leave this many unplanned in every 24 h window: planned changes fit
    in ``max_reconfigurations_per_day - reserved``, so a reactive change (a load the forecast
    missed) still fits the budget."""
    lookahead_s: float | None = None
    """The level at a step also covers the forecast up to this many seconds later (so a load
    that arrives a little earlier than forecast finds the capacity in place); ``None`` = the
    lead time. In whole grid steps, rounded up."""
    rate_resolution: float = 0.02
    """Levels are rounded *up* to a geometric grid with this relative step (0 = exact)."""
    plan: PlanConfig = field(default_factory=PlanConfig)
    """Targets each configuration must meet (utilization target, latency SLO)."""
    restart_s: float = 0.0
    """Engine restart time of a change, seconds, to price scale-downs (step 6); 0 = changes
    are free and every scale-down the stabilization allows is made."""
    backlog_slo_s: float = 1.0
    """A restart no longer than this many seconds costs no SLO violation (seconds)."""
    violation_s_per_instance_hour: float = 60.0
    """The exchange rate of step 6: seconds of SLO violation one instance-hour saved is worth
    (60: a minute of violation for an instance-hour)."""
    price_running: bool = False
    """Step 6 also for the change at now (with ``restart_s`` > 0): the running configuration is
    kept through the first segment only while scaling it down to that segment's plan does not
    pay (``_keep_pays``); False = kept whenever it covers the first segment (the default: see
    ``scheduler.deciders.PreemptiveConfig.price_running`` for what it was measured to do)."""
    shift_s: float = 0.0
    """Step 7 (with ``restart_s`` > 0): a scale-up may be issued up to this many seconds earlier
    than its lead time, a scale-down up to this many seconds later than its segment start
    (never past the next change), when the forecast load is lower then: the restart's backlog
    drains faster. The time with the least restart violation plus the extra instance-hours it
    holds (at ``violation_s_per_instance_hour``) is taken. 0 = changes at their default times."""
    budget_per_calendar_day: bool = False
    """Step 3 (the ``rules`` solver) counts the changes per calendar day of the forecast's
    timestamps (midnight to midnight) instead of in every 24 h window: a day whose changes are
    spent frees its budget at midnight, not 24 h after its first change (a morning's changes
    would otherwise hold the evening's configuration into the next afternoon)."""
    solver: str = "rules"
    """How the timeline is chosen: ``rules`` (steps 3-7 of the module docstring: segments of equal
    level, greedy merges, priced scale-downs) or ``priced`` (step 8: the cheapest timeline by
    dynamic programming over the grid, instance-hours at ``violation_s_per_instance_hour`` plus
    every change's restart violation at the forecast load when it is issued, under the daily
    budget)."""

    def check(self) -> None:
        for name in ("lead_time_s", "stabilization_s", "rate_resolution", "restart_s", "backlog_slo_s",
                     "violation_s_per_instance_hour", "shift_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise SchedulerError("must be a finite number >= 0", field=name, value=v)
        la = self.lookahead_s
        if la is not None and (isinstance(la, bool) or not isinstance(la, (int, float))
                               or not math.isfinite(la) or la < 0):
            raise SchedulerError("must be a finite number >= 0 or None", field="lookahead_s", value=la)
        m = self.max_reconfigurations_per_day
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise SchedulerError("must be a positive integer", field="max_reconfigurations_per_day", value=m)
        r = self.reserved_reconfigurations
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < m:
            raise SchedulerError("must be an integer >= 0 and below max_reconfigurations_per_day",
                                 field="reserved_reconfigurations", value=r)
        if self.solver not in SOLVERS:
            raise SchedulerError(f"must be one of {', '.join(SOLVERS)}", field="solver", value=self.solver)
        self.plan.check()


@dataclass(frozen=True)
class Reconfiguration:
    """One change of the timeline."""

    issue_at: pd.Timestamp
    """When to send it to the actuator."""
    effective_at: pd.Timestamp
    """When it runs (issue_at + lead time)."""
    segment_start: pd.Timestamp
    """When the load needs it (scale-up) or when the load has been low long enough (scale-down)."""
    config: Mapping[str, int]
    instances: int
    level: float
    """Input rate the configuration is planned for, tuples/s."""
    direction: str
    """up | down | initial (a change at now) | keep (first entry, equal to ``current_config``:
    not a change)."""
    late: bool
    """A scale-up that could not be issued lead_time before it was needed."""
    reason: str

    def to_dict(self) -> dict:
        return {"issue_at": self.issue_at.isoformat(), "effective_at": self.effective_at.isoformat(),
                "segment_start": self.segment_start.isoformat(), "config": dict(self.config),
                "instances": self.instances, "level": self.level, "direction": self.direction,
                "late": self.late, "reason": self.reason}


@dataclass(frozen=True)
class Schedule:
    """The timeline and, per grid step, what it provides."""

    reconfigurations: tuple[Reconfiguration, ...]
    steps: pd.DataFrame
    """Index: the forecast timestamps. Columns: ``forecast``, ``demand`` (with the reactive floor),
    ``level`` (rate planned for), ``instances`` and ``capacity`` (the highest rate at which the
    configuration in force meets the utilization target: target x max_rate) of the configuration
    *in force* at that step (by ``effective_at``), ``config`` (dict)."""
    feasible: bool
    """False when some level has no feasible plan (the configuration is then the closest one)."""
    reasons: tuple[str, ...]
    now: pd.Timestamp
    current_config: Mapping[str, int] | None = None
    """The configuration running at ``now`` (when given to ``schedule``)."""

    def config_at(self, ts: pd.Timestamp) -> dict[str, int]:
        """The configuration in force at ``ts`` (the last one whose ``effective_at <= ts``;
        before that ``current_config`` if given, else the first one)."""
        return config_in_force(self.reconfigurations, ts, self.current_config)

    def changes(self) -> tuple[Reconfiguration, ...]:
        """The reconfigurations that change something (all but a ``keep`` entry)."""
        return tuple(r for r in self.reconfigurations if r.direction != "keep")

    def per_day(self) -> int:
        """Most reconfigurations issued within any 24 h window."""
        return max_per_day([r.issue_at for r in self.changes()])

    def to_dict(self) -> dict:
        """The ``augury schedule --json`` object (without the per-step table)."""
        return {
            "now": self.now.isoformat(), "feasible": self.feasible, "reasons": list(self.reasons),
            "current_config": dict(self.current_config) if self.current_config is not None else None,
            "reconfigurations": [r.to_dict() for r in self.reconfigurations],
            "changes": len(self.changes()),
            "max_reconfigurations_in_24h": self.per_day(),
            "peak_instances": int(self.steps["instances"].max()) if len(self.steps) else 0,
            "instance_hours": float((self.steps["instances"] * self._step_s()).sum() / 3600.0),
        }

    def _step_s(self) -> float:
        if len(self.steps) < 2:
            return 0.0
        return float((self.steps.index[1] - self.steps.index[0]).total_seconds())


def config_in_force(reconfigurations, ts: pd.Timestamp,
                    before: Mapping[str, int] | None = None) -> dict[str, int]:
    """The configuration in force at ``ts`` under ``reconfigurations``: the one with the latest
    ``effective_at <= ts`` (the later issued on a tie); ``before`` (else the first one) until
    then."""
    current = dict(before) if before is not None else dict(reconfigurations[0].config)
    best = None
    for r in reconfigurations:
        if r.effective_at <= ts and (best is None or r.effective_at >= best):
            best, current = r.effective_at, dict(r.config)
    return current


def max_per_day(issue_times) -> int:
    """Most of ``issue_times`` within any 24 h window ``[t, t + 24 h)``."""
    times = np.sort(np.array([pd.Timestamp(t).value / 1e9 for t in issue_times]))
    if len(times) == 0:
        return 0
    return int(np.max(np.searchsorted(times, times + DAY_S, side="left") - np.arange(len(times))))


def _round_up(rate: float, resolution: float) -> float:
    if resolution <= 0 or rate <= 0:
        return float(rate)
    step = math.log1p(resolution)
    return float(math.exp(math.ceil(math.log(rate) / step - 1e-9) * step))


def schedule(model: JobModel | CompiledModel, forecast: pd.Series, current_load: float,
             config: ScheduleConfig = ScheduleConfig(), now: pd.Timestamp | None = None,
             current_config: Mapping[str, int] | None = None,
             recent_issues: Sequence[pd.Timestamp] = (),
             plan_cache: dict | None = None, measured: pd.Series | None = None,
             keep_until: pd.Timestamp | None = None) -> Schedule:
    """The timeline for ``forecast`` (timestamps -> rate at the planning quantile).

    ``now`` defaults to one grid step before the first forecast timestamp. ``current_config``:
    the configuration running now (``None``: unknown, the first configuration is a change
    in force from now); when it meets the targets at the first segment's level it is kept
    (no change at now). ``recent_issues``: times of reconfigurations issued before now; those
    within 24 h count against the budget. ``plan_cache``: a dict shared between calls with the
    same model and ``config.plan`` (rolling re-plans), level -> ``Plan``. ``measured``: the
    load measured before now (timestamps -> tuples/s, e.g. every metrics window of the last
    ``stabilization_s``); each value floors the level until ``stabilization_s`` after it was
    measured, not after now (step 2), so a rolling re-plan does not push a scale-down out by
    re-anchoring the floor at every call. ``None``: ``current_load`` alone, measured now.
    ``keep_until``: when the running configuration is kept through the first segment, keep it
    no later than this (a scale-down an earlier re-plan committed to): the steps after it get
    their own plans. Without it the kept segment ends where the first run of equal levels ends,
    which moves with every re-plan as the measured floor and the forecast change, so a rolling
    re-plan could push a scale-down out again and again. ``None``: no such bound.
    """
    config.check()
    compiled = model if isinstance(model, CompiledModel) else compile_model(model)
    variable_ops = [n for n in compiled.names if not compiled.model.operator(n).is_source]
    if not isinstance(forecast, pd.Series) or len(forecast) < 1:
        raise SchedulerError("the forecast must be a non-empty pandas Series", field="forecast")
    if not isinstance(forecast.index, pd.DatetimeIndex) or not forecast.index.is_monotonic_increasing:
        raise SchedulerError("the forecast must be indexed by increasing timestamps", field="forecast.index")
    values = forecast.to_numpy(dtype=float)
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise SchedulerError("forecast rates must be finite and >= 0", field="forecast")
    if isinstance(current_load, bool) or not isinstance(current_load, (int, float, np.number)) \
            or not math.isfinite(current_load) or current_load < 0:
        raise SchedulerError("must be a finite number >= 0", field="current_load", value=current_load)
    if current_config is not None:
        current_config = {n: int(current_config.get(n, compiled.model.operator(n).parallelism))
                          for n in compiled.names}
    idx = forecast.index
    step_s = float((idx[1] - idx[0]).total_seconds()) if len(idx) > 1 else max(config.lead_time_s, 60.0)
    now = pd.Timestamp(now) if now is not None else idx[0] - pd.Timedelta(seconds=step_s)
    t_s = (idx - now).total_seconds().to_numpy()
    recent = np.array([(pd.Timestamp(t) - now).total_seconds() for t in recent_issues], dtype=float)
    recent = recent[(recent > -DAY_S) & (recent <= 0)]
    lead_s = config.lead_time_s

    # 1-2. Demand with the reactive floor; level = max over the stabilization window.
    floor_rate = _measured_floor(idx, now, current_load, measured, config.stabilization_s)
    demand = np.maximum(values, floor_rate)
    win = int(math.ceil(config.stabilization_s / step_s)) if step_s > 0 else 0
    ahead_s = config.lead_time_s if config.lookahead_s is None else config.lookahead_s
    fwd = int(math.ceil(ahead_s / step_s - 1e-9)) if step_s > 0 else 0
    # The floor is applied to the level, not fed through the stabilization window again: a
    # measured load holds for one stabilization period from when it was measured (a floor pushed
    # through the rolling max would hold for two, and a re-plan every hour or two would never
    # scale down).
    ahead = pd.Series(values[::-1]).rolling(fwd + 1, min_periods=1).max().to_numpy()[::-1]
    level = pd.Series(ahead).rolling(win + 1, min_periods=1).max().to_numpy()
    level = np.maximum(level, floor_rate)
    level = np.array([_round_up(x, config.rate_resolution) for x in level])

    # Plans per distinct level (cached).
    cache: dict[float, Plan] = plan_cache if plan_cache is not None else {}

    def plan_for(rate: float) -> Plan:
        if rate not in cache:
            cache[rate] = plan(compiled, rate, config.plan)
        return cache[rate]

    # Segments: runs of equal level.
    starts = [0] + [i for i in range(1, len(level)) if level[i] != level[i - 1]]
    seg = [(s, e, float(level[s:e].max())) for s, e in zip(starts, starts[1:] + [len(level)])]

    def issue_s(n: int) -> float:
        """Issue time (s after now) of the change into segment n >= 1."""
        s = seg[n][0]
        if seg[n][2] > seg[n - 1][2]:
            return max(t_s[s] - lead_s, 0.0)
        return float(t_s[s])

    # A committed scale-down (``keep_until``): the running configuration is kept no later than
    # then; the rest of the first run of equal levels gets its own plan, counted in the budget.
    # Only a scale-down is committed: a plan of as many instances as the running configuration
    # is no reason for a restart.
    committed_now = False
    if keep_until is not None and current_config is not None and config.solver != "priced":
        cut = int(np.searchsorted(idx, pd.Timestamp(keep_until), side="left"))
        s0, e0, l0 = seg[0]
        running = sum(current_config[n] for n in variable_ops)
        if plan_for(l0).instances < running:
            if s0 < cut < e0:
                seg[0:1] = [(s0, cut, l0), (cut, e0, l0)]
            elif cut <= s0:
                committed_now = True

    covers_cache: dict[float, bool] = {}

    def current_covers(rate: float) -> bool:
        """The running configuration meets the utilization target (and SLO) at ``rate`` and may
        be kept (not past a committed scale-down)."""
        if current_config is None or committed_now:
            return False
        if rate not in covers_cache:
            covers_cache[rate] = meets_targets(compiled, current_config, rate, config.plan)
        return covers_cache[rate]

    if config.solver == "priced":
        recs, reasons, feasible = _priced_timeline(
            compiled, idx, t_s, values, demand, level, current_load, current_config, recent, now, plan_for, config)
        return _finish(compiled, recs, reasons, feasible, now, current_config, recent, idx, values, demand,
                       level, config)

    def initial_is_change() -> bool:
        return not current_covers(seg[0][2]) and (
            current_config is None or dict(plan_for(seg[0][2]).config) != current_config)

    # 3. At most K changes issued in any 24 h window: merge the cheapest change away.
    def cost(s: int, e: int, lv: float) -> float:
        p = plan_for(lv)
        if s == 0 and current_covers(lv):  # the first segment keeps the running configuration
            return sum(current_config[n] for n in p.variable) * (e - s)
        return p.instances * (e - s)

    K = config.max_reconfigurations_per_day
    planned_limit = K - config.reserved_reconfigurations
    now_epoch_s = (now - pd.Timestamp(0, tz=now.tz)).total_seconds()  # calendar days of the forecast's clock
    while len(seg) > 1:
        changes = np.array([issue_s(n) for n in range(1, len(seg))])
        fixed = list(recent) + ([0.0] if initial_is_change() else [])
        events = np.concatenate([np.asarray(fixed, dtype=float), changes])
        movable = np.concatenate([np.zeros(len(fixed), bool), np.ones(len(changes), bool)])
        if config.budget_per_calendar_day:
            day = np.floor((now_epoch_s + events) / DAY_S)
            same = [day == d for d in day]
        else:
            same = [(events >= t) & (events < t + DAY_S) for t in events]
        counts = np.array([np.sum(m) for m in same])
        if counts.max() <= planned_limit:
            break
        crowded = set()
        for m, c in zip(same, counts):
            if c > planned_limit:
                crowded.update((np.nonzero(m & movable)[0] - len(fixed)).tolist())
        if not crowded:
            break  # only the fixed changes (before now, and the one at now) are over the limit
        best, best_cost = None, math.inf
        for c in sorted(crowded):
            (s1, e1, l1), (s2, e2, l2) = seg[c], seg[c + 1]
            lv = max(l1, l2)
            extra = cost(s1, e2, lv) - cost(s1, e1, l1) - cost(s2, e2, l2)
            if extra < best_cost:
                best, best_cost = c, extra
        (s1, _, l1), (_, e2, l2) = seg[best], seg[best + 1]
        seg[best: best + 2] = [(s1, e2, max(l1, l2))]
    # The configuration of each segment: the running one for the first when it covers it (and,
    # with priced changes, when scaling down to the plan for the first segment does not pay).
    keep = current_covers(seg[0][2])
    priced_now = None
    if keep and config.restart_s > 0 and config.price_running:
        keep, priced_now = _keep_pays(compiled, seg, plan_for, current_config, current_load, t_s, lead_s, config)

    def config_of(n: int, lv: float) -> dict[str, int]:
        return dict(current_config) if (n == 0 and keep) else dict(plan_for(lv).config)

    seg, merged_cfg = _merge_equal(seg, [config_of(n, lv) for n, (_, _, lv) in enumerate(seg)])
    cap_of = {}

    def capacity(c: dict[str, int]) -> float:
        key = tuple(sorted(c.items()))
        if key not in cap_of:
            cap_of[key] = predict(compiled, c, 1.0).max_rate
        return cap_of[key]

    # 6. Priced scale-downs.
    priced: list[str] = []
    if config.restart_s > 0:
        seg, merged_cfg, priced = _price_scale_downs(compiled, seg, merged_cfg, values, idx, config,
                                                     capacity, lead_s)

    # 5. Timeline with lead times (7: restart-aware issue times).
    lead = pd.Timedelta(seconds=lead_s)
    shift_steps = int(config.shift_s // step_s) if config.restart_s > 0 and step_s > 0 else 0
    grid = pd.Timedelta(seconds=step_s)
    recs: list[Reconfiguration] = []
    reasons: list[str] = []
    feasible = True
    for n, (s, e, lv) in enumerate(seg):
        p = plan_for(lv)
        cfg_n = merged_cfg[n]
        kept = n == 0 and keep
        if not kept and not p.feasible:
            feasible = False
            reasons.append(f"no feasible configuration for {lv:,.1f} tuples/s ({idx[s]}): " + "; ".join(p.reasons))
        start = idx[s]
        if n == 0:
            issue, late = now, False
            why = (f"sized for {lv:,.1f} tuples/s (max of the measured load "
                   f"{current_load:,.1f} and the forecast until {idx[e - 1]})")
            if current_config is None:
                direction, effective = "initial", now
                why = "in force from now: " + why
            elif kept or cfg_n == current_config:
                direction, effective = "keep", now
                why = "the running configuration meets the targets: " + why
            else:
                direction, effective = "initial", now + lead
                why = "change now: " + why
        else:
            direction = "up" if capacity(cfg_n) > capacity(merged_cfg[n - 1]) else "down"
            earliest = max(now, recs[-1].effective_at)  # never before the previous change is in place
            if direction == "up":
                issue = start - lead
                late = issue < now
                issue = max(issue, now)
                peak_i = s + int(np.argmax(demand[s:e]))
                why = f"forecast rises to {demand[peak_i]:,.1f} tuples/s at {idx[peak_i]}"
                if shift_steps and not late:
                    issue, note = _cheapest_issue(issue, -shift_steps, grid, earliest, issue, cfg_n,
                                                  merged_cfg[n - 1], forecast, capacity, config, variable_ops)
                    why += note
            else:
                issue, late = start, False
                why = (f"forecast stayed at or below {lv:,.1f} tuples/s for "
                       f"{config.stabilization_s / 60:g} min")
                if shift_steps:
                    nxt = idx[seg[n + 1][0]] - lead if n + 1 < len(seg) else idx[-1]
                    issue, note = _cheapest_issue(issue, shift_steps, grid, issue, nxt - lead, cfg_n,
                                                  merged_cfg[n - 1], forecast, capacity, config, variable_ops)
                    why += note
            effective = issue + lead
        recs.append(Reconfiguration(issue_at=issue, effective_at=effective,
                                    segment_start=start, config=cfg_n,
                                    instances=sum(cfg_n[k] for k in variable_ops),
                                    level=lv, direction=direction, late=late, reason=why))
    reasons.extend(priced)
    if priced_now:
        reasons.append(priced_now)
    return _finish(compiled, recs, reasons, feasible, now, current_config, recent, idx, values, demand, level,
                   config)


def _finish(compiled: CompiledModel, recs: list, reasons: list, feasible: bool, now: pd.Timestamp,
            current_config, recent: np.ndarray, idx: pd.DatetimeIndex, values: np.ndarray, demand: np.ndarray,
            level: np.ndarray, config: ScheduleConfig) -> Schedule:
    """The ``Schedule`` of ``recs``: the budget check and the per-step table."""
    K = config.max_reconfigurations_per_day
    fixed = [now + pd.Timedelta(seconds=float(x)) for x in recent]
    over = max_per_day(fixed + [r.issue_at for r in recs if r.direction != "keep"])
    if over > K:
        reasons.append(f"{over} reconfigurations within 24 h (including {len(fixed)} issued before "
                       f"now) exceed the budget of {K}: the change at now cannot be avoided")
    sched = Schedule(reconfigurations=tuple(recs), steps=pd.DataFrame(), feasible=feasible,
                     reasons=tuple(reasons), now=now, current_config=current_config)
    rows = [sched.config_at(ts) for ts in idx]
    P = compiled.config_array(rows)
    cap = predict_batch(compiled, P, 1.0).max_rate * config.plan.utilization_target
    variable = [n for n in compiled.names if not compiled.model.operator(n).is_source]
    steps = pd.DataFrame({
        "forecast": values, "demand": demand, "level": level,
        "instances": [sum(r[n] for n in variable) for r in rows], "capacity": cap, "config": rows,
    }, index=idx)
    return Schedule(reconfigurations=tuple(recs), steps=steps, feasible=feasible, reasons=tuple(reasons),
                    now=now, current_config=current_config)


def meets_targets(compiled: CompiledModel, config: Mapping[str, int], rate: float, targets: PlanConfig) -> bool:
    """``config`` meets ``targets`` at ``rate`` tuples/s: not saturated, every instance at or below
    the utilization target, and the latency statistic within the SLO when one is set."""
    pr = predict(compiled, dict(config), rate)
    ok = not pr.saturated and max(
        (o.max_utilization for o in pr.operators.values()), default=0.0
    ) <= targets.utilization_target * (1 + 1e-9)
    if ok and targets.latency_slo_ms is not None:
        value = pr.latency_ms.get(targets.latency_stat)
        ok = value is not None and value <= targets.latency_slo_ms
    return bool(ok)


def _priced_timeline(compiled: CompiledModel, idx: pd.DatetimeIndex, t_s: np.ndarray, values: np.ndarray,
                     demand: np.ndarray, level: np.ndarray, current_load: float,
                     current: Mapping[str, int] | None, recent: np.ndarray, now: pd.Timestamp, plan_for,
                     config: ScheduleConfig) -> tuple[list, list[str], bool]:
    """Step 8 of the module docstring: the cheapest timeline, by dynamic programming.

    State: the configuration in force at each grid step, among the plans for the distinct levels
    (and the running configuration). It must meet the targets at the step's level (lookahead,
    stabilization and the measured-load floor included, as for the rules); steps before
    ``now + lead_time_s`` keep the running configuration (nothing issued now is in force
    earlier). Cost: instance-hours x ``violation_s_per_instance_hour``, plus per change
    ``restart_violation_s`` of the new configuration at the forecast load when it is issued
    (``lead_time_s`` before it is in force; the restart runs then, so from its issue on either
    configuration may be running and both must meet the levels), plus ``lam``, a price per
    change raised (doubling, then bisection) until no 24 h window holds more than the budget
    (``max_reconfigurations_per_day - reserved_reconfigurations``, counting ``recent``).
    Because the restart charge depends only on the new configuration and the time, the best
    predecessor of a change is the cheapest other state, so one pass is O(steps x states).

    Returns the reconfigurations (as ``schedule`` records them), the reasons and feasibility."""
    variable = [n for n in compiled.names if not compiled.model.operator(n).is_source]
    n_steps = len(idx)
    step_s = float((idx[1] - idx[0]).total_seconds()) if n_steps > 1 else max(config.lead_time_s, 60.0)
    lead_s = config.lead_time_s
    levels = np.unique(level)
    req = np.searchsorted(levels, level)

    # Candidates: one per distinct plan (the highest level it was planned for), plus the running one.
    keys: dict[tuple, int] = {}
    cands: list[dict[str, int]] = []
    known: list[int] = []  # highest level index each candidate is known to meet (-1: none yet)
    for k, lv in enumerate(levels):
        c = dict(plan_for(float(lv)).config)
        key = tuple(sorted(c.items()))
        if key in keys:
            known[keys[key]] = k
        else:
            keys[key], known = len(cands), known + [k]
            cands.append(c)
    cur = None
    if current is not None:
        key = tuple(sorted((n, int(v)) for n, v in current.items()))
        if key not in keys:
            keys[key], known = len(cands), known + [-1]
            cands.append(dict(current))
        cur = keys[key]
    meets_cache: dict[tuple, bool] = {}

    def meets(b: int, j: int) -> bool:
        key = (b, j)
        if key not in meets_cache:
            meets_cache[key] = meets_targets(compiled, cands[b], float(levels[j]), config.plan)
        return meets_cache[key]

    cover = np.empty(len(cands), dtype=int)  # highest level index met (monotone in the rate)
    for b in range(len(cands)):
        lo, hi = known[b], len(levels)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if meets(b, mid) else (lo, mid)
        cover[b] = lo
    inst = np.array([sum(int(c[n]) for n in variable) for c in cands], dtype=float)
    mu = np.array([predict(compiled, c, 1.0).max_rate for c in cands])

    forced = (t_s < lead_s - 1e-9) if cur is not None else np.zeros(n_steps, bool)
    allowed = cover[None, :] >= req[:, None]
    if cur is not None:
        allowed[forced, :] = False
        allowed[forced, cur] = True
    can_change = ~forced
    issue_s = t_s - lead_s
    at = np.searchsorted(t_s, issue_s + 1e-9, side="right") - 1
    # Between issue and in force either configuration may run (the engine restarts as soon as
    # the change is issued): a change in force at i must also meet the levels from its issue on.
    before = np.array([int(req[max(a, 0):i].max()) if a < i and i > 0 else -1 for i, a in enumerate(at)])
    switch_ok = cover[None, :] >= before[:, None]
    issue_load = np.where(at >= 0, values[np.clip(at, 0, None)], current_load)
    restart = np.array([[restart_violation_s(config.restart_s, m, float(x), config.backlog_slo_s)
                         for m in mu] for x in issue_load])
    restart = np.minimum(restart, 1e12)  # a change into a saturated restart: possible, at a huge price
    # per step held; the 1e-9 breaks ties towards fewer instances at an exchange rate of 0
    hold = inst * (step_s / 3600.0) * config.violation_s_per_instance_hour + 1e-9 * inst
    M = len(cands)
    arange = np.arange(M)
    limit = config.max_reconfigurations_per_day - config.reserved_reconfigurations

    def solve(lam: float) -> np.ndarray:
        back = np.empty((n_steps, M), dtype=int)
        if cur is None:
            cost = np.where(allowed[0], hold, np.inf)
            back[0] = arange
        else:
            stay = np.full(M, np.inf)
            stay[cur] = 0.0
            back[0] = cur
            if can_change[0]:
                switch = np.where(switch_ok[0], restart[0] + lam, np.inf)
                switch[cur] = np.inf
                stay = np.minimum(stay, switch)
            cost = np.where(allowed[0], stay + hold, np.inf)
        for i in range(1, n_steps):
            new, pred = cost, arange
            if can_change[i]:
                order = np.argsort(cost, kind="stable")
                best = np.full(M, order[0])
                if M > 1:
                    best[order[0]] = order[1]
                switch = np.where(switch_ok[i], cost[best] + restart[i] + lam, np.inf)
                take = switch < cost
                new, pred = np.where(take, switch, cost), np.where(take, best, arange)
            cost = np.where(allowed[i], new + hold, np.inf)
            back[i] = pred
        path = np.empty(n_steps, dtype=int)
        path[-1] = int(np.argmin(cost))
        for i in range(n_steps - 1, 0, -1):
            path[i - 1] = back[i, path[i]]
        return path

    def changes_of(path: np.ndarray) -> list[int]:
        """Steps at which a change is in force (with no running configuration, the first step's
        configuration is the initial one, not a change)."""
        out, prev = [], cur
        for i in range(n_steps):
            if prev is not None and path[i] != prev:
                out.append(i)
            prev = path[i]
        return out

    def within_budget(path: np.ndarray) -> bool:
        planned = np.array([issue_s[i] for i in changes_of(path)], dtype=float)
        if len(planned) == 0:
            return True
        fixed = np.concatenate([np.asarray(recent, float), [0.0] if cur is None else []])  # + the initial
        events = np.sort(np.concatenate([fixed, planned]))
        for t in events:
            inside = (events >= t - 1e-9) & (events < t + DAY_S)
            window = (planned >= t - 1e-9) & (planned < t + DAY_S)
            if inside.sum() > limit and window.any():
                return False
        return True

    lam = 0.0
    path = solve(lam)
    if not within_budget(path):
        lo, hi = 0.0, max(config.restart_s, 1.0) * 2
        while True:
            path = solve(hi)
            if within_budget(path) or hi > 1e9:
                break
            lo, hi = hi, hi * 2
        for _ in range(10):
            mid = 0.5 * (lo + hi)
            p_mid = solve(mid)
            if within_budget(p_mid):
                hi, path = mid, p_mid
            else:
                lo = mid
        lam = hi

    # Records: a change in force at step i is issued lead_time_s before it.
    reasons: list[str] = []
    feasible = True
    for j in sorted(set(req.tolist())):
        p = plan_for(float(levels[j]))
        if not p.feasible:
            feasible = False
            first = int(np.argmax(req == j))
            reasons.append(f"no feasible configuration for {levels[j]:,.1f} tuples/s ({idx[first]}): "
                           + "; ".join(p.reasons))
    lead = pd.Timedelta(seconds=lead_s)
    starts = changes_of(path)
    recs: list[Reconfiguration] = []
    late_first = cur is not None and bool(np.any(forced & (cover[cur] < req)))
    if cur is not None:
        recs.append(Reconfiguration(
            issue_at=now, effective_at=now, segment_start=now, config=dict(current), instances=int(inst[cur]),
            level=float(levels[cover[cur]]) if cover[cur] >= 0 else 0.0, direction="keep", late=False,
            reason=f"the running configuration stays in force until {idx[starts[0]] if starts else idx[-1]}"
                   + (" although it misses the targets before a change can be in place" if late_first else "")))
    else:
        e = starts[0] if starts else n_steps
        recs.append(Reconfiguration(
            issue_at=now, effective_at=now, segment_start=now, config=cands[path[0]], instances=int(inst[path[0]]),
            level=float(level[:e].max()), direction="initial", late=False,
            reason=f"in force from now: sized for {level[:e].max():,.1f} tuples/s (max of the measured load "
                   f"{current_load:,.1f} and the forecast until {idx[e - 1]})"))
    ends = starts[1:] + [n_steps]
    for k, (s, e) in enumerate(zip(starts, ends)):
        b = int(path[s])
        a = int(path[s - 1]) if s > 0 else cur
        seg_level = float(level[s:e].max())
        issue = idx[s] - lead
        load = float(issue_load[s])
        charge = float(restart[s, b])
        if mu[b] > mu[a]:
            direction = "up"
            peak_i = s + int(np.argmax(demand[s:e]))
            why = (f"priced schedule: the forecast rises to {demand[peak_i]:,.1f} tuples/s at {idx[peak_i]}; "
                   f"issued at a forecast load of {load:,.1f} tuples/s, its restart costs {charge:,.0f} s")
        else:
            direction = "down"
            hours = (e - s) * step_s / 3600.0
            saved = inst[a] - inst[b]
            why = (f"priced schedule: {saved:g} instance(s) fewer for {hours:.1f} h are worth "
                   f"{saved * hours * config.violation_s_per_instance_hour:,.0f} s of violation at "
                   f"{config.violation_s_per_instance_hour:g} s per instance-hour; its restart costs "
                   f"{charge:,.0f} s at a forecast load of {load:,.1f} tuples/s")
        recs.append(Reconfiguration(
            issue_at=issue, effective_at=issue + lead, segment_start=idx[s], config=dict(cands[b]),
            instances=int(inst[b]), level=seg_level, direction=direction,
            late=bool(k == 0 and late_first), reason=why))
    if lam > 0:
        reasons.append(f"priced schedule: every change also charged {lam:,.0f} s to keep within "
                       f"{limit} changes in any 24 h")
    return recs, reasons, feasible


def _measured_floor(idx: pd.DatetimeIndex, now: pd.Timestamp, current_load: float, measured: pd.Series | None,
                    stabilization_s: float) -> np.ndarray:
    """Step 2's reactive floor per grid step (tuples/s, 0 = none): the highest load measured within
    ``stabilization_s`` before the step, among ``measured`` (before now) and ``current_load`` (now).
    A step more than ``stabilization_s`` after every measurement has no floor."""
    stab = pd.Timedelta(seconds=stabilization_s)
    times = [now]
    rates = [float(current_load)]
    if measured is not None and len(measured):
        m = measured[(measured.index <= now) & (measured.index >= now - stab)]
        if len(m) and (not np.all(np.isfinite(m.to_numpy(dtype=float))) or np.any(m.to_numpy(dtype=float) < 0)):
            raise SchedulerError("measured rates must be finite and >= 0", field="measured")
        times = list(m.index) + times
        rates = [float(v) for v in m.to_numpy(dtype=float)] + rates
    order = np.argsort(np.asarray(times, dtype="datetime64[ns]"), kind="stable")
    t = np.asarray(times, dtype="datetime64[ns]")[order]
    r = np.asarray(rates, dtype=float)[order]
    suffix = np.maximum.accumulate(r[::-1])[::-1]  # max of the measurements from k on
    first = np.searchsorted(t, (idx - stab).to_numpy(dtype="datetime64[ns]"), side="left")
    out = np.zeros(len(idx))
    inside = first < len(t)
    out[inside] = suffix[first[inside]]
    return out


def restart_violation_s(restart_s: float, capacity: float, load: float, backlog_slo_s: float = 1.0) -> float:
    """Seconds of SLO violation a restart of ``restart_s`` costs with the new configuration's max
    rate ``capacity`` at the input rate ``load`` (tuples/s): none within the backlog SLO, else
    the restart plus draining its backlog at the spare capacity, ``restart_s x mu / (mu - lam)``
    (infinite when ``mu <= lam``)."""
    if restart_s <= backlog_slo_s:
        return 0.0
    if capacity <= load:
        return math.inf
    return restart_s * capacity / (capacity - load)


def _keep_pays(compiled: CompiledModel, seg: list, plan_for, current: Mapping[str, int], load: float,
               t_s: np.ndarray, lead_s: float, config: ScheduleConfig) -> tuple[bool, str | None]:
    """Step 6 for the change at now: (keep the running configuration, why not). The running
    configuration covers the first segment, but when the plan for that segment's level has
    fewer instances, scaling down now saves ``instances x hours`` from now + lead time to the
    segment's end, worth ``violation_s_per_instance_hour`` each, against the restart at the
    load now (``restart_violation_s`` on the smaller configuration) plus, when the next
    segment needs more than the smaller configuration but no more than the running one (kept,
    it would need no change there), the scale-up's restart too (at the next level). Kept unless
    the saving is larger. Without this, a configuration sized for a peak stayed until the first
    segment ended, however long the load stayed far below it."""
    variable = [n for n in compiled.names if not compiled.model.operator(n).is_source]

    def instances(c: Mapping[str, int]) -> int:
        return sum(int(c[n]) for n in variable)

    smaller = plan_for(seg[0][2])
    if not smaller.feasible:
        return True, None
    small_cfg = dict(smaller.config)
    saved = instances(current) - instances(small_cfg)
    hours = max(float(t_s[seg[0][1] - 1]) - lead_s, 0.0) / 3600.0  # to the segment's last step
    if saved <= 0 or hours <= 0:
        return True, None
    cost = restart_violation_s(config.restart_s, predict(compiled, small_cfg, 1.0).max_rate, load,
                               config.backlog_slo_s)
    if len(seg) > 1:
        # a next segment that needs more than the smaller configuration but no more than the
        # running one: kept, it would need no change there; scaled down, a scale-up back
        nxt = dict(plan_for(seg[1][2]).config)
        if instances(small_cfg) < instances(nxt) <= instances(current):
            cost += restart_violation_s(config.restart_s, predict(compiled, nxt, 1.0).max_rate, seg[1][2],
                                        config.backlog_slo_s)
    worth = saved * hours * config.violation_s_per_instance_hour
    if worth <= cost:
        return True, None
    return False, (f"scale-down now priced: {saved} instance(s) fewer for {hours:.1f} h are worth "
                   f"{worth:,.0f} s of violation at {config.violation_s_per_instance_hour:g} s per "
                   f"instance-hour, more than the {cost:,.0f} s its restart(s) cost")


def _price_scale_downs(compiled: CompiledModel, seg: list, cfgs: list, values: np.ndarray, idx: pd.DatetimeIndex,
                       config: ScheduleConfig, capacity, lead_s: float) -> tuple[list, list, list[str]]:
    """Step 6 of the module docstring: drop the scale-downs whose savings do not pay for their
    restarts. Returns the segments, their configurations and one reason per dropped change."""
    variable = [n for n in compiled.names if not compiled.model.operator(n).is_source]
    step_s = float((idx[1] - idx[0]).total_seconds()) if len(idx) > 1 else 0.0
    lead_steps = int(math.ceil(lead_s / step_s - 1e-9)) if step_s > 0 else 0

    def instances(c: Mapping[str, int]) -> int:
        return sum(int(c[n]) for n in variable)

    def cost(c: Mapping[str, int], at: int) -> float:
        return restart_violation_s(config.restart_s, capacity(dict(c)), float(values[min(at, len(values) - 1)]),
                                   config.backlog_slo_s)

    reasons: list[str] = []
    changed = True
    while changed:
        changed = False
        for n in range(1, len(seg)):
            before, here = cfgs[n - 1], cfgs[n]
            if capacity(here) >= capacity(before):
                continue
            s, e, _ = seg[n]
            hours = (e - s) * step_s / 3600.0
            saved_s = (instances(before) - instances(here)) * hours * config.violation_s_per_instance_hour
            paid = cost(here, s)
            if n + 1 < len(seg) and cfgs[n + 1] == before:  # the way back up disappears too
                paid += cost(before, max(seg[n + 1][0] - lead_steps, s))
            if saved_s >= paid:
                continue
            reasons.append(f"no scale-down to {instances(here)} instances at {idx[s]}: it saves "
                           f"{(instances(before) - instances(here)) * hours:.1f} instance-hours, worth "
                           f"{saved_s:.0f} s of violation at {config.violation_s_per_instance_hour:g} s per "
                           f"instance-hour, less than its restarts cost ({paid:.0f} s)")
            cfgs[n] = dict(before)
            changed = True
            break
        if changed:
            seg, cfgs = _merge_equal(seg, cfgs)
    return seg, cfgs, reasons


def _cheapest_issue(default: pd.Timestamp, steps: int, step: pd.Timedelta, lo: pd.Timestamp, hi: pd.Timestamp,
                    new: dict, old: dict, forecast: pd.Series, capacity, config: ScheduleConfig,
                    variable) -> tuple[pd.Timestamp, str]:
    """Step 7: the issue time within ``steps`` grid steps of ``default`` (negative: earlier, a
    scale-up; positive: later, a scale-down), inside ``[lo, hi]``, with the least restart
    violation (``restart_violation_s`` at the forecast load then) plus the instance-hours the
    larger configuration is held for longer, at the exchange rate. Returns it and a note for
    the reason when it moved. ``step``: the forecast's grid step (> 0)."""
    extra = abs(sum(int(new[n]) for n in variable) - sum(int(old[n]) for n in variable))
    mu = capacity(new)

    def load_at(ts: pd.Timestamp) -> float:
        i = int(np.searchsorted(forecast.index, ts, side="right")) - 1
        return float(forecast.iloc[min(max(i, 0), len(forecast) - 1)])

    def cost(ts: pd.Timestamp) -> float:
        held_h = abs((ts - default).total_seconds()) / 3600.0
        return (restart_violation_s(config.restart_s, mu, load_at(ts), config.backlog_slo_s)
                + extra * held_h * config.violation_s_per_instance_hour)

    best, best_cost = default, cost(default)
    for k in range(1, abs(steps) + 1):
        ts = default + step * (k if steps > 0 else -k)
        if ts < lo or ts > hi:
            break
        c = cost(ts)
        if c < best_cost - 1e-9:
            best, best_cost = ts, c
    if best == default:
        return default, ""
    return best, (f"; issued at {best} ({'earlier' if best < default else 'later'} than {default}): the "
                  f"forecast load {load_at(best):,.1f} tuples/s then makes its restart cost "
                  f"{restart_violation_s(config.restart_s, mu, load_at(best), config.backlog_slo_s):.0f} s, "
                  f"{restart_violation_s(config.restart_s, mu, load_at(default), config.backlog_slo_s):.0f} s at "
                  f"{default}")


def _merge_equal(seg: list, cfgs: list) -> tuple[list, list]:
    """Neighbouring segments with the same configuration are one segment (at the higher level)."""
    merged_seg: list[tuple[int, int, float]] = []
    merged_cfgs: list[dict[str, int]] = []
    for (s, e, lv), c in zip(seg, cfgs):
        if merged_cfgs and merged_cfgs[-1] == c:
            ps, _, pl = merged_seg[-1]
            merged_seg[-1] = (ps, e, max(pl, lv))
        else:
            merged_seg.append((s, e, lv))
            merged_cfgs.append(dict(c))
    return merged_seg, merged_cfgs


def replay(model: JobModel | CompiledModel, sched: Schedule, actual: pd.Series,
           utilization_target: float | None = None) -> pd.DataFrame:
    """The timeline's configurations against the *actual* load: per timestamp of ``actual``, the
    configuration in force, the hottest instance's utilization, and ``violation`` (above the
    utilization target, or saturated)."""
    return replay_timeline(model, sched.reconfigurations, actual, utilization_target,
                           before=sched.current_config)


def replay_timeline(model: JobModel | CompiledModel, reconfigurations, actual: pd.Series,
                    utilization_target: float | None = None,
                    before: Mapping[str, int] | None = None,
                    interval_s: float = 0.0) -> pd.DataFrame:
    """Any list of reconfigurations (e.g. stitched from rolling re-plans) against the actual
    load: per timestamp of ``actual`` (``NaN`` rates are dropped) the configuration in force
    (latest ``effective_at <= ts``; ``before``, else the first, until then), ``instances`` (over
    the non-source operators), ``max_utilization``, ``saturated`` and ``violation`` (above the
    utilization target, default ``Targets().utilization_target``, or saturated).

    ``interval_s`` > 0: each timestamp stands for the interval ``[ts, ts + interval_s)`` at that
    rate, and every configuration in force at some moment of it is checked; the row reports the
    worst (highest utilization) of them, so a change that lands mid-interval is charged with
    whichever side is worse."""
    compiled = model if isinstance(model, CompiledModel) else compile_model(model)
    target = utilization_target if utilization_target is not None else Targets().utilization_target
    actual = actual.dropna()
    recs = sorted(enumerate(reconfigurations), key=lambda x: (x[1].effective_at, x[0]))
    configs = [dict(before) if before is not None else dict(reconfigurations[0].config)]
    configs += [dict(r.config) for _, r in recs]
    eff = np.array([r.effective_at.value for _, r in recs], dtype=np.int64)
    ts = actual.index.asi8
    k0 = np.searchsorted(eff, ts, side="right")  # index into configs: in force at ts
    k1 = np.searchsorted(eff, ts + int(round(interval_s * 1e9)), side="left") if interval_s > 0 else k0
    k1 = np.maximum(k1, k0)
    rates = actual.to_numpy(dtype=float)
    variable = [i for i, n in enumerate(compiled.names) if not compiled.model.operator(n).is_source]
    best_k = k0.copy()
    best_u = np.full(len(ts), -np.inf)
    best_sat = np.zeros(len(ts), bool)
    for extra in range(int((k1 - k0).max(initial=0)) + 1):
        k = np.minimum(k0 + extra, k1)
        uniq, inverse = np.unique(k, return_inverse=True)
        P = compiled.config_array([configs[i] for i in uniq])[inverse]
        batch = predict_batch(compiled, P, rates)
        u = np.where(batch.saturated, np.inf, batch.max_utilization.max(axis=1))
        better = u > best_u
        best_k = np.where(better, k, best_k)
        best_u = np.where(better, u, best_u)
        best_sat = np.where(better, batch.saturated, best_sat)
    uniq, inverse = np.unique(best_k, return_inverse=True)
    P = compiled.config_array([configs[i] for i in uniq])[inverse]
    util = predict_batch(compiled, P, rates).max_utilization.max(axis=1)
    return pd.DataFrame({"actual": rates, "instances": P[:, variable].sum(axis=1).astype(int),
                         "max_utilization": util, "saturated": best_sat,
                         "violation": best_sat | (util > target * (1 + 1e-9))}, index=actual.index)
