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
from augury.commands._logs import add_verbose_flag, library_output_to_log
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
    add_verbose_flag(parser)
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
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if args.json else (lambda msg: print(msg, flush=True))
    with library_output_to_log(args, "demo", say, out_dir=args.out) as log:
        report = run_demo(cfg, progress=say)
    payload = {
        "calibration": {"errors": report.calibration_errors, "trust": report.calibration_trust},
        "forecast_method": report.forecast_method,
        "reconfigurations_planned": len(report.schedule),
        "policies": {r.policy: {"slo_violation_minutes": r.violation_minutes,
                                "instance_hours": r.instance_hours,
                                "reconfigurations": r.reconfigurations} for r in report.results},
        "plots": list(report.plots), "out_dir": report.out_dir, "mlflow_run_id": report.mlflow_run_id,
        "log_file": str(log) if log else None,
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
    print("\n" + summary(report, cfg))
    print(f"\nplots: {', '.join(report.plots)}  (all outputs: {report.out_dir})")
    print(mlflow_ui_hint(report.mlflow_run_id))
    return 0


def summary(report, cfg) -> str:
    """A few plain sentences on what the demo found (the table above has the numbers)."""
    by = {r.policy: r for r in report.results}
    worst = max((abs(v) for v in report.calibration_errors.values()), default=float("nan"))
    lines = [f"In short: augury calibrated the job's model from a few minutes of testbed history (worst parameter "
             f"off by {worst:.1%}), forecast {cfg.replay_day} from the weeks of real traffic before it and planned "
             f"{len(report.schedule)} configurations ahead of the load."]
    a, f, s = by.get("augury"), by.get("flink-autoscaler"), by.get("static-peak")
    if a and f:
        lines.append(f"Replaying that day, augury spent {a.violation_minutes:.0f} minutes outside the SLO with "
                     f"{a.reconfigurations} reconfigurations; the Flink autoscaler's rules "
                     f"{f.violation_minutes:.0f} minutes with {f.reconfigurations}.")
    if a and s and s.instance_hours > 0:
        change = a.instance_hours / s.instance_hours - 1
        vs_flink = ""
        if f and f.instance_hours > 0:  # the comparison that matters to a user of the Flink rules
            d = a.instance_hours / f.instance_hours - 1
            vs_flink = (f" and {abs(d):.0%} {'fewer' if d < 0 else 'more'} than the Flink autoscaler's rules "
                        f"({f.instance_hours:.0f})")
        lines.append(f"augury used {a.instance_hours:.0f} instance-hours, {abs(change):.0%} "
                     f"{'fewer' if change < 0 else 'more'} than provisioning for the peak all day "
                     f"({s.instance_hours:.0f}){vs_flink}.")
    return "\n".join(lines)


def mlflow_ui_hint(run_id: str | None) -> str:
    """One line: how to look at the run (plots, tables, parameters) in the mlflow UI."""
    from experiments.tracking import tracking_uri

    return (f"mlflow UI: run `mlflow ui --backend-store-uri {tracking_uri()}` and open http://127.0.0.1:5000 "
            f"(experiment augury-demo, run {run_id})")
