"""One managed local Flink cluster for every live test in this directory (started once, on the
first test that asks for it; stopped at the end of the session, and checked to be gone)."""

from __future__ import annotations

import pytest

from experiments.flink.cluster import (ClusterConfig, FlinkCluster, FlinkClusterError, check_java,
                                       ensure_flink_venv)
from scheduler.flink import FlinkMetricsConfig, FlinkMetricsSource
from scheduler.interfaces import MetricsUnavailable


@pytest.fixture(scope="session")
def flink_cluster():
    """A running ``FlinkCluster`` (8 task slots, free loopback ports). Fails (never skips) when
    Java or the Flink wheel is unavailable."""
    try:
        check_java()
        ensure_flink_venv(timeout_s=600)
    except FlinkClusterError as err:
        pytest.fail(f"Flink is not available, so the live tests cannot run: {err}")
    cluster = FlinkCluster(ClusterConfig.free_ports(task_slots=8, startup_timeout_s=180))
    with cluster:
        yield cluster
    # stopped: no process left, and the REST API is gone
    assert cluster.processes() == []
    gone = FlinkMetricsSource(cluster.rest_url, "0" * 32,
                              FlinkMetricsConfig(retries=2, retry_delay_s=0.2, timeout_s=2))
    with pytest.raises(MetricsUnavailable):
        gone.read()
