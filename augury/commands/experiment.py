"""``augury experiment run NAME [--quick] [--seed N ...] [--model FILE ...] [--trace FILE ...]
[--out DIR]`` and ``augury experiment list``.

Runs a named, seeded experiment of ``experiments/suite/`` and logs it to mlflow (see
``experiments/harness.py``). ``--seed`` may be repeated (several seeds, for experiments that
take them; the first is ``seed``); ``--model`` / ``--trace`` hand user files to experiments
that take them (``augury experiment list`` says which); giving one to an experiment that takes
none exits 2 naming the flag. ``--out DIR`` keeps the run's files in DIR and writes every result
table there as ``DIR/<table>.csv`` (``runs.csv``, ``summary.csv``, ...) with ``summary.md`` and
``result.json``, besides mlflow. Prints the headline metrics, the tables' sizes and the mlflow
run id; ``--json`` prints one object ``{"experiment", "quick", "seed", "seeds", "models",
"traces", "mlflow_run_id", "wall_seconds", "params", "metrics", "tables", "figures", "summary",
"csv"}`` (``csv``: the files ``--out`` wrote, else empty). Exit 0 when the run finished, 2 on
bad input, 3 when the environment failed (e.g. the Flink cluster).
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
    run_p.add_argument("--seed", type=int, action="append", metavar="N",
                       help="random seed (default 0); repeat for several seeds (experiments that take them)")
    run_p.add_argument("--model", action="append", default=[], metavar="FILE",
                       help="a model file to include (experiments that take models; repeatable)")
    run_p.add_argument("--trace", action="append", default=[], metavar="FILE",
                       help="a trace file to use (experiments that take traces; repeatable)")
    run_p.add_argument("--out", metavar="DIR",
                       help="keep the run's files in DIR and write every result table there as CSV "
                            "(default: temporary, tables only in mlflow)")
    run_p.add_argument("--spark-master", default="local[2]", help="Spark master URL")
    run_p.add_argument("--json", action="store_true", help="print one JSON object")
    add_verbose_flag(run_p)
    run_p.set_defaults(func=_run)
    list_p = sub.add_parser("list", help="list the experiments")
    list_p.add_argument("--json", action="store_true", help="print one JSON object")
    list_p.set_defaults(func=_list)


def _run(args: argparse.Namespace) -> int:
    from experiments.harness import check_inputs, load_experiment, run_experiment

    module = load_experiment(args.name)  # an unknown name is one line on stderr, before any log line
    seeds = tuple(args.seed or (0,))
    check_inputs(module, seeds, tuple(args.model), tuple(args.trace))  # likewise a flag it does not take
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    out = Path(args.out) if args.out else None
    with library_output_to_log(args, f"experiment-{args.name}", say, out_dir=args.out):
        done = run_experiment(args.name, quick=args.quick, seed=seeds[0], workdir=out,
                              spark_master=args.spark_master, progress=say,
                              seeds=seeds if args.seed else None, models=tuple(args.model),
                              traces=tuple(args.trace), out=out)
    r = done.result
    csv = [str(out / f"{k}.csv") for k in r.tables] if out is not None else []
    if args.json:
        print_json({"experiment": done.name, "quick": bool(args.quick), "seed": seeds[0], "seeds": list(seeds),
                    "models": list(args.model), "traces": list(args.trace),
                    "mlflow_run_id": done.mlflow_run_id, "wall_seconds": done.seconds,
                    "params": dict(r.params), "metrics": dict(r.metrics),
                    "tables": {k: len(v) for k, v in r.tables.items()},
                    "figures": {k: str(v) for k, v in r.figures.items()}, "summary": r.summary,
                    "csv": csv})
        return 0
    print(f"experiment {done.name}{' (quick)' if args.quick else ''}: {done.seconds:.0f} s, "
          f"mlflow run {done.mlflow_run_id}")
    if csv:
        print(f"  tables written to {out}/: {', '.join(Path(c).name for c in csv)}")
    for key, value in r.metrics.items():
        print(f"  {key:<48} {value:.4g}" if isinstance(value, float) else f"  {key:<48} {value}")
    if r.summary:
        print("\n" + r.summary)
    return 0


def _list(args: argparse.Namespace) -> int:
    from experiments.harness import experiment_names, load_experiment

    from experiments.harness import INPUT_FLAGS, inputs

    modules = {n: load_experiment(n) for n in experiment_names()}
    names = {n: m.DESCRIPTION for n, m in modules.items()}
    if args.json:
        print_json({"experiments": names,
                    "inputs": {n: [INPUT_FLAGS[k] for k in inputs(m)] for n, m in modules.items()}})
    else:
        for n, d in names.items():
            takes = [INPUT_FLAGS[k] for k in inputs(modules[n])]
            print(f"{n:<18} {d}" + (f" (takes {', '.join(takes)})" if takes else ""))
    return 0
