"""augury's Flink test jobs (Java sources here, compiled against the wheel's lib jars).

``NexmarkSql.java`` (Flink SQL, Nexmark-style q1/q2/q5/q8) has its spec and submit helper in
``experiments/flink/sql.py``.

``SleepPipeline.java``: Source -(rebalance)-> Enrich -(hash on key)-> Aggregate -(rebalance)-> Sink.

Known per-operator cost (what the model should recover from metrics):

=========  ===================  =======================================================
operator   cost per record      capacity
=========  ===================  =======================================================
Source     ~0.1 ms CPU          rate-limited at ``rate_per_s`` (total over its subtasks)
Enrich     ``enrich_ms`` wait   p_enrich x 1000 / enrich_ms records/s (no CPU: parkNanos)
Aggregate  ``aggregate_ms`` +   p_aggregate x 1000 / aggregate_ms records/s for uniform keys
           keyed state update   (``keys`` uniform keys; the hottest instance bounds it)
Sink       ~0.05 ms CPU         records end-to-end latency (emit time -> sink)
=========  ===================  =======================================================

Measured on this 2-core box, the wait costs about 0.1-0.6 ms more than asked (parkNanos
overshoot, state access, serialization): busy time per record is the truth, the nominal wait a
lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

ENTRY_CLASS = "augury.flink.jobs.SleepPipeline"
OPERATORS = ("Source", "Enrich", "Aggregate", "Sink")


@dataclass(frozen=True)
class SleepPipelineSpec:
    """Arguments of ``SleepPipeline`` (rates in records/s, waits in ms)."""

    rate_per_s: float = 100.0
    """Source rate, records/s (total over the source's subtasks)."""
    enrich_ms: float = 5.0
    """Wait per record in Enrich, ms."""
    aggregate_ms: float = 5.0
    """Wait per record in Aggregate, ms."""
    keys: int = 1000
    """Distinct keys, uniform."""
    p_source: int = 1
    p_enrich: int = 1
    p_aggregate: int = 1
    p_sink: int = 1
    max_parallelism: int = 128
    """Key groups (Flink's max parallelism)."""
    name: str = "augury-sleep-pipeline"
    """Flink job name (the ``job`` column of the metric rows)."""

    def args(self) -> list[str]:
        return ["--rate", repr(float(self.rate_per_s)), "--enrich-ms", repr(float(self.enrich_ms)),
                "--aggregate-ms", repr(float(self.aggregate_ms)), "--keys", str(self.keys),
                "--p-source", str(self.p_source), "--p-enrich", str(self.p_enrich),
                "--p-aggregate", str(self.p_aggregate), "--p-sink", str(self.p_sink),
                "--max-parallelism", str(self.max_parallelism), "--name", self.name]

    def config(self) -> dict[str, int]:
        return {"Source": self.p_source, "Enrich": self.p_enrich, "Aggregate": self.p_aggregate,
                "Sink": self.p_sink}

    def capacity_per_s(self) -> dict[str, float]:
        """Nominal capacity of the waiting stages (a lower bound on their true service time)."""
        return {"Enrich": self.p_enrich * 1000.0 / self.enrich_ms,
                "Aggregate": self.p_aggregate * 1000.0 / self.aggregate_ms}


def submit(cluster, spec: SleepPipelineSpec, wait_running_s: float = 90.0) -> str:
    """Build (cached), upload and run the job on a ``FlinkCluster``; wait until RUNNING."""
    from scheduler.flink import LiveActuatorConfig, LiveFlinkActuator
    from experiments.flink.cluster import build_job_jar

    job_id = cluster.submit_jar(build_job_jar(cluster.home), ENTRY_CLASS, spec.args())
    LiveFlinkActuator(cluster.rest_url, job_id,
                      LiveActuatorConfig(ready_timeout_s=wait_running_s)).wait_running(spec.config())
    return job_id
