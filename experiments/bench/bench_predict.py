"""Benchmark: configurations evaluated per second through the vectorized model path.

A 10-operator DAG (two sources, a key-grouped Zipf stage, a fan-out/fan-in); random
configurations at random rates, evaluated in batches by ``predict_batch``. Goal (issue 2):
>= 100,000 configurations per second on a 2-core machine. Prints its figures, and the load
average: other work on the machine moves them by 10-20 %.

Two figures: the evaluation (throughput, max rate, bottleneck, per-operator utilization and
sojourn, mean latency and the moments the tails start from), and the same with the p99 on top.
p95/p99 are computed on first use only (a numerical Laplace inversion of the path mixture:
``modeler.queueing``), an order of magnitude slower, so the second figure is printed for a
smaller batch and is not what the goal is stated for.

    python experiments/bench/bench_predict.py [--batch 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from modeler.modelfile import parse_model
from modeler.queueing import compile_model, predict_batch

DAG = {
    "augury": 1, "job": "bench10", "network_delay_ms": 0.1,
    "operators": [
        {"name": "src_a", "role": "source", "parallelism": 2, "rate_share": 0.7},
        {"name": "src_b", "role": "source", "parallelism": 1, "rate_share": 0.3},
        {"name": "parse", "parallelism": 4, "service_time_ms": 0.3},
        {"name": "filter", "parallelism": 2, "service_time_ms": 0.1},
        {"name": "enrich", "parallelism": 4, "service_time_ms": 1.2, "service_scv": 0.5},
        {"name": "geo", "parallelism": 2, "service_time_ms": 0.6},
        {"name": "window", "parallelism": 8, "service_time_ms": 0.9, "service_scv": 2.0},
        {"name": "score", "parallelism": 4, "service_time_ms": 1.5,
         "scaling": {"form": "contention", "overhead": 0.01}},
        {"name": "alerts", "parallelism": 1, "service_time_ms": 0.2},
        {"name": "sink", "parallelism": 2, "service_time_ms": 0.1},
    ],
    "edges": [
        {"from": "src_a", "to": "parse"}, {"from": "src_b", "to": "parse"},
        {"from": "parse", "to": "filter", "selectivity": 0.9},
        {"from": "filter", "to": "enrich", "selectivity": 0.7},
        {"from": "filter", "to": "geo", "selectivity": 0.3},
        {"from": "enrich", "to": "window", "grouping": "key",
         "keys": {"distribution": "zipf", "exponent": 0.9, "count": 5000}},
        {"from": "geo", "to": "window", "grouping": "key",
         "keys": {"distribution": "zipf", "exponent": 0.9, "count": 5000}},
        {"from": "window", "to": "score", "selectivity": 0.2},
        {"from": "score", "to": "alerts", "selectivity": 0.05},
        {"from": "score", "to": "sink"},
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    compiled = compile_model(parse_model(DAG))
    rng = np.random.default_rng(0)
    V = len(compiled.names)
    P = rng.integers(1, 17, size=(args.batch, V))
    rates = rng.uniform(100, 5000, size=args.batch)
    predict_batch(compiled, P[:100], rates[:100])  # warm caches (key-group tables)
    timings = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        predict_batch(compiled, P, rates)
        timings.append(time.perf_counter() - start)
    best = min(timings)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"operators: {V}  batch: {args.batch}  repeats: {args.repeat}  "
          f"load average (1 min): {load:.2f} on {os.cpu_count()} cores")
    print(f"best batch time: {best * 1000:.1f} ms   median: {np.median(timings) * 1000:.1f} ms")
    print(f"configurations per second: {args.batch / best:,.0f} (goal >= 100,000)")
    n_tail = max(1, args.batch // 10)
    tail_timings = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        tailed = predict_batch(compiled, P[:n_tail], rates[:n_tail])
        tailed.latency_p99_ms
        tail_timings.append(time.perf_counter() - start)
    print(f"with the exact p99 as well ({n_tail:,} configurations, "
          f"{np.mean(tailed.saturated):.0%} saturated, no tail): "
          f"{n_tail / min(tail_timings):,.0f} configurations per second")


if __name__ == "__main__":
    main()
