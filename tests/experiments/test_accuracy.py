"""The ``accuracy`` experiment: its helpers, and the quick variant through the harness."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from experiments.suite import accuracy
from modeler.modelfile import KeySpec, load_model
from tests.conftest import EXAMPLES


@pytest.mark.parametrize("example", ["wordcount", "pipeline", "diamond"])
def test_unseen_configurations_are_new_distinct_and_valid(example):
    model = load_model(EXAMPLES / f"{example}.yaml")
    seen = accuracy.seen_configs(model)
    assert len(seen) == 2 and seen[0] != seen[1]
    unseen = accuracy.unseen_configs(model, 6, np.random.default_rng(7))
    assert len(unseen) == 6
    keys = {tuple(sorted(c.items())) for c in unseen}
    assert len(keys) == 6 and not keys & {tuple(sorted(c.items())) for c in seen}
    for config in unseen:
        assert model.resolve_config(config) == config
        for op in model.sources:
            assert config[op.name] == op.parallelism
    again = accuracy.unseen_configs(model, 6, np.random.default_rng(7))
    assert again == unseen  # seeded


def test_topology_has_no_profile():
    model = load_model(EXAMPLES / "pipeline.yaml")
    topo = accuracy.topology_of(model)
    assert not topo.has_profiles() and topo.network_delay_ms == 0
    assert [e.grouping for e in topo.edges] == [e.grouping for e in model.edges]
    # no key distribution (the parser's default, uniform, stands in) and no selectivity
    assert all(e.keys in (None, KeySpec()) and e.selectivity == 1.0 for e in topo.edges)
    assert topo.operator("dedup").max_parallelism == 64  # key groups kept: the user's topology says them


def test_error_table_by_hand():
    rows = []
    for i, (measured, a, c) in enumerate([(100.0, 110.0, 150.0), (200.0, 190.0, math.nan), (50.0, 50.0, 40.0)]):
        rows.append({"example": "x", "config": f"k{i}", "load": 0.5, "rate": 1.0, "quantity": "latency_mean",
                     "measured": measured, "pred_augury": a, "pred_caladrius": c, "pred_drs": 2 * measured,
                     "sink_tuples": 1.0})
    errors = accuracy.error_table(pd.DataFrame(rows)).set_index(["quantity", "model"])
    aug = errors.loc[("latency_mean", "augury")]
    assert aug["points"] == 3 and aug["undefined"] == 0
    assert aug["median_abs_rel_error"] == pytest.approx(0.05)          # {0.1, 0.05, 0}
    assert aug["p90_abs_rel_error"] == pytest.approx(0.09)
    cal = errors.loc[("latency_mean", "caladrius")]
    assert cal["undefined"] == 1 and cal["median_abs_rel_error"] == pytest.approx(0.35)  # {0.5, 0.2}
    assert errors.loc[("latency_mean", "drs")]["median_abs_rel_error"] == pytest.approx(1.0)
    assert ("latency_p99", "caladrius") not in errors.index  # peers predict no tail



def test_band_table_by_hand():
    rows = []
    for i, (load, measured, a, t) in enumerate([(0.5, 100.0, 110.0, 100.0), (0.5, 200.0, 190.0, 210.0),
                                                (0.5, 50.0, 50.0, 45.0), (0.95, 10.0, 13.0, 9.0)]):
        rows.append({"example": "x" if i < 3 else "y", "config": f"k{i}", "load": load, "rate": 1.0,
                     "quantity": "latency_mean", "measured": measured, "pred_augury": a,
                     "pred_caladrius": a, "pred_drs": a, "pred_true": t, "sink_tuples": 1.0})
    bands = accuracy.band_table(pd.DataFrame(rows)).set_index(["example", "load"])
    x = bands.loc[("x", 0.5)]
    assert x["n"] == 3 and x["median_abs_err"] == pytest.approx(0.05)      # {0.1, 0.05, 0}
    assert x["median_signed"] == pytest.approx(0.0)                          # {+0.1, -0.05, 0}
    assert x["true_median_abs_err"] == pytest.approx(0.05)                   # {0, 0.05, 0.1}
    assert 0.0 <= x["ci_lo"] <= x["median_abs_err"] <= x["ci_hi"] <= 0.1
    assert bands.loc[("all", 0.95)]["median_abs_err"] == pytest.approx(0.3)  # y alone: 13 vs 10
    assert bands.loc[("all", 0.5)]["n"] == 3


def test_max_rate_warmup_waits_for_the_queues_upstream_of_the_bottleneck():
    from experiments.recording import MIX_SOURCE, max_rate_setup
    from experiments.testbed import TestbedConfig
    from modeler.queueing import predict

    truth = load_model(EXAMPLES / "pipeline.yaml")
    config = truth.resolve_config({"decode": 6, "dedup": 4, "sessionize": 1, "score": 7, "sink": 3})
    # pipeline has two sources, so its max rate is measured with one generator feeding them at
    # their shares (experiments.recording.mix_coupled): their input queues fill too
    measured, measured_config = max_rate_setup(truth, config)
    assert [o.name for o in measured.sources] == [MIX_SOURCE]
    p = predict(measured, measured_config, 1.0)
    assert p.bottleneck == "sessionize"
    # clicks (2), views (1), decode (6), dedup (4), sessionize (1): 14 queues of 1,000 filled by
    # 0.6 x max rate x visit ratio
    upstream = ("clicks", "views", "decode", "dedup", "sessionize")
    fill = sum(measured_config[o] * TestbedConfig().queue_capacity
               / (0.6 * p.max_rate * p.operators[o].arrival_rate) for o in upstream)
    assert fill > 10
    got = accuracy.max_rate_warmup_s(truth, config, accuracy.FULL)
    window = TestbedConfig().window_s  # whole windows: the measurement keeps its length
    assert got == pytest.approx(math.ceil((accuracy.FULL.warmup_s + fill) / window) * window)
    assert got >= accuracy.FULL.warmup_s + fill

def test_duration_factor_grows_like_the_relaxation_time_up_to_the_cap():
    f = accuracy.duration_factor
    assert f(0.0, 25) == f(0.3, 25) == f(0.5, 25) == 1.0          # base lengths up to the reference load
    assert f(0.7, 25) == pytest.approx((0.5 / 0.3) ** 2)            # 2.78
    assert f(0.85, 25) == pytest.approx((0.5 / 0.15) ** 2)          # 11.1: below the cap
    assert f(0.95, 1000) == pytest.approx(100.0)                    # what the rule asks at 0.95
    assert f(0.95, 25) == 25.0 and f(0.99, 25) == 25.0              # capped
    assert f(1.3, 25) == 1.0                                        # overload: throughput only
    loads = np.linspace(0.0, 0.999, 200)
    assert np.all(np.diff([f(x, 25) for x in loads]) >= 0)
    for bad in ((-0.1, 25), (math.nan, 25), (0.5, 0.5)):
        with pytest.raises(ValueError):
            f(*bad)


def test_full_plan_point_seconds_scale_with_load_in_whole_windows():
    full = accuracy.FULL
    assert full.max_rate_s == 600.0
    assert full.point_seconds(0.1) == full.point_seconds(0.5) == (10.0, 60.0)
    assert full.point_seconds(0.7) == (30.0, 170.0)    # 27.8 s, 166.7 s up to whole 10 s windows
    assert full.point_seconds(0.85) == (120.0, 670.0)  # 111.1 s, 666.7 s
    assert full.point_seconds(0.95) == (250.0, 1500.0)
    assert full.point_seconds(full.overload) == (10.0, 60.0)
    # CI's quick run: the rule applies but the cap keeps it short (0.9 at most x2)
    assert accuracy.QUICK.point_seconds(0.2) == (5.0, 20.0)
    assert accuracy.QUICK.point_seconds(0.9) == (10.0, 40.0)


def test_batch_se_independent_and_correlated():
    rng = np.random.default_rng(11)
    n = 200_000
    iid = rng.normal(0.0, 2.0, n)
    assert accuracy.batch_se(iid) == pytest.approx(2.0 / math.sqrt(n), rel=0.5)
    # AR(1) with phi 0.98: the mean's standard error is sqrt((1 + phi) / (1 - phi)) ~ 9.9 times
    # the naive sigma / sqrt(n); batch means see it, the naive formula does not
    phi, e = 0.98, rng.normal(0.0, 1.0, n)
    ar = np.empty(n)
    ar[0] = e[0]
    for t in range(1, n):
        ar[t] = phi * ar[t - 1] + e[t]
    true_se = math.sqrt(1.0 / (1.0 - phi) ** 2) / math.sqrt(n)  # long-run variance sigma_e^2 / (1 - phi)^2
    got = accuracy.batch_se(ar)
    assert got == pytest.approx(true_se, rel=0.5)
    assert got > 5 * ar.std() / math.sqrt(n)
    # a statistic other than the mean: batch p99s of iid data
    assert 0 < accuracy.batch_se(iid, accuracy._p99) < 0.1
    # fewer values than batches: one value per batch (a 60 s measurement has 6 metric windows)
    six = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert accuracy.batch_se(six) == pytest.approx(six.std(ddof=1) / math.sqrt(6))
    assert math.isnan(accuracy.batch_se(np.array([1.0])))


def test_measure_reports_batch_standard_errors():
    truth = load_model(EXAMPLES / "wordcount.yaml")
    config = truth.resolve_config({})
    from modeler.queueing import predict

    rate = 0.5 * predict(truth, config, 1.0).max_rate
    got = accuracy.measure(truth, config, rate, warmup_s=10.0, measure_s=60.0, seed=3)
    assert got["throughput"] == pytest.approx(rate, rel=0.05)
    for key in ("throughput", "latency_mean", "latency_p99"):
        assert 0 < got[f"{key}_se"] < 0.2 * got[key]


def test_max_rate_windows_is_measure_max_rate_window_by_window():
    from experiments.recording import max_rate_windows, measure_max_rate

    truth = load_model(EXAMPLES / "wordcount.yaml")
    config = truth.resolve_config({})
    rates = max_rate_windows(truth, config, seconds=40, warmup_s=10, seed=5)
    assert len(rates) == 4 and np.all(rates > 0)
    assert rates.mean() == pytest.approx(measure_max_rate(truth, config, seconds=40, warmup_s=10, seed=5))


@pytest.mark.slow
@pytest.mark.spark
def test_quick_accuracy_through_the_harness(spark, tmp_path, monkeypatch):
    import mlflow

    from experiments.harness import run_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    done = run_experiment("accuracy", quick=True, seed=0, workdir=tmp_path / "work")
    r = done.result
    points, errors, calib = r.tables["points"], r.tables["errors"], r.tables["calibration"]
    plan = accuracy.QUICK
    n_configs = plan.unseen_configs * len(plan.examples)
    assert points.query("quantity == 'latency_mean'").shape[0] == n_configs * len(plan.loads)
    assert points.query("quantity == 'throughput_overload'").shape[0] == n_configs
    # each point measured as long as the plan's rule says, with its standard error
    for load, g in points.groupby("load"):
        if load in plan.loads:
            lengths = g[g["quantity"] != "max_rate"]["measure_s"]
            assert (lengths == plan.point_seconds(load)[1]).all()
    lat = points.query("quantity == 'latency_mean'")
    assert (lat["measured_se"] > 0).all() and (lat["measured_se"] < lat["measured"]).all()
    assert set(errors["model"]) == set(accuracy.MODELS)
    # calibration through the pipeline recovered the truth and quarantined nothing
    params = calib[calib["parameter"] != "quarantined_rows"]["relative_error"].abs()
    assert len(params) >= 4 and params.max() < 0.05
    assert calib.loc[calib["parameter"] == "quarantined_rows", "relative_error"].eq(0).all()
    # measurements are physical: sub-capacity throughput follows the offered rate, latencies grow with load
    sub = points.query("quantity == 'throughput'")
    assert np.allclose(sub["measured"], sub["rate"], rtol=0.05)
    for _, g in points.query("quantity == 'latency_mean'").groupby("config"):
        lat = g.sort_values("load")["measured"].to_numpy()
        assert np.all(lat > 0) and lat[-1] > lat[0]
    # numbers sane: augury's capacity is close; Caladrius does not cap above capacity (it
    # predicts the offered 1.3x, so ~30 % error) while augury predicts the max rate
    m = r.metrics
    assert m["median_err.max_rate.augury"] < 0.10
    assert m["median_err.throughput_overload.augury"] < 0.10
    assert 0.15 < m["median_err.throughput_overload.caladrius"] < 0.45
    assert m["median_err.latency_mean.augury"] < m["median_err.latency_mean.drs"]
    assert all(v >= 0 for k, v in m.items() if k.startswith(("median_err", "p90_err")) and not math.isnan(v))
    # and what was logged is what was returned
    logged = mlflow.MlflowClient(tracking_uri=uri).get_run(done.mlflow_run_id).data.metrics
    for key in accuracy.HEADLINE:
        assert logged[key] == pytest.approx(m[key])
    assert r.figures["predicted_vs_measured"].is_file()
    assert "goal <= 5 %" in r.summary
    bands = r.tables["errors_by_band"]
    assert set(plan.loads) <= set(bands["load"]) and {"all", *plan.examples} == set(bands["example"])
    assert (bands["ci_lo"] <= bands["median_abs_err"] + 1e-12).all() and "by load band" in r.summary
