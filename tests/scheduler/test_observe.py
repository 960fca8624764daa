import math

import pandas as pd
import pytest

from scheduler.interfaces import MetricsBatch, MetricsUnavailable
from scheduler.observe import MalformedMetrics, history_frames, job_windows, vanished_instances
from tests.scheduler.synth import T0, FluidJob


def _job(**kw):
    job = FluidJob(service_ms={"a": 1.0, "b": 0.5}, config={"a": 2, "b": 1}, rate=1000.0, **kw)
    job.advance(30)
    return job


def test_statistics_of_a_window():
    ws = job_windows(_job().read(), sources=["source"])
    assert len(ws) == 3
    w = ws[-1]
    a = w.operators["a"]
    assert a.parallelism == 2 and a.processed_rate == pytest.approx(1000.0)
    assert a.busy_mean == pytest.approx(0.5) and a.service_time_ms == pytest.approx(1.0)
    assert a.true_rate_per_instance == pytest.approx(1000.0)
    assert w.operators["b"].arrival_rate == pytest.approx(1000.0)
    assert w.input_rate == pytest.approx(1000.0) and w.latency_ms["mean"] == 5.0
    assert not w.restarting


def test_backpressure_is_the_most_pressured_instance_not_a_sum():
    job = FluidJob(service_ms={"a": 1.0, "b": 2.0}, config={"a": 3, "b": 1}, rate=1000.0)
    job.advance(10)
    a = job_windows(job.read(), sources=["source"])[0].operators["a"]
    per_instance = [i.backpressure_fraction for i in a.instances]
    assert sum(per_instance) > 1.0  # a sum would exceed the window
    assert a.backpressure_max == pytest.approx(max(per_instance))
    assert a.backpressure_max <= 1.0


def test_source_arrival_counts_backlog_growth():
    job = FluidJob(service_ms={"a": 2.0}, config={"a": 1}, rate=800.0)  # capacity 500/s
    job.advance(20)
    w = job_windows(job.read(), sources=["source"])
    assert w[1].input_rate == pytest.approx(500.0)
    assert w[1].offered_rate == pytest.approx(800.0)
    assert w[1].backlog == pytest.approx(6000.0)


def test_backlog_growth_is_counted_only_across_adjacent_windows():
    # 800/s offered, 500/s processed: the backlog grows 3,000 per window. A window after a gap
    # (or after a lag_before measured elsewhere) counts no growth rather than two windows' worth.
    job = FluidJob(service_ms={"a": 2.0}, config={"a": 1}, rate=800.0)
    job.advance(30)
    batch = job.read()
    t1 = T0 + pd.Timedelta(seconds=10)
    gap = MetricsBatch(as_of_s=batch.as_of_s, rows=tuple(r for r in batch.rows if pd.Timestamp(r[0]) != t1),
                       config=batch.config)
    w = job_windows(gap, sources=["source"])
    assert [x.backlog for x in w] == [3000.0, 9000.0]
    assert w[1].offered_rate == pytest.approx(w[1].input_rate) == pytest.approx(500.0)
    last = MetricsBatch(as_of_s=batch.as_of_s, rows=tuple(r for r in batch.rows if pd.Timestamp(r[0]) > t1),
                        config=batch.config)
    end_1 = T0.timestamp() + 20.0
    assert job_windows(last, ["source"], {"source": 6000.0}, end_1)[0].offered_rate == pytest.approx(800.0)
    assert job_windows(last, ["source"], {"source": 6000.0})[0].offered_rate == pytest.approx(800.0)
    assert job_windows(last, ["source"], {"source": 3000.0}, end_1 - 10)[0].offered_rate == pytest.approx(500.0)


def _batch(rows, config):
    return MetricsBatch(as_of_s=1.0, rows=tuple(rows), config=config)


@pytest.mark.parametrize("corrupt", ["short", "unknown", "negative", "nan", "missing_instance",
                                     "missing_operator", "bad_ts"])
def test_malformed_batches_are_rejected(corrupt):
    job = _job()
    batch = job.read()
    rows = list(batch.rows)
    if corrupt == "short":
        rows[3] = rows[3][:5]
    elif corrupt == "unknown":
        rows[3] = rows[3][:5] + ("cpu_load",) + rows[3][6:]
    elif corrupt == "negative":
        rows[3] = rows[3][:6] + (-1.0,) + rows[3][7:]
    elif corrupt == "nan":
        rows[3] = rows[3][:6] + (math.nan,) + rows[3][7:]
    elif corrupt == "missing_instance":
        rows = [r for r in rows if not (r[3] == "a" and r[4] == 1 and r[5] == "busy_ms")]
    elif corrupt == "missing_operator":
        rows = [r for r in rows if r[3] != "b"]
    elif corrupt == "bad_ts":
        rows[0] = ("yesterday",) + rows[0][1:]
    with pytest.raises(MalformedMetrics) as err:
        job_windows(MetricsBatch(as_of_s=batch.as_of_s, rows=tuple(rows), config=batch.config),
                    sources=["source"])
    assert isinstance(err.value, MetricsUnavailable)


def test_empty_batch_is_malformed():
    with pytest.raises(MalformedMetrics):
        job_windows(_batch([], {"a": 1}))


def test_history_frames_have_the_calibration_columns():
    from modeler.calibrate import EDGE_COLUMNS, OPERATOR_COLUMNS

    ops, edges = history_frames(job_windows(_job().read(), sources=["source"]))
    assert set(OPERATOR_COLUMNS) <= set(ops.columns) and set(EDGE_COLUMNS) <= set(edges.columns)
    assert len(ops) == 9 and len(edges) == 6
    sel = edges[edges["source_op"] == "a"]["selectivity"]
    assert list(sel) == pytest.approx([1.0, 1.0, 1.0])


def _hosted(batch, hosts):
    """The batch's rows with the optional host field: ``hosts[(operator, instance)]``."""
    return MetricsBatch(as_of_s=batch.as_of_s, config=batch.config, window_s=batch.window_s,
                        rows=tuple(tuple(r) + (hosts.get((r[3], int(r[4]))),) for r in batch.rows))


def test_the_optional_host_field_reaches_every_instance():
    batch = _job().read()
    hosted = _hosted(batch, {("a", 0): "host-0", ("a", 1): "host-1", ("b", 0): "host-1"})
    a = job_windows(hosted, sources=["source"])[-1].operators["a"]
    assert [i.host for i in a.instances] == ["host-0", "host-1"]
    # the same windows without hosts: the same statistics, host None (Flink's rows, the in-memory ones)
    plain = job_windows(batch, sources=["source"])[-1].operators["a"]
    assert [i.host for i in plain.instances] == [None, None]
    assert plain.processed_rate == a.processed_rate and plain.busy_mean == a.busy_mean


def test_rows_of_eight_and_nine_fields_mix():
    batch = _job().read()
    rows = tuple(tuple(r) + ("host-3",) if r[3] == "b" else tuple(r) for r in batch.rows)
    w = job_windows(MetricsBatch(as_of_s=batch.as_of_s, rows=rows, config=batch.config), sources=["source"])[-1]
    assert w.operators["b"].instances[0].host == "host-3" and w.operators["a"].instances[0].host is None


def test_a_row_of_ten_fields_is_malformed():
    batch = _job().read()
    rows = (tuple(batch.rows[0]) + ("host-0", "extra"),) + tuple(batch.rows[1:])
    with pytest.raises(MalformedMetrics) as err:
        job_windows(MetricsBatch(as_of_s=batch.as_of_s, rows=rows, config=batch.config))
    assert "rows[0]" in str(err.value)


def test_vanished_instances_are_those_without_any_row_in_the_newest_window():
    batch = _job().read()
    last = max(pd.Timestamp(r[0]) for r in batch.rows)
    # a[1] sends nothing in the newest window (its host died); earlier windows are complete
    rows = tuple(r for r in batch.rows if not (pd.Timestamp(r[0]) == last and r[3] == "a" and int(r[4]) == 1))
    partial = MetricsBatch(as_of_s=batch.as_of_s, rows=rows, config=batch.config)
    with pytest.raises(MalformedMetrics):  # still a partial batch: never acted on as it is
        job_windows(partial, sources=["source"])
    assert vanished_instances(partial, {"a": 2, "b": 1}) == (("a", 1),)
    assert vanished_instances(batch, {"a": 2, "b": 1}) == ()
