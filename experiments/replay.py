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

Controllers (``Controller`` protocol): ``PolicyController`` wraps a baseline policy's
``decide(now_s, stats, config)``; ``LoopController`` runs augury's ``scheduler.loop.ControlLoop``
against the testbed (its time constants scaled by ``scaled_loop_config``); the pre-emptive
controller lives in ``experiments.suite.preemptive``.
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
    """Policy (trace) minutes in violated windows."""
    instance_hours: float
    """Instances (sources excluded) x policy hours."""
    reconfigurations: int
    windows: int
    timeline: pd.DataFrame = field(repr=False, compare=False)
    """One row per window: t_s (policy), sim_s, rate, instances, capacity, p99_ms, backlog,
    violated, config, applied."""
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
    lag_before: dict[str, float] = {}
    reconfigs = 0
    since = None
    busy_until = -math.inf  # simulated time the last restart ends
    capacity_cache: dict[tuple, float] = {}
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
        key = tuple(sorted(config.items()))
        if key not in capacity_cache:
            capacity_cache[key] = predict(truth, config, 0.0).max_rate
        p99 = last[last["metric"] == "latency_ms_p99"]["value"]
        backlog = sum(stats[s].backlog for s in sources if s in stats)
        arrived = sum(stats[s].arrival_rate for s in sources if s in stats)
        violated = bool((len(p99) and float(p99.max()) > cfg.latency_slo_ms)
                        or backlog > arrived * cfg.backlog_slo_s)
        view = WindowView(now_s=bed.now_s * cfg.time_scale, sim_s=bed.now_s,
                          settled=bed.now_s - cfg.window_s >= busy_until - 1e-9)
        row = {"t_s": view.now_s, "sim_s": bed.now_s, "dt_s": cfg.window_s * cfg.time_scale,
               "rate": load.rate_at(bed.now_s - cfg.window_s / 2) if hasattr(load, "rate_at") else float(load),
               "instances": sum(v for n, v in config.items() if not truth.operator(n).is_source),
               "capacity": capacity_cache[key],
               "p99_ms": float(p99.max()) if len(p99) else float("nan"), "backlog": backlog,
               "arrival_rate": arrived, "violated": violated, "settled": view.settled,
               "config": dict(config), "applied": False}
        new = controller.step(bed, view, stats, config)
        if new and dict(new) != dict(config):
            result = bed.apply(new, reason=controller.name)
            if result.applied:
                reconfigs += 1
                row["applied"] = True
                busy_until = bed.now_s + float(result.restart_s)
                if hasattr(controller, "applied"):
                    controller.applied(bed, view, dict(result.config), float(result.restart_s))
        rows.append(row)
    timeline = pd.DataFrame(rows)
    return ReplayResult(
        policy=controller.name,
        violation_minutes=float((timeline["violated"] * timeline["dt_s"]).sum() / 60.0) if rows else 0.0,
        instance_hours=float((timeline["instances"] * timeline["dt_s"]).sum() / 3600.0) if rows else 0.0,
        reconfigurations=reconfigs, windows=len(timeline), timeline=timeline, events=tuple(bed.events))


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


def summarize(results) -> pd.DataFrame:
    """One row per replay: policy, SLO-violation minutes, instance-hours, reconfigurations."""
    return pd.DataFrame([{"policy": r.policy, "violation_minutes": r.violation_minutes,
                          "instance_hours": r.instance_hours, "reconfigurations": r.reconfigurations,
                          "windows": r.windows} for r in results])


Decide = Callable[[float, dict, dict], dict | None]
