"""``convergence``: the assessment of one run, starts that mean what they say, the policies'
advisor-mode history, and the --quick experiment through the harness (runs.csv, references found
without augury's planner)."""

from __future__ import annotations

import math

import networkx as nx
import pandas as pd
import pytest

from experiments.harness import ExperimentContext
from experiments.suite import convergence as conv
from experiments.suite.convergence import HistoryController, Params, assess

RUNS_COLUMNS = ("dag", "seed", "policy", "start", "step", "steps", "reached", "final_instances",
                "reference_instances", "over_provisioning", "slo_met")


def _timeline(instances, violated, applied, p99=None, history=0, backlog=None):
    """Windows of 60 policy s (1 simulated s each); the first ``history`` before the step."""
    n = len(instances)
    return pd.DataFrame({"t_s": [60.0 * (k + 1) for k in range(n)], "sim_s": [1.0 * (k + 1) for k in range(n)],
                         "dt_s": [60.0] * n, "instances": instances, "violated": violated, "applied": applied,
                         "violated_s": [60.0 * bool(v) for v in violated],
                         "p99_ms": p99 or [10.0] * n, "backlog": backlog or [0.0] * n,
                         "config": [{"a": i} for i in instances]})


def test_assess_one_step_to_the_reference_after_the_history():
    # 2 history windows at 4 instances; the step; one change to 8 at the first window after it.
    tl = _timeline([4, 4, 4, 8, 8, 8, 8, 8], [False, False, True, True, False, False, False, False],
                   [False, False, True, False, False, False, False, False], history=2)
    r = assess(tl, step_s=2.0, reference=8, new_rate=100.0, latency_slo_ms=50.0, tail_windows=3, time_scale=60.0)
    assert r["reached"] and r["steps"] == 1 and r["over_provisioning"] == 0 and r["slo_met"]
    assert r["reconfigurations"] == 1 and r["history_changes"] == 0 and r["converged_within"]
    assert r["time_to_reach_s"] == 300.0 - 120.0  # first clean window on the reference, from the step
    assert r["violation_minutes"] == 2.0  # post-step windows only


def test_assess_signed_over_provisioning_and_what_is_not_reached():
    over = _timeline([12, 12, 12, 12], [False] * 4, [False] * 4, history=1)
    r = assess(over, 1.0, reference=8, new_rate=100.0, latency_slo_ms=50.0, tail_windows=2)
    assert not r["reached"] and math.isnan(r["steps"]) and r["over_provisioning"] == pytest.approx(0.5)
    under = _timeline([6, 6, 6, 6], [False] * 4, [False] * 4, history=1)
    assert assess(under, 1.0, 8, 100.0, 50.0, tail_windows=2)["over_provisioning"] == pytest.approx(-0.25)
    # on the reference but the SLO missed at the end (median p99 of the tail above it): not reached
    slow = _timeline([8, 8, 8, 8], [False, False, True, True], [False] * 4, p99=[10, 10, 60, 70], history=1)
    r = assess(slow, 1.0, 8, 100.0, 50.0, tail_windows=2)
    assert not r["reached"] and not r["slo_met"]
    # ... unless it ends on the reference configuration itself: the reference's own miss, not the policy's
    r = assess(slow, 1.0, 8, 100.0, 50.0, tail_windows=2, reference_config={"a": 8})
    assert r["reached"] and r["on_reference"] and not r["slo_met"] and r["steps"] == 0
    r = assess(slow, 1.0, 8, 100.0, 50.0, tail_windows=2, reference_config={"b": 8})  # as many, not it
    assert not r["reached"] and not r["on_reference"]
    # a growing backlog at the end: the SLO is missed even with a low p99
    lag = _timeline([8, 8, 8, 8], [False] * 4, [False] * 4, backlog=[0, 0, 50, 500], history=1)
    assert not assess(lag, 1.0, 8, 100.0, 50.0, tail_windows=2)["slo_met"]
    # leaving the reference and coming back: counted from the return (the last run of good segments)
    back = _timeline([4, 4, 8, 4, 8, 8], [False, True, False, True, False, False],
                     [False, True, True, True, False, False], history=1)
    r = assess(back, 1.0, 8, 100.0, 50.0, tail_windows=2)
    assert r["reached"] and r["steps"] == 3 and r["reconfigurations"] == 3
    # within 10 % counts: 9 for 10 and 11 for 10 both reach
    assert assess(_timeline([9] * 3, [False] * 3, [False] * 3, history=1), 1.0, 10, 100.0, 50.0,
                  tail_windows=2)["over_provisioning"] == pytest.approx(-0.1)



def test_assess_reports_the_first_configuration_after_the_step_and_the_misses_line_counts_them():
    # drain then settle: 12 instances to drain the backlog, then the reference's 8
    drain = _timeline([4, 4, 12, 12, 8, 8, 8], [False, True, True, False, False, False, False],
                      [False, True, False, True, False, False, False], history=1)
    r = assess(drain, 1.0, 8, 100.0, 50.0, tail_windows=2)
    assert r["reached"] and r["steps"] == 2 and r["first_instances"] == 12
    assert assess(_timeline([8] * 3, [False] * 3, [False] * 3, history=1), 1.0, 8, 100.0, 50.0,
                  tail_windows=2)["first_instances"] == 8  # no change: the configuration at the step
    runs = pd.DataFrame([
        {"policy": "augury", "dag": "d", "reached": True, "steps": 1.0, "first_instances": 8,
         "reference_instances": 8, "over_provisioning": 0.0, "slo_met": True},
        {"policy": "augury", "dag": "d", "reached": True, "steps": 2.0, "first_instances": 12,
         "reference_instances": 8, "over_provisioning": 0.0, "slo_met": True},
        {"policy": "augury", "dag": "e", "reached": False, "steps": math.nan, "first_instances": 6,
         "reference_instances": 8, "over_provisioning": -0.25, "slo_met": True},
        {"policy": "ds2", "dag": "d", "reached": False, "steps": math.nan, "first_instances": 20,
         "reference_instances": 8, "over_provisioning": 1.5, "slo_met": True}])
    line = conv._augury_misses(runs, Params())
    assert "Of augury's 2 runs" in line and "(d 1, e 1)" in line
    assert "1 first scaled above it and settled on it one change later" in line
    assert "1 ended below it (1 of them meeting the SLO)" in line and "0 ended above it" in line

class _Controller:
    def __init__(self, policy):
        self.policy = policy
        self.name = "p"

    def start(self, bed, cfg):
        pass

    def step(self, bed, view, stats, config):
        return self.policy.decide(view.now_s, stats, dict(config))


def _stats(p, busy, bp=0.0, rate=100.0, arrival=None):
    from experiments.baselines import OperatorStats

    return {"s": OperatorStats(parallelism=1, processed_rate=rate, arrival_rate=arrival or rate, busy_mean=0.0,
                               busy_max=0.0,
                               backpressure_max=bp, output_rates={"a": rate}, backpressure_sum=bp),
            "a": OperatorStats(parallelism=p, processed_rate=rate, arrival_rate=rate, busy_mean=busy, busy_max=busy,
                               backpressure_max=0.0, instance_processed=(rate / p,) * p,
                               instance_queue=(5.0,) * p)}


def _view(k, step_windows=5):
    from experiments.replay import WindowView

    return WindowView(now_s=240.0 * k, sim_s=3.0 * k, settled=True)


def test_history_is_advisor_mode_for_every_peer():
    """In the history every peer sees every window and keeps its windows, but nothing is applied
    and no action is left in its state; at the step it acts on what it saw."""
    from experiments.baselines import DhalionPolicy, DS2Policy, FlinkAutoscalerPolicy

    g = nx.DiGraph()
    g.add_node("s", max_parallelism=1)
    g.add_node("a", max_parallelism=128)
    g.add_edge("s", "a", grouping="shuffle", selectivity=1.0)
    config = {"s": 1, "a": 2}
    flink = FlinkAutoscalerPolicy(g)
    ctl = HistoryController(_Controller(flink), step_sim_s=15.0)
    for k in range(1, 6):  # 20 minutes of 4-minute windows, the job saturated: Flink wants to scale up
        assert ctl.step(None, _view(k), _stats(2, 0.98, arrival=150.0), config) is None
    assert ctl.withdrawn >= 1 and not ctl.in_history
    assert len(flink._samples) == 4 and flink._collecting_since_s == 240.0 and flink._config == config
    new = ctl.step(None, _view(6), _stats(2, 0.98, arrival=150.0), config)
    assert new is not None and new["a"] > 2  # after the step, its full window decides at once

    dhalion = DhalionPolicy(g)
    ctl = HistoryController(_Controller(dhalion), step_sim_s=15.0)
    for k in range(1, 6):  # back pressure at a: Dhalion would scale it up every round
        assert ctl.step(None, _view(k), _stats(2, 0.99, bp=0.5), config) is None
    assert ctl.withdrawn == 5 and dhalion.actions == [] and dhalion._pending is None and dhalion.diagnoses
    assert ctl.step(None, _view(6), _stats(2, 0.99, bp=0.5), config)["a"] > 2

    ds2 = DS2Policy(g)
    ctl = HistoryController(_Controller(ds2), step_sim_s=15.0)
    for k in range(1, 6):
        assert ctl.step(None, _view(k), _stats(4, 0.2), {"s": 1, "a": 4}) is None  # DS2 would scale down
    assert ctl.withdrawn == 5

    # a switch at the step: the job is rescaled to the start configuration, not by the policy
    ctl = HistoryController(_Controller(DS2Policy(g)), step_sim_s=15.0, switch_to={"s": 1, "a": 1})
    outs = [ctl.step(None, _view(k), _stats(2, 0.5), config) for k in range(1, 6)]
    assert outs[:4] == [None] * 4 and outs[4] == {"s": 1, "a": 1}


@pytest.fixture(scope="module")
def random1():
    from experiments.randomdag import RandomDagSpec, random_model
    from experiments.reference import ConfirmSettings, References

    truth = random_model(1, RandomDagSpec(skew="none"), job="random-1")
    params = Params()
    rate, slo = conv.scale(truth, params)
    return truth, params, rate, slo, References(truth, ConfirmSettings(window_s=params.window_s, measure_s=20.0))


def test_starts_mean_what_they_say(random1):
    truth, params, rate, slo, refs = random1
    ref = None
    for step in conv.STEPS:
        for start in conv.STARTS:
            case = conv.make_case(truth, refs, step, start, rate, slo, params)
            ref = case.reference
            assert case.new_rate == rate and case.old_rate == pytest.approx(rate / conv.STEPS[step])
            if start == "under":
                assert case.start_instances < (1 - params.tolerance) * ref.instances
                assert case.start_utilization > params.utilization_ceiling and case.start_rate < rate
            else:
                assert case.start_instances > (1 + params.tolerance) * ref.instances
                assert case.start_utilization <= params.utilization_ceiling and case.start_rate > rate
            # the natural side starts on the reference for the old rate
            assert case.natural == ((start == "under") == (conv.STEPS[step] > 1))
            if case.natural:
                assert case.start_rate == case.old_rate
            # only a start that cannot carry the old rate is switched at the step
            assert case.switch == (step == "/3" and start == "under")
    assert 8 <= ref.instances <= params.target_instances + 1


def test_bundled_random_and_user_dags(tmp_path):
    from experiments.randomdag import write_model

    user = write_model(tmp_path / "mine.yaml", 42)
    ctx = ExperimentContext(workdir=tmp_path, models=(user,))
    names = [d.name for d in conv.dags(ctx, quick=False)]
    assert names == ["diamond", "pipeline", "wordcount", "random-1", "random-2", "random-3", "mine"]
    assert [d.name for d in conv.dags(ctx, quick=True)] == ["random-1", "mine"]
    kinds = {d.name: (d.kind, d.skewed) for d in conv.dags(ctx, quick=False)}
    assert kinds["diamond"] == ("bundled", False) and kinds["wordcount"] == ("bundled", True)
    assert kinds["random-1"][1] is False and kinds["random-2"][1] and kinds["random-3"][1]
    assert (tmp_path / "dags" / "random-2.yaml").is_file()


def test_augury_learns_once_per_dag_and_every_run_gets_that_model(tmp_path, monkeypatch):
    """Seeds vary the testbed, not the learning: one warm-up per DAG (the first seed's), its model
    handed to every case, seed and run of augury; the model file is kept with the warm-up."""
    learned, runs = [], []

    def fake_learn(truth, workdir, seed, attempts=3):
        learned.append((truth.job, seed))
        return truth.with_config({}), {"calibration_trust": 0.9}, "warm-up"

    def fake_run_one(dag, case, policy, params, slo, seed, run_seed, model=None):
        runs.append((dag.name, case.step, case.start, seed, policy, model))
        return {"dag": dag.name, "dag_kind": dag.kind, "skewed": dag.skewed, "seed": seed, "policy": policy,
                "start": case.start, "step": case.step, "steps": 1.0, "reached": True, "final_instances": 12,
                "reference_instances": 12, "over_provisioning": 0.0, "slo_met": True, "reconfigurations": 1,
                "stable_at_end": True, "sustains": True, "converged_within": True, "time_to_reach_s": 240.0,
                "violation_minutes": 0.0}
    monkeypatch.setattr(conv, "learn", fake_learn)
    monkeypatch.setattr(conv, "run_one", fake_run_one)
    result = conv.run(ExperimentContext(quick=True, seeds=(3, 4), workdir=tmp_path))
    assert learned == [("random-1", 3)]
    augury = [r for r in runs if r[4] == "augury"]
    assert len(augury) == len(conv.QUICK_CASES) * 2 and {r[3] for r in augury} == {3, 4}
    assert len({id(r[5]) for r in augury}) == 1 and augury[0][5] is not None
    assert all(r[5] is None for r in runs if r[4] != "augury")  # the peers get no model
    assert (tmp_path / "learn-random-1" / "learned_model.yaml").is_file()
    assert result.tables["dags"]["augury_learning"].tolist() == ["warm-up"]
    dags = result.tables["dags"].iloc[0]
    assert 0 < dags["sizing_margin"] < 1 and 0 < dags["ds2_sizing_margin"] < 1
    assert dags["window_rate_noise"] == pytest.approx((dags["new_rate"] * conv.Params().window_s) ** -0.5)


@pytest.mark.slow
@pytest.mark.spark
def test_quick_convergence_through_the_harness(tmp_path, monkeypatch, spark):
    """The --quick run: runs.csv has one row per run with the promised columns; every reference
    was found with scheduler.plan raising (the planner augury itself uses)."""
    import scheduler.plan
    from experiments import reference
    from experiments.harness import run_experiment

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    found = reference.find_reference
    calls = []

    def without_planner(*args, **kwargs):
        def boom(*a, **k):
            raise AssertionError("the reference search called scheduler.plan.plan")
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(scheduler.plan, "plan", boom)
            calls.append(args[1].rate)
            return found(*args, **kwargs)
    monkeypatch.setattr(reference, "find_reference", without_planner)

    run = run_experiment("convergence", quick=True, seed=0, workdir=tmp_path / "work", out=tmp_path / "out")
    assert not [line for line in run.result.summary.splitlines() if "FAILED" in line], run.result.summary
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert set(RUNS_COLUMNS) <= set(runs.columns)
    assert len(runs) == len(conv.QUICK_CASES) * len(conv.POLICIES) and set(runs["policy"]) == set(conv.POLICIES)
    assert set(zip(runs["step"], runs["start"])) == set(conv.QUICK_CASES) and set(runs["seed"]) == {0}
    assert ((runs["final_instances"] / runs["reference_instances"] - 1) - runs["over_provisioning"]).abs().max() < 1e-9
    reached = runs[runs["reached"]]
    assert reached["slo_met"].all() and (reached["steps"] >= 1).all()
    assert (reached["steps"] <= reached["reconfigurations"]).all()
    assert (reached["reconfigurations"] - reached["steps"] == reached["reconfigurations_after_reaching"]).all()
    assert ((reached["final_instances"] / reached["reference_instances"] - 1).abs() <= 0.1 + 1e-9).all()
    under = runs[runs["start"] == "under"]
    assert (under["start_instances"] < under["reference_instances"]).all()
    refs = pd.read_csv(tmp_path / "out" / "references.csv")
    assert calls and len(refs) == len(set(calls))  # every reference searched once, all without the planner
    assert (refs["simulated"] >= 1).all() and (refs["reference_instances"] > 0).all()
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert list(summary["policy"]) == list(conv.POLICIES)
    assert {"median_over_provisioning", "over_lo", "over_hi", "p10_over_provisioning", "p90_over_provisioning",
            "min_over_provisioning", "max_over_provisioning"} <= set(summary.columns)
    assert (summary["over_lo"] <= summary["median_over_provisioning"] + 1e-12).all()
    for name in ("by_dag", "dags", "references"):
        assert (tmp_path / "out" / f"{name}.csv").is_file()
    text = run.result.summary
    for words in ("Ground truth", "What each policy is given", "Sample", "What could still bias"):
        assert words in text
    assert 0 <= run.result.metrics["augury.one_step_share"] <= 1 and run.mlflow_run_id
    assert all(p.is_file() for p in run.result.figures.values())
