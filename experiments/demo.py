"""``augury demo``: the whole product on the bundled WordCount job and a real trace.

1. **History.** The WordCount job runs on the testbed (the ground truth) at two configurations and
   several loads; its metrics go through ``augury ingest`` and the Spark pipeline.
2. **Calibrate** a model from that history (``modeler.calibrate``) and compare it with the truth.
3. **Forecast** the job's input rate for the next day from three weeks of the real NYC-taxi trace
   (scaled onto the job's capacity): the median, and the 0.9 quantile as the upper band
   (``modeler.forecast``).
4. **Plan pre-emptively** with ``scheduler.schedule`` (the same code as ``augury schedule``):
   each configuration is ``scheduler.plan`` for its segment's peak, in place ``lead time`` before
   the forecast needs it, scaled down only after the forecast stayed low for the stabilization
   period, at most ``max_reconfigurations_per_day`` changes, never below the load measured now.
5. **Replay** the next day, time-compressed, on the testbed closed-loop for augury pre-emptive
   (the product's control loop, ``scheduler.loop.ControlLoop`` with the pre-emptive decider,
   ``scheduler.deciders.PreemptiveDecider``, on the model calibrated in step 2: the same code as
   ``augury run`` and the ``preemptive`` experiment; the schedule of step 4 re-planned every 2 h
   from the forecaster updated with the load measured so far, at once when the measured load
   leaves the forecast's upper band, with the model decider as the floor; the reactive policy while the
   model is on probation), the Flink-autoscaler
   rules (reactive, DS2-based, with their defaults scaled by the compression) and static peak
   provisioning; report SLO-violation minutes, instance-hours and reconfigurations.

Everything is logged to one mlflow run. Times in the report are trace (wall-clock) time.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from experiments import bundled
from experiments.replay import ReplayResult
from modeler.modelfile import JobModel
from modeler.queueing import predict


@dataclass(frozen=True)
class DemoConfig:
    """What the demo runs. Every field has a default."""

    model_file: str = str(bundled.example("wordcount.yaml"))
    """The job's true model (default: the bundled example, ``experiments.bundled``)."""
    trace_file: str = str(bundled.trace("nab_nyc_taxi.csv"))
    """The real trace to forecast and replay (default: the bundled NYC-taxi trace)."""
    history_start: str = "2014-07-01"
    """First day of forecasting history (trace time)."""
    replay_day: str = "2014-07-22"
    """The day replayed closed-loop (trace time); history ends where it starts."""
    peak_over_capacity: float = 1.6
    """The trace's peak is scaled to this multiple of the model's current max_rate."""
    speedup: float = 480.0
    """Trace seconds per simulated second in the replay (480: a day in 3 simulated minutes)."""
    window_s: float = 2.0
    """Replay metrics window, simulated seconds."""
    restart_s: float = 30.0
    """Engine restart time per reconfiguration, trace seconds."""
    quantile: float = 0.5
    """Forecast quantile augury plans for (``scheduler.deciders.PreemptiveConfig``'s default)."""
    band_quantile: float = 0.9
    """The forecast's upper band: augury re-plans at once when the load leaves it."""
    lead_time_s: float = 600.0
    """Reconfigurations are issued this long (trace s) before the forecast load needs them."""
    stabilization_s: float = 3600.0
    """The forecast must stay low this long (trace s) before the schedule scales down."""
    max_reconfigurations_per_day: int = 6
    """Most changes the pre-emptive schedule makes in any 24 h."""
    budget_spares_scale_ups: bool = True
    """A spent daily budget stops scale-downs only (``GuardRails.budget_spares_scale_ups``, as in
    the ``preemptive`` experiment): a load the forecast missed is still met."""
    latency_slo_ms: float = 50.0
    """A window violates the SLO when its sink p99 latency exceeds this or input backs up."""
    record_seconds: float = 30.0
    """Simulated seconds per history run (2 configurations x 3 loads)."""
    seed: int = 7
    out_dir: str | None = None
    spark_master: str = "local[2]"


@dataclass(frozen=True)
class DemoReport:
    calibration_errors: Mapping[str, float]
    calibration_trust: float
    forecast_method: str
    schedule: pd.DataFrame
    results: tuple[ReplayResult, ...]
    """Per policy; each timeline's time column is ``t_trace_s``."""
    plots: tuple[str, ...]
    mlflow_run_id: str | None
    out_dir: str


# ------------------------------------------------------------------ replay


def replay(truth: JobModel, load, cfg: DemoConfig, initial: Mapping[str, int], controller,
           duration_s: float) -> ReplayResult:
    """Run the testbed over the first ``duration_s`` simulated seconds of ``load`` with
    ``controller`` (``experiments.replay.Controller``) asked after each window
    (``experiments.replay.drive``)."""
    from experiments.replay import ReplayConfig, drive

    rcfg = ReplayConfig(window_s=cfg.window_s, time_scale=cfg.speedup, restart_s=cfg.restart_s,
                        latency_slo_ms=cfg.latency_slo_ms, backlog_slo_s=1.0, seed=cfg.seed)
    r = drive(truth, load, controller, rcfg, initial, duration_s)
    return replace(r, timeline=r.timeline.rename(columns={"t_s": "t_trace_s"}))


# -------------------------------------------------------------------- the run


def run_demo(cfg: DemoConfig, progress: Callable[[str], None] = print) -> DemoReport:
    from experiments import tracking
    from experiments.baselines import FlinkAutoscalerPolicy, StaticPolicy
    from experiments.recording import calibrate_store, ingest_and_summarize, load_plan, record, truth_errors
    from experiments.replay import LoopController, PolicyController, preemptive_decider
    from scheduler.deciders import PreemptiveConfig
    from scheduler.guard import GuardRails
    from scheduler.loop import LoopConfig
    from scheduler.targets import Targets
    from experiments.testbed import load_trace
    from history.series import load_series
    from history.spark import spark_session
    from modeler.forecast import Forecaster
    from modeler.modelfile import load_model, to_graph
    from scheduler.plan import PlanConfig, plan
    from scheduler.schedule import ScheduleConfig
    from scheduler.schedule import schedule as make_schedule

    out = Path(cfg.out_dir or tempfile.mkdtemp(prefix="augury-demo-"))
    out.mkdir(parents=True, exist_ok=True)
    truth = load_model(cfg.model_file)
    base_capacity = predict(truth, None, 0.0).max_rate

    # 1-2. History on the testbed -> ingest -> Spark -> calibrate.
    progress(f"[1/5] recording history of '{truth.job}' on the testbed (2 configurations x 3 loads)")
    bigger = {op.name: min(op.max_parallelism, op.parallelism * 2) for op in truth.operators if not op.is_source}
    raw = record(truth, load_plan(truth, [{}, bigger], seconds=cfg.record_seconds), seed=cfg.seed)
    progress(f"[2/5] ingest + Spark summarize ({len(raw):,} metric rows) and calibrate")
    from pyspark.sql import SparkSession

    started = SparkSession.getActiveSession() is None  # stop only a session this demo started
    spark = spark_session(master=cfg.spark_master, app_name="augury-demo")
    try:
        ingest_and_summarize(raw, out / "store", spark=spark)
    finally:
        if started:
            spark.stop()
    calibrator = calibrate_store(out / "store", truth.job)
    model = calibrator.model_
    errors = truth_errors(truth, model)
    (out / "calibrated.yaml").write_text(__import__("modeler.modelfile", fromlist=["dump_model"]).dump_model(model))

    # 3. Forecast the next day from the trace history (scaled onto the job's capacity).
    progress("[3/5] forecasting the next day from the real trace (quantile "
             f"{cfg.quantile}) and planning pre-emptively")
    series = load_series(cfg.trace_file)
    step_s = float(np.median(np.diff(series.index.asi8)) / 1e9)
    day0 = pd.Timestamp(cfg.replay_day)
    span = series[(series.index >= pd.Timestamp(cfg.history_start)) & (series.index < day0 + pd.Timedelta(days=1))]
    scale = cfg.peak_over_capacity * base_capacity / float((span / step_s).max())
    rates = series / step_s * scale
    history = rates[(rates.index >= pd.Timestamp(cfg.history_start)) & (rates.index < day0)]
    result = Forecaster(method="auto").fit(history)
    steps = int(round(86400 / step_s))
    fc = result.forecast(steps, quantiles=tuple(dict.fromkeys((cfg.quantile, cfg.band_quantile))))
    forecast = pd.Series(np.asarray(fc.quantiles[cfg.quantile], float), index=pd.DatetimeIndex(fc.timestamps))
    band = pd.Series(np.asarray(fc.quantiles[cfg.band_quantile], float), index=pd.DatetimeIndex(fc.timestamps))
    targets = Targets(latency_slo_ms=cfg.latency_slo_ms)
    plan_cfg = PlanConfig(targets)
    timeline = make_schedule(model, forecast, float(history.iloc[-1]), ScheduleConfig(
        lead_time_s=cfg.lead_time_s, stabilization_s=cfg.stabilization_s,
        max_reconfigurations_per_day=cfg.max_reconfigurations_per_day, plan=plan_cfg))
    schedule = pd.DataFrame([r.to_dict() for r in timeline.reconfigurations])
    schedule.to_csv(out / "schedule.csv", index=False)

    # 5. Replay the day closed-loop for each policy.
    load = load_trace(cfg.trace_file, speedup=cfg.speedup, scale=scale, start=str(day0),
                      duration_s=86400 / cfg.speedup)
    peak_config = dict(plan(model, float(forecast.max()), plan_cfg).config)
    issue_s = [((r.issue_at - day0).total_seconds(), dict(r.config)) for r in timeline.reconfigurations]

    # the daily budget holds for every change the loop makes (the guard), not only the schedule's
    loop_cfg = LoopConfig(targets=targets, guard=GuardRails(max_reconfigurations_per_day=cfg.max_reconfigurations_per_day,
                                                            budget_spares_scale_ups=cfg.budget_spares_scale_ups))
    augury = LoopController(model, loop_cfg, name="augury", decider=preemptive_decider(
        PreemptiveConfig(quantile=cfg.quantile, band_quantile=cfg.band_quantile, forecast_step_s=step_s, horizon_s=86400.0 + 6 * 3600.0,
                         lead_time_s=cfg.lead_time_s, stabilization_s=cfg.stabilization_s,
                         max_reconfigurations_per_day=cfg.max_reconfigurations_per_day,
                         history_days=max(1, (day0 - pd.Timestamp(cfg.history_start)).days)),
        history, day0))

    flink = PolicyController(FlinkAutoscalerPolicy(to_graph(truth)))
    static = PolicyController(StaticPolicy(name="static-peak"))
    initial = dict(issue_s[0][1]) if issue_s else truth.config
    results = []
    for controller, start in ((augury, initial), (flink, truth.config), (static, peak_config)):
        progress(f"[4/5] replaying {day0.date()} closed-loop: {controller.name}")
        results.append(replay(truth, load, cfg, start, controller, duration_s=86400 / cfg.speedup))

    progress("[5/5] report")
    # each policy's capacity at its own target (augury and static peak: plans at augury's targets,
    # the SLO-driven ceiling; the Flink rules: their 0.7 target utilization)
    at_target = {"augury": targets.utilization_target, "static-peak": targets.utilization_target,
                 flink.name: flink.policy.target_utilization}
    plots = _plots(out, forecast, band, rates[(rates.index >= day0) & (rates.index < day0 + pd.Timedelta(days=1))],
                   results, day0, at_target, _hindsight(truth, results[0].timeline, cfg.latency_slo_ms), cfg)
    run_id = None
    with tracking.start_run("augury-demo", run_name=f"{truth.job}-{day0.date()}") as run:
        tracking.log_params({k: v for k, v in cfg.__dict__.items()})
        tracking.log_metrics({"calibration_error": errors, "calibration_trust": calibrator.trust_,
                              **{f"{r.policy}.{k}": getattr(r, k) for r in results
                                 for k in ("violation_minutes", "instance_hours", "reconfigurations")}})
        for p in plots:
            tracking.log_artifact(p)
        tracking.log_artifact(out / "schedule.csv")
        tracking.log_artifact(out / "calibrated.yaml")
        run_id = run.info.run_id
    return DemoReport(calibration_errors=errors, calibration_trust=calibrator.trust_,
                      forecast_method=result.method, schedule=schedule, results=tuple(results),
                      plots=tuple(plots), mlflow_run_id=run_id, out_dir=str(out))


def _hindsight(truth: JobModel, timeline: pd.DataFrame, latency_slo_ms: float, ceiling: float = 0.7) -> pd.Series:
    """The hindsight lower bound per window: the fewest instances meeting the SLO and ``ceiling``
    for the load the window saw (``experiments.reference.TrueOracle`` on the true model; no
    restarts), indexed by trace seconds."""
    from experiments.reference import TrueOracle

    found = TrueOracle(truth, latency_slo_ms, ceiling)
    return pd.Series([found.instances(float(r)) for r in timeline["rate"]], index=timeline["t_trace_s"].to_numpy())


def _plots(out: Path, forecast: pd.Series, band: pd.Series, actual: pd.Series, results, day0,
           at_target: Mapping[str, float], bound: pd.Series, cfg: DemoConfig) -> list[str]:
    """capacity.png: the load, the forecast (median and upper band), each policy's capacity at its
    own target; below, each policy's instances and the hindsight lower bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, low) = plt.subplots(2, 1, figsize=(10, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    hours = lambda idx: (idx - day0).total_seconds() / 3600.0  # noqa: E731
    ax.fill_between(hours(band.index), forecast.to_numpy(), band.to_numpy(), color="gray", alpha=0.25,
                    step="post", label=f"forecast q{cfg.quantile:g} .. q{cfg.band_quantile:g}")
    ax.plot(hours(forecast.index), forecast.to_numpy(), color="gray", ls="--", lw=1, label=f"forecast q{cfg.quantile:g}")
    ax.plot(hours(actual.index), actual.to_numpy(), color="black", lw=1.5, label="actual load")
    for r in results:
        target = at_target.get(r.policy, 1.0)
        ax.step(r.timeline["t_trace_s"] / 3600.0, r.timeline["capacity"] * target, where="post",
                label=f"capacity at {target:g}: {r.policy}")
        low.step(r.timeline["t_trace_s"] / 3600.0, r.timeline["instances"], where="post", label=r.policy)
    low.step(bound.index / 3600.0, bound.to_numpy(), where="post", color="black", ls=":",
             label="hindsight lower bound (SLO, 0.7)")
    ax.set_ylabel("tuples/s")
    ax.legend(loc="upper left", fontsize=7)
    ax.set_title("Load, forecast band and capacity per policy at its target")
    low.set_xlabel(f"hours since {day0.date()}")
    low.set_ylabel("instances")
    low.legend(loc="upper left", fontsize=7)
    path = out / "capacity.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [str(path)]
