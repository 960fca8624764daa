"""``augury demo --quick``: the whole pipeline runs and reports what it promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from augury.cli import main


@pytest.mark.slow
@pytest.mark.spark
def test_quick_demo_end_to_end(tmp_path, capsys, traces_dir, spark):
    assert main(["demo", "--quick", "--json", "--out", str(tmp_path / "demo")]) == 0
    assert spark.sparkContext._jsc is not None  # the session it did not start is still running
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == {"augury", "flink-autoscaler", "static-peak"}
    for result in out["policies"].values():
        assert result["instance_hours"] > 0 and result["slo_violation_minutes"] >= 0
    # Calibration through ingest + Spark recovers the testbed's truth.
    assert max(abs(v) for v in out["calibration"]["errors"].values()) < 0.05
    assert out["reconfigurations_planned"] >= 1
    # The pre-emptive schedule (scheduler.schedule) keeps its daily budget of 6 changes (the guard
    # would let scale-ups past a spent budget, budget_spares_scale_ups; the quick day needs none).
    assert out["policies"]["augury"]["reconfigurations"] <= 6
    assert all(Path(p).is_file() for p in out["plots"]) and out["mlflow_run_id"]
    # Spark's and mlflow's own output went to a log file in --out (--verbose keeps it on the terminal)
    assert out["log_file"] == str(tmp_path / "demo" / "augury-demo.log") and Path(out["log_file"]).is_file()


def test_missing_trace_is_bad_input(capsys, tmp_path):
    assert main(["demo", "--quick", "--trace", str(tmp_path / "none.csv")]) == 2
    assert "--trace" in capsys.readouterr().err


def test_summary_compares_instance_hours_with_the_flink_rules_too():
    from types import SimpleNamespace as NS

    from augury.commands.demo import summary

    results = (NS(policy="augury", violation_minutes=6.0, reconfigurations=6, instance_hours=145.0),
               NS(policy="flink-autoscaler", violation_minutes=20.0, reconfigurations=4, instance_hours=100.0),
               NS(policy="static-peak", violation_minutes=0.0, reconfigurations=0, instance_hours=192.0))
    report = NS(results=results, calibration_errors={"x": 0.005}, schedule=[1, 2])
    text = summary(report, NS(replay_day="2014-07-22"))
    assert "24% fewer than provisioning for the peak all day (192)" in text  # 145 / 192 - 1
    assert "45% more than the Flink autoscaler's rules (100)" in text
