"""augury schedule: JSON contract, readable table, plot file, exit codes, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from augury.cli import main
from modeler.modelfile import load_model
from modeler.queueing import predict
from tests.conftest import EXAMPLES

WORDCOUNT = str(EXAMPLES / "wordcount.yaml")

KEYS = {"now", "feasible", "reasons", "current_config", "reconfigurations", "changes",
        "max_reconfigurations_in_24h", "peak_instances", "instance_hours", "model", "series",
        "forecast_method", "quantile", "horizon_s", "step_s", "aggregate", "scale", "current_load",
        "lead_time_s", "stabilization_s", "max_reconfigurations_per_day", "reserved_reconfigurations",
        "utilization_target",
        "latency_slo_ms", "latency_stat", "steps"}
RECONF_KEYS = {"issue_at", "effective_at", "segment_start", "config", "instances", "level",
               "direction", "late", "reason"}


@pytest.fixture(scope="module")
def rates(tmp_path_factory):
    """16 days of 30-min rates with a daily cycle between ~300 and ~2,700 tuples/s."""
    idx = pd.date_range("2026-03-01", periods=16 * 48, freq="30min")
    hour = idx.hour + idx.minute / 60
    rng = np.random.default_rng(7)
    values = 1500 - 1200 * np.cos(2 * np.pi * (hour - 4) / 24) + rng.normal(0, 40, len(idx))
    path = tmp_path_factory.mktemp("series") / "rates.csv"
    pd.DataFrame({"timestamp": idx.strftime("%Y-%m-%d %H:%M:%S"), "value": values.round(1)}).to_csv(path, index=False)
    return str(path)


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def json_run(rates, tmp_path_factory):
    plot = tmp_path_factory.mktemp("plot") / "schedule.png"
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["schedule", WORDCOUNT, "--series", rates, "--horizon", "24h", "--max-reconfigs-per-day", "6",
                     "--json", "--plot", str(plot)])
    return code, out.getvalue(), err.getvalue(), plot


def test_json_contract_budget_and_capacity(json_run, rates):
    code, out, err, plot = json_run
    assert code == 0 and not err
    data = json.loads(out)
    assert set(data) == KEYS
    assert data["feasible"] is True and data["quantile"] == 0.9 and data["horizon_s"] == 86400
    assert data["series"] == rates and data["step_s"] == 1800 and data["lead_time_s"] == 300
    assert data["reconfigurations"] and all(set(r) == RECONF_KEYS for r in data["reconfigurations"])
    assert data["reconfigurations"][0]["direction"] == "initial"
    assert 1 <= data["max_reconfigurations_in_24h"] <= 6
    assert len(data["steps"]) == 48
    # The first forecast step starts at now (the end of the last measured step).
    assert data["steps"][0]["timestamp"] == data["now"]
    model = load_model(WORDCOUNT)
    for step in data["steps"]:
        assert step["capacity"] >= step["forecast"] * (1 - 1e-9)  # capacity covers the quantile path
        assert step["forecast"] >= step["forecast_median"] - 1e-9
    # Capacity is 0.7 x max rate of the configuration in force.
    first = data["reconfigurations"][0]
    assert data["steps"][0]["capacity"] == pytest.approx(0.7 * predict(model, first["config"], 1.0).max_rate)
    # Scale-ups are issued the lead time before their segment.
    for r in data["reconfigurations"][1:]:
        if r["direction"] == "up" and not r["late"]:
            assert pd.Timestamp(r["segment_start"]) - pd.Timestamp(r["issue_at"]) == pd.Timedelta(minutes=5)
    assert plot.is_file() and plot.stat().st_size > 10_000


def test_readable_table(capsys, rates):
    code, out, err = _run(capsys, ["schedule", WORDCOUNT, "--series", rates, "--horizon", "12h",
                                   "--quantile", "0.5", "--current-config", "split=2,count=7"])
    assert code == 0 and not err
    assert out.startswith("FEASIBLE: ")
    assert "issue at" in out and "effective at" in out and "config" in out
    assert "source=1,split=" in out


def test_running_config_is_kept_when_it_covers(capsys, rates):
    code, out, _ = _run(capsys, ["schedule", WORDCOUNT, "--series", rates, "--horizon", "6h",
                                 "--current-config", "split=8,count=40", "--json"])
    assert code == 0
    data = json.loads(out)
    assert data["reconfigurations"][0]["direction"] == "keep"
    assert data["current_config"] == {"source": 1, "split": 8, "count": 40}


def test_infeasible_exits_1(capsys, rates):
    # A latency SLO below the no-queueing floor: no configuration meets it.
    code, out, _ = _run(capsys, ["schedule", WORDCOUNT, "--series", rates, "--horizon", "6h",
                                 "--latency-slo-ms", "0.01", "--json"])
    assert code == 1
    data = json.loads(out)
    assert data["feasible"] is False and data["reasons"]


@pytest.mark.parametrize("extra,field", [
    (["--quantile", "1.5"], "--quantile"),
    (["--quantile", "x"], "--quantile"),
    (["--lead-time", "soon"], "--lead-time"),
    (["--stabilization", "an hour"], "--stabilization"),
    (["--max-reconfigs-per-day", "0"], "--max-reconfigs-per-day"),
    (["--reserved-reconfigs", "12"], "--reserved-reconfigs"),
    (["--utilization-target", "2"], "--utilization-target"),
    (["--horizon", "0h"], "--horizon"),
    (["--scale", "0"], "--scale"),
    (["--current-config", "nosuch=3"], "--current-config"),
    (["--current-config", "split=x"], "--current-config"),
    (["--step", "0m"], "--step"),
    (["--plot", "/no/such/dir/x.png"], "--plot"),
])
def test_bad_flags_one_line_exit_2(capsys, rates, extra, field):
    argv = ["schedule", WORDCOUNT, "--series", rates, "--horizon", "6h"] + extra
    if "--horizon" in extra:
        argv = ["schedule", WORDCOUNT, "--series", rates] + extra
    code, out, err = _run(capsys, argv)
    assert code == 2 and not out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("augury schedule: error: ") and field in lines[0]


def test_bad_series_files_exit_2(capsys, tmp_path, rates):
    missing = tmp_path / "missing.csv"
    code, _, err = _run(capsys, ["schedule", WORDCOUNT, "--series", str(missing), "--horizon", "6h"])
    assert code == 2 and str(missing) in err and len(err.strip().splitlines()) == 1
    short = tmp_path / "short.csv"
    short.write_text("timestamp,value\n2026-01-01 00:00,1\n2026-01-01 00:30,2\n2026-01-01 01:00,3\n")
    code, _, err = _run(capsys, ["schedule", WORDCOUNT, "--series", str(short), "--horizon", "6h"])
    assert code == 2 and str(short) in err and "too little history" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,value\n2026-01-01 00:00,1\n2026-01-01 00:30,abc\n")
    code, _, err = _run(capsys, ["schedule", WORDCOUNT, "--series", str(bad), "--horizon", "6h"])
    assert code == 2 and "abc" in err
    code, _, err = _run(capsys, ["schedule", str(tmp_path / "nomodel.yaml"), "--series", rates, "--horizon", "6h"])
    assert code == 2 and "nomodel.yaml" in err
