"""``augury demo [--quick]``: the main job end to end on the bundled examples and real traces.

What it runs grows with the product (the full pipeline: testbed driven by a real trace -> Spark
ingest -> calibrate -> forecast -> pre-emptive plan -> closed-loop replay, is issue 8). Today: for
every bundled example, the model's capacity, bottleneck and latency curve.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from augury.commands._common import print_json

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TRACES = REPO.parent / "shared" / "traces"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run the main job end to end on bundled data",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the short version (CI)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--traces", default=str(TRACES), help="directory of real traces")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from modeler.modelfile import load_model
    from modeler.queueing import predict

    report: dict = {"examples": {}}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        model = load_model(path)
        capacity = predict(model, None, 0.0)
        curve = {}
        for load in (0.3, 0.6, 0.9):
            p = predict(model, None, load * capacity.max_rate)
            curve[f"{load:.0%}"] = p.latency_ms
        report["examples"][model.job] = {
            "file": str(path.relative_to(REPO)), "config": model.config,
            "max_rate": capacity.max_rate, "bottleneck": capacity.bottleneck, "latency_ms": curve,
        }
    if args.json:
        print_json(report)
        return 0
    print("augury demo: the performance model on the bundled examples\n")
    for job, r in report["examples"].items():
        print(f"{job:<12} {r['file']:<26} max_rate {r['max_rate']:>10,.1f} tuples/s  bottleneck {r['bottleneck']}")
        for load, lat in r["latency_ms"].items():
            print(f"{'':<12} at {load:>4} of max_rate: latency mean {lat['mean']:.3f} ms, "
                  f"p95 {lat['p95']:.3f} ms, p99 {lat['p99']:.3f} ms")
    return 0
