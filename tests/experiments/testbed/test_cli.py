"""``augury testbed run``: outputs, schema, exit codes and one-line errors."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from augury.cli import main
from history.schema import RAW_SCHEMA
from tests.conftest import EXAMPLES

WC = str(EXAMPLES / "wordcount.yaml")


def test_run_writes_metrics_events_and_summary(tmp_path, capsys):
    faults = tmp_path / "f.yaml"
    faults.write_text("faults: [{type: rescale, at_s: 10, config: {count: 3}}]\n")
    out = tmp_path / "out"
    code = main(["testbed", "run", WC, "--rate", "500", "--duration", "30s", "--out", str(out),
                 "--seed", "4", "--faults", str(faults), "--restart", "5s", "--json", "--no-progress"])
    assert code == 0
    info = json.loads(capsys.readouterr().out)
    assert info["config"]["count"] == 3 and info["conservation"]["balanced"]
    table = pq.read_table(out / "metrics.parquet")
    assert table.schema.equals(RAW_SCHEMA)
    csv = pd.read_csv(out / "metrics.csv")
    assert len(csv) == table.num_rows and list(csv.columns) == RAW_SCHEMA.names
    assert csv.ts.iloc[0] == "2026-01-01T00:00:00.000000Z"
    events = pd.read_csv(out / "events.csv")
    assert list(events.event) == ["run_start", "reconfigure", "restart_done"]


def test_same_seed_same_files(tmp_path):
    for name in ("a", "b"):
        assert main(["testbed", "run", WC, "--rate", "300", "--duration", "20s", "--out",
                     str(tmp_path / name), "--seed", "9", "--no-progress"]) == 0
    assert (tmp_path / "a" / "metrics.csv").read_text() == (tmp_path / "b" / "metrics.csv").read_text()


def test_trace_run(tmp_path, traces_dir, capsys):
    code = main(["testbed", "run", WC, "--trace", str(traces_dir / "nab_nyc_taxi.csv"), "--speedup", "360",
                 "--peak-rate", "800", "--duration", "60s", "--out", str(tmp_path), "--no-progress"])
    assert code == 0
    assert "windows" in capsys.readouterr().out


@pytest.mark.parametrize("args, needle", [
    (["--rate", "100", "--duration=-5s"], "--duration"),
    (["--rate", "100", "--duration", "0s"], "--duration"),
    (["--rate", "abc", "--duration", "5s"], "--rate"),
    (["--rate", "100", "--duration", "5s", "--config", "count=0"], "config.count"),
    (["--rate", "100", "--duration", "5s", "--seed", "x"], "--seed"),
    (["--trace", "/nonexistent/trace.csv", "--duration", "5s"], "trace.csv"),
    (["--rate", "100", "--duration", "5s", "--speedup", "10"], "--trace"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, args, needle):
    code = main(["testbed", "run", WC, *args, "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("augury testbed: error:") and err.count("\n") == 1 and needle in err


@pytest.mark.parametrize("fault, needle", [
    ("faults: [{type: slow_instance, operator: split, instance: 7, factor: 2, start_s: 1}]", "no such instance"),
    ("faults: [{type: slow_instance, operator: split, instance: 0, factor: 2, start_s: -1}]", "negative"),
    ("faults: [{type: typo, start_s: 1}]", "unknown fault type"),
])
def test_bad_fault_file_exits_2(tmp_path, capsys, fault, needle):
    path = tmp_path / "f.yaml"
    path.write_text(fault)
    code = main(["testbed", "run", WC, "--rate", "100", "--duration", "5s", "--faults", str(path),
                 "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1


def test_unreadable_trace_exits_2(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("timestamp,value\nyesterday,1\n")
    code = main(["testbed", "run", WC, "--trace", str(path), "--duration", "5s", "--out", str(tmp_path / "o"),
                 "--no-progress"])
    assert code == 2 and "unreadable trace" in capsys.readouterr().err


def test_settings_file_chooses_the_service_distribution(tmp_path, capsys):
    settings = tmp_path / "settings.yaml"
    settings.write_text("service_distribution: lognormal\nqueue_capacity: 50\n"
                        "operators: {split: {service_distribution: deterministic}}\n")
    out = tmp_path / "out"
    code = main(["testbed", "run", WC, "--rate", "300", "--duration", "10s", "--out", str(out),
                 "--settings", str(settings), "--queue", "80", "--json", "--no-progress"])
    assert code == 0
    # a different family gives different metrics than the default (exponential for SCV 1)
    assert main(["testbed", "run", WC, "--rate", "300", "--duration", "10s", "--out", str(tmp_path / "d"),
                 "--no-progress"]) == 0
    assert (out / "metrics.csv").read_text() != (tmp_path / "d" / "metrics.csv").read_text()


@pytest.mark.parametrize("text, needle", [
    ("service_distribution: weibull\n", "field 'service_distribution' = 'weibull'"),
    ("operators: {split: {service_distribution: pareto}}\n", "operators.split.service_distribution"),
    ("operators: {nosuch: {service_scv: 2}}\n", "'nosuch'"),
    ("servce_distribution: gamma\n", "field 'servce_distribution'"),
    ("restart_s: -3\n", "field 'restart_s' = -3"),
    ("[1, 2\n", "malformed settings file"),
])
def test_bad_settings_exit_2_naming_file_and_field(tmp_path, capsys, text, needle):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    code = main(["testbed", "run", WC, "--rate", "100", "--duration", "5s", "--settings", str(path),
                 "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert str(path) in err and needle in err, err


def test_settings_window_and_seed_are_used_unless_a_flag_overrides_them(tmp_path, capsys):
    """Issue 22: the settings file's window_s and seed were silently replaced by the flags' defaults."""
    settings = tmp_path / "s.yaml"
    settings.write_text("window_s: 5\nseed: 7\n")
    base = ["testbed", "run", WC, "--rate", "100", "--duration", "20s", "--settings", str(settings),
            "--no-progress", "--json"]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    assert set(pd.read_csv(tmp_path / "a" / "metrics.csv")["window_s"]) == {5.0}
    assert main([*base, "--out", str(tmp_path / "b"), "--window", "10s"]) == 0
    capsys.readouterr()
    assert set(pd.read_csv(tmp_path / "b" / "metrics.csv")["window_s"]) == {10.0}
    assert main([*base[:-2], "--seed", "7", "--out", str(tmp_path / "c"), "--no-progress"]) == 0
    same = [pd.read_csv(tmp_path / d / "metrics.csv") for d in ("a", "c")]
    pd.testing.assert_frame_equal(*same)  # the file's seed 7 == --seed 7
