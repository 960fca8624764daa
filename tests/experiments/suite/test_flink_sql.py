"""flink-sql's pure parts (no cluster): DS2's linear extrapolation, the pooled true rates, the
error summaries split at the core count, the cheapest measured configuration and the one-step
verdict, on constructed numbers. The live quick run is tests/experiments/flink/test_flink_sql_quick.py
(it needs the session cluster of that directory's conftest.py)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from experiments.suite import flink_sql as fs


def test_pooled_true_rates_leave_out_operators_without_busy_time():
    rows = [{"operator": "Calc", "processed_rate": 1000.0, "busy_mean": 0.25, "parallelism": 2},
            {"operator": "Calc", "processed_rate": 3000.0, "busy_mean": 0.5, "parallelism": 1},
            {"operator": "bid", "processed_rate": 1000.0, "busy_mean": float("nan"), "parallelism": 1},
            {"operator": "Agg", "processed_rate": 0.0, "busy_mean": 0.1, "parallelism": 1}]
    rates = fs.pooled_true_rates(rows)
    # (1000 + 3000) tuples over (0.25 * 2 + 0.5 * 1) busy instance-seconds
    assert rates == {"Calc": pytest.approx(4000.0)}


def test_ds2_linear_is_the_bottleneck_scaled_linearly():
    rates = {"Calc": 100_000.0, "Agg": 20_000.0}
    visits = {"Calc": 1.0, "Agg": 0.5, "bid": 1.0}
    # Calc: 100k * 3 / 1 = 300k; Agg: 20k * 2 / 0.5 = 80k -> Agg bounds
    assert fs.ds2_linear_max_rate(rates, visits, {"bid": 1, "Calc": 3, "Agg": 2}) == pytest.approx(80_000.0)
    # doubling every parallelism doubles DS2's rate (linear), whatever the cores
    assert fs.ds2_linear_max_rate(rates, visits, {"bid": 1, "Calc": 6, "Agg": 4}) == pytest.approx(160_000.0)
    assert math.isinf(fs.ds2_linear_max_rate({}, visits, {"Calc": 1}))


def _table():
    return pd.DataFrame([
        {"query": "q5", "instances": 5, "above_cores": True, "measured_max_rate": 100.0,
         "max_rate_error": 0.05, "ds2_error": 0.5},
        {"query": "q5", "instances": 4, "above_cores": True, "measured_max_rate": 80.0,
         "max_rate_error": -0.2, "ds2_error": 1.0},
        {"query": "q5", "instances": 2, "above_cores": False, "measured_max_rate": 60.0,
         "max_rate_error": 0.1, "ds2_error": 0.0},
        {"query": "q1", "instances": 3, "above_cores": True, "measured_max_rate": 200.0,
         "max_rate_error": float("nan"), "ds2_error": 0.1}])


def test_error_summary_and_split_at_the_core_count():
    t = _table()
    q5 = t[t["query"] == "q5"]
    assert fs.error_summary(q5["max_rate_error"]) == {"n": 3, "median": pytest.approx(0.1),
                                                       "within": pytest.approx(2 / 3)}
    above = fs.error_summary(q5[q5["above_cores"]]["max_rate_error"])
    assert above["n"] == 2 and above["median"] == pytest.approx(0.125) and above["within"] == 0.5
    empty = fs.error_summary(t[t["query"] == "q1"]["max_rate_error"])  # nan errors are left out
    assert empty["n"] == 0 and math.isnan(empty["median"])
    assert fs.rel_error(110.0, 100.0) == pytest.approx(0.1) and math.isnan(fs.rel_error(1.0, 0.0))


def test_cheapest_measured_configuration_and_one_step_verdict():
    t = _table()
    assert fs.cheapest_carrying(t, "q5", 70.0) == 4
    assert fs.cheapest_carrying(t, "q5", 90.0) == 5
    assert fs.cheapest_carrying(t, "q5", 150.0) is None
    assert fs.one_step_verdict(96.0, 0.05, 100.0)
    assert not fs.one_step_verdict(94.0, 0.0, 100.0)  # short of the target
    assert not fs.one_step_verdict(100.0, 0.2, 100.0)  # sustained back pressure


def test_two_passes_give_every_configuration_the_same_mean_time_in_the_job():
    one = fs.measurement_order(2, 3, 1)
    assert one == [("calibration", 0), ("calibration", 1), ("test", 0), ("test", 1), ("test", 2)]
    two = fs.measurement_order(2, 3, 2)
    assert two[:5] == one and two[5:] == one[::-1]
    # a drift linear in time: each configuration's mean slot is the middle of the sequence
    slots: dict[tuple[str, int], list[int]] = {}
    for slot, step in enumerate(two):
        slots.setdefault(step, []).append(slot)
    assert {sum(v) / len(v) for v in slots.values()} == {(len(two) - 1) / 2}
    from experiments.harness import ExperimentError
    with pytest.raises(ExperimentError):
        fs.measurement_order(2, 3, 3)


def test_source_limited_when_no_operator_held_the_source_back():
    assert fs.source_limited(0.0, 0.4)  # nothing back-pressured, nothing busy: the datagen's limit
    assert not fs.source_limited(0.3, 0.5)  # q8-like: an operator back-pressured the source
    assert not fs.source_limited(0.0, 0.95)  # q1 Calc=1: the only operator flat out
    assert fs.source_limited(0.0, float("nan"))


def _measure(rate, bp=0.0):
    return {"rate": rate, "rate_sd": 1.0, "bp_mean": bp, "bp_max": bp, "bp_operator": "Calc" if bp > 0 else "",
            "busy": {"Calc": 0.5}, "config": {}}


def test_result_tables_metrics_and_summary():
    s = fs._settings(quick=True)
    rows = [{"query": "q5", "configuration": "Calc=1", "instances": 4, "above_cores": True,
             "predicted_max_rate": 105.0, "ds2_linear_max_rate": 150.0, "measured_max_rate": 100.0,
             "measured_sd": 1.0, "max_rate_error": 0.05, "ds2_error": 0.5, "unscaled_error": 0.1,
             "source_limited": False, "busiest": "Calc"},
            {"query": "q5", "configuration": "Calc=2", "instances": 6, "above_cores": True,
             "predicted_max_rate": 100.0, "ds2_linear_max_rate": 300.0, "measured_max_rate": 125.0,
             "measured_sd": 1.0, "max_rate_error": -0.2, "ds2_error": 1.4, "unscaled_error": -0.3,
             "source_limited": True, "busiest": "Calc"}]
    step = {"query": "q5", "target": 100.0, "start": {"Calc": 1}, "planned": {"Calc": 3}, "feasible": True,
            "planned_instances": 6, "predicted_max_at_plan": 150.0, "before": _measure(60.0, 0.8),
            "after": _measure(99.0, 0.01), "restart_s": 3.0}
    out = {"cores": 2, "queries": {"q5": {"rows": rows, "calib_rows": [], "fits": {
        "Calc": {"service_ms": 0.01, "cpu_share": 0.9, "cpu_share_source": "measured"}},
        "true_rates": {"Calc": 1e5}, "visits": {"Calc": 1.0}, "step": step, "rescales": [], "topology": {},
        "capacity_scale": 1.05}}}
    res = fs._result(s, out, 100.0)
    # the model before its capacity scale is reported beside it
    assert res.metrics["max_rate_abs_error_median_unscaled"] == pytest.approx(0.2)
    assert res.metrics["q5.capacity_scale"] == 1.05 and res.tables["fits"]["capacity_scale"].iloc[0] == 1.05
    assert res.tables["by_query"]["median_abs_error_unscaled"].iloc[0] == pytest.approx(0.2)
    assert res.metrics["max_rate_abs_error_median"] == pytest.approx(0.125)
    assert res.metrics["share_within_15pct"] == 0.5 and res.metrics["test_configs_above_cores"] == 2
    assert res.metrics["ds2_abs_error_median"] == pytest.approx(0.95)
    assert res.metrics["one_step_successes"] == 1.0 and res.metrics["source_limited_configs"] == 1.0
    one = res.tables["one_step"].iloc[0]
    # the cheapest measured configuration carrying 100/s has 4 instances: 6 is more than 10 % above
    assert one["cheapest_measured_instances"] == 4 and not one["within_10pct_of_cheapest"]
    assert not one["start_carried_target"]
    assert "missed" in res.summary and "1/1 queries met the target" in res.summary
    # the step met its target but over-provisioned: issue 23's step goal counts both
    assert res.metrics["one_step_within_10pct"] == 0.0 and res.metrics["one_step_goal_met"] == 0.0
    assert not res.tables["by_query"]["one_step_within_10pct"].iloc[0]
    assert one["after_backpressure_operator"] == "Calc" and "back pressure 0." not in res.summary
    # a step that failed on back pressure names the operator in the summary
    failed = dict(step, after=dict(_measure(99.0, 0.4), bp_operator="GlobalWindowAggregate"))
    res = fs._result(s, {**out, "queries": {"q5": {**out["queries"]["q5"], "step": failed}}}, 100.0)
    assert res.tables["one_step"]["after_backpressure_operator"].iloc[0] == "GlobalWindowAggregate"
    assert "one step FAILED (back pressure 0.40 at GlobalWindowAggregate)" in res.summary
    assert "0/1 planned at most 10 %" in res.summary and "0/1 both" in res.summary


def test_cores_used_are_cpu_second_differences_over_the_interval():
    before = {"machine": 100.0, "cluster": 40.0, "source_threads": 10.0}
    after = {"machine": 120.0, "cluster": 52.0, "source_threads": 19.5}
    assert fs.cores_used(before, after, 10.0) == {"machine": 2.0, "cluster": 1.2, "source_threads": 0.95}
    assert all(v != v for v in fs.cores_used(before, after, 0.0).values())  # nan


def test_machine_busy_cpu_leaves_idle_and_iowait_out():
    from experiments.flink.cluster import machine_busy_cpu_s

    stat = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\n"
    assert machine_busy_cpu_s(stat, 100) == pytest.approx((100 + 5 + 50 + 3 + 2) / 100)
    with pytest.raises(ValueError):
        machine_busy_cpu_s("intr 1 2 3\n", 100)


def test_one_step_plans_within_the_clusters_slots():
    """A target the model thinks out of reach gets the most the cluster can run (every vertex at
    the slot count), which can be applied and measured, not the topology's 128 subtasks."""
    from experiments.suite.flink_sql import SLOTS, within_slots
    from modeler.modelfile import parse_model
    from scheduler.plan import PlanConfig, plan

    model = parse_model({"augury": 1, "job": "q", "operators": [
        {"name": "bid", "role": "source", "parallelism": 1},
        {"name": "Calc", "parallelism": 1, "service_time_ms": 0.01, "max_parallelism": 128}],
        "edges": [{"from": "bid", "to": "Calc"}]})
    capped = within_slots(model, SLOTS)
    assert capped.operator("Calc").max_parallelism == SLOTS and capped.operator("bid").max_parallelism == SLOTS
    p = plan(capped, 10_000_000.0, PlanConfig(utilization_target=0.7))  # 10 M/s: out of reach
    assert not p.feasible and max(p.config.values()) <= SLOTS and p.config["Calc"] == SLOTS


def _op(name, rate, *, source=False, out=None):
    from scheduler.observe import OperatorWindow

    return OperatorWindow(operator=name, parallelism=1, is_source=source, processed_rate=rate, arrival_rate=rate,
                          busy_mean=float("nan") if source else 0.5, busy_max=0.5, backpressure_max=0.0,
                          backpressure_mean=0.0, queue_len_total=None, source_lag=0.0,
                          output_rates=out or {}, instances=())


def test_the_most_back_pressured_operator_is_the_highest_on_average_sources_left_out():
    from dataclasses import replace

    from scheduler.observe import JobWindow

    def window(bps):
        ops = {"person": replace(_op("person", 1e5, source=True), backpressure_max=0.9)}
        ops.update({k: replace(_op(k, 1e5), backpressure_max=v) for k, v in bps.items()})
        return JobWindow(start_s=0.0, window_s=4.0, job="j", config={}, operators=ops)

    # Calc's one spike (0.9) averages below the aggregate's steady 0.4; the source's 0.9 is no operator's
    windows = [window({"Calc": 0.9, "Agg": 0.4}), window({"Calc": 0.0, "Agg": 0.4}), window({"Calc": 0.0, "Agg": 0.4})]
    assert fs.most_backpressured(windows) == "Agg"
    assert fs.most_backpressured([window({"Calc": 0.0, "Agg": 0.0})]) == ""


def test_calibration_source_rates_are_the_records_in_behind_each_source():
    """At saturation the datagen's configured rate is not what it generates: each source's rate
    is the records in of the vertex behind it (its own counter reads a few % off), and a vertex
    fed by two sources is split by their own counts."""
    from scheduler.flink import Edge, JobGraph, Vertex
    from scheduler.observe import JobWindow

    def v(name):
        return Vertex(id=name, name=name, operator=name, parallelism=1, status="RUNNING", start_time_ms=0)

    graph = JobGraph(job_id="j", name="j", state="RUNNING", vertices=tuple(v(n) for n in ("person", "auction", "Calc", "Calc-2", "Join")),
                     edges=(Edge("person", "Calc", "REBALANCE"), Edge("auction", "Calc-2", "REBALANCE"),
                            Edge("person", "Join", "HASH"), Edge("auction", "Join", "HASH")))
    w = JobWindow(start_s=0.0, window_s=4.0, job="j", config={}, operators={
        "person": _op("person", 2_000_000.0, source=True, out={"Calc": 98_000.0, "Join": 30_000.0}),
        "auction": _op("auction", 2_000_000.0, source=True, out={"Calc-2": 205_000.0, "Join": 10_000.0}),
        "Calc": _op("Calc", 100_000.0), "Calc-2": _op("Calc-2", 200_000.0), "Join": _op("Join", 40_000.0)})
    rates = fs.source_input_rates(w, ["person", "auction"], graph)
    assert rates == {"person": pytest.approx(100_000.0 + 30_000.0), "auction": pytest.approx(200_000.0 + 10_000.0)}
    w2 = fs.with_source_rates(w, rates)
    assert w2.operators["person"].processed_rate == pytest.approx(130_000.0)
    assert w2.operators["auction"].arrival_rate == pytest.approx(210_000.0)
    assert w2.operators["Calc"] == w.operators["Calc"]


def test_a_two_input_prediction_is_made_at_the_mix_the_measured_job_ran_at():
    """Two sources with paths of different cost: the max rate depends on the mix. The measured
    windows' mix (shares of the tuples the sources generated over them) sets the model's
    ``rate_share``; a one-source model is left as it is; a mix missing a source is an error."""
    from experiments.harness import ExperimentError
    from modeler.modelfile import parse_model
    from modeler.queueing import predict

    model = parse_model({"augury": 1, "job": "q8", "operators": [
        {"name": "person", "role": "source", "parallelism": 1},
        {"name": "auction", "role": "source", "parallelism": 1},
        {"name": "Calc", "parallelism": 1, "service_time_ms": 0.01},
        {"name": "Calc-2", "parallelism": 1, "service_time_ms": 0.002}],
        "edges": [{"from": "person", "to": "Calc"}, {"from": "auction", "to": "Calc-2"}]})
    mix = fs.source_mix([{"person": 20_000.0, "auction": 80_000.0}, {"person": 30_000.0, "auction": 70_000.0}])
    assert mix == {"person": pytest.approx(0.25), "auction": pytest.approx(0.75)}
    assert fs.source_mix([{"person": 0.0, "auction": 0.0}]) == {"person": 0.5, "auction": 0.5}
    mixed = fs.with_source_mix(model, mix)
    assert mixed.source_shares() == {"person": pytest.approx(0.25), "auction": pytest.approx(0.75)}
    # Calc carries 100 000/s: at 50/50 the job 200 000/s, at 25/75 400 000/s (Calc-2's 500 000/s
    # bounds neither)
    assert predict(model, None, 1.0).max_rate == pytest.approx(200_000.0, rel=1e-6)
    assert predict(mixed, None, 1.0).max_rate == pytest.approx(400_000.0, rel=1e-6)
    one = parse_model({"augury": 1, "job": "q1", "operators": [
        {"name": "bid", "role": "source", "parallelism": 1},
        {"name": "Calc", "parallelism": 1, "service_time_ms": 0.01}], "edges": [{"from": "bid", "to": "Calc"}]})
    assert fs.with_source_mix(one, {"bid": 1.0}) is one
    with pytest.raises(ExperimentError):
        fs.with_source_mix(model, {"person": 1.0})


def test_one_step_rates_keep_the_step_mix():
    """q8's step runs Nexmark's one person per three auctions; a query without a step mix asks
    every table for the same share."""
    q8, q5 = fs.SETUPS["q8"], fs.SETUPS["q5"]
    assert fs.step_rates(q8, 400_000.0, 2) == (300_000, 100_000)
    assert fs.step_rates(q5, 400_000.0, 1) == (400_000, None)
    assert sum(dict(q8.step_mix).values()) == pytest.approx(1.0)


def test_calibration_configurations_are_never_test_configurations():
    """Every query is calibrated at its calibration configurations' saturation; predicting a
    configuration it was calibrated on would measure nothing."""
    for setup in fs.SETUPS.values():
        assert not set(setup.calibration) & set(setup.tests), setup.query
        assert 1 <= len(setup.calibration) <= 3


def test_calibration_windows_are_logged_as_tables_and_refit_offline_as_the_run_did(tmp_path):
    """The calibration windows of a run (here testbed windows of a job with a per-instance CPU
    overhead of 0.08) go out as tables; read back from CSV, as mlflow keeps them, they refit to
    the same model as the fit on the frames themselves."""
    from modeler.calibrate import Calibrator
    from modeler.modelfile import parse_model
    from modeler.queueing import predict
    from tests.modeler.test_calibrate import _OVERHEAD_TRUTH, _testbed_history

    truth = parse_model(_OVERHEAD_TRUTH)
    ops, edges, engine, threads = _testbed_history(truth, [{"a": 2}, {"a": 4}, {"a": 6}], [0.7])
    topology = {**_OVERHEAD_TRUTH, "resources": {"cores": 2}, "operators": [
        {k: v for k, v in op.items() if k not in ("service_time_ms", "cpu_share", "cpu_ms_per_tuple")}
        for op in _OVERHEAD_TRUTH["operators"]]}
    out = {"queries": {"qx": {"topology": topology, "calibration_data": {
        "ops": ops, "edges": edges, "engine_cpu": engine, "source_cpu": threads}}, "qy": {}}}
    tables = fs.calibration_tables(out)
    assert set(tables) == {"calibration_windows", "calibration_edge_windows", "calibration_cpu", "topologies"}
    assert len(tables["calibration_windows"]) == len(ops) and (tables["calibration_cpu"]["query"] == "qx").all()
    for name, table in tables.items():
        table.to_csv(tmp_path / f"{name}.csv", index=False)
    read = {name: pd.read_csv(tmp_path / f"{name}.csv") for name in tables}
    refit = fs.refit_from_tables(read, "qx")
    # as the run fits: every calibration window at its configuration's max rate (these testbed
    # windows ran at 0.7 of it, so the level comes out near 0.7: what matters is that both agree)
    direct = Calibrator(fs.calibration_config()).fit(ops, edges, topology=parse_model(topology, require_profiles=False),
                                                     engine_cpu=engine, source_cpu=threads, at_max_rate=True)
    assert refit.capacity_scale_.value == pytest.approx(direct.capacity_scale_.value, rel=1e-9)
    assert refit.capacity_scale_.value == pytest.approx(0.7, abs=0.07)
    assert refit.cpu_overhead_.value == pytest.approx(0.08, abs=0.01)
    assert refit.cpu_overhead_.value == pytest.approx(direct.cpu_overhead_.value, rel=1e-9)
    for config in ({"a": 3}, {"a": 8}):
        assert predict(refit.model_, config, 1.0).max_rate == pytest.approx(
            predict(direct.model_, config, 1.0).max_rate, rel=1e-6)
    assert fs.calibration_tables({"queries": {"qy": {}}}) == {}
