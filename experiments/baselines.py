"""Baseline scaling policies, re-implemented from the peers' papers, docs and code (DESIGN.md §3).

Each policy sees what a reactive autoscaler sees — per-operator statistics of the latest metric
window — and returns the parallelism it would set (or ``None`` to leave the job alone). Rates in
tuples/s, fractions in [0, 1], back pressure of Dhalion in ms per second.

**One clock.** ``decide(now_s, ...)`` receives *policy* seconds (``experiments.replay.drive``
already converts simulated time, ``now_s = sim_s x time_scale``), so every time constant below is
in policy seconds with its published value; no policy knows the replay's compression.

* ``DS2Policy`` (Kalavri et al., OSDI 2018; ``strymon-system/ds2``): true processing rate =
  processed / useful (busy) time, aggregated as the *mean* over instances (DS2 assumes no skew);
  in topological order ``p = ceil(target_in / (true_rate / p))``, the target propagated downstream
  by the observed output/input ratios; the manager reconfigures after ``activation_windows``
  decisions and ignores a scale-down by one instance. ``ds2_max`` is a *variant* (not DS2): the
  busiest instance's busy time instead of the mean, as the Flink autoscaler aggregates.
* ``FlinkAutoscalerPolicy`` (flink-kubernetes-operator 1.13 defaults): rate-based evaluation
  (true processing rate = input rate / MAX busy time vs target rate incl. backlog catch-up and the
  restart allowance), utilization target 0.7 with boundary 0.3, 15 min metric window refilled after
  every rescale, 5 min stabilization, 1 h scale-down interval with the interval's maximum
  recommendation, at most -60 % per step, key-group alignment.
* ``DhalionPolicy`` (Floratou et al., VLDB 2017; Heron's dynamic-resource-provisioning policy and
  the authors' prototype): every 60 s over a 300 s window, the bottleneck's own summed back
  pressure (> 20 ms/s) diagnosed as under-provisioning (no skew) and scaled by
  ``n' = ceil(n (1 + B / (W - B)))`` (at most 5x), one component per round; skew or a slow
  instance: no action; ``floor(0.9 n)`` when over-provisioned; 3 min wait after an action; an
  action log and a blacklist that never expires.
* ``StaticPolicy``: never changes the configuration (static peak provisioning).

**Advisor mode.** Every policy has ``decide(now_s, stats, config)`` (decide and act: the caller
applies what it returns) and ``advise(now_s, stats, config)``: it is fed the window and decides as
usual, but its decision is *not* applied, and its state is left as if the decision had never been
taken (the Flink autoscaler's ``scaling.enabled: false``; the others have no such mode, so it is
defined here per policy). Feeding a policy history before it takes over (the convergence
experiment's warm history) calls ``advise`` on every window.

``PEERS`` (below) lists, per peer, what is reproduced, its assumptions and every known
difference from the original; ``experiments.results`` prints it in docs/RESULTS.md.

The statistics come from ``window_stats`` (raw normalized rows of one window -> per-operator
values), the same numbers the history pipeline computes, without Spark.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import networkx as nx
import numpy as np
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
    backpressure_sum: float = 0.0
    """Back-pressured fraction summed over the instances (seconds per second; the testbed records
    back pressure at the blocked sender, like Flink)."""
    instance_processed: tuple[float, ...] = ()
    """Tuples/s processed by each instance (index = instance)."""
    instance_queue: tuple[float, ...] = ()
    """Time-average input-queue length of each instance (tuples; empty for sources)."""

    @property
    def true_rate_per_instance(self) -> float:
        """Tuples one instance could process per second of busy time (DS2's true rate, mean)."""
        busy = self.busy_mean * self.parallelism
        return self.processed_rate / busy if busy > 0 else math.inf


def window_stats(rows: pd.DataFrame, window_s: float, lag_before: Mapping[str, float] | None = None
                 ) -> dict[str, OperatorStats]:
    """Per-operator stats from the normalized rows of ONE window (``history`` schema).

    ``lag_before``: each source's backlog (tuples) at the start of the window; a source missing
    from it had an empty backlog (the replay starts with none), so the first window's arrival
    rate counts the backlog's growth from 0.

    One pass over the rows' columns (a window has a few hundred rows: per-operator pandas
    group-bys cost ~40-70 ms a window, this well under 1 ms; ``experiments.replay.drive`` calls it
    on every window of every run). Operators, instances and targets in sorted order.
    """
    lag_before = lag_before or {}
    n = len(rows)
    if n == 0:
        return {}
    targets = rows["target"].tolist() if "target" in rows.columns else [None] * n
    kept = ("records_in", "busy_ms", "backpressured_ms", "queue_len")
    ops: dict = {}
    for op, inst, metric, value, target in zip(rows["operator"].tolist(), rows["instance"].tolist(),
                                               rows["metric"].tolist(), rows["value"].tolist(), targets):
        acc = ops.get(op)
        if acc is None:
            acc = ops[op] = (set(), {m: {} for m in kept}, {}, [])
        instances, per, outs, lag = acc
        instances.add(inst)
        if value != value:  # NaN: pandas' sums skip it (the row still names its instance)
            value = 0.0
        if metric in per:
            d = per[metric]
            d[inst] = d[inst] + value if inst in d else value
        elif metric == "records_out":
            if target is not None and target == target:  # group-by drops a missing target
                outs[target] = outs[target] + value if target in outs else value
        elif metric == "source_lag":
            lag.append(value)
    out: dict[str, OperatorStats] = {}
    unit = 1000.0 * window_s
    for op in sorted(ops):
        seen, per, outs, lag = ops[op]
        instances = sorted(seen)
        p = len(instances)
        rin = np.array([per["records_in"].get(i, 0.0) for i in instances], dtype=float)
        busy = {i: v / unit for i, v in per["busy_ms"].items()}
        bp = np.array([per["backpressured_ms"][i] / unit for i in sorted(per["backpressured_ms"])], dtype=float)
        queue = per["queue_len"]
        processed = float(rin.sum()) / window_s
        backlog = float(np.sum(lag)) if lag else 0.0
        arrival = processed + (backlog - lag_before.get(op, 0.0)) / window_s if lag else processed
        out[str(op)] = OperatorStats(
            parallelism=p, processed_rate=processed, arrival_rate=max(arrival, 0.0),
            busy_mean=float(np.array([busy.get(i, 0.0) for i in instances], dtype=float).mean()) if p else 0.0,
            busy_max=float(max(busy.values())) if busy else 0.0,
            backpressure_max=float(bp.max()) if len(bp) else 0.0,
            output_rates={str(k): float(outs[k] / window_s) for k in sorted(outs)}, backlog=backlog,
            backpressure_sum=float(bp.sum()) if len(bp) else 0.0,
            instance_processed=tuple(float(x) / window_s for x in rin),
            instance_queue=tuple(float(queue.get(i, 0.0)) for i in instances) if queue else (),
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


# ------------------------------------------------------------------------------------------- DS2


@dataclass
class DS2Policy:
    """DS2's scaling policy and manager (``controller/src/policy/scaling.rs``, ``bin/manager.rs``).

    Policy: in topological order, ``p_new = ceil(target_in / true_rate_per_instance)``; the source
    target is its arrival rate (processed + backlog growth: DS2's externally measured source rate);
    downstream targets propagate by the observed output/input ratio; sources are never rescaled.
    Manager: a decision is issued once ``activation_windows`` decisions were taken since the last
    reconfiguration (the latest one applied), and only when some operator needs *more*
    instances or at least *two fewer* (``consider_change``: a scale-down by one is ignored).

    **Assumption (documented, not checked): no skew.** The per-instance true rate is the *mean*
    over instances (``aggregate="mean"``). Under key skew the hottest instance saturates while
    the mean looks fine, and DS2 under-sizes; ``ds2_max`` (``aggregate="max"``) is a labelled
    variant that sizes from the busiest instance instead, as the Flink autoscaler does.
    """

    graph: nx.DiGraph
    aggregate: str = "mean"
    """``mean`` (DS2) or ``max`` (the ``ds2-max`` variant: busiest instance)."""
    activation_windows: int = 1
    """``activation_time``: decisions counted before a reconfiguration (DS2 default 1)."""
    name: str = "ds2"
    _evaluations: int = 0

    def true_rate_per_instance(self, s: OperatorStats) -> float:
        busy = (s.busy_max if self.aggregate == "max" else s.busy_mean) * s.parallelism
        return s.processed_rate / busy if busy > 0 else math.inf

    def recommend(self, stats: Mapping[str, OperatorStats], config: Mapping[str, int]) -> dict[str, int]:
        """The policy's decision (every operator), before the manager's rules."""
        sources = {v: stats[v].arrival_rate for v in self.graph if self.graph.in_degree(v) == 0 and v in stats}
        targets = ds2_targets(self.graph, stats, sources)
        new = dict(config)
        for v, t in targets.items():
            s = stats.get(v)
            rate = self.true_rate_per_instance(s) if s is not None else math.inf
            if s is None or self.graph.in_degree(v) == 0 or not math.isfinite(rate):
                continue
            new[v] = _clamp(self.graph, v, math.ceil(t / rate - 1e-9))
        return new

    def decide(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        new = self.recommend(stats, config)
        self._evaluations += 1
        if self._evaluations < self.activation_windows:
            return None
        if not any(new[v] > config[v] or config[v] - new[v] >= 2 for v in new if v in config):
            return None
        self._evaluations = 0
        return new if new != dict(config) else None

    def advise(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        """Advisor mode: the decision ``decide`` would issue, not applied. DS2 keeps no state
        beyond the manager's activation count, which counts this decision as ``decide`` does
        (a decision issued restarts the count, applied or not)."""
        return self.decide(now_s, stats, config)


def ds2_max(graph: nx.DiGraph, **kwargs) -> DS2Policy:
    """The ``ds2-max`` VARIANT (not DS2 as published): sizes from the busiest instance's busy time."""
    return DS2Policy(graph, aggregate="max", name="ds2-max", **kwargs)


# ----------------------------------------------------------------------------- Flink autoscaler


def align_to_key_groups(p: int, key_groups: int, lower: int, upper: int) -> int:
    """Flink's EVENLY_SPREAD alignment (``JobVertexScaler.scale``, 1.11-1.15) for a vertex with a
    keyed (HASH) input: the smallest divisor of ``key_groups`` from ``p`` up to ``key_groups / 2``
    (``key_groups`` when ``p`` is above half) and ``upper``; failing that, downward to where a
    subtask's key-group count increases."""
    bound = min(key_groups if p > key_groups // 2 else key_groups // 2, upper)
    for q in range(p, bound + 1):
        if key_groups % q == 0:
            return q
    q = p
    while q > 0:
        if key_groups // q > key_groups // p:
            if key_groups % q != 0:
                q += 1
            break
        q -= 1
    return max(q, lower)


@dataclass
class FlinkAutoscalerPolicy:
    """The Flink Kubernetes operator's autoscaler (``flink-autoscaler`` 1.13 defaults; every
    duration in policy seconds).

    Each call is one metric sample (the window that just ended). A restart — the policy's own
    action, or a configuration that changed under it — clears the sample history and the
    pending scale-downs; samples ending within ``stabilization_s`` of the restart are dropped;
    the window is full once ``metrics_window_s`` has passed since the first kept sample (at least
    two samples). Then, per non-source vertex, averaged over the window: ``TPR = input rate /
    busy`` (busy = MAX over subtasks), the target rate propagated from the sources (arrival rate
    = input + backlog growth) and the catch-up rate (backlog / ``catch_up_s``); capacity
    ``C(U, restart) = catch-up + [restart] target x restart_s / catch_up_s + target / U``; scale
    factor ``C(0.7, restart) / TPR`` clamped to ``[1 - 0.6, ...]``; ``ceil(p x factor)``, clamped
    and aligned to key groups for keyed inputs. Acts only when some vertex is outside
    ``[C(1.0), C(0.4, restart)]`` (backlog mode — a source lag above 5 min of input — drops the
    scale-down bound) and then applies every changed vertex at once; a scale-down waits
    ``scale_down_interval_s`` from its first recommendation and uses the interval's maximum.
    """

    graph: nx.DiGraph
    target_utilization: float = 0.7
    """``utilization.target``."""
    utilization_boundary: float = 0.3
    """``target.utilization.boundary``: the band is target +- this (``[0.4, 1.0]``)."""
    metrics_window_s: float = 15 * 60
    """``metrics.window``."""
    stabilization_s: float = 5 * 60
    """``stabilization.interval``: samples this soon after a restart do not count."""
    scale_down_interval_s: float = 60 * 60
    """``scale-down.interval``."""
    max_scale_down_factor: float = 0.6
    """``scale-down.max-factor``: at most -60 % per step."""
    catch_up_s: float = 30 * 60
    """``catch-up.duration``."""
    restart_s: float = 5 * 60
    """``restart.time``: the input queued during the restart a change causes is caught up too."""
    backlog_lag_threshold_s: float = 5 * 60
    """``backlog-processing.lag-threshold``: lag above this many seconds of input = backlog mode."""
    busy_aggregator: str = "max"
    """``metrics.busy-time.aggregator`` (``max`` or ``mean``)."""
    vertex_min_parallelism: int = 1
    vertex_max_parallelism: int = 200
    name: str = "flink-autoscaler"
    _samples: list = field(default_factory=list)
    _running_since_s: float = -math.inf
    _collecting_since_s: float | None = None
    """Time of the first sample kept since the last (re)start."""
    _config: dict | None = None
    _delayed: dict = field(default_factory=dict)
    """Pending scale-downs: vertex -> (first trigger time, [(time, recommended parallelism)])."""

    def _restarted(self, now_s: float) -> None:
        self._samples = []
        self._delayed = {}
        self._running_since_s = now_s
        self._collecting_since_s = None

    def decide(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        return self._step(now_s, stats, config, act=True)

    def advise(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        """Advisor mode, as the autoscaler's ``scaling.enabled: false``: the sample is kept and the
        recommendation computed (scale-downs keep their pending delay), but nothing is executed:
        no restart, so the metric window is not cleared and the configuration stays ``config``."""
        return self._step(now_s, stats, config, act=False)

    def _step(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int], act: bool
              ) -> dict[str, int] | None:
        if act and self._config is not None and dict(config) != self._config:
            self._restarted(now_s)  # rescaled by someone else: history cleared
        self._config = dict(config)
        if now_s < self._running_since_s + self.stabilization_s:
            return None
        if not self._samples and self._collecting_since_s is None:
            self._collecting_since_s = now_s
        self._samples.append((now_s, stats))
        self._samples = [(t, s) for t, s in self._samples if t >= now_s - self.metrics_window_s - 1e-9]
        first = self._samples[0][0]
        # Full once a whole window has passed since collection (re)started, as Flink's collector
        # does (job running + stabilization + window): not since the oldest *kept* sample, which
        # never lies a whole window back when the window is not a multiple of the sample interval
        # (15 min of 4-minute samples: the policy never acted).
        if now_s - self._collecting_since_s < self.metrics_window_s - 1e-9:
            return None
        # the oldest kept sample is the counters' baseline: rates come from the samples after it;
        # a lone sample (samples coarser than the window, e.g. 16-minute windows) is the window
        window = [s for t, s in self._samples if t > first] or [self._samples[-1][1]]
        new, outside = self.evaluate(now_s, window, config)
        if not outside or new == dict(config):
            return None
        if act:
            self._restarted(now_s)
            self._config = dict(new)
        return new

    def _averages(self, window: Sequence[Mapping[str, OperatorStats]]) -> dict[str, OperatorStats]:
        avg = {}
        for v in {v for s in window for v in s}:
            seen = [s[v] for s in window if v in s]
            n = len(seen)
            busy = [x.busy_max if self.busy_aggregator == "max" else x.busy_mean for x in seen]
            outs: dict[str, float] = {}
            for x in seen:
                for k, r in x.output_rates.items():
                    outs[k] = outs.get(k, 0.0) + r / n
            avg[v] = OperatorStats(
                parallelism=seen[-1].parallelism,
                processed_rate=sum(x.processed_rate for x in seen) / n,
                arrival_rate=sum(x.arrival_rate for x in seen) / n,
                busy_mean=sum(busy) / n, busy_max=sum(busy) / n,
                backpressure_max=max(x.backpressure_max for x in seen),
                output_rates=outs, backlog=seen[-1].backlog)
        return avg

    def evaluate(self, now_s: float, window: Sequence[Mapping[str, OperatorStats]], config: Mapping[str, int]
                 ) -> tuple[dict[str, int], bool]:
        """(recommended configuration, some vertex outside the band) for a full window."""
        avg = self._averages(window)
        sources = [v for v in self.graph if self.graph.in_degree(v) == 0 and v in avg]
        target = ds2_targets(self.graph, avg, {v: avg[v].arrival_rate for v in sources})
        catch_up = ds2_targets(self.graph, avg, {
            v: (avg[v].backlog / self.catch_up_s if self.catch_up_s > 0 else 0.0) for v in sources})
        backlog_mode = any(avg[v].backlog > self.backlog_lag_threshold_s * max(avg[v].arrival_rate, 1e-9)
                           for v in sources)
        u_max = 1.0 if backlog_mode else self.target_utilization + self.utilization_boundary
        u_min = 0.0 if backlog_mode else self.target_utilization - self.utilization_boundary

        def capacity(v: str, u: float, restart: bool) -> float:
            if u <= 0:
                return math.inf
            extra = target[v] * self.restart_s / self.catch_up_s if restart and self.catch_up_s > 0 else 0.0
            return catch_up.get(v, 0.0) + extra + target[v] / u

        new = dict(config)
        outside = False
        for v in nx.topological_sort(self.graph):
            a = avg.get(v)
            if a is None or self.graph.in_degree(v) == 0 or v not in config:
                continue
            p = int(config[v])
            tpr = a.processed_rate / a.busy_max if a.busy_max > 0 else math.inf
            if tpr < capacity(v, u_max, False) or tpr > capacity(v, u_min, True):
                outside = True
            factor = capacity(v, self.target_utilization, True) / tpr if math.isfinite(tpr) else 0.0
            factor = max(factor, 1.0 - self.max_scale_down_factor)
            node = self.graph.nodes[v]
            key_groups = int(node.get("max_parallelism", 128))
            lower = min(p, self.vertex_min_parallelism)
            upper = min(key_groups, max(p, self.vertex_max_parallelism))
            want = min(max(math.ceil(p * factor - 1e-9), lower), upper)
            if any(self.graph.edges[u, v].get("grouping") == "key" for u in self.graph.predecessors(v)):
                want = align_to_key_groups(want, key_groups, lower, upper)
            if want >= p:
                self._delayed.pop(v, None)  # no change or a scale-up clears a pending scale-down
                new[v] = want
                continue
            first, recs = self._delayed.get(v, (now_s, []))
            recs = [(t, q) for t, q in recs + [(now_s, want)] if t >= now_s - self.scale_down_interval_s - 1e-9]
            self._delayed[v] = (first, recs)
            if now_s - first < self.scale_down_interval_s - 1e-9:
                continue  # never scale down within the interval
            new[v] = max(q for _, q in recs)
        return new, outside


# ---------------------------------------------------------------------------------------- Dhalion


def dhalion_scale_up(n: int, backpressure_ms: Sequence[float] | float, max_factor: float = 5.0) -> int:
    """Heron's ``ScaleUpResolver``: ``n' = ceil(n (1 + B / (W - B)))`` with ``B`` the component's
    back pressure summed over its instances (ms per second, each instance at most 1000; the sum
    clamped to ``W - 1`` = 999) and the factor ``1 + B / (W - B)`` at most ``max_factor`` (5x)."""
    parts = [backpressure_ms] if isinstance(backpressure_ms, (int, float)) else list(backpressure_ms)
    b = min(sum(min(max(x, 0.0), 1000.0) for x in parts), 999.0)
    factor = min(1.0 + b / (1000.0 - b), max_factor)
    return int(math.ceil(n * factor - 1e-9))


@dataclass(frozen=True)
class DhalionAction:
    """One entry of Dhalion's action log (and, if it did not help, of its blacklist)."""

    t_s: float
    action: str
    """``scale_up`` or ``scale_down``."""
    component: str
    before: int
    after: int
    processed_rate: float
    """The component's processed rate (tuples/s) when the action was taken."""


@dataclass
class DhalionPolicy:
    """Dhalion's dynamic-resource-provisioning policy (Heron health manager; the authors'
    ``avflor/heron@healthmgr`` prototype for scale-down, the action log and the blacklist).

    Runs every ``interval_s`` over the samples of the last ``window_s``. Back pressure of a
    component = the time it held its senders back, summed over its instances (ms/s): the
    testbed records back pressure at the blocked *sender* (like Flink), Heron at the instance
    whose full queue started it; summed over the senders and split by their output rates, both
    are the same total when senders are not blocked at the same moment (Heron's sum overstates
    overlaps; so does this). Symptoms: back pressure > ``backpressure_threshold_ms``;
    processing-rate skew (max/min instance rate > ``rate_skew``); wait-queue skew (max/min queue
    > ``queue_skew``). Diagnosis of the first back-pressured component in topological order:
    data skew (both skews) or slow instance (queue skew only): no action (Heron has no resolver
    for them); under-provisioned (neither): ``dhalion_scale_up``. No back pressure anywhere and a
    component whose every instance's queue is below ``over_provisioned_queue``: over-provisioned,
    ``floor(scale_down_factor x n)``. One component per round; after an action the next round
    waits ``wait_s``, and its diagnosis judges the action: a scale-up that left the same
    component back-pressured with less than 0.9 x the expected rate gain is blacklisted, and a
    blacklisted action is never repeated for a similar diagnosis (same component, processed
    rate within 2x) — entries never expire. A scale-down that brought back pressure is logged in
    the blacklist too but, as in the prototype, never similar, so it blocks nothing.
    """

    graph: nx.DiGraph
    interval_s: float = 60.0
    """``health.policy.interval.ms``: the policy runs this often."""
    window_s: float = 300.0
    """Sensors' duration: the metrics of the last this many seconds."""
    backpressure_threshold_ms: float = 20.0
    """Back-pressure noise filter, ms per second summed over the component's instances."""
    rate_skew: float = 1.5
    """Processing-rate skew: max/min per-instance rate above this."""
    queue_skew: float = 20.0
    """Wait-queue skew: max/min per-instance mean queue above this."""
    max_factor: float = 5.0
    """Scale-up at most this factor per step."""
    wait_s: float = 3 * 60
    """One-time delay after an action."""
    scale_down_factor: float = 0.9
    """Scale-down: ``floor(this x n)`` (the prototype's 10 %)."""
    over_provisioned_queue: float = 1.0
    """Over-provisioned when every instance's mean input queue is below this (tuples: "pending
    packets almost zero")."""
    name: str = "dhalion"
    actions: list = field(default_factory=list)
    """The action log (``DhalionAction``)."""
    blacklist: list = field(default_factory=list)
    """Actions that did not help (``DhalionAction``); never expires."""
    diagnoses: list = field(default_factory=list)
    """(time, component, diagnosis) of every round with a symptom."""
    _samples: list = field(default_factory=list)
    _next_s: float = -math.inf
    _pending: DhalionAction | None = None

    def backpressure_ms(self, stats: Mapping[str, OperatorStats]) -> dict[str, float]:
        """Each non-source component's back pressure (ms/s summed over its instances): its
        senders' back-pressured time, each sender's split over its targets by output rate."""
        out = {v: 0.0 for v in self.graph if self.graph.in_degree(v) > 0}
        for u in self.graph:
            s = stats.get(u)
            succ = list(self.graph.successors(u))
            if s is None or not succ or s.backpressure_sum <= 0:
                continue
            total = sum(s.output_rates.get(v, 0.0) for v in succ)
            for v in succ:
                share = s.output_rates.get(v, 0.0) / total if total > 0 else 1.0 / len(succ)
                out[v] += 1000.0 * s.backpressure_sum * share
        return out

    def backpressured(self, stats: Mapping[str, OperatorStats]) -> list[str]:
        """Components whose back pressure exceeds the noise filter, in topological order."""
        bp = self.backpressure_ms(stats)
        return [v for v in nx.topological_sort(self.graph) if bp.get(v, 0.0) > self.backpressure_threshold_ms]

    def _window(self) -> dict[str, dict]:
        """Window means per component: back pressure, processed rate, per-instance rates/queues."""
        n = len(self._samples)
        agg: dict[str, dict] = {}
        for _, stats in self._samples:
            bp = self.backpressure_ms(stats)
            for v, s in stats.items():
                a = agg.setdefault(v, {"bp": 0.0, "rate": 0.0, "inst_rate": {}, "inst_queue": {}, "p": s.parallelism})
                a["bp"] += bp.get(v, 0.0) / n
                a["rate"] += s.processed_rate / n
                a["p"] = s.parallelism
                for i, r in enumerate(s.instance_processed):
                    a["inst_rate"][i] = a["inst_rate"].get(i, 0.0) + r / n
                for i, q in enumerate(s.instance_queue):
                    a["inst_queue"][i] = a["inst_queue"].get(i, 0.0) + q / n
        return agg

    @staticmethod
    def _skewed(values: Sequence[float], ratio: float) -> bool:
        if len(values) < 2:
            return False
        hi, lo = max(values), min(values)
        return hi > ratio * lo if lo > 0 else hi > 0

    def diagnose(self, agg: Mapping[str, dict]) -> tuple[str, str] | None:
        """(component, diagnosis) of this round, or None (healthy)."""
        pressured = [v for v in nx.topological_sort(self.graph)
                     if v in agg and self.graph.in_degree(v) > 0 and agg[v]["bp"] > self.backpressure_threshold_ms]
        if pressured:
            v = pressured[0]
            a = agg[v]
            q = self._skewed(list(a["inst_queue"].values()), self.queue_skew)
            r = self._skewed(list(a["inst_rate"].values()), self.rate_skew)
            if q and r:
                return v, "data_skew"
            if q:
                return v, "slow_instance"
            if r:
                return v, "rate_skew"  # no diagnoser claims it: no action
            return v, "under_provisioned"
        for v in nx.topological_sort(self.graph):
            a = agg.get(v)
            if (a is None or self.graph.in_degree(v) == 0 or a["p"] < 2 or not a["inst_queue"]
                    or math.floor(self.scale_down_factor * a["p"]) < 1):
                continue
            if all(x < self.over_provisioned_queue for x in a["inst_queue"].values()):
                return v, "over_provisioned"
        return None

    def _judge(self, agg: Mapping[str, dict], found: tuple[str, str] | None) -> None:
        """The post-wait evaluation of the last action (prototype ``successfulAction``)."""
        act, self._pending = self._pending, None
        if act.action == "scale_up":
            same = found is not None and found == (act.component, "under_provisioned")
            expected = 0.9 * act.processed_rate * act.after / max(act.before, 1)
            if same and agg[act.component]["rate"] < expected:
                self.blacklist.append(act)
        elif found is not None and found[1] != "over_provisioned" and agg.get(found[0], {}).get("bp", 0) > 0:
            self.blacklist.append(act)  # back pressure appeared after a scale-down

    def _blacklisted(self, action: str, component: str, rate: float) -> bool:
        if action != "scale_up":  # over-provisioning is never "similar" in the prototype
            return False
        return any(b.action == action and b.component == component and 0.5 * b.processed_rate <= rate
                   <= 2.0 * b.processed_rate for b in self.blacklist)

    def decide(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        self._samples.append((now_s, stats))
        self._samples = [(t, s) for t, s in self._samples if t > now_s - self.window_s + 1e-9]
        if now_s < self._next_s - 1e-9:
            return None
        self._next_s = now_s + self.interval_s
        agg = self._window()
        found = self.diagnose(agg)
        if self._pending is not None:
            self._judge(agg, found)
        if found is None:
            return None
        v, diagnosis = found
        self.diagnoses.append((now_s, v, diagnosis))
        n = int(config[v])
        if diagnosis == "under_provisioned":
            action, after = "scale_up", dhalion_scale_up(n, agg[v]["bp"], self.max_factor)
        elif diagnosis == "over_provisioned":
            action, after = "scale_down", math.floor(self.scale_down_factor * n)
        else:
            return None  # data skew / slow instance: Heron's DRP has no resolver for them
        if self._blacklisted(action, v, agg[v]["rate"]):
            return None
        after = _clamp(self.graph, v, after)
        if after == n:
            return None
        act = DhalionAction(now_s, action, v, n, after, agg[v]["rate"])
        self.actions.append(act)
        self._pending = act
        self._next_s = now_s + self.wait_s
        return {**dict(config), v: after}

    def advise(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        """Advisor mode: the round runs as in ``decide`` (the window, the diagnosis, the judgement of
        an earlier action), but an action it takes is withdrawn: not in the action log, no
        post-action evaluation pending, and the next round one interval later (no 3-minute wait)."""
        n = len(self.actions)
        out = self.decide(now_s, stats, config)
        if len(self.actions) > n:
            self.actions.pop()
            self._pending = None
            self._next_s = now_s + self.interval_s
        return out


@dataclass
class StaticPolicy:
    """Static provisioning: the configuration never changes."""

    name: str = "static"

    def decide(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        return None

    def advise(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        """Advisor mode: nothing to advise."""
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
        return _change_to(config, self.config_for(self.peak(now_s)))


def _change_to(config: Mapping[str, int], wanted: Mapping[str, int]) -> dict[str, int] | None:
    """``config`` with ``wanted``'s parallelism for each of its operators; None when that is no
    change (the policies that follow a plan: ``OraclePolicy``, ``HindsightSchedulePolicy``)."""
    new = {**dict(config), **{k: v for k, v in wanted.items() if k in config}}
    return new if new != dict(config) else None


@dataclass
class HindsightSchedulePolicy:
    """Knows the whole replayed load in advance and follows the cheapest schedule for it: a
    reference for what any schedule could reach, not a peer.

    At its first decision it builds ``scheduler.schedule.schedule`` with the priced solver (a
    dynamic program over a ``step_s`` grid) on the true model, the forecast being the actual load
    (each step's value the peak of the load over that step and its neighbours, sampled every
    ``sample_s``, so the level holds whatever the windows' phase). The cost it minimises is
    instance-hours x ``violation_s_per_instance_hour`` plus each change's restart violation,
    ``restart_s x mu / (mu - lambda)`` at the load when it is issued (the replay's own charge);
    every configuration in force meets ``utilization_target`` and the latency SLO at the load
    (no load violations are planned). Changes are issued ``lead_time_s`` before they are
    needed and applied at the first decision at or after their issue time.

    Sweeping ``violation_s_per_instance_hour`` traces the frontier of violation minutes
    against instance-hours that perfect foresight reaches under the replay's restart charge:
    where it lies tells whether a goal on both axes is reachable at all. With at most
    ``max_reconfigurations_per_day`` changes in any 24 h (default: no limit in practice).
    ``rate_at(t_s)``: the load at policy second ``t_s``; ``duration_s``: policy seconds replayed.
    """

    model: object
    rate_at: object
    duration_s: float
    violation_s_per_instance_hour: float = 60.0
    restart_s: float = 30.0
    step_s: float = 300.0
    sample_s: float = 60.0
    lead_time_s: float = 300.0
    utilization_target: float = 0.9
    latency_slo_ms: float | None = None
    max_reconfigurations_per_day: int = 288
    name: str = "hindsight"
    changes_: list = field(default_factory=list)
    """``(issue policy second, configuration)`` of every planned change, in order, once built."""
    _built: bool = False

    def _build(self, now_s: float, config: Mapping[str, int]) -> None:
        from scheduler.plan import PlanConfig
        from scheduler.schedule import ScheduleConfig, schedule

        epoch = pd.Timestamp("2000-01-01")
        per_step = max(1, int(math.ceil(self.step_s / self.sample_s)))
        n = max(1, int(math.ceil((self.duration_s - now_s) / self.step_s)))
        # the peak over [t - step, t + step] of each grid point t: a step's level covers the load
        # whichever window of it the replay decides in
        samples = [float(self.rate_at(now_s + k * self.sample_s)) for k in range((n + 2) * per_step + 1)]
        values = [max(samples[max(0, (k - 1) * per_step): (k + 1) * per_step + 1]) for k in range(1, n + 1)]
        index = epoch + pd.to_timedelta(now_s + np.arange(1, n + 1) * self.step_s, unit="s")
        cfg = ScheduleConfig(lead_time_s=self.lead_time_s, stabilization_s=0.0, lookahead_s=0.0,
                             max_reconfigurations_per_day=self.max_reconfigurations_per_day,
                             plan=PlanConfig(utilization_target=self.utilization_target,
                                             latency_slo_ms=self.latency_slo_ms),
                             restart_s=self.restart_s,
                             violation_s_per_instance_hour=self.violation_s_per_instance_hour, solver="priced")
        sched = schedule(self.model, pd.Series(values, index=index), samples[0], cfg,
                         now=epoch + pd.Timedelta(seconds=now_s), current_config=dict(config))
        self.changes_ = [((r.issue_at - epoch).total_seconds(), dict(r.config))
                         for r in sched.reconfigurations if r.direction != "keep"]
        self._built = True

    def decide(self, now_s: float, stats: Mapping[str, OperatorStats], config: Mapping[str, int]
               ) -> dict[str, int] | None:
        if not self._built:
            self._build(now_s, config)
        due = [c for t, c in self.changes_ if t <= now_s + 1e-9]
        return _change_to(config, due[-1]) if due else None


PEERS: tuple[dict, ...] = (
    {"name": "ds2", "source": "Kalavri et al., OSDI 2018; strymon-system/ds2 (policy scaling.rs, manager.rs)",
     "reproduced": "true processing rate = processed / useful (busy) time, mean over instances; targets "
                   "propagated from the sources' arrival rates by the observed output/input ratios in "
                   "topological order; p = ceil(target / true rate per instance) for every operator in one "
                   "action; the manager's activation window (activation_time = 1) and its hysteresis "
                   "(a scale-down by exactly one instance is ignored).",
     "assumptions": "no skew (the per-instance rate is the mean), capacity linear in instances, true "
                    "rates independent of parallelism. Under key skew (the Zipf-keyed WordCount) the "
                    "hottest instance saturates while the mean looks fine and DS2 under-sizes: the "
                    "`-uniform` cases (`wordcount-uniform`, `ds2/uniform-keys`) are where it holds.",
     "differences": "busy time from the testbed (the engine's busy_ms) instead of DS2's instrumented "
                    "useful time (deserialise + process + serialise); the source target is the "
                    "measured arrival rate (processed + backlog growth), not an external "
                    "source_rates file; sources are never rescaled (as in DS2); no warm-up epochs: the "
                    "replay consults it only on windows after a restart ended; scaling_factor 0 and "
                    "target_rate_ratio_threshold off (the online manager ignores it)."},
    {"name": "ds2-max", "source": "a variant defined here, not a published system",
     "reproduced": "DS2 with the busiest instance's busy time instead of the mean (as the Flink "
                   "autoscaler aggregates busy time: MAX over subtasks).",
     "assumptions": "as DS2, except that the hottest instance bounds the operator's capacity.",
     "differences": "not DS2: reported so the effect of DS2's no-skew assumption can be seen."},
    {"name": "flink-autoscaler", "source": "apache/flink-kubernetes-operator flink-autoscaler, 1.13 defaults",
     "reproduced": "rate-based evaluation: TPR = input rate / busy time (MAX over subtasks), target "
                   "rate = source input + backlog growth propagated by edge output ratios, catch-up "
                   "rate = lag / 30 min, restart allowance 5 min; scale factor C(0.7, restart) / TPR "
                   "clamped to at least 0.4 (-60 % per step); acts only when some vertex is outside "
                   "[C(1.0), C(0.4, restart)], then rescales every changed vertex; backlog mode (lag "
                   "> 5 min of input) disables scale-down; 15 min metric window refilled after every "
                   "rescale (history cleared, also when the configuration changes under it), no "
                   "samples in the 5 min stabilization; scale-down only 1 h after its first "
                   "recommendation, at the hour's maximum recommendation; vertex min/max parallelism "
                   "1/200 and EVENLY_SPREAD key-group alignment for keyed inputs (key groups = the "
                   "operator's max parallelism).",
     "assumptions": "capacity linear in parallelism (observed-scalability off, the default); busy "
                    "time measures useful work.",
     "differences": "sources are not rescaled (the testbed's sources are external queues without "
                    "service time, so no partition alignment); the restart begins at the action "
                    "(Flink waits for the job's RUNNING timestamp: the replay consults it only "
                    "after the restart ended, so at most one window differs); the window's rates "
                    "are window averages, not counter differences; no observed-TPR switch for "
                    "sources, no ineffective-scaling detection (off by default), no memory "
                    "tuning, GC/heap vetoes, quotas or excluded periods; metrics every replay "
                    "window instead of the 60 s reconcile interval."},
    {"name": "dhalion", "source": "Floratou et al., VLDB 2017; Heron healthmgr DRP policy; avflor/heron@healthmgr",
     "reproduced": "policy every 60 s over a 300 s window; back pressure = the bottleneck's own time "
                   "summed over its instances, > 20 ms/s; diagnosis of the first back-pressured "
                   "component (topological order): data skew (rate skew > 1.5 and queue skew > 20) "
                   "or slow instance (queue skew only): no action, under-provisioned: "
                   "n' = ceil(n (1 + B / (W - B))) capped at 5x; over-provisioned (no back pressure, "
                   "every queue almost empty): floor(0.9 n); one component per round; 3 min wait "
                   "after an action; the action log, the post-wait evaluation and a blacklist that "
                   "never expires (similar = same component, processed rate within 2x; a failed "
                   "scale-down is logged but never similar, as in the prototype).",
     "assumptions": "a component's back-pressure share measures how far short its capacity is "
                    "(linear scaling); thresholds as published.",
     "differences": "the testbed records back pressure at the blocked sender (Flink-style, "
                    "credit-based), Heron at the instance that started it: here a component's back "
                    "pressure is its senders' blocked time split by output rate (the same total "
                    "when senders do not block at once); queues in tuples, not packets or bytes, "
                    "and 'almost zero' = below 1 tuple per instance on average; a scale-up is "
                    "judged by its intended test (0.9 x the expected rate gain), not the "
                    "prototype's bug that compares against the new parallelism; more than one "
                    "back-pressured component: the first in topological order (Heron throws); the "
                    "data-skew and slow-instance resolvers were never implemented (so no action); "
                    "the Throughput-SLO spout policy is not reproduced (sources are not scaled)."},
)
"""Per peer: what is reproduced, its assumptions, every known difference from the original
(printed in docs/RESULTS.md's "Peers" section by ``experiments.results``)."""
