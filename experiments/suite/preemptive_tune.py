"""Compare augury's pre-emptive settings on the held-out tuning days (never the evaluation days).

``python -m experiments.suite.preemptive_tune [--days 2] [--seed 0] [--set FIELD=VALUE ...]
[--flink] [--dag wordcount]`` replays ``experiments.suite.preemptive.TUNING_DAYS`` (every trace,
``--days`` from each listed start) with augury on the job's *true* model (the experiment learns
it; the true model separates the schedule's effect from calibration's, and is faster) and prints
per trace and in total: violation minutes (of which restarts), instance-hours, changes, and the
cost at the schedule's exchange rate (violation seconds + instance-hours x
``violation_s_per_instance_hour``), in minutes. ``--set`` overrides a ``Params`` field of the
``preemptive`` experiment (e.g. ``--set solver=priced --set max_reconfigurations_per_day=4``);
``--flink`` adds the Flink rules' row; ``--hindsight 5,20,60`` adds perfect foresight's
frontier (``hindsight/<s>`` rows: the cheapest schedule for the actual load at each price);
``--perfect-forecast`` adds ``augury/perfect``: augury with a forecaster that knows the load
(``experiments.tracereplay.PerfectForecaster``), so what its forecasts cost and what its
schedule rules cost can be told apart. Settings are chosen here and then measured once on the
evaluation days by ``augury experiment run preemptive``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time


def _value(field: dataclasses.Field, raw: str):
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    if "bool" in kind:
        if raw.lower() not in ("true", "false", "1", "0"):
            raise SystemExit(f"--set {field.name}: {raw!r} is not a boolean")
        return raw.lower() in ("true", "1")
    if "int" in kind and "float" not in kind:
        return int(raw)
    if "float" in kind:
        return None if raw.lower() == "none" else float(raw)
    return raw


def main(argv: list[str] | None = None) -> int:
    from experiments import bundled
    from experiments.suite.preemptive import DAGS, PERFECT_FORECAST, TUNING_DAYS, Params, run_trace
    from experiments.tracereplay import summary

    ap = argparse.ArgumentParser(prog="python -m experiments.suite.preemptive_tune", description=__doc__.split("\n")[0])
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--flink", action="store_true", help="also replay the Flink autoscaler's rules")
    ap.add_argument("--hindsight", default="", metavar="S,S,...",
                    help="also replay hindsight/<s> at these prices (s of violation per instance-hour)")
    ap.add_argument("--perfect-forecast", action="store_true",
                    help="also replay augury with a forecaster that knows the load (augury/perfect)")
    ap.add_argument("--dag", default=DAGS[0], choices=DAGS)
    ap.add_argument("--trace", action="append", default=None, choices=sorted(TUNING_DAYS))
    args = ap.parse_args(argv)
    fields = {f.name: f for f in dataclasses.fields(Params)}
    overrides = {}
    for item in args.set:
        name, _, raw = item.partition("=")
        if name not in fields or not raw:
            raise SystemExit(f"--set {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(fields)}")
        overrides[name] = _value(fields[name], raw)
    params = dataclasses.replace(Params(), **overrides)
    try:
        prices = [float(x) for x in args.hindsight.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--hindsight {args.hindsight!r}: expected prices like 5,20,60") from None
    if any(not math.isfinite(x) or x < 0 for x in prices):
        raise SystemExit(f"--hindsight {args.hindsight!r}: prices must be finite and >= 0")
    policies = ("augury",) + (("flink-autoscaler",) if args.flink else ()) + tuple(f"hindsight/{x:g}" for x in prices) \
        + ((PERFECT_FORECAST,) if args.perfect_forecast else ())
    rate = params.violation_s_per_instance_hour
    totals: dict[str, list[float]] = {}
    started = time.perf_counter()
    print(f"tuning days, {args.days:g} d per trace, seed {args.seed}, {args.dag}, "
          f"overrides {overrides or 'none'}")
    print(f"{'trace':<12} {'policy':<18} {'viol min':>9} {'restart':>8} {'inst-h':>8} {'changes':>8} {'cost min':>9}")
    for trace in args.trace or list(TUNING_DAYS):
        rows = run_trace(trace, params, args.days, args.seed, bundled.data_dir(), bundled.traces_dir(),
                         lambda _msg: None, policies=policies, spec=TUNING_DAYS[trace], dag=args.dag)
        for _, result, _ in rows:
            s = summary(result, args.days)
            cost = s["violation_minutes"] + s["instance_hours"] * rate / 60.0
            t = totals.setdefault(s["policy"], [0.0] * 5)
            for k, v in enumerate((s["violation_minutes"], s["restart_violation_minutes"], s["instance_hours"],
                                   s["reconfigurations"], cost)):
                t[k] += v
            print(f"{trace:<12} {s['policy']:<18} {s['violation_minutes']:>9.1f} {s['restart_violation_minutes']:>8.1f} "
                  f"{s['instance_hours']:>8.1f} {s['reconfigurations']:>8d} {cost:>9.1f}", flush=True)
    for policy, t in totals.items():
        print(f"{'all':<12} {policy:<18} {t[0]:>9.1f} {t[1]:>8.1f} {t[2]:>8.1f} {int(t[3]):>8d} {t[4]:>9.1f}")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
