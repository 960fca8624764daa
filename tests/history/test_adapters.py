"""Adapters on fixtures that follow the engines' documented responses."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from history.adapters import AdapterOptions, parse_edges, read
from history.errors import AdapterError, HistoryError
from history.validate import validate

FIXTURES = Path(__file__).parent / "fixtures"
T0 = pd.Timestamp("2024-05-01T12:00:00Z")


def rows(frame: pd.DataFrame) -> dict[tuple, float]:
    """(ts, operator, instance, metric, target) -> value of accepted rows."""
    return {(r.ts, r.operator, int(r.instance), r.metric, r.target): r.value
            for r in frame.itertuples()}


def test_flink_rest_capture_converts_per_second_gauges_to_window_counts():
    result = read(FIXTURES / "flink_rest_capture.json", "flink-rest")
    checked = validate(result.rows)
    assert checked.quarantined.empty
    got = rows(checked.accepted)
    assert got == {
        (T0, "Source: Kafka", 0, "records_in", None): 0.0,
        (T0, "Source: Kafka", 0, "records_out", "Tokenizer"): 2000.0,
        (T0, "Source: Kafka", 0, "busy_ms", None): 1500.0,
        (T0, "Source: Kafka", 0, "source_lag", None): 1200.0,  # a level: not scaled
        (T0, "Tokenizer", 0, "records_in", None): 1200.0,
        (T0, "Tokenizer", 0, "records_out", "Counter"): 3600.0,
        (T0, "Tokenizer", 0, "busy_ms", None): 6000.0,
        (T0, "Tokenizer", 0, "backpressured_ms", None): 0.0,
        (T0, "Tokenizer", 0, "idle_ms", None): 4000.0,
        (T0, "Tokenizer", 1, "records_in", None): 800.0,
        (T0, "Tokenizer", 1, "records_out", "Counter"): 2400.0,
        (T0, "Tokenizer", 1, "busy_ms", None): 4000.0,
        (T0, "Tokenizer", 1, "backpressured_ms", None): 0.0,
        (T0, "Tokenizer", 1, "idle_ms", None): 6000.0,
    }
    assert set(checked.accepted["job"]) == {"wordcount"}
    assert result.ignored == {"numBytesInPerSecond": 1}


def test_flink_rest_window_override_and_job_override(tmp_path):
    result = read(FIXTURES / "flink_rest_capture.json", "flink-rest",
                  AdapterOptions(job="wc2", window_s=60))
    checked = validate(result.rows)
    got = rows(checked.accepted)
    assert got[(T0, "Tokenizer", 0, "records_in", None)] == 7200.0
    assert set(checked.accepted["job"]) == {"wc2"}
    assert set(checked.accepted["window_s"]) == {60.0}


@pytest.mark.parametrize("doc, field", [
    ([{"id": "busyTimeMsPerSecond", "sum": 1.0}], "captures"),
    ({"job": "j", "captures": [{"vertex": "v", "response": []}]}, "captures[0].subtask"),
    ({"job": "j", "captures": [{"subtask": 0, "response": []}]}, "captures[0].vertex"),
    ({"captures": []}, "job"),
])
def test_flink_rest_rejects_captures_it_cannot_place(tmp_path, doc, field):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(AdapterError) as err:
        read(path, "flink-rest")
    assert err.value.file == str(path) and err.value.field == field
    assert str(path) in str(err.value)


def test_prometheus_text_of_flinks_reporter():
    options = AdapterOptions(ts="2024-05-01T12:00:00Z", window_s=10,
                             edges=parse_edges("Tokenizer->Counter"))
    result = read(FIXTURES / "prometheus_flink.txt", "prometheus", options)
    checked = validate(result.rows)
    got = rows(checked.accepted)
    assert got == {
        (T0, "Tokenizer", 0, "records_in", None): 1200.0,
        (T0, "Tokenizer", 1, "records_in", None): 800.0,
        (T0, "Tokenizer", 0, "records_out", "Counter"): 3600.0,
        (T0, "Tokenizer", 0, "busy_ms", None): 6000.0,
        (T0, "Tokenizer", 0, "backpressured_ms", None): 250.0,
        (T0, "Source:_Kafka", 0, "source_lag", None): 1200.0,
    }
    assert set(checked.accepted["job"]) == {"wordcount"}
    # Flink reports NaN when busy time is not measurable: quarantined, not dropped.
    assert checked.quarantined["reason"].tolist() == ["non_numeric_value"]
    assert checked.quarantined["operator"].tolist() == ["Tokenizer"]
    assert checked.quarantined["instance"].tolist() == ["1"]
    assert result.ignored == {"flink_taskmanager_Status_JVM_CPU_Load": 1}


def test_prometheus_sample_timestamp_is_the_window_end(tmp_path):
    path = tmp_path / "scrape.txt"
    end_ms = int(pd.Timestamp("2024-05-01T12:00:10.300Z").timestamp() * 1000)
    path.write_text('flink_taskmanager_job_task_numRecordsInPerSecond{job_name="j",'
                    f'task_name="map",subtask_index="2",}} 5.5 {end_ms}\n'
                    'this is not a sample\n')
    checked = validate(read(path, "prometheus", AdapterOptions(window_s=10)).rows)
    assert rows(checked.accepted) == {(T0, "map", 2, "records_in", None): 55.0}
    assert checked.quarantined["reason"].tolist() == ["malformed_row"]
    assert checked.quarantined["line"].tolist() == [2]


def test_prometheus_without_timestamps_needs_ts():
    with pytest.raises(AdapterError, match="--ts"):
        read(FIXTURES / "prometheus_flink.txt", "prometheus")


def test_heron_tracker_metricstimeline():
    result = read(FIXTURES / "heron_metricstimeline.json", "heron-tracker", AdapterOptions(job="wc"))
    checked = validate(result.rows)
    assert checked.quarantined.empty
    t1, t2 = pd.Timestamp(1714564800, unit="s", tz="UTC"), pd.Timestamp(1714564860, unit="s", tz="UTC")
    assert rows(checked.accepted) == {
        # execute-count is reported per stream and per source/stream: counted once
        (t1, "split", 3, "records_in", None): 6000.0,
        (t1, "split", 3, "records_out", None): 18000.0,  # __ack_init is a system stream
        (t1, "split", 3, "busy_ms", None): 30000.0,  # __execute-time-ns / 1e6
        (t1, "split", 3, "backpressured_ms", None): 0.0,
        (t2, "split", 3, "records_in", None): 6600.0,
        (t2, "split", 3, "records_out", None): 19800.0,
        (t2, "split", 3, "busy_ms", None): 33000.0,
        (t2, "split", 3, "backpressured_ms", None): 4500.0,
        (t1, "split", 4, "records_in", None): 3000.0,
        (t1, "split", 4, "records_out", None): 9000.0,
        (t1, "split", 4, "busy_ms", None): 15000.0,
        (t2, "split", 4, "records_in", None): 2400.0,
        (t2, "split", 4, "records_out", None): 7200.0,
        (t2, "split", 4, "busy_ms", None): 12000.0,
        # no execute-time-ns: busy = mean execute latency (ns) x count
        (t1, "count", 5, "records_in", None): 27000.0,
        (t1, "count", 5, "busy_ms", None): 27000.0,
    }
    assert set(checked.accepted["window_s"]) == {60.0}
    assert result.ignored == {"__emit-count/__ack_init": 1, "__jvm-uptime-secs": 1}


def test_heron_edges_attribute_output_and_job_is_required():
    result = read(FIXTURES / "heron_metricstimeline.json", "heron-tracker",
                  AdapterOptions(job="wc", edges=parse_edges("split->count")))
    out = result.rows[result.rows["metric"] == "records_out"]
    assert set(out["target"]) == {"count"}
    with pytest.raises(AdapterError, match="--job"):
        read(FIXTURES / "heron_metricstimeline.json", "heron-tracker")


def test_normalized_csv_jsonl_parquet_agree(tmp_path):
    records = [
        {"ts": "2024-05-01T12:00:00Z", "window_s": 10, "job": "j", "operator": "a", "instance": 0,
         "metric": "records_out", "value": 100, "target": "b"},
        {"ts": "2024-05-01T12:00:00Z", "window_s": 10, "job": "j", "operator": "b", "instance": 1,
         "metric": "busy_ms", "value": 2500.5, "target": None},
    ]
    csv = tmp_path / "m.csv"
    pd.DataFrame(records).to_csv(csv, index=False)
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    parquet = tmp_path / "m.parquet"
    table = pa.table({"ts": pa.array([T0, T0], pa.timestamp("us", tz="UTC")),
                      "window_s": [10.0, 10.0], "job": ["j", "j"], "operator": ["a", "b"],
                      "instance": pa.array([0, 1], pa.int32()),
                      "metric": ["records_out", "busy_ms"], "value": [100.0, 2500.5],
                      "target": ["b", None]})
    pq.write_table(table, parquet)
    expected = {(T0, "a", 0, "records_out", "b"): 100.0, (T0, "b", 1, "busy_ms", None): 2500.5}
    for path in (csv, jsonl, parquet):
        checked = validate(read(path, "normalized").rows)
        assert checked.quarantined.empty, path
        assert rows(checked.accepted) == expected, path


def test_normalized_window_defaults_to_10s(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("ts,job,operator,instance,metric,value\n2024-05-01T12:00:00Z,j,a,0,records_in,5\n")
    checked = validate(read(path, "normalized").rows)
    assert checked.accepted["window_s"].tolist() == [10.0]


def test_normalized_missing_column_is_an_error_naming_file_and_field(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("ts,job,operator,metric,value\n2024-05-01T12:00:00Z,j,a,records_in,5\n")
    with pytest.raises(AdapterError) as err:
        read(path, "normalized")
    assert err.value.field == "columns" and err.value.value == "instance"
    assert str(path) in str(err.value)


def test_unknown_format_and_bad_edges():
    with pytest.raises(AdapterError, match="unknown format"):
        read(FIXTURES / "prometheus_flink.txt", "storm-ui")
    with pytest.raises(HistoryError) as err:
        parse_edges("a->b,c")
    assert err.value.field == "--edges" and err.value.value == "c"
