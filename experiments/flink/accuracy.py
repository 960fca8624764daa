"""The model on a real engine: calibrate from live Flink metrics, predict max sustainable rates.

1. Calibration runs: the SleepPipeline at given configurations and a moderate source rate; live
   metric windows (``FlinkMetricsSource``) go into a history store.
2. ``history.summarize.summarize_store`` (Spark) -> ``operator_windows`` / ``edge_windows`` ->
   ``modeler.calibrate.Calibrator`` -> the model; ``modeler.queueing.predict`` gives the max
   sustainable rate of other configurations.
3. Measurement: the job at each test configuration with its source asked for 3x its nominal
   capacity; the bottleneck then runs flat out and the rate reaching the sink (after a warm-up
   window) is the measured max sustainable rate. (The source's own output is not: back pressure
   takes tens of seconds to fill the network buffers before it throttles the source.)

Run by hand (starts and always stops its own cluster unless ``--rest-url`` is given)::

    python -m experiments.flink.accuracy --out /tmp/flink-accuracy.json

Rates in tuples/s, times in ms.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

from experiments.flink.jobs import SleepPipelineSpec, submit
from scheduler.flink import FlinkMetricsConfig, FlinkMetricsSource, write_to_store

JOB = "augury-accuracy"


class _Attached:
    """An already running cluster, reached only over REST."""

    def __init__(self, rest_url: str, home: str):
        self.rest_url = rest_url.rstrip("/")
        self.home = Path(home)

    def submit_jar(self, *args, **kwargs):
        from experiments.flink.cluster import FlinkCluster

        return FlinkCluster.submit_jar(self, *args, **kwargs)

    def cancel(self, *args, **kwargs):
        from experiments.flink.cluster import FlinkCluster

        return FlinkCluster.cancel(self, *args, **kwargs)


def run_windows(cluster, spec: SleepPipelineSpec, windows: int, window_s: float,
                store: str | None = None) -> list:
    """Run ``spec``, skip one warm-up window, return ``windows`` MetricsBatches (and store them)."""
    job = submit(cluster, spec)
    try:
        source = FlinkMetricsSource(cluster.rest_url, job, FlinkMetricsConfig(window_s=window_s,
                                                                               job_label=JOB))
        batch = source.read()
        batches = []
        for _ in range(windows):
            batch = source.read(batch.as_of_s)
            batches.append(batch)
            if store:
                write_to_store(batch, store)
        return batches
    finally:
        cluster.cancel(job)


def sink_rate(batches, window_s: float) -> float:
    """Tuples/s reaching the sink: the job's throughput even while back pressure is still filling
    the network buffers upstream of the bottleneck (the source's output is not, for ~tens of s)."""
    total, n = 0.0, 0
    for b in batches:
        f = b.to_frame()
        out = f[(f["operator"] == "Sink") & (f["metric"] == "records_in")]
        for _, g in out.groupby("ts"):
            total += g["value"].sum() / window_s
            n += 1
    return total / max(n, 1)


def backpressure_share(batches, operator: str) -> float:
    f = __import__("pandas").concat([b.to_frame() for b in batches])
    rows = f[f["operator"] == operator]
    bp = rows[rows["metric"] == "backpressured_ms"]["value"].sum()
    busy = rows[rows["metric"].isin(["busy_ms", "idle_ms", "backpressured_ms"])]["value"].sum()
    return float(bp / busy) if busy else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.flink.accuracy")
    parser.add_argument("--rest-url", help="use a running cluster (else start one)")
    parser.add_argument("--flink-home", help="with --rest-url: the Flink distribution (for javac)")
    parser.add_argument("--window-s", type=float, default=5.0)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--enrich-ms", type=float, default=5.0)
    parser.add_argument("--aggregate-ms", type=float, default=8.0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--store", default=None,
                        help="reuse a summarized calibration store (skip the calibration runs)")
    parser.add_argument("--min-busy", type=float, default=0.0,
                        help="CalibrationConfig.min_busy_fraction (the sink is <1%% busy; every calibration window loads the waiting stages >= 45%%)")
    args = parser.parse_args(argv)

    base = SleepPipelineSpec(enrich_ms=args.enrich_ms, aggregate_ms=args.aggregate_ms, name=JOB)
    calib = [replace(base, rate_per_s=90.0, p_enrich=1, p_aggregate=1),
             replace(base, rate_per_s=180.0, p_enrich=2, p_aggregate=2)]
    tests = [(1, 2), (2, 1), (2, 3), (3, 3), (3, 4)]

    def body(cluster) -> dict:
        from history.store import MetricStore
        from history.summarize import summarize_store
        from modeler.calibrate import CalibrationConfig, Calibrator
        from modeler.queueing import predict

        store = args.store
        if store is None:
            store = tempfile.mkdtemp(prefix="augury-flink-accuracy-")
            for spec in calib:
                run_windows(cluster, spec, args.windows + 1, args.window_s, store)
            summarize_store(store)
        ms = MetricStore(store)
        fitted = Calibrator(CalibrationConfig(min_busy_fraction=args.min_busy)).fit(ms.operator_windows(JOB), ms.edge_windows(JOB), job=JOB)
        model = fitted.model_
        service = {op: fit.service_time_ms.to_dict() for op, fit in fitted.operators_.items()}
        scaling = {op: str(fit.scaling) for op, fit in fitted.operators_.items()}
        results = []
        for p_e, p_a in tests:
            config = {"Source": 1, "Enrich": p_e, "Aggregate": p_a, "Sink": 1}
            predicted = predict(model, config, 1.0).max_rate
            spec = replace(base, rate_per_s=3.0 * min(p_e * 1000 / args.enrich_ms, p_a * 1000 / args.aggregate_ms),
                           p_enrich=p_e, p_aggregate=p_a)
            batches = run_windows(cluster, spec, args.windows, args.window_s)
            measured = sink_rate(batches, args.window_s)
            nominal = min(p_e * 1000 / args.enrich_ms, p_a * 1000 / args.aggregate_ms)
            results.append({"config": config, "predicted_max_rate": predicted,
                            "measured_max_rate": measured, "nominal_max_rate": nominal,
                            "error": (predicted - measured) / measured,
                            "source_backpressure": backpressure_share(batches, "Source")})
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        return {"calibration": [asdict(s) for s in calib], "service_time_ms": service, "scaling": scaling,
                "trust": getattr(fitted, "trust_", None), "results": results,
                "window_s": args.window_s, "windows": args.windows}

    started = time.monotonic()
    if args.rest_url:
        from experiments.flink.cluster import ensure_flink_venv

        report = body(_Attached(args.rest_url, args.flink_home or str(ensure_flink_venv())))
    else:
        from experiments.flink.cluster import ClusterConfig, FlinkCluster

        with FlinkCluster(ClusterConfig.free_ports()) as cluster:
            report = body(cluster)
    report["seconds"] = time.monotonic() - started
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
