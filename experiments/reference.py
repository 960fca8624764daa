"""The reference configuration: the fewest instances that meet a run's targets, found without
augury's planner and confirmed on the testbed.

A run states its **targets**: the input rate (tuples/s), a p99 latency SLO (ms, end to end at
the sinks) and a utilization ceiling for the hottest instance of every operator (0.7, the Flink
autoscaler's default target). The reference configuration for them is found in two stages:

1. **Oracle (exhaustive enumeration on the true model).** Every configuration within the
   operators' bounds ``[min_parallelism, max_parallelism]`` (sources keep their parallelism;
   operators joined by forward edges share one) is a candidate. The hottest instance's
   utilization of an operator depends only on that operator's parallelism (its arrival rate is
   fixed by the input rate below saturation; its hot share by its keys and parallelism; its
   service time by its own scaling), so the ceiling is checked per operator over its whole
   range, and a configuration meets it exactly when every operator does. Configurations that
   meet it are then enumerated in increasing total instance count, every one of a total
   evaluated (``modeler.queueing.predict_batch`` on the *true* model: the truth's p99); the
   first total with a configuration whose p99 meets the SLO is the oracle's. Nothing of
   ``scheduler`` is used (not the planner, not its targets or heuristics).
2. **Testbed confirmation.** The oracle's winner and every configuration with fewer instances
   that could meet the ceiling on the testbed are simulated at the rate (``measure``: a warm-up,
   then ``measure_s`` of windows): a configuration meets the targets when the median of its
   windows' sink p99 is within the SLO, its hottest instance's busy fraction over the
   measurement is within the ceiling plus ``util_tolerance`` (the measurement's noise) and the
   sources' backlog at the end is within ``backlog_slo_s`` of input. Cheaper configurations
   with an operator whose *true* hottest-instance utilization exceeds the ceiling by more than
   ``screen_margin`` are not simulated (the testbed runs the same service times and key
   distributions: their measured utilization cannot come within the tolerance), nor those whose
   true p99 exceeds the SLO by more than ``latency_screen``; how many there were is reported
   (``screened``). Candidates are simulated cheapest first; the first that
   meets the targets is the **reference**. When even the winner fails on the testbed, the
   search goes on upward (``escalate_per_total`` configurations per total, lowest true p99
   first, up to ``escalate_factor`` x the oracle's total) and says so (``escalated``).

Rates in tuples/s, latencies in ms, durations in simulated seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

import numpy as np

from modeler.errors import AuguryError
from modeler.modelfile import JobModel


class ReferenceError(AuguryError):
    """No configuration within the bounds meets the targets (or the search would be too large)."""


@dataclass(frozen=True)
class RunTargets:
    """What a run asks of a configuration."""

    rate: float
    """Input rate, tuples/s."""
    latency_slo_ms: float
    """Bound on the end-to-end p99 latency at the sinks, ms."""
    utilization_ceiling: float = 0.7
    """Highest busy fraction of the hottest instance of every operator."""


@dataclass(frozen=True)
class ConfirmSettings:
    """How references are confirmed on the testbed. Every field has a default."""

    window_s: float = 3.0
    """Metrics window, simulated s (the runs' window, so the p99 is measured alike)."""
    warmup_s: float = 9.0
    """Simulated s before measuring (queues fill)."""
    measure_s: float = 60.0
    """Simulated s measured."""
    util_tolerance: float = 0.01
    """Measured hottest-instance utilization may exceed the ceiling by this much: the noise of the
    busiest instance's busy fraction over ``measure_s`` (about 0.005 for an instance serving a few
    hundred tuples/s, the max over instances a little above)."""
    screen_margin: float = 0.0
    """Cheaper configurations whose true hottest utilization exceeds the ceiling by more than
    this are not simulated: with 0, no configuration above the ceiling by the truth can become
    the reference by a lucky measurement (the tolerance only keeps noise from rejecting one
    that is within it)."""
    latency_screen: float = 0.5
    """... nor those whose true p99 exceeds the SLO by more than this fraction (the model's p99
    is within ~15 % of the testbed's on the bundled examples: ``accuracy`` in RESULTS.md)."""
    max_simulations: int = 40
    """At most this many cheaper configurations are simulated (cheapest, lowest true p99 first);
    the rest are counted in ``unsimulated``."""
    backlog_slo_s: float = 1.0
    """The sources' backlog at the end of the measurement may hold this many seconds of input."""
    seed: int = 7
    """Testbed seed of the confirmation runs."""
    escalate_per_total: int = 3
    escalate_factor: float = 1.5
    max_evaluations: int = 1_000_000
    """Configurations the oracle may evaluate before giving up."""


@dataclass(frozen=True)
class Measurement:
    """One configuration simulated at the targets' rate."""

    config: Mapping[str, int]
    instances: int
    p99_ms: float
    """Median over the measurement's windows of the sinks' p99 (max over sinks), ms."""
    hottest_utilization: float
    """Busy fraction of the busiest instance over the measurement (any non-source operator)."""
    hottest_operator: str
    backlog_s: float
    """Sources' backlog at the end, in seconds of input."""
    meets: bool
    true_p99_ms: float = math.nan
    """The truth's p99 for the configuration (model on the true profile), ms."""
    true_hottest_utilization: float = math.nan


@dataclass(frozen=True)
class Reference:
    """The reference configuration for one set of targets."""

    targets: RunTargets
    config: Mapping[str, int]
    instances: int
    measured: Measurement
    oracle_config: Mapping[str, int]
    oracle_instances: int
    oracle_p99_ms: float
    utilization_only_instances: int
    """Fewest instances meeting the ceiling alone (latency ignored)."""
    cheaper_configs: int
    """Configurations within the bounds with fewer instances than the oracle's."""
    screened: int
    """Of those, not simulated: some operator's true hottest utilization is above ceiling +
    ``screen_margin`` or the true p99 above the SLO x (1 + ``latency_screen``)."""
    unsimulated: int = 0
    """Cheaper candidates past ``max_simulations`` (not simulated; should be 0)."""
    simulated: tuple[Measurement, ...] = field(default=(), repr=False)
    """Every configuration simulated, in order."""
    escalated: bool = False
    """The oracle's winner failed on the testbed; the reference has more instances."""

    def row(self) -> dict:
        """One row of the experiment's ``references`` table."""
        m = self.measured
        return {"rate": self.targets.rate, "latency_slo_ms": self.targets.latency_slo_ms,
                "utilization_ceiling": self.targets.utilization_ceiling,
                "reference_instances": self.instances, "reference_config": fmt_config(self.config),
                "measured_p99_ms": m.p99_ms, "measured_hottest_utilization": m.hottest_utilization,
                "measured_backlog_s": m.backlog_s,
                "oracle_instances": self.oracle_instances, "oracle_config": fmt_config(self.oracle_config),
                "oracle_p99_ms": self.oracle_p99_ms, "utilization_only_instances": self.utilization_only_instances,
                "latency_bound": self.oracle_instances > self.utilization_only_instances,
                "cheaper_configs": self.cheaper_configs, "cheaper_screened": self.screened,
                "cheaper_unsimulated": self.unsimulated, "simulated": len(self.simulated),
                "escalated": self.escalated}


def sizing_margin(truth: JobModel, rate: float, ceiling: float) -> float:
    """The smallest relative change of the input rate, up or down, that changes how many instances
    some operator needs for its hottest instance to stay at or below ``ceiling`` on the truth
    (offered utilization, every other operator at its deployed parallelism): how far ``rate`` is
    from a sizing boundary. A policy that sizes from measured rates or busy times cannot tell the
    two sides of a boundary apart when this is below its measurement noise. ``inf`` when no
    operator's size can change (every bound reached); operators that cannot meet the ceiling
    within their bounds are left out."""
    space = _Space(truth)
    best = math.inf
    for u in space.utilization(1.0):
        ok = np.flatnonzero(u * rate <= ceiling + 1e-12)
        if not len(ok):
            continue
        k = int(ok[0])
        if u[k] > 0 and k + 1 < len(u):  # rate up until this parallelism is no longer enough
            best = min(best, ceiling / (u[k] * rate) - 1.0)
        if k > 0 and u[k - 1] > 0:  # rate down until one instance fewer is enough
            best = min(best, 1.0 - ceiling / (u[k - 1] * rate))
    return float(best)


def fmt_config(config: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


# ------------------------------------------------------------------ the oracle


class _Space:
    """The search space of one model: groups of operators sharing a parallelism (forward edges),
    their bounds, and the per-group true hottest utilization over each group's whole range."""

    def __init__(self, truth: JobModel) -> None:
        from modeler.queueing import compile_model

        self.truth = truth
        self.compiled = compile_model(truth)
        names = list(self.compiled.names)
        self.names = names
        ops = {op.name: op for op in truth.operators}
        parent = {n: n for n in names}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x
        for e in truth.edges:
            if e.grouping == "forward":
                parent[find(e.target)] = find(e.source)
        groups: dict[str, list[str]] = {}
        for n in names:
            if not ops[n].is_source:
                groups.setdefault(find(n), []).append(n)
        self.groups = list(groups.values())
        self.cols = [[names.index(n) for n in g] for g in self.groups]
        self.size = np.array([len(g) for g in self.groups])
        self.lo = np.array([max(ops[n].min_parallelism for n in g) for g in self.groups])
        self.hi = np.array([min(ops[n].max_parallelism for n in g) for g in self.groups])
        if any(self.lo > self.hi):
            raise ReferenceError("operators joined by forward edges have disjoint parallelism bounds",
                                 file=truth.source_file, field="max_parallelism")
        self.base = np.array([truth.config[n] for n in names], dtype=np.int64)

    def array(self, choice: Sequence[int]) -> np.ndarray:
        row = self.base.copy()
        for cols, p in zip(self.cols, choice):
            row[cols] = p
        return row

    def config(self, choice: Sequence[int]) -> dict[str, int]:
        row = self.array(choice)
        return {n: int(row[i]) for i, n in enumerate(self.names)}

    def instances(self, choice: Sequence[int]) -> int:
        return int(np.dot(self.size, np.asarray(choice)))

    def utilization(self, rate: float) -> list[np.ndarray]:
        """Per group, the true offered utilization of its hottest instance at each parallelism
        ``lo..hi`` (every other operator at its deployed parallelism; offered = at the input rate,
        not throttled: ``max_utilization x rate / throughput``)."""
        from modeler.queueing import predict_batch

        rows, where = [], []
        for g, (lo, hi) in enumerate(zip(self.lo, self.hi)):
            for p in range(int(lo), int(hi) + 1):
                row = self.base.copy()
                row[self.cols[g]] = p
                rows.append(row)
                where.append(g)
        batch = predict_batch(self.compiled, np.array(rows), float(rate))
        scale = np.where(batch.throughput > 0, batch.rate / np.maximum(batch.throughput, 1e-300), 1.0)
        out = [np.zeros(int(hi - lo + 1)) for lo, hi in zip(self.lo, self.hi)]
        pos = [0] * len(self.groups)
        for k, g in enumerate(where):
            out[g][pos[g]] = float(np.max(batch.max_utilization[k, self.cols[g]]) * scale[k])
            pos[g] += 1
        return out


def _compositions(values: list[np.ndarray], weights: np.ndarray, total: int) -> Iterator[tuple[int, ...]]:
    """Every choice of one value per group (sorted arrays) with sum(weight x value) == total."""
    k = len(values)
    mins = [int(v[0]) * int(w) for v, w in zip(values, weights)]
    maxs = [int(v[-1]) * int(w) for v, w in zip(values, weights)]
    rest_min = np.cumsum(mins[::-1])[::-1].tolist() + [0]
    rest_max = np.cumsum(maxs[::-1])[::-1].tolist() + [0]

    def rec(i: int, left: int, prefix: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if i == k:
            if left == 0:
                yield prefix
            return
        w = int(weights[i])
        for p in values[i]:
            used = int(p) * w
            rem = left - used
            if rem < rest_min[i + 1]:
                break
            if rem > rest_max[i + 1]:
                continue
            yield from rec(i + 1, rem, prefix + (int(p),))
    yield from rec(0, total, ())


def count_cheaper(lo: np.ndarray, hi: np.ndarray, weights: np.ndarray, below: int) -> int:
    """How many configurations within the bounds have fewer than ``below`` instances."""
    ways = np.zeros(max(below, 1), dtype=object)
    ways[0] = 1
    for a, b, w in zip(lo, hi, weights):
        new = np.zeros_like(ways)
        for p in range(int(a), int(b) + 1):
            shift = int(p) * int(w)
            if shift >= len(ways):
                break
            new[shift:] = new[shift:] + ways[:len(ways) - shift]
        ways = new
    return int(sum(ways[:below]))


@dataclass(frozen=True)
class Oracle:
    """What the exhaustive search found on the true model."""

    instances: int
    winners: tuple[tuple[tuple[int, ...], float], ...]
    """(group choice, true p99 ms) of every configuration of that total meeting the targets,
    lowest p99 first."""
    utilization_only: int
    feasible: tuple[np.ndarray, ...]
    """Per group, the parallelisms meeting the ceiling."""
    screen: tuple[np.ndarray, ...]
    """Per group, the parallelisms within ceiling + screen margin."""
    evaluated: int


def oracle(space: _Space, targets: RunTargets, settings: ConfirmSettings = ConfirmSettings()) -> Oracle:
    """The exhaustive search of stage 1 (module docstring)."""
    from modeler.queueing import predict_batch

    util = space.utilization(targets.rate)
    ranges = [np.arange(int(lo), int(hi) + 1) for lo, hi in zip(space.lo, space.hi)]
    feasible = tuple(r[u <= targets.utilization_ceiling + 1e-12] for r, u in zip(ranges, util))
    screen = tuple(r[u <= targets.utilization_ceiling + settings.screen_margin] for r, u in zip(ranges, util))
    for g, f in enumerate(feasible):
        if not len(f):
            raise ReferenceError(
                f"no parallelism within [{space.lo[g]}, {space.hi[g]}] keeps the hottest instance of "
                f"{'+'.join(space.groups[g])} at or below utilization {targets.utilization_ceiling:g} at "
                f"{targets.rate:.6g} tuples/s (lowest: {float(np.min(util[g])):.3g})",
                file=space.truth.source_file, field="rate", value=targets.rate)
    first = int(sum(int(f[0]) * int(w) for f, w in zip(feasible, space.size)))
    last = int(sum(int(f[-1]) * int(w) for f, w in zip(feasible, space.size)))
    evaluated = 0
    for total in range(first, last + 1):
        choices = list(_compositions(list(feasible), space.size, total))
        if not choices:
            continue
        evaluated += len(choices)
        if evaluated > settings.max_evaluations:
            raise ReferenceError(f"the exhaustive search passed {settings.max_evaluations:,} configurations "
                                 f"without meeting the p99 SLO of {targets.latency_slo_ms:g} ms",
                                 file=space.truth.source_file, field="latency_slo_ms", value=targets.latency_slo_ms)
        P = np.array([space.array(c) for c in choices])
        batch = predict_batch(space.compiled, P, float(targets.rate))
        p99 = np.asarray(batch.latency_p99_ms, dtype=float)
        ok = np.flatnonzero(np.isfinite(p99) & (p99 <= targets.latency_slo_ms) & ~batch.saturated)
        if len(ok):
            order = ok[np.argsort(p99[ok], kind="stable")]
            return Oracle(instances=total, winners=tuple((choices[i], float(p99[i])) for i in order),
                          utilization_only=first, feasible=feasible, screen=screen, evaluated=evaluated)
    raise ReferenceError(f"no configuration within the bounds meets the p99 SLO of {targets.latency_slo_ms:g} ms "
                         f"at {targets.rate:.6g} tuples/s", file=space.truth.source_file,
                         field="latency_slo_ms", value=targets.latency_slo_ms)


class TrueOracle:
    """Stage 1 alone (the true model, no testbed) for any rate: the fewest instances meeting a p99
    SLO and a utilization ceiling, cached per rate. For bounds over many windows (the
    ``preemptive`` experiment's hindsight lower bound), where simulating each is too costly."""

    def __init__(self, truth: JobModel, latency_slo_ms: float, ceiling: float = 0.7) -> None:
        self.space = _Space(truth)
        self.latency_slo_ms = float(latency_slo_ms)
        self.ceiling = float(ceiling)
        self._cache: dict[float, int] = {}

    def instances(self, rate: float) -> int:
        """Fewest non-source instances at ``rate`` tuples/s (``ReferenceError`` when none)."""
        key = float(rate)
        if key not in self._cache:
            found = oracle(self.space, RunTargets(rate=key, latency_slo_ms=self.latency_slo_ms,
                                                  utilization_ceiling=self.ceiling))
            self._cache[key] = int(found.instances)
        return self._cache[key]


def utilization_only_config(truth: JobModel, rate: float, ceiling: float = 0.7) -> dict[str, int]:
    """Every operator at the lowest parallelism that keeps its hottest instance within ``ceiling``
    (latency ignored): the cheapest configuration for the ceiling alone."""
    space = _Space(truth)
    util = space.utilization(rate)
    choice = []
    for g, (lo, u) in enumerate(zip(space.lo, util)):
        ok = np.flatnonzero(u <= ceiling + 1e-12)
        if not len(ok):
            raise ReferenceError(f"{'+'.join(space.groups[g])} cannot stay within utilization {ceiling:g} at "
                                 f"{rate:.6g} tuples/s", file=truth.source_file, field="rate", value=rate)
        choice.append(int(lo) + int(ok[0]))
    return space.config(choice)


# ------------------------------------------------------------------ the testbed


def measure(truth: JobModel, config: Mapping[str, int], targets: RunTargets,
            settings: ConfirmSettings = ConfirmSettings(), seed: int | None = None) -> Measurement:
    """Simulate ``config`` at the targets' rate and measure p99, hottest utilization and backlog."""
    import pandas as pd

    from experiments.testbed import Testbed, TestbedConfig
    from modeler.queueing import predict

    cfg = TestbedConfig(seed=settings.seed if seed is None else seed, window_s=settings.window_s)
    bed = Testbed(truth, float(targets.rate), cfg, parallelism=dict(config))
    bed.advance(settings.warmup_s + settings.measure_s)
    frame = bed.frame()
    f = frame[frame["ts"] >= frame["ts"].min() + pd.Timedelta(seconds=settings.warmup_s)]
    windows = f["ts"].nunique()
    span_ms = windows * settings.window_s * 1000.0
    lat = f[f["metric"] == "latency_ms_p99"].groupby("ts")["value"].max()
    p99 = float(lat.median()) if len(lat) else math.nan
    sources = {op.name for op in truth.sources}
    busy = f[(f["metric"] == "busy_ms") & ~f["operator"].isin(sources)]
    per_inst = busy.groupby(["operator", "instance"])["value"].sum() / span_ms if span_ms > 0 else busy["value"] * 0
    if len(per_inst):
        (hot_op, _), hot = per_inst.idxmax(), float(per_inst.max())
    else:
        hot_op, hot = "", math.nan
    lag = f[(f["metric"] == "source_lag") & (f["ts"] == f["ts"].max())]["value"].sum()
    backlog_s = float(lag) / max(float(targets.rate), 1e-9)
    meets = bool(math.isfinite(p99) and p99 <= targets.latency_slo_ms
                 and hot <= targets.utilization_ceiling + settings.util_tolerance
                 and backlog_s <= settings.backlog_slo_s)
    pred = predict(truth, dict(config), float(targets.rate))
    true_p99 = pred.latency_ms.get("p99")
    scale = pred.rate / pred.throughput if pred.throughput > 0 else 1.0
    true_hot = max((o.max_utilization * scale for n, o in pred.operators.items() if n not in sources), default=math.nan)
    return Measurement(config=dict(config), instances=_instances(truth, config), p99_ms=p99,
                       hottest_utilization=hot, hottest_operator=str(hot_op), backlog_s=backlog_s, meets=meets,
                       true_p99_ms=float(true_p99) if true_p99 is not None else math.nan,
                       true_hottest_utilization=float(true_hot))


def _instances(truth: JobModel, config: Mapping[str, int]) -> int:
    return int(sum(v for n, v in config.items() if not truth.operator(n).is_source))


def find_reference(truth: JobModel, targets: RunTargets, settings: ConfirmSettings = ConfirmSettings(),
                   progress=lambda message: None) -> Reference:
    """Stage 1 then stage 2 (module docstring)."""
    from modeler.queueing import predict_batch

    space = _Space(truth)
    found = oracle(space, targets, settings)
    winner, winner_p99 = found.winners[0]
    # cheaper candidates that could meet the ceiling on the testbed, cheapest first, then by true p99
    cheaper: list[tuple[int, ...]] = []
    first_screen = int(sum(int(s[0]) * int(w) for s, w in zip(found.screen, space.size))) if all(
        len(s) for s in found.screen) else found.instances
    for total in range(first_screen, found.instances):
        cheaper.extend(_compositions(list(found.screen), space.size, total))
    n_cheaper = count_cheaper(space.lo, space.hi, space.size, found.instances)
    order_p99 = {}
    if cheaper:
        batch = predict_batch(space.compiled, np.array([space.array(c) for c in cheaper]), float(targets.rate))
        p = np.asarray(batch.latency_p99_ms, dtype=float)
        order_p99 = {c: (float(v) if np.isfinite(v) else math.inf) for c, v in zip(cheaper, p)}
    limit_p99 = targets.latency_slo_ms * (1.0 + settings.latency_screen)
    cheaper = [c for c in cheaper if order_p99.get(c, math.inf) <= limit_p99]
    cheaper.sort(key=lambda c: (space.instances(c), order_p99.get(c, math.inf)))
    unsimulated = max(0, len(cheaper) - settings.max_simulations)
    cheaper = cheaper[:settings.max_simulations]
    simulated: list[Measurement] = []

    def trial(choice: tuple[int, ...]) -> Measurement:
        m = measure(truth, space.config(choice), targets, settings)
        simulated.append(m)
        progress(f"    reference {targets.rate:.5g}/s: {fmt_config(m.config)} -> p99 {m.p99_ms:.3g} ms, "
                 f"hottest {m.hottest_utilization:.3f}{' meets' if m.meets else ''}")
        return m

    def done(choice: tuple[int, ...], m: Measurement, escalated: bool = False) -> Reference:
        return Reference(targets=targets, config=space.config(choice), instances=space.instances(choice), measured=m,
                         oracle_config=space.config(winner), oracle_instances=found.instances,
                         oracle_p99_ms=winner_p99, utilization_only_instances=found.utilization_only,
                         cheaper_configs=n_cheaper, screened=n_cheaper - len(cheaper) - unsimulated,
                         unsimulated=unsimulated, simulated=tuple(simulated), escalated=escalated)
    for choice in cheaper:
        m = trial(choice)
        if m.meets:
            return done(choice, m)
    for choice, _ in found.winners[:settings.escalate_per_total]:
        m = trial(choice)
        if m.meets:
            return done(choice, m)
    limit = int(math.ceil(found.instances * settings.escalate_factor)) + 1
    for total in range(found.instances + 1, limit + 1):
        choices = list(_compositions(list(found.feasible), space.size, total))
        if not choices:
            continue
        batch = predict_batch(space.compiled, np.array([space.array(c) for c in choices]), float(targets.rate))
        p = np.asarray(batch.latency_p99_ms, dtype=float)
        p = np.where(np.isfinite(p), p, math.inf)
        for i in np.argsort(p, kind="stable")[:settings.escalate_per_total]:
            m = trial(choices[int(i)])
            if m.meets:
                return done(choices[int(i)], m, escalated=True)
    raise ReferenceError(f"no configuration up to {limit} instances met the targets on the testbed "
                         f"({len(simulated)} simulated)", file=truth.source_file, field="rate", value=targets.rate)


class References:
    """``find_reference`` cached per (rate, SLO, ceiling) for one true model."""

    def __init__(self, truth: JobModel, settings: ConfirmSettings = ConfirmSettings(), progress=lambda m: None) -> None:
        self.truth = truth
        self.settings = settings
        self.progress = progress
        self._cache: dict[tuple, Reference] = {}

    def get(self, targets: RunTargets) -> Reference:
        key = (round(float(targets.rate), 9), float(targets.latency_slo_ms), float(targets.utilization_ceiling))
        if key not in self._cache:
            self._cache[key] = find_reference(self.truth, targets, self.settings, self.progress)
        return self._cache[key]

    def all(self) -> list[Reference]:
        return list(self._cache.values())
