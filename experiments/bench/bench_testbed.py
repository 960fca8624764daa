"""Benchmark: simulated tuple-hops per second, and a 24-hour trace replay of WordCount.

A hop is one tuple processed by one operator instance. Goals (issue 3): >= 300,000 hops/s on a
2-core machine; a 24-hour real trace replayed for examples/wordcount.yaml in under 10 minutes
with time compression. Prints its figures (no assertions).

    python experiments/bench/bench_testbed.py [--seconds 300] [--speedup 10] [--skip-replay]

The replay takes the busiest day of the 1998 World Cup trace (1998-06-30, 1-min counts), scaled
so its peak is 90 % of the job's key-skewed capacity at the model's parallelism, compressed by
--speedup (rates kept: 86,400 / X simulated seconds).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from experiments import bundled
from experiments.testbed import Testbed, TestbedConfig, load_trace
from experiments.testbed import kernel
from modeler.keys import instance_shares, key_group_weights
from modeler.modelfile import load_model

TRACE = bundled.trace("wc98_requests_per_minute.csv")


def capacity(model) -> float:
    """Largest source rate the configuration sustains (hottest instance of each operator)."""
    best = float("inf")
    for op in model.operators:
        if op.is_source:
            continue
        edge = next(e for e in model.edges if e.target == op.name)
        share = 1.0 / op.parallelism
        if edge.grouping == "key":
            share = float(instance_shares(key_group_weights(edge.keys, op.max_parallelism), op.parallelism).max())
        # a chain (wordcount): tuples per source tuple = product of selectivities up to here
        visits, e = 1.0, edge
        while e is not None:
            visits *= e.selectivity
            e = next((x for x in model.edges if x.target == e.source), None)
        best = min(best, 1000.0 / op.service_time_ms / (visits * share))
    return best


def steady(model, rate: float, seconds: float) -> None:
    tb = Testbed(model, rate, TestbedConfig(seed=1))
    tb.advance(10)  # compile / warm up
    h0 = tb.hops
    t0 = time.perf_counter()
    tb.advance(seconds)
    wall = time.perf_counter() - t0
    hops = tb.hops - h0
    print(f"steady {model.job} at {rate:,.0f} tuples/s: {hops:,} hops in {wall:.2f} s "
          f"= {hops / wall:,.0f} hops/s ({seconds / wall:,.0f} simulated s per wall s)")


def replay(model, speedup: float) -> None:
    peak = 0.9 * capacity(model)
    duration = 86_400 / speedup
    trace = load_trace(TRACE, speedup=speedup, peak_rate=peak, start="1998-06-30 00:00:00",
                       duration_s=duration)
    tb = Testbed(model, trace, TestbedConfig(seed=1))
    t0 = time.perf_counter()
    tb.run_until(duration)
    wall = time.perf_counter() - t0
    lat = tb.latencies_ms()
    print(f"replay 24 h of {TRACE.name} (1998-06-30, peak {peak:,.0f} tuples/s) at speedup {speedup:g}: "
          f"{duration:,.0f} simulated s, {tb.hops:,} hops in {wall:.1f} s wall "
          f"({tb.hops / wall:,.0f} hops/s); {len(tb._windows)} windows; latency p99 "
          f"{np.percentile(lat, 99):.2f} ms; goal < 600 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="simulated seconds of the steady run")
    parser.add_argument("--speedup", type=float, default=10.0, help="time compression of the replay")
    parser.add_argument("--skip-replay", action="store_true")
    args = parser.parse_args()
    print(f"numba: {kernel.HAVE_NUMBA}")
    model = load_model(bundled.example("wordcount.yaml"))
    cap = capacity(model)
    print(f"wordcount capacity at {model.config}: {cap:,.0f} tuples/s")
    steady(model, 0.8 * cap, args.seconds)
    big = model.with_config({"split": 8, "count": 16})
    steady(big, 0.8 * capacity(big), args.seconds / 5)
    if not args.skip_replay:
        if TRACE.is_file():
            replay(model, args.speedup)
        else:
            print(f"replay skipped: {TRACE} not found")


if __name__ == "__main__":
    main()
