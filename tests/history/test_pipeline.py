"""The Spark pipeline on small frames with hand-computed values (one shared SparkSession)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from history.errors import HistoryError
from history.pipeline import instance_windows, resolve_window, summarize
from history.summarize import raw_spark_schema

pytestmark = pytest.mark.spark

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
T1 = T0 + timedelta(seconds=10)
T2 = T0 + timedelta(seconds=20)


@pytest.fixture(autouse=True)
def _small(small_spark):
    yield


def raw_frame(spark, rows):
    """rows: (ts, operator, instance, metric, value[, target]) with job 'j' and 10 s windows."""
    full = [(r[0], 10.0, "j", r[1], r[2], r[3], float(r[4]), r[5] if len(r) > 5 else None) for r in rows]
    return spark.createDataFrame(full, schema=raw_spark_schema())


DAG_ROWS = [
    # window T0
    (T0, "src", 0, "records_out", 1000, "map"), (T0, "src", 0, "source_lag", 500),
    (T0, "src", 1, "records_out", 1000, "map"), (T0, "src", 1, "source_lag", 300),
    (T0, "map", 0, "records_in", 1200), (T0, "map", 0, "busy_ms", 6000),
    (T0, "map", 0, "backpressured_ms", 1000), (T0, "map", 0, "idle_ms", 3000),
    (T0, "map", 0, "queue_len", 4), (T0, "map", 0, "records_out", 2400, "sink"),
    (T0, "map", 1, "records_in", 800), (T0, "map", 1, "busy_ms", 2000),
    (T0, "map", 1, "backpressured_ms", 0), (T0, "map", 1, "idle_ms", 8000),
    (T0, "map", 1, "queue_len", 2), (T0, "map", 1, "records_out", 1600, "sink"),
    (T0, "sink", 0, "records_in", 4000), (T0, "sink", 0, "busy_ms", 1000),
    (T0, "sink", 0, "latency_ms_mean", 20), (T0, "sink", 0, "latency_ms_p99", 80),
    # window T1
    (T1, "src", 0, "records_out", 1000, "map"), (T1, "src", 0, "source_lag", 700),
    (T1, "src", 1, "records_out", 1000, "map"), (T1, "src", 1, "source_lag", 300),
    (T1, "map", 0, "records_in", 1000), (T1, "map", 0, "busy_ms", 5000),
    (T1, "map", 0, "records_out", 2000, "sink"),
    (T1, "map", 1, "records_in", 1000), (T1, "map", 1, "busy_ms", 5000),
    (T1, "map", 1, "records_out", 2000, "sink"),
    (T1, "sink", 0, "records_in", 4000), (T1, "sink", 0, "busy_ms", 1000),
]

OW_COLUMNS = ["window_start", "operator", "is_source", "parallelism", "arrival_rate", "processed_rate",
              "busy_fraction_mean", "busy_fraction_max", "service_time_ms", "backpressure_fraction",
              "queue_len_mean", "max_instance_share", "latency_ms_mean", "latency_ms_p99", "arrival_basis"]


def expect(spark, actual, columns, rows):
    from pyspark.testing import assertDataFrameEqual

    actual = actual.select(*columns)
    expected = spark.createDataFrame(rows, schema=actual.schema)
    assertDataFrameEqual(actual, expected, checkRowOrder=False, rtol=1e-9, atol=1e-9)


def test_ten_second_windows(spark):
    result = summarize(raw_frame(spark, DAG_ROWS), 10.0)
    expect(spark, result.operator_windows, OW_COLUMNS, [
        #  window op  src  p  arrival processed busy_mean busy_max service bp   queue share lat  p99  basis
        (T0, "src", True, 2, 200.0, 200.0, None, None, None, None, None, 0.5, None, None, "external"),
        (T0, "map", False, 2, 200.0, 200.0, 0.4, 0.6, 4.0, 0.05, 3.0, 0.6, None, None, "edges"),
        (T0, "sink", False, 1, 400.0, 400.0, 0.1, 0.1, 0.25, None, None, 1.0, 20.0, 80.0, "edges"),
        (T1, "src", True, 2, 220.0, 200.0, None, None, None, None, None, 0.5, None, None, "external"),
        (T1, "map", False, 2, 200.0, 200.0, 0.5, 0.5, 5.0, None, None, 0.5, None, None, "edges"),
        (T1, "sink", False, 1, 400.0, 400.0, 0.1, 0.1, 0.25, None, None, 1.0, None, None, "edges"),
    ])
    expect(spark, result.edge_windows, ["window_start", "source_op", "target_op", "rate", "selectivity"], [
        (T0, "src", "map", 200.0, 1.0), (T0, "map", "sink", 400.0, 2.0),
        (T1, "src", "map", 200.0, 1.0), (T1, "map", "sink", 400.0, 2.0),
    ])
    # arrived = processed + d(lag)/dt: lag 800 -> 1000 over 10 s adds 20 tuples/s
    expect(spark, result.source_rates,
           ["window_start", "operator", "processed_rate", "source_lag", "lag_growth_rate", "arrival_rate"], [
               (T0, "src", 200.0, 800.0, None, 200.0),
               (T1, "src", 200.0, 1000.0, 20.0, 220.0),
           ])
    assert {r.window_s for r in result.operator_windows.select("window_s").collect()} == {10.0}


def test_rewindowing_to_twenty_seconds(spark):
    result = summarize(raw_frame(spark, DAG_ROWS), 20.0)
    expect(spark, result.operator_windows, OW_COLUMNS, [
        # busy fraction per instance over the 20 s it reported: (6000+5000)/20000, (2000+5000)/20000;
        # back pressure only measured in the first 10 s: 1000/10000 and 0/10000
        (T0, "src", True, 2, 200.0, 200.0, None, None, None, None, None, 0.5, None, None, "external"),
        (T0, "map", False, 2, 200.0, 200.0, 0.45, 0.55, 4.5, 0.05, 3.0, 0.55, None, None, "edges"),
        (T0, "sink", False, 1, 400.0, 400.0, 0.1, 0.1, 0.25, None, None, 1.0, 20.0, 80.0, "edges"),
    ])
    expect(spark, result.edge_windows, ["window_start", "source_op", "target_op", "rate", "selectivity"], [
        (T0, "src", "map", 200.0, 1.0), (T0, "map", "sink", 400.0, 2.0),
    ])
    # the lag of a coarse window is the last sub-window's
    expect(spark, result.source_rates, ["window_start", "source_lag", "lag_growth_rate", "arrival_rate"],
           [(T0, 1000.0, None, 200.0)])


def test_sources_without_lag_parallelism_gauge_and_lag_gaps(spark):
    rows = [
        # a Flink-like source: records_in reported as 0, output counted instead
        (T0, "read", 0, "records_in", 0), (T0, "read", 0, "records_out", 300, "agg"),
        (T0, "read", 0, "source_lag", 100),
        (T2, "read", 0, "records_in", 0), (T2, "read", 0, "records_out", 300, "agg"),
        (T2, "read", 0, "source_lag", 400),  # T1 is missing: growth unknown, not 15/s
        # a source that reports records_in (no lag): found because no edge points at it
        (T0, "gen", 0, "records_in", 50), (T0, "gen", 0, "records_out", 100, "agg"),
        (T0, "agg", 0, "records_in", 400), (T0, "agg", 1, "records_in", 0),
        (T0, "agg", 0, "parallelism", 4), (T0, "agg", 1, "parallelism", 4),
        (T0, "agg", 0, "busy_ms", 2000),
    ]
    result = summarize(raw_frame(spark, rows), 10.0)
    expect(spark, result.operator_windows,
           ["window_start", "operator", "is_source", "parallelism", "arrival_rate", "processed_rate",
            "service_time_ms", "max_instance_share", "arrival_basis"], [
               (T0, "read", True, 1, 30.0, 30.0, None, 1.0, "external"),
               (T2, "read", True, 1, 30.0, 30.0, None, 1.0, "external"),
               (T0, "gen", True, 1, 5.0, 5.0, None, 1.0, "external"),
               (T0, "agg", False, 4, 40.0, 40.0, 5.0, 1.0, "edges"),
           ])
    expect(spark, result.source_rates, ["window_start", "operator", "source_lag", "lag_growth_rate"], [
        (T0, "read", 100.0, None), (T2, "read", 400.0, None), (T0, "gen", None, None),
    ])
    expect(spark, result.edge_windows, ["window_start", "source_op", "target_op", "rate", "selectivity"], [
        (T0, "read", "agg", 30.0, 1.0), (T2, "read", "agg", 30.0, 1.0), (T0, "gen", "agg", 10.0, 2.0),
    ])


def test_without_edges_or_lag_nothing_is_a_source(spark):
    rows = [(T0, "a", 0, "records_in", 100), (T0, "a", 0, "records_out", 100)]
    result = summarize(raw_frame(spark, rows), 10.0)
    expect(spark, result.operator_windows, ["operator", "is_source", "arrival_rate", "arrival_basis"],
           [("a", False, 10.0, "processed")])
    assert result.source_rates.count() == 0 and result.edge_windows.count() == 0


def test_instance_windows_sum_counts_and_average_gauges(spark):
    rows = [(T0, "a", 0, "records_in", 10), (T1, "a", 0, "records_in", 30),
            (T0, "a", 0, "queue_len", 2), (T1, "a", 0, "queue_len", 6),
            (T0, "a", 0, "records_out", 7), (T0, "a", 0, "records_out", 5, "b")]
    iw = instance_windows(raw_frame(spark, rows), 20.0)
    expect(spark, iw, ["window_start", "instance", "records_in", "records_out", "queue_len", "window_s"],
           [(T0, 0, 40.0, 7.0, 4.0, 20.0)])  # untargeted records_out is the total


def test_resolve_window():
    assert resolve_window([10.0, 10.0], None) == 10.0
    assert resolve_window([10.0, 60.0], None) == 60.0
    assert resolve_window([10.0], 60.0) == 60.0
    with pytest.raises(HistoryError) as err:
        resolve_window([10.0], 15.0)
    assert err.value.field == "--window" and err.value.value == "15s"
    with pytest.raises(HistoryError, match="multiple"):
        resolve_window([10.0, 15.0], None)
    with pytest.raises(HistoryError):
        resolve_window([10.0], 5.0)


def test_service_time_uses_only_instances_reporting_busy_and_processed(spark):
    """Issue 22: one instance's busy_ms quarantined must not turn 5.0 ms into 3.75 ms."""
    rows = [(T0, "a", i, "records_in", 1000) for i in range(4)]
    rows += [(T0, "a", i, "busy_ms", 5000) for i in range(3)]          # instance 3: no busy_ms
    rows += [(T0, "b", i, "busy_ms", 2000) for i in range(2)]
    rows += [(T0, "b", 0, "records_in", 1000)]                          # instance 1: no records_in
    rows += [(T0, "c", 0, "records_in", 1000)]                          # no busy_ms at all
    ow = summarize(raw_frame(spark, rows), 10.0).operator_windows
    expect(spark, ow, ["operator", "processed_rate", "service_time_ms"],
           [("a", 400.0, 5.0), ("b", 100.0, 2.0), ("c", 100.0, None)])


def test_service_time_pairs_busy_and_processed_within_the_window(spark):
    """Issue 22, within a window: summarized over 60 s, six 10 s raw windows per instance; one
    10 s busy_ms row of instance 1 quarantined while its records_in is kept. Paired per raw window,
    the operator's service time stays 5.0 ms (total busy / total tuples read 55 s / 12,000 =
    4.58 ms), and the source counting its output likewise (its records_out kept, busy_ms lost)."""
    starts = [T0 + timedelta(seconds=10 * k) for k in range(6)]
    rows = []
    for i in range(2):
        for k, ts in enumerate(starts):
            rows.append((ts, "a", i, "records_in", 1000))
            if not (i == 1 and k == 3):
                rows.append((ts, "a", i, "busy_ms", 5000))
            rows.append((ts, "src", i, "records_out", 500, "a"))
            if not (i == 0 and k == 5):
                rows.append((ts, "src", i, "busy_ms", 1000))
    ow = summarize(raw_frame(spark, rows), 60.0).operator_windows
    expect(spark, ow, ["operator", "processed_rate", "busy_fraction_mean", "service_time_ms"],
           [("a", 200.0, (30.0 / 60.0 + 25.0 / 50.0) / 2, 5.0),
            ("src", 100.0, 0.1, 2.0)])
    # the per-instance table keeps the whole window's counts (nothing dropped from the rates)
    iw = instance_windows(raw_frame(spark, rows), 60.0).where("operator = 'a'")
    expect(spark, iw, ["instance", "records_in", "busy_ms", "busy_covered_s"],
           [(0, 6000.0, 30000.0, 60.0), (1, 6000.0, 25000.0, 50.0)])
    assert not [c for c in iw.columns if c.startswith("_")]
