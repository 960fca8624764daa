"""``preemptive``: the --quick experiment (one day of the NYC-taxi trace) through the harness."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_quick_preemptive_through_the_harness(tmp_path, monkeypatch, traces_dir):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    from experiments.harness import run_experiment

    run = run_experiment("preemptive", quick=True, seed=0, workdir=tmp_path / "work")
    runs = run.result.tables["runs"].set_index("policy")
    from experiments.suite.preemptive import POLICIES

    assert set(runs.index) == set(POLICIES)
    assert (runs["instance_hours"] > 0).all() and (runs["violation_minutes"] >= 0).all()
    assert (runs["violation_minutes"] <= 24 * 60).all()
    assert runs.loc["static-peak", "reconfigurations"] == 0
    # The oracle decides every 4 h: at most 6 changes a day, and never more instance-hours than
    # static peak (it sizes for the peak of each interval, static for the day's peak).
    assert runs.loc["oracle", "reconfigurations"] <= 6
    assert runs.loc["oracle", "instance_hours"] <= runs.loc["static-peak", "instance_hours"] + 1e-9
    # augury's schedule was built from a fitted forecast and respects the daily budget.
    assert runs.loc["augury", "forecast_methods"] and runs.loc["augury", "planned_reconfigurations_max_24h"] <= 6
    # re-plans count the changes already made in the last 24 h: at most 6 a day in all
    assert runs.loc["augury", "reconfigurations"] <= 6
    m = run.result.metrics
    assert m["augury.instance_hours"] == pytest.approx(runs.loc["augury", "instance_hours"])
    # every applied change is in the changes table, per policy
    changes = run.result.tables["changes"]
    made = runs["reconfigurations"][runs["reconfigurations"] > 0]
    assert changes.groupby("policy").size().to_dict() == {p: int(n) for p, n in made.items()}
    assert all(p.is_file() for p in run.result.figures.values()) and run.mlflow_run_id


def test_a_user_trace_replays_its_last_days_after_its_history(tmp_path):
    import pandas as pd

    from experiments.harness import ExperimentError, check_inputs
    from experiments.suite import preemptive

    idx = pd.date_range("2024-03-01", "2024-03-20 23:30", freq="30min")
    path = tmp_path / "mine.csv"
    pd.DataFrame({"timestamp": idx.strftime("%Y-%m-%d %H:%M:%S"), "value": 100}).to_csv(path, index=False)
    file, hist_start, start = preemptive.user_trace(path, 1.0)
    assert file == str(path.resolve()) and pd.Timestamp(hist_start) == idx[0] and start == "2024-03-20"
    assert preemptive.trace_config("mine", preemptive.Params(), 1.0, 7, (file, hist_start, start)).start == start
    short = tmp_path / "short.csv"
    pd.DataFrame({"timestamp": idx[:30].strftime("%Y-%m-%d %H:%M:%S"), "value": 100}).to_csv(short, index=False)
    with pytest.raises(ExperimentError) as info:
        preemptive.user_trace(short, 1.0)
    assert info.value.field == "--trace"
    check_inputs(preemptive, seeds=(0, 1, 2), traces=(path,))  # it takes both
    assert preemptive.replay_seed(0, "nyc_taxi") == 1 and preemptive.replay_seed(2, "mine") >= 203


def test_changes_of_a_timeline_names_each_change_and_its_charge():
    import pandas as pd

    from experiments.suite.preemptive import changes_of

    # windows of 240 s: a scale-up applied in window 1 (its restart's windows 2-3 charged 240 + 60 s),
    # a scale-down in window 4 (charged 30 s in window 5)
    tl = pd.DataFrame({
        "t_s": [240.0 * k for k in range(1, 8)],
        "instances": [2, 2, 4, 4, 4, 3, 3],
        "capacity": [1000.0, 1000.0, 2000.0, 2000.0, 2000.0, 1500.0, 1500.0],
        "arrival_rate": [500.0, 900.0, 950.0, 600.0, 300.0, 300.0, 300.0],
        "applied": [False, True, False, False, True, False, False],
        "settled": [True, True, False, False, True, False, True],
        "violated_s": [0.0, 0.0, 240.0, 60.0, 0.0, 30.0, 0.0]})
    up, down = changes_of(tl)
    assert (up["direction"], up["instances_before"], up["instances_after"]) == ("up", 2, 4)
    assert up["t_h"] == pytest.approx(480.0 / 3600.0) and up["charged_s"] == pytest.approx(300.0)
    assert up["rho_at_change"] == pytest.approx(900.0 / 2000.0) and up["new_max_rate"] == 2000.0
    assert (down["direction"], down["instances_after"], down["charged_s"]) == ("down", 3, 30.0)
    assert down["rho_at_change"] == pytest.approx(300.0 / 1500.0)


def test_goals_read_perfect_foresights_frontier_within_the_flink_rules_hours():
    """The fewest violation minutes a hindsight schedule reaches within the Flink rules'
    instance-hours, and whether that is 90 % below them; hindsight rows are never peers."""
    import pandas as pd

    from experiments.suite.preemptive import goals

    def rows(trace, **policies):
        return [{"dag": "wordcount", "trace": trace, "policy": p, "violation_minutes_per_day": v,
                 "instance_hours_per_day": h, "instance_hours_over_hindsight": 1.0, "reconfigurations_per_day": 2.0}
                for p, (v, h) in policies.items()]
    table = pd.DataFrame(
        rows("a", augury=(5.0, 100.0), **{"flink-autoscaler": (10.0, 90.0), "hindsight/5": (0.5, 95.0),
                                          "hindsight/20": (3.0, 85.0), "hindsight/60": (6.0, 80.0)})
        + rows("b", augury=(5.0, 100.0), **{"flink-autoscaler": (10.0, 120.0), "hindsight/5": (0.8, 110.0),
                                            "hindsight/20": (3.0, 100.0)})
        + rows("c", augury=(5.0, 100.0), **{"flink-autoscaler": (10.0, 50.0), "hindsight/60": (1.0, 60.0)}))
    g = goals(table).set_index("trace")
    # a: hindsight/5 is over Flink's hours, hindsight/20 the best within: 70 % below, not 90 %
    assert g.loc["a", "hindsight_best_within_flink_hours"] == "hindsight/20"
    assert g.loc["a", "hindsight_reduction_vs_flink"] == pytest.approx(0.7)
    assert not g.loc["a", "both_goals_reachable_in_hindsight"]
    assert g.loc["a", "dominated_by"] == ""  # hindsight/20 has both fewer, but it is no peer
    assert g.loc["b", "hindsight_best_within_flink_hours"] == "hindsight/5"
    assert g.loc["b", "both_goals_reachable_in_hindsight"]
    assert g.loc["c", "hindsight_best_within_flink_hours"] == ""
    assert not g.loc["c", "both_goals_reachable_in_hindsight"]
