"""Nexmark-style Flink SQL jobs (``jobs/NexmarkSql.java``): the operators are Flink's own SQL runtime.

The tables ``bid``, ``auction`` and ``person`` are a reduced Nexmark schema over the built-in
``datagen`` connector (``rows-per-second`` = ``rate_per_s`` per table, ids uniform over ``keys``
values so aggregations and the join find matches); the results go to ``blackhole`` sinks. Event
time is the generation time (``CURRENT_TIMESTAMP``) with a 1 s watermark delay, so windows fire in
real time.

======  ==============================================  ============================================
query   SQL                                             vertices (chaining on, source_parallelism
                                                        != parallelism), edges
======  ==============================================  ============================================
q1      ``SELECT auction, bidder, 0.908 * price ...``   ``bid`` -REBALANCE-> ``Calc`` (Calc ->
                                                        WatermarkAssigner -> Calc -> q1_sink: Writer)
q2      ``... WHERE MOD(auction, 123) = 0``             ``bid`` -REBALANCE-> ``Calc`` (... q2_sink)
q5      bids per auction over HOP(10 s, slide 2 s),     ``bid`` -REBALANCE-> ``Calc`` (-> Watermark
        then the most bids per window                   -> LocalWindowAggregate) -HASH->
                                                        ``GlobalWindowAggregate`` (count per auction)
                                                        -GLOBAL-> ``GlobalWindowAggregate-2`` (max,
                                                        max parallelism 1, -> q5_sink)
q8      persons and sellers of the same TUMBLE(10 s)    ``person`` / ``auction`` -REBALANCE->
        window, joined on id = seller                   ``Calc`` / ``Calc-2`` -HASH->
                                                        ``GlobalWindowAggregate`` / ``-2`` -HASH->
                                                        ``WindowJoin`` (-> Calc -> q8_sink)
======  ==============================================  ============================================

Operator names are ``scheduler.flink.operator_names`` of the vertex names (the chain's first
operator, the SQL planner's ``[id]`` removed, repeats numbered).

Chaining: Flink's planner connects its operators by FORWARD edges, so with one parallelism and
chaining on a whole query chains into one or two vertices (q1: source, calc, watermark and sink
in one) and nothing can be measured or scaled per operator. The job therefore keeps chaining on
(what a production SQL job runs) but gives the datagen sources their own parallelism
(``scan.parallelism`` = ``source_parallelism``): when it differs from ``parallelism`` at
submission the planner puts a REBALANCE exchange after each source, which stays a REBALANCE when
either side is rescaled later (as a Kafka source sized by its partitions feeding a job sized by
its load). The keyed exchanges (HASH, GLOBAL) of q5 and q8 are vertex boundaries anyway. With
``source_parallelism == parallelism`` the sources chain into their first vertex instead.
``chaining=False`` (``pipeline.operator-chaining.enabled: false``) makes every SQL operator a
vertex (q5: 10 vertices, mostly FORWARD-connected): finer busy-time readings, far more threads.

Rates are rows/s, times ms.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from modeler.errors import ConfigError

ENTRY_CLASS = "augury.flink.jobs.NexmarkSql"
QUERIES = ("q1", "q2", "q5", "q8")
SOURCES = {"q1": ("bid",), "q2": ("bid",), "q5": ("bid",), "q8": ("person", "auction")}
"""The datagen tables each query reads (each generates ``rate_per_s`` rows/s)."""


@dataclass(frozen=True)
class NexmarkSqlSpec:
    """Arguments of ``NexmarkSql`` (rates in rows/s)."""

    query: str = "q1"
    """q1 (projection), q2 (filter), q5 (hot items: windowed count per auction, then max), q8
    (window join of persons and auction sellers)."""
    rate_per_s: int = 1000
    """``rows-per-second`` of every datagen table the query reads (total over the source's
    subtasks), rows/s; q8 reads two tables, so its job input is twice this (with
    ``person_rate_per_s`` unset)."""
    person_rate_per_s: int | None = None
    """``rows-per-second`` of the ``person`` table (q8's other input); None = ``rate_per_s``. Sets
    q8's input mix (Nexmark's generator: one person per three auctions)."""
    parallelism: int = 2
    """Parallelism of every SQL operator except the sources (and the planner's single-instance
    operators, q5's final aggregate)."""
    source_parallelism: int | None = 1
    """``scan.parallelism`` of the datagen sources; None = ``parallelism``. Different from
    ``parallelism`` gives the sources their own vertex behind a REBALANCE exchange."""
    max_parallelism: int = 128
    """Key groups (``pipeline.max-parallelism``)."""
    keys: int = 10_000
    """Distinct auction ids in bids, sellers in auctions and person ids (uniform)."""
    chaining: bool = True
    """Flink operator chaining; False makes every SQL operator its own vertex."""
    name: str = ""
    """Flink job name (the ``job`` column of the metric rows); default ``augury-nexmark-<query>``."""

    def __post_init__(self):
        if self.query not in QUERIES:
            raise ConfigError(f"unknown query (known: {', '.join(QUERIES)})", field="query", value=self.query)
        for field in ("rate_per_s", "parallelism", "max_parallelism", "keys"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError("must be an integer >= 1", field=field, value=value)
        pr = self.person_rate_per_s
        if pr is not None and (isinstance(pr, bool) or not isinstance(pr, int) or pr < 1):
            raise ConfigError("must be an integer >= 1 or None", field="person_rate_per_s", value=pr)
        sp = self.source_parallelism
        if sp is not None and (isinstance(sp, bool) or not isinstance(sp, int) or sp < 1):
            raise ConfigError("must be an integer >= 1 or None", field="source_parallelism", value=sp)
        if max(self.parallelism, sp or 1) > self.max_parallelism:
            raise ConfigError("parallelism above max_parallelism", field="parallelism",
                              value=max(self.parallelism, sp or 1))

    @property
    def job_name(self) -> str:
        return self.name or f"augury-nexmark-{self.query}"

    def args(self) -> list[str]:
        args = ["--query", self.query, "--rate", str(self.rate_per_s), "--parallelism",
                str(self.parallelism), "--max-parallelism", str(self.max_parallelism),
                "--keys", str(self.keys), "--chaining", "true" if self.chaining else "false",
                "--name", self.job_name]
        if self.source_parallelism is not None:
            args += ["--source-parallelism", str(self.source_parallelism)]
        if self.person_rate_per_s is not None:
            args += ["--person-rate", str(self.person_rate_per_s)]
        return args


def submit(cluster, spec: NexmarkSqlSpec, wait_running_s: float = 90.0) -> str:
    """Build the jobs jar (cached), upload it and run the query on a ``FlinkCluster``; return the
    job id once the job and every vertex are RUNNING. Raises ``FlinkClusterError`` when the job
    fails or is not running within ``wait_running_s``."""
    from experiments.flink.cluster import FlinkClusterError, build_job_jar
    from scheduler.flink import FlinkMetricsConfig, FlinkMetricsSource
    from scheduler.interfaces import MetricsUnavailable

    job_id = cluster.submit_jar(build_job_jar(cluster.home), ENTRY_CLASS, spec.args())
    source = FlinkMetricsSource(cluster.rest_url, job_id, FlinkMetricsConfig(retries=2, timeout_s=10))
    deadline = time.monotonic() + wait_running_s
    seen = None
    while time.monotonic() < deadline:
        try:
            graph = source.graph()
        except MetricsUnavailable:
            graph = None  # the job may not be registered yet
        if graph is not None:
            seen = graph.state
            if graph.state in ("FAILED", "CANCELED", "FINISHED"):
                raise FlinkClusterError("the SQL job ended right after submission", field="state",
                                        value=graph.state)
            if graph.state == "RUNNING" and graph.vertices and \
                    all(v.status == "RUNNING" for v in graph.vertices):
                return job_id
        time.sleep(0.5)
    raise FlinkClusterError(f"the SQL job was not running after {wait_running_s:.0f} s (last state {seen})",
                            field="job", value=job_id)
