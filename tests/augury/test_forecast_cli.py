"""``augury forecast``: output contract, backtest contract, exit codes, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from augury.cli import main


@pytest.fixture()
def csv(tmp_path):
    n = 24 * 12
    t = np.arange(n)
    rng = np.random.default_rng(0)
    y = 100 * np.exp(0.5 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.05, n))
    idx = pd.date_range("2024-03-01", periods=n, freq="h")
    frame = pd.DataFrame({"ts": idx.strftime("%Y-%m-%d %H:%M:%S"), "rate": y.round(3)})
    frame = frame.drop(index=[30, 31])  # two missing hours
    path = tmp_path / "rate.csv"
    frame.to_csv(path, index=False)
    return path


def test_forecast_json_contract(csv, capsys):
    assert main(["forecast", str(csv), "--horizon", "3h", "--quantiles", "0.9,0.5,0.1",
                 "--json", "--no-track"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] in {"seasonal-naive", "autoreg", "holt-winters", "theta"}
    assert out["season_steps"] == 24 and out["n_missing"] == 2 and out["step_s"] == 3600
    assert out["quantiles"] == [0.1, 0.5, 0.9]
    assert [row["timestamp"] for row in out["forecast"]] == [
        "2024-03-13T00:00:00", "2024-03-13T01:00:00", "2024-03-13T02:00:00"]
    for row in out["forecast"]:
        assert row["q0.1"] <= row["q0.5"] <= row["q0.9"]
        assert row["point"] == pytest.approx(row["q0.5"])


def test_forecast_table_and_plot(csv, tmp_path, capsys):
    plot = tmp_path / "fc.png"
    assert main(["forecast", str(csv), "--horizon", "2h", "--method", "seasonal-naive",
                 "--plot", str(plot), "--no-track"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["timestamp", "point", "q0.5", "q0.9"]
    assert len(lines) == 4 and lines[2].startswith("2024-03-13 00:00:00")
    assert plot.stat().st_size > 1000


def test_backtest_json_contract(csv, capsys):
    assert main(["forecast", str(csv), "--backtest", "--horizon", "2h", "--folds", "12",
                 "--json", "--no-track"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("method", "mase", "smape", "coverage", "baseline", "season_steps"):
        assert key in out
    assert set(out["coverage"]) == {"0.5", "0.9"}
    assert set(out["baseline"]) == {"method", "mase", "smape", "coverage"}
    assert out["folds"] == 12 and out["horizon_steps"] == 2 and out["season_steps"] == 24
    assert out["mase"] < out["baseline"]["mase"]


def test_backtest_text(csv, capsys):
    assert main(["forecast", str(csv), "--backtest", "--horizon", "2h", "--folds", "5",
                 "--no-track"]) == 0
    out = capsys.readouterr().out
    for key in ("method", "mase", "smape", "coverage", "baseline", "lag 24 samples"):
        assert key in out


@pytest.mark.parametrize("argv, match", [
    (["--horizon", "soon"], "field '--horizon' = 'soon'"),
    (["--horizon", "2h", "--quantiles", "0.5,1.2"], "field '--quantiles' = '1.2'"),
    (["--horizon", "2h", "--folds", "0"], "field '--folds' = '0'"),
    (["--horizon", "2h", "--value-col", "nope"], "field '--value-col' = 'nope': no such column"),
    (["--horizon", "2h", "--season", "200"], "two seasons = 400 samples"),
    (["--horizon", "2h", "--plot", "/no/such/dir/x.png"], "field '--plot'"),
])
def test_bad_input_exits_2_with_one_line(csv, capsys, argv, match):
    assert main(["forecast", str(csv), *argv, "--no-track"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("augury forecast: error: ") and "\n" not in err
    assert match in err


def test_bad_file_contents_exit_2_naming_file_field_value(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("ts,rate\n2024-01-01 00:00,1\n2024-01-01 01:00,x1\n")
    assert main(["forecast", str(bad), "--horizon", "1h", "--no-track"]) == 2
    err = capsys.readouterr().err.strip()
    assert str(bad) in err and "field 'rate' = 'x1'" in err
    assert main(["forecast", str(tmp_path / "missing.csv"), "--horizon", "1h", "--no-track"]) == 2
    assert "missing.csv: no such file" in capsys.readouterr().err


@pytest.mark.slow
def test_fit_and_backtest_are_logged_to_mlflow(csv, capsys):
    import mlflow

    from experiments.tracking import tracking_uri

    assert main(["forecast", str(csv), "--horizon", "2h", "--json"]) == 0
    assert main(["forecast", str(csv), "--horizon", "2h", "--backtest", "--folds", "5", "--json"]) == 0
    capsys.readouterr()
    client = mlflow.MlflowClient(tracking_uri=tracking_uri())
    experiment = client.get_experiment_by_name("forecast")
    runs = client.search_runs([experiment.experiment_id], filter_string=f"params.series = '{csv}'")
    kinds = {run.data.tags["kind"]: run for run in runs}
    assert set(kinds) == {"fit", "backtest"}
    backtest = kinds["backtest"]
    assert {"mase", "smape", "coverage.0.9", "baseline.mase"} <= set(backtest.data.metrics)
    assert backtest.data.params["requested_method"] == "auto"
    artifacts = {a.path for a in client.list_artifacts(backtest.info.run_id)}
    assert artifacts == {"backtest.json", "backtest.png"}
    fit_artifacts = {a.path for a in client.list_artifacts(kinds["fit"].info.run_id)}
    assert fit_artifacts == {"fit.json", "fit.png"}


def test_an_unreachable_tracking_store_is_exit_3_after_the_answer(csv, capsys, monkeypatch):
    """Issue 22 (by-hand re-run): an unreachable mlflow was a warning with exit 0 for forecast
    (exit 3 for calibrate). Now the answer is printed, then one line naming the store, exit 3."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # discard port: connection refused
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    code = main(["forecast", str(csv), "--horizon", "2h", "--json"])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 3 and len(err.splitlines()) == 1 and "MLFLOW_TRACKING_URI" in err, err
    assert json.loads(captured.out)["method"]  # the answer, whole
