"""``augury demo [--quick]``: the main job end to end on the bundled WordCount and a real trace.

Records the job's metrics on the testbed, ingests them through the Spark pipeline, calibrates a
model, forecasts the next day of the NYC-taxi trace, plans pre-emptively, replays the day
closed-loop against the Flink-autoscaler rules and static peak provisioning, and prints a short
report with the plots' paths and the mlflow run id (see ``experiments/demo.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from augury.commands._common import print_json
from augury.errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run the main job end to end on bundled data",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the short version (< 3 minutes)")
    parser.add_argument("--trace", help="the real trace to replay (timestamp,value CSV; default: the bundled "
                                        "NYC-taxi trace)")
    parser.add_argument("--out", help="output directory (default: a new temporary directory)")
    parser.add_argument("--spark-master", default="local[2]", help="Spark master URL")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from experiments import bundled
    from experiments.demo import DemoConfig, run_demo

    trace = args.trace or str(bundled.trace("nab_nyc_taxi.csv"))
    if not Path(trace).is_file():
        raise UsageError("trace file not found", field="--trace", value=trace)
    cfg = DemoConfig(model_file=str(bundled.example("wordcount.yaml")), trace_file=trace,
                     out_dir=args.out, spark_master=args.spark_master,
                     **({"speedup": 960.0, "record_seconds": 20.0, "window_s": 1.0} if args.quick else
                        {"speedup": 120.0, "record_seconds": 60.0, "window_s": 5.0}))
    say = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    report = run_demo(cfg, progress=say)
    payload = {
        "calibration": {"errors": report.calibration_errors, "trust": report.calibration_trust},
        "forecast_method": report.forecast_method,
        "reconfigurations_planned": len(report.schedule),
        "policies": {r.policy: {"slo_violation_minutes": r.violation_minutes,
                                "instance_hours": r.instance_hours,
                                "reconfigurations": r.reconfigurations} for r in report.results},
        "plots": list(report.plots), "out_dir": report.out_dir, "mlflow_run_id": report.mlflow_run_id,
    }
    if args.json:
        print_json(payload)
        return 0
    worst = max((abs(v) for v in report.calibration_errors.values()), default=float("nan"))
    print(f"\ncalibration: worst service-time/selectivity error {worst:.2%} (trust {report.calibration_trust:.2f})")
    print(f"forecast: {report.forecast_method}; pre-emptive plan: {len(report.schedule)} configurations")
    print(f"\n{'policy':<18}{'SLO-violation min':>18}{'instance-hours':>16}{'reconfigs':>11}")
    for r in report.results:
        print(f"{r.policy:<18}{r.violation_minutes:>18.0f}{r.instance_hours:>16.1f}{r.reconfigurations:>11}")
    print(f"\nplots: {', '.join(report.plots)}\noutputs: {report.out_dir}\nmlflow run: {report.mlflow_run_id}")
    return 0
