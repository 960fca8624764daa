"""The model file (version 1): a job's operator DAG and per-operator performance profile.

YAML or JSON, same content::

    augury: 1
    job: wordcount
    network_delay_ms: 0.1            # optional, per hop
    buffer_tuples: 1000              # optional: bounded input buffers (blocking), per instance
    restart_base_s: 10               # optional restart model (modeler.restart)
    restore_mb_per_s: 50             # needed when an operator has state_mb > 0
    resources: {cores: 2}            # optional: the cores every instance shares (or
                                     # {taskmanagers: 1, cores_per_taskmanager: 2}; optional
                                     # cpu_overhead_per_instance: 0.03,
                                     # engine_cpu_ms_per_tuple: 0.002)
    operators:
      - {name: source, role: source, parallelism: 1, cpu_ms_per_tuple: 0.002}
      - {name: split, parallelism: 2, service_time_ms: 0.5, service_scv: 1.0,
         min_parallelism: 1, max_parallelism: 128}
      - {name: count, parallelism: 2, service_time_ms: 0.2, state_mb: 2000, cpu_share: 0.8}
    edges:
      - {from: source, to: split, grouping: shuffle, selectivity: 1.0}
      - {from: split, to: count, buffer_tuples: 200, grouping: key, selectivity: 7.0,
         keys: {distribution: zipf, exponent: 1.0, count: 10000}}

Units: times in ms, rates in tuples/s; the restart model's times in s and state in MB (MB/s
for the restore rate): ``state_mb`` is an operator's keyed state in total (split over its
instances), ``restart_base_s`` and ``restore_mb_per_s`` predict a reconfiguration's restart time
(``modeler.restart.restart_time_s``). All three are optional; without them the restart time is
the caller's default base (the testbed's ``restart_s``). Every problem found while loading raises a
``ModelError`` naming the file, the field (``operators[2].service_time_ms``) and the value.

``parse_model`` is pure (dict in, ``JobModel`` out); ``load_model`` reads the file and calls it.
``buffer_tuples`` (optional, job-wide or per edge; an edge's value wins) is the input buffer of
each instance of the edge's target, in tuples waiting (not counting the one in service): the
credits of credit-based flow control. When it is full the sending instance blocks after service
until a slot frees (``modeler.queueing``, "Bounded buffers"). Absent everywhere (the default),
buffers are unbounded: the model of every file without the key is unchanged.

``resources`` (optional) are the cores the job's instances share: ``cores`` in total, or
``taskmanagers`` x ``cores_per_taskmanager``. ``cpu_share`` (per operator, 0-1, default 1) is the
part of its service time that is CPU work; the rest (a sleep, an external call) is not slowed by
other instances. With resources, CPU work of instances that outnumber the cores is shared among
them (``modeler.queueing``, "Shared cores"); without them (the default) cores are unlimited and
the model of every file without the key is unchanged. ``cpu_ms_per_tuple`` (sources only, ms of
CPU per tuple the source generates or reads, optional) is a source's own CPU work, which engines
report as no busy time (Flink's ``datagen``): with resources it competes for the cores like the
operators' CPU work, and each source instance (one thread) generates at most 1 / (its stretched
cost) tuples/s; without resources it is ignored (unlimited cores, the model as before). A source
gives either ``cpu_ms_per_tuple`` or a ``service_time_ms`` (whose ``cpu_share`` part is its CPU
work), not both. ``resources.cpu_overhead_per_instance`` (optional, >= 0, default 0: the model
as before) is the CPU work per tuple that every instance computing beyond the cores adds, as a
fraction of each operator's CPU work: with N computing instances on K cores every operator's
CPU work per tuple is ``cpu_share x service_time_ms x (1 + cpu_overhead_per_instance x
max(0, N - K))`` (``modeler.queueing``, "Shared cores"; more threads than cores cost switches,
cache misses, more channels and timers, and the engine measured it: flink-sql's q8).
``resources.engine_cpu_ms_per_tuple`` (optional, >= 0, default 0) is the CPU (core-ms) the
engine spends per job input tuple outside every operator's busy time and every source's thread
(network stack, serialization into the exchanges, garbage collection): it loads the shared cores
and bounds the rate where all CPU work fills them, but no thread of its own bounds it
(``modeler.queueing``, "Shared cores"; flink-sql's q8: half the TaskManager's CPU beyond the
datagen threads was in no operator's busy time).

``require_profiles=False`` accepts a *topology file*: the same format without service times,
which calibration fills in.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import networkx as nx
import yaml

from modeler.errors import ConfigError, ModelError
from modeler.limits import (MAX_BUFFER_TUPLES, MAX_CPU_OVERHEAD_PER_INSTANCE, MAX_KEYS, MAX_MODEL_NUMBER,
                            MAX_OPERATORS, MAX_PARALLELISM)

MODEL_VERSION = 1
GROUPINGS = ("shuffle", "key", "broadcast", "forward")
ROLES = ("source", "operator")
KEY_DISTRIBUTIONS = ("uniform", "zipf")
SCALING_FORMS = ("linear", "contention", "table")

_TOP_KEYS = {
    "augury", "job", "network_delay_ms", "buffer_timeout_ms", "buffer_records", "buffer_tuples",
    "restart_base_s", "restore_mb_per_s", "resources", "operators", "edges", "calibration",
}
_OPERATOR_KEYS = {
    "name", "role", "parallelism", "service_time_ms", "service_scv", "min_parallelism",
    "max_parallelism", "rate_share", "arrival_scv", "scaling", "state_mb", "cpu_share",
    "cpu_ms_per_tuple",
}
_RESOURCES_KEYS = {"cores", "taskmanagers", "cores_per_taskmanager", "cpu_overhead_per_instance",
                   "engine_cpu_ms_per_tuple"}
_EDGE_KEYS = {"from", "to", "grouping", "selectivity", "keys", "buffer_tuples"}
_KEYS_KEYS = {"distribution", "exponent", "count", "weights"}
_SCALING_KEYS = {"form", "overhead", "parallelism", "factor"}


@dataclass(frozen=True)
class KeySpec:
    """How keys are distributed on a key-grouped edge.

    ``weights`` (relative weight per key, key ids 0..n-1) wins over ``distribution``;
    ``count=None`` with ``uniform`` means "many keys": every key group gets an equal share.
    """

    distribution: str = "uniform"
    """uniform | zipf."""
    exponent: float = 1.0
    """Zipf exponent s: weight of the key of rank k is k**-s."""
    count: int | None = None
    """Number of distinct keys; None = so many that key groups are evenly loaded."""
    weights: tuple[float, ...] | None = None
    """Explicit relative weight per key (overrides distribution)."""


@dataclass(frozen=True)
class ScalingSpec:
    """How one instance's service time changes with the operator's parallelism p.

    ``linear``: no change (perfect scaling). ``contention``: E[S](p) = E[S] * (1 + overhead*(p-1)).
    ``table``: E[S](p) = E[S] * factor interpolated over ``parallelism`` (clamped at the ends).
    """

    form: str = "linear"
    overhead: float = 0.0
    """Relative service-time growth per extra instance (``contention``)."""
    parallelism: tuple[int, ...] = ()
    factor: tuple[float, ...] = ()

    def factor_at(self, p: Any) -> Any:
        """Service-time multiplier at parallelism ``p`` (scalar or numpy array)."""
        import numpy as np

        p_arr = np.asarray(p, dtype=float)
        if self.form == "contention":
            out = 1.0 + self.overhead * (p_arr - 1.0)
        elif self.form == "table":
            out = np.interp(p_arr, np.asarray(self.parallelism, float), np.asarray(self.factor, float))
        else:
            out = np.ones_like(p_arr)
        return out if np.ndim(p) else float(out)


@dataclass(frozen=True)
class OperatorSpec:
    """One operator (vertex) of the job. Times in ms."""

    name: str
    role: str = "operator"
    """source | operator. Operators without out-edges are sinks."""
    parallelism: int = 1
    """Current number of parallel instances."""
    service_time_ms: float | None = None
    """Mean time one instance needs per tuple, ms. None for a source without capacity limit."""
    service_scv: float = 1.0
    """Squared coefficient of variation of the service time (1 = exponential)."""
    min_parallelism: int = 1
    max_parallelism: int = 128
    """Upper bound on parallelism; also the number of key groups (Flink's maxParallelism)."""
    rate_share: float | None = None
    """Sources only: fraction of the job's input rate entering here (default: equal split)."""
    arrival_scv: float = 1.0
    """Sources only: SCV of external inter-arrival times (1 = Poisson)."""
    scaling: ScalingSpec = field(default_factory=ScalingSpec)
    state_mb: float = 0.0
    """Keyed state the operator holds, MB, in total over its instances (each holds its key
    groups' part); what a restart restores (``modeler.restart``). 0 = stateless."""
    cpu_share: float = 1.0
    """Part of the service time that is CPU work, 0-1 (1 = all of it; 0 = a wait that uses no
    core, e.g. an external call). Only matters when the job's ``cores`` are given."""
    cpu_ms_per_tuple: float | None = None
    """Sources only: CPU work per tuple one source instance generates (or reads), ms of one core
    at full speed; None = none counted. Engines report a generating source's time as no busy
    time, yet it uses the cores the operators share: with the job's ``cores`` given it competes
    for them, and one instance (one thread) generates at most 1 / (this cost, stretched by
    sharing) tuples/s (``modeler.queueing``, "Shared cores"). Ignored without ``cores``."""

    @property
    def is_source(self) -> bool:
        return self.role == "source"


@dataclass(frozen=True)
class EdgeSpec:
    """A stream from one operator to another."""

    source: str
    target: str
    grouping: str = "shuffle"
    """shuffle (round-robin) | key (hash of key -> key group -> instance) | broadcast | forward."""
    selectivity: float = 1.0
    """Tuples emitted on this edge per tuple processed by the upstream operator."""
    keys: KeySpec | None = None
    buffer_tuples: int | None = None
    """Input buffer of each instance of ``target`` for this edge's tuples, in tuples waiting
    (credits; the one in service not counted); None = the job's ``buffer_tuples``."""


@dataclass(frozen=True)
class JobModel:
    """A validated model file."""

    job: str
    operators: tuple[OperatorSpec, ...]
    edges: tuple[EdgeSpec, ...]
    network_delay_ms: float = 0.0
    """Per-hop network / serialization delay, ms."""
    buffer_timeout_ms: float = 0.0
    """Output buffer flush timeout (Flink execution.buffer-timeout), ms; 0 = flush per record."""
    buffer_records: int = 1
    """Records that fill one output buffer (flush before the timeout when full)."""
    buffer_tuples: int | None = None
    """Input buffer of every operator instance, tuples waiting (credits of credit-based flow
    control; the tuple in service not counted), for edges that give none; None = unbounded
    (no blocking: the model before bounded buffers)."""
    calibration: Mapping[str, Any] | None = None
    """Free-form section written by calibration (diagnostics, fitted forms); kept as-is."""
    source_file: str | None = None
    restart_base_s: float | None = None
    """Fixed part of a reconfiguration's restart time, s (stop, redeploy, start); None = not
    given (``modeler.restart`` then uses the caller's default)."""
    restore_mb_per_s: float | None = None
    """Rate at which a restart restores state, MB/s (the job's aggregate: checkpoint storage ->
    task managers); required when an operator has ``state_mb`` > 0."""
    cores: float | None = None
    """Cores the job's instances share in total (``resources``); None = as many as there are
    instances (no instance ever waits for a core: the model before shared cores)."""
    cpu_overhead_per_instance: float = 0.0
    """Fraction of its CPU work per tuple that every operator adds per computing instance beyond
    ``cores`` (``resources.cpu_overhead_per_instance``, >= 0); 0 = none (the model before it).
    Only matters when ``cores`` is given."""
    engine_cpu_ms_per_tuple: float = 0.0
    """CPU (core-ms) the engine spends per job input tuple outside the operators' busy time and
    the sources' threads, on the shared cores (``resources.engine_cpu_ms_per_tuple``, >= 0); 0 =
    none (the model before it). Only matters when ``cores`` is given."""

    @property
    def state_mb(self) -> float:
        """The job's keyed state in total, MB."""
        return float(sum(op.state_mb for op in self.operators))

    # ------------------------------------------------------------------ lookups
    @property
    def operator_names(self) -> tuple[str, ...]:
        return tuple(op.name for op in self.operators)

    def operator(self, name: str) -> OperatorSpec:
        for op in self.operators:
            if op.name == name:
                return op
        raise ConfigError("unknown operator", file=self.source_file, field="operator", value=name)

    @property
    def sources(self) -> tuple[OperatorSpec, ...]:
        return tuple(op for op in self.operators if op.is_source)

    @property
    def config(self) -> dict[str, int]:
        """The parallelism in force: {operator: parallelism}."""
        return {op.name: op.parallelism for op in self.operators}

    def source_shares(self) -> dict[str, float]:
        """Fraction of the input rate entering at each source (sums to 1)."""
        sources = self.sources
        given = {s.name: s.rate_share for s in sources if s.rate_share is not None}
        rest = [s.name for s in sources if s.rate_share is None]
        remaining = max(0.0, 1.0 - sum(given.values()))
        shares = dict(given)
        for name in rest:
            shares[name] = remaining / len(rest)
        return shares

    def with_source_shares(self, shares: Mapping[str, float]) -> "JobModel":
        """A copy whose sources take ``shares`` (source -> fraction of the input rate, every
        source named, each >= 0, summing to 1) as their ``rate_share``: a multi-input job's max
        rate depends on its input mix. A one-source model is returned as it is. Raises
        ``ModelError`` naming ``rate_share`` and the shares otherwise."""
        sources = self.sources
        if len(sources) <= 1:
            return self
        values = [shares.get(s.name) for s in sources]
        if (any(v is None or not math.isfinite(v) or v < 0 for v in values)
                or abs(sum(values) - 1.0) > 1e-6):
            raise ModelError("a source mix needs every source's share (>= 0), summing to 1",
                             file=self.source_file, field="rate_share", value=dict(shares))
        return replace(self, operators=tuple(replace(op, rate_share=float(shares[op.name])) if op.is_source
                                             else op for op in self.operators))

    def resolve_config(self, overrides: Mapping[str, int] | None = None) -> dict[str, int]:
        """The model's parallelism with ``overrides`` applied, validated against the bounds."""
        config = self.config
        for name, p in (overrides or {}).items():
            if name not in config:
                raise ConfigError(
                    f"unknown operator (known: {', '.join(config)})",
                    file=self.source_file, field="config", value=name,
                )
            config[name] = p
        for op in self.operators:
            p = config[op.name]
            if isinstance(p, bool) or not isinstance(p, int) or p < 1:
                raise ConfigError("parallelism must be a positive integer",
                                  file=self.source_file, field=f"config.{op.name}", value=p)
            if not op.min_parallelism <= p <= op.max_parallelism:
                raise ConfigError(
                    f"parallelism outside [{op.min_parallelism}, {op.max_parallelism}]",
                    file=self.source_file, field=f"config.{op.name}", value=p,
                )
        for edge in self.edges:
            if edge.grouping == "forward" and config[edge.source] != config[edge.target]:
                raise ConfigError(
                    f"forward edge {edge.source}->{edge.target} needs equal parallelism "
                    f"({config[edge.source]} != {config[edge.target]})",
                    file=self.source_file, field=f"config.{edge.target}", value=config[edge.target],
                )
        return config

    def with_config(self, overrides: Mapping[str, int]) -> "JobModel":
        """A copy whose current parallelism is ``overrides`` applied to this one."""
        config = self.resolve_config(overrides)
        ops = tuple(replace(op, parallelism=config[op.name]) for op in self.operators)
        return replace(self, operators=ops)

    def edge_buffer(self, edge: EdgeSpec) -> int | None:
        """The input buffer (tuples) an edge's tuples meet at each target instance: the edge's
        own ``buffer_tuples``, else the job's; None = unbounded."""
        return edge.buffer_tuples if edge.buffer_tuples is not None else self.buffer_tuples

    def has_profiles(self) -> bool:
        return all(op.service_time_ms is not None for op in self.operators if not op.is_source)


# ---------------------------------------------------------------------- graph


def to_graph(model: JobModel) -> nx.DiGraph:
    """The operator DAG.

    Node attributes: ``spec`` (OperatorSpec), ``role``, ``parallelism``, ``service_time_ms``,
    ``service_scv``, ``min_parallelism``, ``max_parallelism``.
    Edge attributes: ``spec`` (EdgeSpec), ``grouping``, ``selectivity``, ``keys``.
    """
    graph = nx.DiGraph(job=model.job)
    for op in model.operators:
        graph.add_node(
            op.name, spec=op, role=op.role, parallelism=op.parallelism,
            service_time_ms=op.service_time_ms, service_scv=op.service_scv,
            min_parallelism=op.min_parallelism, max_parallelism=op.max_parallelism,
        )
    for edge in model.edges:
        graph.add_edge(edge.source, edge.target, spec=edge, grouping=edge.grouping,
                       selectivity=edge.selectivity, keys=edge.keys)
    return graph


def sinks(graph: nx.DiGraph) -> list[str]:
    """Operators without out-edges."""
    return [v for v in graph.nodes if graph.out_degree(v) == 0]


# -------------------------------------------------------------------- parsing


class _Ctx:
    """Carries the file name so every error names it."""

    def __init__(self, source: str | None) -> None:
        self.source = source

    def fail(self, message: str, field: str, value: Any = None) -> ModelError:
        return ModelError(message, file=self.source, field=field, value=value)

    def number(self, raw: Mapping[str, Any], key: str, where: str, default: Any, *,
               positive: bool = False, non_negative: bool = False, integer: bool = False,
               allow_none: bool = False, maximum: float = MAX_MODEL_NUMBER) -> Any:
        """``raw[key]`` checked: a number (an integer when ``integer``), finite, within its
        bounds and at most ``maximum`` (``modeler.limits``); ints are compared as ints, so a
        400-digit integer is an error, not an ``OverflowError``."""
        value = raw.get(key, default)
        name = f"{where}.{key}" if where else key
        if value is None:
            if allow_none:
                return None
            raise self.fail("is required", name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail("must be a number" + _text_number_hint(value), name, value)
        if integer and isinstance(value, float) and not value.is_integer():
            raise self.fail("must be an integer", name, value)
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail("must be finite", name, value)
        if positive and value <= 0:
            raise self.fail("must be > 0", name, value)
        if non_negative and value < 0:
            raise self.fail("must be >= 0", name, value)
        if value > maximum:
            shown = value if isinstance(value, float) or value < 10**18 else f"<{len(str(value))}-digit integer>"
            raise self.fail(f"must be <= {maximum:,.0f} (the documented limit)" if maximum >= 1
                            else f"must be <= {maximum:g}", name, shown)
        return int(value) if integer else float(value)

    def unknown_keys(self, raw: Mapping[str, Any], allowed: set[str], where: str) -> None:
        extra = sorted(set(raw) - allowed)
        if extra:
            raise self.fail(f"unknown key (allowed: {', '.join(sorted(allowed))})",
                            f"{where}.{extra[0]}" if where else extra[0], extra[0])


def _text_number_hint(value: Any) -> str:
    """Why a number-like text is text: YAML 1.1 (PyYAML) reads ``1e300`` (no ``.``) as a string."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return ""
        if "e" in value.lower() and "." not in value:
            return f", not text (YAML reads an exponent without a '.' as text: write {float(value):.1e})"
        return ", not text"
    return ""


def _parse_keys(ctx: _Ctx, raw: Any, where: str) -> KeySpec:
    if not isinstance(raw, Mapping):
        raise ctx.fail("must be a mapping like {distribution: zipf, exponent: 1.0, count: 1000}",
                       where, raw)
    ctx.unknown_keys(raw, _KEYS_KEYS, where)
    if "weights" in raw:
        weights = raw["weights"]
        if not isinstance(weights, list) or not weights:
            raise ctx.fail("must be a non-empty list of numbers", f"{where}.weights", weights)
        if len(weights) > MAX_KEYS:
            raise ctx.fail(f"at most {MAX_KEYS:,} weights (the documented limit)", f"{where}.weights",
                           f"{len(weights):,} weights")
        parsed = []
        for i, w in enumerate(weights):
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w <= MAX_MODEL_NUMBER:
                raise ctx.fail("must be a finite number >= 0", f"{where}.weights[{i}]", w)
            parsed.append(float(w))
        if sum(parsed) <= 0:
            raise ctx.fail("must not all be zero", f"{where}.weights", weights)
        return KeySpec(distribution="weights", weights=tuple(parsed), count=len(parsed))
    distribution = raw.get("distribution", "uniform")
    if distribution not in KEY_DISTRIBUTIONS:
        raise ctx.fail(f"unknown key distribution (known: {', '.join(KEY_DISTRIBUTIONS)}, or weights)",
                       f"{where}.distribution", distribution)
    exponent = ctx.number(raw, "exponent", where, 1.0, non_negative=True)
    count = ctx.number(raw, "count", where, None, positive=True, integer=True, allow_none=True,
                       maximum=MAX_KEYS)
    if distribution == "zipf" and count is None:
        raise ctx.fail("zipf needs a key count", f"{where}.count")
    return KeySpec(distribution=distribution, exponent=exponent, count=count)


def _parse_scaling(ctx: _Ctx, raw: Any, where: str) -> ScalingSpec:
    if not isinstance(raw, Mapping):
        raise ctx.fail("must be a mapping like {form: contention, overhead: 0.02}", where, raw)
    ctx.unknown_keys(raw, _SCALING_KEYS, where)
    form = raw.get("form", "linear")
    if form not in SCALING_FORMS:
        raise ctx.fail(f"unknown scaling form (known: {', '.join(SCALING_FORMS)})", f"{where}.form", form)
    if form == "contention":
        return ScalingSpec(form=form, overhead=ctx.number(raw, "overhead", where, None, non_negative=True))
    if form == "table":
        ps, fs = raw.get("parallelism"), raw.get("factor")
        if not isinstance(ps, list) or not isinstance(fs, list) or len(ps) != len(fs) or not ps:
            raise ctx.fail("needs equal-length, non-empty lists 'parallelism' and 'factor'", where, raw)
        if any(isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= MAX_PARALLELISM for p in ps) \
                or ps != sorted(set(ps)):
            raise ctx.fail("must be increasing positive integers", f"{where}.parallelism", ps)
        if any(isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= MAX_MODEL_NUMBER for f in fs):
            raise ctx.fail("must be finite numbers > 0", f"{where}.factor", fs)
        return ScalingSpec(form=form, parallelism=tuple(ps), factor=tuple(float(f) for f in fs))
    return ScalingSpec()


def _parse_operator(ctx: _Ctx, raw: Any, i: int, require_profiles: bool) -> OperatorSpec:
    where = f"operators[{i}]"
    if not isinstance(raw, Mapping):
        raise ctx.fail("must be a mapping with at least 'name'", where, raw)
    ctx.unknown_keys(raw, _OPERATOR_KEYS, where)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ctx.fail("must be a non-empty string", f"{where}.name", name)
    role = raw.get("role", "operator")
    if role not in ROLES:
        raise ctx.fail(f"unknown role (known: {', '.join(ROLES)})", f"{where}.role", role)
    min_p = ctx.number(raw, "min_parallelism", where, 1, positive=True, integer=True, maximum=MAX_PARALLELISM)
    max_p = ctx.number(raw, "max_parallelism", where, 128, positive=True, integer=True, maximum=MAX_PARALLELISM)
    if min_p > max_p:
        raise ctx.fail(f"min_parallelism {min_p} > max_parallelism {max_p}", f"{where}.min_parallelism", min_p)
    parallelism = ctx.number(raw, "parallelism", where, min_p, positive=True, integer=True,
                             maximum=MAX_PARALLELISM)
    if not min_p <= parallelism <= max_p:
        raise ctx.fail(f"parallelism outside [{min_p}, {max_p}]", f"{where}.parallelism", parallelism)
    service = ctx.number(raw, "service_time_ms", where, None, positive=True, allow_none=True)
    if service is None and role != "source" and require_profiles:
        raise ctx.fail("is required for a non-source operator", f"{where}.service_time_ms")
    scv = ctx.number(raw, "service_scv", where, 1.0, non_negative=True)
    share = ctx.number(raw, "rate_share", where, None, non_negative=True, allow_none=True)
    if share is not None and role != "source":
        raise ctx.fail("only sources have a rate_share", f"{where}.rate_share", share)
    if share is not None and share > 1:
        raise ctx.fail("must be within [0, 1]", f"{where}.rate_share", share)
    arrival_scv = ctx.number(raw, "arrival_scv", where, 1.0, non_negative=True)
    scaling = _parse_scaling(ctx, raw["scaling"], f"{where}.scaling") if "scaling" in raw else ScalingSpec()
    state = ctx.number(raw, "state_mb", where, 0.0, non_negative=True)
    cpu_share = ctx.number(raw, "cpu_share", where, 1.0, non_negative=True, maximum=1.0)
    source_cpu = ctx.number(raw, "cpu_ms_per_tuple", where, None, positive=True, allow_none=True)
    if source_cpu is not None and role != "source":
        raise ctx.fail("only sources have a cpu_ms_per_tuple (an operator's CPU work is its "
                       "service_time_ms x cpu_share)", f"{where}.cpu_ms_per_tuple", source_cpu)
    if source_cpu is not None and service is not None:
        raise ctx.fail("a source with a service_time_ms already has its CPU work (service_time_ms x "
                       "cpu_share): give one or the other", f"{where}.cpu_ms_per_tuple", source_cpu)
    return OperatorSpec(
        name=name, role=role, parallelism=parallelism, service_time_ms=service, service_scv=scv,
        min_parallelism=min_p, max_parallelism=max_p, rate_share=share, arrival_scv=arrival_scv,
        scaling=scaling, state_mb=state, cpu_share=cpu_share, cpu_ms_per_tuple=source_cpu,
    )


def _parse_resources(ctx: _Ctx, raw: Any) -> tuple[float, float, float]:
    """``resources`` -> (total cores: ``cores``, or ``taskmanagers`` x ``cores_per_taskmanager``;
    ``cpu_overhead_per_instance``, default 0; ``engine_cpu_ms_per_tuple``, default 0)."""
    if not isinstance(raw, Mapping):
        raise ctx.fail("must be a mapping like {cores: 2} or {taskmanagers: 1, cores_per_taskmanager: 2}",
                       "resources", raw)
    ctx.unknown_keys(raw, _RESOURCES_KEYS, "resources")
    overhead = ctx.number(raw, "cpu_overhead_per_instance", "resources", 0.0, non_negative=True,
                          maximum=MAX_CPU_OVERHEAD_PER_INSTANCE)
    engine = ctx.number(raw, "engine_cpu_ms_per_tuple", "resources", 0.0, non_negative=True)
    return _parse_cores(ctx, raw), overhead, engine


def _parse_cores(ctx: _Ctx, raw: Mapping[str, Any]) -> float:
    per_tm = {"taskmanagers", "cores_per_taskmanager"} & set(raw)
    if "cores" in raw:
        if per_tm:
            raise ctx.fail("give either cores or taskmanagers x cores_per_taskmanager, not both",
                           f"resources.{sorted(per_tm)[0]}", raw[sorted(per_tm)[0]])
        return ctx.number(raw, "cores", "resources", None, positive=True, maximum=MAX_PARALLELISM)
    if per_tm:
        tms = ctx.number(raw, "taskmanagers", "resources", None, positive=True, integer=True,
                         maximum=MAX_PARALLELISM)
        per = ctx.number(raw, "cores_per_taskmanager", "resources", None, positive=True,
                         maximum=MAX_PARALLELISM)
        if tms * per > MAX_PARALLELISM:
            raise ctx.fail(f"must be <= {MAX_PARALLELISM:,} cores in total (the documented limit)",
                           "resources.taskmanagers", tms)
        return float(tms * per)
    raise ctx.fail("needs cores, or taskmanagers and cores_per_taskmanager", "resources", raw)


def _parse_edge(ctx: _Ctx, raw: Any, i: int, names: set[str]) -> EdgeSpec:
    where = f"edges[{i}]"
    if not isinstance(raw, Mapping):
        raise ctx.fail("must be a mapping with 'from' and 'to'", where, raw)
    ctx.unknown_keys(raw, _EDGE_KEYS, where)
    ends = []
    for key in ("from", "to"):
        value = raw.get(key)
        if not isinstance(value, str):
            raise ctx.fail("must name an operator", f"{where}.{key}", value)
        if value not in names:
            raise ctx.fail("unknown operator", f"{where}.{key}", value)
        ends.append(value)
    grouping = raw.get("grouping", "shuffle")
    if grouping not in GROUPINGS:
        raise ctx.fail(f"unknown grouping (known: {', '.join(GROUPINGS)})", f"{where}.grouping", grouping)
    selectivity = ctx.number(raw, "selectivity", where, 1.0, non_negative=True)
    keys = None
    if "keys" in raw:
        if grouping != "key":
            raise ctx.fail("keys are only allowed on key-grouped edges", f"{where}.keys", raw["keys"])
        keys = _parse_keys(ctx, raw["keys"], f"{where}.keys")
    elif grouping == "key":
        keys = KeySpec()
    buffer = ctx.number(raw, "buffer_tuples", where, None, non_negative=True, integer=True, allow_none=True,
                        maximum=MAX_BUFFER_TUPLES)
    return EdgeSpec(source=ends[0], target=ends[1], grouping=grouping, selectivity=selectivity, keys=keys,
                    buffer_tuples=buffer)


def parse_model(data: Any, source: str | None = None, *, require_profiles: bool = True) -> JobModel:
    """Validate a decoded model file (a mapping) and return the ``JobModel``."""
    ctx = _Ctx(source)
    if not isinstance(data, Mapping):
        raise ctx.fail("the model file must be a mapping at top level", "(top level)", type(data).__name__)
    ctx.unknown_keys(data, _TOP_KEYS, "")
    version = data.get("augury")
    if isinstance(version, bool) or version != MODEL_VERSION:  # True == 1 in Python
        raise ctx.fail(f"unsupported model file version (expected {MODEL_VERSION})", "augury", version)
    job = data.get("job", "job")
    if not isinstance(job, str) or not job:
        raise ctx.fail("must be a non-empty string", "job", job)
    network = ctx.number(data, "network_delay_ms", "", 0.0, non_negative=True)
    buffer_timeout = ctx.number(data, "buffer_timeout_ms", "", 0.0, non_negative=True)
    buffer_records = ctx.number(data, "buffer_records", "", 1, positive=True, integer=True)
    buffer_tuples = ctx.number(data, "buffer_tuples", "", None, non_negative=True, integer=True, allow_none=True,
                               maximum=MAX_BUFFER_TUPLES)
    restart_base = ctx.number(data, "restart_base_s", "", None, non_negative=True, allow_none=True)
    restore_rate = ctx.number(data, "restore_mb_per_s", "", None, positive=True, allow_none=True)
    cores, cpu_overhead, engine_cpu = _parse_resources(ctx, data["resources"]) if "resources" in data \
        else (None, 0.0, 0.0)

    raw_ops = data.get("operators")
    if not isinstance(raw_ops, list) or not raw_ops:
        raise ctx.fail("must be a non-empty list", "operators", raw_ops)
    if len(raw_ops) > MAX_OPERATORS:
        raise ctx.fail(f"at most {MAX_OPERATORS:,} operators (the documented limit)", "operators",
                       f"{len(raw_ops):,} operators")
    operators = [_parse_operator(ctx, raw, i, require_profiles) for i, raw in enumerate(raw_ops)]
    names: set[str] = set()
    for i, op in enumerate(operators):
        if op.name in names:
            raise ctx.fail("duplicate operator name", f"operators[{i}].name", op.name)
        names.add(op.name)
    if not any(op.is_source for op in operators):
        raise ctx.fail("the job has no source (set role: source on at least one operator)", "operators[].role")

    raw_edges = data.get("edges", [])
    if not isinstance(raw_edges, list):
        raise ctx.fail("must be a list", "edges", raw_edges)
    edges = [_parse_edge(ctx, raw, i, names) for i, raw in enumerate(raw_edges)]
    seen: set[tuple[str, str]] = set()
    for i, edge in enumerate(edges):
        if (edge.source, edge.target) in seen:
            raise ctx.fail("duplicate edge", f"edges[{i}]", f"{edge.source}->{edge.target}")
        if edge.source == edge.target:
            raise ctx.fail("an edge from an operator to itself is a cycle", f"edges[{i}].to", edge.target)
        seen.add((edge.source, edge.target))

    by_name = {op.name: op for op in operators}
    for i, edge in enumerate(edges):
        if by_name[edge.target].is_source:
            raise ctx.fail("a source cannot have incoming edges", f"edges[{i}].to", edge.target)
        if edge.grouping == "forward":
            pu, pv = by_name[edge.source].parallelism, by_name[edge.target].parallelism
            if pu != pv:
                raise ctx.fail(f"forward edge needs equal parallelism on both ends ({pu} != {pv})",
                               f"edges[{i}].grouping", "forward")
    stateful = [i for i, op in enumerate(operators) if op.state_mb > 0]
    if stateful and restore_rate is None and require_profiles:
        i = stateful[0]
        raise ctx.fail(f"an operator holds state (operators[{i}].state_mb = {operators[i].state_mb:g}): "
                       "the restore rate (MB/s) is required to predict restart time",
                       "restore_mb_per_s")
    shares = [op.rate_share for op in operators if op.is_source and op.rate_share is not None]
    n_sources = sum(op.is_source for op in operators)
    if shares and (sum(shares) > 1 + 1e-9 or (len(shares) == n_sources and abs(sum(shares) - 1) > 1e-6)):
        raise ctx.fail("source rate shares must sum to 1", "operators[].rate_share", sum(shares))

    model = JobModel(
        job=job, operators=tuple(operators), edges=tuple(edges), network_delay_ms=network,
        buffer_timeout_ms=buffer_timeout, buffer_records=buffer_records, buffer_tuples=buffer_tuples,
        calibration=data.get("calibration"), source_file=source,
        restart_base_s=restart_base, restore_mb_per_s=restore_rate, cores=cores,
        cpu_overhead_per_instance=cpu_overhead, engine_cpu_ms_per_tuple=engine_cpu,
    )
    graph = to_graph(model)
    if not nx.is_directed_acyclic_graph(graph):
        cycle = nx.find_cycle(graph)
        raise ctx.fail("the operator graph has a cycle", "edges", " -> ".join(u for u, _ in cycle) + f" -> {cycle[0][0]}")
    for op in operators:
        if not op.is_source and graph.in_degree(op.name) == 0:
            raise ctx.fail("a non-source operator has no incoming edge", "operators[].name", op.name)
    return model


def parse_model_text(text: str, source: str | None = None, *, require_profiles: bool = True) -> JobModel:
    """Parse YAML or JSON text (JSON is YAML, but its errors are reported as JSON's)."""
    from modeler.documents import parse_document

    fmt = "json" if text.lstrip().startswith("{") or (source or "").endswith(".json") else "yaml"
    data = parse_document(text, fmt, "model file", ModelError, source)  # deep nesting, huge integers: ModelError
    try:
        return parse_model(data, source, require_profiles=require_profiles)
    except RecursionError:
        raise ModelError("malformed model file: nested too deeply", file=source) from None


def load_model(path: str | Path, *, require_profiles: bool = True) -> JobModel:
    """Read and validate a model file (YAML or JSON)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ModelError(f"cannot read model file: {err.strerror}", file=str(path)) from None
    except UnicodeDecodeError:
        raise ModelError("model file is not UTF-8 text", file=str(path)) from None
    except ValueError as err:  # e.g. an embedded NUL in the name: no file can have it
        raise ModelError(f"cannot read model file: not a valid file name ({err})", file=str(path),
                         field="path", value=str(path)) from None
    return parse_model_text(text, str(path), require_profiles=require_profiles)


# ------------------------------------------------------------------- dumping


def model_to_dict(model: JobModel) -> dict[str, Any]:
    """The model file content (round-trips through ``parse_model``)."""
    ops = []
    for op in model.operators:
        raw: dict[str, Any] = {"name": op.name}
        if op.is_source:
            raw["role"] = "source"
        raw["parallelism"] = op.parallelism
        if op.service_time_ms is not None:
            raw["service_time_ms"] = op.service_time_ms
        if op.service_scv != 1.0:
            raw["service_scv"] = op.service_scv
        if op.min_parallelism != 1:
            raw["min_parallelism"] = op.min_parallelism
        if op.max_parallelism != 128:
            raw["max_parallelism"] = op.max_parallelism
        if op.rate_share is not None:
            raw["rate_share"] = op.rate_share
        if op.arrival_scv != 1.0:
            raw["arrival_scv"] = op.arrival_scv
        if op.scaling.form == "contention":
            raw["scaling"] = {"form": "contention", "overhead": op.scaling.overhead}
        elif op.scaling.form == "table":
            raw["scaling"] = {"form": "table", "parallelism": list(op.scaling.parallelism),
                              "factor": list(op.scaling.factor)}
        if op.state_mb:
            raw["state_mb"] = op.state_mb
        if op.cpu_share != 1.0:
            raw["cpu_share"] = op.cpu_share
        if op.cpu_ms_per_tuple is not None:
            raw["cpu_ms_per_tuple"] = op.cpu_ms_per_tuple
        ops.append(raw)
    edges = []
    for e in model.edges:
        raw = {"from": e.source, "to": e.target, "grouping": e.grouping, "selectivity": e.selectivity}
        if e.keys is not None and e.grouping == "key":
            if e.keys.weights is not None:
                raw["keys"] = {"weights": list(e.keys.weights)}
            elif e.keys.distribution != "uniform" or e.keys.count is not None:
                k: dict[str, Any] = {"distribution": e.keys.distribution}
                if e.keys.distribution == "zipf":
                    k["exponent"] = e.keys.exponent
                if e.keys.count is not None:
                    k["count"] = e.keys.count
                raw["keys"] = k
        if e.buffer_tuples is not None:
            raw["buffer_tuples"] = e.buffer_tuples
        edges.append(raw)
    out: dict[str, Any] = {"augury": MODEL_VERSION, "job": model.job}
    if model.network_delay_ms:
        out["network_delay_ms"] = model.network_delay_ms
    if model.buffer_timeout_ms:
        out["buffer_timeout_ms"] = model.buffer_timeout_ms
        out["buffer_records"] = model.buffer_records
    if model.buffer_tuples is not None:
        out["buffer_tuples"] = model.buffer_tuples
    if model.restart_base_s is not None:
        out["restart_base_s"] = model.restart_base_s
    if model.restore_mb_per_s is not None:
        out["restore_mb_per_s"] = model.restore_mb_per_s
    if model.cores is not None:
        out["resources"] = {"cores": model.cores}
        if model.cpu_overhead_per_instance:
            out["resources"]["cpu_overhead_per_instance"] = model.cpu_overhead_per_instance
        if model.engine_cpu_ms_per_tuple:
            out["resources"]["engine_cpu_ms_per_tuple"] = model.engine_cpu_ms_per_tuple
    out["operators"] = ops
    out["edges"] = edges
    if model.calibration is not None:
        out["calibration"] = dict(model.calibration)
    return out


def dump_model(model: JobModel, fmt: str = "yaml") -> str:
    """Model file text, YAML (default) or JSON."""
    data = model_to_dict(model)
    if fmt == "json":
        return json.dumps(data, indent=2)
    return yaml.safe_dump(data, sort_keys=False)
