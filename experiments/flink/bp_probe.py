"""Back pressure of a Nexmark-style SQL query at fixed input rates and configurations, live.

Why: ``flink-sql``'s one step judges "no sustained back pressure" by the most back-pressured
non-source operator's mean share of a window (``experiments.suite.flink_sql.one_step_verdict``).
This probe reads that figure, per operator and per window, for one query at the rates and
configurations given, so a failed verdict can be traced to the operator and the moment that
cause it (docs/flink.md, "q8's back pressure is its window aggregation, not the datagen's
bursts").

One managed cluster (loopback, always torn down); per rate one job, submitted at the step's input
mix (``QuerySetup.step_mix``: q8 one person per three auctions) and rescaled live to each
configuration in turn (a tuple of the query's group parallelisms, ``flink_sql.SETUPS``); after
each rescale one window is skipped, then ``windows`` windows are read. Prints one JSON object per
(rate, configuration)::

    python -m experiments.flink.bp_probe --query q8 --rate 300000 --config 1,1,1 --config 2,2,2 \
        --window-s 10 --windows 3

Keys: ``query``, ``rate_asked``, ``configuration``, ``instances``, ``input_rate`` (job input,
tuples/s, mean over the windows), ``backpressure_mean`` (the verdict's figure),
``backpressure_per_window``, ``operators`` (per operator: ``backpressure`` and ``busy``, one value
per window). Rates in tuples/s, windows in s.
"""

from __future__ import annotations

import argparse
import json
import sys

from modeler.errors import ConfigError


def parse_config(text: str, groups: int) -> tuple[int, ...]:
    """``"1,2,1"`` -> (1, 2, 1): one parallelism >= 1 per group of the query (``ConfigError``
    naming ``--config`` and the value otherwise)."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != groups or any(v < 1 for v in values):
        raise ConfigError(f"needs {groups} comma-separated parallelisms >= 1", field="--config", value=text)
    return values


def probe(cluster, query: str, rate: float, configs: list[tuple[int, ...]], window_s: float,
          windows: int) -> list[dict]:
    """One job at ``rate``, rescaled to each of ``configs``; one record per configuration."""
    from experiments.flink.sql import SOURCES
    from experiments.suite import flink_sql as fs

    setup = fs.SETUPS[query]
    job = fs.SqlJob(cluster, fs.query_spec(setup, *fs.step_rates(setup, rate, len(SOURCES[query]))), window_s)
    out = []
    try:
        base = {k: 1 for k in job.graph.config()}
        for c in configs:
            config = {**base, **setup.config(c)}
            fs.rescale_to(job, config)
            got = job.windows(windows, skip=1)
            summary = fs.summarize_windows(got, job)
            ops = [op for op in got[0].operators if not got[0].operators[op].is_source]
            out.append({
                "query": query, "rate_asked": rate, "configuration": list(c),
                "instances": int(sum(config.values())), "input_rate": round(summary["rate"], 1),
                "backpressure_mean": round(summary["bp_mean"], 3),
                "backpressure_per_window": [round(v, 3) for v in summary["bp_per_window"]],
                "operators": {o: {"backpressure": [round(w.operators[o].backpressure_max, 3) for w in got],
                                  "busy": [round(w.operators[o].busy_mean, 3) for w in got]} for o in ops}})
    finally:
        job.cancel()
    return out


def main(argv: list[str] | None = None) -> int:
    from experiments.flink.sql import QUERIES
    from experiments.suite import flink_sql as fs

    ap = argparse.ArgumentParser(prog="python -m experiments.flink.bp_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--query", choices=QUERIES, default="q8")
    ap.add_argument("--rate", type=float, action="append", required=True, help="job input, tuples/s (repeatable)")
    ap.add_argument("--config", action="append", required=True,
                    help="group parallelisms, e.g. 1,2,1 (repeatable; the query's groups: flink_sql.SETUPS)")
    ap.add_argument("--window-s", type=float, default=10.0)
    ap.add_argument("--windows", type=int, default=3)
    args = ap.parse_args(argv)
    try:
        configs = [parse_config(c, len(fs.SETUPS[args.query].groups)) for c in args.config]
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from experiments.flink.cluster import ClusterConfig, FlinkCluster, ensure_flink_venv

    ensure_flink_venv()
    with FlinkCluster(ClusterConfig.free_ports(task_slots=fs.SLOTS)) as cluster:
        for rate in args.rate:
            for record in probe(cluster, args.query, rate, configs, args.window_s, args.windows):
                print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
