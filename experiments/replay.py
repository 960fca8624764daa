"""Closed-loop replays on the testbed: one driver for every policy (baselines, augury's loop,
augury's pre-emptive schedule, the oracle).

``drive(truth, load, controller, ReplayConfig(...), initial, duration_s)`` advances the testbed
one metrics window at a time, records what every window looked like (load, configuration,
instances, sink p99 latency, source backlog, SLO violated or not) and after each window asks the
controller for a new configuration, which it applies (with the engine's restart downtime).

Clocks: the testbed runs in simulated seconds; ``time_scale`` = policy (trace) seconds per
simulated second (a time-compressed replay has ``time_scale`` = the speedup). Controllers see
policy time, so their time constants (Flink's 1 h scale-down delay, Dhalion's 3 min wait) keep
their real-time meaning; restarts last ``restart_s`` policy seconds. Rates are tuples/s (not
compressed); latencies ms.

A window **violates the SLO** when the sinks' p99 latency exceeds ``latency_slo_ms`` or the
sources' external backlog exceeds ``backlog_slo_s`` seconds of arrivals.

**SLO-violation time** (``violation_minutes``, the ``violated_s`` column) is counted in policy
time, and a restart is charged for what it costs in real time, whatever the compression: a
reconfiguration stops the job for ``restart_s`` policy seconds, during which arrivals pile up,
then the backlog drains at the spare capacity, so it costs ``restart_s * mu / (mu - lam)`` seconds
of violation (``mu`` the new configuration's capacity, ``lam`` the arrival rate; unbounded when
``mu <= lam``: then every window counts until one is clean) when ``restart_s`` exceeds the backlog
SLO. Windows the restart touches (not ``settled``) are charged that, at most the window each;
every other violated window is charged in full. Counting whole windows instead made the figure
depend on the compression: a restart of 0.25 simulated seconds violates a 10-minute window
(speedup 120) but is invisible at speedup 960.

Controllers (``Controller`` protocol): ``PolicyController`` wraps a baseline policy's
``decide(now_s, stats, config)``; ``LoopController`` runs augury's ``scheduler.loop.ControlLoop``
against the testbed (its time constants scaled by ``scaled_loop_config``); ``PreemptiveController``
is augury pre-emptive: rolling forecasts and schedules with the loop as the reactive floor (the
``preemptive`` experiment and ``augury demo`` both replay it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Protocol

import pandas as pd

from modeler.modelfile import JobModel
from modeler.queueing import predict
from scheduler.interfaces import Actuation


@dataclass(frozen=True)
class ReplayConfig:
    """How a replay runs. Every field has a default."""

    window_s: float = 2.0
    """Metrics window, simulated seconds."""
    time_scale: float = 1.0
    """Policy (trace) seconds per simulated second."""
    restart_s: float = 30.0
    """Engine restart time per reconfiguration, policy seconds."""
    latency_slo_ms: float = 50.0
    """A window violates the SLO when its sink p99 latency exceeds this (ms) ..."""
    backlog_slo_s: float = 1.0
    """... or when the sources' backlog exceeds this many seconds of arrivals."""
    seed: int = 0
    """Testbed seed."""


@dataclass(frozen=True)
class WindowView:
    """What a controller is shown after a window (besides the statistics)."""

    now_s: float
    """Policy time at the end of the window."""
    sim_s: float
    """Simulated time at the end of the window."""
    settled: bool
    """The window started after the last restart had finished."""


class Controller(Protocol):
    name: str

    def start(self, bed, cfg: ReplayConfig) -> None: ...

    def step(self, bed, view: WindowView, stats: Mapping, config: Mapping[str, int]) -> dict | None: ...


@dataclass(frozen=True)
class ReplayResult:
    policy: str
    violation_minutes: float
    """Policy (trace) minutes of SLO violation: violated windows, restarts charged as restart plus
    drain time (module docstring)."""
    instance_hours: float
    """Instances (sources excluded) x policy hours."""
    reconfigurations: int
    windows: int
    timeline: pd.DataFrame = field(repr=False, compare=False)
    """One row per window: t_s (policy), sim_s, rate, instances, capacity, p99_ms, backlog,
    violated, violated_s (policy seconds charged), config, applied."""
    events: tuple = field(default=(), repr=False, compare=False)
    """The testbed's event log (reconfigurations, restarts, faults)."""


def drive(truth: JobModel, load, controller: Controller, cfg: ReplayConfig, initial: Mapping[str, int],
          duration_s: float, faults=()) -> ReplayResult:
    """Replay the first ``duration_s`` simulated seconds of ``load`` with ``controller``."""
    from experiments.baselines import window_stats
    from experiments.testbed import Testbed, TestbedConfig
    from scheduler.interfaces import MetricsUnavailable

    tb_cfg = TestbedConfig(seed=cfg.seed, window_s=cfg.window_s, restart_s=cfg.restart_s / cfg.time_scale,
                           restart_scope="job")
    bed = Testbed(truth, load, tb_cfg, parallelism=initial, faults=faults)
    controller.start(bed, cfg)
    end = min(getattr(load, "end_s", math.inf), duration_s)
    sources = [op.name for op in truth.sources]
    rows = []
    lag_before: dict[str, float] = {s: 0.0 for s in sources}  # the testbed starts with no backlog
    reconfigs = 0
    since = None
    busy_until = -math.inf  # simulated time the last restart ends
    restart_charge = 0.0  # policy seconds of violation the last restart(s) still owe
    capacity_cache: dict[tuple, float] = {}

    def capacity(config: Mapping[str, int]) -> float:
        """The truth's max sustainable rate of ``config`` (tuples/s), computed once per config."""
        key = tuple(sorted(config.items()))
        if key not in capacity_cache:
            capacity_cache[key] = predict(truth, config, 0.0).max_rate
        return capacity_cache[key]
    while bed.now_s < end - 1e-9:
        bed.advance(min(cfg.window_s, end - bed.now_s))
        try:
            batch = bed.read(since)  # only windows completed since the last read
        except MetricsUnavailable:
            continue
        since = batch.as_of_s
        frame = batch.to_frame()
        last = frame[frame["ts"] == frame["ts"].max()]
        stats = window_stats(last, cfg.window_s, lag_before)
        lag_before = {op: s.backlog for op, s in stats.items()}
        config = bed.current()
        p99 = last[last["metric"] == "latency_ms_p99"]["value"]
        backlog = sum(stats[s].backlog for s in sources if s in stats)
        arrived = sum(stats[s].arrival_rate for s in sources if s in stats)
        violated = bool((len(p99) and float(p99.max()) > cfg.latency_slo_ms)
                        or backlog > arrived * cfg.backlog_slo_s)
        view = WindowView(now_s=bed.now_s * cfg.time_scale, sim_s=bed.now_s,
                          settled=bed.now_s - cfg.window_s >= busy_until - 1e-9)
        dt_s = cfg.window_s * cfg.time_scale
        if view.settled:  # measured as it is; what a restart still owed is forfeited
            violated_s = dt_s if violated else 0.0
            restart_charge = 0.0
        else:  # a restart's window: charged its real-time cost instead of what compression shows
            violated_s = min(dt_s, restart_charge)
            restart_charge -= violated_s
        row = {"t_s": view.now_s, "sim_s": bed.now_s, "dt_s": dt_s,
               "rate": load.rate_at(bed.now_s - cfg.window_s / 2) if hasattr(load, "rate_at") else float(load),
               "instances": sum(v for n, v in config.items() if not truth.operator(n).is_source),
               "capacity": capacity(config),
               "p99_ms": float(p99.max()) if len(p99) else float("nan"), "backlog": backlog,
               "arrival_rate": arrived, "violated": violated, "violated_s": violated_s,
               "settled": view.settled,
               "config": dict(config), "applied": False}
        new = controller.step(bed, view, stats, config)
        if new and dict(new) != dict(config):
            result = bed.apply(new, reason=controller.name)
            if result.applied:
                reconfigs += 1
                row["applied"] = True
                busy_until = bed.now_s + float(result.restart_s)
                restart_charge += restart_cost_s(cfg, float(result.restart_s) * cfg.time_scale,
                                                 capacity(result.config), arrived)
                if hasattr(controller, "applied"):
                    controller.applied(bed, view, dict(result.config), float(result.restart_s))
        rows.append(row)
    timeline = pd.DataFrame(rows)
    return ReplayResult(
        policy=controller.name,
        violation_minutes=float(timeline["violated_s"].sum() / 60.0) if rows else 0.0,
        instance_hours=float((timeline["instances"] * timeline["dt_s"]).sum() / 3600.0) if rows else 0.0,
        reconfigurations=reconfigs, windows=len(timeline), timeline=timeline, events=tuple(bed.events))


def restart_cost_s(cfg: ReplayConfig, restart_s: float, capacity: float, arrival_rate: float) -> float:
    """Policy seconds of SLO violation one restart of ``restart_s`` policy seconds costs: nothing
    when it is within the backlog SLO, else the restart plus draining its backlog at the spare
    capacity, ``restart_s * mu / (mu - lam)`` (infinite when ``mu <= lam``)."""
    if restart_s <= cfg.backlog_slo_s:
        return 0.0
    if capacity <= arrival_rate:
        return math.inf
    return restart_s * capacity / (capacity - arrival_rate)


# ------------------------------------------------------------------ controllers


@dataclass
class PolicyController:
    """A baseline policy (``decide(now_s, stats, config)``) as a controller.

    ``settle``: consult the policy only on windows that started after the last restart ended (a
    window measured during the downtime shows the restart, not the configuration).
    """

    policy: object
    settle: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or getattr(self.policy, "name", type(self.policy).__name__)

    def start(self, bed, cfg: ReplayConfig) -> None:
        pass

    def step(self, bed, view: WindowView, stats, config) -> dict | None:
        if self.settle and not view.settled:
            return None
        return self.policy.decide(view.now_s, stats, dict(config))


class _ProxyActuator:
    """The loop's actuator inside a replay: records what the loop wants (the driver applies it,
    so every controller pays the same restart) and restarts single instances on the testbed."""

    def __init__(self, controller: "LoopController") -> None:
        self.c = controller
        self.wanted: dict | None = None
        self.restarts: list[tuple[str, int, float]] = []

    def current(self):
        return self.c.bed.current()

    def apply(self, config, reason=""):
        bed = self.c.bed
        new = bed.model.resolve_config({**bed.current(), **dict(config)})
        if new == bed.current():
            return Actuation(applied=False, config=new, restart_s=0.0, detail="no change")
        self.wanted = dict(new)
        return Actuation(applied=True, config=new, restart_s=float(bed.cfg.restart_s), detail=reason)

    def restart_instance(self, operator, instance, reason=""):
        """Reschedule one instance onto a healthy host: its slow-instance fault ends. The testbed
        has no public instance restart, so this reaches into it (as tests/scheduler do)."""
        bed = self.c.bed
        bed._active_slow = [f for f in bed._active_slow if not (f.operator == operator and f.instance == instance)]
        bed._set_slow()
        bed._log("restart_instance", operator, {"instance": int(instance), "reason": reason})
        self.restarts.append((operator, int(instance), bed.now_s))
        return Actuation(applied=True, config=bed.current(), restart_s=0.0, detail=f"restarted {operator}[{instance}]")


def scaled_loop_config(config, time_scale: float):
    """``LoopConfig`` with every time constant divided by ``time_scale`` (policy s -> simulated s)."""
    if time_scale == 1.0:
        return config
    g = config.guard
    guard = replace(g, stabilization_s=g.stabilization_s / time_scale, settle_s=g.settle_s / time_scale,
                    scale_down_delay_s=g.scale_down_delay_s / time_scale)
    reactive = config.reactive
    if hasattr(reactive, "catch_up_s"):
        reactive = replace(reactive, catch_up_s=reactive.catch_up_s / time_scale)
    return replace(config, interval_s=config.interval_s / time_scale, catch_up_s=config.catch_up_s / time_scale,
                   evaluate_after_s=config.evaluate_after_s / time_scale, guard=guard, reactive=reactive)


class LoopController:
    """augury's control loop (``scheduler.loop.ControlLoop``) on the testbed.

    ``loop_config`` is in policy seconds; it is scaled to simulated seconds. The loop is stepped
    after every window (its ``interval_s`` is the window). ``steps`` keeps every ``Step`` (with
    ``keep_steps``). ``trusted``: the model starts trusted (verified before the run).
    """

    def __init__(self, model: JobModel, loop_config=None, name: str = "augury", keep_steps: bool = False,
                 trusted: bool = False) -> None:
        from scheduler.loop import LoopConfig

        self.model = model
        self.trusted = trusted
        self.loop_config = loop_config or LoopConfig()
        self.name = name
        self.keep_steps = keep_steps
        self.steps: list = []
        self.loop = None
        self.bed = None

    def start(self, bed, cfg: ReplayConfig) -> None:
        from scheduler.loop import ControlLoop

        self.bed = bed
        self.proxy = _ProxyActuator(self)
        lc = scaled_loop_config(replace(self.loop_config, interval_s=cfg.window_s * cfg.time_scale), cfg.time_scale)
        self.loop = ControlLoop(self.model, bed, self.proxy, lc)
        if self.trusted:  # the model was verified before the run: start on the planner path
            self.loop.trust.restore({"state": "trusted", "good_streak": lc.trust.good_windows})

    def step(self, bed, view: WindowView, stats, config) -> dict | None:
        self.proxy.wanted = None
        s = self.loop.step()
        if self.keep_steps:
            self.steps.append((view.now_s, s))
        return self.proxy.wanted

    def sync(self, config: Mapping[str, int], at_sim_s: float, restart_sim_s: float) -> None:
        """Tell the loop a configuration was applied by someone else (the pre-emptive schedule)."""
        loop = self.loop
        loop.config_in_force = {k: int(v) for k, v in config.items()}
        loop.last_action_s = self._epoch(at_sim_s)
        loop.settled_after_s = loop.last_action_s + restart_sim_s + loop.config.guard.settle_s
        loop.detectors.reset()
        loop._out_of_band = 0

    def _epoch(self, sim_s: float) -> float:
        return self.bed._epoch0 + sim_s


@dataclass(frozen=True)
class PreemptiveSettings:
    """augury pre-emptive in a replay. Times in policy (trace) seconds, rates in tuples/s."""

    utilization_target: float = 0.7
    """Hottest-instance utilization the plans size for."""
    latency_slo_ms: float | None = 50.0
    """End-to-end p99 latency SLO (ms) the plans meet; None = none."""
    quantile: float = 0.9
    """Forecast quantile the schedule plans for."""
    forecast_step_s: float = 900.0
    """Grid of the rate history handed to the forecaster (s)."""
    horizon_s: float = 30 * 3600.0
    """Forecast horizon of each re-plan (s)."""
    lead_time_s: float = 600.0
    """A scale-up is issued this long before its segment (s)."""
    stabilization_s: float = 3600.0
    """The forecast must stay low this long before a scale-down (s)."""
    max_reconfigurations_per_day: int = 6
    """Most planned changes in any 24 h, counting those already made."""
    replan_s: float = 2 * 3600.0
    """Periodic re-plan interval (s), as ``experiments.schedule_eval`` does."""
    refit_s: float = 86400.0
    """The forecaster is re-fitted this often (s); re-plans in between condition the fitted
    forecaster on the newest history (``ForecastResult.update``: cheap)."""
    reactive_trigger: float = 0.9
    """Also re-plan at once, with the measured load as the floor, when a settled window's measured
    input exceeds this fraction of the capacity at the utilization target of the configuration
    in force: the load is rising past the forecast (``schedule_eval``'s trigger)."""
    quiet_s: float = 900.0
    """After a reactive re-plan, no other reactive re-plan for this long (s) (the budget may be
    spent, or the plan may keep the configuration)."""
    history_days: int = 21
    """Days of rate history the forecaster sees."""


class PreemptiveController:
    """augury pre-emptive: every ``replan_s`` (and at once on a forecast miss) forecast the load at
    ``quantile`` from the rate history up to now and turn it into a timeline with
    ``scheduler.schedule.schedule`` (the configuration in force and the changes of the last 24 h
    passed in, so the daily budget holds across re-plans); augury's ``ControlLoop`` (trusted
    ``model``) runs alongside as the reactive floor: the configuration applied is the per-operator
    maximum of the schedule's and the loop's.

    ``rates``: the source-rate history (tuples/s, a DatetimeIndex on the forecast grid) the
    forecaster sees, including the replayed period (only the part before now is used); ``day0``:
    the trace time of policy time 0.
    """

    name = "augury"

    def __init__(self, model: JobModel, rates: pd.Series, day0: pd.Timestamp,
                 settings: PreemptiveSettings = PreemptiveSettings()) -> None:
        self.model = model
        self.rates = rates
        self.day0 = pd.Timestamp(day0)
        self.p = settings
        self.next_replan_s = 0.0
        self.quiet_until_s = 0.0
        self.fitted = None
        self.fitted_at_s = -math.inf
        self.issued: list[pd.Timestamp] = []
        self.capacities: dict[tuple, float] = {}
        self.reactive_replans = 0
        self.schedule = None
        self.floor: dict | None = None
        self.schedules: list = []
        self.forecast_methods: list[str] = []

    def start(self, bed, cfg: ReplayConfig) -> None:
        from scheduler.loop import LoopConfig

        self.cfg = cfg
        self.loop = LoopController(self.model, LoopConfig(utilization_target=self.p.utilization_target,
                                                          latency_slo_ms=self.p.latency_slo_ms),
                                   name="augury-loop", trusted=True)
        self.loop.start(bed, cfg)

    def capacity(self, config: Mapping[str, int]) -> float:
        """Input rate at which ``config``'s hottest instance reaches the utilization target."""
        key = tuple(sorted(config.items()))
        if key not in self.capacities:
            self.capacities[key] = predict(self.model, dict(config), 0.0).max_rate * self.p.utilization_target
        return self.capacities[key]

    def replan(self, now_s: float, measured: float, config: Mapping[str, int] | None = None) -> None:
        import numpy as np

        from modeler.forecast import Forecaster
        from scheduler.plan import PlanConfig
        from scheduler.schedule import ScheduleConfig, schedule

        now = self.day0 + pd.Timedelta(seconds=now_s)
        step = pd.Timedelta(seconds=self.p.forecast_step_s)
        history = self.rates[(self.rates.index >= self.day0 - pd.Timedelta(days=self.p.history_days))
                             & (self.rates.index + step <= now)]  # complete steps only
        if self.fitted is None or now_s - self.fitted_at_s >= self.p.refit_s:
            self.fitted, self.fitted_at_s = Forecaster(method="auto").fit(history), now_s
        else:
            self.fitted = self.fitted.update(history)
        steps = int(math.ceil(self.p.horizon_s / self.p.forecast_step_s)) + 1
        fc = self.fitted.forecast(steps, quantiles=(self.p.quantile,))
        forecast = pd.Series(np.asarray(fc.quantiles[self.p.quantile], float), index=pd.DatetimeIndex(fc.timestamps))
        forecast = forecast[forecast.index > now]
        cfg = ScheduleConfig(lead_time_s=self.p.lead_time_s, stabilization_s=self.p.stabilization_s,
                             max_reconfigurations_per_day=self.p.max_reconfigurations_per_day,
                             plan=PlanConfig(utilization_target=self.p.utilization_target,
                                             latency_slo_ms=self.p.latency_slo_ms))
        recent = [t for t in self.issued if t > now - pd.Timedelta(days=1)]
        self.schedule = schedule(self.model, forecast, float(measured), cfg, now=now,
                                 current_config=dict(config) if config is not None else None,
                                 recent_issues=recent)
        self.schedules.append(self.schedule)
        self.forecast_methods.append(self.fitted.method)
        self.floor = None

    def step(self, bed, view: WindowView, stats, config) -> dict | None:
        sources = [op.name for op in self.model.sources]
        measured = sum(stats[s].arrival_rate for s in sources if s in stats)
        # A forecast miss: the load runs past what the configuration in force was sized for.
        hot = (self.schedule is not None and view.settled and view.now_s >= self.quiet_until_s
               and measured > self.p.reactive_trigger * self.capacity(config))
        if view.now_s >= self.next_replan_s or hot:
            self.replan(view.now_s, measured, config if self.schedule is not None else None)
            if hot and view.now_s < self.next_replan_s:
                self.reactive_replans += 1
                self.quiet_until_s = view.now_s + self.p.quiet_s
            while self.next_replan_s <= view.now_s:
                self.next_replan_s += self.p.replan_s
        wanted = self.loop.step(bed, view, stats, config)
        if wanted is not None:
            self.floor = dict(wanted)
        now = self.day0 + pd.Timedelta(seconds=view.now_s)
        horizon = now + pd.Timedelta(seconds=self.cfg.window_s * self.cfg.time_scale)
        due = [r for r in self.schedule.reconfigurations if r.issue_at <= horizon]
        target = dict(due[-1].config) if due else dict(config)
        if self.floor:
            target = {k: max(int(v), int(self.floor.get(k, v))) for k, v in target.items()}
        target = {**dict(config), **{k: v for k, v in target.items() if k in config}}
        if target == dict(config):
            if wanted is not None:  # the loop believes it acted: tell it what is in force
                self.loop.loop.config_in_force = dict(config)
            return None
        return target

    def applied(self, bed, view: WindowView, config, restart_sim_s: float) -> None:
        self.issued.append(self.day0 + pd.Timedelta(seconds=view.now_s))
        self.loop.sync(config, bed.now_s, restart_sim_s)


def summarize(results) -> pd.DataFrame:
    """One row per replay: policy, SLO-violation minutes, instance-hours, reconfigurations."""
    return pd.DataFrame([{"policy": r.policy, "violation_minutes": r.violation_minutes,
                          "instance_hours": r.instance_hours, "reconfigurations": r.reconfigurations,
                          "windows": r.windows} for r in results])


Decide = Callable[[float, dict, dict], dict | None]
