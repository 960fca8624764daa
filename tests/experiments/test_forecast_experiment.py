"""The ``forecast`` experiment (quick) through the harness: the backtest table over the traces."""

from __future__ import annotations

import pytest

from experiments.suite import forecast


@pytest.mark.slow
def test_quick_forecast_through_the_harness(traces_dir, tmp_path, monkeypatch):
    import mlflow

    from experiments.harness import run_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    done = run_experiment("forecast", quick=True, workdir=tmp_path / "work")
    table = done.result.tables["backtest"]
    assert table["trace"].tolist() == ["taxi", "wc98", "amzn", "elb"]
    assert (table["origins"] == forecast.QUICK_FOLDS).all() and (table["points"] > 0).all()
    assert ((table["coverage_q0.9"] >= 0) & (table["coverage_q0.9"] <= 1)).all()
    assert (table["coverage_q0.9"] >= table["coverage_q0.5"]).all()
    m = done.result.metrics
    assert m["beats_naive_mase"] == sum(table["mase"] < table["naive_mase"])
    logged = mlflow.MlflowClient(tracking_uri=uri).get_run(done.mlflow_run_id).data.metrics
    for key in forecast.HEADLINE:
        assert logged[key] == pytest.approx(m[key])
    assert logged["mase.taxi"] == pytest.approx(float(table.loc[table["trace"] == "taxi", "mase"].iloc[0]))
