"""A Flink SQL job (Nexmark-style q5) on the session cluster: its job graph is a topology the model
file accepts, its metric rows carry the topology's operator names, and one of its vertices rescales
on its own through the adaptive scheduler's resource requirements.

Bounded by ``BUDGET_S`` (cluster start-up included when this test starts the cluster); measured
33 s beyond the start-up on this 2-core box (start-up 25 s, stop 16 s; submit 3.5 s, the first
complete 4 s window, a 3 s rescale).
"""

from __future__ import annotations

import pytest

from experiments.flink.sql import NexmarkSqlSpec, submit
from modeler.modelfile import parse_model
from scheduler.flink import FlinkMetricsConfig, FlinkMetricsSource, LiveActuatorConfig, LiveFlinkActuator

BUDGET_S = 180.0
"""Cluster start-up (charged when this test starts it, at most conftest.STARTUP_TIMEOUT_S) + this
test's own < 60 s."""
WINDOW_S = 4.0
RATE = 5000
"""rows/s of the datagen source: light load on 2 cores, yet every operator busy for some ms."""


@pytest.mark.flink
@pytest.mark.slow
def test_sql_job_topology_metrics_and_per_vertex_rescale(flink_cluster, live_deadline):
    deadline = live_deadline(BUDGET_S)
    cluster = flink_cluster
    spec = NexmarkSqlSpec(query="q5", rate_per_s=RATE, parallelism=2, source_parallelism=1,
                          name="augury-it-sql-q5")
    job = submit(cluster, spec, wait_running_s=deadline.left(at_most=60))
    try:
        source = FlinkMetricsSource(cluster.rest_url, job, FlinkMetricsConfig(window_s=WINDOW_S, settle_s=1.0))
        graph = source.graph()
        assert [(e.source, e.target, e.ship_strategy) for e in graph.edges] == [
            ("bid", "Calc", "REBALANCE"), ("Calc", "GlobalWindowAggregate", "HASH"),
            ("GlobalWindowAggregate", "GlobalWindowAggregate-2", "GLOBAL")]
        topo = graph.topology()
        model = parse_model(topo, require_profiles=False)
        assert model.operator_names == ("bid", "Calc", "GlobalWindowAggregate", "GlobalWindowAggregate-2")
        assert model.operator("GlobalWindowAggregate-2").max_parallelism == 1

        batch = source.read()
        frame = batch.to_frame()
        assert set(frame["operator"]) == set(model.operator_names)
        per = frame.groupby(["operator", "metric"])["value"].sum() / WINDOW_S / \
            frame["ts"].nunique()
        # the datagen source has no busy time (Flink answers NaN): only its records
        assert ("bid", "busy_ms") not in per.index
        assert per["Calc", "records_in"] == pytest.approx(RATE, rel=0.3)
        assert per["Calc", "busy_ms"] > 0 and per["GlobalWindowAggregate", "records_in"] > 0

        actuator = LiveFlinkActuator(cluster.rest_url, job,
                                     LiveActuatorConfig(ready_timeout_s=deadline.left(at_most=60)))
        done = actuator.apply({"GlobalWindowAggregate": 3}, reason="sql integration test")
        assert done.applied and done.config == {"bid": 1, "Calc": 2, "GlobalWindowAggregate": 3,
                                                "GlobalWindowAggregate-2": 1}
        rescaled = parse_model(source.graph().topology(), require_profiles=False)
        assert rescaled.operator("GlobalWindowAggregate").parallelism == 3
        assert rescaled.operator("Calc").parallelism == 2
    finally:
        cluster.cancel(job, timeout_s=deadline.left(at_most=30))
