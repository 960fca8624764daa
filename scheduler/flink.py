"""Live Apache Flink over REST: the metrics source (``scheduler.interfaces.MetricsSource``), a store
writer, and the live rescaling actuator (``scheduler.interfaces.Actuator``).

This is what ``augury run`` uses against a real cluster (``[metrics] source = "flink"``,
``[actuator] kind = "flink-rest"``); ``experiments/flink/`` only manages a local test cluster and its
jobs (and re-exports these names under the old module paths).

Rates are tuples/s, times ms, windows s. The job graph comes from ``/jobs/<id>`` (vertices,
parallelism, status) and ``/jobs/<id>/plan`` (edges and ship strategies), read by one pure function,
``job_graph``; ``JobGraph.topology`` turns it into a model file v1 topology (no service times)
whose operator names are the metric rows' (``operator_names``). Per subtask, one request
``/jobs/<id>/vertices/<vid>/subtasks/<i>/metrics?get=...`` reads:

* **cumulative counters** (mode ``counters``, the default): ``numRecordsIn``, ``numRecordsOut``,
  ``accumulateBusyTimeMs``, ``accumulateBackPressuredTimeMs``, ``accumulateIdleTimeMs`` and, for
  the test job's sink, ``<op>.e2eLatencySumMs`` / ``<op>.e2eLatencyCount`` (+ the ``e2eLatencyMs``
  histogram's p50/p95/p99). A window's rows are the differences between two samples, so they are
  exact, not Flink's 60 s moving averages. The REST layer serves metrics cached for up to
  ``metrics.fetcher.update-interval`` (1 s on the managed cluster, Flink's default 10 s), so the
  instant a sample describes is uncertain by that much: each subtask's differences are therefore
  rescaled to the nominal window by the subtask's own clock, busy + back-pressured + idle time
  (which Flink accounts over the same interval as the counters), so busy + bp + idle = window and
  every rate is the rate over the interval the counters really covered. A task whose busy time
  is NaN (Flink's answer for a source whose work runs outside the task's mailbox thread, e.g. the
  SQL ``datagen`` source) has no such clock: its counters are scaled by the host's interval
  between the two samples (uncertain by the fetch interval at each end), and it gets no busy /
  back-pressured / idle rows.
* **per-second gauges** (mode ``rates``): ``numRecordsInPerSecond``, ``numRecordsOutPerSecond``,
  ``busyTimeMsPerSecond``, ``backPressuredTimeMsPerSecond``, ``idleTimeMsPerSecond`` (the names
  and scaling of ``history.adapters.flink_rest``). Flink computes them as 60 s moving averages
  refreshed every 5 s. A sample at time t therefore describes [t - 60 s, t]: rates mode emits one
  60 s window per minute (``ts`` = t - 60 s, ``window_s`` = 60, value = rate x 60) and only once
  every subtask has run for ``60 + 5 s + fetch interval`` since its (re)start.

The TaskManagers' own CPU (``taskmanagers_cpu_s``: ``Status.JVM.CPU.Time`` of every
``/taskmanagers/<id>/metrics``, cumulative ns) is read on request, not per window: a
``cpu_sample`` waits for the REST cache to refresh so that its clock reading is when the value
was fetched. Two samples around some windows give the engine's mean CPU over them (calibration's
``engine_cpu``: the CPU a source uses that reports no busy time).

Windows are aligned to a grid of ``window_s`` (``ts`` = window start, UTC). After a restart or a
rescale (a vertex's parallelism or start time changed, or a record counter went backwards), the window
spanning it is dropped and the next one starts ``settle_s`` after every subtask runs again.
``pendingRecords`` (source lag) is read where a source exposes it (datagen does not).

Every request has a timeout and is retried; when the cluster or the job is gone (connection
refused, 404, job not RUNNING) ``read`` raises ``MetricsUnavailable`` naming the URL.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Mapping

from history.adapters.flink_rest import RATE_METRICS
from modeler.limits import MAX_PARALLELISM
from scheduler.interfaces import Actuation, ActuationFailed, Actuator, MetricsBatch, MetricsUnavailable

COUNTERS = {
    "numRecordsIn": "records_in",
    "numRecordsOut": "records_out",
    "accumulateBusyTimeMs": "busy_ms",
    "accumulateBackPressuredTimeMs": "backpressured_ms",
    "accumulateIdleTimeMs": "idle_ms",
}
TIME_COUNTERS = ("accumulateBusyTimeMs", "accumulateBackPressuredTimeMs", "accumulateIdleTimeMs")
LATENCY_SUM, LATENCY_COUNT, LATENCY_HIST = "e2eLatencySumMs", "e2eLatencyCount", "e2eLatencyMs"
JVM_CPU_TIME = "Status.JVM.CPU.Time"
"""A TaskManager's JVM process CPU time so far, ns (``/taskmanagers/<id>/metrics``; the
operating system's count for the whole process: task threads, a legacy source's own thread,
network, garbage collection, JIT compilation)."""
RATES_SPAN_S = 60.0
"""Flink's MeterView / TimerGauge span: per-second gauges average the last 60 s."""
RATES_REFRESH_S = 5.0


@dataclass(frozen=True)
class Vertex:
    id: str
    name: str
    """Flink's vertex name (a chain: 'Sink -> Discard: Writer')."""
    operator: str
    """augury's operator name (``operator_names``): the chain's first operator, without
    'Source: ' / 'Sink: ' and without the SQL planner's ``[<node id>]``, made unique in the job."""
    parallelism: int
    status: str
    start_time_ms: int
    max_parallelism: int | None = None
    """The vertex's max parallelism (key groups; 1 for the SQL planner's single-instance operators),
    None when the payload does not say."""


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    ship_strategy: str
    """Flink's ship strategy: REBALANCE, HASH, FORWARD, BROADCAST, RESCALE..."""
    field: str = ""
    """Where the plan payload gives this edge (``plan.nodes[2].inputs[0].ship_strategy``), so that an
    error about it names the field."""


@dataclass(frozen=True)
class JobGraph:
    job_id: str
    name: str
    state: str
    vertices: tuple[Vertex, ...]
    edges: tuple[Edge, ...]
    """Between operator names."""

    def config(self) -> dict[str, int]:
        return {v.operator: v.parallelism for v in self.vertices}

    def vertex(self, operator: str) -> Vertex:
        for v in self.vertices:
            if v.operator == operator:
                return v
        raise KeyError(operator)

    def downstream(self, operator: str) -> list[str]:
        return [e.target for e in self.edges if e.source == operator]

    def sources(self) -> list[str]:
        """Operators without an upstream edge."""
        targets = {e.target for e in self.edges}
        return [v.operator for v in self.vertices if v.operator not in targets]

    def to_networkx(self):
        """A DiGraph: node attribute ``parallelism``; edge attribute ``grouping`` (shuffle, key,
        broadcast, forward) and ``ship_strategy`` (Flink's name)."""
        import networkx as nx

        graph = nx.DiGraph()
        for v in self.vertices:
            graph.add_node(v.operator, parallelism=v.parallelism)
        for e in self.edges:
            graph.add_edge(e.source, e.target, ship_strategy=e.ship_strategy, grouping=grouping(e))
        return graph

    def topology(self) -> dict:
        """The job as a model file v1 *topology* (``modeler.modelfile``, no service times:
        ``parse_model(d, require_profiles=False)`` accepts it, calibration fills the profiles in).

        Operators are the vertices (``operator`` names, as the metric rows name them), in the
        payload's order: role ``source`` for a vertex without inputs, the current parallelism and
        the vertex's max parallelism (at most the model's ``MAX_PARALLELISM``). Edges carry the
        grouping of their ship strategy (``grouping``); several plan inputs between the same two
        vertices with one grouping are one edge. Raises ``MetricsUnavailable`` naming the plan field for an unknown ship strategy, two
        groupings between the same vertices, or a FORWARD edge between vertices of different
        parallelism (the model requires equal ones)."""
        targets = {e.target for e in self.edges}
        operators = []
        for v in self.vertices:
            op: dict = {"name": v.operator}
            if v.operator not in targets:
                op["role"] = "source"
            op["parallelism"] = v.parallelism
            if v.max_parallelism is not None:
                # Flink allows up to 32 768 key groups, the model file 10 000 (MAX_PARALLELISM): that
                # many key groups spread keys over any realistic parallelism evenly either way
                op["max_parallelism"] = min(v.max_parallelism, MAX_PARALLELISM)
            operators.append(op)
        parallelism = self.config()
        edges: dict[tuple[str, str], dict] = {}
        for e in self.edges:
            group = grouping(e)
            seen = edges.get((e.source, e.target))
            if seen is not None:
                if seen["grouping"] != group:
                    raise MetricsUnavailable(f"two groupings between {e.source} and {e.target} "
                                             f"({seen['grouping']}, {group}): the model has one edge per pair",
                                             field=e.field or "ship_strategy", value=e.ship_strategy)
                continue
            if group == "forward" and parallelism[e.source] != parallelism[e.target]:
                raise MetricsUnavailable(f"a FORWARD edge between different parallelisms "
                                         f"({e.source} {parallelism[e.source]}, {e.target} "
                                         f"{parallelism[e.target]}): not a forward edge of the model",
                                         field=e.field or "ship_strategy", value=e.ship_strategy)
            edges[(e.source, e.target)] = {"from": e.source, "to": e.target, "grouping": group}
        return {"augury": 1, "job": self.name, "operators": operators, "edges": list(edges.values())}


GROUPINGS = {"HASH": "key", "REBALANCE": "shuffle", "RESCALE": "shuffle", "SHUFFLE": "shuffle",
             "FORWARD": "forward", "BROADCAST": "broadcast", "GLOBAL": "shuffle"}
"""Flink ship strategy (``/jobs/<id>/plan``, the partitioner's name) -> the model's grouping.
RESCALE (round robin within a local group) and SHUFFLE (random) spread records evenly like
REBALANCE. GLOBAL sends everything to subtask 0; the SQL planner gives its target max parallelism
1 (measured on q5's final aggregate), where a shuffle over one instance is exact. A CUSTOM
partitioner (or any other) has no known distribution: ``grouping`` raises instead of guessing."""


def grouping(edge: Edge) -> str:
    """The model grouping of an edge's ship strategy; ``MetricsUnavailable`` (naming the plan field
    and the strategy) when Flink's strategy has no known grouping."""
    found = GROUPINGS.get(edge.ship_strategy.strip().upper())
    if found is None:
        raise MetricsUnavailable(f"unknown Flink ship strategy between {edge.source} and {edge.target} "
                                 f"(known: {', '.join(GROUPINGS)})",
                                 field=edge.field or "ship_strategy", value=edge.ship_strategy)
    return found


CHECKPOINTING_OFF = "Checkpointing has not been enabled"
"""Flink's 404 message on ``/jobs/<id>/checkpoints`` for a job without checkpointing."""
BYTES_PER_MB = float(1 << 20)
"""State sizes in MB count 2**20 bytes, as Flink's web UI does."""


def checkpoint_state_mb(payload, url: str | None = None) -> float | None:
    """``latest.completed.state_size`` (bytes: the full state, not the incremental
    ``checkpointed_size``) of a ``/jobs/<id>/checkpoints`` answer, in MB; None when no checkpoint
    has completed. A malformed answer raises ``MetricsUnavailable`` naming the field."""
    latest = payload.get("latest") if isinstance(payload, dict) else None
    if not isinstance(latest, dict):
        raise MetricsUnavailable("not a Flink checkpoint statistics answer (no 'latest')",
                                 field="latest", value=url)
    completed = latest.get("completed")
    if completed is None:
        return None
    size = completed.get("state_size") if isinstance(completed, dict) else None
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not math.isfinite(size) or size < 0:
        raise MetricsUnavailable("must be a number of bytes >= 0", field="latest.completed.state_size",
                                 value=size)
    return float(size) / BYTES_PER_MB


_SQL_NODE_ID = re.compile(r"\[\d+\]")
"""The SQL planner's exec-node id in an operator name (``Calc[7]``, ``q1_sink[5]: Writer``)."""
MAX_OPERATOR_CHARS = 200
"""Longest operator name (``history.schema.MAX_NAME_CHARS``: longer names are quarantined)."""


def operator_name(vertex_name: str) -> str:
    """The chain's first operator, without 'Source: ' / 'Sink: ' and without the SQL planner's
    ``[<id>]``: the planner numbers exec nodes with a counter of the JVM that compiles the query
    (the JobManager's, for a jar run), so the same query gets other ids on every submission
    (``GlobalWindowAggregate[11]`` then ``[23]``) and calibrated names would not survive a resubmit.
    Whitespace runs become one space. Not unique in a job: ``operator_names`` makes them so."""
    first = vertex_name.split(" -> ")[0].strip()
    for prefix in ("Source: ", "Sink: "):
        if first.startswith(prefix):
            first = first[len(prefix):]
    first = " ".join(_SQL_NODE_ID.sub("", first).split())
    return first or vertex_name.strip() or "operator"


def operator_names(vertex_names: list[str]) -> list[str]:
    """augury's operator names of a job's vertices (in the payload's order: the job graph's
    topological order, stable for a query): ``operator_name`` of each, cut to
    ``MAX_OPERATOR_CHARS``, and unique: the second ``Calc`` is ``Calc-2``, the third ``Calc-3``
    (a q8 job has two ``Calc`` and two ``GlobalWindowAggregate`` vertices)."""
    names: list[str] = []
    taken: set[str] = set()
    for vertex in vertex_names:
        base = operator_name(vertex)[:MAX_OPERATOR_CHARS]
        name, k = base, 1
        while name in taken:
            k += 1
            suffix = f"-{k}"
            name = base[:MAX_OPERATOR_CHARS - len(suffix)] + suffix
        taken.add(name)
        names.append(name)
    return names


def _field(payload, key: str, where: str, kind, url: str | None):
    """``payload[key]`` checked to be ``kind``; ``MetricsUnavailable`` naming ``where`` otherwise."""
    value = payload.get(key) if isinstance(payload, dict) else None
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if kind is int and ok:
        ok = value >= 1
    if not ok:
        what = {str: "a non-empty string", int: "an integer >= 1", list: "a list", dict: "an object"}[kind]
        raise MetricsUnavailable(f"not a Flink job payload{f' ({url})' if url else ''}: must be {what}",
                                 field=where, value=value)
    if kind is str and not value.strip():
        raise MetricsUnavailable("must be a non-empty string", field=where, value=value)
    return value


def taskmanager_ids(payload, url: str | None = None) -> list[str]:
    """The TaskManager ids of a ``/taskmanagers`` payload; ``MetricsUnavailable`` naming the field
    when it is not one (or lists none)."""
    managers = _field(payload, "taskmanagers", "taskmanagers", list, url)
    ids = [_field(tm, "id", f"taskmanagers[{i}].id", str, url) for i, tm in enumerate(managers)]
    if not ids:
        raise MetricsUnavailable("the cluster has no TaskManager", field="taskmanagers", value=managers)
    return ids


def jvm_cpu_time_ns(payload, url: str | None = None) -> int:
    """``Status.JVM.CPU.Time`` of a ``/taskmanagers/<id>/metrics?get=...`` payload
    (``[{"id": ..., "value": "<ns>"}]``); ``MetricsUnavailable`` naming it when absent or not a
    non-negative integer."""
    entries = payload if isinstance(payload, list) else []
    found = [e.get("value") for e in entries if isinstance(e, dict) and e.get("id") == JVM_CPU_TIME]
    value = found[0] if found else None
    try:
        ns = int(str(value))
    except ValueError:
        ns = -1
    if ns < 0:
        raise MetricsUnavailable(f"no JVM CPU time in the TaskManager's metrics{f' ({url})' if url else ''}",
                                 field=JVM_CPU_TIME, value=value)
    return ns


def job_graph(job: dict, plan: dict, url: str | None = None) -> JobGraph:
    """The job graph of the JSON answers of ``GET /jobs/<id>`` (``job``: vertices, their
    parallelism, max parallelism, status, start time; the job's name, state and ``maxParallelism``)
    and ``GET /jobs/<id>/plan`` (``plan``: ``{"plan": {"nodes": [{"id", "inputs": [{"id",
    "ship_strategy"}]}]}}``). Pure: no network. The one reader of both payloads (the live source and
    the topology use it). A missing or mistyped field raises ``MetricsUnavailable`` naming it
    (``vertices[2].parallelism``, ``plan.nodes[1].inputs[0].ship_strategy``) and its value; ``url``
    (optional) is named in the message."""
    job_id = _field(job, "jid", "jid", str, url)
    raw_vertices = _field(job, "vertices", "vertices", list, url)
    job_max = job.get("maxParallelism")
    job_max = job_max if isinstance(job_max, int) and not isinstance(job_max, bool) and job_max >= 1 else None
    ids, names = [], []
    for i, v in enumerate(raw_vertices):
        ids.append(_field(v, "id", f"vertices[{i}].id", str, url))
        names.append(_field(v, "name", f"vertices[{i}].name", str, url))
    if len(set(ids)) != len(ids):
        dup = next(x for x in ids if ids.count(x) > 1)
        raise MetricsUnavailable("duplicate vertex id in the job payload", field="vertices[].id", value=dup)
    operators = dict(zip(ids, operator_names(names)))
    vertices = []
    for i, v in enumerate(raw_vertices):
        parallelism = _field(v, "parallelism", f"vertices[{i}].parallelism", int, url)
        max_p = v.get("maxParallelism", job_max)
        if max_p is not None:
            max_p = _field({"maxParallelism": max_p}, "maxParallelism", f"vertices[{i}].maxParallelism", int, url)
        start = v.get("start-time", -1)
        if isinstance(start, bool) or not isinstance(start, int):
            raise MetricsUnavailable("must be an integer (ms since the epoch, -1 before the start)",
                                     field=f"vertices[{i}].start-time", value=start)
        vertices.append(Vertex(ids[i], names[i], operators[ids[i]], parallelism, str(v.get("status", "")),
                               start, max_p))
    inner = _field(plan, "plan", "plan", dict, url)
    nodes = _field(inner, "nodes", "plan.nodes", list, url)
    edges = []
    for n, node in enumerate(nodes):
        node_id = _field(node, "id", f"plan.nodes[{n}].id", str, url)
        if node_id not in operators:
            raise MetricsUnavailable("a plan node that is no vertex of the job", field=f"plan.nodes[{n}].id",
                                     value=node_id)
        inputs = node.get("inputs", [])
        if inputs is None:
            inputs = []
        if not isinstance(inputs, list):
            raise MetricsUnavailable("must be a list", field=f"plan.nodes[{n}].inputs", value=inputs)
        for k, inp in enumerate(inputs):
            where = f"plan.nodes[{n}].inputs[{k}]"
            source = _field(inp, "id", f"{where}.id", str, url)
            if source not in operators:
                raise MetricsUnavailable("an input that is no vertex of the job", field=f"{where}.id",
                                         value=source)
            strategy = _field(inp, "ship_strategy", f"{where}.ship_strategy", str, url)
            edges.append(Edge(operators[source], operators[node_id], strategy, f"{where}.ship_strategy"))
    return JobGraph(job_id, str(job.get("name") or job_id), str(job.get("state", "")),
                    tuple(vertices), tuple(edges))


def topology(job: dict, plan: dict, url: str | None = None) -> dict:
    """The model file v1 topology dict of a job's ``/jobs/<id>`` and ``/jobs/<id>/plan`` payloads
    (``job_graph`` then ``JobGraph.topology``); pure, ``MetricsUnavailable`` naming the field at fault."""
    return job_graph(job, plan, url).topology()


@dataclass(frozen=True)
class FlinkMetricsConfig:
    """How the live source polls Flink."""

    window_s: float = 10.0
    """Window length, s (counters mode); rates mode always uses 60 s windows."""
    mode: str = "counters"
    """``counters`` (exact window differences) or ``rates`` (Flink's 60 s per-second gauges)."""
    settle_s: float = 0.0
    """Extra wait after a (re)start before the first window starts, s."""
    fetch_interval_s: float = 1.0
    """The cluster's ``metrics.fetcher.update-interval``, s (how stale REST metrics can be)."""
    timeout_s: float = 10.0
    """Per HTTP request, s."""
    retries: int = 3
    """Attempts per request before the source reports itself unavailable."""
    retry_delay_s: float = 1.0
    """Wait between attempts, s."""
    max_wait_windows: int = 4
    """``read`` gives up (MetricsUnavailable) after this many windows without a complete one."""
    job_label: str | None = None
    """The ``job`` column of the rows; default Flink's job name."""


class FlinkMetricsSource:
    """``MetricsSource`` over a running Flink job's REST API.

    ``read(since_s)`` blocks until at least one complete window newer than ``since_s`` exists
    (sampling at window boundaries), then returns every buffered window newer than ``since_s``.
    ``as_of_s`` is the end of the newest window (epoch seconds, the wall clock of this host).
    """

    def __init__(self, rest_url: str, job_id: str, config: FlinkMetricsConfig = FlinkMetricsConfig(),
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep):
        if config.mode not in ("counters", "rates"):
            raise ValueError(f"mode must be counters or rates, not {config.mode!r}")
        self.rest_url = rest_url.rstrip("/")
        self.job_id = job_id
        self.config = config
        self._clock = clock
        self._sleep = sleep
        self._previous: dict | None = None
        self._windows: deque[tuple[float, float, tuple[tuple, ...], dict[str, int]]] = deque(maxlen=2000)
        self._last_rates_end: float | None = None
        self.dropped_windows = 0
        """Windows discarded because a restart or rescale happened inside them."""

    # ------------------------------------------------------------------ HTTP
    def _get(self, path: str, none_if_404_says: str | None = None):
        """The JSON answer of ``path``; ``None`` for a 404 whose body contains ``none_if_404_says``
        (Flink answers 404 for "nothing to report" too, e.g. checkpointing disabled)."""
        url = self.rest_url + path
        last: Exception | None = None
        for attempt in range(max(1, self.config.retries)):
            try:
                with urllib.request.urlopen(url, timeout=self.config.timeout_s) as resp:
                    return json.loads(resp.read().decode() or "null")
            except urllib.error.HTTPError as err:
                if err.code == 404:
                    if none_if_404_says is not None and \
                            none_if_404_says in err.read().decode(errors="replace"):
                        return None
                    raise MetricsUnavailable("the Flink job or vertex is gone (HTTP 404)",
                                             field="url", value=url) from None
                last = err
            except (urllib.error.URLError, OSError, ValueError) as err:
                last = err
            if attempt + 1 < self.config.retries:
                self._sleep(self.config.retry_delay_s)
        raise MetricsUnavailable(f"Flink REST did not answer after {self.config.retries} attempts "
                                 f"({last})", field="url", value=url)

    # ------------------------------------------------------------------ graph
    def graph(self) -> JobGraph:
        """The job graph now: vertices (operator, parallelism, status), edges, ship strategies
        (``job_graph`` of ``/jobs/<id>`` and ``/jobs/<id>/plan``)."""
        job = self._get(f"/jobs/{self.job_id}")
        plan = self._get(f"/jobs/{self.job_id}/plan")
        return job_graph(job, plan, f"{self.rest_url}/jobs/{self.job_id}")

    def checkpoint_state_mb(self) -> float | None:
        """Full state size of the job's latest completed checkpoint, MB (``checkpoint_state_mb``
        of ``GET /jobs/<id>/checkpoints``); None when checkpointing is off (Flink answers 404
        "Checkpointing has not been enabled.") or no checkpoint has completed yet. Read right
        before a rescale, it is the state that rescale restores (``modeler.restart``)."""
        payload = self._get(f"/jobs/{self.job_id}/checkpoints", none_if_404_says=CHECKPOINTING_OFF)
        return None if payload is None else checkpoint_state_mb(payload, self.rest_url)

    def _metric_ids(self, vertex: Vertex) -> list[str]:
        ids = self._get(f"/jobs/{self.job_id}/vertices/{vertex.id}/subtasks/0/metrics") or []
        return [m["id"] for m in ids]

    # ------------------------------------------------------------------ engine CPU
    def taskmanagers_cpu_s(self) -> float:
        """CPU seconds every TaskManager JVM of the cluster has used so far, summed
        (``JVM_CPU_TIME``), as the REST layer last fetched them."""
        ids = taskmanager_ids(self._get("/taskmanagers"), self.rest_url + "/taskmanagers")
        total = 0
        for tm in ids:
            path = f"/taskmanagers/{urllib.parse.quote(tm, safe='')}/metrics?get={JVM_CPU_TIME}"
            total += jvm_cpu_time_ns(self._get(path), self.rest_url + path)
        return total / 1e9

    def cpu_sample(self, poll_s: float = 0.1) -> tuple[float, float]:
        """(host clock s, ``taskmanagers_cpu_s``) at a moment the REST cache refreshed: the value
        is polled until it changes (at most ``fetch_interval_s`` + 1 s), so the clock reading is
        when the metric was fetched to within ``poll_s``, not up to a fetch interval stale (over a
        12 s span that staleness alone would be up to ~8 % of the CPU rate). Flink's metric
        fetcher refreshes every TaskManager at once. A value that never changes (an idle
        cluster) is returned with the time of the last poll."""
        first = self.taskmanagers_cpu_s()
        deadline = self._clock() + self.config.fetch_interval_s + 1.0
        while self._clock() < deadline:
            self._sleep(poll_s)
            now = self.taskmanagers_cpu_s()
            if now != first:
                return self._clock(), now
        return self._clock(), first

    # ------------------------------------------------------------------ sampling
    def sample(self) -> dict:
        """One snapshot: the graph and, per (operator, subtask), the metric values (floats)."""
        graph = self.graph()
        if graph.state != "RUNNING":
            raise MetricsUnavailable("the Flink job is not running", field="state", value=graph.state)
        values: dict[tuple[str, int], dict[str, float]] = {}
        extra: dict[str, list[str]] = {}
        running = all(v.status == "RUNNING" for v in graph.vertices)
        if running:
            for v in graph.vertices:
                ids = self._metric_ids(v)
                wanted = list(COUNTERS) + list(RATE_METRICS)
                wanted += [i for i in ids if i.endswith(".pendingRecords")]
                latency = [i for i in ids if i.endswith("." + LATENCY_SUM) or i.endswith("." + LATENCY_COUNT)
                           or any(i.endswith(f".{LATENCY_HIST}_{q}") for q in ("median", "p95", "p99"))]
                wanted += latency
                extra[v.operator] = latency
                query = urllib.parse.quote(",".join(wanted), safe=",")
                for i in range(v.parallelism):
                    got = self._get(f"/jobs/{self.job_id}/vertices/{v.id}/subtasks/{i}/metrics?get={query}")
                    row = {}
                    for m in got or []:
                        try:
                            row[m["id"]] = float(m["value"])
                        except (TypeError, ValueError):
                            continue
                    values[(v.operator, i)] = row
        return {"t": self._clock(), "graph": graph, "values": values, "running": running}

    @staticmethod
    def _fingerprint(graph: JobGraph) -> tuple:
        return tuple(sorted((v.operator, v.parallelism, v.start_time_ms) for v in graph.vertices))

    def _window_rows(self, prev: dict, cur: dict, ts: float, window_s: float) -> tuple[tuple, ...] | None:
        graph: JobGraph = cur["graph"]
        label = self.config.job_label or graph.name
        stamp = datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()
        rows: list[tuple] = []
        sources = set(graph.sources())
        deltas: dict[tuple[str, int], dict[str, float]] = {}
        for v in graph.vertices:
            for i in range(v.parallelism):
                a, b = prev["values"].get((v.operator, i)), cur["values"].get((v.operator, i))
                if a is None or b is None:
                    return None
                if any(k not in a or k not in b for k in COUNTERS):
                    return None
                delta = {k: b[k] - a[k] for k in COUNTERS}
                if delta["numRecordsIn"] < 0 or delta["numRecordsOut"] < 0:
                    return None  # counters reset: a restart inside the window
                if v.operator in sources and delta["numRecordsIn"] == 0:
                    # a FLIP-27 source task counts no records in: what it accepted is what it sent
                    delta["numRecordsIn"] = delta["numRecordsOut"]
                if all(math.isfinite(delta[k]) for k in TIME_COUNTERS):
                    # Flink derives accumulateBusyTimeMs = elapsed - idle - back-pressured, where idle
                    # may or may not include the idle stretch in progress: a mostly idle subtask's busy
                    # time can step back by a few ms. Clamp at 0 (the sum stays the elapsed time).
                    for k in TIME_COUNTERS:
                        delta[k] = max(0.0, delta[k])
                deltas[(v.operator, i)] = delta
        # A task whose work runs outside its mailbox thread (the SQL datagen source, a legacy source
        # function) reports busy time NaN: it has no clock of its own, so its counters are scaled by
        # the host's interval between the two samples. That is off by up to the REST fetch interval
        # at each end (the REST cache is not refreshed for every vertex at once: another subtask's
        # clock was no better, measured 10 500 against 20 000 rows/s once); over two 5 s windows a
        # 20 000 rows/s datagen source read 19 700 - 20 000 (q1, q2, q5), 30 000 (q8). Its time
        # metrics are left out (a NaN row would only be quarantined).
        clockless_ms = (cur["t"] - prev["t"]) * 1000.0
        for v in graph.vertices:
            down = graph.downstream(v.operator)
            target = down[0] if len(down) == 1 else None
            for i in range(v.parallelism):
                delta = deltas[(v.operator, i)]
                a, b = prev["values"][(v.operator, i)], cur["values"][(v.operator, i)]
                timed = all(math.isfinite(delta[k]) for k in TIME_COUNTERS)
                covered_ms = sum(delta[k] for k in TIME_COUNTERS) if timed else clockless_ms
                if covered_ms <= 0:
                    return None
                scale = window_s * 1000.0 / covered_ms
                for key, metric in COUNTERS.items():
                    if not timed and key in TIME_COUNTERS:
                        continue
                    value = delta[key] * scale
                    rows.append((stamp, window_s, label, v.operator, i, metric, value,
                                 target if metric == "records_out" else None))
                rows.append((stamp, window_s, label, v.operator, i, "parallelism",
                             float(v.parallelism), None))
                rows.extend(self._latency_rows(a, b, stamp, window_s, label, v.operator, i))
                lag = [val for k, val in b.items() if k.endswith(".pendingRecords")]
                if lag:
                    rows.append((stamp, window_s, label, v.operator, i, "source_lag", sum(lag), None))
        return tuple(rows)

    @staticmethod
    def _latency_rows(a, b, stamp, window_s, label, operator, i):
        sums = [k for k in b if k.endswith("." + LATENCY_SUM)]
        out = []
        for key in sums:
            prefix = key[: -len(LATENCY_SUM)]
            count_key = prefix + LATENCY_COUNT
            if key not in a or count_key not in a or count_key not in b:
                continue
            n = b[count_key] - a[count_key]
            if n <= 0:
                continue
            out.append((stamp, window_s, label, operator, i, "latency_ms_mean",
                        (b[key] - a[key]) / n, None))
            for q, metric in (("median", "latency_ms_p50"), ("p95", "latency_ms_p95"),
                              ("p99", "latency_ms_p99")):
                value = b.get(f"{prefix}{LATENCY_HIST}_{q}")
                if value is not None and math.isfinite(value):
                    out.append((stamp, window_s, label, operator, i, metric, value, None))
        return out

    def _rates_rows(self, cur: dict) -> tuple[tuple, ...] | None:
        graph: JobGraph = cur["graph"]
        label = self.config.job_label or graph.name
        span = RATES_SPAN_S
        ts = cur["t"] - span
        stamp = datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()
        rows = []
        for v in graph.vertices:
            down = graph.downstream(v.operator)
            target = down[0] if len(down) == 1 else None
            for i in range(v.parallelism):
                b = cur["values"].get((v.operator, i))
                if b is None or any(k not in b for k in RATE_METRICS):
                    return None
                for key, metric in RATE_METRICS.items():
                    if not math.isfinite(b[key]):
                        return None
                    rows.append((stamp, span, label, v.operator, i, metric, b[key] * span,
                                 target if metric == "records_out" else None))
                rows.append((stamp, span, label, v.operator, i, "parallelism", float(v.parallelism), None))
        return tuple(rows)

    # ------------------------------------------------------------------ MetricsSource
    def _next_boundary(self, now: float, window_s: float) -> float:
        return (math.floor(now / window_s) + 1) * window_s

    def _step(self) -> None:
        """Wait for the next window boundary, sample, and buffer the window if it is complete."""
        cfg = self.config
        window_s = RATES_SPAN_S if cfg.mode == "rates" else cfg.window_s
        now = self._clock()
        boundary = self._next_boundary(now, window_s)
        self._sleep(max(0.0, boundary - now))
        cur = self.sample()
        cur["boundary"] = boundary
        if not cur["running"]:
            self._previous = None
            return
        graph: JobGraph = cur["graph"]
        newest_start_s = max((v.start_time_ms for v in graph.vertices), default=0) / 1000.0
        if cfg.mode == "rates":
            ready = cur["t"] - newest_start_s >= RATES_SPAN_S + RATES_REFRESH_S + cfg.fetch_interval_s + cfg.settle_s
            if ready and (self._last_rates_end is None or boundary - self._last_rates_end >= RATES_SPAN_S):
                rows = self._rates_rows(cur)
                if rows is not None:
                    self._windows.append((boundary - window_s, boundary, rows, graph.config()))
                    self._last_rates_end = boundary
            return
        prev = self._previous
        settled = cur["t"] - newest_start_s >= cfg.settle_s
        if not settled:
            self._previous = None
            return
        self._previous = cur
        if prev is None:
            return
        if self._fingerprint(prev["graph"]) != self._fingerprint(graph) or \
                prev["boundary"] + window_s != boundary:
            self.dropped_windows += 1
            return
        rows = self._window_rows(prev, cur, prev["boundary"], window_s)
        if rows is None:
            self.dropped_windows += 1
            return
        self._windows.append((prev["boundary"], boundary, rows, graph.config()))

    def read(self, since_s: float | None = None) -> MetricsBatch:
        cfg = self.config
        window_s = RATES_SPAN_S if cfg.mode == "rates" else cfg.window_s

        def fresh():
            return [w for w in self._windows if since_s is None or w[1] > since_s]

        limit = cfg.max_wait_windows + (2 if cfg.mode == "counters" else 0)
        if cfg.mode == "rates":
            limit += int(math.ceil((RATES_SPAN_S + RATES_REFRESH_S + cfg.settle_s) / window_s)) + 1
        else:
            limit += int(math.ceil(cfg.settle_s / window_s))
        steps = 0
        while not fresh():
            if steps >= limit:
                raise MetricsUnavailable(f"no complete metric window after {steps} windows "
                                         "(the job keeps restarting or is not running)",
                                         field="job", value=self.job_id)
            self._step()
            steps += 1
        windows = fresh()
        rows = tuple(r for w in windows for r in w[2])
        return MetricsBatch(as_of_s=windows[-1][1], rows=rows, config=dict(windows[-1][3]),
                            window_s=window_s)

    def collect(self, duration_s: float) -> MetricsBatch:
        """Every complete window of the next ``duration_s`` seconds (at least one)."""
        end = self._clock() + duration_s
        since = self._windows[-1][1] if self._windows else self._clock()
        first = self.read(since)
        rows = list(first.rows)
        last = first
        while self._clock() + (RATES_SPAN_S if self.config.mode == "rates" else self.config.window_s) <= end:
            last = self.read(last.as_of_s)
            rows.extend(last.rows)
        return MetricsBatch(as_of_s=last.as_of_s, rows=tuple(rows), config=last.config,
                            window_s=last.window_s)


def find_job(rest_url: str, name: str, timeout_s: float = 10.0) -> str:
    """The id of the RUNNING job called ``name`` (``GET /jobs/overview``; the newest when several).

    Raises ``MetricsUnavailable`` naming the URL when the cluster does not answer or runs no such job.
    """
    url = rest_url.rstrip("/") + "/jobs/overview"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            jobs = json.loads(resp.read().decode() or "{}").get("jobs", [])
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise MetricsUnavailable(f"Flink REST did not answer ({err})", field="url", value=url) from None
    running = sorted((j for j in jobs if j.get("name") == name and j.get("state") == "RUNNING"),
                     key=lambda j: j.get("start-time", 0))
    if not running:
        seen = sorted({f"{j.get('name')} ({j.get('state')})" for j in jobs})
        raise MetricsUnavailable(f"no RUNNING Flink job with this name (jobs: {', '.join(seen) or 'none'})",
                                 field="job_name", value=name)
    return str(running[-1]["jid"])


def write_to_store(batch: MetricsBatch, store: str, source: str = "flink-rest"):
    """Validate a batch's rows and write them into the history store (``history.store``).

    Returns ``history.store.WriteResult``; rows failing validation are quarantined by the store.
    """
    from history.adapters._common import candidates
    from history.store import MetricStore
    from history.validate import validate

    records = [dict(zip(("ts", "window_s", "job", "operator", "instance", "metric", "value", "target"), r),
                    file=source, line=n + 1) for n, r in enumerate(batch.rows)]
    checked = validate(candidates(records))
    return MetricStore(store, create=True).write(checked.accepted, checked.quarantined)


# ------------------------------------------------------------------ live actuator
# Live rescaling of a running Flink job (adaptive scheduler), with the measured restart time.
#
# ``LiveFlinkActuator`` implements ``scheduler.interfaces.Actuator`` over operator names (the
# names ``FlinkMetricsSource.graph`` gives vertices). ``apply`` asks for the new parallelism and
# then waits until every vertex runs at the requested parallelism with all subtasks RUNNING;
# ``Actuation.restart_s`` is the time from the request to that moment (what the scheduler's lead
# time needs).
#
# The request itself is ``PUT /jobs/<id>/resource-requirements`` with, for every vertex,
# ``{"parallelism": {"lowerBound": 1, "upperBound": p}}`` (the adaptive scheduler runs each vertex
# at the upper bound when slots allow). Pass ``inner=`` an actuator that speaks operator names
# (e.g. the scheduler's Flink REST actuator) to let it issue the request; this class then only
# waits and measures.


@dataclass(frozen=True)
class LiveActuatorConfig:
    """Timeouts of a live rescale."""

    ready_timeout_s: float = 120.0
    """How long to wait for the new parallelism to be RUNNING, s."""
    poll_s: float = 0.25
    """Status poll interval, s."""
    request_timeout_s: float = 10.0
    """Per HTTP request, s."""
    lower_bound: int = 1
    """The ``lowerBound`` sent with every vertex."""


class LiveFlinkActuator:
    """Rescales a running job and waits for it; ``Actuator`` over operator names."""

    def __init__(self, rest_url: str, job_id: str, config: LiveActuatorConfig = LiveActuatorConfig(),
                 inner: Actuator | None = None, clock: Callable[[], float] = time.monotonic):
        self.rest_url = rest_url.rstrip("/")
        self.job_id = job_id
        self.config = config
        self.inner = inner
        self._clock = clock
        self._graph_source = FlinkMetricsSource(
            rest_url, job_id, FlinkMetricsConfig(timeout_s=config.request_timeout_s, retries=2))

    def graph(self) -> JobGraph:
        try:
            return self._graph_source.graph()
        except MetricsUnavailable as err:
            raise ActuationFailed(f"cannot read the job graph: {err}", field="job",
                                  value=self.job_id) from None

    def current(self) -> dict[str, int]:
        return self.graph().config()

    def _put(self, graph: JobGraph, config: Mapping[str, int]) -> None:
        body = {v.id: {"parallelism": {"lowerBound": min(self.config.lower_bound, int(config[v.operator])),
                                       "upperBound": int(config[v.operator])}}
                for v in graph.vertices}
        req = urllib.request.Request(f"{self.rest_url}/jobs/{self.job_id}/resource-requirements",
                                     data=json.dumps(body).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.config.request_timeout_s) as resp:
                resp.read()
        except urllib.error.HTTPError as err:
            raise ActuationFailed(f"Flink refused the resource requirements (HTTP {err.code}: "
                                  f"{err.read().decode(errors='replace')[:300]})",
                                  field="config", value=dict(config)) from None
        except (urllib.error.URLError, OSError) as err:
            raise ActuationFailed(f"Flink REST unreachable ({err})", field="url",
                                  value=self.rest_url) from None

    def apply(self, config: Mapping[str, int], reason: str = "") -> Actuation:
        graph = self.graph()
        known = graph.config()
        unknown = sorted(set(config) - set(known))
        if unknown:
            raise ActuationFailed("unknown operator", field="config", value=unknown[0])
        bad = {k: v for k, v in config.items() if int(v) < 1}
        if bad:
            raise ActuationFailed("parallelism must be >= 1", field="config", value=bad)
        target = {**known, **{k: int(v) for k, v in config.items()}}
        if target == known:
            return Actuation(applied=False, config=target, restart_s=0.0,
                             detail=f"already running {target}; {reason}".strip("; "))
        started = self._clock()
        if self.inner is not None:
            self.inner.apply(target, reason)
        else:
            self._put(graph, target)
        final = self.wait_running(target, started)
        restart_s = self._clock() - started
        return Actuation(applied=True, config=final.config(), restart_s=restart_s,
                         detail=f"rescaled {known} -> {target} in {restart_s:.1f} s; {reason}".strip("; "))

    def wait_running(self, target: Mapping[str, int], started: float | None = None) -> JobGraph:
        """Wait until every vertex runs at ``target`` with all subtasks RUNNING."""
        started = self._clock() if started is None else started
        deadline = started + self.config.ready_timeout_s
        last: JobGraph | None = None
        while self._clock() < deadline:
            try:
                last = self._graph_source.graph()
            except MetricsUnavailable:
                last = None
            if last is not None:
                if last.state in ("FAILED", "CANCELED", "FINISHED"):
                    raise ActuationFailed("the job ended while rescaling", field="state", value=last.state)
                if last.state == "RUNNING" and last.config() == dict(target) and \
                        all(v.status == "RUNNING" for v in last.vertices):
                    return last
            time.sleep(self.config.poll_s)
        seen = last.config() if last else None
        raise ActuationFailed(f"the new parallelism was not running after "
                              f"{self.config.ready_timeout_s:.0f} s (last seen {seen})",
                              field="config", value=dict(target))
