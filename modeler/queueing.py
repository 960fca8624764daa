"""The queueing-network performance model: ``predict(model, config, rate) -> Prediction``.

Units: rates in tuples/s, times in ms (internally seconds, converted at the edges).

What is modelled (``docs/design.md`` section 2), and the assumptions:

1. **Traffic.** In topological order, lambda_v = sum over in-edges u->v of s_uv * x_u (times p_v on
   a broadcast edge); x_u = lambda_u below saturation. Sources receive ``rate * rate_share``.
2. **A queue per instance** (Storm/Heron/Flink give every instance its own input queue; not one
   shared M/M/c queue). Shuffle splits evenly (round-robin); key grouping routes each key to one
   instance through Flink's key groups (``modeler.keys``), so an instance's share is the weight of
   its keys; forward keeps the upstream instance's share; broadcast copies to every instance.
3. **Saturation / back pressure.** Everything is linear in the input rate, so every instance's
   utilization is ``rate * c_vi`` and the job sustains ``max_rate = 1 / max c_vi``: the rate at
   which the hottest instance of the bottleneck reaches utilization 1. Above it, back pressure
   throttles the sources (all of them, proportionally: we assume the job's sources share one
   back-pressured DAG), throughput is ``max_rate``, operators upstream of the bottleneck are
   marked back-pressured, and latency is undefined (``None``: queues grow without bound).
4. **Latency.** Each instance is a G/G/1 queue. Waiting time: Allen-Cunneen (Kingman's
   heavy-traffic form) with the Kraemer/Langenbach-Belz correction
   ``Wq = g * rho/(1-rho) * (ca2 + cs2)/2 * E[S]``; it is exact for M/M/1 and M/G/1
   (Pollaczek-Khinchine) and the KLB factor ``g`` corrects the smooth (round-robin, ca2 < 1)
   arrivals engines produce. Arrival variability is propagated as in Whitt's QNA: departures
   ``cd2 = rho^2 cs2 + (1-rho^2) ca2`` applied to the operator's whole stream (its instances'
   outputs merge again downstream, and re-merged round-robin substreams are the original stream);
   selectivity emits a clump of B tuples per processed tuple
   (B ~ Poisson(s) when s > 1, like words per line; Bernoulli thinning when s <= 1), which raises the tuple
   stream's index of dispersion ``I = cd2*s + Var(B)/s`` and adds the in-clump wait
   ``E[S] (m-1)/2`` with ``m = E[B^2]/E[B]`` (the exact M^X/G/1 term); key splitting is random
   thinning (``I' = sigma I + 1 - sigma``), round-robin divides ``I`` by p; merging streams
   averages their dispersion by flow (QNA's asymptotic method; see ``_superpose`` for why not
   the hybrid), plus, where copies of one tuple meet again (a fork that re-merges: they are not
   independent streams), the covariance of the merged counts, as excess dispersion and as
   pairs arriving together, discounted by the branches' service-time difference
   (``_CopyPairs``; the testbed's sojourn at such a merge was 18-33 % above the independent
   superposition, now -11 to +0.3 %).
   Sojourn = wait + service; per hop a network delay and, when the engine batches output buffers,
   the buffer wait ``min(timeout, fill time)/2``. End-to-end: the flow-weighted mixture over
   source->sink paths (computed by dynamic programming over the DAG, not by enumerating paths).
   Waiting time per instance is taken as 0 with probability 1-rho and exponential otherwise
   (exact for M/M/1). p95/p99 are quantiles of the model's *own* end-to-end distribution, not of
   a moment fit: its Laplace transform comes from one pass over the DAG in topological order
   (G_v(s) = L_v(s) * sum over in-edges of flow fraction * exp(-s delay) * G_u(s); the sinks'
   transforms mixed by flow; ``_Tail``), inverted with Abate-Whitt's Euler algorithm (29 nodes,
   ~1e-8 to ~2e-7 relative: the deterministic network hops are the hard part), the quantile by
   safeguarded Newton on log(1 - F) (exact in one step for an exponential tail; ~3 inversions)
   started at the quantile of a gamma fitted to the first two moments (rounded to 6 digits, so
   the result does not depend on the evaluation order of the moments; optionally scaled by a
   known exact/fit ratio, ``latency_at(start_scale=)``). Every per-operator
   component is stochastically non-increasing in a shuffle-fed operator's parallelism (rho, the
   conditional wait, the clump, the downstream dispersion all fall), so the tails are monotone
   wherever the mean is. They are computed on first use (``BatchPrediction.latency_p99_ms``,
   ``latency_at`` for chosen rows, ``Prediction.latency_ms["p99"]``): ~13k configurations/s for
   one quantile on the 10-operator benchmark DAG (2-core machine at load ~3), against ~190k/s
   for the rest; ~6-8 ms for one configuration of a 50-operator DAG. The gamma fit itself
   (``approx_latency``) is the planner's cheap ranking heuristic.
5. **Bounded buffers** (``buffer_tuples``, job-wide or per edge; ``_Blocking``). Each instance
   of an edge's target has room for K tuples waiting (credits; the one in service not counted).
   A sender that finishes a tuple for a full receiver holds it, blocked, until the receiver
   starts its next tuple (blocking after service, as credit-based flow control and the
   testbed do). Decomposition, one receiver instance at a time, in reverse topological order:
   the receiver holds n in 0..N, N = K + 2 (K waiting, one in service, one held by a blocked
   sender), with P(n) = P0 for n = 0 and P0 r (1 - sigma) sigma^(n-1) / (1 - r) above,
   sigma = r^a, a = 2/(1 + cs2) (``finite_queue``: the M/M/1/N queue exactly when a = 1; else
   the heavy-traffic decay of a queue with Poisson arrivals and service SCV cs2); the offered
   intensity r is the one whose utilization 1 - P0 is the receiver's (r > utilization: senders
   offer faster while the receiver has room). A tuple sent blocks with probability
   P(N-1) / (1 - P(N)) and then waits the receiver's residual service, E[S'](1 + cs2')/2 (its
   own effective service: blocking propagates upstream hop by hop). The sender's **effective
   service** S' = S + (tuples sent per tuple) x P(block) x residual (second moment with an
   exponential residual) sets (a) **throughput**: ``max_rate`` is the rate at which the hottest
   instance's effective utilization reaches 1 (a root in the rate: S' grows with it), exact for
   two exponential stations in tandem, mu2 (1 - P0) at r = mu1/mu2, N = K + 2 (the classic
   result); and (b) **latency**: the sender's queue wait is the G/G/1 wait above at the
   effective utilization and SCV. The receiver's wait is *not* truncated: the tuples that do
   not fit wait for it upstream (held, or in the sender's queue) in the same order, so waiting
   for the receiver is counted once, at the receiver, as unbounded, and what blocking adds is
   the sender's lost capacity (exact when the sender is infinitely fast: then blocking changes
   nothing). Service as a tuple's sojourn component stays the plain S; reported utilizations
   stay busy time (service only, as engines report it; blocked time is back-pressured time).
   Assumptions: a blocked sender waits for one service completion (several senders blocked
   on one instance are not queued behind each other); a sender to several instances blocks
   with their flow-weighted probability; edges out of operators without a service time never
   block (their tuples wait in the source backlog in order: no effect). Measured against Ciw
   (``tests/modeler/test_queueing.py``): two exponential stations with K = 2, mean within
   ~2-8 % up to 0.85 of the (blocked) max rate, 10-12 % at 0.95; with service SCV 0.25 it
   over-predicts near saturation. **Reduces exactly to the unbounded model** when no edge
   has ``buffer_tuples`` (the computation is skipped) and, per receiver, wherever
   utilization^(aN) < 1e-18 (a buffer never full to double precision: K = 1,000 below ~0.96).

6. **Shared cores** (``resources``: the job's instances share ``cores`` cores; ``_SharedCores``).
   A service of mean E[S] is CPU work ``cpu_share`` x E[S] (core-seconds at full speed) and a
   wait of the rest that no core limits (a sleep, an external call); the CPU work of the
   instances computing at once is shared egalitarian (processor sharing): N computing on K
   cores each run at min(1, K/N). Mean-field: an instance computing meets M other computing
   instances and its CPU work is stretched by E[max(1, (1 + M)/K)] (``cpu_stretch``); M is the
   sum of independent Binomial(instances, p) counts, one per operator (p: one of its instances'
   probability of computing, ``min(busy, 1) x`` its CPU part of its (stretched) service, the
   mean over its instances) and one for the engine's threads (a Poisson-binomial; until
   2026-12-06 one binomial over all instances with their probabilities averaged, which spread a
   saturated source thread over idle instances and overstated contention). The stretch is the
   least fixed point of that map (iterated from 1), so service ``E[S'] = E[S](1 + cpu_share
   (stretch - 1))`` rises with the rate and with every operator's parallelism; it is the service
   from then on: utilization (engines' busy time includes waiting for a core), throughput
   (``max_rate``: where the hottest instance's stretched utilization reaches 1, at most the rate
   at which the CPU work fills every core, ``cpu_work_per_tuple``) and latency (waits and
   service at S'; its SCV is the base one). Assumptions: the instances compute independently
   of each other (real computing instances are positively correlated: against the testbed the
   mean latency is
   13-35 % short at 0.8-0.9 load where CPU-bound instances outnumber the cores, within ~10 %
   below 0.6, docs/design.md); nothing else (network threads, garbage collection) uses the
   cores unless calibration folds it into the service; the stretch is a mean, its variance is
   not added to the service's.
   A source's own CPU (``cpu_ms_per_tuple``: a generator such as Flink's ``datagen``, which
   engines report as no busy time) makes it one more station of this model: all CPU work,
   stretched like the rest and stretching the rest, its hottest instance (one thread) at
   utilization 1 bounding ``max_rate`` (it may be the bottleneck); it adds no service, wait or
   utilization of its own (a generator is no queue). Without it nothing here changes.
   **Per-instance CPU overhead** (``cpu_overhead_per_instance`` = h, optional, default 0): with N
   instances computing (operators with a service time and a CPU share, and sources with
   ``cpu_ms_per_tuple``) on K cores, every operator's CPU work per tuple is multiplied by
   m = 1 + h max(0, N - K) (``cpu_overhead_factor``), the rest of its service unchanged: its
   service becomes E[S](1 + cpu_share (m - 1)) before any stretch, and m x cpu_share x E[S] of it
   is CPU work that the stretch then lengthens. Why: on the live Flink cluster (flink-sql's q8,
   every core busy at its max rate) the TaskManager's CPU per tuple beyond the datagen's thread
   rose with the job's instance count (3.5-4.3 us at 7 instances, 4.0-5.8 us at 9-22, runs
   ba5c92eb and 3a0721e0) while the datagen thread's stayed ~1.0-1.2 us: more threads than cores
   cost the engine switches, cache misses, channels and timers, which processor sharing alone
   (a wait, not more work) does not express. Over both runs' 16 q8 configurations a line in
   N - K leaves 0.45 us rms (4.04 us x (1 + 0.018 (N - 2))), a constant 0.57; a growth with each
   operator's own instance count fits no better (0.454), a saturating one in 1/N hardly (0.42):
   the data are too noisy to prefer either over the simplest form, one job-wide parameter.
   Sources' own CPU (``cpu_ms_per_tuple``) is not multiplied (the datagen's thread, measured per
   configuration, stayed flat). With h = 0, or N <= K, nothing changes.
   **Engine CPU** (``engine_cpu_ms_per_tuple`` = e, optional, default 0): core-ms per job input
   tuple the engine spends in no operator's busy time and no source's thread (network stack,
   serialization into the exchanges, garbage collection). It is K more threads in the stretch
   above, computing e x rate cores between them (at most K): it loads the cores and stretches
   every instance's CPU work, counts in ``cpu_work_per_tuple`` (so the rate where all CPU work
   fills the cores falls to K / (work + e)), and bounds nothing by itself (no single thread
   carries it). Why: on flink-sql's q8 the operators' CPU as busy time and CPU share count it
   was about half of the TaskManager's CPU beyond the datagen threads; with the rest as e the
   model's max rates came within 8 % of the measured (runs 9a2922fd, offline). With e = 0
   nothing changes.
   Closed forms it meets: one operator with cpu_share 1 saturates at K / E[S] once its
   instances outnumber the cores; instances that do not outnumber the cores are never stretched
   (the model without ``resources``, bit for bit); ``cpu_share`` 0 makes the cores irrelevant.
   Near CPU saturation with ``cpu_share`` < 1 it is conservative: 4 instances at cpu_share 0.5
   on 1 core saturate at 186 tuples/s for E[S] = 10 ms, where the exact closed machine-repairman
   (MVA) value with every instance busy is 197.

``predict_batch`` evaluates many configurations and rates in one numpy pass; ``predict`` is the
same computation for one configuration, so the two cannot disagree. Small batches (the planner's:
one to a few dozen rows) pay mostly a per-operator cost in numpy calls, so the evaluation keeps
it low: one vectorized pass for every operator's waits after the dispersion recursion (which the
waits do not feed), shuffle-fed operators' per-instance quantities computed for all of them at
once, and, when the flow fractions do not depend on the parallelism (no broadcast edges), the
end-to-end moments as small matrix products over (I - A)^-1 on small blocks (row by row on large
ones; ``_MATRIX_WORK``): ~4.5 ms for one row of a 50-operator DAG, was ~22.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Callable, Mapping, Sequence

import networkx as nx
import numpy as np
from scipy.special import gammaincinv

from modeler.errors import ConfigError, ModelError
from modeler.keys import share_table
from modeler.modelfile import JobModel, ScalingSpec, to_graph

#: The latency statistics ``Prediction.latency_ms`` reports.
LATENCY_STATS = ("mean", "p95", "p99")
_QUANTILES = {"p95": 0.95, "p99": 0.99}
_SAT_EPS = 1e-12


# ---------------------------------------------------------------------------- values


@dataclass(frozen=True)
class OperatorPrediction:
    """One operator at one configuration and rate. Rates in tuples/s, times in ms."""

    parallelism: int
    arrival_rate: float
    """Offered arrival rate at the requested input rate (before back pressure)."""
    utilization: float
    """Mean utilization over the instances (at the achieved throughput)."""
    max_utilization: float
    """Utilization of the hottest instance."""
    processed_rate: float
    """Tuples/s actually processed (throttled above max_rate)."""
    sojourn_ms: float | None
    """Mean time a tuple spends at the operator (wait + service); None when saturated."""
    backpressured: bool
    """Upstream of the bottleneck while the job is saturated."""
    bottleneck: bool
    hot_share: float
    """Share of the operator's input that its hottest instance receives (1/p when even)."""

    def to_dict(self) -> dict:
        return {
            "parallelism": self.parallelism, "arrival_rate": self.arrival_rate,
            "utilization": self.utilization, "max_utilization": self.max_utilization,
            "processed_rate": self.processed_rate, "sojourn_ms": self.sojourn_ms,
            "backpressured": self.backpressured, "bottleneck": self.bottleneck,
            "hot_share": self.hot_share,
        }


@dataclass(frozen=True)
class Prediction:
    """What the job does at one configuration and input rate."""

    rate: float
    throughput: float
    """Input tuples/s the job accepts: min(rate, max_rate)."""
    max_rate: float
    """Highest input rate the configuration sustains (tuples/s)."""
    bottleneck: str | None
    """The operator whose hottest instance saturates first (None if nothing has a capacity)."""
    saturated: bool
    config: Mapping[str, int]
    latency_ms: Mapping[str, float | None]
    """{'mean', 'p95', 'p99'}: end-to-end, ms; None when saturated."""
    operators: Mapping[str, OperatorPrediction]
    output_rate: float = 0.0
    """Tuples/s arriving at the sinks."""

    def to_dict(self) -> dict:
        """The ``augury predict --json`` object (public contract, see README)."""
        return {
            "rate": self.rate, "throughput": self.throughput, "max_rate": self.max_rate,
            "bottleneck": self.bottleneck, "saturated": self.saturated,
            "config": dict(self.config), "latency_ms": dict(self.latency_ms),
            "output_rate": self.output_rate,
            "operators": {name: op.to_dict() for name, op in self.operators.items()},
        }


@dataclass(frozen=True)
class BatchPrediction:
    """``predict_batch`` results: row i is configuration ``parallelism[i]`` at ``rate[i]``.

    Per-operator arrays have one column per operator, in ``operators`` order.
    """

    operators: tuple[str, ...]
    parallelism: np.ndarray
    rate: np.ndarray
    max_rate: np.ndarray
    throughput: np.ndarray
    saturated: np.ndarray
    bottleneck: np.ndarray
    """Column index of the bottleneck operator (-1 when none has a capacity)."""
    utilization: np.ndarray
    max_utilization: np.ndarray
    processed_rate: np.ndarray
    arrival_rate: np.ndarray
    hot_share: np.ndarray
    sojourn_ms: np.ndarray
    """Mean sojourn per operator, NaN when saturated."""
    latency_mean_ms: np.ndarray
    output_rate: np.ndarray
    tail: "_Tail" = field(repr=False, compare=False, default=None)
    """The end-to-end distribution (its transform); p95/p99 are computed from it on first use."""

    def _quantile_ms(self, q: float) -> np.ndarray:
        out = self.tail.quantiles([q])[:, 0] * 1000.0
        out[self.saturated] = np.nan
        return out

    def tails_ms(self, i: int) -> dict[str, float]:
        """p95 and p99 (ms, NaN when saturated) of row ``i`` alone, both from one Newton run (the
        whole batch's arrays when already computed)."""
        have = {s: self.__dict__[f"latency_{s}_ms"][i] for s in _QUANTILES if f"latency_{s}_ms" in self.__dict__}
        missing = [s for s in _QUANTILES if s not in have]
        if missing:
            if self.saturated[i]:
                vals = [np.nan] * len(missing)
            else:
                vals = (self.tail.quantiles([_QUANTILES[s] for s in missing], np.array([i]))[0] * 1000.0).tolist()
            have.update(zip(missing, vals))
        return {s: float(have[s]) for s in _QUANTILES}

    def latency_at(self, stat: str, rows: np.ndarray, start_scale: float = 1.0) -> np.ndarray:
        """``latency(stat)[rows]``, computing a p95/p99 for those rows only (unless the whole
        batch's is already computed). ``start_scale``: a known ratio of the exact statistic to
        ``approx_latency``'s (e.g. from a neighbouring configuration) starts the numerical
        inversion closer to the root (one Newton evaluation fewer; same result to ~1e-10)."""
        rows = np.asarray(rows, dtype=np.int64)
        name = f"latency_{stat}_ms"
        if stat == "mean" or name in self.__dict__:
            return self.latency(stat)[rows]
        out = self.tail.quantiles([_QUANTILES[stat]], rows, start_scale)[:, 0] * 1000.0
        return np.where(self.saturated[rows], np.nan, out)

    def approx_latency(self, stat: str) -> np.ndarray:
        """``latency(stat)`` cheaply: the mean, or for p95/p99 the quantile of a shifted gamma
        fitted to the first two moments (the exact tail's starting point; ms, NaN when saturated).
        For ranking only (the greedy planner): neither a bound nor monotone."""
        if stat == "mean":
            return self.latency_mean_ms
        out = self.tail.gamma_quantiles([_QUANTILES[stat]])[:, 0] * 1000.0
        return np.where(self.saturated, np.nan, out)

    @cached_property
    def latency_p95_ms(self) -> np.ndarray:
        """End-to-end p95, ms (NaN when saturated): the quantile of the model's own path-mixture
        distribution, by numerical inversion of its Laplace transform (computed on first use)."""
        return self._quantile_ms(_QUANTILES["p95"])

    @cached_property
    def latency_p99_ms(self) -> np.ndarray:
        """End-to-end p99, ms (NaN when saturated), as ``latency_p95_ms``."""
        return self._quantile_ms(_QUANTILES["p99"])

    def latency(self, stat: str) -> np.ndarray:
        if stat not in ("mean", "p95", "p99"):
            raise KeyError(stat)
        return getattr(self, f"latency_{stat}_ms")  # only the statistic asked for is computed


# ----------------------------------------------------------------- compiled model


@dataclass(frozen=True)
class _Edge:
    u: int
    v: int
    grouping: str
    selectivity: float
    batch_var: float
    """Var(B) of the clump emitted per processed tuple: s for s > 1 (Poisson), s(1-s) for s <= 1."""
    table: np.ndarray | None
    """Key-grouping share table [p, instance] (``modeler.keys.share_table``)."""
    buffer: float = np.inf
    """The edge's input buffer at each target instance, tuples waiting (inf: unbounded)."""


@dataclass(frozen=True)
class _FlowMix:
    """The end-to-end DP's constant parts for models without broadcast edges (edges in
    ``CompiledModel.in_edges`` order): ``base`` edge flow per unit throughput, ``B`` [E, V] the
    flow fraction of edge e into its target, ``AT`` the fractions as a [V, V] matrix (transposed:
    row u, column v), ``inv_T`` = ((I - A)^-1)^T, ``in_share`` the fractions' sum per operator
    (1, or 0 for sources and operators without inflow)."""

    u: np.ndarray
    v: np.ndarray
    forward: np.ndarray
    base: np.ndarray
    B: np.ndarray
    AT: np.ndarray
    inv_T: np.ndarray
    in_share: np.ndarray
    index: dict
    shuffle_in: dict
    """Per shuffle-fed operator: (sources u [k], weights frac*s [k], offset sum frac*Var(B)/s,
    clump terms: [] when no edge emits clumps, else [sum of the other edges' fractions,
    (frac, clump size) per edge with selectivity > 1])."""
    sf_cols: np.ndarray
    """The shuffle-fed operators, increasing; ``sf_pos[v]``: v's position among them."""
    sf_pos: dict
    sf_clumpy: list
    """Shuffle-fed operators with an in-edge emitting clumps (selectivity > 1)."""
    sf_noflow: list
    """Shuffle-fed operators without inflow (every in-edge carries nothing)."""


@dataclass(frozen=True)
class _CopyPairs:
    """Copies of one tuple that meet again at a merge (a fork that re-merges), per unit of flow.

    A tuple processed at x emits on each out-edge independently (Bernoulli for selectivity <= 1,
    Poisson above); its descendants that reach a merge v through *different* in-edges arrive
    correlated, which the superposition of independent streams (``_superpose``) misses: at
    src -> a -> c plus src -> c the testbed's sojourn at c is ~30 % above the independent model's
    at every load. Every such pair of copies has one last common ancestor tuple, at x, which sent
    them down two different out-edges a != b (or as two tuples of one clump on edge a), so the
    rate of ordered cross-edge pairs at v is, for Poisson sources and exactly in the branching
    model, sum over x and {a, b} of ``visit_x * s_a s_b * sum_{i != j} m_a(e_i) m_b(e_j)`` with
    ``m_a(e)`` the copies one tuple on a sends through in-edge e (``R = (I - S)^-1`` of the
    selectivity matrix); E[B(B-1)] = s^2 for a Poisson clump, 0 for Bernoulli. Divided by v's
    inflow it is the excess ``W`` of v's index of dispersion over the independent superposition
    (the covariance term of the merged counts) and, for pairs arriving together, of the clump
    factor m - 1 (a pair is a clump of two: E[B(B-1)]/E[B]).

    Pairs do not arrive together: the branches' mean service times differ by ``delta`` (each
    branch's copies weighted by the operators they pass). Each term is discounted as if that
    difference were exponential, ``W E[S] / (E[S] + delta)`` with E[S] the merge's service time
    (the later copy finds the earlier one's residual service), in the dispersion and in the
    clump alike. Against the testbed (src -> a -> c plus src -> c, 0.2-0.9 load) c's sojourn is
    then 11 % short to 0.3 % over; a factor growing with the merge's utilization (its queue's
    relaxation time E[S]/(1 - rho) in place of E[S]) was as close on most shapes, 16 % over on one, and took
    the planner's pruning bound with it (the per-operator floor must not depend on the load:
    200,000 evaluations for a mean SLO on the 50-operator bench DAG instead of ~200). Waits on
    the branches are not in ``delta`` either: they would make the latency at v rise when a
    branch gains instances, which the planner's monotonicity rules out. Per instance the excess
    is scaled by the instance's share of v's flow (copies are routed independently: round robin,
    or keys drawn per edge). Arrays: one column per term.
    """

    target: np.ndarray
    """The merge v of each term [K]."""
    weight: np.ndarray
    """W: ordered cross-edge pairs per tuple arriving at v [K]."""
    delta: np.ndarray
    """The branches' mean service-time difference, seconds [K] (base service times: a constant
    of the model, so the terms at v depend on v's own parallelism only, as the planner's
    per-operator evaluation needs).

    Known gap near saturation (issue 27, ``experiments/saturation_diag.py``): the discount is
    too strong where the merge is busy and the branches' lag is short. Testbed, the fork above
    with c at 0.2-0.95 utilization, six shapes (c with 1-2 instances, shuffle or key, the direct
    branch at selectivity 0.5, a at 0.5-4 ms for c's 1-2 ms): c's sojourn is 0.3-15 % short
    (-15 % at 0.95 where a and c both take 1 ms); on ``accuracy``'s random-2 a merge with one
    instance at 0.85 (op2, op3) is 3-10 % short, -3 to -6 % end to end, against long runs at the
    same rate. The queue's busy period E[S]/(1 - rho) in place of E[S] for the merge's own wait
    (the dispersion passed on unchanged, so the planner's floor would keep its pair term) was
    within -9 to +3 % on five of the six shapes and brought the random DAGs' bias to -2 to
    +1 %, but +15 to +24 % at 0.8-0.95 where a takes 4 ms for c's 2 ms: a then queues at c's
    utilization and the lag between copies grows with a's wait as fast as the busy period
    grows, so the lag would have to include the branches' waits, which the per-operator
    evaluation excludes (see above). Not adopted. (``saturation_diag --fork`` reruns the sweep
    for the model as it is.)"""
    merges: tuple[int, ...]
    """The merges with at least one term, increasing."""

    def excess(self, v: int, es: np.ndarray) -> np.ndarray:
        """The excess of v's index of dispersion over the independent superposition at mean
        service time ``es`` (s) [n]; the clump factor's excess is the same number (see the class
        docstring). 0 where v has no term."""
        cols = np.flatnonzero(self.target == v)
        if cols.size == 0:
            return np.zeros_like(es)
        es = es[:, None]
        return (self.weight[cols] * es / (es + self.delta[cols])).sum(axis=1)


def add_copy_pairs(ca2: np.ndarray, clump: np.ndarray, excess: np.ndarray, share: np.ndarray,
                   on: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ca2, clump) of instance classes [n, width] with a merge's copy-pair ``excess`` [n] added
    where ``on``: per instance, a pair lands together with the instance's ``share`` of the flow
    (copies are routed independently). Shared by ``predict_batch`` and the planner's
    ``_plan_fast``."""
    extra = excess[:, None] * share
    return np.where(on, ca2 + extra, ca2), np.where(on, clump + extra, clump)


def _copy_pairs(compiled: "CompiledModel") -> _CopyPairs | None:
    """``_CopyPairs`` of a model without broadcast edges (None when no copies re-merge)."""
    V = len(compiled.names)
    edges = [e for es in compiled.in_edges for e in es if e.selectivity > 0]
    S = np.zeros((V, V))
    for e in edges:
        S[e.u, e.v] += e.selectivity
    R = np.linalg.inv(np.eye(V) - S)  # R[x, y]: tuples at y per tuple processed at x
    visit = compiled.source_share @ R
    out: dict[int, list] = {}
    for e in edges:
        out.setdefault(e.u, []).append(e)
    targets, weights, delays = [], [], []
    for v in range(V):
        ins = [e for e in compiled.in_edges[v] if e.selectivity > 0]
        if len(ins) < 2 or visit[v] <= 0 or compiled.service_s[v] <= 0:
            continue
        us = np.array([e.u for e in ins])
        sel = np.array([e.selectivity for e in ins])
        reach = R[:, us] * sel  # [y, i]: copies through in-edge i per tuple processed at y
        total = reach.sum(axis=1)  # copies reaching v per tuple at y
        for x in range(V):
            branches = out.get(x, [])
            if visit[x] <= 0 or not branches:
                continue
            # m[a, i]: copies through in-edge i per tuple sent on out-edge a of x.
            m = np.array([[float(a.v == v and a.u == e.u) for e in ins] for a in branches])
            heads = np.array([a.v for a in branches])
            m += np.where((heads != v)[:, None], reach[heads], 0.0)
            m_tot = m.sum(axis=1)
            live = np.flatnonzero(m_tot > 0)
            if live.size == 0 or (live.size == 1 and branches[live[0]].selectivity <= 1):
                continue
            # Mean service-time coefficients of a branch's copies: each operator y passed on the
            # way, weighted by the copies that reach v through it.
            coef = np.zeros((len(branches), V))
            for k in live:
                h = heads[k]
                if h != v:
                    coef[k] = R[h] * total / m_tot[k]
                    coef[k, v] = 0.0
            for ia, ka in enumerate(live):
                a = branches[ka]
                for kb in live[ia:]:
                    b = branches[kb]
                    cross = m_tot[ka] * m_tot[kb] - float(m[ka] @ m[kb])
                    if ka == kb:  # two tuples of one clump on a: E[B(B-1)] = s^2 (Poisson)
                        if a.selectivity <= 1:
                            continue
                        pairs = a.selectivity**2 * cross
                        d = np.zeros(V)
                        d[heads[ka]] = 1.0 if heads[ka] != v else 0.0  # they queue one after the other
                    else:
                        pairs = a.selectivity * b.selectivity * 2.0 * cross
                        d = coef[ka] - coef[kb]
                    w = visit[x] * pairs / visit[v]
                    if w > 1e-12:
                        targets.append(v)
                        weights.append(w)
                        delays.append(d)
    if not targets:
        return None
    return _CopyPairs(target=np.array(targets, dtype=np.int64), weight=np.array(weights),
                      delta=np.abs(np.array(delays) @ compiled.service_s), merges=tuple(sorted(set(targets))))


@dataclass(frozen=True)
class CompiledModel:
    """A model prepared for fast evaluation (topological order, edge lists, key tables)."""

    model: JobModel
    names: tuple[str, ...]
    service_s: np.ndarray
    """Base mean service time per operator, seconds (0 = no capacity limit)."""
    scv: np.ndarray
    arrival_scv: np.ndarray
    source_share: np.ndarray
    in_edges: tuple[tuple[_Edge, ...], ...]
    ancestors: tuple[frozenset[int], ...]
    sinks: tuple[int, ...]
    min_p: np.ndarray
    max_p: np.ndarray
    forward_groups: tuple[tuple[int, ...], ...] = field(default=())
    """Operators tied together by forward edges (must share one parallelism)."""
    copies_correlated: bool = True
    """Whether copies of one tuple that meet again at a merge are modelled as correlated arrivals
    (``_CopyPairs``). Off only in the planner's relaxed bound model (it then stays a lower bound:
    the correlation only adds latency)."""
    buffer_tuples: np.ndarray | None = None
    """Per operator, the input buffer (tuples waiting) of each instance that blocks its senders:
    the smallest ``buffer_tuples`` over its in-edges from operators with a service time; inf
    where none applies. None when no operator blocks (the unbounded model, bit for bit)."""
    cores: float | None = None
    """Cores the job's instances share (``JobModel.cores``); None = unlimited (the model before
    shared cores, bit for bit)."""
    cpu_share: np.ndarray | None = None
    """Per operator, the part of its service time that is CPU work (0-1)."""
    source_cpu_s: np.ndarray | None = None
    """Per operator, a source's CPU work per tuple one instance generates, seconds
    (``cpu_ms_per_tuple``; 0 for the others). None when no source has one or the cores are
    unlimited (then the model is the one before source CPU, bit for bit)."""
    cpu_overhead_per_instance: float = 0.0
    """Fraction of its CPU work per tuple every operator adds per computing instance beyond the
    cores (``JobModel.cpu_overhead_per_instance``; "Shared cores"); 0 without cores."""
    engine_cpu_s: float = 0.0
    """Core-seconds of CPU the engine spends per job input tuple outside every operator's and
    source's thread (``JobModel.engine_cpu_ms_per_tuple``; "Shared cores"); 0 without cores."""

    @cached_property
    def index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}

    @cached_property
    def flow_mix(self) -> "_FlowMix | None":
        """Constant flow fractions of the end-to-end DP (None with broadcast edges, whose
        visit ratios depend on the parallelism)."""
        if any(e.grouping == "broadcast" for es in self.in_edges for e in es):
            return None
        V = len(self.names)
        visit = np.zeros(V)
        edges = [e for es in self.in_edges for e in es]
        for v, es in enumerate(self.in_edges):
            visit[v] = sum(e.selectivity * visit[e.u] for e in es) if es else self.source_share[v]
        base = np.array([e.selectivity * visit[e.u] for e in edges])
        tot = np.zeros(V)
        for e, b in zip(edges, base):
            tot[e.v] += b
        frac = np.array([b / tot[e.v] if tot[e.v] > 0 else 0.0 for e, b in zip(edges, base)])
        B = np.zeros((len(edges), V))
        A = np.zeros((V, V))
        for i, e in enumerate(edges):
            B[i, e.v] = frac[i]
            A[e.v, e.u] += frac[i]
        inv = np.linalg.inv(np.eye(V) - A)
        shuffle_in = {}
        for v in self.shuffle_fed:
            live = [(e, f) for e, f in zip(edges, frac) if e.v == v and e.selectivity > 0 and f > 0]
            clumpy = [(f, e.selectivity + e.batch_var / e.selectivity) for e, f in live if e.selectivity > 1]
            shuffle_in[v] = (np.array([e.u for e, _ in live], dtype=np.int64),
                             np.array([f * e.selectivity for e, f in live]),
                             float(sum(f * e.batch_var / e.selectivity for e, f in live)),
                             [float(sum(f for e, f in live if e.selectivity <= 1))] + clumpy if clumpy else [])
        return _FlowMix(u=np.array([e.u for e in edges], dtype=np.int64),
                        v=np.array([e.v for e in edges], dtype=np.int64),
                        forward=np.array([e.grouping == "forward" for e in edges]),
                        base=base, B=B, AT=A.T.copy(), inv_T=inv.T.copy(), in_share=A.sum(axis=1),
                        index={(e.u, e.v): i for i, e in enumerate(edges)}, shuffle_in=shuffle_in,
                        sf_cols=np.array(sorted(shuffle_in), dtype=np.int64),
                        sf_pos={v: j for j, v in enumerate(sorted(shuffle_in))},
                        sf_clumpy=[v for v in sorted(shuffle_in) if shuffle_in[v][3]],
                        sf_noflow=[v for v in sorted(shuffle_in) if shuffle_in[v][0].size == 0])

    @cached_property
    def copy_pairs(self) -> "_CopyPairs | None":
        """The correlated copies that reach a merge (see ``_CopyPairs``); None when the model has
        none, copies are treated as independent (``copies_correlated`` off) or a broadcast edge
        makes the copy counts depend on the parallelism."""
        if not self.copies_correlated or any(e.grouping == "broadcast" for es in self.in_edges for e in es):
            return None
        return _copy_pairs(self)

    @cached_property
    def forward_sources(self) -> frozenset[int]:
        """Operators with a forward out-edge (their per-instance departures feed one instance)."""
        return frozenset(e.u for es in self.in_edges for e in es if e.grouping == "forward")

    def service_at(self, parallelism: np.ndarray) -> np.ndarray:
        """Mean service time per instance [n, V] at the given parallelism (contention scaling)."""
        out = np.broadcast_to(self.service_s, parallelism.shape).astype(float).copy()
        for j, scaling in self.scaled:
            out[:, j] *= scaling.factor_at(parallelism[:, j])
        return out

    @cached_property
    def scaled(self) -> tuple[tuple[int, ScalingSpec], ...]:
        """(column, scaling) of the operators whose service time depends on their parallelism."""
        return tuple((j, self.model.operator(name).scaling) for j, name in enumerate(self.names)
                     if self.model.operator(name).scaling.form != "linear" and self.service_s[j] > 0)

    @cached_property
    def shuffle_fed(self) -> frozenset[int]:
        """Operators fed by shuffle edges only (one instance class: an even split)."""
        return frozenset(v for v, es in enumerate(self.in_edges)
                         if es and all(e.grouping == "shuffle" for e in es))

    def config_array(self, configs: Sequence[Mapping[str, int]]) -> np.ndarray:
        """Full parallelism matrix [n, V] from (possibly partial) configurations, validated."""
        rows = [self.model.resolve_config(c) for c in configs]
        return np.array([[row[n] for n in self.names] for row in rows], dtype=np.int64)


def compile_model(model: JobModel, *, copies_correlated: bool = True) -> CompiledModel:
    """Prepare ``model`` for ``predict`` / ``predict_batch``. Raises ``ModelError`` without profiles.

    ``copies_correlated=False`` treats copies of one tuple that meet again at a merge as
    independent arrivals (the model before issue 27's correction; the planner's relaxed bound)."""
    if not model.has_profiles():
        missing = [op.name for op in model.operators if not op.is_source and op.service_time_ms is None]
        raise ModelError("the model has no service time (calibrate it first)", file=model.source_file,
                         field=f"operators[{missing[0]}].service_time_ms")
    graph = to_graph(model)
    order = tuple(nx.lexicographical_topological_sort(graph, key=list(graph.nodes).index))
    index = {n: i for i, n in enumerate(order)}
    specs = [model.operator(n) for n in order]
    shares = model.source_shares()
    in_edges: list[list[_Edge]] = [[] for _ in order]
    for e in model.edges:
        s = e.selectivity
        batch_var = s if s > 1 else s * (1 - s)
        table = None
        if e.grouping == "key":
            table = share_table(e.keys, model.operator(e.target).max_parallelism)
        in_edges[index[e.target]].append(
            _Edge(index[e.source], index[e.target], e.grouping, s, float(batch_var), table,
                  float(model.edge_buffer(e)) if model.edge_buffer(e) is not None else np.inf))
    buffers = np.full(len(order), np.inf)
    for e in model.edges:
        k = model.edge_buffer(e)
        if k is not None and model.operator(e.source).service_time_ms:
            v = index[e.target]
            buffers[v] = min(buffers[v], float(k))
    forward = nx.Graph()
    forward.add_nodes_from(range(len(order)))
    forward.add_edges_from((index[e.source], index[e.target]) for e in model.edges if e.grouping == "forward")
    groups = tuple(tuple(sorted(c)) for c in nx.connected_components(forward) if len(c) > 1)
    source_cpu = np.array([(op.cpu_ms_per_tuple or 0.0) / 1000.0 if op.is_source else 0.0 for op in specs])
    return CompiledModel(
        model=model,
        names=order,
        service_s=np.array([(op.service_time_ms or 0.0) / 1000.0 for op in specs]),
        scv=np.array([op.service_scv for op in specs]),
        arrival_scv=np.array([op.arrival_scv for op in specs]),
        source_share=np.array([shares.get(op.name, 0.0) for op in specs]),
        in_edges=tuple(tuple(es) for es in in_edges),
        ancestors=tuple(frozenset(index[a] for a in nx.ancestors(graph, n)) for n in order),
        sinks=tuple(index[n] for n in order if graph.out_degree(n) == 0),
        min_p=np.array([op.min_parallelism for op in specs]),
        max_p=np.array([op.max_parallelism for op in specs]),
        forward_groups=groups,
        buffer_tuples=buffers if np.isfinite(buffers).any() else None,
        copies_correlated=copies_correlated,
        cores=model.cores,
        cpu_share=np.array([op.cpu_share for op in specs]),
        source_cpu_s=source_cpu if model.cores is not None and source_cpu.any() else None,
        cpu_overhead_per_instance=float(model.cpu_overhead_per_instance) if model.cores is not None else 0.0,
        engine_cpu_s=float(model.engine_cpu_ms_per_tuple) / 1000.0 if model.cores is not None else 0.0,
    )


# ------------------------------------------------------------------ the evaluation


@dataclass
class _Classes:
    """Instances of one operator grouped into classes with equal share.

    ``share[n, k]``: share of the operator's arrivals received by one instance of class k;
    ``count[n, k]``: number of instances in class k. Even splits use a single class (K = 1).
    """

    share: np.ndarray
    count: np.ndarray

    @property
    def width(self) -> int:
        return self.share.shape[1]


def _explicit(cls: _Classes, p: np.ndarray, width: int) -> _Classes:
    """Expand an even split to one column per instance (for mixing with a skewed split)."""
    if cls.width == width:
        return cls
    k = np.arange(width)[None, :]
    mask = k < p[:, None]
    return _Classes(share=np.where(mask, 1.0 / p[:, None], 0.0), count=mask.astype(float))


def _superpose(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Superposition of independent streams arriving at one instance (QNA's asymptotic method).

    ``parts``: (rate, index of dispersion, clump factor m). The merged index of dispersion and the
    clump factor are flow-weighted averages. Whitt's hybrid (which drifts towards Poisson as more
    streams merge at low load) was tried and dropped: it makes latency *rise* when an upstream
    operator gains instances, breaking the monotonicity the planner relies on, for a < 2 % gain
    against Ciw.
    """
    total = sum(p[0] for p in parts)
    safe = np.where(total > 0, total, 1.0)
    disp = sum(p[0] * p[1] for p in parts) / safe
    clump = sum(p[0] * p[2] for p in parts) / safe
    return np.where(total > 0, disp, 1.0), np.where(total > 0, clump, 1.0)


def _waiting(rho: np.ndarray, ca2: np.ndarray, cs2: np.ndarray, es: np.ndarray,
             clump: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and second moment of one instance's waiting time (seconds).

    Two independent parts: the queue wait (Allen-Cunneen with the KLB correction; zero with
    probability 1-rho, else exponential) and the wait behind earlier tuples of the same clump
    (position K uniform on 0..m-1 service times: E[K] = (m-1)/2, E[K^2] = (m-1)(2m-1)/6).
    """
    return _waiting_parts(rho, ca2, cs2, es, clump)[:2]


def _variability(r: np.ndarray, ca2: np.ndarray, cs2, clump) -> np.ndarray:
    """Allen-Cunneen's variability factor ``(ca2 + cs2) / 2`` with Krämer/Langenbach-Belz's
    correction ``g`` on its *renewal* part only, at utilization ``r`` (clipped to (0, 1)):
    ``g(renewal) (renewal + cs2)/2 + k/2`` with ``k = min(m - 1, ca2)``, renewal = ca2 - k.
    Arrivals in clumps of m on average (selectivity > 1, copies meeting again) carry m - 1 of
    their index of dispersion as clumps, for which Allen-Cunneen alone is exact (M^X/G/1:
    renewal 1, g 1); applying the high-variability factor to the whole shrank the wait by 6-25 %
    at 0.35-0.85 load on WordCount's count, and the calibration raised the SCV to make up for it
    (1.3 for 1.0), then over-predicted near saturation, where g -> 1. Without clumps (m = 1):
    KLB as published. Non-decreasing in ca2 (both parts), which the planner's floor needs."""
    k = np.minimum(np.maximum(clump - 1.0, 0.0), ca2)
    renewal = ca2 - k
    denom = np.maximum(renewal + cs2, 1e-12)
    g = np.exp(np.where(
        renewal < 1.0,
        -2.0 * (1.0 - r) * (1.0 - renewal) ** 2 / (3.0 * r * denom),
        -(1.0 - r) * (renewal - 1.0) / (renewal + 4.0 * cs2 + 1e-12),
    ))
    return g * (renewal + cs2) / 2.0 + k / 2.0


def _waiting_parts(rho: np.ndarray, ca2: np.ndarray, cs2: np.ndarray, es: np.ndarray,
                   clump: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_waiting``'s two moments and the conditional (positive) queue wait (meaningless where
    rho is 0: the tails weight it by rho). ``predict_batch`` calls this directly, once per block
    for every operator's instance classes side by side (``_sojourn_moments``)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.clip(rho, 1e-12, 1.0 - 1e-12)
        queue1 = np.where(rho > 0, _variability(r, ca2, cs2, clump) * r / (1.0 - r) * es, 0.0)
        positive = queue1 / r
        queue2 = np.where(rho > 0, 2.0 * queue1**2 / r, 0.0)
    clump1 = es * (clump - 1.0) / 2.0
    clump2 = es**2 * (clump - 1.0) * (2.0 * clump - 1.0) / 6.0
    return queue1 + clump1, queue2 + 2.0 * queue1 * clump1 + clump2, positive


# ----------------------------------------------------------- bounded buffers (blocking)


def _trunc_geo_mean(s: np.ndarray, N: np.ndarray) -> np.ndarray:
    """E[n] of n on 1..N with P(n) proportional to exp(s (n - 1)) (a truncated geometric of
    ratio e^s, any sign of s): 1/(1 - e^s) - N e^{Ns}/(1 - e^{Ns}) in overflow-free form, and
    its second-order expansion around s = 0 where the two terms cancel."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        exact = -1.0 / np.expm1(s) - N / np.expm1(-N * s)
    near = (N + 1.0) / 2.0 + s * (N * N - 1.0) / 12.0
    return np.where(np.abs(s) * N < 1e-6, near, exact)


def _trunc_geo_last(s: np.ndarray, N: np.ndarray) -> np.ndarray:
    """P(n = N) of ``_trunc_geo_mean``'s distribution: (1 - e^s) e^{(N-1)s} / (1 - e^{Ns})."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        pos = np.expm1(-s) / np.expm1(-N * s)
        neg = np.exp((N - 1.0) * s) * np.expm1(s) / np.expm1(N * s)
    return np.where(np.abs(s) * N < 1e-12, 1.0 / N, np.where(s > 0, pos, neg))


def finite_queue(offered: np.ndarray, capacity: np.ndarray, shape: np.ndarray | float = 1.0) -> dict:
    """One instance with room for ``capacity`` tuples in all (N; the one in service included)
    whose senders offer tuples at intensity ``offered`` (rate x E[S]) while it has room: the
    number present n is 0 with probability P0 = (1 - r)/(1 - r sigma^N) and else truncated
    geometric of ratio sigma = r^shape on 1..N (r = ``offered``). ``shape`` = 1 is the M/M/1/N
    queue exactly; ``_Blocking`` uses 2 / (1 + cs2), the heavy-traffic (diffusion) decay of a
    queue with Poisson arrivals and service SCV cs2. Returns arrays: ``p0``, ``p_full`` (P(n=N)),
    ``mean_number`` (E[n]), ``mean_queue`` (E[max(n - 1, 0)]) and ``utilization`` (1 - P0, the
    served rate x E[S])."""
    r = np.asarray(offered, dtype=float)
    N = np.asarray(capacity, dtype=float)
    a = np.asarray(shape, dtype=float)
    t = np.log(r)
    b = 1.0 + a * N
    p0 = _p0(t, b)
    s = a * t
    cond_mean = _trunc_geo_mean(s, N)
    util = 1.0 - p0
    return {"p0": p0, "utilization": util, "p_full": util * _trunc_geo_last(s, N),
            "mean_number": util * cond_mean, "mean_queue": util * (cond_mean - 1.0)}


def _p0(t: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``finite_queue``'s P0 = (1 - e^t)/(1 - e^{bt}) at t = log(offered), b = 1 + shape N."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = np.expm1(t) / np.expm1(b * t)
    return np.where(np.abs(t) * b < 1e-12, 1.0 / b, out)


def _offered_for(util: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log(offered) t such that ``finite_queue``'s utilization 1 - P0(t) is ``util`` (< 1):
    Newton on log P0 (decreasing in t, nearly linear), safeguarded by the bracket
    [log util, -log(1 - util) / (b - 1)] (P0 <= e^{-(b-1) t} for t >= 0)."""
    target = np.log1p(-util)
    lo = np.log(util)
    hi = np.maximum(-target / (b - 1.0), 0.0)
    t = lo.copy()
    active = np.ones(t.shape, dtype=bool)
    for _ in range(100):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            h = np.log(_p0(t, b)) - target
            slope = np.where(np.abs(t) * b < 1e-8, (1.0 - b) / 2.0,
                             -1.0 / np.expm1(-t) + b / np.expm1(-b * t))
        lo = np.where(h > 0, t, lo)   # P0 still too high: the root is above t
        hi = np.where(h > 0, hi, t)
        with np.errstate(divide="ignore", invalid="ignore"):
            new = t - h / slope
        bad = ~np.isfinite(new) | (new <= lo) | (new >= hi)
        new = np.where(bad, 0.5 * (lo + hi), new)
        # (log space: 1e-13 is the rounding noise of log P0, below which Newton only wanders)
        done = np.abs(new - t) <= 1e-13 * np.maximum(1.0, np.abs(t))
        t = np.where(active, new, t)
        active &= ~done
        if not active.any():
            break
    return t


@dataclass
class _Blocking:
    """Bounded input buffers: the effective service time of blocked senders, per configuration
    row (seconds). See "Bounded buffers" in the module docstring.

    Built once per block from the traffic pass (visit ratios, instance classes, edge flows);
    ``at(rate)`` evaluates one input rate per row, ``max_rate`` finds where the hottest
    effective utilization reaches 1.
    """

    compiled: CompiledModel
    classes: list
    visit: np.ndarray
    ES: np.ndarray
    edge_flow: dict

    def at(self, rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(effective mean service [n, V], its SCV [n, V]) at input rate
        ``rate`` [n], in reverse topological order: an operator's blocked time
        depends on its receivers' effective utilization, which includes their own blocking."""
        c = self.compiled
        n, V = self.ES.shape
        es = self.ES.copy()
        cs2 = np.broadcast_to(c.scv, (n, V)).astype(float).copy()
        blocked1 = np.zeros((n, V))  # mean blocked time per processed tuple
        blocked2 = np.zeros((n, V))  # its second moment
        K = c.buffer_tuples
        for v in range(V - 1, -1, -1):
            if c.service_s[v] <= 0:
                continue
            base = self.ES[:, v]
            m1 = base + blocked1[:, v]
            m2 = (1.0 + c.scv[v]) * base**2 + 2.0 * base * blocked1[:, v] + blocked2[:, v]
            es[:, v] = m1
            cs2[:, v] = np.maximum(m2 / m1**2 - 1.0, 0.0)
            if not np.isfinite(K[v]):
                continue
            cls = self.classes[v]
            util = (rate * self.visit[:, v] * m1)[:, None] * cls.share
            util = np.clip(util, 0.0, 1.0 - 1e-12)
            a = (2.0 / (1.0 + cs2[:, v]))[:, None] * np.ones_like(util)
            # Room for K waiting + 1 in service + 1 held by a blocked sender (the sender's
            # completed tuple waits for a slot; the exact state of a two-station tandem).
            N = K[v] + 2.0
            b = 1.0 + a * N
            live = util > 0
            # Where the buffer is never full to double precision (util^(aN) below 1e-18) the
            # queue is the unbounded one exactly: no solve, no blocking.
            with np.errstate(divide="ignore"):
                matters = live & (a * N * np.log(np.where(live, util, 1.0)) > np.log(1e-18))
            p_block = np.zeros_like(util)
            if matters.any():
                u_m, b_m, a_m = util[matters], b[matters], a[matters]
                s = a_m * _offered_for(u_m, b_m)
                p_full = u_m * _trunc_geo_last(s, N)
                p_block[matters] = p_full * np.exp(-s) / (1.0 - p_full)
            weight = cls.share * cls.count  # fraction of v's tuples at each class
            residual = m1 * (1.0 + cs2[:, v]) / 2.0  # a blocked sender waits for v's current service to end
            hit = np.minimum((weight * p_block).sum(axis=1), 1.0)
            for e in c.in_edges[v]:
                if c.service_s[e.u] <= 0 or not np.isfinite(e.buffer):
                    continue
                sent = self.edge_flow[(e.u, v)] / np.where(self.visit[:, e.u] > 0, self.visit[:, e.u], 1.0)
                blocked1[:, e.u] += sent * hit * residual             # expected blocked time per tuple
                blocked2[:, e.u] += sent * hit * 2.0 * residual**2    # (exponential residual)
        return es, cs2

    def max_rate(self, plain: np.ndarray, hot_share: np.ndarray) -> np.ndarray:
        """The input rate at which the hottest instance's effective utilization (busy or
        blocked) reaches 1 (``_utilization_root``: the unbounded model's max rate is an upper
        bound, blocking only adds)."""
        cap = self.compiled.service_s > 0

        def excess(r):
            load = np.where(cap, self.visit * hot_share * self.at(r)[0], 0.0)
            return r * load.max(axis=1) - 1.0, load

        return _utilization_root(plain, excess)


def _utilization_root(plain: np.ndarray, excess: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
                      rtol: float = 1e-11) -> np.ndarray:
    """The input rate at which the hottest instance's effective utilization reaches 1, per row,
    when effective service grows with the rate (blocking, shared cores): Illinois regula falsi
    between ``plain``, the max rate at the base service times (an upper bound), and ``plain``
    divided by the hottest effective utilization there (a lower bound). ``excess(r)`` returns
    (r x hottest effective load - 1, the effective load per unit rate [n, V])."""
    finite = np.isfinite(plain)
    hi = np.where(finite, plain, 1.0)
    f_hi, load_hi = excess(hi)
    lo = np.where(f_hi > 0, 1.0 / load_hi.max(axis=1), hi)
    f_lo, _ = excess(lo)
    for _ in range(60):
        # A load at ``hi`` that was only a lower bound (an iteration stopped once saturated)
        # gives no lower bound on the root: halve until below it.
        down = (f_hi > 0) & (f_lo > 0)
        if not down.any():
            break
        lo = np.where(down, 0.5 * lo, lo)
        f_lo = np.where(down, excess(lo)[0], f_lo)
    side = np.zeros(hi.shape)
    for _ in range(200):
        # 1e-11 of the rate: past it the effective utilizations near a receiver at capacity
        # move by their own rounding (P(block) is steep there), not by the rate.
        open_ = (f_hi > 0) & (f_lo < 0) & (hi - lo > rtol * hi)
        if not open_.any():
            break
        with np.errstate(divide="ignore", invalid="ignore"):
            r = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        r = np.where((r <= lo) | (r >= hi) | ~np.isfinite(r), 0.5 * (lo + hi), r)
        f, _ = excess(np.where(open_, r, lo))
        up = open_ & (f < 0)
        down = open_ & (f >= 0)
        # Illinois: halve the value kept at the other end when the same end moves twice.
        f_hi = np.where(up & (side == 1), f_hi / 2.0, f_hi)
        f_lo = np.where(down & (side == -1), f_lo / 2.0, f_lo)
        lo, f_lo = np.where(up, r, lo), np.where(up, f, f_lo)
        hi, f_hi = np.where(down, r, hi), np.where(down, f, f_hi)
        side = np.where(up, 1, np.where(down, -1, side))
    # (f_lo / f_hi may have been halved: the bracket, not them, says where the root is)
    root = np.where(f_hi <= 0, hi, np.where(f_lo >= 0, lo, 0.5 * (lo + hi)))
    return np.where(finite, root, plain)


def _binomial_pmf_head(count: np.ndarray, p: np.ndarray, J: int) -> np.ndarray:
    """P(B = j) for j < ``J`` of B ~ Binomial(``count``, ``p``) (elementwise, any shape; counts
    whole, >= 0), stacked on a new last axis. Logs are clipped so p = 0 or 1 stay exact (0^0 = 1)."""
    tiny = 1e-300
    log_p, log_q = np.log(np.maximum(p, tiny)), np.log(np.maximum(1.0 - p, tiny))
    log_pmf = count * log_q  # P(B = 0)
    out = []
    with np.errstate(divide="ignore"):
        for j in range(J):
            out.append(np.exp(log_pmf))
            # P(B = j + 1) = P(B = j) (count - j) / (j + 1) p / q
            log_pmf = log_pmf + np.log(np.maximum(count - j, 0.0)) - np.log(j + 1.0) + log_p - log_q
    return np.stack(out, axis=-1)


def _conv_head(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The first J terms of the convolution of two pmf heads [..., J] (the pmf of a sum of two
    independent counts below J)."""
    J = a.shape[-1]
    out = np.zeros(np.broadcast_shapes(a.shape, b.shape))
    for j in range(J):
        out[..., j] = (a[..., : j + 1] * b[..., j::-1]).sum(axis=-1)
    return out


def cpu_stretch(own: np.ndarray, counts: np.ndarray, instances: np.ndarray, cores: float,
                engine_busy: np.ndarray | None = None, engine_threads: float = 0.0) -> np.ndarray:
    """Mean stretch of CPU work under processor sharing over ``cores`` cores, seen by one
    instance of each operator while it computes: E[max(1, (1 + M)/cores)], M the number of
    *other* instances computing at that moment.

    ``own`` [n, V]: one instance's probability of being in its CPU phase, per operator;
    ``counts`` [n, V]: the operator's instances that compute; ``instances`` [n]: all instances
    (the stretch is exactly 1 where they do not outnumber the cores); ``engine_busy`` [n]: the
    expected number of the engine's ``engine_threads`` threads computing. M is the sum of
    independent counts, one per operator, Binomial(count, own) (the tagged operator's count less
    its tagged instance), and the engine's Binomial(threads, busy / threads): a Poisson-binomial
    with each operator's instances at their mean. (Until 2026-12-06 M was one Binomial over all
    instances with their probabilities averaged: the most spread a mean allows, so a saturated
    source thread and an operator's idle instances looked like instances half computing each,
    which overstated contention by ~10 % of q1's max rate on the live 2-core cluster.)
    E[(M - a)^+] = (E[M] - a) + sum_{j < a} (a - j) P(M = j), a = cores - 1: only the pmf below
    the core count is needed."""
    n, V = own.shape
    own = np.clip(own, 0.0, 1.0)
    counts = np.maximum(counts, 0.0)
    engine = np.zeros(n) if engine_busy is None else np.asarray(engine_busy, dtype=float)
    mean = (counts * own).sum(axis=1)[:, None] + engine[:, None] - np.where(counts > 0, own, 0.0)
    a = cores - 1.0
    if a <= 0:
        over = np.maximum(mean - a, 0.0)
    else:
        J = int(np.ceil(a))
        p_engine = np.clip(engine / engine_threads, 0.0, 1.0) if engine_threads > 0 else np.zeros(n)
        if J == 1:  # only P(M = 0): a product, summed in logs (the common 2-core case; hot in calibration)
            log_q = np.log(np.maximum(1.0 - own, 1e-300))
            log_engine = float(engine_threads) * np.log(np.maximum(1.0 - p_engine, 1e-300))
            everyone = (counts * log_q).sum(axis=1) + log_engine
            # without the tagged instance: one factor of its own operator's less
            pmf = np.exp(everyone[:, None] - np.where(counts > 0, log_q, 0.0))[..., None]
        else:
            head_engine = _binomial_pmf_head(np.full(n, float(engine_threads)), p_engine, J)
            full = _binomial_pmf_head(counts, own, J)  # [n, V, J]
            tagged = _binomial_pmf_head(np.maximum(counts - 1.0, 0.0), own, J)
            # prefix and suffix convolutions: every operator's others without a division
            prefix = [np.broadcast_to(head_engine, (n, J))]
            for v in range(V - 1):
                prefix.append(_conv_head(prefix[-1], full[:, v]))
            suffix = [None] * V
            acc = np.zeros((n, J))
            acc[:, 0] = 1.0
            for v in range(V - 1, -1, -1):
                suffix[v] = acc
                acc = _conv_head(acc, full[:, v])
            pmf = np.stack([_conv_head(_conv_head(prefix[v], suffix[v]), tagged[:, v]) for v in range(V)], axis=1)
        j = np.arange(pmf.shape[-1])
        over = np.maximum(mean - a + ((a - j) * pmf).sum(axis=-1), 0.0)
    stretch = 1.0 + over / cores
    return np.where((instances <= cores)[:, None], 1.0, stretch)


def cpu_overhead_factor(compiled: CompiledModel, parallelism: np.ndarray) -> np.ndarray:
    """The factor m = 1 + h max(0, N - cores) on every operator's CPU work per tuple [n], at
    the given parallelism [n, V] ("Shared cores", per-instance CPU overhead): N the instances
    that compute (operators with a service time and a CPU share > 0, sources with their own CPU
    work), h ``cpu_overhead_per_instance``. All ones without cores or without the overhead."""
    P = np.atleast_2d(np.asarray(parallelism, dtype=float))
    h = compiled.cpu_overhead_per_instance
    if compiled.cores is None or not h:
        return np.ones(P.shape[0])
    cpu = compiled.cpu_share if compiled.cpu_share is not None else np.ones(P.shape[1])
    computing = (compiled.service_s > 0) & (cpu > 0)
    if compiled.source_cpu_s is not None:
        computing = computing | (compiled.source_cpu_s > 0)
    instances = (P * computing).sum(axis=1)
    return 1.0 + h * np.maximum(instances - float(compiled.cores), 0.0)


def cpu_work_per_tuple(compiled: CompiledModel, parallelism: np.ndarray) -> np.ndarray:
    """Core-seconds of CPU work one input tuple causes in the whole job [n], at the given
    parallelism [n, V] (service times at that parallelism, broadcast copies counted, the
    per-instance CPU overhead included; no stretch). The job cannot sustain a rate at which
    this times the rate reaches its cores."""
    P = np.atleast_2d(np.asarray(parallelism, dtype=np.int64))
    visit = _traffic(compiled, P)[0]
    cpu = compiled.cpu_share if compiled.cpu_share is not None else np.ones(P.shape[1])
    work = visit * compiled.service_at(P) * cpu * cpu_overhead_factor(compiled, P)[:, None]
    if compiled.source_cpu_s is not None:  # the sources' own CPU work per tuple they generate
        work = work + visit * compiled.source_cpu_s
    return work.sum(axis=1) + compiled.engine_cpu_s


@dataclass
class _SharedCores:
    """Shared cores: the effective service time of every operator, per configuration row
    (seconds), when its instances' CPU work shares ``compiled.cores`` cores. See "Shared cores"
    in the module docstring.

    Built once per block from the traffic pass; ``at(rate)`` solves the stretch's fixed point at
    one input rate per row, ``max_rate`` finds where the hottest effective utilization reaches 1.
    """

    compiled: CompiledModel
    classes: list
    visit: np.ndarray
    ES: np.ndarray
    Pf: np.ndarray
    tol: float = 1e-8
    """Relative change of the stretch at which its fixed-point iteration stops."""
    max_iter: int = 2000

    def __post_init__(self) -> None:
        c = self.compiled
        self.cap = c.service_s > 0
        self.cpu = np.where(self.cap, c.cpu_share, 0.0)
        if c.source_cpu_s is not None:
            # A source's generation (``cpu_ms_per_tuple``) is a station of the cores' model: all
            # CPU work, stretched like the operators' and stretching theirs, and its hottest
            # instance (one thread) at utilization 1 bounds the rate. Sources have no service
            # time of their own (the model file allows one or the other), so nothing is replaced.
            gen = c.source_cpu_s > 0
            self.ES = np.where(gen, c.source_cpu_s, self.ES)
            self.cap = self.cap | gen
            self.cpu = np.where(gen, 1.0, self.cpu)
        self.cpu_any = self.cpu > 0  # [V]: operators with CPU work at all
        overhead = cpu_overhead_factor(c, self.Pf)
        if (overhead != 1.0).any():
            # Per-instance CPU overhead: the operators' CPU work per tuple grows by the factor
            # (the rest of the service not), so per row the base service and its CPU part change:
            # E[S] -> E[S](1 + c(m - 1)), c -> c m / (1 + c(m - 1)). Sources' own CPU is not grown.
            m = overhead[:, None]
            grows = c.service_s > 0
            grown = np.where(grows, self.ES * (1.0 + self.cpu * (m - 1.0)), self.ES)
            self.cpu = np.where(grows & (grown > 0), self.cpu * m * self.ES / np.where(grown > 0, grown, 1.0),
                                self.cpu * np.ones_like(self.ES))
            self.ES = grown
        # Instances that compute: every instance of an operator with a service time (and of a
        # source with CPU work). The engine's own CPU work (``engine_cpu_s`` per input tuple, in
        # no operator's thread) counts as ``cores`` more threads sharing it: it loads the cores
        # and stretches the instances' work, and bounds nothing by itself.
        self.engine_work = float(c.engine_cpu_s)
        self.engine_threads = float(c.cores) if self.engine_work > 0 else 0.0
        self.instances = (self.Pf * self.cap).sum(axis=1) + self.engine_threads
        self.counts = self.Pf * (self.cap & self.cpu_any)  # [n, V]: instances with CPU work
        # The stretch at the highest rate solved so far without saturation, per row: a lower
        # bound on the stretch at every higher rate (the map rises with the rate), so the
        # iteration at such a rate may start there (``max_rate`` probes rising rates).
        n, V = self.ES.shape
        self._known_rate = np.zeros(n)
        self._known_stretch = np.ones((n, V))
        # Every computing operator's instance classes side by side [n, sum of K], with the
        # operator of each column and a column -> operator sum: ``_cpu_probabilities`` is then
        # one vectorized pass per iteration instead of one per operator (it runs hundreds of
        # times per solve).
        ops = [v for v in range(V) if self.cap[v] and self.cpu_any[v]]
        self._class_op = np.repeat(np.array(ops, dtype=np.int64), [self.classes[v].width for v in ops])
        self._class_share = np.concatenate([self.classes[v].share for v in ops], axis=1) if ops else np.zeros((n, 0))
        self._class_count = np.concatenate([self.classes[v].count for v in ops], axis=1) if ops else np.zeros((n, 0))
        self._class_to_op = np.zeros((len(self._class_op), V))
        self._class_to_op[np.arange(len(self._class_op)), self._class_op] = 1.0

    def at(self, rate: np.ndarray, hot_share: np.ndarray | None = None) -> np.ndarray:
        """Effective mean service [n, V] (seconds) at input rate ``rate`` [n]: the base service
        with its CPU part stretched, E[S] (1 + cpu_share (stretch - 1)). The stretch is the least
        fixed point of stretch -> ``cpu_stretch``(CPU-phase probabilities at that stretch),
        iterated from 1 (the map is monotone, so the iteration rises to it and every iterate is
        a lower bound). With ``hot_share``, a row stops as soon as an iterate puts the hottest
        instance at utilization 1: it is saturated at this rate whatever the fixed point (all
        ``max_rate`` needs; near saturation the iteration converges slowly)."""
        n, V = self.ES.shape
        work = self.ES * self.cpu  # CPU work per tuple, core-seconds
        warm = rate >= self._known_rate
        stretch = np.where(warm[:, None], self._known_stretch, 1.0)
        live = np.ones(n, dtype=bool)
        es = self.ES + work * (stretch - 1.0)
        for _ in range(self.max_iter):
            new = self._stretch(rate, stretch, es)
            done = (np.abs(new - stretch) <= self.tol * new).all(axis=1) | ~live
            stretch = np.where(live[:, None], new, stretch)
            es = self.ES + work * (stretch - 1.0)
            if hot_share is not None:
                hot = np.where(self.cap, (rate * self.visit.T).T * hot_share * es, 0.0).max(axis=1)
                live &= hot < 1.0
            if done.all() or not live.any():
                break
        solved = live & done & (rate > self._known_rate)
        self._known_rate = np.where(solved, rate, self._known_rate)
        self._known_stretch = np.where(solved[:, None], stretch, self._known_stretch)
        self.last_stretch = stretch
        return self.ES + work * (stretch - 1.0)

    def plain_max_rate(self, hot_share: np.ndarray) -> np.ndarray:
        """The max rate [n] without any stretch (every computing instance alone on a core): an
        upper bound on the shared-core one, which ``max_rate`` starts from."""
        load = np.where(self.cap, self.visit * hot_share * self.ES, 0.0).max(axis=1)
        with np.errstate(divide="ignore"):
            return np.where(load > 0, 1.0 / np.where(load > 0, load, 1.0), np.inf)

    def stretch_at(self, rate: np.ndarray) -> np.ndarray:
        """The stretch itself [n, V] at input rate ``rate`` [n] (``at``'s fixed point)."""
        self.at(rate)
        return self.last_stretch

    def _cpu_probabilities(self, rate: np.ndarray, stretch: np.ndarray, es: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray]:
        """(one instance's probability of computing per operator [n, V], the expected number of
        the engine's threads computing [n]) at input rate ``rate`` with the given stretch and
        stretched service: ``cpu_stretch``'s ``own`` and ``engine_busy``."""
        of = self._class_op
        work = (self.ES * self.cpu)[:, of]
        es_c = es[:, of]
        lam = rate[:, None] * self.visit[:, of] * self._class_share  # tuples/s per instance
        # CPU-phase probability: its share of the busy time, busy capped at 1
        # (a saturated instance computes cpu work / service of the time).
        frac = np.where(es_c > 0, work * stretch[:, of] / np.where(es_c > 0, es_c, 1.0), 0.0)
        computing = (np.minimum(lam * es_c, 1.0) * frac * self._class_count) @ self._class_to_op  # [n, V]
        own = computing / np.where(self.Pf > 0, self.Pf, 1.0)
        engine = np.zeros(len(rate))
        if self.engine_work > 0:
            # the engine's threads: rate x its work, stretched as the instances' work is on
            # average (weighted by their CPU phases), at most all of them computing
            weight = computing
            mean_stretch = np.where(weight.sum(axis=1) > 0, (weight * stretch).sum(axis=1)
                                    / np.where(weight.sum(axis=1) > 0, weight.sum(axis=1), 1.0), 1.0)
            engine = np.minimum(rate * self.engine_work * mean_stretch, self.engine_threads)
        return own, engine

    def _stretch(self, rate: np.ndarray, stretch: np.ndarray, es: np.ndarray) -> np.ndarray:
        """One step of the stretch's map: ``cpu_stretch`` at the CPU-phase probabilities of
        ``stretch`` at input rate ``rate``."""
        own, engine = self._cpu_probabilities(rate, stretch, es)
        return cpu_stretch(own, self.counts, self.instances, float(self.compiled.cores), engine, self.engine_threads)

    def max_rate(self, plain: np.ndarray, hot_share: np.ndarray) -> np.ndarray:
        """Where the hottest instance's stretched utilization reaches 1.

        Directly: iterate the stretch with the rate eliminated (the rate that puts the hottest
        instance at 1 under the current stretch, then the stretch at that rate), which settles
        in ~10 iterations on the examples and agrees with the root below to ~1e-7. Rows where it
        does not settle, or where the rate it finds is not saturated above and unsaturated
        below (0.1 % either side), take the root in the rate (``_utilization_root``: ~30 fixed-point solves,
        10-100x slower), bounded by the base max rate and the rate at which the CPU work fills
        every core (no fixed point exists beyond it: the stretch would exceed itself)."""
        n, V = self.ES.shape
        cores = float(self.compiled.cores)
        work = self.ES * self.cpu
        stretch = np.ones((n, V))
        settled = np.zeros(n, dtype=bool)
        rate = np.where(np.isfinite(plain), plain, 1.0)
        for _ in range(200):
            es = self.ES + work * (stretch - 1.0)
            load = np.where(self.cap, self.visit * hot_share * es, 0.0).max(axis=1)
            rate = np.where(load > 0, 1.0 / np.where(load > 0, load, 1.0), np.inf)
            new = self._stretch(np.where(np.isfinite(rate), rate, 0.0), stretch, es)
            settled = (np.abs(new - stretch) <= 1e-12 * new).all(axis=1)
            stretch = new
            if settled.all():
                break
        found = np.where(np.isfinite(plain), rate, plain)
        # The least fixed point decides: unsaturated below, saturated just above (0.1 % either
        # side). Below needs no solve: the map rises with the rate, so the settled stretch s* is
        # a supersolution at any lower rate (F(s*) <= s*), the least fixed point there is at most
        # s* (Knaster-Tarski), and the hottest utilization at most that rate x 1 / found < 1.
        # (Iterating there from 1 creeps: it was two thirds of a calibration's time.) Above,
        # the iteration from 1 must reach utilization 1, which it stops at.
        check = np.isfinite(found)
        above = np.where(check, found * (1 + 1e-3), 0.0)
        hot_above = np.where(self.cap, self.visit * hot_share * self.at(above, hot_share), 0.0).max(axis=1) * above
        good = ~check | (settled & (hot_above >= 1.0))
        # The stretched service at the max rate (where the bottleneck is read).
        self.max_rate_service = self.ES + work * (stretch - 1.0)
        cpu_work = (self.visit * self.ES * self.cpu).sum(axis=1) + self.engine_work  # core-s per input tuple
        with np.errstate(divide="ignore"):
            full = np.where(cpu_work > 0, cores / cpu_work, np.inf)
        # The stretch at the max rate, where the direct iteration found it (NaN elsewhere: the
        # root below, or the rate that fills the cores).
        self.max_rate_stretch = np.where((good & check & (found <= full))[:, None], stretch, np.nan)
        if good.all():
            # The engine's work joins the stretch only on average (its threads' share of the
            # cores, at most all of them), so where it is a large part of the CPU the stretch can
            # leave the cores over-full: no rate beyond the one that fills them is sustainable.
            return np.minimum(found, full) if self.engine_work > 0 else found

        def excess(r):
            load = np.where(self.cap, self.visit * hot_share * self.at(r, hot_share), 0.0)
            return r * load.max(axis=1) - 1.0, load

        self._known_rate = np.zeros(n)  # the probes above were not all below the root
        self._known_stretch = np.ones((n, V))
        root = _utilization_root(np.minimum(plain, full), excess, rtol=1e-6)
        fallback = self.at(root, hot_share)
        self.max_rate_service = np.where(good[:, None], self.max_rate_service, fallback)
        out = np.where(good, found, root)
        return np.minimum(out, full) if self.engine_work > 0 else out


# ------------------------------------------------- tails: the path mixture's own distribution

# Abate-Whitt's Euler algorithm (Abate & Whitt 2006, "A unified framework for numerically
# inverting Laplace transforms"): f(t) ~ (10^(M/3) / t) * sum_k eta_k Re fhat(beta_k / t),
# 2M+1 nodes; about 0.6 M significant digits in double precision.
_EULER_M = 14


def _euler_nodes(M: int = _EULER_M) -> tuple[np.ndarray, np.ndarray]:
    from math import comb, log
    xi = np.zeros(2 * M + 1)
    xi[0] = 0.5
    xi[1:M + 1] = 1.0
    xi[2 * M] = 2.0 ** -M
    for k in range(1, M):
        xi[2 * M - k] = xi[2 * M - k + 1] + 2.0 ** -M * comb(M, k)
    k = np.arange(2 * M + 1)
    beta = M * log(10.0) / 3.0 + 1j * np.pi * k
    eta = 10.0 ** (M / 3.0) * (-1.0) ** k * xi
    return beta, eta


_BETA, _ETA = _euler_nodes()


@dataclass
class _OpDist:
    """One operator's sojourn distribution (per configuration row), as the model defines it.

    A mixture over instance classes (weight = fraction of the operator's tuples) of
    wait + in-clump wait + service, independent: the queue wait is 0 with probability ``rho``'s
    complement, else exponential with mean ``wait`` (so its mean is Allen-Cunneen/KLB's); the
    in-clump wait is K service means with K uniform on 0..N-1, N = floor(m) or floor(m) + 1 mixed
    to give E[K] = (m-1)/2 exactly (for integer m: the uniform of the moment formula); service is
    gamma with mean ``es`` and SCV ``cs2`` (deterministic when 0). Seconds.
    """

    weight: np.ndarray
    rho: np.ndarray
    wait: np.ndarray
    clump: np.ndarray
    es: np.ndarray
    cs2: float

    def take(self, rows: np.ndarray) -> "_OpDist":
        """The rows ``rows``, every per-class array at the weights' shape; ``rho`` clipped to
        [0, 1] (saturated rows have no tail) and ``wait`` 0 where rho is 0."""
        w = self.weight[rows]
        full = lambda x: np.broadcast_to(x[rows] if np.ndim(x) else x, w.shape)
        rho = np.clip(full(self.rho), 0.0, 1.0)
        wait = np.where(rho > 0, full(self.wait), 0.0)
        return _OpDist(w, rho, wait, np.array(full(self.clump)), self.es[rows], self.cs2)

    def transform(self, s: np.ndarray) -> np.ndarray:
        """E[exp(-s T)] at s [n, S] (complex)."""
        es = self.es[:, None]
        x = s * es
        svc = _gamma_transform(x, self.cs2)
        if self.weight.shape[1] == 1:
            rho, w, m = self.rho, self.wait, self.clump
            out = svc * (1.0 - rho + rho / (1.0 + s * w))
            if np.any(m > 1.0):
                out = out * _clump_transform(x, m)
            return out
        return svc * self._classes_transform(s, x)

    @cached_property
    def _pairs(self) -> tuple:
        """The (row, class) pairs that carry tuples (weight > 0), row-major: (pair rows,
        pair_start [n + 1] (row i's pairs are pair_start[i] .. pair_start[i + 1] - 1), weight,
        rho, wait, clump). A key-grouped operator has one class per instance, padded to the
        batch's largest parallelism, so about half the [n, W] grid is empty. Gathered once per
        row set (``take``) and reused by every transform evaluation of the Newton iterations."""
        r, k = np.nonzero(self.weight > 0)
        pair_start = np.searchsorted(r, np.arange(self.weight.shape[0] + 1))
        return r, pair_start, self.weight[r, k], self.rho[r, k], self.wait[r, k], self.clump[r, k]

    def _classes_transform(self, s: np.ndarray, x: np.ndarray) -> np.ndarray:
        """sum over classes of weight * (wait transform) * (in-clump wait transform) at s [n, S]
        (x = s E[S], complex), over the occupied (row, class) pairs only: a compiled loop
        (``modeler._classes_kernel``; numpy without numba). Equal to the padded grid's sum
        (``_classes_transform_grid``, the computation before) to rounding."""
        from modeler import _classes_kernel as kernel

        if not kernel.HAVE_NUMBA:  # pragma: no cover - numba is a dependency
            return self._classes_transform_numpy(s, x)
        _, pair_start, w, rho, wait, m = self._pairs
        s, x = np.ascontiguousarray(s, dtype=np.complex128), np.ascontiguousarray(x, dtype=np.complex128)
        return kernel.classes_sum(s, x, pair_start, w, rho, wait, m)

    def _classes_transform_numpy(self, s: np.ndarray, x: np.ndarray) -> np.ndarray:
        """``_classes_transform`` in numpy on the occupied pairs: the in-clump terms u(N) =
        expm1(-N x) / (N expm1(-x)) depend on a class only through the integer N, so they are
        computed once per distinct N on [n, S] and gathered, instead of two complex exponentials
        per class."""
        r, pair_start, w, rho, wait, m = self._pairs
        out = np.zeros(x.shape, dtype=np.complex128)
        if r.size == 0:
            return out
        rho = rho[:, None]
        mix = 1.0 - rho + rho / (1.0 + s[r] * wait[:, None])
        c = np.flatnonzero(m > 1.0)
        if c.size:
            n1 = np.floor(m[c])
            distinct = np.unique(np.concatenate([n1, n1 + 1.0]))
            j1 = np.searchsorted(distinct, n1)
            d = np.expm1(-x)
            u = np.stack([np.expm1(-n * x) / (n * d) for n in distinct.tolist()])  # [N, n, S]
            rc, ac = r[c], (m[c] - n1)[:, None]
            mix[c] = mix[c] * ((1.0 - ac) * u[j1, rc] + ac * u[j1 + 1, rc])
        rows_with = np.flatnonzero(np.diff(pair_start) > 0)
        out[rows_with] = np.add.reduceat(w[:, None] * mix, pair_start[rows_with], axis=0)
        return out

    def _classes_transform_grid(self, s: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The same sum on the padded [n, W] grid of classes (every class, occupied or not),
        class by class: the plain computation the two above must equal (tests)."""
        x3, s3 = x[:, None, :], s[:, None, :]
        rho, w, m = self.rho[:, :, None], self.wait[:, :, None], self.clump[:, :, None]
        mix = 1.0 - rho + rho / (1.0 + s3 * w)
        if np.any(m > 1.0):
            mix = mix * _clump_transform(x3, m)
        return (self.weight[:, :, None] * mix).sum(axis=1)


_DETERMINISTIC_CV2 = 1e-12
"""A latency whose variance is below this times its squared mean (a coefficient of variation
below 1e-6) is a point mass: its quantiles are its mean. Its variance is E[T^2] - E[T]^2 and
carries ~1e-21 s^2 of rounding at ms latencies, which the evaluation order decides (0 in one
block, 8e-22 in another: Hypothesis found it); inverting the transform of a point mass
gives Gibbs oscillations instead (a 'p99' of 4.1 ms for a deterministic 2.5 ms)."""


def _random(var: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Where the end-to-end latency is random, not a point mass (``_DETERMINISTIC_CV2``)."""
    return var > _DETERMINISTIC_CV2 * mean**2


def _round_significant(x: np.ndarray, digits: int) -> np.ndarray:
    """``x`` (finite, > 0) rounded to ``digits`` significant decimal digits."""
    scale = 10.0 ** (digits - 1 - np.floor(np.log10(x)))
    return np.round(x * scale) / scale


def _gamma_transform(x: np.ndarray, cs2: float) -> np.ndarray:
    """E[exp(-x S / E[S])] for S gamma with SCV ``cs2`` (deterministic at 0): (1 + cs2 x)^(-1/cs2).
    Integer and half-integer shapes 1/cs2 by multiplications (and a square root), cheaper than
    the complex logarithm and exponential of the general case (equal to ~1e-15)."""
    if cs2 <= 0:
        return np.exp(-x)
    k = 1.0 / cs2
    base = 1.0 + cs2 * x
    for n in range(1, 9):
        if abs(k - n) < 1e-12 or abs(k - (n - 0.5)) < 1e-12:
            p = base if abs(k - n) < 1e-12 else np.sqrt(base)
            full = base
            for _ in range(n - 1):
                p = p * full
            return 1.0 / p
    return np.exp(np.log1p(cs2 * x) * (-k))


def _clump_transform(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """E[exp(-x K)], K uniform on 0..N-1, N = floor(m) w.p. 1 - frac(m), floor(m) + 1 else."""
    n1 = np.floor(m)
    a = m - n1
    d = np.expm1(-x)
    u1 = np.expm1(-n1 * x) / (n1 * d)
    u2 = np.expm1(-(n1 + 1.0) * x) / ((n1 + 1.0) * d)
    return np.where(m > 1.0, (1.0 - a) * u1 + a * u2, 1.0)


@dataclass
class _Tail:
    """Everything the end-to-end distribution needs, per configuration row (seconds).

    G_v(s) = L_v(s) * sum over in-edges u->v of flow-fraction * exp(-s delay_uv) * G_u(s) in
    topological order; the end-to-end transform is the sinks' G weighted by their flow: the
    flow-weighted mixture over source->sink paths, without enumerating the paths.
    """

    ops: list | Callable[[], list]    # _OpDist or None (no service: contributes nothing)
    edges: list | Callable[[], list]  # per v: None (a source) or (total in-flow [n], [(u, flow [n], delay [n] or None)])
    # (``ops`` and ``edges`` may come as functions building them: most batches never compute a
    # tail, and building them is ~10 % of a small batch's evaluation.)
    sinks: list          # [(v, weight [n])]
    hop: float
    mean: np.ndarray
    var: np.ndarray
    shift: np.ndarray
    valid: np.ndarray    # rows with a finite, non-degenerate distribution
    stacked: tuple | None
    """(rho [n, W], wait [n, W], clump [n, W], column of each operator's first instance class)
    of every operator with a capacity side by side, as ``predict_batch`` computed them: the
    one-class operators' columns are gathered from these in one step."""

    def prepare(self, rows: np.ndarray) -> "_TailRows":
        """The transform's inputs for the rows ``rows``, gathered once (operators with one
        instance class stacked into [r, V1] arrays, so their transforms are one numpy pass)."""
        if callable(self.ops):
            self.ops = self.ops()
        if callable(self.edges):
            self.edges = self.edges()
        narrow = [v for v, d in enumerate(self.ops) if d is not None and d.weight.shape[1] == 1]
        col = {v: j for j, v in enumerate(narrow)}
        wide = {v: d.take(rows) for v, d in enumerate(self.ops) if d is not None and v not in col}
        if narrow:
            rho_all, wait_all, clump_all, first = self.stacked
            pos = [first[v] for v in narrow]
            es = np.stack([self.ops[v].es for v in narrow], axis=1)[rows]
            rho = np.clip(rho_all[np.ix_(rows, pos)], 0.0, 1.0)
            wait = np.where(rho > 0, wait_all[np.ix_(rows, pos)], 0.0)
            m = clump_all[np.ix_(rows, pos)]
            cs2 = np.array([self.ops[v].cs2 for v in narrow])
        else:
            es = rho = wait = m = np.zeros((len(rows), 0))
            cs2 = np.zeros(0)
        edges = []
        for entry in self.edges:
            if entry is None:
                edges.append([])
                continue
            tot, flows = entry
            tot = tot[rows]
            safe = np.where(tot > 0, tot, 1.0)
            edges.append([(u, np.where(tot > 0, f[rows] / safe, 1.0 / len(flows)),
                           None if delay is None else delay[rows]) for u, f, delay in flows])
        sinks = [(v, w[rows]) for v, w in self.sinks]
        return _TailRows(len(self.ops), col, es, rho, wait, m, cs2, wide, edges, sinks, self.hop)

    def gamma_quantiles(self, qs: Sequence[float]) -> np.ndarray:
        """[n, len(qs)] quantiles (seconds) of the shifted gamma fitted to the first two moments:
        a cheap approximation of ``quantiles`` (its starting point), NaN where not valid."""
        q = np.asarray(qs, dtype=float)[None, :]
        rand = np.maximum(self.mean - self.shift, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.where(_random(self.var, self.mean), rand**2 / self.var, np.inf)[:, None]
            theta = np.where(rand > 0, self.var / rand, 0.0)[:, None]
            out = np.where(np.isfinite(k), self.shift[:, None] + theta * gammaincinv(np.minimum(k, 1e300), q),
                           self.mean[:, None])
        return np.where(self.valid[:, None], out, np.nan)

    def quantiles(self, qs: Sequence[float], sel: np.ndarray | None = None,
                  start_scale: float = 1.0) -> np.ndarray:
        """[n, len(qs)] quantiles (seconds): safeguarded Newton from the gamma fit's quantile
        (times ``start_scale``). With ``sel`` (row indices), for those rows only ([len(sel),
        len(qs)])."""
        all_rows = np.arange(self.mean.shape[0]) if sel is None else np.asarray(sel, dtype=np.int64)
        n = all_rows.size
        q = np.asarray(qs, dtype=float)[None, :]
        out = np.full((n, q.shape[1]), np.nan)
        mean, var, shift, valid = (x[all_rows] for x in (self.mean, self.var, self.shift, self.valid))
        rand = np.maximum(mean - shift, 0.0)
        degenerate = valid & ~((rand > 0) & _random(var, mean))
        out[degenerate] = mean[degenerate, None]
        local = np.flatnonzero(valid & ~degenerate)  # positions in ``out``
        rows = all_rows[local]                       # rows of the batch
        if rows.size == 0:
            return out
        k = rand[local] ** 2 / self.var[rows]
        theta = self.var[rows] / rand[local]
        t = self.shift[rows, None] + theta[:, None] * gammaincinv(k[:, None], q)
        t = np.where(np.isfinite(t) & (t > 0), t * start_scale, self.mean[rows, None])
        # The start rounded to 6 significant digits: the inversion's F carries ~1e-11 of
        # amplified rounding noise, so Newton stops anywhere in a ~1e-10 band around the root,
        # depending on where it starts; the moments behind the start differ in their last bits
        # with the evaluation order (predict_batch takes the end-to-end DP as matrices on small
        # blocks, row by row on large ones). A rounded start makes the quantile of a
        # configuration the same whichever batch it was evaluated in.
        t = _round_significant(t, 6)
        lo = np.zeros_like(t)
        hi = np.full_like(t, np.inf)
        active = np.ones(t.shape, dtype=bool)
        ev = self.prepare(rows)
        ev_idx = np.arange(rows.size)  # rows of ``ev`` (shrunk as rows converge)
        for _ in range(60):
            live = np.flatnonzero(active.any(axis=1))
            if live.size == 0:
                break
            if live.size < 0.75 * ev_idx.size:
                keep = np.searchsorted(ev_idx, live)
                ev, ev_idx = ev.take(keep), live
            idx = ev_idx  # converged rows still in ``ev`` are evaluated but keep their t
            tt = t[idx]
            F, f = ev.cdf_pdf(tt)
            below = F < q
            lo[idx] = np.where(below, np.maximum(lo[idx], tt), lo[idx])
            hi[idx] = np.where(below, hi[idx], np.minimum(hi[idx], tt))
            with np.errstate(divide="ignore", invalid="ignore"):
                # Newton on log(1 - F) (exact in one step for an exponential tail, which the
                # queue waits give: ~2-3 evaluations from the gamma fit instead of ~5 on F).
                sf = 1.0 - F
                new = np.where(sf > 0, tt + sf / f * np.log(sf / (1.0 - q)), tt + (q - F) / f)
            l, h = lo[idx], hi[idx]
            bad = ~np.isfinite(new) | ~(f > 0) | (new <= l) | (new >= h)
            fallback = np.where(np.isfinite(h), 0.5 * (l + h), 2.0 * tt)
            new = np.where(bad, fallback, new)
            # Newton converges quadratically: after a step of relative size 1e-5 the error is
            # ~1e-10, below the inversion's own.
            done = (~bad & (np.abs(new - tt) <= 1e-5 * tt)) | (np.abs(new - tt) <= 1e-10 * tt)
            t[idx] = np.where(active[idx], new, tt)
            active[idx] &= ~done
        out[local] = t
        return out


class _TailRows:
    """``_Tail`` restricted to some rows, ready for repeated transform evaluations."""

    def __init__(self, V, col, es, rho, wait, m, cs2, wide, edges, sinks, hop) -> None:
        self.V, self.col, self.es, self.rho, self.wait, self.m = V, col, es, rho, wait, m
        self.cs2, self.wide, self.edges, self.sinks, self.hop = cs2, wide, edges, sinks, hop
        self.svc_groups = [(float(c), np.flatnonzero(cs2 == c)) for c in np.unique(cs2)]
        self.clumped = np.flatnonzero((m > 1.0).any(axis=0)) if m.size else np.zeros(0, dtype=np.int64)

    def take(self, idx: np.ndarray) -> "_TailRows":
        return _TailRows(self.V, self.col, self.es[idx], self.rho[idx], self.wait[idx], self.m[idx],
                         self.cs2, {v: d.take(idx) for v, d in self.wide.items()},
                         [[(u, f[idx], None if d is None else d[idx]) for u, f, d in e] for e in self.edges],
                         [(v, w[idx]) for v, w in self.sinks], self.hop)

    def narrow_transforms(self, s: np.ndarray) -> np.ndarray:
        """[r, V1, S]: the stacked one-class operators' sojourn transforms at s [r, S]."""
        s3 = s[:, None, :]
        x = s3 * self.es[:, :, None]
        svc = np.empty_like(x)
        for cs2, j in self.svc_groups:
            svc[:, j] = _gamma_transform(x[:, j], cs2)
        rho = self.rho[:, :, None]
        out = svc * (1.0 - rho + rho / (1.0 + s3 * self.wait[:, :, None]))
        if self.clumped.size:
            j = self.clumped
            out[:, j] *= _clump_transform(x[:, j], self.m[:, j, None])
        return out

    def transform(self, s: np.ndarray) -> np.ndarray:
        """The end-to-end transform at s [r, S] (complex)."""
        Ln = self.narrow_transforms(s) if self.col else None
        G: list = [None] * self.V
        hop = np.exp(-s * self.hop) if self.hop > 0 else None
        for v in range(self.V):
            j = self.col.get(v)
            if j is not None:
                L = Ln[:, j]
            elif v in self.wide:
                L = self.wide[v].transform(s)
            else:
                L = None
            if self.edges[v]:
                acc = None
                for u, frac, delay in self.edges[v]:
                    term = frac[:, None] * G[u]
                    if delay is not None:
                        term = term * np.exp(-s * delay[:, None])
                    acc = term if acc is None else acc + term
                if hop is not None:
                    acc = acc * hop
                G[v] = acc if L is None else L * acc
            else:
                G[v] = np.ones_like(s) if L is None else L
        out = None
        for v, w in self.sinks:
            term = w[:, None] * G[v]
            out = term if out is None else out + term
        return out

    def cdf_pdf(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """F(t) and f(t) at t [r, Q] (Euler inversion)."""
        r, Q = t.shape
        S = _BETA.size
        s = (_BETA[None, None, :] / t[:, :, None]).reshape(r, Q * S)
        g = self.transform(s).reshape(r, Q, S)
        F = (_ETA * (g / _BETA).real).sum(axis=2)
        f = (_ETA * g.real).sum(axis=2) / t
        return F, f


class _Tails:
    """The tails of a batch evaluated in blocks: one ``_Tail`` per block, rows concatenated."""

    def __init__(self, parts: list) -> None:
        self.parts = parts

    def quantiles(self, qs: Sequence[float], sel: np.ndarray | None = None,
                  start_scale: float = 1.0) -> np.ndarray:
        if sel is None:
            return np.concatenate([p.quantiles(qs, None, start_scale) for p in self.parts])
        sel = np.asarray(sel, dtype=np.int64)
        out = np.full((sel.size, len(qs)), np.nan)
        start = 0
        for p in self.parts:
            n = p.mean.shape[0]
            mine = np.flatnonzero((sel >= start) & (sel < start + n))
            if mine.size:
                out[mine] = p.quantiles(qs, sel[mine] - start, start_scale)
            start += n
        return out

    def gamma_quantiles(self, qs: Sequence[float]) -> np.ndarray:
        return np.concatenate([p.gamma_quantiles(qs) for p in self.parts])


_MATRIX_WORK = 25_000
"""Blocks with rows x operators^2 <= this x edges take the end-to-end DP as matrix products
(constant flow fractions only), larger ones row by row in topological order: O(operators^2)
arithmetic per row against O(edges) numpy calls per block. Measured crossovers: ~256 rows at 150
operators (225 edges), above 512 rows at 50 (75 edges), below 4,096 rows at 10 (10 edges)."""


_BLOCK_ROWS = 4096
"""``predict_batch`` evaluates at most this many rows per vectorized pass: the pass allocates
a few dozen [rows, operators] temporaries, which stay in the CPU caches at this size (one pass
over 100,000 rows was ~30 % slower than blocks of 4,096; results are identical)."""


def predict_batch(compiled: CompiledModel, parallelism: np.ndarray, rate: np.ndarray | float) -> BatchPrediction:
    """Evaluate configurations ``parallelism`` [n, V] (columns in ``compiled.names`` order) at
    input rates ``rate`` ([n] or a scalar), vectorized (in blocks of ``_BLOCK_ROWS`` rows)."""
    P = np.atleast_2d(np.asarray(parallelism, dtype=np.int64))
    n, V = P.shape
    if V != len(compiled.names):
        raise ConfigError(f"expected {len(compiled.names)} columns ({', '.join(compiled.names)})",
                          field="parallelism", value=V)
    R = np.broadcast_to(np.asarray(rate, dtype=float), (n,)).astype(float)
    if n <= _BLOCK_ROWS:
        return _predict_block(compiled, P, R)
    blocks = [_predict_block(compiled, P[i:i + _BLOCK_ROWS], R[i:i + _BLOCK_ROWS])
              for i in range(0, n, _BLOCK_ROWS)]
    columns = {f.name: np.concatenate([getattr(b, f.name) for b in blocks])
               for f in fields(BatchPrediction) if f.name not in ("operators", "tail")}
    return BatchPrediction(operators=blocks[0].operators, tail=_Tails([b.tail for b in blocks]),
                           **columns)


def _traffic(compiled: CompiledModel, P: np.ndarray) -> tuple[np.ndarray, list, dict, np.ndarray]:
    """Traffic per unit input rate at parallelism ``P`` [n, V]: visit ratios [n, V], each
    operator's instance classes (``_Classes``), the flow on every edge per unit input rate, and
    the hottest instance's share of each operator's arrivals [n, V]."""
    n, V = P.shape
    Pf = P.astype(float)
    inv_p = 1.0 / Pf
    visit = np.zeros((n, V))
    classes: list[_Classes] = []
    edge_flow: dict[tuple[int, int], np.ndarray] = {}
    for v in range(V):
        p = P[:, v]
        even = _Classes(share=inv_p[:, v:v + 1], count=Pf[:, v:v + 1])
        if not compiled.in_edges[v]:
            visit[:, v] = compiled.source_share[v]
            classes.append(even)
            continue
        flows, parts = [], []
        for e in compiled.in_edges[v]:
            f = e.selectivity * visit[:, e.u]
            if e.grouping == "broadcast":
                f = f * Pf[:, v]
            edge_flow[(e.u, v)] = f
            if e.grouping == "key":
                # Columns past the largest parallelism in the batch are all zero: drop them.
                table = e.table[p, : int(p.max())]
                cls = _Classes(share=table, count=(table > 0).astype(float))
            elif e.grouping == "forward":
                cls = classes[e.u]
            else:
                cls = even
            flows.append(f)
            parts.append(cls)
        total = sum(flows)
        visit[:, v] = total
        if all(c.width == 1 for c in parts):
            classes.append(even)
        else:
            width = max(c.width for c in parts)
            safe = np.where(total > 0, total, 1.0)[:, None]
            exp = [_explicit(c, p, width) if c.width != width else c for c in parts]
            share = sum(f[:, None] * c.share for f, c in zip(flows, exp)) / safe
            share = np.where(total[:, None] > 0, share, exp[0].share)
            classes.append(_Classes(share=share, count=(share > 0).astype(float)))
    hot_share = np.stack([c.share.max(axis=1) if c.width > 1 else c.share[:, 0] for c in classes], axis=1)
    return visit, classes, edge_flow, hot_share


def core_stretch(compiled: CompiledModel, parallelism: np.ndarray, rate: np.ndarray | float) -> np.ndarray:
    """The stretch of CPU work [n, V] (1 = no waiting for a core) at configurations
    ``parallelism`` [n, V] and input rates ``rate``, below saturation (a rate above a row's max
    rate is taken at its max rate): what calibration divides measured busy time by. All ones
    without shared cores."""
    P = np.atleast_2d(np.asarray(parallelism, dtype=np.int64))
    n, V = P.shape
    R = np.broadcast_to(np.asarray(rate, dtype=float), (n,)).astype(float)
    if compiled.cores is None:
        return np.ones((n, V))
    ES = compiled.service_at(P)
    visit, classes, _, hot_share = _traffic(compiled, P)
    cores = _SharedCores(compiled, classes, visit, ES, P.astype(float))
    max_rate = cores.max_rate(cores.plain_max_rate(hot_share), hot_share)
    # Rows at or above their max rate take the stretch the max rate was found with (calibration
    # windows of an overloaded job mostly are: solving there from 1 creeps); the rest are solved.
    at_max = (R >= max_rate * (1 - 1e-9)) & np.isfinite(cores.max_rate_stretch).all(axis=1)
    out = np.where(at_max[:, None], cores.max_rate_stretch, 1.0)
    if not at_max.all():
        rest = ~at_max  # (the traffic pass's rows, not a second pass)
        below = _SharedCores(compiled, [_Classes(share=c.share[rest], count=c.count[rest]) for c in classes],
                             visit[rest], ES[rest], P[rest].astype(float))
        out[rest] = below.stretch_at(np.minimum(R[rest], max_rate[rest] * (1 - 1e-9)))
    return out


def _predict_block(compiled: CompiledModel, P: np.ndarray, R: np.ndarray) -> BatchPrediction:
    """``predict_batch`` on one block: ``P`` [n, V] int64, ``R`` [n] float."""
    n, V = P.shape
    Pf = P.astype(float)
    inv_p = 1.0 / Pf
    ES = compiled.service_at(P)  # seconds per tuple per instance
    has_capacity = compiled.service_s > 0

    # 1. Traffic per unit input rate (visit ratios) and per-instance shares.
    visit, classes, edge_flow, hot_share = _traffic(compiled, P)
    # Utilization of the hottest instance per unit of input rate.
    hot_load = visit * hot_share * ES
    hot_load[:, ~has_capacity] = 0.0
    worst = hot_load.max(axis=1)
    with np.errstate(divide="ignore"):
        max_rate = np.where(worst > 0, 1.0 / worst, np.inf)
    bottleneck = np.where(worst > 0, hot_load.argmax(axis=1), -1)
    if compiled.cores is not None:
        # Shared cores: CPU work stretches with the instances computing at once, which grows
        # with the rate (see "Shared cores" in the module docstring). Service time as engines
        # measure it (busy time) includes the stretch, so it is the service from here on.
        cores = _SharedCores(compiled, classes, visit, ES, Pf)
        if compiled.source_cpu_s is not None or compiled.cpu_overhead_per_instance:
            # A source's generation can bound the rate (one thread per instance, stretched), and
            # the per-instance CPU overhead lengthens the base service: the bound from there.
            max_rate = cores.plain_max_rate(hot_share)
        max_rate = cores.max_rate(max_rate, hot_share)
        # The bottleneck may be a source that cannot generate faster on the shared cores.
        hot_load = np.where(cores.cap, visit * hot_share * cores.max_rate_service, 0.0)
        bottleneck = np.where(hot_load.max(axis=1) > 0, hot_load.argmax(axis=1), -1)
        ES = cores.at(np.minimum(R, max_rate))
        if compiled.source_cpu_s is not None:
            # Sources keep no service time: their generation is no queue a tuple waits in, and
            # engines report no busy time for it (utilization 0, as without the field).
            ES = np.where(has_capacity, ES, 0.0)
    cs2_rows = None
    busy_ES = ES
    if compiled.buffer_tuples is not None:
        # Bounded buffers: blocked time lengthens the senders' service (lower capacity), the
        # receivers' waits are truncated (see "Bounded buffers" in the module docstring). The
        # utilizations reported stay busy time (service only, as engines report it).
        block = _Blocking(compiled, classes, visit, ES, edge_flow)
        max_rate = block.max_rate(max_rate, hot_share)
        ES, cs2_rows = block.at(np.minimum(R, max_rate))

    throughput = np.minimum(R, max_rate)
    saturated = R >= max_rate * (1.0 - _SAT_EPS)
    processed = visit * throughput[:, None]
    arrival = visit * R[:, None]
    mean_util = np.where(has_capacity, processed * busy_ES / Pf, 0.0)
    max_util = np.where(has_capacity, processed * hot_share * busy_ES, 0.0)

    # 2. Latency (only meaningful below saturation; computed everywhere, masked at the end).
    # Variability travels at the level of the operator's whole stream: the instances' outputs
    # merge again downstream, and merging round-robin substreams of one stream gives the stream
    # back (a Poisson stream split over 2 instances and merged is Poisson, not Erlang-2). The
    # split only shapes each instance's own arrivals (its waiting time).
    # The waits do not feed the dispersion recursion, so the loop collects every operator's
    # per-class arrays and one vectorized pass after it computes all waits and sojourn moments
    # (one call per operator cost more than the arithmetic on 50-operator DAGs).
    # Copies of one tuple meeting again at a merge (``_CopyPairs``): the excess of each merge's
    # index of dispersion and of its clump factor over the independent superposition.
    pairs = compiled.copy_pairs
    pair_excess: dict[int, np.ndarray] = {}
    if pairs is not None:
        for v in pairs.merges:
            pair_excess[v] = pairs.excess(v, ES[:, v])
    stream_out = np.ones((n, V))  # dispersion of the operator's departure stream (before emission)
    inst_out: dict[int, np.ndarray] = {}  # per-instance departure dispersion (for forward edges)
    queued: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    forward_from = compiled.forward_sources
    mix = compiled.flow_mix
    live_rows = throughput > 0
    all_live = bool(live_rows.all())
    # Shuffle-fed operators under constant flow fractions have one instance class each: their
    # utilizations and departure-smoothing coefficients are computed for all of them at once
    # (columns ``sf``), and the loop below only carries the dispersion from operator to operator
    # (stream_in = the fraction-weighted mix of the in-edges' streams; it reaches every instance
    # thinned by 1/p, so the superposition is the stream's own dispersion over p).
    sf = mix.sf_cols if mix is not None else np.zeros(0, dtype=np.int64)
    sf_pos = mix.sf_pos if mix is not None else {}
    if sf.size:
        rho_sf = (processed[:, sf] * inv_p[:, sf]) * ES[:, sf]
        weight_sf = inv_p[:, sf] * Pf[:, sf]
        r2 = (weight_sf * rho_sf) ** 2
        cap_sf = has_capacity[sf]
        # Whitt's departure approximation (see below): max(in, a + b * in); no service: in.
        smooth_a = np.where(cap_sf, r2 * (compiled.scv[sf] if cs2_rows is None else cs2_rows[:, sf]), 0.0)
        smooth_b = np.where(cap_sf, 1.0 - r2, 1.0)
        stream_in_sf = np.ones((n, sf.size))
    for v in range(V):
        j = sf_pos.get(v)
        if j is not None:
            us, weights, offset, _ = mix.shuffle_in[v]
            if us.size:
                stream_in = stream_out[:, us[0]] * weights[0]  # (1-2 edges: no BLAS call)
                for u, w in zip(us[1:].tolist(), weights[1:].tolist()):
                    stream_in = stream_in + stream_out[:, u] * w
                stream_in = stream_in + offset
                if v in pair_excess:
                    stream_in = stream_in + pair_excess[v]
                if not all_live:  # rows without throughput: no stream
                    stream_in = np.where(live_rows, stream_in, 1.0)
                stream_in_sf[:, j] = stream_in
            else:
                stream_in = stream_in_sf[:, j]  # no inflow at all: 1
            stream_out[:, v] = np.maximum(stream_in, smooth_a[:, j] + smooth_b[:, j] * stream_in)
            if v in forward_from:
                ca2 = np.where(live_rows, stream_in * inv_p[:, v], 1.0)[:, None] if us.size else np.ones((n, 1))
                rho = rho_sf[:, j:j + 1]
                cs2 = compiled.scv[v] if cs2_rows is None else cs2_rows[:, v:v + 1]
                inst_out[v] = rho**2 * cs2 + (1.0 - rho**2) * ca2 if has_capacity[v] else ca2
            continue
        cls = classes[v]
        lam_inst = processed[:, v][:, None] * cls.share  # [n, K]
        es = ES[:, v][:, None]
        rho = lam_inst * es
        if not compiled.in_edges[v]:
            # External input is split over the source's partitions at random (by key hash).
            frac = inv_p[:, v]
            ca2 = (frac * compiled.arrival_scv[v] + 1.0 - frac)[:, None] * np.ones_like(cls.share)
            clump = np.ones_like(cls.share)
            stream_in = np.full(n, compiled.arrival_scv[v])
        else:
            parts = []
            stream_num = np.zeros(n)
            stream_den = np.zeros(n)
            pv = Pf[:, v]
            for e in compiled.in_edges[v]:
                s = e.selectivity
                if s <= 0:
                    continue
                disp_e = stream_out[:, e.u] * s + e.batch_var / s      # tuple stream of the edge
                clump_e = s + e.batch_var / s if s > 1 else 1.0
                rate_e = edge_flow[(e.u, v)] * throughput               # into the whole operator
                stream_num += rate_e * disp_e
                stream_den += rate_e
                if e.grouping == "shuffle":
                    share = cls.share if cls.width == 1 else np.where(cls.share > 0, inv_p[:, v:v + 1], 0.0)
                    d = (disp_e / pv)[:, None]
                    m = np.maximum(1.0, clump_e / pv)[:, None] if s > 1 else 1.0
                    r = rate_e[:, None] * share
                elif e.grouping == "key":
                    sh = e.table[P[:, v], : cls.width]
                    if cls.width == 1:  # uniform key groups: every instance gets 1/p
                        sh = inv_p[:, v:v + 1]
                    d = sh * disp_e[:, None] + 1.0 - sh
                    m = 1.0 - sh + sh * clump_e
                    r = rate_e[:, None] * sh
                elif e.grouping == "broadcast":
                    r = (rate_e / pv)[:, None] * np.ones_like(cls.share)
                    d, m = disp_e[:, None], clump_e
                else:  # forward: instance i of v is fed by instance i of u only
                    r = rate_e[:, None] * (classes[e.u].share if classes[e.u].width == cls.width else cls.share)
                    u_out = inst_out[e.u] if inst_out[e.u].shape[1] == cls.width else inst_out[e.u].mean(axis=1, keepdims=True)
                    d, m = u_out * s + e.batch_var / s, clump_e
                parts.append((r, d, m))
            if len(parts) == 1:
                # One stream: merging changes nothing (where it carries tuples).
                r, d, m = parts[0]
                live = r > 0
                ca2 = np.where(live, d, 1.0)
                clump = np.where(live, m, 1.0)
            elif parts:
                ca2, clump = _superpose(parts)
            else:
                ca2, clump = np.ones_like(cls.share), np.ones_like(cls.share)
            stream_in = np.where(stream_den > 0, stream_num / np.where(stream_den > 0, stream_den, 1.0), 1.0)
            if v in pair_excess:
                on = (stream_den > 0)[:, None] & (cls.share > 0)
                ca2, clump = add_copy_pairs(ca2, clump, pair_excess[v], cls.share, on)
                stream_in = np.where(stream_den > 0, stream_in + pair_excess[v], stream_in)
        if has_capacity[v]:
            cs2 = compiled.scv[v] if cs2_rows is None else cs2_rows[:, v:v + 1]
            queued.append((v, rho, ca2, clump, cls.share * cls.count))
            if v in forward_from:
                inst_out[v] = rho**2 * cs2 + (1.0 - rho**2) * ca2
            # Whitt's departure approximation for the whole stream (flow-weighted utilization),
            # only where service makes the stream *more* variable. Smoothing by low-variability
            # service is ignored (conservative): it shrinks as instances are added, which would
            # make downstream latency rise with parallelism and break the planner's monotonicity.
            rho_op = (cls.share * cls.count * rho)[:, 0] if cls.width == 1 else (cls.share * cls.count * rho).sum(axis=1)
            cs2_op = cs2 if cs2_rows is None else cs2[:, 0]
            stream_out[:, v] = np.maximum(stream_in, rho_op**2 * cs2_op + (1.0 - rho_op**2) * stream_in)
        else:
            if v in forward_from:
                inst_out[v] = ca2
            stream_out[:, v] = stream_in

    # Per-operator sojourn moments from the per-class waits, all operators in one pass.
    blocks = []  # (columns, widths, rho, ca2, clump, weight): the shuffle-fed block, then the rest
    if sf.size and cap_sf.any():
        ca2_sf = stream_in_sf * inv_p[:, sf]
        clump_sf = np.ones((n, sf.size))
        for v in mix.sf_clumpy:
            c0, *terms = mix.shuffle_in[v][3]
            clump = c0
            for frac, c in terms:
                clump = clump + frac * np.maximum(1.0, c * inv_p[:, v])
            clump_sf[:, sf_pos[v]] = clump
        for v, extra in pair_excess.items():
            if v in sf_pos:
                clump_sf[:, sf_pos[v]] += extra * inv_p[:, v]
        for v in mix.sf_noflow:
            ca2_sf[:, sf_pos[v]] = 1.0
        if not all_live:
            ca2_sf = np.where(live_rows[:, None], ca2_sf, 1.0)
            clump_sf = np.where(live_rows[:, None], clump_sf, 1.0)
        k = np.flatnonzero(cap_sf)
        blocks.append((sf[k].tolist(), [1] * k.size, rho_sf[:, k], ca2_sf[:, k], clump_sf[:, k], weight_sf[:, k]))
    if queued:
        full = lambda x, w: x if x.shape[1] == w else np.broadcast_to(x, (n, w))
        widths = [q[1].shape[1] for q in queued]
        cat = lambda i: np.concatenate([full(q[i], w) for q, w in zip(queued, widths)], axis=1)
        blocks.append(([q[0] for q in queued], widths, cat(1), cat(2), cat(3), cat(4)))
    sojourn1, sojourn2, stacked, ops_source = _sojourn_moments(compiled, blocks, ES, cs2_rows, busy_ES)

    # 3. End to end: flow-weighted mixture over source->sink paths, by DP in topological order.
    hop = compiled.model.network_delay_ms / 1000.0
    timeout = compiled.model.buffer_timeout_ms / 1000.0
    tail_edges: list = [None] * V
    edges_source: list | Callable[[], list] = tail_edges
    if mix is None or n * V * V > _MATRIX_WORK * max(len(mix.u), 1):
        # Row by row in topological order: broadcast edges make the flow fractions depend on
        # the parallelism, and on large blocks its O(edges) work beats the matrices' O(V^2).
        acc1, acc2, det = _accumulate_rows(compiled, n, Pf, edge_flow, throughput, sojourn1, sojourn2,
                                           hop, timeout, tail_edges)
    else:
        acc1, acc2, det, edges_source = _accumulate_matrices(compiled, mix, n, Pf, edge_flow, throughput,
                                                             sojourn1, sojourn2, hop, timeout)
    sink_cols = list(compiled.sinks)
    sink_flow = processed[:, sink_cols]
    sink_total = sink_flow.sum(axis=1)
    safe = np.where(sink_total > 0, sink_total, 1.0)
    e1 = (sink_flow * acc1[:, sink_cols]).sum(axis=1) / safe
    e2 = (sink_flow * acc2[:, sink_cols]).sum(axis=1) / safe
    shift = (sink_flow * det[:, sink_cols]).sum(axis=1) / safe
    var = np.maximum(e2 - e1**2, 0.0)
    sink_w = sink_flow / safe[:, None]
    if len(sink_cols) == 1:
        sink_w = np.ones_like(sink_w)
    tail = _Tail(ops=ops_source, edges=edges_source,
                 sinks=[(v, sink_w[:, j]) for j, v in enumerate(sink_cols)], hop=hop,
                 mean=e1, var=var, shift=shift, valid=~saturated & np.isfinite(e1) & np.isfinite(var),
                 stacked=stacked)

    nan = np.nan
    return BatchPrediction(
        operators=compiled.names, parallelism=P, rate=R, max_rate=max_rate, throughput=throughput,
        saturated=saturated, bottleneck=bottleneck, utilization=mean_util, max_utilization=max_util,
        processed_rate=processed, arrival_rate=arrival, hot_share=hot_share,
        sojourn_ms=np.where(saturated[:, None], nan, sojourn1 * 1000.0),
        latency_mean_ms=np.where(saturated, nan, e1 * 1000.0),
        output_rate=sink_total, tail=tail,
    )


def _sojourn_moments(compiled: CompiledModel, blocks: list, ES: np.ndarray, cs2_rows: np.ndarray | None = None,
                     service: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray, tuple | None, list | Callable[[], list]]:
    """Every operator's sojourn mean and second moment (seconds, [n, V]) from its instance
    classes' waits, in one vectorized pass over ``blocks`` ((operator columns, class widths, rho,
    ca2, clump, weight), the per-class arrays of several operators side by side). Also the
    stacked arrays the tails gather from (``_Tail.stacked``) and a function building the
    per-operator distributions (``_OpDist``) on demand. With bounded buffers, ``ES`` is the
    effective (blocking-lengthened) service time that sets the queue waits, ``cs2_rows`` [n, V]
    its SCV for the waits, and ``service`` the plain service time a tuple spends being served
    (``_Blocking``)."""
    n, V = ES.shape
    sojourn1 = np.zeros((n, V))
    sojourn2 = np.zeros((n, V))
    dists: list[_OpDist | None] = [None] * V
    if not blocks:
        return sojourn1, sojourn2, None, dists
    cols = [v for b in blocks for v in b[0]]
    widths = [w for b in blocks for w in b[1]]
    starts = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
    rho_c, ca2_c, clump_c, weight_c = (np.concatenate([b[i] for b in blocks], axis=1) if len(blocks) > 1
                                       else blocks[0][i] for i in (2, 3, 4, 5))
    es_c = np.repeat(ES[:, cols], widths, axis=1)
    cs2_c = np.repeat(compiled.scv[cols], widths)
    if cs2_rows is None:
        wq, w2, wpos = _waiting_parts(rho_c, ca2_c, cs2_c, es_c, clump_c)
        svc_c = es_c
    else:
        wq, w2, wpos = _waiting_parts(rho_c, ca2_c, np.repeat(cs2_rows[:, cols], widths, axis=1), es_c, clump_c)
        svc_c = np.repeat(service[:, cols], widths, axis=1)
        ES = service
    t1 = wq + svc_c
    t2 = w2 + 2.0 * wq * svc_c + (1.0 + cs2_c) * svc_c**2
    sojourn1[:, cols] = np.add.reduceat(weight_c * t1, starts, axis=1)
    sojourn2[:, cols] = np.add.reduceat(weight_c * t2, starts, axis=1)
    stacked = (rho_c, wpos, clump_c, dict(zip(cols, starts.tolist())))

    def op_dists() -> list:
        # Raw per-class arrays (broadcast and clipped only when a tail is computed).
        for v, a, w in zip(cols, starts.tolist(), widths):
            dists[v] = _OpDist(weight_c[:, a:a + w], rho_c[:, a:a + w], wpos[:, a:a + w],
                               clump_c[:, a:a + w], ES[:, v], float(compiled.scv[v]))
        return dists

    return sojourn1, sojourn2, stacked, op_dists


def _accumulate_matrices(compiled: CompiledModel, mix: "_FlowMix", n: int, Pf: np.ndarray, edge_flow: dict,
                         throughput: np.ndarray, sojourn1: np.ndarray, sojourn2: np.ndarray, hop: float,
                         timeout: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, Callable[[], list]]:
    """``_accumulate_rows``' (acc1, acc2, det) for constant flow fractions (visit ratios that do
    not depend on the parallelism), plus a function building the tail's edge flows on demand.

    The DP acc1[v] = sum_e frac_e (acc1[u] + delay_e) + sojourn1[v] is linear, solved for all
    operators at once with (I - A)^-1 (A: the fractions; unit lower triangular in topological
    order): a few small matrix products instead of a dozen numpy calls per edge, which is what
    small blocks (the planner's) pay for. Same sums, another order. einsum, not BLAS:
    multi-threaded BLAS on these small products was 5x slower on a busy 2-core machine (threads
    waiting for each other)."""
    V = len(compiled.names)
    mm = lambda a, b: np.einsum("ij,jk->ik", a, b)
    delay_e = None
    if timeout > 0:
        f_e = mix.base[None, :] * throughput[:, None]  # [n, E] edge flows
        pu = Pf[:, mix.u]
        channels = np.where(mix.forward, pu, pu * Pf[:, mix.v])
        per_channel = np.where(f_e > 0, f_e / channels, 0.0)
        with np.errstate(divide="ignore"):
            fill = np.where(per_channel > 0, (compiled.model.buffer_records - 1) / per_channel, 0.0)
        delay_e = hop + np.minimum(timeout, fill) / 2.0
        mean_delay = mm(delay_e, mix.B)          # [n, V]: sum_e frac_e delay_e into v
        cross_in = lambda a: mm(2.0 * a[:, mix.u] * delay_e + delay_e**2, mix.B)
    else:
        mean_delay = np.broadcast_to(hop * mix.in_share, (n, V))
        cross_in = lambda a: 2.0 * hop * mm(a, mix.AT) + hop**2 * mix.in_share
    acc1 = mm(sojourn1 + mean_delay, mix.inv_T)    # mean latency accumulated up to leaving v
    det = mm(np.ascontiguousarray(mean_delay), mix.inv_T)  # deterministic part (network + buffer waits)
    m1 = mm(acc1, mix.AT) + mean_delay              # mean latency on arrival at v
    acc2 = mm(cross_in(acc1) + 2.0 * m1 * sojourn1 + sojourn2, mix.inv_T)  # second moment

    def edge_flows() -> list:
        tail_edges: list = [None] * V
        for v in range(V):
            if compiled.in_edges[v]:
                flows_v = [(e.u, edge_flow[(e.u, v)] * throughput,
                            delay_e[:, mix.index[(e.u, v)]] - hop if timeout > 0 else None)
                           for e in compiled.in_edges[v]]
                tail_edges[v] = (sum(f for _, f, _ in flows_v), flows_v)  # fractions taken when a tail is computed
        return tail_edges

    return acc1, acc2, det, edge_flows


def _accumulate_rows(compiled: CompiledModel, n: int, Pf: np.ndarray, edge_flow: dict, throughput: np.ndarray,
                     sojourn1: np.ndarray, sojourn2: np.ndarray, hop: float, timeout: float,
                     tail_edges: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The end-to-end DP in topological order, row by row (flow fractions per row: broadcast
    edges make the visit ratios depend on the parallelism). Returns (acc1, acc2, det) [n, V]:
    the mean and second moment of the latency accumulated up to leaving each operator and its
    deterministic part; fills ``tail_edges``."""
    V = len(compiled.names)
    acc1 = np.zeros((n, V))
    acc2 = np.zeros((n, V))
    det = np.zeros((n, V))
    for v in range(V):
        if not compiled.in_edges[v]:
            m1, m2, d = np.zeros(n), np.zeros(n), np.zeros(n)
        else:
            flows_v = []
            tot = m1 = m2 = d = 0.0
            for e in compiled.in_edges[v]:
                f = edge_flow[(e.u, v)] * throughput
                delay = hop  # a scalar unless output batching adds a per-row buffer wait
                if timeout > 0:
                    channels = Pf[:, e.u] * (1.0 if e.grouping == "forward" else Pf[:, v])
                    per_channel = np.where(f > 0, f / channels, 0.0)
                    with np.errstate(divide="ignore"):
                        fill = np.where(per_channel > 0,
                                        (compiled.model.buffer_records - 1) / per_channel, 0.0)
                    delay = hop + np.minimum(timeout, fill) / 2.0
                flows_v.append((e.u, f, delay - hop if timeout > 0 else None))
                a1 = acc1[:, e.u] + delay
                a2 = acc2[:, e.u] + 2.0 * acc1[:, e.u] * delay + delay**2
                tot = tot + f
                m1 = m1 + f * a1
                m2 = m2 + f * a2
                d = d + f * (det[:, e.u] + delay)
            safe = np.where(tot > 0, tot, 1.0)
            m1, m2, d = m1 / safe, m2 / safe, d / safe
            tail_edges[v] = (tot, flows_v)  # flow fractions taken when a tail is computed
        acc1[:, v] = m1 + sojourn1[:, v]
        acc2[:, v] = m2 + 2.0 * m1 * sojourn1[:, v] + sojourn2[:, v]
        det[:, v] = d
    return acc1, acc2, det


class _LatencyMap(Mapping):
    """``Prediction.latency_ms``: {"mean", "p95", "p99"} -> ms (None when saturated). p95/p99
    (a numerical inversion, ~10-20 ms for one row of a 50-operator DAG) are computed on first
    access, together; until then the batch row is kept. Copies and pickles as a plain dict."""

    __slots__ = ("_mean", "_batch", "_i", "_tails")

    def __init__(self, mean: float | None, batch: "BatchPrediction", i: int) -> None:
        self._mean, self._batch, self._i, self._tails = mean, batch, i, None

    def _get_tails(self) -> dict:
        if self._tails is None:
            t = self._batch.tails_ms(self._i)
            self._tails = {s: _clean(t[s]) for s in _QUANTILES}
            self._batch = None
        return self._tails

    def __getitem__(self, key: str) -> float | None:
        if key == "mean":
            return self._mean
        if key in _QUANTILES:
            return self._get_tails()[key]
        raise KeyError(key)

    def __iter__(self):
        return iter(("mean", *_QUANTILES))

    def __len__(self) -> int:
        return 1 + len(_QUANTILES)

    def __repr__(self) -> str:
        return repr(dict(self))

    def __reduce__(self):
        return (dict, (dict(self),))

    __hash__ = None


def _clean(x: float) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def prediction_from_batch(compiled: CompiledModel, batch: BatchPrediction, i: int = 0) -> Prediction:
    """Row ``i`` of a batch as a ``Prediction``."""
    names = compiled.names
    saturated = bool(batch.saturated[i])
    b = int(batch.bottleneck[i])
    bottleneck = names[b] if b >= 0 else None
    upstream = compiled.ancestors[b] if (saturated and b >= 0) else frozenset()
    operators = {}
    for j, name in enumerate(names):
        operators[name] = OperatorPrediction(
            parallelism=int(batch.parallelism[i, j]),
            arrival_rate=float(batch.arrival_rate[i, j]),
            utilization=float(batch.utilization[i, j]),
            max_utilization=float(batch.max_utilization[i, j]),
            processed_rate=float(batch.processed_rate[i, j]),
            sojourn_ms=_clean(batch.sojourn_ms[i, j]),
            backpressured=j in upstream,
            bottleneck=j == b,
            hot_share=float(batch.hot_share[i, j]),
        )
    return Prediction(
        rate=float(batch.rate[i]),
        throughput=float(batch.throughput[i]),
        max_rate=float(batch.max_rate[i]),
        bottleneck=bottleneck,
        saturated=saturated,
        config={name: int(batch.parallelism[i, j]) for j, name in enumerate(names)},
        latency_ms=_LatencyMap(_clean(batch.latency_mean_ms[i]), batch, i),
        operators=operators,
        output_rate=float(batch.output_rate[i]),
    )


def predict(model: JobModel | CompiledModel, config: Mapping[str, int] | None = None,
            rate: float = 0.0) -> Prediction:
    """Predict the job at input ``rate`` (tuples/s) with ``config`` overriding the model's
    parallelism (operators it does not name keep theirs)."""
    compiled = model if isinstance(model, CompiledModel) else compile_model(model)
    if not np.isfinite(rate) or rate < 0:
        raise ConfigError("the input rate must be a finite number >= 0", field="rate", value=rate)
    P = compiled.config_array([config or {}])
    return prediction_from_batch(compiled, predict_batch(compiled, P, float(rate)))
