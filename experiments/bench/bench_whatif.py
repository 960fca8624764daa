"""Benchmark: what-if sweep rows per second, locally and on Spark ``local[2]``.

The 10-operator DAG of ``bench_predict.py``; a sweep of three operators (parse, enrich, window:
16 x 16 x 16 = 4,096 configurations) at ``--rates`` rates. Prints rows/s for (1) prediction
only, chunked (``iter_predictions``), (2) prediction streamed into a Parquet file with the
cheapest-per-rate accumulator (what ``augury whatif`` does), and (3) with ``--spark``, the same
sweep on Spark ``local[2]`` (``mapInPandas``, collected block by block to the driver), after a
warm-up job. Peak RSS is printed too: the sweep is chunked, so memory stays bounded.

    python experiments/bench/bench_whatif.py [--rates 250] [--chunk-rows 50000] [--spark]
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

from modeler.modelfile import parse_model  # noqa: E402
from modeler.queueing import compile_model  # noqa: E402
from scheduler.whatif import (  # noqa: E402
    CheapestPerRate, TableWriter, Targets, iter_predictions, iter_spark_predictions, parse_rates, parse_sweep,
    sweep_rows, sweep_space, table_schema,
)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=int, default=250, help="rates per configuration (default 250)")
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--spark", action="store_true", help="also run on Spark local[2]")
    args = parser.parse_args()

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
    print(f"(2 cores shared with other work, load average {os.getloadavg()[0]:.1f}: wall figures vary run to run; "
          "Spark's CPU is spent in its workers and the JVM, so only its wall rate is shown)")


if __name__ == "__main__":
    main()
