"""One contract for every MetricsSource and every Actuator implementation.

The live Flink implementations (``experiments.flink``) satisfy the same protocols; they need a
running cluster and are exercised by ``tests/experiments/flink/test_flink_live.py``.
"""

from __future__ import annotations

import pandas as pd
import pytest

from modeler.modelfile import load_model
from scheduler.interfaces import (OPTIONAL_COLUMNS, RAW_COLUMNS, ROW_COLUMNS, ActuationFailed, Actuator,
                                  InMemoryActuator, InMemoryMetricsSource, MetricsBatch, MetricsSource,
                                  MetricsUnavailable)
from tests.conftest import EXAMPLES

T0 = pd.Timestamp("2026-01-01", tz="UTC")


def _in_memory_source():
    source = InMemoryMetricsSource()
    for k in range(3):
        ts = T0 + pd.Timedelta(seconds=10 * k)
        rows = ((ts.isoformat(), 10.0, "j", "a", 0, "records_in", 100.0, None),
                (ts.isoformat(), 10.0, "j", "a", 0, "busy_ms", 500.0, None))
        source.push(MetricsBatch(as_of_s=(ts + pd.Timedelta(seconds=10)).timestamp(), rows=rows,
                                 config={"a": 1}))
    return source, lambda: None


def _testbed_source():
    from experiments.testbed import Testbed, TestbedConfig

    bed = Testbed(load_model(EXAMPLES / "wordcount.yaml"), 300.0, TestbedConfig(seed=3, window_s=2.0))
    return bed, lambda: bed.advance(2.0)


def _testbed_hosts_source():
    from experiments.testbed import Testbed, TestbedConfig

    bed = Testbed(load_model(EXAMPLES / "wordcount.yaml"), 300.0, TestbedConfig(seed=3, window_s=2.0, hosts=3))
    return bed, lambda: bed.advance(2.0)


SOURCES = {"in-memory": _in_memory_source, "testbed": _testbed_source, "testbed-hosts": _testbed_hosts_source}


@pytest.mark.parametrize("make", SOURCES.values(), ids=SOURCES.keys())
def test_metrics_source_contract(make):
    source, tick = make()
    assert isinstance(source, MetricsSource)
    tick()
    batch = source.read(None)
    # 8 fields, or 9 with the optional host; one source sends one kind
    assert batch.rows and len({len(row) for row in batch.rows}) == 1
    assert len(batch.rows[0]) in (len(RAW_COLUMNS), len(ROW_COLUMNS))
    frame = batch.to_frame()
    assert list(frame.columns) == list(RAW_COLUMNS) + list(OPTIONAL_COLUMNS[:len(batch.rows[0]) - len(RAW_COLUMNS)])
    # Windows are complete: every row's window ends no later than as_of_s.
    ends = pd.to_datetime(frame["ts"], utc=True) + pd.to_timedelta(frame["window_s"], unit="s")
    assert (ends.map(lambda t: t.timestamp()) <= batch.as_of_s + 1e-6).all()
    # Reading again from as_of_s gives only newer windows, or MetricsUnavailable: never old data.
    try:
        later = source.read(batch.as_of_s)
    except MetricsUnavailable:
        return
    assert later.as_of_s > batch.as_of_s
    starts = pd.to_datetime(later.to_frame()["ts"], utc=True)
    assert (starts.map(lambda t: t.timestamp()) >= batch.as_of_s - 1e-6).all()


def test_metrics_source_down_raises():
    with pytest.raises(MetricsUnavailable):
        InMemoryMetricsSource().read(None)


def _in_memory_actuator():
    return InMemoryActuator(config={"source": 1, "split": 2, "count": 2})


def _testbed_actuator():
    from experiments.testbed import Testbed, TestbedConfig

    return Testbed(load_model(EXAMPLES / "wordcount.yaml"), 100.0, TestbedConfig(seed=1, restart_s=1.0))


ACTUATORS = {"in-memory": _in_memory_actuator, "testbed": _testbed_actuator}


@pytest.mark.parametrize("make", ACTUATORS.values(), ids=ACTUATORS.keys())
def test_actuator_contract(make):
    actuator = make()
    assert isinstance(actuator, Actuator)
    before = actuator.current()
    assert before["count"] == 2
    result = actuator.apply({"count": 4}, reason="contract")
    assert result.applied and result.config["count"] == 4
    assert actuator.current() == {**before, "count": 4}
    with pytest.raises(ActuationFailed):
        actuator.apply({"no-such-operator": 3})
    assert actuator.current()["count"] == 4  # a refused change leaves the job as it was


def test_rows_with_and_without_a_host_make_one_frame():
    ts = T0.isoformat()
    batch = MetricsBatch(as_of_s=T0.timestamp() + 10, config={"a": 1}, rows=(
        (ts, 10.0, "j", "a", 0, "records_in", 1.0, None),
        (ts, 10.0, "j", "a", 0, "busy_ms", 5.0, None, "host-2")))
    frame = batch.to_frame()
    assert list(frame.columns) == list(ROW_COLUMNS)
    assert frame["host"].tolist() == [None, "host-2"]


def _replay_host_mover():
    from experiments.replay import ReplayActuator
    from experiments.testbed import Testbed, TestbedConfig

    return ReplayActuator(Testbed(load_model(EXAMPLES / "wordcount.yaml"), 100.0,
                                  TestbedConfig(seed=1, restart_s=1.0, hosts=3),
                                  parallelism={"source": 1, "split": 2, "count": 2}))


def _testbed_host_mover():
    from experiments.testbed import Testbed, TestbedConfig

    return Testbed(load_model(EXAMPLES / "wordcount.yaml"), 100.0, TestbedConfig(seed=1, restart_s=1.0, hosts=3),
                   parallelism={"source": 1, "split": 2, "count": 2})


HOST_MOVERS = {"in-memory": _in_memory_actuator, "testbed": _testbed_host_mover, "replay": _replay_host_mover}


@pytest.mark.parametrize("make", HOST_MOVERS.values(), ids=HOST_MOVERS.keys())
def test_host_mover_contract(make):
    from scheduler.loop import HostMover

    actuator = make()
    assert isinstance(actuator, HostMover)
    before = actuator.current()
    moved = actuator.move_off_host("host-1", reason="contract")
    assert moved.applied and actuator.current() == before  # instances move, the parallelism stays
    again = actuator.move_off_host("host-1")
    assert not again.applied and "already" in again.detail  # a host already left is no change
