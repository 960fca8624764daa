"""Baseline scaling policies, re-implemented from the peers' papers and docs (DESIGN.md §3).

Each policy sees what a reactive autoscaler sees — per-operator statistics of the latest metric
window(s) — and returns the parallelism it would set (or ``None`` to leave the job alone). Rates
in tuples/s, times in seconds (policy clocks), fractions in [0, 1].

* ``DS2Policy`` (Kalavri et al., OSDI 2018): true processing rate = processed / useful (busy) time;
  in topological order ``p = ceil(target_in / (true_rate / p))``, the target propagated
  downstream by the observed output/input ratios; one shot per decision interval.
* ``FlinkAutoscalerPolicy`` (Flink Kubernetes Operator, DS2-based): busy time aggregated as MAX
  over subtasks; acts only when a vertex's utilization leaves [0.4, 1.0]; targets 0.7; metric
  window 15 min; 5 min stabilization after a restart; scale-down only after 1 h (the maximum
  recommendation over that hour), at most -60 % per step; backlog caught up over 30 min.
* ``DhalionPolicy`` (Floratou et al., VLDB 2017): back pressure above 20 ms/s marks a bottleneck;
  the component that is back-pressuring others but is not itself back-pressured is scaled by
  ``n' = ceil(n * (1 + B / (W - B)))`` (B = back-pressure time in window W), at most 5x; one
  component per round; 60 s interval; 3 min wait after an action.
* ``StaticPolicy``: never changes the configuration (static peak provisioning).

The statistics come from ``window_stats`` (raw normalized rows of one window -> per-operator
values), the same numbers the history pipeline computes, without Spark.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import networkx as nx
import pandas as pd


@dataclass(frozen=True)
class OperatorStats:
    """One operator in one metric window."""

    parallelism: int
    processed_rate: float
    """Tuples/s processed by all instances."""
    arrival_rate: float
    """Tuples/s that arrived (sources: processed plus the growth of their external backlog)."""
    busy_mean: float
    busy_max: float
    """Busy fraction of the mean and of the busiest instance."""
    backpressure_max: float
    """Back-pressured fraction of the most back-pressured instance."""
    output_rates: Mapping[str, float] = field(default_factory=dict)
    """Tuples/s emitted to each downstream operator."""
    backlog: float = 0.0
    """Sources: external backlog (tuples) at the end of the window."""

    @property
    def true_rate_per_instance(self) -> float:
        """Tuples one instance could process per second of busy time (DS2's true rate)."""
        busy = self.busy_mean * self.parallelism
        return self.processed_rate / busy if busy > 0 else math.inf


def window_stats(rows: pd.DataFrame, window_s: float, lag_before: Mapping[str, float] | None = None
                 ) -> dict[str, OperatorStats]:
    """Per-operator stats from the normalized rows of ONE window (``history`` schema)."""
    out: dict[str, OperatorStats] = {}
    lag_before = lag_before or {}
    for op, g in rows.groupby("operator"):
        def per_instance(metric: str) -> pd.Series:
            m = g[g["metric"] == metric]
            return m.groupby("instance")["value"].sum()
        rin = per_instance("records_in")
        busy = per_instance("busy_ms") / (1000.0 * window_s)
        bp = per_instance("backpressured_ms") / (1000.0 * window_s)
        outs = g[g["metric"] == "records_out"].groupby("target")["value"].sum() / window_s
        instances = sorted(set(g["instance"]))
        p = len(instances)
        processed = float(rin.sum()) / window_s
        lag = g[g["metric"] == "source_lag"]["value"]
        backlog = float(lag.sum()) if len(lag) else 0.0
        arrival = processed + (backlog - lag_before.get(op, backlog)) / window_s
        out[str(op)] = OperatorStats(
            parallelism=p, processed_rate=processed, arrival_rate=max(arrival, 0.0),
            busy_mean=float(busy.reindex(instances, fill_value=0).mean()) if p else 0.0,
            busy_max=float(busy.max()) if len(busy) else 0.0,
            backpressure_max=float(bp.max()) if len(bp) else 0.0,
            output_rates={str(k): float(v) for k, v in outs.items()}, backlog=backlog,
        )
    return out


def _ratios(graph: nx.DiGraph, stats: Mapping[str, OperatorStats]) -> dict[tuple[str, str], float]:
    """Observed output/input ratio per edge (tuples emitted on u->v per tuple u processed)."""
    ratios = {}
    for u, v in graph.edges:
        s = stats.get(u)
        ratios[(u, v)] = (s.output_rates.get(v, 0.0) / s.processed_rate
                          if s and s.processed_rate > 0 else graph.edges[u, v].get("selectivity", 1.0))
    return ratios


def ds2_targets(graph: nx.DiGraph, stats: Mapping[str, OperatorStats], source_rates: Mapping[str, float]
                ) -> dict[str, float]:
    """Target input rate of every operator: source targets propagated by observed ratios."""
    ratios = _ratios(graph, stats)
    target: dict[str, float] = {}
    for v in nx.topological_sort(graph):
        if graph.in_degree(v) == 0:
            target[v] = float(source_rates.get(v, stats[v].arrival_rate if v in stats else 0.0))
        else:
            target[v] = sum(target[u] * ratios[(u, v)] for u in graph.predecessors(v))
    return target


def _clamp(graph: nx.DiGraph, v: str, p: int) -> int:
    node = graph.nodes[v]
    return int(min(max(p, node.get("min_parallelism", 1)), node.get("max_parallelism", 128)))


@dataclass
class DS2Policy:
    """DS2: size every operator from its true rate for the observed source rates (one shot)."""

    graph: nx.DiGraph
    name: str = "ds2"

    def decide(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        sources = {v: stats[v].arrival_rate for v in self.graph if self.graph.in_degree(v) == 0 and v in stats}
        targets = ds2_targets(self.graph, stats, sources)
        new = dict(config)
        for v, t in targets.items():
            s = stats.get(v)
            if s is None or self.graph.in_degree(v) == 0 or not math.isfinite(s.true_rate_per_instance):
                continue
            new[v] = _clamp(self.graph, v, math.ceil(t / s.true_rate_per_instance - 1e-9))
        return new if new != dict(config) else None


@dataclass
class FlinkAutoscalerPolicy:
    """The Flink Kubernetes operator's autoscaler rules with their defaults (times in policy seconds).

    ``time_scale`` divides every time constant (for time-compressed replays).
    """

    graph: nx.DiGraph
    target_utilization: float = 0.7
    low: float = 0.4
    high: float = 1.0
    metrics_window_s: float = 15 * 60
    stabilization_s: float = 5 * 60
    scale_down_delay_s: float = 60 * 60
    max_scale_down: float = 0.6
    catch_up_s: float = 30 * 60
    restart_s: float = 5 * 60
    """``job.autoscaler.restart.time``: the input that queues up during the restart a change
    causes must be caught up too, so the scaling target adds ``input x restart / catch-up``
    (Flink's ``AutoScalerUtils.getTargetProcessingCapacity``, with restart)."""
    time_scale: float = 1.0
    name: str = "flink-autoscaler"
    _history: list = field(default_factory=list)
    _last_action_s: float = -math.inf
    _down_since: dict = field(default_factory=dict)

    def decide(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        ts = self.time_scale
        self._history.append((now_s, stats))
        self._history = [(t, s) for t, s in self._history if t > now_s - self.metrics_window_s / ts]
        if now_s - self._last_action_s < self.stabilization_s / ts:
            return None
        # Average over the metric window; busy time aggregated as MAX over subtasks (skew).
        ops = {v for _, s in self._history for v in s}
        avg = {}
        for v in ops:
            seen = [s[v] for _, s in self._history if v in s]
            avg[v] = OperatorStats(
                parallelism=seen[-1].parallelism,
                processed_rate=sum(x.processed_rate for x in seen) / len(seen),
                arrival_rate=sum(x.arrival_rate for x in seen) / len(seen),
                busy_mean=sum(x.busy_max for x in seen) / len(seen),
                busy_max=sum(x.busy_max for x in seen) / len(seen),
                backpressure_max=max(x.backpressure_max for x in seen),
                output_rates=seen[-1].output_rates, backlog=seen[-1].backlog)
        if not any(self.low > a.busy_max or a.busy_max > self.high * 0.999 or a.backpressure_max > 0.1
                   for v, a in avg.items() if self.graph.in_degree(v) > 0):
            return None
        # Flink's target processing capacity per vertex: input / target utilization + the backlog
        # caught up within catch_up_s + the input queued during the restart, caught up as well
        # (both at full utilization). The DS2 propagation is linear, so each part propagates alone.
        sources = [v for v in self.graph if self.graph.in_degree(v) == 0 and v in avg]
        inputs = ds2_targets(self.graph, avg, {v: avg[v].arrival_rate for v in sources})
        backlog = ds2_targets(self.graph, avg, {v: avg[v].backlog / (self.catch_up_s / ts) for v in sources})
        new = dict(config)
        for v, rate in inputs.items():
            a = avg.get(v)
            if a is None or self.graph.in_degree(v) == 0 or not math.isfinite(a.true_rate_per_instance):
                continue
            capacity = (rate / self.target_utilization + rate * self.restart_s / self.catch_up_s
                        + backlog.get(v, 0.0))
            want = math.ceil(capacity / a.true_rate_per_instance - 1e-9)
            current = config[v]
            if want < current:
                # Scale down only after the delay, to the max recommendation seen since, -60 % max.
                since = self._down_since.setdefault(v, (now_s, want))
                since = (since[0], max(since[1], want))
                self._down_since[v] = since
                if now_s - since[0] < self.scale_down_delay_s / ts:
                    continue
                want = max(since[1], math.ceil(current * (1 - self.max_scale_down)))
            else:
                self._down_since.pop(v, None)
            new[v] = _clamp(self.graph, v, want)
        if new == dict(config):
            return None
        self._last_action_s = now_s
        for v in list(self._down_since):
            if new[v] != config[v]:
                self._down_since.pop(v, None)
        return new


@dataclass
class DhalionPolicy:
    """Dhalion's back-pressure rule: scale the one bottleneck per round; wait after an action."""

    graph: nx.DiGraph
    backpressure_threshold: float = 0.02
    """20 ms per second."""
    max_factor: float = 5.0
    wait_s: float = 3 * 60
    time_scale: float = 1.0
    name: str = "dhalion"
    _last_action_s: float = -math.inf

    def decide(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        if now_s - self._last_action_s < self.wait_s / self.time_scale:
            return None
        pressured = {v for v, s in stats.items() if s.backpressure_max > self.backpressure_threshold}
        if not pressured:
            return None
        # The bottleneck: a component downstream of back-pressured ones, itself not back-pressured.
        candidates = [v for v in nx.topological_sort(self.graph)
                      if v not in pressured and any(u in pressured for u in self.graph.predecessors(v))]
        if not candidates:
            return None
        v = candidates[0]
        b = max(stats[u].backpressure_max for u in self.graph.predecessors(v) if u in stats)
        factor = min(self.max_factor, 1.0 + b / max(1.0 - b, 1e-6))
        new = dict(config)
        new[v] = _clamp(self.graph, v, math.ceil(config[v] * factor - 1e-9))
        if new == dict(config):
            return None
        self._last_action_s = now_s
        return new


@dataclass
class StaticPolicy:
    """Static provisioning: the configuration never changes."""

    name: str = "static"

    def decide(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        return None


@dataclass
class OraclePolicy:
    """Knows the future load: every ``interval_s`` it sets the cheapest sufficient configuration,
    ``scheduler.plan.plan`` on the (true) model for the peak rate over the next ``interval_s`` plus
    ``restart_s`` (so the configuration holds until the next decision has taken effect).

    ``rate_at(t_s)`` is the load (tuples/s) at policy time ``t_s``; the peak is taken over samples
    every ``sample_s``. The lower bound on instance-hours among policies that reconfigure at most
    every ``interval_s``.
    """

    model: object
    rate_at: object
    interval_s: float = 3600.0
    restart_s: float = 30.0
    sample_s: float = 60.0
    utilization_target: float = 0.7
    latency_slo_ms: float | None = None
    name: str = "oracle"
    _next_s: float = -math.inf
    _plans: dict = field(default_factory=dict)

    def peak(self, now_s: float) -> float:
        horizon = self.interval_s + self.restart_s
        n = max(1, int(math.ceil(horizon / self.sample_s)))
        return max(float(self.rate_at(now_s + k * self.sample_s)) for k in range(n + 1))

    def config_for(self, rate: float) -> dict[str, int]:
        from scheduler.plan import PlanConfig, plan

        key = round(rate, 6)
        if key not in self._plans:
            self._plans[key] = dict(plan(self.model, rate, PlanConfig(
                utilization_target=self.utilization_target, latency_slo_ms=self.latency_slo_ms)).config)
        return self._plans[key]

    def decide(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        if now_s < self._next_s:
            return None
        self._next_s = now_s + self.interval_s
        new = {k: v for k, v in self.config_for(self.peak(now_s)).items() if k in config}
        new = {**dict(config), **new}
        return new if new != dict(config) else None
