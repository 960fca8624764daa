"""Benchmark: what-if sweep rows per second, locally and on Spark ``local[2]``.

The 10-operator DAG of ``bench_predict.py``; a sweep of three operators (parse, enrich, window:
16 x 16 x 16 = 4,096 configurations) at ``--rates`` rates. Prints rows/s for (1) prediction
only, chunked (``iter_predictions``), (2) prediction streamed into a Parquet file with the
cheapest-per-rate accumulator (what ``augury whatif`` does), and (3) with ``--spark``, the same
sweep on Spark ``local[2]`` (``mapInPandas``, collected block by block to the driver), after a
warm-up job. Peak RSS is printed too: the sweep is chunked, so memory stays bounded.

Then key grouping against the unkeyed case at the same size (issue 22): the bundled ``wordcount``
example (split -> count over a Zipf-keyed edge: one instance class per count instance) and
``diamond`` (shuffle edges only: one class per operator), each swept over two operators at
1..``--keyed-size`` (default 64 x 64 = 4,096 configurations) at ``--keyed-rates`` (default
1000:5000:3), the whole ``augury whatif`` path (predictions with their p95/p99 tails, Parquet
write, cheapest per rate), ``--repeat`` runs of each interleaved (the machine is shared: the best
run is the figure, the first is shown too). The target: wordcount within 2x diamond's time.

    python experiments/bench/bench_whatif.py [--rates 250] [--chunk-rows 50000] [--spark]
                                             [--keyed-size 64] [--keyed-rates 1000:5000:3] [--keyed-only]
                                             [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_predict import DAG  # noqa: E402

from experiments.bundled import examples_dir  # noqa: E402
from modeler.modelfile import load_model, parse_model  # noqa: E402
from modeler.queueing import compile_model  # noqa: E402
from scheduler.whatif import (  # noqa: E402
    CheapestPerRate, TableWriter, Targets, iter_predictions, iter_spark_predictions, parse_rates, parse_sweep,
    sweep_rows, sweep_space, table_schema,
)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


#: (example, the two swept operators) for the key-grouping comparison.
KEYED_CASES = (("wordcount", ("split", "count")), ("diamond", ("parse", "enrich")))


def whatif_seconds(example: str, swept: tuple[str, str], size: int, rates_spec: str,
                   chunk_rows: int) -> tuple[float, int]:
    """Wall seconds and rows of ``augury whatif``'s local path on a bundled example."""
    compiled = compile_model(load_model(examples_dir() / f"{example}.yaml"))
    space = sweep_space(compiled, [parse_sweep(f"{op}=1..{size}") for op in swept])
    rates = parse_rates(rates_spec)
    with tempfile.TemporaryDirectory() as tmp:
        writer = TableWriter(Path(tmp) / "sweep.parquet", table_schema(compiled.names))
        acc = CheapestPerRate(Targets())
        start = time.perf_counter()
        for chunk in iter_predictions(compiled, space, rates, chunk_rows=chunk_rows):
            writer.write(chunk)
            acc.update(chunk)
        writer.close()
        return time.perf_counter() - start, writer.rows


def keyed(args: argparse.Namespace) -> None:
    size = args.keyed_size
    print(f"key grouping vs unkeyed: two operators swept 1..{size} ({size * size:,} configurations), "
          f"rates {args.keyed_rates}, p95/p99 tails, Parquet write; {args.repeat} runs each, interleaved")
    times: dict[str, list[float]] = {example: [] for example, _ in KEYED_CASES}
    rows = {}
    for _ in range(args.repeat):
        for example, swept in KEYED_CASES:
            t, rows[example] = whatif_seconds(example, swept, size, args.keyed_rates, args.chunk_rows)
            times[example].append(t)
    for example, swept in KEYED_CASES:
        t = times[example]
        print(f"  {example:<10} {'x'.join(swept):<14} {rows[example]:>9,} rows  first {t[0]:6.2f} s  "
              f"best {min(t):6.2f} s  {rows[example] / min(t):>10,.0f} rows/s")
    print("  (wordcount's first run includes loading numba and the key-grouped tail's compiled loop, "
          "once per process; compiled on the first run ever)")
    ratio = min(times["wordcount"]) / min(times["diamond"])
    first = times["wordcount"][0] / times["diamond"][0]
    print(f"  wordcount / diamond, best: {ratio:.2f}x  first: {first:.2f}x  "
          f"(target <= 2x: {'met' if ratio <= 2.0 else 'MISSED'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=int, default=250, help="rates per configuration (default 250)")
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--spark", action="store_true", help="also run on Spark local[2]")
    parser.add_argument("--keyed-size", type=int, default=64,
                        help="key-grouping comparison: each swept operator at 1..N (default 64)")
    parser.add_argument("--keyed-rates", default="1000:5000:3", help="its rates, A:B:N (default 1000:5000:3)")
    parser.add_argument("--keyed-only", action="store_true", help="only the key-grouping comparison")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each key-grouping case (default 3)")
    args = parser.parse_args()
    if args.keyed_only:
        keyed(args)
        return

    model = parse_model(DAG)
    compiled = compile_model(model)
    space = sweep_space(compiled, [parse_sweep("parse=1..16"), parse_sweep("enrich=1..16"),
                                   parse_sweep("window=1..16")])
    rates = parse_rates(f"100:8000:{args.rates}")
    total = sweep_rows(space, rates)
    print(f"operators: {len(compiled.names)}  configurations: {space.size:,}  rates: {len(rates)}  "
          f"rows: {total:,}  chunk: {args.chunk_rows:,} rows")

    start, cpu = time.perf_counter(), time.process_time()
    rows = sum(len(c) for c in iter_predictions(compiled, space, rates, chunk_rows=args.chunk_rows))
    t, c = time.perf_counter() - start, time.process_time() - cpu
    print(f"local, predict only:            {rows / t:>12,.0f} rows/s wall ({t:.1f} s), "
          f"{rows / c:,.0f} rows per CPU-second  peak RSS {_rss_mb():,.0f} MB")

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep.parquet"
        writer = TableWriter(out, table_schema(compiled.names))
        acc = CheapestPerRate(Targets())
        start, cpu = time.perf_counter(), time.process_time()
        for chunk in iter_predictions(compiled, space, rates, chunk_rows=args.chunk_rows):
            writer.write(chunk)
            acc.update(chunk)
        writer.close()
        t, c = time.perf_counter() - start, time.process_time() - cpu
        size = out.stat().st_size / 1e6
        print(f"local, predict + Parquet write: {writer.rows / t:>12,.0f} rows/s wall ({t:.1f} s, {size:,.0f} MB), "
              f"{writer.rows / c:,.0f} rows per CPU-second  peak RSS {_rss_mb():,.0f} MB")

    if args.spark:
        from history.spark import spark_session

        spark = spark_session(master="local[2]", app_name="augury-bench-whatif")
        try:
            small = sweep_space(compiled, [parse_sweep("parse=1..2")])
            list(iter_spark_predictions(spark, model, small, rates[:5]))  # warm-up (JVM, Python workers)
            start = time.perf_counter()
            rows = sum(len(c) for c in iter_spark_predictions(spark, model, space, rates,
                                                              chunk_rows=args.chunk_rows))
            t = time.perf_counter() - start
            print(f"Spark local[2], collected:      {rows / t:>12,.0f} rows/s  ({t:.1f} s)  "
                  f"driver peak RSS {_rss_mb():,.0f} MB")
        finally:
            spark.stop()
    keyed(args)
    print(f"(2 cores shared with other work, load average {os.getloadavg()[0]:.1f}: wall figures vary run to run; "
          "Spark's CPU is spent in its workers and the JVM, so only its wall rate is shown)")


if __name__ == "__main__":
    main()
