"""A real trace day replayed on the testbed with augury's product loop: one code path for
``augury run`` (``[metrics] source = "testbed"`` with a ``trace``) and the ``preemptive``
experiment's augury row.

``prepare(truth, path, TraceReplayConfig(...), ...)`` reads the trace, scales it so that its peak
over the history and the replayed days is ``peak_over_capacity`` x the job's max rate at its
default configuration, and returns the replay's pieces (``PreparedTrace``): the time-compressed
load, the rate history before the replay (what the forecaster may know), the starting
configuration (the truth's plan for the first rate: how the job is deployed when the day starts,
the same for every policy) and the ``experiments.replay.ReplayConfig``.

``replay_augury(model, truth, prepared, loop_config, decider)`` runs the product control loop
(``experiments.replay.LoopController``: ``scheduler.loop.ControlLoop`` with the given decider
factory) on that replay through ``experiments.replay.drive``: the caller's ``model`` is what
augury knows (learned from measurements), ``truth`` only runs the testbed and scores the windows.

Times: trace (policy) seconds unless named simulated; the replay runs ``speedup`` x faster than
the trace. Rates tuples/s, latencies ms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from modeler.errors import AuguryError
from modeler.modelfile import JobModel


class TraceReplayError(AuguryError):
    """A trace replay that cannot be set up (names the file, field and value)."""


@dataclass(frozen=True)
class TraceReplayConfig:
    """``[metrics]`` of a testbed run that replays a real trace (``trace`` set). Every field has a
    default; trace seconds unless stated."""

    trace: str = "nab_nyc_taxi.csv"
    """The arrival trace: a bundled trace's name (``augury examples list``) or a CSV file
    (timestamp, count per interval) relative to the config file."""
    start: str = "2014-07-22"
    """First timestamp of the replay (trace time; the default is a day of the bundled NYC-taxi
    trace, three weeks into it)."""
    history_start: str = ""
    """First timestamp of the history before the replay; it counts for the trace's scaling (the
    peak over history and replay). Default: 21 days before ``start``."""
    days: float = 1.0
    """Trace days replayed, days."""
    speedup: float = 960.0
    """Trace seconds per simulated second (960: a day in 90 simulated seconds)."""
    peak_over_capacity: float = 1.6
    """The trace is scaled so its peak (history and replay) is this x the job's max rate at its
    default configuration, ratio."""
    resample_s: float = 300.0
    """The replayed trace's resolution, seconds (finer traces are re-binned; coarser ones kept)."""
    restart_s: float = 30.0
    """Engine restart time per reconfiguration, seconds."""
    backlog_slo_s: float = 1.0
    """A window also violates the SLO when the sources' backlog exceeds this many seconds of
    arrivals, seconds."""
    seed: int = 0
    """Testbed seed of the replay."""

    def check(self, file: str | None = None) -> None:
        def bad(name: str, message: str) -> TraceReplayError:
            return TraceReplayError(message, file=file, field=f"metrics.{name}", value=getattr(self, name))

        if not isinstance(self.trace, str) or not self.trace:
            raise bad("trace", "a bundled trace name or a CSV file is required")
        for name in ("start", "history_start"):
            value = getattr(self, name)
            if not isinstance(value, str) or (name == "start" and not value):
                raise bad(name, "a timestamp string is required" if name == "start" else "must be a timestamp string")
            if value:
                try:
                    pd.Timestamp(value)
                except (ValueError, TypeError):
                    raise bad(name, "not a timestamp") from None
        for name in ("days", "speedup", "peak_over_capacity", "resample_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
                raise bad(name, "must be a finite number > 0")
        for name in ("restart_s", "backlog_slo_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
                raise bad(name, "must be a finite number >= 0")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise bad("seed", "must be an integer >= 0")


@dataclass(frozen=True)
class PreparedTrace:
    """What a replay of a trace needs (``prepare``)."""

    path: Path
    load: object
    """The time-compressed load (``experiments.testbed.TraceLoad``): simulated seconds -> tuples/s."""
    history: pd.Series = field(repr=False)
    """The (scaled) rate history before the replay on the forecasting grid, tuples/s."""
    day0: pd.Timestamp
    scale: float
    """Trace counts per interval -> tuples/s factor (after the per-second conversion)."""
    duration_s: float
    """Simulated seconds replayed."""
    initial: dict
    """The job's configuration when the replay starts (the truth's plan for the first rate)."""
    replay: object
    """``experiments.replay.ReplayConfig``."""
    speedup: float

    def rate_at(self, t_s: float) -> float:
        """The replayed rate at trace second ``t_s`` of the replay, tuples/s."""
        return float(self.load.rate_at(t_s / self.speedup))


def rate_series(path, step_s: float) -> pd.Series:
    """The trace as tuples/s on a regular grid of at least ``step_s`` seconds."""
    from history.series import load_series

    s = load_series(path)
    native = float(np.median(np.diff(s.index.asi8)) / 1e9)
    rates = (s / native).astype(float)
    grid = max(step_s, native)
    if grid > native:
        rates = rates.resample(f"{int(grid)}s").mean()
    return rates.interpolate(limit_direction="both")


def resolve_trace(name: str, base: Path | None = None) -> Path:
    """A bundled trace's name, or a file (relative to ``base``)."""
    from experiments.bundled import BundledFileNotFound, trace

    if base is not None and (base / name).is_file():
        return base / name
    if Path(name).is_file():
        return Path(name)
    try:
        return Path(trace(name))
    except BundledFileNotFound as err:
        raise TraceReplayError(f"no such file, and not a bundled trace ({err})", field="metrics.trace",
                               value=name) from None


def prepare(truth: JobModel, path: str | Path, cfg: TraceReplayConfig, *, window_s: float,
            forecast_step_s: float, utilization_target: float, latency_slo_ms: float) -> PreparedTrace:
    """Set up the replay of ``cfg`` (``window_s``: the metrics window, simulated seconds;
    ``forecast_step_s``: the history's grid; the last two: the starting plan's targets and the
    SLO the windows are scored against)."""
    from experiments.replay import ReplayConfig
    from experiments.testbed import load_trace
    from modeler.queueing import predict
    from scheduler.plan import PlanConfig, plan

    path = Path(path)
    if not path.is_file():
        raise TraceReplayError("trace file missing", file=str(path), field="metrics.trace", value=cfg.trace)
    day0 = pd.Timestamp(cfg.start)
    hist_start = pd.Timestamp(cfg.history_start) if cfg.history_start else day0 - pd.Timedelta(days=21)
    end = day0 + pd.Timedelta(days=cfg.days)
    raw = rate_series(path, 0.0)
    span = raw[(raw.index >= hist_start) & (raw.index < end)]
    if span.empty or day0 < raw.index[0] or day0 > raw.index[-1]:
        raise TraceReplayError(f"the trace covers {raw.index[0]} .. {raw.index[-1]}, not the replay "
                               f"{day0} .. {end}", file=str(path), field="metrics.start", value=cfg.start)
    scale = cfg.peak_over_capacity * predict(truth, None, 0.0).max_rate / float(span.max())
    rates = rate_series(path, forecast_step_s) * scale
    duration = cfg.days * 86400 / cfg.speedup
    native = float(np.median(np.diff(raw.index.asi8)) / 1e9)
    load = load_trace(path, speedup=cfg.speedup, scale=scale, start=str(day0), duration_s=duration,
                      resample_s=cfg.resample_s if cfg.resample_s > native else None)
    first = plan(truth, float(load.rate_at(0.0)),
                 PlanConfig(utilization_target=utilization_target, latency_slo_ms=latency_slo_ms)).config
    replay = ReplayConfig(window_s=window_s, time_scale=cfg.speedup, restart_s=cfg.restart_s,
                          latency_slo_ms=latency_slo_ms, backlog_slo_s=cfg.backlog_slo_s, seed=cfg.seed)
    return PreparedTrace(path=path, load=load, history=rates[rates.index < day0], day0=day0, scale=scale,
                         duration_s=duration, initial=dict(first), replay=replay, speedup=cfg.speedup)


@dataclass(frozen=True)
class KnownForecast:
    """A forecast whose every quantile is the same known path (``PerfectForecaster``)."""

    timestamps: pd.DatetimeIndex
    quantiles: dict


@dataclass(frozen=True)
class _KnownResult:
    prepared: PreparedTrace
    last: pd.Timestamp
    step: pd.Timedelta
    sample_s: float
    method: str = "perfect"

    def update(self, history: pd.Series) -> "_KnownResult":
        return _KnownResult(self.prepared, history.index[-1], self.step, self.sample_s)

    def forecast(self, steps: int, quantiles=(0.5,)) -> KnownForecast:
        stamps = pd.DatetimeIndex([self.last + self.step * (k + 1) for k in range(int(steps))])
        n = max(1, int(round(self.step.total_seconds() / self.sample_s)))
        day0 = pd.Timestamp(self.prepared.day0)
        # each grid step's mean rate (the history the forecaster sees is binned the same way);
        # a step before the replay takes its first rate, one after its end the last rate
        path = np.array([np.mean([self.prepared.rate_at(max(0.0, (t - day0).total_seconds() + j * self.sample_s))
                                  for j in range(n)]) for t in stamps], dtype=float)
        return KnownForecast(stamps, {float(q): path for q in quantiles})


@dataclass(frozen=True)
class PerfectForecaster:
    """A forecaster that knows the replayed load (a double behind ``PreemptiveDecider``'s
    ``forecaster``): every quantile of step k is the actual mean rate over step k. Replaying
    augury with it separates what its forecasts cost from what its schedule rules cost.
    ``sample_s``: the load is averaged over each step from samples this far apart (s)."""

    prepared: PreparedTrace
    sample_s: float = 60.0

    def fit(self, history: pd.Series) -> _KnownResult:
        step = history.index[1] - history.index[0] if len(history) > 1 else pd.Timedelta(minutes=15)
        return _KnownResult(self.prepared, history.index[-1], step, self.sample_s)

    def __call__(self, method: str) -> "PerfectForecaster":
        return self


def replay_augury(model: JobModel, truth: JobModel, prepared: PreparedTrace, loop_config,
                  decider: Callable | None = None, *, store=None, on_step: Callable | None = None,
                  name: str = "augury"):
    """augury's product loop (on ``model``) over the prepared replay (the testbed runs ``truth``).
    ``decider``: ``(bed, ReplayConfig) -> Decider`` (default: the model decider). Returns
    ``(ReplayResult, LoopController)``."""
    from experiments.replay import LoopController, drive

    controller = LoopController(model, loop_config, name=name, decider=decider, store=store, on_step=on_step)
    result = drive(truth, prepared.load, controller, prepared.replay, prepared.initial, prepared.duration_s)
    return result, controller


def hindsight_instance_hours(truth: JobModel, timeline: pd.DataFrame, latency_slo_ms: float,
                             ceiling: float = 0.7, resolution: float = 0.02) -> float:
    """The hindsight lower bound on instance-hours for a replay's load: every window at the
    fewest instances meeting the SLO and the utilization ``ceiling`` for the load it actually
    saw (the reference of ``experiments.reference``, stage 1 on the true model), no restart cost,
    no lead time. Each window's rate is rounded *down* onto a geometric grid of ``resolution``
    (fewer distinct searches; rounding down keeps it a lower bound)."""
    from experiments.reference import TrueOracle

    if timeline.empty:
        return 0.0
    found = TrueOracle(truth, latency_slo_ms, ceiling)
    step = math.log1p(resolution)

    def level(rate: float) -> float:
        return 0.0 if rate <= 0 else float(math.exp(math.floor(math.log(rate) / step) * step))
    instances = timeline["rate"].astype(float).map(lambda r: found.instances(level(r)))
    return float((instances * timeline["dt_s"]).sum() / 3600.0)


def minutes(timeline: pd.DataFrame, settled: bool) -> float:
    """Violation minutes charged to settled windows (load: under-provisioning, late reaction) or
    to the windows restarts touched (restart plus backlog drain)."""
    if timeline.empty:
        return 0.0
    return float(timeline.loc[timeline["settled"] == settled, "violated_s"].sum() / 60.0)


def summary(result, days: float) -> dict:
    """The replay's figures, as ``augury run`` prints them and the experiment tabulates them."""
    return {"policy": result.policy, "days": days, "violation_minutes": result.violation_minutes,
            "restart_violation_minutes": minutes(result.timeline, settled=False),
            "load_violation_minutes": minutes(result.timeline, settled=True),
            "instance_hours": result.instance_hours, "reconfigurations": result.reconfigurations,
            "reconfigurations_per_day": result.reconfigurations / days, "windows": result.windows}
