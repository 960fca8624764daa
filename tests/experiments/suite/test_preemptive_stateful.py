"""``preemptive-stateful``: the --quick variant (one day of the NYC-taxi trace, 300 s restarts)."""

from __future__ import annotations

import pytest


def test_the_stateful_job_restarts_for_base_plus_state_over_rate():
    from experiments.bundled import data_dir
    from experiments.suite import preemptive, preemptive_stateful as ps
    from modeler.restart import restart_time_s

    truth = preemptive.job_truth(preemptive.DAGS[0], data_dir(), preemptive.Params())
    for state_mb, expected in zip(ps.STATE_MB, (60.0, 150.0, 300.0)):
        job = ps.stateful(truth, state_mb)
        assert job.state_mb == state_mb
        assert restart_time_s(job, {"count": 1}, {"count": 2}) == pytest.approx(expected)


@pytest.mark.slow
def test_quick_stateful_replay_through_the_harness(tmp_path, monkeypatch, traces_dir):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    from experiments.harness import run_experiment
    from experiments.suite.preemptive_stateful import POLICIES

    run = run_experiment("preemptive-stateful", quick=True, seed=0, workdir=tmp_path / "work")
    runs = run.result.tables["runs"].set_index("policy")
    assert set(runs.index) == set(POLICIES) and (runs["restart_s"] == 300.0).all()
    # every change restarts the stateful job for 300 s: each costs at least 5 minutes
    assert (runs["violation_minutes"] >= 5.0 * runs["reconfigurations"] - 1e-9).all()
    assert (runs["instance_hours"] > 0).all() and run.mlflow_run_id
