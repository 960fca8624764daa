"""Run the whole experiment suite, one experiment after another, and time it.

    python -m experiments.run_suite [--quick] [--only NAME ...] [--seed N ...] [--json F]

Each experiment runs as its own ``augury experiment run NAME`` process (a fresh interpreter, its
own Spark and Flink as the experiment starts them; logged to mlflow at
``experiments.tracking.tracking_uri()``), so a failure in one does not stop the others and the
wall time of each is what a user running it would see. Prints one line per experiment (name,
exit code, wall seconds) and the total; ``--json F`` writes the same as JSON. Exit code: 0 when
every experiment exited 0, else 1 (2 on bad arguments).

Issue 19's budget is the full (not ``--quick``) suite in under 90 minutes on the 2-core machine;
``docs/RESULTS.md`` is then regenerated with ``python -m experiments.results --write``. Timings
are only meaningful on an otherwise idle machine: print ``os.getloadavg()`` before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from experiments.harness import experiment_names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the --quick variants (as in CI)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these (repeatable)")
    parser.add_argument("--seed", type=int, action="append", default=[], metavar="N",
                        help="seeds passed to every experiment (repeatable); default: none, so each experiment "
                             "runs its own default set (one --seed would cut the multi-seed ones to that seed)")
    parser.add_argument("--json", type=Path, default=None, metavar="F", help="also write the timings as JSON")
    args = parser.parse_args(argv)
    names = list(experiment_names())
    unknown = [n for n in args.only if n not in names]
    if unknown:
        print(f"error: --only: unknown experiment {unknown[0]!r} (known: {', '.join(names)})", file=sys.stderr)
        return 2
    if args.only:
        names = [n for n in names if n in args.only]
    augury = Path(sys.executable).with_name("augury")
    command = [str(augury)] if augury.exists() else [sys.executable, "-m", "augury"]
    rows, start = [], time.monotonic()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    for name in names:
        began = time.monotonic()
        cmd = command + ["experiment", "run", name] + [f"--seed={s}" for s in args.seed] + (["--quick"] if args.quick else [])
        code = subprocess.run(cmd, check=False).returncode
        seconds = time.monotonic() - began
        rows.append({"name": name, "exit_code": code, "seconds": round(seconds, 1),
                     "load_after": round(os.getloadavg()[0], 2)})
        print(f"{name:<22} exit {code}  {seconds:8.1f} s  (load {os.getloadavg()[0]:.2f})", flush=True)
    total = time.monotonic() - start
    print(f"{'total':<22} {'':7} {total:8.1f} s = {total / 60:.1f} min "
          f"({'quick' if args.quick else 'full'} suite, {len(rows)} experiments)", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"quick": args.quick, "seeds": args.seed, "experiments": rows,
                                         "total_seconds": round(total, 1)}, indent=2) + "\n")
    return 0 if all(r["exit_code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
