"""One-step planning: the cheapest configuration that meets the targets at an input rate.

Units: rates in tuples/s, times in ms.

``plan(model, rate, PlanConfig(...)) -> Plan`` returns the configuration with the **fewest
instances** over the operators whose parallelism may change (non-source operators whose
``min_parallelism < max_parallelism``; sources and pinned operators keep the model's parallelism)
such that at ``rate``

* every instance's utilization (``max_utilization``, the hottest instance) is at most
  ``utilization_target`` (so the job is not saturated), and
* when ``latency_slo_ms`` is given, the end-to-end latency statistic ``latency_stat``
  (mean, p95 or p99) is within it,

with every parallelism in its operator's ``[min_parallelism, max_parallelism]``, operators joined
by forward edges sharing one parallelism (``CompiledModel.forward_groups``; such a group of k
operators costs k instances per unit of parallelism) and, with ``align``, key-grouped operators
restricted to divisors of their ``max_parallelism`` (the number of key groups, so every instance
gets the same number of key groups). Among the cheapest configurations, the one with the lowest
latency statistic wins.

How, and why it is optimal for the model (``modeler.queueing``):

1. **Minimal counts from utilization.** Without broadcast edges an operator's utilization depends
   only on its own (group's) parallelism: ``rate * visit * hot_share(p) * E[S](p)``. The hottest
   share of a key-grouped operator is *not* monotone in p (key groups are assigned in contiguous
   ranges, so adding an instance can put a heavier neighbour next to the hot key group), so there
   is no closed form: starting at the bound ``p >= rate * visit * E[S] / target`` (the hottest
   share is at least 1/p) we evaluate p upward with ``predict_batch`` and take the smallest p
   that meets the target: ``b_g``. Every feasible configuration has ``p_g >= b_g``, so
   ``T0 = sum b_g`` is a lower bound on the instance count, and without an SLO ``b`` is the
   unique configuration with T0 instances: the answer. (With broadcast edges, loads downstream
   grow with the broadcast target's parallelism; ``b_g`` is then computed with every other
   operator at its minimum, still a valid lower bound, and every candidate is checked in full.)
2. **Latency: best-first over the instance count, branch and bound within a count.** For
   T = T0, T0 + 1, ... we search the configurations with exactly T instances and ``p_g >= b_g``
   for the lowest latency; the first T with a configuration within the SLO is the answer. The
   search assigns one group at a time (vectorized over the whole frontier with
   ``predict_batch``). A partial assignment is pruned when a lower bound on the latency of all
   its completions exceeds the SLO: every unassigned group raised to the largest value the
   remaining budget allows, evaluated for the **mean** latency. That is a lower bound because
   (a) the model's mean latency is monotone non-increasing in the parallelism of *monotone*
   groups: operators fed only by shuffle (or forward, within the group) edges with linear
   scaling, when output batching is off (a Hypothesis-tested invariant,
   ``tests/modeler/test_queueing.py``, ``tests/scheduler/test_plan.py``); (b) for the other
   groups (key-grouped, contention/table scaling, batching) the bound is evaluated in a
   *relaxed* model (``_relaxed_model``: key grouping as an even shuffle, scaling at its smallest
   factor, no batching) whose mean latency is below the real one and monotone in every group
   (also Hypothesis-tested); broadcast-fed groups are enumerated before any bound is used; and
   (c) p95/p99 are quantiles of the model's own end-to-end distribution (the path mixture's
   Laplace transform, numerically inverted: ``modeler.queueing``), which is stochastically
   non-increasing in monotone groups' parallelism, so they are monotone like the mean
   (Hypothesis-tested, to the inversion's accuracy, credited as 1e-6; the relaxed model's tails are below the real
   ones up to 1 % and monotone too, also Hypothesis-tested, not proven: ``_RELAXED_TAIL_EPS``). For a p95/p99 SLO the bound is
   the larger of the mean and the statistic (the tail only for rows the mean does not prune). The DRS-style greedy (add an instance
   where latency drops most per instance) gives an incumbent and an upper bound on T; it is not
   trusted on its own: our latency is not separable (variability propagates between operators,
   and the tails are quantiles of the whole path mixture).
2'. **The fast path** (``scheduler/_plan_fast.py``; models without broadcast or forward edges,
   i.e. every group a single operator whose load does not depend on the others). There the mean
   latency is exactly ``C + sum_v w_v sojourn_v`` plus, with output batching, per-edge buffer
   waits that are exact once both ends are assigned and smallest at the smallest parallelisms,
   with constant weights (the path mixture's flow shares) and constant network terms; ``sojourn_v`` depends on
   p_v and on v's input dispersion, which upstream departure smoothing can only raise. (a) ``b``
   comes from the closed-form utilization over each whole domain. (b) One *floor* pass (no
   smoothing anywhere) gives per-operator tables ``f_v(p)`` that are lower bounds on v's
   sojourn in every configuration and depend on p_v alone (tested), so ``C + sum_v w_v f_v(p_v)``
   is a separable lower bound; a multiple-choice knapsack DP over the operators gives, for
   every suffix of the topological order and every number of remaining instances, the least
   floor sum: the root bound of each instance count and the bound of every partial
   assignment. (c) Branch and bound over the instance count, operators assigned in topological
   order (vectorized over the frontier): an assigned prefix has *exact* sojourns (all its
   ancestors are assigned; the per-operator evaluation equals ``predict_batch``'s mean, tested
   to 1e-9), the unassigned suffix adds its knapsack bound, and a node is dropped when the sum
   exceeds the level's threshold: the SLO, or at the first level whose floor-optimal allocation
   meets the SLO, that allocation's exact mean (so the tie-break is exact too). Several levels
   share one pass; a frontier over ``_plan_fast.CHUNK`` rows descends in chunks depth-first,
   and each complete configuration found drops higher levels and tightens its own. (d) The surviving complete configurations are checked with
   ``predict_batch``; the first level with one meeting the targets is the answer, its lowest
   latency the tie-break. For p95/p99 the pruning bound is still the mean (the tails are
   monotone but not separable, so the knapsack cannot hold them): exact on small DAGs. For
   p95/p99 the greedy runs first; when more than ``_TAIL_EXACT_LIMIT`` configurations have fewer
   instances than its answer (one level above the utilization-minimal counts of 48 operators
   already has ~270,000), the exact search is not started and the greedy's answer is the plan,
   with ``optimal=False`` and the count in the reasons. Otherwise, when the frontier passes
   ``_TAIL_FRONTIER`` partial assignments, the plan is the cheaper of the greedy and the first
   floor-optimal allocation (levels up to the greedy's count only) that meet the SLO, with
   ``optimal=False``. A p95/p99 is a numerical inversion (~6-8 ms for one row of a 50-operator
   DAG, ~2 ms a row in batches), so it is computed only where needed: the greedy ranks its steps
   by the gamma fit to the first two moments (``BatchPrediction.approx_latency``), computes the
   exact statistic only where the fit, scaled by the last exact/fit ratio, predicts the SLO
   holds, and bisects its path (which only adds instances, so the statistic never rises along
   it) for the first step meeting the SLO; while the fit puts the SLO far away the greedy takes
   several of a round's best increments at once (``_greedy``: jumps, each a ``predict_batch``
   call saved); the fallback checks floor-optimal rows whose mean
   meets the SLO and whose scaled fit is within 5 % of it, 8 at a time, in order; exact values
   are cached per configuration (``_Problem.stat_cache``); the all-max bound on the statistic is
   evaluated only when the fast path finds no plan. The DRS-style greedy and this fallback are
   heuristics: only an exhaustive search or a bound proves a p95/p99 plan optimal.
3. **Infeasibility is proven, not guessed.** An operator with no parallelism meeting the
   utilization target (or a pinned one above it) makes the plan infeasible, and the reason names
   it. For the SLO, the lowest latency any configuration can reach is the latency with every
   monotone group at its maximum, minimized over the non-monotone groups' values (enumerated when
   there are at most ``max_global_enumeration`` combinations); above the SLO, no configuration
   exists. When the search runs out of ``max_evaluations`` first, the plan says so
   (``optimal=False``) instead of pretending.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Mapping, Sequence

import numpy as np

from modeler.modelfile import JobModel, ScalingSpec
from modeler.queueing import (
    LATENCY_STATS,
    BatchPrediction,
    CompiledModel,
    Prediction,
    compile_model,
    cpu_work_per_tuple,
    predict_batch,
    prediction_from_batch,
)
from scheduler import _plan_fast
from scheduler.errors import InfeasiblePlan, SchedulerError
from scheduler.targets import Targets

_UTIL_EPS = 1e-9
_LAT_EPS = 1e-12
_TAIL_FRONTIER = 2_000
"""Frontier (partial assignments) at which the fast path gives up on a p95/p99 SLO: the mean
bound prunes little against a tail SLO on large DAGs (50 operators: past 2,000 within ~10 ms, past
5,000 within ~40 ms, never finishing); the exhaustive-search tests on small DAGs pass with it."""
_ROUNDING = 1e-9
"""Relative difference between the fast path's per-operator mean and ``predict_batch``'s that is
floating-point rounding, not a disagreement: a level whose candidates the fast mean puts at the
SLO and ``predict_batch`` above it by no more than this is passed over to the next level (the
exact latency decides), not handed to the general search."""
_TAIL_EXACT_LIMIT = 100_000
"""With a p95/p99 SLO, the fast path's exact search is not started when more configurations than
this have fewer instances than the greedy allocation (the mean bound prunes little against a tail
SLO, so the search would pass ``_TAIL_FRONTIER`` and give up anyway: ~35 ms lost on 50 operators,
where one level above the utilization-minimal counts already has C(48+4, 4) ~ 270,000)."""
_JUMP_SHARE = 0.5
"""A greedy jump takes the round's best increments whose first-order reductions of the ranked
statistic add up to at most this share of the remaining gap (0.5: the same instance counts as single steps
on the benchmark DAGs, seeds 1-4 x p99 SLOs 0.6-0.9x, in half the time; 0.75: 12 % more instances
beyond the utilization-minimal counts)."""
_TAIL_SLO_EPS = 1e-9
"""Relative slack on comparisons of a p95/p99 with the SLO. A quantile is a root of the inverted
transform, whose ~1e-11 of amplified rounding noise depends on where each element sat in a
vectorized numpy call: the same configuration's p99 can differ by ~1e-11 between batches (a
plan's rows and a sweep's), so ties at the SLO are decided with this slack, far below the
inversion's accuracy (~1e-7)."""
_TAIL_EPS = 1e-6
"""Relative accuracy credited to p95/p99 when they bound (numerical Laplace inversion with 29
Euler nodes: up to ~2e-7 observed where deterministic network hops shift the paths)."""
_RELAXED_TAIL_EPS = 0.01
"""Relative slack credited to a p95/p99 of the *relaxed* model when it bounds. Its mean is a
proven-by-construction lower bound, its tails are not: the relaxed model drops the correlated
copies' terms (``copies_correlated=False``), which add to the mean but reshape the path mixture,
and Hypothesis found a relaxed p99 0.19 % above the real one (a forward pair at parallelism 2,
2026-12-06). Pruning with 1 % slack only evaluates a few more rows; it never changes a plan."""


def _tail_eps(relaxed: bool) -> float:
    return _RELAXED_TAIL_EPS if relaxed else _TAIL_EPS


def slo_slack(stat: str) -> float:
    """Relative slack with which a latency statistic meets an SLO (``latency <= slo * (1 +
    slack)``): 1e-12 for the mean, ``_TAIL_SLO_EPS`` for p95/p99. Plan and validate share it."""
    return _LAT_EPS if stat == "mean" else _TAIL_SLO_EPS


_UNSET = object()


@dataclass(frozen=True, init=False)
class PlanConfig:
    """Targets and search limits of ``plan``.

    ``PlanConfig(Targets(...), align=...)``; the targets' fields are also accepted as keywords
    (``PlanConfig(utilization_target=0.8, latency_slo_ms=50)``: folded into ``targets``) and
    read back as properties, so older callers keep working.
    """

    targets: Targets
    """What the plan must meet (``scheduler.targets.Targets``: utilization target, latency SLO
    and its statistic, headroom)."""
    align: bool
    """Key-grouped operators only at divisors of their max_parallelism (even key-group ranges)."""
    max_evaluations: int
    """Budget of model evaluations (configurations) for the latency search (default 200,000)."""
    max_global_enumeration: int
    """Largest joint enumeration of non-monotone groups used to prove an SLO unreachable
    (default 50,000)."""

    def __init__(self, targets: Targets | None = None, align: bool = False, max_evaluations: int = 200_000,
                 max_global_enumeration: int = 50_000, *, utilization_target=_UNSET, latency_slo_ms=_UNSET,
                 latency_stat=_UNSET, headroom=_UNSET) -> None:
        legacy = {k: v for k, v in (("utilization_target", utilization_target), ("latency_slo_ms", latency_slo_ms),
                                    ("latency_stat", latency_stat), ("headroom", headroom)) if v is not _UNSET}
        # no targets: built from the keywords, so an SLO alone gets Targets' default ceiling
        base = targets if targets is not None else Targets(**legacy)
        object.__setattr__(self, "targets", replace(base, **legacy) if legacy and targets is not None else base)
        object.__setattr__(self, "align", align)
        object.__setattr__(self, "max_evaluations", max_evaluations)
        object.__setattr__(self, "max_global_enumeration", max_global_enumeration)

    @property
    def utilization_target(self) -> float:
        return self.targets.utilization_target

    @property
    def latency_slo_ms(self) -> float | None:
        return self.targets.latency_slo_ms

    @property
    def latency_stat(self) -> str:
        return self.targets.latency_stat

    def check(self) -> None:
        if isinstance(self.max_evaluations, bool) or not isinstance(self.max_evaluations, int) \
                or self.max_evaluations < 1:
            raise SchedulerError("must be an integer >= 1", field="max_evaluations", value=self.max_evaluations)


@dataclass(frozen=True)
class Plan:
    """The answer of ``plan``. ``to_dict()`` is the ``augury plan --json`` object."""

    feasible: bool
    config: Mapping[str, int]
    """Parallelism of every operator. When infeasible: the closest configuration examined
    (every operator at its least-utilized or lowest-latency value; on shared cores the one of
    those and a greedy ascent that the model predicts to carry most), for inspection."""
    instances: int
    """Instances over the operators whose parallelism may change (the minimized quantity)."""
    total_instances: int
    """Instances over all operators, sources and pinned operators included."""
    prediction: Prediction
    """The model's prediction for ``config`` at ``rate``."""
    reasons: tuple[str, ...]
    """Why the plan looks like it does; when infeasible, which operator or bound makes it so."""
    optimal: bool
    """True when the search proved the answer (the cheapest, then lowest latency; or that no
    configuration exists). False only when ``max_evaluations`` ran out."""
    rate: float
    latency_stat: str
    evaluations: int
    """Model evaluations (configurations) the search used."""
    variable: tuple[str, ...] = field(default=())
    """Operators whose parallelism the plan chose."""

    def raise_if_infeasible(self) -> "Plan":
        """This plan, or ``InfeasiblePlan`` (exit code 1) carrying the reasons and the plan."""
        if not self.feasible:
            raise InfeasiblePlan("no configuration within the bounds meets the targets: "
                                 + "; ".join(self.reasons), reasons=self.reasons, plan=self)
        return self

    def to_dict(self) -> dict:
        return {
            "feasible": self.feasible, "rate": self.rate, "config": dict(self.config),
            "instances": self.instances, "total_instances": self.total_instances,
            "latency_stat": self.latency_stat, "optimal": self.optimal,
            "evaluations": self.evaluations, "variable": list(self.variable),
            "reasons": list(self.reasons), "prediction": self.prediction.to_dict(),
        }


# ----------------------------------------------------------------------------- problem


@dataclass
class _Group:
    members: tuple[int, ...]
    names: tuple[str, ...]
    variable: bool
    domain: np.ndarray
    """Allowed parallelism values, increasing."""
    monotone: bool
    fixed_value: int
    key_grouped: bool
    analytic_start: bool
    relaxable: bool
    """Not fed by a broadcast edge: the relaxed model is monotone in it (see ``_relaxed_model``)."""

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def label(self) -> str:
        return "+".join(self.names)


class _Problem:
    def __init__(self, compiled: CompiledModel, rate: float, cfg: PlanConfig) -> None:
        self.c = compiled
        self.rate = float(rate)
        self.cfg = cfg
        self.U = float(cfg.utilization_target)
        self.stat = cfg.latency_stat
        # The SLO with the statistic's comparison slack (see _TAIL_SLO_EPS): every comparison
        # of a latency with the SLO uses this.
        self.slo = None if cfg.latency_slo_ms is None else cfg.latency_slo_ms * (1 + slo_slack(cfg.latency_stat))
        self.evaluations = 0
        self.tail_ratio = 1.0
        """Last exact / gamma-fit ratio of the statistic the greedy saw (p95/p99 heuristics)."""
        self.greedy_result: tuple[np.ndarray, float] | None = None
        """``_greedy``'s answer (values, latency statistic), once the fast path ran it."""
        self.greedy_at: tuple[BatchPrediction, int] | None = None
        """Where ``_greedy``'s answer was evaluated (batch, row), when it was."""
        self.b_batch: BatchPrediction | None = None
        """The prediction of the utilization-minimal configuration (row 0), once evaluated."""
        self.stat_cache: dict[bytes, float] = {}
        """Exact latency statistic (ms, NaN when saturated) per configuration already computed
        (``stat_at``), keyed by the parallelism row's bytes: p95/p99 cost a numerical inversion."""
        self.reasons: list[str] = []
        model = compiled.model
        names = compiled.names
        idx = compiled.index
        self.base = compiled.config_array([{}])[0]
        self.blocking = model.buffer_tuples is not None or any(e.buffer_tuples is not None for e in model.edges)
        """Bounded buffers: no latency bound prunes (``_bound``, ``_global_bound``) and no
        monotonicity is assumed (``coupled``). Hypothesis found, with buffer_tuples 0 on one edge,
        a buffered mean below the unbuffered (relaxed) one, and a mean that rises when an operator
        gains an instance: neither the relaxed bound nor monotonicity holds there."""
        self.shared_cores = model.cores is not None
        """Shared cores: an instance added to one operator slows every other operator's CPU
        work, so latency is not monotone in any operator's parallelism (``coupled``), and, as
        under blocking, no latency bound prunes."""
        self.no_bound = self.blocking or self.shared_cores
        self.coupled = self.no_bound or any(e.grouping == "broadcast" for e in model.edges)
        batching = model.buffer_timeout_ms > 0 and model.buffer_records > 1
        in_edges = {v: compiled.in_edges[v] for v in range(len(names))}
        seen: set[int] = set()
        groups: list[_Group] = []
        parts = [tuple(g) for g in compiled.forward_groups]
        for g in parts:
            seen.update(g)
        parts += [(v,) for v in range(len(names)) if v not in seen]
        parts.sort(key=lambda g: g[0])
        self.bound_conflicts: list[str] = []
        for members in parts:
            specs = [model.operator(names[v]) for v in members]
            lo = max(s.min_parallelism for s in specs)
            hi = min(s.max_parallelism for s in specs)
            has_source = any(s.is_source for s in specs)
            key_members = [v for v in members if any(e.grouping == "key" for e in in_edges[v])]
            variable = not has_source and lo < hi
            label = "+".join(names[v] for v in members)
            if lo > hi:
                self.bound_conflicts.append(
                    f"{label}: operators joined by forward edges need one parallelism, but their "
                    f"bounds [{lo}, {hi}] (largest min_parallelism, smallest max_parallelism) are empty")
            values = np.arange(lo, hi + 1) if variable else np.array([int(self.base[members[0]])])
            if variable and cfg.align and key_members:
                for v in key_members:
                    m = int(compiled.max_p[v])
                    values = values[m % values == 0]
                if values.size == 0:
                    self.bound_conflicts.append(
                        f"{label}: no divisor of max_parallelism lies in [{lo}, {hi}] (--align)")
                    values = np.array([hi])
            monotone = (
                variable and not batching
                and all(s.scaling.form == "linear" for s in specs)
                and all(e.grouping == "shuffle" or (e.grouping == "forward" and e.u in members)
                        for v in members for e in in_edges[v])
            )
            relaxable = not any(e.grouping == "broadcast" for v in members for e in in_edges[v])
            analytic = all(e.grouping in ("shuffle", "key", "forward") for v in members for e in in_edges[v])
            groups.append(_Group(
                members=tuple(members), names=tuple(names[v] for v in members), variable=variable,
                domain=values.astype(np.int64), monotone=monotone,
                fixed_value=int(self.base[members[0]]), key_grouped=bool(key_members),
                analytic_start=analytic, relaxable=relaxable))
        self.groups = groups
        self.var = [g for g in groups if g.variable]
        self.util_cache: list[dict[int, float]] = [dict() for _ in self.var]
        self.scanned_to: list[int] = [-1 for _ in self.var]  # domain index scanned up to
        self._next: dict[tuple[int, int], int | None] = {}  # next_value's cache
        self.fast_util: dict[int, np.ndarray] = {}
        """Hottest-instance utilization over group j's whole domain (``_fast_counts``)."""
        # The configuration with every variable group at its smallest allowed value.
        self.low = self.base.copy()
        for g in self.var:
            self.low[list(g.members)] = g.domain[0]

    # ------------------------------------------------------------------ evaluation
    def config_matrix(self, values: np.ndarray) -> np.ndarray:
        """Rows of variable-group values [m, G] -> full parallelism matrix [m, V]."""
        values = np.atleast_2d(values)
        P = np.repeat(self.low[None, :], values.shape[0], axis=0)
        for j, g in enumerate(self.var):
            for v in g.members:
                P[:, v] = values[:, j]
        return P

    def evaluate(self, P: np.ndarray, rate: float | None = None, relaxed: bool = False) -> BatchPrediction:
        self.evaluations += P.shape[0]
        compiled = self.relaxed_compiled if relaxed else self.c
        return predict_batch(compiled, P, self.rate if rate is None else rate)

    @cached_property
    def relaxed_compiled(self) -> CompiledModel:
        relaxed = compile_model(_relaxed_model(self.c.model, self.var), copies_correlated=False)
        assert relaxed.names == self.c.names
        return relaxed

    def util_ok(self, batch: BatchPrediction) -> np.ndarray:
        return (~batch.saturated) & (batch.max_utilization.max(axis=1) <= self.U * (1 + _UTIL_EPS))

    def latency(self, batch: BatchPrediction) -> np.ndarray:
        return batch.latency(self.stat)

    def stat_at(self, batch: BatchPrediction, rows) -> np.ndarray:
        """``latency(batch)[rows]`` through ``stat_cache`` (only the missing rows computed)."""
        rows = np.asarray(rows, dtype=np.int64)
        keys = [batch.parallelism[r].tobytes() for r in rows]
        missing = [j for j, k in enumerate(keys) if k not in self.stat_cache]
        if missing:
            # Newton starts from the gamma fit scaled by the last exact/fit ratio seen (closer).
            scale = self.tail_ratio if 0.5 < self.tail_ratio < 2.0 else 1.0
            vals = batch.latency_at(self.stat, rows[missing], scale)
            for j, v in zip(missing, vals.tolist()):
                self.stat_cache[keys[j]] = v
        return np.array([self.stat_cache[k] for k in keys], dtype=float)

    def to_config(self, row: np.ndarray) -> dict[str, int]:
        return {n: int(p) for n, p in zip(self.c.names, row)}

    # ------------------------------------------------------------------ utilization
    def _group_util(self, batch: BatchPrediction, g: _Group) -> np.ndarray:
        cols = list(g.members)
        # At the full rate: when another group saturates the row, predict_batch reports the
        # utilization at the throttled throughput, which would understate this group's load.
        scale = np.where(batch.throughput > 0, batch.rate / np.where(batch.throughput > 0, batch.throughput, 1.0), 1.0)
        util = batch.max_utilization[:, cols].max(axis=1) * scale
        return np.where(batch.saturated & np.isin(batch.bottleneck, cols), np.inf, util)

    def scan_util(self, requests: Mapping[int, Sequence[int]]) -> None:
        """Evaluate the utilization of variable group j at the domain indices requested."""
        requests = {j: [i for i in idx if int(self.var[j].domain[i]) not in self.util_cache[j]]
                    for j, idx in requests.items()}
        requests = {j: i for j, i in requests.items() if i}
        if not requests:
            return
        if not self.coupled:
            width = max(len(i) for i in requests.values())
            vals = np.array([[g.domain[0] for g in self.var]] * width, dtype=np.int64)
            for j, idx in requests.items():
                col = [self.var[j].domain[i] for i in idx]
                col += [col[-1]] * (width - len(col))
                vals[:, j] = col
            batch = self.evaluate(self.config_matrix(vals))
            for j, idx in requests.items():
                util = self._group_util(batch, self.var[j])
                for r, i in enumerate(idx):
                    self.util_cache[j][int(self.var[j].domain[i])] = float(util[r])
            return
        rows, owners = [], []
        for j, idx in requests.items():
            for i in idx:
                vals = np.array([g.domain[0] for g in self.var], dtype=np.int64)
                vals[j] = self.var[j].domain[i]
                rows.append(vals)
                owners.append((j, int(self.var[j].domain[i])))
        batch = self.evaluate(self.config_matrix(np.array(rows)))
        for r, (j, p) in enumerate(owners):
            self.util_cache[j][p] = float(self._group_util(batch, self.var[j])[r])

    def next_value(self, j: int, p: int) -> int | None:
        """Group j's next allowed value above ``p`` (utilization-feasible where that is not
        monotone), or None; cached (the greedy asks for the same values round after round)."""
        key = (j, p)
        if key not in self._next:
            g = self.var[j]
            dom = g.domain
            i = int(np.searchsorted(dom, p, side="right"))
            while i < len(dom) and (not g.monotone or self.coupled):
                self.ensure_scanned(j, int(dom[i]))
                if self.util_feasible(j, dom[i]):
                    break
                i += 1
            self._next[key] = int(dom[i]) if i < len(dom) else None
        return self._next[key]

    def util_feasible(self, j: int, p: int) -> bool:
        return self.util_cache[j].get(int(p), np.inf) <= self.U * (1 + _UTIL_EPS)

    def ensure_scanned(self, j: int, upto_value: int) -> None:
        """Utilization of group j known for every domain value in [b_j, upto_value]."""
        dom = self.var[j].domain
        last = int(np.searchsorted(dom, upto_value, side="right")) - 1
        if last > self.scanned_to[j]:
            self.scan_util({j: list(range(self.scanned_to[j] + 1, last + 1))})
            self.scanned_to[j] = last

    def minimal_counts(self) -> tuple[np.ndarray | None, list[str]]:
        """``b_g`` for every variable group (domain values), or the reasons none exists."""
        reasons: list[str] = []
        G = len(self.var)
        if G:
            low_batch = self.evaluate(self.config_matrix(np.array([[g.domain[0] for g in self.var]])))
            visit = low_batch.arrival_rate[0] / max(self.rate, 1e-300)
        start = []
        for j, g in enumerate(self.var):
            i0 = 0
            if g.analytic_start and self.rate > 0:
                need = 0.0
                for v in g.members:
                    if self.c.service_s[v] <= 0:
                        continue
                    factor = float(np.min(self.c.model.operator(self.c.names[v]).scaling.factor_at(
                        g.domain.astype(float))))
                    need = max(need, self.rate * visit[v] * self.c.service_s[v] * factor / self.U)
                i0 = int(np.searchsorted(g.domain, need * (1 - 1e-9), side="left"))
                i0 = min(i0, len(g.domain) - 1)
            start.append(i0)
        b = np.zeros(G, dtype=np.int64)
        pending = {j: start[j] for j in range(G)}
        chunk = 16
        first = True
        while pending:
            req = {}
            for j, i0 in pending.items():
                dom = self.var[j].domain
                idx = list(range(i0, min(i0 + chunk, len(dom))))
                if first and idx[-1] != len(dom) - 1:
                    idx.append(len(dom) - 1)  # the top: monotone groups fail fast there
                req[j] = idx
            self.scan_util(req)
            nxt = {}
            for j, i0 in pending.items():
                g, dom = self.var[j], self.var[j].domain
                end = min(i0 + chunk, len(dom))
                found = next((i for i in range(i0, end) if self.util_feasible(j, dom[i])), None)
                if found is not None:
                    b[j] = dom[found]
                    self.scanned_to[j] = max(self.scanned_to[j], found)
                    continue
                if first and g.monotone and not self.util_feasible(j, dom[-1]):
                    reasons.append(self._util_reason(j))
                    continue
                if end >= len(dom):
                    reasons.append(self._util_reason(j))
                    continue
                nxt[j] = end
            pending = nxt
            chunk *= 2
            first = False
        # Start the scanned range at b: values below it are known infeasible.
        for j in range(G):
            if not reasons:
                self.scanned_to[j] = int(np.searchsorted(self.var[j].domain, b[j]))
        return (None if reasons else b), reasons

    def _util_reason(self, j: int) -> str:
        g = self.var[j]
        cache = self.util_cache[j]
        best_p = min(cache, key=lambda p: (round(cache[p], 12), -p))  # ties: report the top
        util = cache[best_p]
        batch = self.evaluate(self.config_matrix(
            np.array([[best_p if k == j else gg.domain[0] for k, gg in enumerate(self.var)]])))
        cols = list(g.members)
        hot = cols[int(np.argmax(batch.max_utilization[0, cols]))]
        share = float(batch.hot_share[0, hot])
        top = int(g.domain[-1])
        where = (f"even at max_parallelism {top}" if best_p == top
                 else f"at its least-loaded parallelism {best_p} (of at most {top})")
        util_txt = "saturated" if not np.isfinite(util) else f"{util:.3g}"
        detail = ""
        if g.key_grouped:
            detail = f" (hot key group share {share:.3g})"
        elif not all(self.c.model.operator(n).scaling.form == "linear" for n in g.names):
            detail = " (contention: instances slow down as parallelism grows)"
        elif any(e.grouping == "broadcast" for v in g.members for e in self.c.in_edges[v]):
            detail = " (broadcast input: every instance receives the whole stream)"
        return (f"{self.c.names[hot]}: {where} the hottest instance's utilization is {util_txt} "
                f"> {self.U:g}{detail}")

    def fixed_reasons(self, batch: BatchPrediction) -> list[str]:
        reasons = []
        for g in self.groups:
            if g.variable:
                continue
            for v in g.members:
                u = float(batch.max_utilization[0, v])
                # Under blocking a fixed operator may be the bottleneck only because its receivers
                # block it (its busy utilization is below the target): more receivers unblock it,
                # so that is no proof (Hypothesis: buffer_tuples 0, a fixed sender at busy 0.82).
                if self.c.service_s[v] > 0 and (u > self.U * (1 + _UTIL_EPS) or
                                                (batch.saturated[0] and batch.bottleneck[0] == v
                                                 and not self.blocking)):
                    op = self.c.model.operator(self.c.names[v])
                    why = ("a source" if op.is_source else
                           f"min_parallelism = max_parallelism = {op.max_parallelism}" if op.min_parallelism == op.max_parallelism
                           else "tied by forward edges to a source")
                    reasons.append(f"{self.c.names[v]}: parallelism is fixed at {int(self.base[v])} ({why}) "
                                   f"and its hottest instance's utilization is {u:.3g} > {self.U:g}")
        return reasons


# --------------------------------------------------------------------------- search


def _relaxed_model(model: JobModel, var: Sequence[_Group]) -> JobModel:
    """A model whose latency is a lower bound on ``model``'s at every configuration and which is
    monotone non-increasing in every operator not fed by a broadcast edge.

    Key grouping becomes shuffle (an even split: the hottest share is at least 1/p, the flow-
    weighted waiting of an uneven split is at least the even one's, and a key-split substream is
    at least as variable as a round-robin one); contention/table scaling becomes linear at the
    smallest factor over the operator's allowed parallelism; output batching is switched off (its
    wait only adds); buffers are unbounded (blocking only adds latency: Hypothesis-tested in
    ``tests/modeler/test_queueing.py``); cores are unlimited (shared cores only stretch service).
    ``tests/scheduler/test_plan.py`` checks the lower-bound property with
    Hypothesis on random DAGs; the planner relies on it only to *prune*, never to choose.
    """
    domains = {n: g.domain for g in var for n in g.names}
    ops = []
    for op in model.operators:
        if op.service_time_ms is not None and op.scaling.form != "linear":
            dom = domains.get(op.name, np.array([op.parallelism]))
            factor = float(np.min(op.scaling.factor_at(np.asarray(dom, dtype=float))))
            op = replace(op, service_time_ms=op.service_time_ms * factor, scaling=ScalingSpec())
        ops.append(op)
    edges = tuple(replace(e, grouping="shuffle", keys=None, buffer_tuples=None) if e.grouping == "key"
                  else replace(e, buffer_tuples=None) for e in model.edges)
    return replace(model, operators=tuple(ops), edges=edges, buffer_timeout_ms=0.0, buffer_tuples=None,
                   cores=None)


@dataclass
class _Best:
    values: np.ndarray | None = None
    latency: float = np.inf


def _raise_to_budget(prob: _Problem, vals: np.ndarray, rem: np.ndarray, later: Sequence[int],
                     costs: list[np.ndarray]) -> np.ndarray:
    """Every group in ``later`` raised to the largest value the remaining budget allows."""
    out = vals.copy()
    for j in later:
        dom = prob.var[j].domain
        k = np.searchsorted(costs[j], rem, side="right") - 1
        out[:, j] = dom[np.maximum(k, 0)]
    return out


def _bound(prob: _Problem, vals: np.ndarray, rem: np.ndarray, later: Sequence[int],
           costs: list[np.ndarray], threshold: float | None = None) -> np.ndarray:
    """Lower bound on the latency of every completion of the partial assignments ``vals``
    (``later`` unassigned, ``rem`` instances left): the real model when all of ``later`` are
    monotone in it, else the relaxed model. The mean, and for a p95/p99 SLO (``threshold``
    given) the larger of the mean and that statistic, which is monotone as well."""
    if prob.no_bound:  # no valid bound under blocking or shared cores (``_Problem``): nothing is pruned
        return np.full(len(vals), -np.inf)
    top = _raise_to_budget(prob, vals, rem, later, costs)
    relaxed = not all(prob.var[j].monotone for j in later)
    P = prob.config_matrix(top)
    lat = prob.evaluate(P, relaxed=relaxed).latency("mean").copy()
    if prob.stat != "mean" and threshold is not None:
        # p95/p99 are monotone too (quantiles of the model's own distribution): the rows the mean
        # does not prune get the tail itself (a second pass over those rows only).
        keep = np.flatnonzero(~np.isnan(lat) & (lat <= threshold * (1 + _LAT_EPS)))
        if keep.size:
            compiled = prob.relaxed_compiled if relaxed else prob.c
            tail = predict_batch(compiled, P[keep], prob.rate).latency(prob.stat)
            lat[keep] = np.fmax(lat[keep], tail * (1 - _tail_eps(relaxed)))
    return np.where(np.isnan(lat), -np.inf, lat)  # saturated bound (broadcast loads): no pruning


def _search_level(prob: _Problem, k: int, b: np.ndarray, order: Sequence[int], n_enum: int,
                  costs: list[np.ndarray], max_extra: np.ndarray, threshold: float) -> _Best | None:
    """Lowest-latency configuration with exactly T0 + k instances and latency <= threshold.

    ``order[:n_enum]`` (broadcast-fed groups) are enumerated before any bound is used. Returns
    ``_Best`` (``values`` None when there is none) or None when the budget ran out.
    """
    G = len(order)
    vals = b[None, :].copy()
    rem = np.array([k], dtype=np.int64)
    suffix = np.concatenate([np.cumsum(max_extra[list(order)][::-1])[::-1], [0]])
    best = _Best()
    can_bound = np.isfinite(threshold)
    for d in range(G):
        j = order[d]
        g = prob.var[j]
        dom, cost = g.domain, costs[j]
        if d == G - 1:
            # The last group takes exactly what is left.
            pos = np.searchsorted(cost, rem)
            ok = (pos < len(cost)) & (cost[np.minimum(pos, len(cost) - 1)] == rem)
            vals, rem, pos = vals[ok], rem[ok], pos[ok]
            vals[:, j] = dom[pos]
            rem = rem - cost[pos]
            if not g.monotone or prob.coupled:
                for p in np.unique(vals[:, j]):
                    prob.ensure_scanned(j, int(p))
                keep = np.array([prob.util_feasible(j, p) for p in vals[:, j]], dtype=bool)
                vals, rem = vals[keep], rem[keep]
        else:
            top = int(rem.max())
            n_c = int(np.searchsorted(cost, top, side="right"))
            cand = np.arange(n_c)
            if not g.monotone or prob.coupled:
                prob.ensure_scanned(j, int(dom[n_c - 1]))
                cand = np.array([i for i in cand if prob.util_feasible(j, dom[i])], dtype=np.int64)
            if cand.size == 0:
                return best
            ci = np.repeat(cand[None, :], len(rem), axis=0)
            keep = (cost[ci] <= rem[:, None]) & (rem[:, None] - cost[ci] <= suffix[d + 1])
            rows, cols = np.nonzero(keep)
            vals = vals[rows]
            vals[:, j] = dom[ci[rows, cols]]
            rem = rem[rows] - cost[ci[rows, cols]]
        if len(rem) == 0:
            return best
        if d == G - 1:
            break
        if can_bound and d + 1 >= n_enum:
            live = rem > 0
            if live.any():
                bound = _bound(prob, vals[live], rem[live], order[d + 1:], costs, threshold)
                drop = np.zeros(len(rem), dtype=bool)
                drop[np.nonzero(live)[0]] = bound > threshold * (1 + _LAT_EPS)
                vals, rem = vals[~drop], rem[~drop]
                if len(rem) == 0:
                    return best
        if prob.evaluations > prob.cfg.max_evaluations:
            return None
    batch = prob.evaluate(prob.config_matrix(vals))
    lat = prob.latency(batch)
    ok = prob.util_ok(batch) & ~np.isnan(lat)
    if np.isfinite(threshold):
        ok &= lat <= threshold * (1 + _LAT_EPS)
    if ok.any():
        i = int(np.nonzero(ok)[0][np.argmin(lat[ok])])
        best.values, best.latency = vals[i].copy(), float(lat[i])
    return best


def _greedy(prob: _Problem, b: np.ndarray) -> tuple[np.ndarray, float]:
    """DRS-style marginal allocation: add instances where the latency drops most per instance,
    until the SLO holds or nothing helps. An incumbent only (not optimal in general).

    For p95/p99 the steps are ranked by the statistic's cheap gamma-fit approximation
    (``BatchPrediction.approx_latency``; the exact tail needs a numerical inversion per row) and
    the exact statistic is computed only where the approximation, scaled by the last exact /
    approximation ratio, predicts the SLO holds: the returned latency is always the exact
    statistic. While that prediction puts the SLO far away, a round takes several of its best
    increments at once (**jumps**): those whose first-order reductions add up to at most half the
    remaining gap (so a jump does not overshoot when the reductions add up as predicted). A round costs one
    ``predict_batch`` call (~5 ms on 50 operators), so this turns a path of k steps into about
    log2(k) rounds plus the last few single steps. When a jump does overshoot (the exact
    statistic meets the SLO at its end), the search goes back to where the jump started and
    continues in single steps, so the answer is the single-step greedy's up to where the two
    paths part."""
    tail = prob.stat != "mean"
    prob.greedy_at = None
    cur = b.copy()
    if prob.b_batch is not None and np.array_equal(prob.b_batch.parallelism[0], prob.config_matrix(cur)[0]):
        batch = prob.b_batch
    else:
        batch = prob.evaluate(prob.config_matrix(cur))
    ok0 = prob.util_ok(batch)[0]
    rank = float(batch.approx_latency(prob.stat)[0]) if ok0 else np.inf
    lat = float(prob.stat_at(batch, [0])[0]) if ok0 else np.inf
    ratio = lat / rank if (tail and np.isfinite(lat) and 0 < rank < np.inf) else 1.0
    prob.tail_ratio = ratio
    path: list = []   # (configuration, batch, row) per single step since the last exact miss (p95/p99)
    known_bad = -1    # last path entry whose exact statistic is known above the SLO (-1: the start)
    jumps = tail
    jump_from = None  # (configuration, rank) before an unchecked jump
    while lat > prob.slo and prob.evaluations <= prob.cfg.max_evaluations:
        rows, step, group = [], [], []
        for j, g in enumerate(prob.var):
            up = prob.next_value(j, int(cur[j]))
            if up is None:
                continue
            row = cur.copy()
            row[j] = up
            rows.append(row)
            step.append(g.size * (up - int(cur[j])))
            group.append(j)
        if not rows:
            break
        # The current configuration rides along as row 0 (p95/p99): after a jump its rank is not
        # known yet, and when a step crosses the SLO the step before is checked in the same
        # inversion as the step itself.
        head = [cur] if tail else []
        batch = prob.evaluate(prob.config_matrix(np.array(head + rows)))
        approx = np.where(prob.util_ok(batch), batch.approx_latency(prob.stat), np.inf)
        approx = np.where(np.isnan(approx), np.inf, approx)
        if jump_from is not None:
            rank = float(approx[0])
            if rank * ratio <= prob.slo:
                exact = float(prob.stat_at(batch, [0])[0])
                if np.isfinite(exact) and rank > 0:
                    ratio = prob.tail_ratio = exact / rank
                if exact <= prob.slo:
                    # Overshot: back to the jump's start, single steps from there.
                    cur, rank = jump_from
                    jump_from, jumps = None, False
                    continue
            jump_from = None
            path, known_bad = [], -1  # a jump's end is above the SLO: the bisection starts here
        new = approx[len(head):]
        if np.isfinite(rank):
            gain = np.where(np.isfinite(new), (rank - new) / np.array(step), -np.inf)
        else:
            gain = -new
        i = int(np.argmax(gain))
        if not np.isfinite(new[i]) or (np.isfinite(rank) and gain[i] <= 0):
            break
        if jumps and np.isfinite(rank) and ratio > 0:
            # The best increments whose reductions add up to at most half the remaining gap.
            gap = rank - prob.slo / ratio
            order = np.argsort(-gain, kind="stable")
            order = order[gain[order] > 0]
            reach = np.cumsum(rank - new[order])
            take = order[: int(np.searchsorted(reach, gap * _JUMP_SHARE, side="right"))]
            if len(take) > 1:
                jump_from = (cur, rank)
                cur = cur.copy()
                for t in take.tolist():
                    cur[group[t]] = rows[t][group[t]]
                lat = np.inf
                continue
        cur, rank = rows[i], float(new[i])
        if not tail:
            lat = rank
            continue
        path.append((cur, batch, len(head) + i))
        if rank * ratio <= prob.slo:
            # The exact statistic only where the approximation, scaled by the last exact /
            # approximation ratio, predicts the SLO holds; elsewhere it is taken not to hold yet.
            # With the step before (row 0) when it is unchecked: the bisection below looks at it
            # first, and one inversion of two rows costs little more than one (stat_cache).
            before = [0] if known_bad < len(path) - 2 else []
            lat = float(prob.stat_at(batch, [len(head) + i] + before)[0])
            if np.isfinite(lat) and rank > 0:
                ratio = prob.tail_ratio = lat / rank
            if lat <= prob.slo:
                # The path only adds instances and the statistic never rises with parallelism:
                # bisect the unchecked steps for the first one meeting the SLO.
                lo, hi = known_bad, len(path) - 1
                while hi - lo > 1:
                    # The step before first (the prediction is usually right to within a step).
                    mid = hi - 1 if hi == len(path) - 1 else (lo + hi) // 2
                    c_m, b_m, i_m = path[mid]
                    l_m = float(prob.stat_at(b_m, [i_m])[0])
                    if l_m <= prob.slo:
                        hi, lat = mid, l_m
                    else:
                        lo = mid
                cur = path[hi][0]
                prob.greedy_at = path[hi][1:]
                break
            known_bad = len(path) - 1
        else:
            lat = np.inf
    if not np.isfinite(lat) and tail and rank < np.inf:
        lat = float(prob.latency(prob.evaluate(prob.config_matrix(cur)))[0])
    return cur, lat


def _global_bound(prob: _Problem, b: np.ndarray) -> tuple[np.ndarray, float] | None:
    """A lower bound on the latency statistic (the mean, or for p95/p99 the larger of the mean and
    the statistic, both monotone) of every configuration, and where it is reached: every
    relaxable group at its top (in the real model when all groups are monotone, else the relaxed
    one), broadcast-fed groups enumerated jointly. None when that enumeration is too large."""
    if prob.no_bound:  # no valid bound under blocking or shared cores (``_Problem``)
        return None
    enum = [j for j, g in enumerate(prob.var) if not g.relaxable]
    top = np.array([g.domain[-1] for g in prob.var], dtype=np.int64)
    total = 1
    for j in enum:
        total *= len(prob.var[j].domain)
        if total > prob.cfg.max_global_enumeration:
            return None
    combos = list(itertools.product(*[list(prob.var[j].domain) for j in enum])) if enum else [()]
    vals = np.repeat(top[None, :], len(combos), axis=0)
    if enum:
        vals[:, enum] = np.array(combos, dtype=np.int64)
    relaxed = not all(g.monotone for g in prob.var)
    batch = prob.evaluate(prob.config_matrix(vals), relaxed=relaxed)
    lat = batch.latency("mean")
    if prob.stat != "mean":  # the tails are monotone too: bound with the statistic itself
        lat = np.fmax(lat, batch.latency(prob.stat) * (1 - _tail_eps(relaxed)))
    lat = np.where(np.isnan(lat), np.inf, lat)
    i = int(np.argmin(lat))
    return vals[i], float(lat[i])


# ----------------------------------------------------------------------------- entry


def plan(model: JobModel | CompiledModel, rate: float, config: PlanConfig = PlanConfig()) -> Plan:
    """The cheapest configuration meeting ``config``'s targets at input ``rate`` (tuples/s).

    Never raises for an infeasible target: ``Plan.feasible`` is False and ``Plan.reasons`` say
    why. Raises ``SchedulerError`` for bad arguments.
    """
    config.check()
    if isinstance(rate, bool) or not isinstance(rate, (int, float, np.floating, np.integer)) \
            or not math.isfinite(rate) or rate < 0:
        raise SchedulerError("the input rate must be a finite number >= 0", field="rate", value=rate)
    compiled = model if isinstance(model, CompiledModel) else compile_model(model)
    prob = _Problem(compiled, config.targets.planned_rate(rate), config)
    return _solve(prob)


def _finish(prob: _Problem, values: np.ndarray | None, feasible: bool, reasons: list[str],
            optimal: bool, fallback: np.ndarray | None = None,
            batch: tuple[BatchPrediction, int] | None = None) -> Plan:
    """The Plan for ``values``; ``batch`` = (a batch holding that configuration at ``prob.rate``,
    its row) saves evaluating it again."""
    if batch is not None:
        pred = prediction_from_batch(prob.c, batch[0], batch[1])
    else:
        vals = values if values is not None else fallback
        if vals is None:
            vals = np.array([g.domain[-1] for g in prob.var], dtype=np.int64)
        P = prob.config_matrix(np.asarray(vals, dtype=np.int64))
        pred = prediction_from_batch(prob.c, predict_batch(prob.c, P, prob.rate), 0)
    variable = tuple(n for g in prob.var for n in g.names)
    inst = int(sum(pred.config[n] for n in variable))
    return Plan(feasible=feasible, config=dict(pred.config), instances=inst,
                total_instances=int(sum(pred.config.values())), prediction=pred,
                reasons=tuple(reasons), optimal=optimal, rate=prob.rate,
                latency_stat=prob.stat, evaluations=prob.evaluations, variable=variable)


def _most_carrying(prob: _Problem, candidates: list[np.ndarray]) -> np.ndarray:
    """The infeasible plan's configuration on shared cores: of ``candidates`` and a greedy ascent
    of the predicted max rate from the fewest instances (one operator one step up at a time,
    while that raises it), the one with the highest predicted max rate. On shared cores more
    instances can carry *less* (every instance's CPU work grows with
    ``resources.cpu_overhead_per_instance``, and a source's thread waits longer for a core), so
    every operator at its own least-utilized parallelism, each judged alone, can be the
    configuration that carries least; a user (or the one step of ``flink-sql``) applying the
    infeasible plan's configuration gets the most the model knows how to carry."""
    def max_rates(rows: list[np.ndarray]) -> np.ndarray:
        return predict_batch(prob.c, prob.config_matrix(np.array(rows, dtype=np.int64)), 1.0).max_rate

    cur = np.array([g.domain[0] for g in prob.var], dtype=np.int64)
    best = float(max_rates([cur])[0])
    while True:
        ups = []
        for j, g in enumerate(prob.var):
            i = int(np.searchsorted(g.domain, cur[j]))
            if i + 1 < len(g.domain):
                up = cur.copy()
                up[j] = g.domain[i + 1]
                ups.append(up)
        if not ups:
            break
        rates = max_rates(ups)
        k = int(np.argmax(rates))
        if not rates[k] > best * (1 + 1e-9):
            break
        cur, best = ups[k], float(rates[k])
    rows = [cur] + [np.asarray(c, dtype=np.int64) for c in candidates]
    return rows[int(np.argmax(max_rates(rows)))]


def _count_cheaper(costs: list[np.ndarray], k: int) -> float:
    """How many configurations have fewer than ``k`` extra instances, ``costs[t]`` the extra
    instances of operator t's allowed values (a counting knapsack; a float: it can be huge)."""
    if k <= 0:
        return 0.0
    ways = np.zeros(k)
    ways[0] = 1.0
    for c in costs:
        # ways * (sum of x^extra over the operator's allowed extras), truncated below x^k
        ways = np.convolve(ways, np.bincount(c[c < k], minlength=1).astype(float))[:k]
    return float(ways.sum())


def _extra(prob: _Problem, vals: np.ndarray, b: np.ndarray) -> int:
    return int(sum(g.size * (int(v) - int(bj)) for g, v, bj in zip(prob.var, vals, b)))


def _solve(prob: _Problem) -> Plan:
    U, stat, slo = prob.U, prob.stat, prob.slo
    if prob.bound_conflicts:
        return _finish(prob, None, False, prob.bound_conflicts, True)
    if prob.shared_cores and prob.rate > 0:
        # More instances never add a core: when the CPU work alone fills every core at the
        # fewest instances (the least work), no configuration carries the rate.
        low = prob.config_matrix(np.array([[g.domain[0] for g in prob.var]], dtype=np.int64))
        need = prob.rate * float(cpu_work_per_tuple(prob.c, low)[0])
        cores = float(prob.c.cores)
        if need >= cores:
            return _finish(prob, None, False, [
                f"the CPU work at {prob.rate:g} tuples/s needs {need:.3g} cores; the job has {cores:g} "
                "(resources.cores): no parallelism carries it, more cores are needed"], True,
                _most_carrying(prob, [np.array([g.domain[-1] for g in prob.var], dtype=np.int64)]))
    fm = None
    if not prob.coupled and prob.rate > 0 and _plan_fast.supported(prob.c):
        fm = _plan_fast.FastMean(prob.c, prob.rate)
    if fm is not None:
        b, reasons = _fast_counts(prob, fm)
    else:
        b, reasons = prob.minimal_counts()
    low = b if b is not None else np.array([g.domain[0] for g in prob.var], dtype=np.int64)
    low_batch = None
    if fm is not None and b is not None and slo is not None and stat == "mean" and _fixed_ok(prob, fm):
        base_lat = np.inf  # the fast search's level 0 decides whether b meets the SLO
    else:
        low_batch = prob.b_batch = prob.evaluate(prob.config_matrix(low))
        reasons = prob.fixed_reasons(low_batch) + reasons
        # The statistic only with an SLO (a p95/p99 needs a numerical inversion).
        # For p95/p99, only where the mean (a lower bound in practice) meets the SLO: otherwise
        # b is left to the search (level 0), which decides exactly.
        base_lat = np.inf
        if slo is not None and prob.util_ok(low_batch)[0]:
            if stat == "mean" or float(low_batch.latency_mean_ms[0]) <= slo:
                base_lat = float(prob.stat_at(low_batch, [0])[0])
    if reasons:
        fallback = np.array([min(c, key=lambda p: (c[p], p)) if c else g.domain[-1]
                             for c, g in zip(prob.util_cache, prob.var)], dtype=np.int64)
        if prob.shared_cores:
            fallback = _most_carrying(prob, [fallback])
        return _finish(prob, None, False, reasons, True, fallback)
    assert b is not None
    for j, g in enumerate(prob.var):  # values below b_g never meet the utilization target
        g.domain = g.domain[g.domain >= b[j]]
    costs = [g.size * (g.domain - bj) for g, bj in zip(prob.var, b)]
    max_extra = np.array([int(c[-1]) for c in costs], dtype=np.int64)
    notes = _binding_notes(prob, b)

    if slo is None and not prob.coupled:
        return _finish(prob, b, True, notes, True, batch=(low_batch, 0))
    if slo is not None and base_lat <= slo and not prob.coupled:
        return _finish(prob, b, True, notes + [
            f"latency {stat} {base_lat:.4g} ms <= SLO {slo:g} ms at the utilization-minimal counts"], True,
            batch=None if low_batch is None else (low_batch, 0))

    global_bound = None
    if slo is not None and fm is not None:
        fast = _solve_fast(prob, fm, b, notes)
        if fast is not None and fast.feasible:
            return fast
        if fast is not None and stat == "mean":
            return fast
        # For p95/p99, the fast path's infeasibility comes from an exhaustive search or its mean
        # bounds; the all-max bound on the statistic itself (monotone) gives the reasons when it
        # is above the SLO (computed only now: a feasible plan makes it moot).
        global_bound = _global_bound(prob, b)
        if global_bound is not None and global_bound[1] > slo:
            return _finish(prob, None, False, _slo_reasons(prob, global_bound[0], global_bound[1]),
                           True, global_bound[0])
        if fast is not None:
            return fast

    threshold = slo if slo is not None else np.inf
    inc_vals, inc_lat, k_ub = None, np.inf, None
    if slo is not None:
        bound = global_bound if global_bound is not None else _global_bound(prob, b)
        if bound is not None and bound[1] > slo:
            return _finish(prob, None, False, _slo_reasons(prob, bound[0], bound[1]), True, bound[0])
        g_vals, g_lat = _greedy(prob, b)
        if g_lat <= slo:
            inc_vals, inc_lat, k_ub = g_vals, g_lat, _extra(prob, g_vals, b)

    enum = [j for j, g in enumerate(prob.var) if not g.relaxable]
    nonmono = [j for j, g in enumerate(prob.var) if g.relaxable and not g.monotone]
    mono = [j for j, g in enumerate(prob.var) if g.monotone]
    if slo is not None and len(nonmono) + len(mono) > 1:
        # The most latency-sensitive first: bounds tighten sooner.
        rest = nonmono + mono
        rows = []
        for j in rest:
            row = b.copy()
            row[j] = prob.var[j].domain[min(1, len(prob.var[j].domain) - 1)]
            rows.append(row)
        sens = prob.latency(prob.evaluate(prob.config_matrix(np.array(rows))))
        sens = np.where(np.isnan(sens), np.inf, sens)
        nm = [rest[i] for i in np.argsort(sens[: len(nonmono)], kind="stable")]
        mo = [rest[len(nonmono) + i] for i in np.argsort(sens[len(nonmono):], kind="stable")]
        nonmono, mono = nm, mo
    order = enum + nonmono + mono
    k_max = int(max_extra.sum()) if k_ub is None else k_ub
    for k in range(0, k_max + 1):
        if np.isfinite(threshold) and not enum:
            root = _bound(prob, b[None, :], np.array([k]), order, costs, threshold)
            if root[0] > threshold * (1 + _LAT_EPS):
                continue
        thr = threshold if (k_ub is None or k < k_ub) else min(threshold, inc_lat)
        found = _search_level(prob, k, b, order, len(enum), costs, max_extra, thr)
        if found is None:
            note = (f"search budget of {prob.cfg.max_evaluations} evaluations exhausted at "
                    f"{int(sum(g.size * v for g, v in zip(prob.var, b))) + k} instances")
            if inc_vals is not None:
                return _finish(prob, inc_vals, True, notes + [note + "; returning the greedy "
                               "allocation, which meets the targets but is not proven cheapest"], False)
            return _finish(prob, None, False, [note + "; no configuration meeting the targets "
                                               "found (not proven infeasible)"], False)
        if found.values is not None:
            extra = []
            if slo is not None and k > 0:
                extra.append(f"latency SLO {stat} <= {slo:g} ms needs {k} instance(s) beyond the "
                             f"utilization-minimal counts ({stat} {found.latency:.4g} ms)")
            return _finish(prob, found.values, True, notes + extra, True)
    if inc_vals is not None:  # pragma: no cover - the level search always finds the incumbent
        return _finish(prob, inc_vals, True, notes, True)
    if slo is None:
        return _finish(prob, None, False, ["no configuration within the bounds keeps every "
                                           f"instance's utilization <= {U:g} ({_why_no_utilization(prob)})"], True)
    return _finish(prob, None, False, [f"no configuration within the bounds meets the latency SLO "
                                       f"{stat} <= {slo:g} ms (exhaustive search)"], True)


def _why_no_utilization(prob: _Problem) -> str:
    """Why adding instances never brings every utilization under the target: broadcast loads
    grow with the receiver's parallelism; on shared cores every instance added slows the others'
    CPU work, and a source's own CPU (``cpu_ms_per_tuple``) caps what it generates."""
    if not prob.shared_cores:
        return "broadcast loads"
    why = "shared cores: an instance added slows every other's CPU work"
    batch = prob.b_batch
    gen = prob.c.source_cpu_s
    if gen is not None and batch is not None and batch.saturated[0] and batch.bottleneck[0] >= 0 \
            and gen[batch.bottleneck[0]] > 0:
        why += (f"; at the utilization-minimal counts source {prob.c.names[batch.bottleneck[0]]} generates at "
                f"most {float(batch.max_rate[0]):.4g} tuples/s (its cpu_ms_per_tuple on the shared cores)")
    return why


def _binding_notes(prob: _Problem, b: np.ndarray) -> list[str]:
    """Which operators the utilization target binds (at their minimal count)."""
    if not prob.var:
        return ["no operator's parallelism may change (sources and pinned operators only)"]
    parts = []
    for j, g in enumerate(prob.var):
        u = prob.util_cache[j].get(int(b[j]))
        parts.append(f"{g.label} {int(b[j])}" + (f" ({u:.2f})" if u is not None else ""))
    return [f"utilization-minimal counts at <= {prob.U:g}: " + ", ".join(parts)]


def _slo_reasons(prob: _Problem, values: np.ndarray, bound: float) -> list[str]:
    """Why the SLO is out of reach: ``bound`` is a lower bound on the latency statistic of every
    configuration, reached (in the real or relaxed model) at ``values``."""
    stat, slo = prob.stat, prob.slo
    P = prob.config_matrix(values)
    batch = prob.evaluate(P)
    exact = all(g.monotone for g in prob.var)
    floor = float(prob.evaluate(P, rate=max(prob.rate, 1.0) * 1e-9, relaxed=not exact).latency("mean")[0])
    soj = batch.sojourn_ms[0]
    top = np.argsort(-np.nan_to_num(soj, nan=-1))[:3]
    worst = ", ".join(f"{prob.c.names[v]} {soj[v]:.3g} ms" for v in top if np.isfinite(soj[v]) and soj[v] > 0)
    at_max = [f"{g.label} ({int(v)})" for g, v in zip(prob.var, values) if int(v) == int(g.domain[-1])]
    also = "" if stat == "mean" else f"; the {stat} is at least the mean"
    tail_bound = None
    if stat != "mean":
        tail_bound = float(prob.evaluate(P, relaxed=not exact).latency(stat)[0])
    approx = "" if exact else ", key skew and contention ignored: a lower bound"
    if tail_bound is not None and tail_bound > slo and floor <= slo:
        head = (f"latency SLO {stat} {slo:g} ms is below the lowest {stat} any configuration reaches, "
                f"{tail_bound:.4g} ms (every operator at max parallelism{approx}; the {stat} never "
                f"rises with parallelism; mean there {float(batch.latency_mean_ms[0]):.4g} ms, "
                f"no-queueing floor {floor:.4g} ms)")
    elif floor > slo:
        head = (f"latency SLO {slo:g} ms is below the no-queueing floor {floor:.4g} ms (mean of "
                f"service, network and batching delays alone, every operator at max parallelism"
                f"{approx}{also})")
    else:
        head = (f"latency SLO {slo:g} ms is below the lowest mean latency any configuration reaches, "
                f"{bound:.4g} ms (every operator at max parallelism{approx}{also}; no-queueing "
                f"floor {floor:.4g} ms)")
    out = [head]
    if worst:
        out.append(f"largest mean sojourns there: {worst}")
    if at_max:
        out.append("at max_parallelism there: " + ", ".join(at_max))
    return out


def _fixed_ok(prob: _Problem, fm: "_plan_fast.FastMean") -> bool:
    """Every fixed operator (source, pinned) meets the utilization target (closed form)."""
    for g in prob.groups:
        if g.variable:
            continue
        for v in g.members:
            u = float(fm.max_utilization(v, np.array([int(prob.base[v])]))[0])
            if u > prob.U * (1 + _UTIL_EPS) or u >= 1 - 1e-12:
                return False
    return True


def _fast_counts(prob: _Problem, fm: "_plan_fast.FastMean") -> tuple[np.ndarray | None, list[str]]:
    """``b`` (step 1) from the closed-form utilization ``rate * visit * hot_share(p) * E[S](p)``
    over each group's whole domain (no broadcast edges: it depends on the group's own parallelism
    only, and feasible configurations are not throttled), or the reasons no value exists."""
    b = np.zeros(len(prob.var), dtype=np.int64)
    reasons = []
    for j, g in enumerate(prob.var):
        v = g.members[0]
        util = prob.fast_util[j] = fm.max_utilization(v, g.domain)
        ok = (util <= prob.U * (1 + _UTIL_EPS)) & (util < 1 - 1e-12)
        # The whole domain is known: the general search's utilization cache needs no scans.
        # (>= 1 means saturated: kept as a number above any target, so reasons can quote it)
        prob.util_cache[j].update(zip(g.domain.tolist(),
                                      np.where(util < 1 - 1e-12, util, np.maximum(util, 1 + 1e-6)).tolist()))
        prob.scanned_to[j] = len(g.domain) - 1
        if not ok.any():
            reasons.append(prob._util_reason(j))
            continue
        b[j] = g.domain[int(np.argmax(ok))]
    return (None, reasons) if reasons else (b, [])


def _solve_fast(prob: _Problem, fm: "_plan_fast.FastMean", b: np.ndarray, notes: list[str]) -> Plan | None:
    """The latency search for models without broadcast or forward edges: best-first over the
    instance count, a multiple-choice knapsack on the separable floor bound for the root and the
    unassigned operators, exact per-operator sojourns for the assigned prefix
    (``scheduler._plan_fast``). None when it cannot decide (then the general search runs)."""
    stat, slo, U = prob.stat, prob.slo, prob.U
    if any(len(g.domain) > 4096 for g in prob.var):
        return None
    ops = [g.members[0] for g in prob.var]
    domains = []
    for j, (g, v) in enumerate(zip(prob.var, ops)):
        # (_fast_counts evaluated the whole domain; _solve then cut the values below b)
        util = prob.fast_util[j][-len(g.domain):] if j in prob.fast_util else fm.max_utilization(v, g.domain)
        ok = (util <= U * (1 + _UTIL_EPS)) & (util < 1 - 1e-12)
        if not ok[0]:
            return None  # disagrees with minimal_counts (saturation edge): let the general search decide
        domains.append(g.domain[ok])
    if not domains:  # nothing to choose: b is the only configuration
        batch = prob.evaluate(prob.config_matrix(b))
        lat = float(prob.latency(batch)[0])
        if prob.util_ok(batch)[0] and lat <= slo:
            return _finish(prob, b, True, notes, True, batch=(batch, 0))
        return _finish(prob, b, False, [f"latency {stat} {lat:.4g} ms > SLO {slo:g} ms and no operator's "
                                        "parallelism may change"], True, batch=(batch, 0))
    if stat != "mean":
        # The mean is the only bound against a p95/p99 SLO and prunes little: when the
        # configurations cheaper than the greedy's are too many to examine one by one, the exact
        # search cannot finish (its frontier passes _TAIL_FRONTIER first) and is not started.
        g_vals, g_lat = prob.greedy_result = _greedy(prob, b)
        if g_lat <= slo:
            k_g = _extra(prob, g_vals, b)
            cheaper = _count_cheaper([d - d[0] for d in domains], k_g)
            if cheaper > _TAIL_EXACT_LIMIT:
                note = (f"{cheaper:.3g} configurations have fewer instances than the greedy allocation "
                        f"and the mean, the only bound on a {stat}, prunes little: not searched "
                        f"(more than {_TAIL_EXACT_LIMIT:,}); returning the greedy allocation ({stat} "
                        f"{g_lat:.4g} ms, {k_g} instance(s) beyond the utilization-minimal counts), "
                        "not proven cheapest")
                return _finish(prob, g_vals, True, notes + [note], False, batch=prob.greedy_at)
    base = prob.config_matrix(b)[0]
    knap = _plan_fast.Knapsack(fm, ops, domains, base, k_cap=32)
    slo_s = slo / 1000.0
    slack = 1 + _plan_fast._LAT_SLACK
    V = len(prob.c.names)
    budget = prob.cfg.max_evaluations * V
    # The mean bounds p95/p99 only loosely: give up early rather than exhaust memory and time.
    max_frontier = 50_000 if stat == "mean" else _TAIL_FRONTIER

    def done(values, extra_reasons, feasible=True, batch=None):
        prob.evaluations += knap.steps // V
        return _finish(prob, values, feasible, extra_reasons, True, batch=batch)

    if knap.S[0].min() > slo_s * slack and knap.global_min is None:
        knap.tables(knap.full)
    if knap.global_min is not None and knap.global_min > slo_s * slack:
        # No configuration reaches the SLO: even the floor bound, minimized per operator, is above.
        idx = np.array([int(np.argmin(f)) for f in knap.F])
        vals = np.array([d[i] for d, i in zip(domains, idx)], dtype=np.int64)
        prob.evaluations += knap.steps // V
        return _finish(prob, None, False, _slo_reasons(prob, vals, knap.global_min * 1000.0), True, vals)
    k = 0
    incumbent: dict[int, float] = {}  # exact mean (s) of the knapsack's argmin at level k

    def incumbents(k0: int) -> None:
        """Exact means of the floor-optimal configurations of levels k0..k0+31, one pass: a
        level's threshold for the tie-break (an upper bound on its best mean)."""
        ks = [kk for kk in range(k0, min(k0 + 32, knap.k_cap + 1)) if np.isfinite(knap.S[0][kk])]
        if not ks:
            return
        means, _ = fm.evaluate(knap.config(np.array([knap.argmin(kk) for kk in ks])))
        knap.steps += len(ks) * V
        incumbent.update(zip(ks, means.tolist()))

    while k <= knap.total:
        if k > knap.k_cap:
            knap.build(min(2 * knap.k_cap, knap.total))
        if knap.lower_bound(k) > slo_s * slack:
            k += 1
            continue
        # Levels k.. searched together up to the first one whose floor-optimal configuration
        # meets the SLO (its exact mean is then that level's threshold), at most 4 at a time.
        if stat == "mean" and k not in incumbent:
            incumbents(k)
        targets = []
        kk = k
        while kk <= knap.k_cap and len(targets) < 4:
            if knap.lower_bound(kk) <= slo_s * slack:
                inc = incumbent.get(kk, np.inf) if stat == "mean" else np.inf
                targets.append((kk, min(slo_s, inc)))
                if inc <= slo_s:
                    break
            kk += 1
        try:
            idx, means, levs = knap.levels(targets, budget, max_frontier,
                                           chunk=_plan_fast.CHUNK if stat == "mean" else None)
        except _plan_fast.BudgetExhausted:
            return _fast_fallback(prob, knap, k, notes)
        for k in sorted(set(levs.tolist())):
            cand, means_k = idx[levs == k], means[levs == k]
            if stat == "mean":
                cand = cand[np.argsort(means_k, kind="stable")[:4]]
            best, best_lat, rounding = None, np.inf, True
            for start in range(0, len(cand), 4096):
                batch = prob.evaluate(knap.config(cand[start:start + 4096]))
                lat = prob.latency(batch)
                util_ok = prob.util_ok(batch)
                ok = util_ok & ~np.isnan(lat) & (lat <= slo)
                # above the SLO only by rounding: the fast mean put them at it (a tie)
                rounding = rounding and bool(np.all(util_ok & (lat <= slo * (1 + _ROUNDING))))
                if ok.any():
                    i = int(np.nonzero(ok)[0][np.argmin(lat[ok])])
                    if lat[i] < best_lat:
                        best, best_lat = (batch, i), float(lat[i])
            if best is not None:
                extra = []
                if k == 0:
                    extra.append(f"latency {stat} {best_lat:.4g} ms <= SLO {slo:g} ms at the "
                                 "utilization-minimal counts")
                else:
                    extra.append(f"latency SLO {stat} <= {slo:g} ms needs {k} instance(s) beyond the "
                                 f"utilization-minimal counts ({stat} {best_lat:.4g} ms)")
                return done(None, notes + extra, batch=best)
            if stat == "mean" and not rounding:
                return None  # the per-operator sum and predict_batch disagree: general search
            # (a level whose candidates miss the SLO by rounding only: the next level decides)
        k = targets[-1][0] + 1
    return done(None, [f"no configuration within the bounds meets the latency SLO {stat} <= {slo:g} ms "
                       "(exhaustive search)"], feasible=False)


def _fast_fallback(prob: _Problem, knap: "_plan_fast.Knapsack", k0: int, notes: list[str]) -> Plan | None:
    """The search budget ran out at level k0 (levels below it hold no configuration meeting the
    SLO): the cheaper of the first floor-optimal configuration from k0 on that meets the targets
    and the DRS-style greedy (``_greedy``), marked not proven (``optimal=False``). None when
    neither meets the targets (the general search then tries)."""
    V = len(prob.c.names)
    prob.evaluations += knap.steps // V
    slo, stat = prob.slo, prob.stat
    b = knap.base[knap.ops]
    found: list[tuple[int, float, np.ndarray, tuple[BatchPrediction, int] | None]] = []
    # The greedy first: floor-optimal configurations above its instance count cannot win.
    g_vals, g_lat = prob.greedy_result if prob.greedy_result is not None else _greedy(prob, b)
    k_last = knap.total
    if g_lat <= slo:
        found.append((_extra(prob, g_vals, b), g_lat, g_vals, prob.greedy_at))
        k_last = min(k_last, found[0][0])
    k = k0
    floor_found = False
    while k <= k_last and not floor_found:
        if k > knap.k_cap:
            knap.build(min(2 * knap.k_cap, knap.total))
        ks = [kk for kk in range(k, min(k + 64, knap.k_cap + 1, k_last + 1)) if np.isfinite(knap.S[0][kk])]
        if ks:
            batch = prob.evaluate(knap.config(np.array([knap.argmin(kk) for kk in ks])))
            # The first row meeting the SLO: the mean (cheap) first, then the statistic itself
            # for a few rows at a time, in order (a p95/p99 is a numerical inversion per row).
            mean = batch.latency_mean_ms
            keep = prob.util_ok(batch) & ~np.isnan(mean) & (mean <= slo)
            if stat != "mean":
                # Rows the gamma fit, scaled by the greedy's last exact/fit ratio, puts more than
                # 5 % above the SLO are skipped (a heuristic, like this whole fallback).
                keep &= ~(batch.approx_latency(stat) * prob.tail_ratio > slo * 1.05)
            cand = np.flatnonzero(keep)
            step = len(cand) if stat == "mean" else 8
            for start in range(0, len(cand), max(step, 1)):
                rows = cand[start:start + step]
                lat = prob.stat_at(batch, rows)
                ok = ~np.isnan(lat) & (lat <= slo)
                if ok.any():
                    j = int(np.argmax(ok))
                    i = int(rows[j])
                    found.append((ks[i], float(lat[j]), batch.parallelism[i][knap.ops], (batch, i)))
                    floor_found = True
                    break
        k = (ks[-1] + 1) if ks else k + 64
    if not found:
        return None
    extra, lat, vals, at = min(found, key=lambda f: (f[0], f[1]))
    why = ("" if stat == "mean" else
           f" (the latency bound, the mean, is too weak against a {stat} SLO here)")
    note = (f"search budget exhausted at {int(b.sum()) + k0} instances{why}; returning the cheaper of the floor-optimal and "
            f"the greedy allocation that meet the targets ({stat} {lat:.4g} ms, {extra} instance(s) "
            f"beyond the utilization-minimal counts), not proven cheapest")
    return _finish(prob, np.asarray(vals, dtype=np.int64), True, notes + [note], False, batch=at)
