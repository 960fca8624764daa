"""Where the true-profile model's latency error near saturation comes from (issue 27), per
configuration of the ``accuracy`` experiment's random DAGs, in a few minutes instead of the full run.

For each job (default random-1 and random-2) it rebuilds the full ``accuracy`` run's unseen
configurations (the same seeded draws: the examples before the random DAGs consume the generator
first) and, per configuration:

1. **max rate**: the model's (true profile, the testbed's queue capacity as ``buffer_tuples``, as
   ``accuracy``'s ``pred_true``), the testbed's as ``accuracy`` measures it (same seed, warm-up
   and length: ``FULL.max_rate_s``, 60 s before the lengths scaled with the load), and a long
   measurement (``--long-s`` simulated seconds, another seed) that shows how much of the
   difference is the accuracy measurement's sampling noise;
2. at each load (fractions of the accuracy-style measured max rate, ``accuracy``'s seeds): the
   measured and predicted mean and p99 latency (the accuracy point itself), and per operator the
   hottest instance's utilization (testbed: busy time / time; model: ``max_utilization``), the
   back-pressured fraction, and the mean sojourn per visit (testbed: ``operator_stats``; model:
   ``sojourn_ms``);
3. the accuracy point's rate again, measured over ``--long-s`` x ``--repeats`` (other seeds):
   an estimate of the testbed's expected latency at that rate (``oracle``). The model against
   it is the queueing approximation's own error at that rate; the accuracy measurement (its
   warm-up and length from ``FULL.point_seconds``) against it
   is the accuracy measurement's noise (what a perfect model would err by).

Units: tuples/s, ms. Output: one CSV row per (job, configuration, load, operator) in ``--out``
and a printed summary. No model or testbed code is changed; nothing is written to mlflow.

    python -m experiments.saturation_diag [--jobs random-1,random-2] [--loads 0.85,0.95]
        [--long-s 1200] [--repeats 2] [--configs 10] [--fitted DIR] [--out /tmp/sat-diag.csv]
    python -m experiments.saturation_diag --fork [--out /tmp/fork.csv]

``--fork`` runs only the fork re-merge sweep behind ``modeler.queueing._CopyPairs``' note on
the copy pairs near saturation (c's sojourn, testbed vs model, six shapes x 0.2-0.95).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.suite import accuracy as acc


def accuracy_configs(ctx_seed: int = 0) -> dict[str, tuple[int, object, list[dict[str, int]]]]:
    """{label: (job index k in the accuracy run, true model, unseen configurations)}, drawn exactly
    as the full ``accuracy`` run draws them (one generator over every job in order)."""
    from experiments.randomdag import random_model
    from modeler.modelfile import load_model

    repo = Path(__file__).resolve().parents[1]
    jobs = [(e, load_model(repo / "examples" / f"{e}.yaml")) for e in acc.FULL.examples]
    jobs += [(f"random-{s}", random_model(s, job=f"random{s}")) for s in acc.RANDOM_DAGS]
    rng = np.random.default_rng(ctx_seed)
    out = {}
    for k, (label, truth) in enumerate(jobs):
        out[label] = (k, truth, acc.unseen_configs(truth, acc.FULL.unseen_configs, rng))
    return out


def run_testbed(truth, config, rate: float, seconds: float, warmup_s: float, seed: int) -> dict:
    """Latency (mean, p99) and per-operator figures of one testbed run after its warm-up."""
    from experiments.testbed import Testbed, TestbedConfig

    cfg = TestbedConfig(seed=seed)
    bed = Testbed(truth, rate, cfg, parallelism=config)
    bed.advance(warmup_s)
    before_lat = len(bed.latencies_ms())
    stats0 = bed.operator_stats()
    bed.advance(seconds)
    lat = bed.latencies_ms()[before_lat:]
    stats1 = bed.operator_stats()
    frame = bed.frame()
    start = pd.Timestamp(cfg.start_time) + pd.Timedelta(seconds=warmup_s)
    frame = frame[frame["ts"] >= start]
    ops = {}
    for name in stats1:
        n = stats1[name]["processed"] - stats0[name]["processed"]
        soj_tot = (stats1[name]["mean_sojourn_ms"] * stats1[name]["processed"]
                   - (stats0[name]["mean_sojourn_ms"] * stats0[name]["processed"] if stats0[name]["processed"] else 0.0))
        f = frame[frame["operator"] == name]
        per = f.pivot_table(index="instance", columns="metric", values="value", aggfunc="sum")
        span = per[["busy_ms", "backpressured_ms", "idle_ms"]].sum(axis=1)
        busy = per["busy_ms"] / span
        bp = per["backpressured_ms"] / span
        ops[name] = {"sojourn_ms": soj_tot / n if n else math.nan, "processed_per_s": n / seconds,
                     "hot_util": float(busy.max()), "mean_util": float(busy.mean()),
                     "bp_frac": float(bp.max()),
                     "queue_len_max": float(per["queue_len"].max() / len(f["ts"].unique()))
                     if "queue_len" in per else math.nan}
    return {"latency_mean": float(lat.mean()) if len(lat) else math.nan,
            "latency_p99": float(np.percentile(lat, 99)) if len(lat) else math.nan, "ops": ops}


def model_point(model, config, rate: float) -> dict:
    from modeler.queueing import predict

    p = predict(model, config, rate)
    return {"latency_mean": p.latency_ms["mean"] or math.nan, "latency_p99": p.latency_ms["p99"] or math.nan,
            "max_rate": p.max_rate, "bottleneck": p.bottleneck,
            "ops": {n: {"sojourn_ms": o.sojourn_ms if o.sojourn_ms is not None else math.nan,
                        "hot_util": o.max_utilization, "mean_util": o.utilization} for n, o in p.operators.items()}}


def diagnose(label: str, k: int, truth, configs, loads, long_s: float, repeats: int, fitted=None,
             progress=print) -> list[dict]:
    from experiments.recording import measure_max_rate

    model = acc.engine_buffer(truth)
    rows = []
    for c, config in enumerate(configs):
        cfg_label = ",".join(f"{n}={p}" for n, p in config.items() if not truth.operator(n).is_source)
        seed = 0 * 1000 + 100 * k + 10 * c + 50
        m_model = model_point(model, config, 1.0)["max_rate"]
        warm = acc.max_rate_warmup_s(truth, config, acc.FULL)
        m_acc = measure_max_rate(truth, config, seconds=acc.FULL.max_rate_s, warmup_s=warm, seed=seed)
        m_long = measure_max_rate(truth, config, seconds=long_s, warmup_s=warm, seed=seed + 7_000_000)
        progress(f"{label} [{cfg_label}] max rate: model {m_model:.1f}, measured({acc.FULL.max_rate_s:g} s) {m_acc:.1f} "
                 f"({100 * (m_model / m_acc - 1):+.2f} %), measured({long_s:g} s) {m_long:.1f} "
                 f"({100 * (m_model / m_long - 1):+.2f} %)")
        for load in loads:
            j = acc.FULL.loads.index(load) if load in acc.FULL.loads else 100 + int(1000 * load)
            rate = load * m_acc
            warm_s, measure_s = acc.FULL.point_seconds(load)  # as accuracy measures the point
            got = run_testbed(truth, config, rate, measure_s, warm_s, seed + j + 1)
            pred = model_point(model, config, rate)
            # The same rate measured long (other seeds): the testbed's expected latency there.
            rate_k = rate
            pred_k = pred
            longs = [run_testbed(truth, config, rate_k, long_s, 60.0, seed + 9_000_000 + 17 * r + j)
                     for r in range(repeats)]
            long_mean = float(np.mean([g["latency_mean"] for g in longs]))
            long_p99 = float(np.mean([g["latency_p99"] for g in longs]))
            base = {"job": label, "config": cfg_label, "load": load, "max_rate_model": m_model,
                    "max_rate_acc": m_acc, "max_rate_long": m_long,
                    "acc_meas_mean": got["latency_mean"], "acc_pred_mean": pred["latency_mean"],
                    "acc_meas_p99": got["latency_p99"], "acc_pred_p99": pred["latency_p99"],
                    "oracle_meas_mean": long_mean, "oracle_pred_mean": pred_k["latency_mean"],
                    "oracle_meas_p99": long_p99, "oracle_pred_p99": pred_k["latency_p99"],
                    "oracle_mean_spread": float(np.ptp([g["latency_mean"] for g in longs])) if repeats > 1 else math.nan,
                    "bottleneck": pred["bottleneck"]}
            if fitted is not None:
                fit = model_point(fitted, config, rate)
                base.update({"acc_fit_mean": fit["latency_mean"], "acc_fit_p99": fit["latency_p99"],
                             "max_rate_fit": fit["max_rate"]})
            progress(f"  load {load:g}: accuracy point mean {got['latency_mean']:.2f} vs {pred['latency_mean']:.2f} "
                     f"({100 * (pred['latency_mean'] / got['latency_mean'] - 1):+.1f} %), p99 "
                     f"{got['latency_p99']:.1f} vs {pred['latency_p99']:.1f} "
                     f"({100 * (pred['latency_p99'] / got['latency_p99'] - 1):+.1f} %); oracle ({long_s:g} s x{repeats}) "
                     f"mean {long_mean:.2f} vs {pred_k['latency_mean']:.2f} ({100 * (pred_k['latency_mean'] / long_mean - 1):+.1f} %), "
                     f"p99 {long_p99:.1f} vs {pred_k['latency_p99']:.1f} ({100 * (pred_k['latency_p99'] / long_p99 - 1):+.1f} %)")
            for name in truth.operator_names:
                if truth.operator(name).is_source:
                    continue
                tb_k = {key: float(np.mean([g["ops"][name][key] for g in longs])) for key in longs[0]["ops"][name]}
                row = {**base, "operator": name, "parallelism": config[name],
                       "acc_meas_hot_util": got["ops"][name]["hot_util"], "acc_pred_hot_util": pred["ops"][name]["hot_util"],
                       "acc_meas_sojourn": got["ops"][name]["sojourn_ms"], "acc_pred_sojourn": pred["ops"][name]["sojourn_ms"],
                       "acc_meas_bp": got["ops"][name]["bp_frac"],
                       "oracle_meas_hot_util": tb_k["hot_util"], "oracle_pred_hot_util": pred_k["ops"][name]["hot_util"],
                       "oracle_meas_sojourn": tb_k["sojourn_ms"], "oracle_pred_sojourn": pred_k["ops"][name]["sojourn_ms"],
                       "oracle_meas_bp": tb_k["bp_frac"]}
                rows.append(row)
                progress(f"    {name:>4} p={config[name]}: hot util {tb_k['hot_util']:.3f} vs {pred_k['ops'][name]['hot_util']:.3f}, "
                         f"sojourn {tb_k['sojourn_ms']:.2f} vs {pred_k['ops'][name]['sojourn_ms']:.2f} ms "
                         f"({100 * (pred_k['ops'][name]['sojourn_ms'] / tb_k['sojourn_ms'] - 1):+.1f} %), bp {tb_k['bp_frac']:.3f}")
    return rows


FORK_SHAPES = ({}, {"p": 2}, {"p": 2, "grouping": "key"}, {"sel2": 0.5}, {"sa": 4.0}, {"sa": 1.0, "sc": 1.0})
"""Shapes of ``fork_model`` (the copy-pairs sweep of ``queueing._CopyPairs``' docstring)."""


def fork_model(p: int = 1, grouping: str = "shuffle", sa: float = 0.5, sc: float = 2.0, sel2: float = 1.0):
    """src -> a -> c and src -> c (every source tuple reaches c twice): the smallest fork that
    re-merges (``tests/modeler/test_queueing.py``'s ``_fork``). Service times ms."""
    from modeler.modelfile import parse_model

    return parse_model({
        "augury": 1, "job": "fork", "network_delay_ms": 0.05,
        "operators": [{"name": "src", "role": "source", "parallelism": 1},
                      {"name": "a", "parallelism": 1, "service_time_ms": sa},
                      {"name": "c", "parallelism": p, "service_time_ms": sc, "max_parallelism": 32}],
        "edges": [{"from": "src", "to": "a"}, {"from": "a", "to": "c", "grouping": grouping},
                  {"from": "src", "to": "c", "grouping": grouping, "selectivity": sel2}]}, source="fork")


def fork_sweep(loads=(0.2, 0.5, 0.8, 0.9, 0.95), progress=print) -> list[dict]:
    """c's mean sojourn, testbed (2 x 400 s below 0.9, 4 x 1,200 s from 0.9) against the
    model, per ``FORK_SHAPES`` shape and utilization of c."""
    from experiments.testbed import Testbed, TestbedConfig
    from modeler.queueing import compile_model, predict

    rows = []
    for shape in FORK_SHAPES:
        model = fork_model(**shape)
        compiled = compile_model(model)
        unit = predict(compiled, None, 1.0).operators["c"]
        for rho in loads:
            rate = rho * unit.parallelism / (model.operator("c").service_time_ms / 1000.0) / unit.arrival_rate
            runs, seconds = (2, 400.0) if rho < 0.9 else (4, 1200.0)
            measured = []
            for seed in range(runs):
                bed = Testbed(model, rate, TestbedConfig(seed=1 + seed))
                bed.run_until(seconds)
                measured.append(bed.operator_stats()["c"]["mean_sojourn_ms"])
            meas = float(np.mean(measured))
            pred = predict(compiled, None, rate).operators["c"].sojourn_ms
            rows.append({"shape": str(shape), "rho": rho, "measured_ms": meas, "predicted_ms": pred})
            progress(f"fork {shape} rho {rho:g}: c's sojourn measured {meas:.3f} ms, model {pred:.3f} ms "
                     f"({100 * (pred / meas - 1):+.1f} %)")
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default="random-1,random-2")
    ap.add_argument("--loads", default="0.85,0.95")
    ap.add_argument("--long-s", type=float, default=1200.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--configs", type=int, default=10, help="first N of the accuracy run's configurations")
    ap.add_argument("--out", default="/tmp/sat-diag.csv")
    ap.add_argument("--fitted", default=None,
                    help="directory of calibrated models fitted-<job>.yaml (e.g. from accuracy's calibration): "
                         "their predictions at the accuracy points are added")
    ap.add_argument("--fork", action="store_true",
                    help="only the fork re-merge sweep (c's sojourn, testbed vs model; FORK_SHAPES)")
    args = ap.parse_args(argv)
    if args.fork:
        pd.DataFrame(fork_sweep()).to_csv(args.out, index=False)
        print(f"rows: {args.out}")
        return
    loads = [float(x) for x in args.loads.split(",")]
    table = accuracy_configs()
    rows = []
    for label in args.jobs.split(","):
        k, truth, configs = table[label]
        fitted = None
        if args.fitted and (Path(args.fitted) / f"fitted-{label}.yaml").exists():
            from modeler.modelfile import load_model

            fitted = load_model(Path(args.fitted) / f"fitted-{label}.yaml")
        rows += diagnose(label, k, truth, configs[: args.configs], loads, args.long_s, args.repeats, fitted)
    df = pd.DataFrame(rows)
    df.to_csv(args.out, index=False)
    pts = df.drop_duplicates(["job", "config", "load"])
    print("\nmedian |error| per job and load (accuracy point: model vs accuracy measurement / model vs oracle; noise: accuracy measurement vs oracle):")
    for (job, load), g in pts.groupby(["job", "load"]):
        e = lambda a, b: float(np.median(np.abs(g[a] / g[b] - 1)))
        s = lambda a, b: float(np.median(g[a] / g[b] - 1))
        mr = g.drop_duplicates("config")
        print(f"  {job} {load:g}: mean {100 * e('acc_pred_mean', 'acc_meas_mean'):.1f} % / "
              f"{100 * e('oracle_pred_mean', 'oracle_meas_mean'):.1f} % (signed {100 * s('oracle_pred_mean', 'oracle_meas_mean'):+.1f} %); "
              f"p99 {100 * e('acc_pred_p99', 'acc_meas_p99'):.1f} % / {100 * e('oracle_pred_p99', 'oracle_meas_p99'):.1f} % "
              f"(signed {100 * s('oracle_pred_p99', 'oracle_meas_p99'):+.1f} %); noise floor mean "
              f"{100 * e('acc_meas_mean', 'oracle_meas_mean'):.1f} %, p99 {100 * e('acc_meas_p99', 'oracle_meas_p99'):.1f} %; max rate model/accuracy "
              f"{100 * float(np.median(np.abs(mr['max_rate_model'] / mr['max_rate_acc'] - 1))):.2f} %, model/long "
              f"signed {100 * float(np.median(mr['max_rate_model'] / mr['max_rate_long'] - 1)):+.2f} %")
        if "acc_fit_mean" in g:
            print(f"      calibrated model: mean {100 * e('acc_fit_mean', 'acc_meas_mean'):.1f} % / "
                  f"{100 * e('acc_fit_mean', 'oracle_meas_mean'):.1f} %, p99 {100 * e('acc_fit_p99', 'acc_meas_p99'):.1f} % / "
                  f"{100 * e('acc_fit_p99', 'oracle_meas_p99'):.1f} %; max rate fitted/long signed "
                  f"{100 * float(np.median(mr['max_rate_fit'] / mr['max_rate_long'] - 1)):+.2f} %, worst "
                  f"{100 * float((mr['max_rate_fit'] / mr['max_rate_long'] - 1).abs().max()):.2f} %")
    print(f"rows: {args.out}")


if __name__ == "__main__":
    main()
