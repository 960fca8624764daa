"""``augury experiment run NAME [--quick]`` and ``augury experiment list``.

Runs a named, seeded experiment of ``experiments/suite/`` and logs it to mlflow (see
``experiments/harness.py``). Prints the headline metrics, the tables' sizes and the mlflow run
id; ``--json`` prints one object ``{"experiment", "quick", "seed", "mlflow_run_id",
"wall_seconds", "params", "metrics", "tables", "figures", "summary"}``. Exit 0 when the run
finished, 2 on bad input, 3 when the environment failed (e.g. the Flink cluster).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from augury.commands._common import print_json
from augury.commands._logs import add_verbose_flag, library_output_to_log


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("experiment", help="run the evaluation experiments (mlflow-tracked)",
                                   description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="experiment_command", required=True, metavar="{run,list}")
    run_p = sub.add_parser("run", help="run one experiment and log it to mlflow")
    run_p.add_argument("name", metavar="NAME", help="experiment name (see `augury experiment list`)")
    run_p.add_argument("--quick", action="store_true", help="the short variant (as run in CI)")
    run_p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    run_p.add_argument("--out", help="keep the run's files in this directory (default: temporary)")
    run_p.add_argument("--spark-master", default="local[2]", help="Spark master URL")
    run_p.add_argument("--json", action="store_true", help="print one JSON object")
    add_verbose_flag(run_p)
    run_p.set_defaults(func=_run)
    list_p = sub.add_parser("list", help="list the experiments")
    list_p.add_argument("--json", action="store_true", help="print one JSON object")
    list_p.set_defaults(func=_list)


def _run(args: argparse.Namespace) -> int:
    from experiments.harness import load_experiment, run_experiment

    load_experiment(args.name)  # an unknown name is one line on stderr, before any log line
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    with library_output_to_log(args, f"experiment-{args.name}", say, out_dir=args.out):
        done = run_experiment(args.name, quick=args.quick, seed=args.seed,
                              workdir=Path(args.out) if args.out else None,
                              spark_master=args.spark_master, progress=say)
    r = done.result
    if args.json:
        print_json({"experiment": done.name, "quick": bool(args.quick), "seed": args.seed,
                    "mlflow_run_id": done.mlflow_run_id, "wall_seconds": done.seconds,
                    "params": dict(r.params), "metrics": dict(r.metrics),
                    "tables": {k: len(v) for k, v in r.tables.items()},
                    "figures": {k: str(v) for k, v in r.figures.items()}, "summary": r.summary})
        return 0
    print(f"experiment {done.name}{' (quick)' if args.quick else ''}: {done.seconds:.0f} s, "
          f"mlflow run {done.mlflow_run_id}")
    for key, value in r.metrics.items():
        print(f"  {key:<48} {value:.4g}" if isinstance(value, float) else f"  {key:<48} {value}")
    if r.summary:
        print("\n" + r.summary)
    return 0


def _list(args: argparse.Namespace) -> int:
    from experiments.harness import experiment_names, load_experiment

    names = {n: load_experiment(n).DESCRIPTION for n in experiment_names()}
    if args.json:
        print_json({"experiments": names})
    else:
        for n, d in names.items():
            print(f"{n:<18} {d}")
    return 0
