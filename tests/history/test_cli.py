"""``augury ingest`` and ``augury history summarize`` through ``augury.cli.main``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from augury.cli import main
from history.store import MetricStore

FIXTURES = Path(__file__).parent / "fixtures"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ingest_json_reports_counts_per_reason(tmp_path, capsys):
    path = tmp_path / "m.csv"
    path.write_text("ts,window_s,job,operator,instance,metric,value,target\n"
                    "2024-05-01T12:00:00Z,10,j,a,0,records_in,100,\n"
                    "2024-05-01T12:00:00Z,10,j,a,0,records_out,100,b\n"
                    "2024-05-01T12:00:00Z,10,j,a,1,records_in,-1,\n"
                    "2024-05-01T12:00:00Z,10,j,a,1,wat,1,\n")
    code, out, err = run(capsys, "ingest", "--format", "normalized", str(path),
                         "--store", str(tmp_path / "s"), "--json")
    assert code == 0 and err == ""
    report = json.loads(out)
    assert report["accepted"] == 2 and report["new"] == 2
    assert report["quarantined"] == {"negative_value": 1, "unknown_metric": 1}
    assert report["quarantined_total"] == 2 and report["store_version"] == 1
    code, out, _ = run(capsys, "ingest", "--format", "normalized", str(path),
                       "--store", str(tmp_path / "s"), "--strict")
    assert code == 1
    assert "already stored 2" in out and "negative_value 1" in out


def test_ingest_engine_formats(tmp_path, capsys):
    store = str(tmp_path / "s")
    code, out, _ = run(capsys, "ingest", "--format", "heron-tracker",
                       str(FIXTURES / "heron_metricstimeline.json"), "--store", store, "--job", "wc",
                       "--edges", "split->count", "--json")
    assert code == 0 and json.loads(out)["new"] == 16
    code, out, _ = run(capsys, "ingest", "--format", "prometheus", str(FIXTURES / "prometheus_flink.txt"),
                       "--store", store, "--ts", "2024-05-01T12:00:00Z", "--window", "10s", "--json")
    assert code == 0 and json.loads(out)["quarantined"] == {"non_numeric_value": 1}
    code, out, _ = run(capsys, "ingest", "--format", "flink-rest", str(FIXTURES / "flink_rest_capture.json"),
                       "--store", store, "--json")
    assert code == 0 and json.loads(out)["ignored"] == {"numBytesInPerSecond": 1}
    assert MetricStore(store).jobs() == ["wc", "wordcount"]


@pytest.mark.parametrize("argv, needle", [
    (["--format", "normalized", "{missing}"], "no such file"),
    (["--format", "heron-tracker", "{heron}"], "pass --job"),
    (["--format", "prometheus", "{prom}"], "pass --ts"),
    (["--format", "normalized", "{bad_columns}"], "missing required column(s) instance"),
    (["--format", "normalized", "{bad_columns}", "--window", "soon"], "--window"),
    (["--format", "flink-rest", "{heron}", "--edges", "a>b"], "--edges"),
])
def test_ingest_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, needle):
    bad = tmp_path / "bad.csv"
    bad.write_text("ts,job,operator,metric,value\n")
    paths = {"missing": str(tmp_path / "none.csv"), "heron": str(FIXTURES / "heron_metricstimeline.json"),
             "prom": str(FIXTURES / "prometheus_flink.txt"), "bad_columns": str(bad)}
    argv = [a.format(**paths) for a in argv]
    code, out, err = run(capsys, "ingest", *argv, "--store", str(tmp_path / "s"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("augury ingest: error: ") and needle in err
    assert not (tmp_path / "s").exists() or MetricStore(tmp_path / "s").raw().empty


def test_summarize_without_a_store_is_exit_2(tmp_path, capsys):
    code, out, err = run(capsys, "history", "summarize", "--store", str(tmp_path / "none"))
    assert code == 2 and err.startswith("augury history: error: ") and "no such metric store" in err


def _summarize_in_subprocess(store: str, *argv: str, env: dict | None = None):
    """``augury history summarize`` in its own interpreter: the tests' session-scoped SparkSession
    (getOrCreate would hand it back whatever the master) must not be the one it gets."""
    r = subprocess.run([sys.executable, "-m", "augury", "history", "summarize", "--store", store, *argv],
                       capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
    return r.returncode, r.stdout, r.stderr


def test_summarize_with_a_bad_spark_master_is_exit_3_in_one_line(tmp_path, capsys):
    store = str(tmp_path / "s")
    assert run(capsys, "ingest", "--format", "flink-rest", str(FIXTURES / "flink_rest_capture.json"),
               "--store", store)[0] == 0
    code, out, err = _summarize_in_subprocess(store, "--spark-master", "nowhere://bad:7077")
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and err.startswith("augury history: error: ")
    assert "field '--spark-master'" in err and "'nowhere://bad:7077'" in err and "cannot start Spark" in err
    assert MetricStore(store).summary() is None  # nothing summarized


def test_summarize_when_the_spark_jvm_cannot_start_is_exit_3(tmp_path, capsys):
    # No Java (JAVA_HOME points nowhere): the JVM gateway exits. spark-submit's own complaint comes
    # first on stderr; augury's error is the last line, one line, naming the field and value.
    store = str(tmp_path / "s")
    assert run(capsys, "ingest", "--format", "flink-rest", str(FIXTURES / "flink_rest_capture.json"),
               "--store", store)[0] == 0
    code, out, err = _summarize_in_subprocess(store, "--spark-master", "local[1]",
                                              env={"JAVA_HOME": str(tmp_path / "no-java")})
    assert code == 3 and out == ""
    last = err.rstrip("\n").splitlines()[-1]
    assert [line for line in err.splitlines() if line.startswith("augury ")] == [last]
    assert last.startswith("augury history: error: field '--spark-master' = 'local[1]': cannot start Spark")
    assert "Traceback" not in err


@pytest.mark.spark
def test_summarize_writes_the_three_tables(tmp_path, capsys, small_spark):
    store = str(tmp_path / "s")
    run(capsys, "ingest", "--format", "flink-rest", str(FIXTURES / "flink_rest_capture.json"),
        "--store", store)
    code, out, err = run(capsys, "history", "summarize", "--store", store, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["rows"] == {"operator_windows": 2, "edge_windows": 2, "source_rates": 1}
    assert report["window_s"] == 10.0 and report["jobs"] == ["wordcount"] and report["raw_rows"] == 14
    reader = MetricStore(store)
    ow = reader.operator_windows().set_index("operator")
    # Tokenizer: 2000 tuples in 10 s, busy 10000 ms -> 5 ms per tuple; hottest subtask 1200/2000
    assert ow.loc["Tokenizer", "processed_rate"] == pytest.approx(200.0)
    assert ow.loc["Tokenizer", "service_time_ms"] == pytest.approx(5.0)
    assert ow.loc["Tokenizer", "max_instance_share"] == pytest.approx(0.6)
    assert ow.loc["Tokenizer", "busy_fraction_max"] == pytest.approx(0.6)
    # the Flink source reports numRecordsIn = 0: its output is what it processed
    assert ow.loc["Source: Kafka", "processed_rate"] == pytest.approx(200.0)
    assert bool(ow.loc["Source: Kafka", "is_source"])
    edges = reader.edge_windows().set_index("source_op")
    assert edges.loc["Tokenizer", "selectivity"] == pytest.approx(3.0)
    assert reader.summary()["rows"]["operator_windows"] == 2
    code, _, err = run(capsys, "history", "summarize", "--store", store, "--window", "15s")
    assert code == 2 and "--window" in err and err.count("\n") == 1
    assert len(reader.operator_windows()) == 2  # the failed run left the tables as they were
