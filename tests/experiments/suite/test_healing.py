"""``healing``: the --quick experiment through the harness."""

from __future__ import annotations

import math

import pytest


@pytest.mark.slow
def test_quick_healing_through_the_harness(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    from experiments.harness import run_experiment

    run = run_experiment("healing", quick=True, seed=0, workdir=tmp_path / "work")
    runs = run.result.tables["runs"].set_index(["fault", "policy"])
    assert len(runs) == 4
    slow = runs.loc[("slow_instance", "augury")]
    # augury's loop names the slow instance and restarts it; detection precedes diagnosis.
    assert slow["diagnosis"] == "slow_instance split[0]"
    assert 0 < slow["detect_s"] <= slow["diagnose_s"]
    assert "restart_instance split[0]" in slow["actions"]
    hot = runs.loc[("hot_key", "augury")]
    assert hot["diagnosis"].startswith("data_skew count") and "report_skew count" in hot["actions"]
    # Dhalion's re-implementation has no slow-instance/skew diagnoser: never a correct diagnosis.
    assert math.isnan(runs.loc[("slow_instance", "dhalion"), "diagnose_s"])
    for _, row in runs.iterrows():
        if row["slo_violated_after_fault"] and row["recovered"]:
            assert row["recover_s"] > 0
