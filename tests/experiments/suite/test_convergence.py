"""``convergence``: the assessment of one run, and the --quick experiment through the harness."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from experiments.suite.convergence import assess


def _timeline(instances, violated, applied):
    """Settled windows of 60 s, each violated one charged whole (``experiments.replay.drive``)."""
    n = len(instances)
    return pd.DataFrame({"t_s": [60.0 * (k + 1) for k in range(n)], "dt_s": [60.0] * n,
                         "instances": instances, "violated": violated, "applied": applied,
                         "violated_s": [60.0 * bool(v) for v in violated]})


def test_assess_one_step_to_the_cheapest():
    # 4 instances (violating), scale to 8 at window 1; from window 3 on the SLO is met.
    tl = _timeline([4, 4, 8, 8, 8, 8, 8, 8, 8, 8], [True, True, True, False, False, False, False, False, False, False],
                   [False, True] + [False] * 8)
    r = assess(tl, cheapest=8, tolerance=0.1, tail_windows=3)
    assert r["reached"] and r["steps"] == 1 and r["over_provisioning"] == 0
    assert r["time_to_reach_s"] == 240.0  # the first non-violated window on the reached configuration
    assert r["violation_minutes"] == 3.0


def test_assess_over_provisioned_or_violating_is_not_reached():
    over = _timeline([4, 10, 10, 10], [True, False, False, False], [True, False, False, False])
    r = assess(over, cheapest=8, tolerance=0.1, tail_windows=2)
    assert not r["reached"] and math.isnan(r["steps"]) and r["over_provisioning"] == pytest.approx(0.25)
    short = _timeline([8, 8, 8, 8], [False, False, True, True], [False] * 4)
    r = assess(short, cheapest=8, tolerance=0.1, tail_windows=2)
    assert not r["reached"] and not r["final_slo_met"]
    # Leaving a good configuration for a bad one and coming back: counted from the return.
    back = _timeline([8, 4, 8, 8], [False, True, False, False], [True, True, False, False])
    r = assess(back, cheapest=8, tolerance=0.1, tail_windows=2)
    assert r["reached"] and r["steps"] == 2


@pytest.mark.slow
def test_quick_convergence_through_the_harness(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    from experiments.harness import run_experiment

    run = run_experiment("convergence", quick=True, seed=0, workdir=tmp_path / "work")
    runs, summary = run.result.tables["runs"], run.result.tables["summary"]
    from experiments.suite.convergence import FULL_EXAMPLES, POLICIES

    assert not [line for line in run.result.summary.splitlines() if "FAILED" in line], run.result.summary
    assert len(runs) == len(FULL_EXAMPLES) * 2 * len(POLICIES) and set(runs["policy"]) == set(POLICIES)
    assert (runs["cheapest_instances"] > 0).all() and runs["cheapest_feasible"].all()
    assert ((runs["final_instances"] / runs["cheapest_instances"] - 1) - runs["over_provisioning"]).abs().max() < 1e-9
    reached = runs[runs["reached"]]
    assert (reached["steps"] <= reached["reconfigurations"]).all() and reached["final_slo_met"].all()
    # x5 from an under-provisioned start: augury (on its learned model) acts and ends meeting the
    # SLO. Not ">= cheapest_instances": that reference is plan(truth) at 0.7 (issue 19), and the
    # learned model meets the SLO with fewer (6 vs 8 on seed 0).
    a = runs[(runs["policy"] == "augury") & (runs["step"] == "x5")].iloc[0]
    assert a["reconfigurations"] >= 1 and a["final_slo_met"]
    assert set(summary["policy"]) == set(runs["policy"])
    assert 0 <= run.result.metrics["augury.reached_share"] <= 1
    assert all(p.is_file() for p in run.result.figures.values()) and run.mlflow_run_id
