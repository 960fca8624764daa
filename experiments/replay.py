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
``decide(now_s, stats, config)``; ``LoopController`` runs augury's product control loop
(``scheduler.loop.ControlLoop``, with any of its deciders: model, reactive, pre-emptive) against
the testbed through its ``MetricsSource`` and an ``Actuator``, exactly as ``augury run`` does.
No augury policy is defined here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Protocol

import pandas as pd

from modeler.modelfile import JobModel
from modeler.queueing import predict
from modeler.restart import restart_time_s
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
    hosts: int | None = None
    """Hosts the testbed places instances on (``TestbedConfig.hosts``; needed by host faults);
    None: no hosts, rows without the host field."""
    hosts_per_rack: int | None = None
    """Hosts per rack (``TestbedConfig.hosts_per_rack``; needed by ``lost_rack``); None: one rack."""


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

    from modeler.restart import compress_restart

    tb_cfg = TestbedConfig(seed=cfg.seed, window_s=cfg.window_s, restart_s=cfg.restart_s / cfg.time_scale,
                           restart_scope="job", hosts=cfg.hosts, hosts_per_rack=cfg.hosts_per_rack)
    # a stateful job's restart model (base + state / restore rate) runs compressed like the rest
    bed = Testbed(compress_restart(truth, cfg.time_scale), load, tb_cfg, parallelism=initial, faults=faults)
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
    capacity, ``restart_s * mu / (mu - lam)`` (infinite when ``mu <= lam``): the charge the
    pre-emptive schedule prices its changes with (``scheduler.schedule.restart_violation_s``)."""
    from scheduler.schedule import restart_violation_s

    return restart_violation_s(restart_s, capacity, arrival_rate, cfg.backlog_slo_s)


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


class ReplayActuator:
    """The product loop's ``Actuator`` inside a replay: it records the configuration the loop
    wants (the driver applies it, so every controller pays the same restart), restarts single
    instances (``Testbed.restart_instance``) and moves instances off a host
    (``Testbed.move_off_host``: ``scheduler.loop.HostMover``) on the testbed directly."""

    def __init__(self, bed) -> None:
        self.bed = bed
        self.wanted: dict | None = None

    def current(self):
        return self.bed.current()

    def apply(self, config, reason=""):
        bed = self.bed
        new = bed.model.resolve_config({**bed.current(), **dict(config)})
        if new == bed.current():
            return Actuation(applied=False, config=new, restart_s=0.0, detail="no change")
        self.wanted = dict(new)
        # the restart this change will cost on the testbed (its restart model, state included)
        restart = restart_time_s(bed.model, bed.current(), new, default_base_s=bed.cfg.restart_s)
        return Actuation(applied=True, config=new, restart_s=float(restart), detail=reason)

    def restart_instance(self, operator, instance, reason=""):
        return self.bed.restart_instance(operator, int(instance), reason)

    def move_off_host(self, host, reason=""):
        return self.bed.move_off_host(host, reason)


class LoopController:
    """augury on the testbed: the product's ``scheduler.loop.ControlLoop``, exactly as
    ``augury run`` builds it (``build`` makes it from the loop config and the replay's clock),
    stepped after every window through the testbed's ``MetricsSource`` and a ``ReplayActuator``.

    ``loop_config`` is in policy seconds; the loop runs in simulated seconds
    (``LoopConfig.scaled(1 / time_scale)``, its interval = the window). ``decider``: a callable
    ``(bed, cfg) -> Decider`` for the primary decider (default: the model decider). ``steps``
    keeps every ``(policy time, Step)`` with ``keep_steps``; ``store``: the loop's state store
    (default in memory; ``augury run`` passes its SQLite state, which ``augury log`` reads);
    ``on_step(step, view)`` is called after every step.
    """

    def __init__(self, model: JobModel, loop_config=None, name: str = "augury", keep_steps: bool = False,
                 decider: Callable | None = None, store=None, on_step: Callable | None = None) -> None:
        from scheduler.loop import LoopConfig

        self.model = model
        self.loop_config = loop_config or LoopConfig()
        self.name = name
        self.keep_steps = keep_steps
        self.decider_factory = decider
        self.store = store
        self.on_step = on_step
        self.steps: list = []
        self.loop = None
        self.bed = None

    def start(self, bed, cfg: ReplayConfig) -> None:
        from scheduler.loop import ControlLoop

        self.bed = bed
        self.actuator = ReplayActuator(bed)
        lc = replace(self.loop_config, interval_s=cfg.window_s * cfg.time_scale).scaled(1.0 / cfg.time_scale)
        if lc.guard.budget_per_calendar_day:  # the replay starts at a midnight of its trace's clock
            lc = replace(lc, guard=replace(lc.guard, budget_day_origin_s=float(bed.epoch0_s)))
        decider = self.decider_factory(bed, cfg) if self.decider_factory is not None else None
        self.loop = ControlLoop(self.model, bed, self.actuator, lc, store=self.store, decider=decider)

    @property
    def decider(self):
        return self.loop.decider if self.loop is not None else None

    def step(self, bed, view: WindowView, stats, config) -> dict | None:
        self.actuator.wanted = None
        s = self.loop.step()
        if self.keep_steps:
            self.steps.append((view.now_s, s))
        if self.on_step is not None:
            self.on_step(s, view)
        return self.actuator.wanted


def preemptive_decider(settings, history: pd.Series | None, day0: pd.Timestamp, floor_config=None,
                       forecaster=None):
    """``(bed, cfg) -> PreemptiveDecider`` for a replay starting at trace time ``day0``: the
    decider's clock maps the testbed's simulated seconds to trace time (``time_scale``), its
    history is ``history`` (the rate history before the replay) then what the loop measured; its
    floor is the model decider with ``floor_config`` (``ModelDeciderConfig``, default its defaults);
    ``forecaster``: the decider's (``PreemptiveDecider``; default the product's)."""
    from scheduler.deciders import ModelDecider, PreemptiveDecider, scaled_clock

    def make(bed, cfg: ReplayConfig):
        clock = scaled_clock(bed.epoch0_s, pd.Timestamp(day0), cfg.time_scale)
        return PreemptiveDecider(settings, (lambda: history) if history is not None else None,
                                 floor=ModelDecider(floor_config) if floor_config is not None else ModelDecider(),
                                 clock=clock, forecaster=forecaster)
    return make


def summarize(results) -> pd.DataFrame:
    """One row per replay: policy, SLO-violation minutes, instance-hours, reconfigurations."""
    return pd.DataFrame([{"policy": r.policy, "violation_minutes": r.violation_minutes,
                          "instance_hours": r.instance_hours, "reconfigurations": r.reconfigurations,
                          "windows": r.windows} for r in results])


Decide = Callable[[float, dict, dict], dict | None]
