"""``augury calibrate``: store in, model file out, mlflow run, typed errors."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from augury.cli import main
from history.schema import TABLE_SCHEMAS
from history.store import MetricStore
from modeler.modelfile import load_model
from modeler.queueing import predict
from tests.modeler.test_calibrate import _chain_history


def _store_with(tmp_path, ops, edges):
    store = MetricStore(tmp_path / "store", create=True)
    with store.table_transaction() as tx:
        for name, frame in (("operator_windows", ops), ("edge_windows", edges)):
            schema = TABLE_SCHEMAS[name]
            frame = frame.assign(**{c: None for c in schema.names if c not in frame.columns})[schema.names]
            tx.dir(name).mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False),
                           tx.dir(name) / "part-0.parquet")
        tx.summary = {"test": True}
    return store.path


ROWS = [{"parallelism": 2, "processed_rate": 1000.0, "busy_fraction_mean": 0.5, "service_time_ms": 1.0}] * 5


def test_calibrate_writes_a_usable_model_and_logs_to_mlflow(tmp_path, capsys):
    ops, edges = _chain_history(ROWS, selectivity=2.0)
    store = _store_with(tmp_path, ops, edges)
    out = tmp_path / "model.yaml"
    assert main(["calibrate", "--store", str(store), "--job", "j", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    model = load_model(out)
    assert model.operator("a").service_time_ms == pytest.approx(1.0)
    assert model.calibration["operators"]["a"]["service_time_ms"]["samples"] == 5
    assert predict(model, None, 100).max_rate == pytest.approx(2000.0)
    assert summary["mlflow_run_id"]
    import mlflow

    run = mlflow.get_run(summary["mlflow_run_id"])
    assert run.data.metrics["calibration.a.service_time_ms"] == pytest.approx(1.0)
    assert "calibration.a.service_time_holdout_error" in run.data.metrics and "trust" in run.data.metrics
    assert run.data.params["job"] == "j" and run.data.params["windows"] == str(len(ops[ops["job"] == "j"]))
    # the model file itself is the run's artifact
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(summary["mlflow_run_id"])}
    assert artifacts == {"model.yaml"}


def test_at_max_rate_levels_the_model_to_the_rates_the_windows_ran_at(tmp_path, capsys):
    # the windows' flows and busy times say 2000/s at most; flagged as a load test at the max
    # rate, the job carried 1000/s there: every per-tuple time doubles (scale 0.5, the bound)
    ops, edges = _chain_history(ROWS, selectivity=2.0)
    store = _store_with(tmp_path, ops, edges)
    out = tmp_path / "model.yaml"
    assert main(["calibrate", "--store", str(store), "--job", "j", "--out", str(out), "--json", "--no-track",
                 "--at-max-rate"]) == 0
    summary = json.loads(capsys.readouterr().out)
    model = load_model(out)
    assert summary["calibration"]["capacity_scale"]["value"] == pytest.approx(0.5)
    assert model.calibration["capacity_scale"]["samples"] == 5
    assert model.operator("a").service_time_ms == pytest.approx(2.0)
    assert predict(model, None, 100).max_rate == pytest.approx(1000.0)
    # without the flag the model is not levelled
    assert main(["calibrate", "--store", str(store), "--job", "j", "--out", str(out), "--json", "--no-track"]) == 0
    assert "capacity_scale" not in json.loads(capsys.readouterr().out)["calibration"]


def test_since_filters_windows(tmp_path, capsys):
    ops, edges = _chain_history(ROWS)
    store = _store_with(tmp_path, ops, edges)
    # Only the last window qualifies: not enough data, named error, exit 2.
    code = main(["calibrate", "--store", str(store), "--job", "j", "--out", str(tmp_path / "m.yaml"),
                 "--since", "2026-01-01T00:00:40Z", "--no-track"])
    assert code == 2
    err = capsys.readouterr().err
    assert "'a'" in err and str(store) in err and len(err.strip().splitlines()) == 1


def test_unknown_job_and_missing_store(tmp_path, capsys):
    ops, edges = _chain_history(ROWS)
    store = _store_with(tmp_path, ops, edges)
    assert main(["calibrate", "--store", str(store), "--job", "nope", "--out", str(tmp_path / "m.yaml"),
                 "--no-track"]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["calibrate", "--store", str(tmp_path / "none"), "--job", "j", "--out",
                 str(tmp_path / "m.yaml"), "--no-track"]) == 2
    assert "none" in capsys.readouterr().err


# ------------------------------------------------ issue 22: no destructive success, atomic --out


def test_since_after_every_window_exits_2_and_keeps_the_old_model(tmp_path, capsys):
    ops, edges = _chain_history(ROWS)
    store = _store_with(tmp_path, ops, edges)
    out = tmp_path / "model.yaml"
    out.write_text("the old model\n")
    code = main(["calibrate", "--store", str(store), "--job", "j", "--out", str(out), "--since", "2099-01-01",
                 "--no-track"])
    assert code == 2 and out.read_text() == "the old model\n"
    err = capsys.readouterr().err.strip()
    assert "--since" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.yaml", "store"]  # no temporary left


def test_an_unreachable_mlflow_exits_3_fast_and_keeps_the_old_model(tmp_path, capsys, monkeypatch):
    ops, edges = _chain_history(ROWS)
    store = _store_with(tmp_path, ops, edges)
    out = tmp_path / "model.yaml"
    out.write_text("the old model\n")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # discard port: connection refused
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    code = main(["calibrate", "--store", str(store), "--job", "j", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 3, err
    assert out.read_text() == "the old model\n"
    assert "MLFLOW_TRACKING_URI" in err and "127.0.0.1:9" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.yaml", "store"]


def test_an_unwritable_out_exits_3_before_the_work(tmp_path, capsys):
    ops, edges = _chain_history(ROWS)
    store = _store_with(tmp_path, ops, edges)
    (tmp_path / "file").write_text("x")
    code = main(["calibrate", "--store", str(store), "--job", "j", "--out", str(tmp_path / "file" / "m.yaml"),
                 "--no-track"])
    err = capsys.readouterr().err.strip()
    assert code == 3 and "--out" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("edit", [
    (0, "parallelism", 166),                 # the contention fit's solver did not converge: ValueError, exit 1
    (3, "processed_rate", float("inf")),     # an infinite weight: ValueError from the regression
    (1, "service_time_ms", float("inf")),
    (2, "processed_rate", 1e300),
])
def test_windows_with_odd_numbers_calibrate_or_exit_2(tmp_path, capsys, edit):
    """Issue 22 (found by tests/fuzz/test_files_and_flags.py): an operator_windows row with an odd
    but storable number never escapes as a traceback; unusable windows are left out of the fit."""
    rows = [dict(r) for r in ROWS]
    i, column, value = edit
    rows[i][column] = value
    ops, edges = _chain_history(rows, selectivity=2.0)
    store = _store_with(tmp_path, ops, edges)
    out = tmp_path / "model.yaml"
    code = main(["calibrate", "--store", str(store), "--job", "j", "--out", str(out), "--no-track"])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err
    if code == 0:
        assert load_model(out).operator("a").service_time_ms == pytest.approx(1.0, rel=0.05)


def test_a_fitted_number_beyond_the_model_files_limits_is_exit_2_and_keeps_out(tmp_path, capsys):
    """Issue 22 (fuzz): a service time of 5e12 ms in the history was fitted and written (exit 0) as a
    model file that load_model then refused; the model is now read back before --out is replaced."""
    rows = [dict(r) for r in ROWS]
    rows[0]["service_time_ms"] = 5e12
    ops, edges = _chain_history(rows, selectivity=2.0)
    store = _store_with(tmp_path, ops, edges)
    out = tmp_path / "model.yaml"
    out.write_text("the old model\n")
    code = main(["calibrate", "--store", str(store), "--job", "j", "--out", str(out), "--no-track"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "service_time_ms" in err, err
    assert out.read_text() == "the old model\n"
