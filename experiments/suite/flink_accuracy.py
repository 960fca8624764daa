"""flink-accuracy: the model on a real Apache Flink cluster.

Starts the managed local cluster (``experiments.flink.cluster``; always stopped, also on errors)
and runs the SleepPipeline test job (Source -> Enrich -> (key) Aggregate -> Sink, per-record waits
of ``enrich_ms`` / ``aggregate_ms``):

1. **Calibration**: the job at one or two configurations and moderate rates; the live metric
   windows (``scheduler.flink.FlinkMetricsSource``, counter differences) become operator/edge
   windows (``scheduler.observe.history_frames``) and ``modeler.calibrate.Calibrator`` fits the
   model (topology inferred, service times from busy time).
2. **Max sustainable rate** at configurations not used in calibration: one job whose source asks
   for 3x the largest nominal capacity, rescaled at runtime through the test configurations
   (``scheduler.flink.LiveFlinkActuator``); the bottleneck runs flat out and the rate reaching the
   sink is the measured maximum. Predicted: ``modeler.queueing.predict(...).max_rate``.
3. **Mean end-to-end latency** at the same configurations: one job at a fixed rate (70 % of the
   smallest predicted maximum), rescaled through them; measured by the sink (emit -> sink), predicted
   by the model at that rate.
4. **One step**: the job at a target rate above what its starting configuration can carry; the
   planner's configuration (``scheduler.plan.plan``, utilization target 0.7) for that rate is
   applied through the live actuator, and the throughput and back pressure after the restart are
   measured. Success: sink throughput >= 95 % of the target and no operator back-pressured more
   than 5 % of any window.

Rates in tuples/s, times in ms (rescale times in s). A live cluster is not deterministic: the seed
changes nothing, and other load on the machine shows up in the numbers.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pandas as pd

from experiments.flink.livejob import LiveJob
from experiments.harness import ExperimentContext, ExperimentError, ExperimentResult

NAME = "flink-accuracy"
DESCRIPTION = ("Real Apache Flink: calibrate from live metrics, predict max sustainable rate and mean "
               "latency at unseen configurations, one-step plan applied by live rescaling")

JOB = "augury-flink-accuracy"
GOAL_REL_ERROR = 0.15
THROUGHPUT_OK = 0.95
BACKPRESSURE_OK = 0.05


def _settings(quick: bool) -> dict:
    if quick:
        return {"window_s": 4.0, "windows": 2, "calibration_windows": 3,
                "calibration": [(1, 1, 90.0), (2, 2, 180.0)],
                "tests": [(1, 2), (2, 1), (3, 3)], "target_rate": 400.0, "start": (1, 1)}
    return {"window_s": 5.0, "windows": 3, "calibration_windows": 4,
            "calibration": [(1, 1, 90.0), (2, 2, 180.0)],
            "tests": [(1, 2), (2, 1), (2, 3), (3, 3), (3, 4)], "target_rate": 450.0, "start": (1, 1)}


class _Job(LiveJob):
    """A submitted SleepPipeline (``experiments.flink.jobs.submit``); its one source is Source."""

    def __init__(self, cluster, spec, window_s: float):
        from experiments.flink.jobs import submit

        super().__init__(cluster, submit(cluster, spec), window_s, JOB, reason="flink-accuracy",
                         sources=["Source"])


def _summary_of(windows) -> dict:
    """Mean over windows: sink rate, hottest busy, most back-pressured instance, mean latency."""
    sink = [w.operators["Sink"].processed_rate for w in windows]
    bp = [max(o.backpressure_max for o in w.operators.values()) for w in windows]
    busy = {op: float(np.mean([w.operators[op].busy_max for w in windows])) for op in windows[0].operators}
    lat = [w.latency_ms.get("mean") for w in windows if w.latency_ms.get("mean") is not None]
    return {"sink_rate": float(np.mean(sink)), "backpressure_max": float(max(bp)),
            "backpressure_mean": float(np.mean(bp)), "busy_max": busy,
            "latency_mean_ms": float(np.mean(lat)) if lat else float("nan")}


def _config(p_e: int, p_a: int) -> dict[str, int]:
    return {"Source": 1, "Enrich": p_e, "Aggregate": p_a, "Sink": 1}


def _check_environment(ctx: ExperimentContext) -> None:
    from experiments.flink.cluster import check_java, ensure_flink_venv

    ctx.progress(f"java: {check_java()}")
    ensure_flink_venv()


def run(ctx: ExperimentContext) -> ExperimentResult:
    from experiments.flink.cluster import ClusterConfig, FlinkCluster
    from experiments.flink.jobs import SleepPipelineSpec

    s = _settings(ctx.quick)
    base = SleepPipelineSpec(enrich_ms=5.0, aggregate_ms=8.0, name=JOB)
    _check_environment(ctx)  # FlinkClusterError (exit 3) when Java or the wheel is missing
    started = time.monotonic()
    with FlinkCluster(ClusterConfig.free_ports(task_slots=8)) as cluster:
        ctx.progress(f"cluster up at {cluster.rest_url} ({time.monotonic() - started:.0f} s)")
        out = _body(ctx, cluster, base, s)
    seconds = time.monotonic() - started
    return _result(ctx, base, s, out, seconds)


def _body(ctx, cluster, base, s) -> dict:
    with ctx.steps(len(s["calibration"]) + 2 * len(s["tests"]) + 1, "flink-accuracy measurements") as steps:
        return _measure(ctx, cluster, base, s, steps)


def _measure(ctx, cluster, base, s, steps) -> dict:
    from modeler.calibrate import CalibrationConfig, Calibrator
    from modeler.queueing import predict
    from scheduler.observe import history_frames
    from scheduler.plan import PlanConfig, plan

    w_s, n = s["window_s"], s["windows"]
    # 1. calibration
    calib_windows, calib_rows = [], []
    for p_e, p_a, rate in s["calibration"]:
        steps.advance(f"calibration {p_e},{p_a} at {rate:g}/s")
        job = _Job(cluster, replace(base, rate_per_s=rate, p_enrich=p_e, p_aggregate=p_a), w_s)
        try:
            ws = job.windows(s["calibration_windows"])
        finally:
            job.cancel()
        calib_windows.extend(ws)
        m = _summary_of(ws)
        calib_rows.append({"config": _config(p_e, p_a), "rate": rate, **m})
        ctx.progress(f"calibration {p_e},{p_a} at {rate:g}/s: sink {m['sink_rate']:.1f}/s, busy {m['busy_max']}")
    ops, edges = history_frames(calib_windows)
    fitted = Calibrator(CalibrationConfig(min_busy_fraction=0.0)).fit(ops, edges, job=JOB)
    model = fitted.model_
    service = {op: float(fit.service_time_ms.value) for op, fit in fitted.operators_.items()}
    ctx.progress("calibrated service times (ms): " + ", ".join(f"{k}={v:.3f}" for k, v in service.items()))

    tests = [_config(*t) for t in s["tests"]]
    predicted = {i: predict(model, c, 1.0).max_rate for i, c in enumerate(tests)}

    # 2. max sustainable rate: one overloaded job rescaled through the test configurations
    nominal = [min(c["Enrich"] * 1000 / base.enrich_ms, c["Aggregate"] * 1000 / base.aggregate_ms) for c in tests]
    over = replace(base, rate_per_s=3.0 * max(nominal), p_enrich=tests[0]["Enrich"],
                   p_aggregate=tests[0]["Aggregate"])
    measured, rescales = {}, []
    job = _Job(cluster, over, w_s)
    try:
        for i, c in enumerate(tests):
            steps.advance(f"max rate {c}")
            if i:
                rescales.append(job.rescale(c))
            measured[i] = _summary_of(job.windows(n))
            ctx.progress(f"max rate {c}: predicted {predicted[i]:.1f}/s measured {measured[i]['sink_rate']:.1f}/s")
    finally:
        job.cancel()

    # 3. mean latency at a fixed rate below every test configuration's predicted maximum
    lat_rate = round(0.7 * min(predicted.values()), 1)
    lat_measured, lat_predicted = {}, {}
    job = _Job(cluster, replace(base, rate_per_s=lat_rate, p_enrich=tests[0]["Enrich"],
                                p_aggregate=tests[0]["Aggregate"]), w_s)
    try:
        for i, c in enumerate(tests):
            steps.advance(f"latency {c} at {lat_rate:g}/s")
            if i:
                rescales.append(job.rescale(c))
            # a warm-up window after each rescale too (buffer debloating re-adapts after a restart;
            # the full run of 2026-11-22 had none here)
            lat_measured[i] = _summary_of(job.windows(n, skip=1))
            lat_predicted[i] = predict(model, c, lat_rate).latency_ms.get("mean")
            ctx.progress(f"latency {c} at {lat_rate:g}/s: predicted {lat_predicted[i]} ms "
                         f"measured {lat_measured[i]['latency_mean_ms']:.1f} ms")
    finally:
        job.cancel()

    # 4. one step: the planner's configuration for a higher target rate, applied live
    target = s["target_rate"]
    start = _config(*s["start"])
    slots = 8
    proposal = plan(model, target, PlanConfig(utilization_target=0.7))
    planned = {k: int(v) for k, v in proposal.config.items()}
    if max(planned.values()) > slots:
        raise ExperimentError("the plan needs more slots than the cluster has", field="target_rate",
                              value=target)
    steps.advance(f"one step {start} -> {planned} for {target:g}/s")
    job = _Job(cluster, replace(base, rate_per_s=target, p_enrich=start["Enrich"],
                                p_aggregate=start["Aggregate"]), w_s)
    try:
        before = _summary_of(job.windows(n))
        restart_s = job.rescale(planned)
        after = _summary_of(job.windows(n))
    finally:
        job.cancel()
    ctx.progress(f"one step {start} -> {planned} for {target:g}/s: before {before['sink_rate']:.1f}/s, "
                 f"after {after['sink_rate']:.1f}/s, back pressure {after['backpressure_max']:.3f}, "
                 f"rescale {restart_s:.1f} s")
    return {"model": model, "service": service, "calib_rows": calib_rows, "tests": tests,
            "predicted": predicted, "measured": measured, "nominal": nominal, "lat_rate": lat_rate,
            "lat_measured": lat_measured, "lat_predicted": lat_predicted, "rescales": rescales,
            "target": target, "start": start, "planned": planned, "proposal": proposal,
            "before": before, "after": after, "restart_s": restart_s}


def _fmt(c: dict) -> str:
    return f"Enrich={c['Enrich']}, Aggregate={c['Aggregate']}"


def _result(ctx, base, s, o, seconds) -> ExperimentResult:
    rows = []
    for i, c in enumerate(o["tests"]):
        pm, mm = o["predicted"][i], o["measured"][i]["sink_rate"]
        pl, ml = o["lat_predicted"][i], o["lat_measured"][i]["latency_mean_ms"]
        rows.append({"configuration": _fmt(c), "predicted_max_rate": round(pm, 1),
                     "measured_max_rate": round(mm, 1), "nominal_max_rate": round(o["nominal"][i], 1),
                     "max_rate_error": round((pm - mm) / mm, 4),
                     "latency_rate": o["lat_rate"],
                     "predicted_latency_mean_ms": round(pl, 2) if pl is not None else None,
                     "measured_latency_mean_ms": round(ml, 2),
                     "latency_error": round((pl - ml) / ml, 4) if pl is not None and ml > 0 else None,
                     "backpressure_at_latency_rate": round(o["lat_measured"][i]["backpressure_max"], 3)})
    table = pd.DataFrame(rows)
    calib = pd.DataFrame([{"configuration": _fmt(r["config"]), "rate": r["rate"],
                           "measured_rate": round(r["sink_rate"], 1),
                           "busy_Enrich": round(r["busy_max"]["Enrich"], 3),
                           "busy_Aggregate": round(r["busy_max"]["Aggregate"], 3),
                           "fitted_service_ms": "; ".join(f"{k}={v:.3f}" for k, v in o["service"].items()
                                                          if np.isfinite(v))} for r in o["calib_rows"]])
    b, a = o["before"], o["after"]
    ok = a["sink_rate"] >= THROUGHPUT_OK * o["target"] and a["backpressure_max"] <= BACKPRESSURE_OK
    one = pd.DataFrame([
        {"phase": "before", "configuration": _fmt(o["start"]), "target_rate": o["target"],
         "throughput": round(b["sink_rate"], 1), "backpressure_max": round(b["backpressure_max"], 3),
         "busy_Enrich": round(b["busy_max"]["Enrich"], 3), "busy_Aggregate": round(b["busy_max"]["Aggregate"], 3),
         "latency_mean_ms": round(b["latency_mean_ms"], 1), "predicted_busy_max": None},
        {"phase": "after one step", "configuration": _fmt(o["planned"]), "target_rate": o["target"],
         "throughput": round(a["sink_rate"], 1), "backpressure_max": round(a["backpressure_max"], 3),
         "busy_Enrich": round(a["busy_max"]["Enrich"], 3), "busy_Aggregate": round(a["busy_max"]["Aggregate"], 3),
         "latency_mean_ms": round(a["latency_mean_ms"], 1),
         "predicted_busy_max": round(max(op.max_utilization for op in o["proposal"].prediction.operators.values()), 3)},
    ])
    errs = table["max_rate_error"].abs()
    lat_errs = table["latency_error"].dropna().abs()
    within = int((errs <= GOAL_REL_ERROR).sum())
    metrics = {
        "max_rate_abs_error_mean": float(errs.mean()), "max_rate_abs_error_max": float(errs.max()),
        "configs_within_15pct": within, "test_configs": len(table),
        "latency_abs_error_mean": float(lat_errs.mean()) if len(lat_errs) else float("nan"),
        "latency_abs_error_max": float(lat_errs.max()) if len(lat_errs) else float("nan"),
        "one_step_success": float(ok), "one_step_throughput": a["sink_rate"],
        "one_step_target_rate": o["target"], "one_step_backpressure_max": a["backpressure_max"],
        "one_step_rescale_s": o["restart_s"],
        "rescale_s_mean": float(np.mean(o["rescales"] + [o["restart_s"]])),
        "experiment_seconds": seconds,
    }
    params = {"enrich_ms": base.enrich_ms, "aggregate_ms": base.aggregate_ms, "window_s": s["window_s"],
              "windows": s["windows"], "calibration_windows": s["calibration_windows"],
              "calibration_configs": "; ".join(f"{e},{g}@{r:g}/s" for e, g, r in s["calibration"]),
              "test_configs": "; ".join(f"{e},{g}" for e, g in s["tests"]),
              "target_rate": o["target"], "latency_rate": o["lat_rate"]}
    goal = "met" if within == len(table) and within >= 3 else "missed"
    summary = (
        f"Calibrated on {len(s['calibration'])} configurations of a live Flink job; predicted the max "
        f"sustainable rate at {len(table)} unseen configurations with mean |error| {errs.mean():.1%} "
        f"(max {errs.max():.1%}; {within}/{len(table)} within 15 %: goal {goal}). Mean end-to-end latency at "
        f"{o['lat_rate']:g}/s: mean |error| {metrics['latency_abs_error_mean']:.1%}. One step for "
        f"{o['target']:g}/s: {_fmt(o['start'])} -> {_fmt(o['planned'])}, throughput "
        f"{a['sink_rate']:.1f}/s, most back-pressured instance {a['backpressure_max']:.1%} of a window, "
        f"rescale {o['restart_s']:.1f} s: {'success' if ok else 'FAILED'}. Live cluster on a shared "
        f"2-core machine: numbers move with other load.")
    return ExperimentResult(params=params, metrics=metrics,
                            tables={"configurations": table, "calibration": calib, "one_step": one},
                            summary=summary)
