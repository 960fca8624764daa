"""``augury whatif MODEL --rates a:b:n [--sweep op=1..16 ...] [--configs FILE] --out TABLE.csv|.parquet
[--plots DIR] [--spark-master URL] [--json]``: capacity planning over a sweep of configurations
and rates (``scheduler.whatif``), streamed into the table chunk by chunk."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from augury.commands._common import print_json
from augury.commands.plan import add_target_flags, targets
from modeler.errors import UsageError

#: Sweeps with at least this many rows show a progress bar (on a terminal).
PROGRESS_MIN_ROWS = 100_000
#: Lines drawn at most in the latency-against-rate plot.
MAX_LATENCY_LINES = 8
#: Configurations drawn individually in the max-rate plot at most (beyond: the band only).
MAX_SCATTER = 2_000


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "whatif", help="sweep rates and configurations: predictions table, max rates, cheapest configuration per rate",
        description="Predict every configuration of a sweep at every rate; write the table (CSV or Parquet), "
                    "the max sustainable rate per configuration and the cheapest configuration per rate.")
    parser.add_argument("model", metavar="MODEL", help="model file (YAML or JSON)")
    parser.add_argument("--rates", required=True, metavar="A:B:N",
                        help="N evenly spaced input rates from A to B tuples/s (or one rate)")
    parser.add_argument("--sweep", action="append", default=[], metavar="OP=VALUES",
                        help="parallelisms to try for OP: 1..16, 1..16:2, 1,2,4,8 (repeat: cartesian product)")
    parser.add_argument("--configs", default=None, metavar="FILE",
                        help="configurations from a file: CSV/Parquet (a column per operator) or JSON list of {op: p}")
    parser.add_argument("--out", required=True, metavar="TABLE", help="the table to write: .csv or .parquet")
    parser.add_argument("--plots", default=None, metavar="DIR", help="write max_rate.png, latency.png, cheapest.png here")
    add_target_flags(parser)
    parser.add_argument("--spark-master", default=None, metavar="URL",
                        help="distribute the sweep over Spark (e.g. local[2], spark://host:7077); default: local")
    parser.add_argument("--spark-partitions", type=int, default=None, metavar="N",
                        help="partitions per Spark block (default: the cluster's default parallelism)")
    parser.add_argument("--chunk-rows", type=int, default=50_000, metavar="N",
                        help="rows predicted and written per chunk (bounds memory; default 50000)")
    parser.add_argument("--no-progress", action="store_true", help="never show the progress bar")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


# ---------------------------------------------------------------------- the run


class _Frontier:
    """Per instance count: the best and worst max sustainable rate (and a sample of points)."""

    def __init__(self) -> None:
        self.best: dict[int, tuple[float, int]] = {}
        self.worst: dict[int, float] = {}
        self.points: list[tuple[int, float]] = []
        self.count = 0

    def update(self, configs: pd.DataFrame) -> None:
        for inst, group in configs.groupby("instances"):
            i = int(group["max_rate"].to_numpy().argmax())
            top, cid = float(group["max_rate"].iloc[i]), int(group["config_id"].iloc[i])
            if inst not in self.best or top > self.best[inst][0]:
                self.best[int(inst)] = (top, cid)
            low = float(group["max_rate"].min())
            self.worst[int(inst)] = min(low, self.worst.get(int(inst), np.inf))
        if self.count < MAX_SCATTER:
            take = configs.iloc[: MAX_SCATTER - self.count]
            self.points += list(zip(take["instances"].astype(int), take["max_rate"].astype(float)))
        self.count += len(configs)

    def pareto(self) -> list[tuple[int, float, int]]:
        """(instances, max_rate, config_id) where more instances buy a higher max rate."""
        out, top = [], -np.inf
        for inst in sorted(self.best):
            rate, cid = self.best[inst]
            if rate > top:
                out.append((inst, rate, cid))
                top = rate
        return out


def run(args: argparse.Namespace) -> int:
    from modeler.modelfile import load_model
    from modeler.queueing import compile_model
    from scheduler import whatif as W

    rates = W.parse_rates(args.rates, "--rates")
    sweeps = [W.parse_sweep(s, "--sweep") for s in args.sweep]
    u, slo, stat = targets(args)
    goal = W.Targets(utilization_target=u, latency_slo_ms=slo, latency_stat=stat)
    out = Path(args.out)
    if out.suffix.lower() not in (".csv", ".parquet"):
        raise UsageError("the table must end in .csv or .parquet", field="--out", value=args.out)
    if args.sweep and args.configs:
        raise UsageError("give either --sweep or --configs, not both", field="--configs", value=args.configs)
    if args.chunk_rows < 1:
        raise UsageError("expected an integer >= 1", field="--chunk-rows", value=args.chunk_rows)
    if args.spark_partitions is not None and args.spark_partitions < 1:
        raise UsageError("expected an integer >= 1", field="--spark-partitions", value=args.spark_partitions)
    model = load_model(args.model)
    compiled = compile_model(model)
    space = W.read_configs(args.configs, compiled) if args.configs else W.sweep_space(compiled, sweeps)
    total = W.sweep_rows(space, rates)
    from modeler.limits import MAX_WHATIF_ROWS

    if total > MAX_WHATIF_ROWS:  # checked before any row is computed or any file is created
        raise UsageError(f"the table would have {total:,} rows ({space.size:,} configurations x {len(rates):,} "
                         f"rates; the documented limit is {MAX_WHATIF_ROWS:,}): sweep fewer configurations or rates",
                         field="--rates", value=args.rates)
    from history.files import check_writable

    check_writable(out, "--out")  # its directory writable or creatable (exit 3 naming --out), before the work
    if args.plots:  # checked before the work too, not after the table is written
        check_writable(Path(args.plots) / "max_rate.png", "--plots")

    spark, stop_spark = None, False
    if args.spark_master:
        from pyspark.sql import SparkSession

        from history.spark import spark_session

        stop_spark = SparkSession.getActiveSession() is None
        spark = spark_session(master=args.spark_master, app_name="augury-whatif")
        chunks = W.iter_spark_predictions(spark, model, space, rates, block_rows=max(args.chunk_rows, 1_000_000),
                                          partitions=args.spark_partitions, chunk_rows=args.chunk_rows)
    else:
        chunks = W.iter_predictions(compiled, space, rates, chunk_rows=args.chunk_rows)

    from tqdm import tqdm

    show = not args.no_progress and total >= PROGRESS_MIN_ROWS
    configs_path, cheapest_path = W.side_path(out, "max_rate"), W.side_path(out, "cheapest")
    writer = W.TableWriter(out, W.table_schema(compiled.names))
    config_writer = W.TableWriter(configs_path, W.config_schema(compiled.names))
    cheapest = W.CheapestPerRate(goal)
    frontier = _Frontier()
    last_config = -1
    started = time.perf_counter()
    try:
        with tqdm(total=total, unit="rows", unit_scale=True, file=sys.stderr, disable=(None if show else True),
                  desc="whatif", leave=False) as bar:
            for chunk in chunks:
                writer.write(chunk)
                cheapest.update(chunk)
                per_config, last_config = _new_configs(chunk, last_config)
                if len(per_config):
                    config_writer.write(per_config)
                    frontier.update(per_config)
                bar.update(len(chunk))
        writer.close()
        config_writer.close()
    except BaseException as err:
        writer.abort()
        config_writer.abort()
        if spark is not None and _is_spark_failure(err):
            from history.errors import SparkUnavailable

            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise SparkUnavailable(f"the Spark job failed ({first[:300]})", field="--spark-master",
                                   value=args.spark_master) from None
        raise
    finally:
        if spark is not None and stop_spark:
            spark.stop()
    elapsed = time.perf_counter() - started
    best = cheapest.result(rates)
    W.write_frame(best, cheapest_path)

    plots = []
    if args.plots:
        plots = write_plots(Path(args.plots), compiled, space, rates, frontier, best, goal)
    summary = summary_fields(int(writer.rows), compiled, space, rates, goal, frontier, best)
    payload = {
        "rows": summary["rows"], "configurations": summary["configurations"], "rates": summary["rates"],
        "out": str(out), "tables": {"max_rate": str(configs_path), "cheapest": str(cheapest_path)},
        "plots": [str(p) for p in plots],
        "targets": summary["targets"],
        "engine": "spark" if spark is not None else "local",
        "best_max_rate": summary["best_max_rate"],
        "cheapest": summary["cheapest"],
    }
    if args.json:
        print_json(payload)
    else:
        print(format_summary(payload, elapsed))
    return 0 if bool(best["feasible"].all()) else 1


def summary_fields(rows: int, compiled, space, rates, goal, frontier: "_Frontier", best: pd.DataFrame) -> dict:
    """The keys of ``augury whatif --json`` that do not name files: ``rows``, ``configurations``,
    ``rates``, ``targets``, ``best_max_rate``, ``cheapest`` (shared with ``augury serve``)."""
    return {
        "rows": int(rows), "configurations": int(space.size), "rates": int(len(rates)),
        "targets": {"utilization_target": goal.utilization_target, "latency_slo_ms": goal.latency_slo_ms,
                    "latency_stat": goal.latency_stat},
        "best_max_rate": _best_max_rate(frontier, space),
        "cheapest": [_cheapest_entry(row, space, compiled.names) for row in best.to_dict("records")],
    }


def sweep_in_memory(compiled, space, rates, goal, *, chunk_rows: int = 50_000, deadline=None) -> dict:
    """The sweep without writing any table: ``summary_fields`` of every configuration x rate,
    computed chunk by chunk as ``run`` does (``augury serve``'s ``/v1/whatif``). ``deadline``: a
    callable raising when the caller's time budget is spent, called before each chunk."""
    from scheduler import whatif as W

    cheapest = W.CheapestPerRate(goal)
    frontier = _Frontier()
    last_config, rows = -1, 0
    for chunk in W.iter_predictions(compiled, space, rates, chunk_rows=chunk_rows):
        if deadline is not None:
            deadline()
        rows += len(chunk)
        cheapest.update(chunk)
        per_config, last_config = _new_configs(chunk, last_config)
        if len(per_config):
            frontier.update(per_config)
    return summary_fields(rows, compiled, space, rates, goal, frontier, cheapest.result(rates))


def _new_configs(chunk: pd.DataFrame, last_config: int) -> tuple[pd.DataFrame, int]:
    """The per-configuration rows of ``chunk`` not seen before (``config_id`` > ``last_config``)
    and the new last id: a configuration's rows may span two chunks, and its first row carries
    its max rate."""
    from scheduler import whatif as W

    per_config = W.config_table(chunk)
    per_config = per_config[per_config["config_id"] > last_config]
    return per_config, (int(per_config["config_id"].iloc[-1]) if len(per_config) else last_config)


def _is_spark_failure(err: BaseException) -> bool:
    """An error raised by Spark (a failed job, a lost executor, the JVM gone), not by augury."""
    module = type(err).__module__ or ""
    return module.startswith(("pyspark", "py4j"))


def _best_max_rate(frontier: _Frontier, space) -> dict | None:
    if not frontier.best:
        return None
    # The highest max rate; among equals, the fewest instances.
    top = max(r for r, _ in frontier.best.values())
    inst = min(i for i, (r, _) in frontier.best.items() if r == top)
    rate, cid = frontier.best[inst]
    config = space.configs(np.array([cid]))[0]
    return {"config_id": cid, "config": config, "instances": int(sum(config.values())), "max_rate": rate}


def _cheapest_entry(row: dict, space, names) -> dict:
    feasible = bool(row["feasible"])

    def num(x):
        return None if x is None or x is pd.NA or (isinstance(x, float) and np.isnan(x)) else x

    return {
        "rate": float(row["rate"]), "feasible": feasible,
        "config_id": int(row["config_id"]) if feasible else None,
        "config": {n: int(row[f"p_{n}"]) for n in names} if feasible else None,
        "label": space.label([int(row[f"p_{n}"]) for n in names]) if feasible else None,
        "instances": int(row["instances"]) if feasible else None,
        "max_rate": num(row.get("max_rate")) if feasible else None,
        "bottleneck": row.get("bottleneck") if feasible else None,
        "max_utilization": num(row.get("max_utilization")) if feasible else None,
        "latency_ms": {s: (num(row.get(f"latency_{s}_ms")) if feasible else None) for s in ("mean", "p95", "p99")},
    }


def format_summary(payload: dict, elapsed_s: float) -> str:
    t = payload["targets"]
    lines = [f"whatif: {payload['rows']:,} rows ({payload['configurations']:,} configurations x "
             f"{payload['rates']:,} rates) -> {payload['out']}  [{payload['engine']}, {elapsed_s:.1f} s, "
             f"{payload['rows'] / max(elapsed_s, 1e-9):,.0f} rows/s]",
             f"tables: {payload['tables']['max_rate']}, {payload['tables']['cheapest']}"]
    best = payload["best_max_rate"]
    if best:
        cfg = ",".join(f"{k}={v}" for k, v in best["config"].items())
        lines.append(f"highest max sustainable rate: {best['max_rate']:,.1f} tuples/s with {cfg} "
                     f"({best['instances']} instances)")
    target = f"utilization <= {t['utilization_target']:g}"
    if t["latency_slo_ms"] is not None:
        target += f", {t['latency_stat']} <= {t['latency_slo_ms']:g} ms"
    lines.append(f"cheapest configuration per rate ({target}):")
    entries = payload["cheapest"]
    shown = entries if len(entries) <= 20 else [entries[i] for i in np.linspace(0, len(entries) - 1, 20).astype(int)]
    lines.append(f"  {'rate':>12}  {'instances':>9}  {t['latency_stat'] + ' ms':>9}  config")
    for e in shown:
        if e["feasible"]:
            lat = e["latency_ms"][t["latency_stat"]]
            lines.append(f"  {e['rate']:>12,.1f}  {e['instances']:>9}  {lat:>9.2f}  {e['label']}")
        else:
            lines.append(f"  {e['rate']:>12,.1f}  {'-':>9}  {'-':>9}  no configuration meets the targets")
    if len(shown) < len(entries):
        lines.append(f"  ({len(shown)} of {len(entries)} rates shown; all in {payload['tables']['cheapest']})")
    if payload["plots"]:
        lines.append("plots: " + ", ".join(payload["plots"]))
    return "\n".join(lines)


# ------------------------------------------------------------------------- plots


def write_plots(directory: Path, compiled, space, rates: np.ndarray, frontier: _Frontier,
                best: pd.DataFrame, goal) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from scheduler.whatif import predict_rows

    directory.mkdir(parents=True, exist_ok=True)
    paths = []

    # 1. Max sustainable rate per configuration, against its instances.
    fig, ax = plt.subplots(figsize=(8, 5))
    insts = sorted(frontier.best)
    if frontier.count <= MAX_SCATTER and frontier.points:
        xs, ys = zip(*frontier.points)
        ax.scatter(xs, ys, s=12, alpha=0.5, color="tab:blue", label="configuration")
    else:
        ax.fill_between(insts, [frontier.worst[i] for i in insts], [frontier.best[i][0] for i in insts],
                        alpha=0.3, color="tab:blue", label=f"range over {frontier.count:,} configurations")
    pareto = frontier.pareto()
    if pareto:
        ax.plot([p[0] for p in pareto], [p[1] for p in pareto], "o-", color="tab:red",
                label="best per instance count")
        if len(pareto) <= 12:
            for inst, rate, cid in pareto:
                ax.annotate(space.label(space.block(np.array([cid]))[0]), (inst, rate), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("instances (all operators)")
    ax.set_ylabel("max sustainable rate (tuples/s)")
    ax.set_title("Max sustainable rate per configuration")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    paths.append(directory / "max_rate.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    # 2. Latency against rate for a few configurations: the Pareto front (evenly thinned).
    chosen = [p[2] for p in pareto]
    if len(chosen) > MAX_LATENCY_LINES:
        chosen = [chosen[i] for i in np.linspace(0, len(chosen) - 1, MAX_LATENCY_LINES).astype(int)]
    grid = np.linspace(float(rates.min()), float(rates.max()), 200) if len(rates) > 1 else rates
    fig, ax = plt.subplots(figsize=(8, 5))
    col = goal.latency_column
    for cid in chosen:
        sub = type(space)(names=space.names, base=space.base, explicit=space.block(np.array([cid])),
                          varying=space.varying)
        table = predict_rows(compiled, sub, grid, 0, len(grid))
        ax.plot(table["rate"], table[col], "-" if len(grid) > 1 else "o",
                label=f"{space.label(sub.explicit[0])} ({int(table['instances'].iloc[0])})")
    if goal.latency_slo_ms is not None:
        ax.axhline(goal.latency_slo_ms, color="black", ls="--", lw=1, label=f"SLO {goal.latency_slo_ms:g} ms")
    ax.set_yscale("log")
    ax.set_xlabel("input rate (tuples/s)")
    ax.set_ylabel(f"{goal.latency_stat} latency (ms)")
    ax.set_title(f"Latency against rate ({len(chosen)} configurations of the best-per-instances front; "
                 "lines end at saturation)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="best", fontsize=7)
    paths.append(directory / "latency.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    # 3. Cheapest configuration per rate.
    fig, ax = plt.subplots(figsize=(8, 5))
    ok = best[best["feasible"]]
    bad = best[~best["feasible"]]
    if len(ok):
        ax.step(ok["rate"], ok["instances"].astype(float), where="mid", color="tab:green")
        ax.plot(ok["rate"], ok["instances"].astype(float), "o", color="tab:green", ms=4,
                label="fewest instances meeting the targets")
        changes = ok[ok["config_id"].ne(ok["config_id"].shift()).fillna(True).astype(bool)]
        if len(changes) <= 12:
            for row in changes.itertuples(index=False):
                cfg = [int(getattr(row, f"p_{n}")) for n in space.names]
                ax.annotate(space.label(cfg), (row.rate, float(row.instances)), fontsize=7,
                            xytext=(3, 4), textcoords="offset points")
    if len(bad):
        floor = float(ok["instances"].min()) if len(ok) else 0.0
        ax.plot(bad["rate"], [floor] * len(bad), "x", color="tab:red", label="no configuration meets the targets")
    target = f"utilization <= {goal.utilization_target:g}"
    if goal.latency_slo_ms is not None:
        target += f", {goal.latency_stat} <= {goal.latency_slo_ms:g} ms"
    ax.set_xlabel("input rate (tuples/s)")
    ax.set_ylabel("instances")
    ax.set_title(f"Cheapest configuration per rate ({target})")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    paths.append(directory / "cheapest.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
