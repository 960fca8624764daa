"""The experiment harness: discovery, what a run logs to mlflow, and the CLI."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest

import experiments.harness as harness
from augury.cli import main as cli
from experiments.harness import (ExperimentError, broken_modules, experiment_names, load_experiment,
                                 run_experiment)
from modeler.errors import UsageError
from tests.experiments.suite_fixtures import make_suite


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One temporary sqlite mlflow store per module (creating one costs seconds)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        yield uri


@pytest.fixture
def suite(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    return make_suite(tmp_path)


def _client(uri):
    import mlflow

    return mlflow.MlflowClient(tracking_uri=uri)


def test_the_real_suite_is_discovered():
    names = experiment_names()
    assert {"accuracy", "forecast"} <= set(names)
    for name in ("accuracy", "forecast"):
        module = load_experiment(name)
        assert module.NAME == name and module.DESCRIPTION and callable(module.run)
        assert set(module.HEADLINE)  # quoted in RESULTS.md


def test_discovery_skips_private_helper_and_broken_modules(suite):
    with pytest.warns(UserWarning, match="broken"):
        names = experiment_names(suite)
    assert names == {"badresult": f"{suite}.badresult", "norun": f"{suite}.norun", "tiny": f"{suite}.tiny",
                     "multi": f"{suite}.multi"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert list(broken_modules(suite)) == [f"{suite}.broken"]
        with pytest.raises(UsageError, match="broken") as err:
            load_experiment("nosuch", suite)
    assert err.value.field == "NAME" and err.value.value == "nosuch"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_run_logs_params_metrics_tags_and_artifacts(suite, store, tmp_path):
    said = []
    done = run_experiment("tiny", quick=True, seed=3, workdir=tmp_path / "work", package=suite,
                          progress=said.append)
    assert said == ["tiny: running"]
    assert done.name == "tiny" and done.seconds >= 0
    client = _client(store)
    run = client.get_run(done.mlflow_run_id)
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "augury-tiny"
    tags = run.data.tags
    assert tags["augury.experiment"] == "tiny" and tags["augury.quick"] == "true"
    assert tags["augury.seed"] == "3" and tags["augury.git_commit"]
    assert run.data.params == {"quick": "True", "seed": "3", "cases": "3", "mode": "quick"}
    metrics = run.data.metrics
    assert metrics["score"] == 3.125 and metrics["other"] == 2.5
    assert "nan_metric" not in metrics  # mlflow rejects NaN: skipped, not crashed
    assert metrics["wall_seconds"] == pytest.approx(done.seconds)
    listed = {a.path for a in client.list_artifacts(done.mlflow_run_id)}
    assert listed == {"tables", "figures", "summary.md", "result.json"}
    assert [a.path for a in client.list_artifacts(done.mlflow_run_id, "tables")] == ["tables/cases.csv"]
    assert [a.path for a in client.list_artifacts(done.mlflow_run_id, "figures")] == ["figures/tiny_plot.png"]
    local = Path(client.download_artifacts(done.mlflow_run_id, "", str(tmp_path / "dl")))
    table = pd.read_csv(local / "tables" / "cases.csv")
    assert table["value"].tolist() == [3.0, 3.125, 3.25]
    assert (local / "figures" / "tiny_plot.png").read_bytes() == b"not really a png 3"
    assert (local / "summary.md").read_text() == "tiny summary for seed 3"
    manifest = json.loads((local / "result.json").read_text())
    assert manifest["metrics"]["score"] == 3.125 and manifest["tables"] == ["cases"]
    assert manifest["figures"] == {"plot": "tiny_plot.png"}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_failing_experiment_is_an_error_and_a_failed_run(suite, store):
    with pytest.raises(ExperimentError, match="no ExperimentResult"):
        run_experiment("badresult", package=suite)
    with pytest.raises(RuntimeError):
        run_experiment("norun", package=suite)
    client = _client(store)
    for name in ("badresult", "norun"):
        exp = client.get_experiment_by_name(f"augury-{name}")
        runs = client.search_runs([exp.experiment_id])
        assert [r.info.status for r in runs] == ["FAILED"]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_cli_runs_lists_and_rejects_unknown_names(suite, store, monkeypatch, capsys):
    monkeypatch.setattr(harness, "SUITE_PACKAGE", suite)
    assert cli(["experiment", "run", "tiny", "--seed", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["experiment"] == "tiny" and out["seed"] == 2 and out["quick"] is False
    assert out["metrics"]["score"] == 2.125 and out["tables"] == {"cases": 3}
    assert _client(store).get_run(out["mlflow_run_id"]).data.tags["augury.quick"] == "false"

    assert cli(["experiment", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["experiments"]
    assert listed == {"badresult": "returns the wrong type", "norun": "never run in the tests",
                      "tiny": "test-only experiment", "multi": "takes seeds and models"}

    assert cli(["experiment", "run", "nosuch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "augury experiment: error:" in err[0] and "'nosuch'" in err[0]
    assert "tiny" in err[0]  # names the known experiments


def test_cli_unknown_experiment_on_the_real_suite(capsys):
    assert cli(["experiment", "run", "no-such-experiment", "--quick"]) == 2
    assert "unknown experiment" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_cli_several_seeds_models_and_out_csv(suite, store, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(harness, "SUITE_PACKAGE", suite)
    model = tmp_path / "job.yaml"
    model.write_text("augury: 1\n")  # the harness hands the path on; the experiment reads it
    out = tmp_path / "out"
    assert cli(["experiment", "run", "multi", "--seed", "4", "--seed", "5", "--model", str(model),
                "--out", str(out), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["seed"] == 4 and got["seeds"] == [4, 5] and got["models"] == [str(model)]
    assert sorted(Path(p).name for p in got["csv"]) == ["models.csv", "runs.csv"]
    assert pd.read_csv(out / "runs.csv")["seed"].tolist() == [4, 5]  # one file per table, named after it
    assert pd.read_csv(out / "models.csv")["model"].tolist() == ["job.yaml"]
    assert (out / "summary.md").read_text() == "multi" and json.loads((out / "result.json").read_text())["tables"]
    run = _client(store).get_run(got["mlflow_run_id"])
    assert run.data.tags["augury.seed"] == "4" and run.data.tags["augury.seeds"] == "4,5"

    # without --out nothing is written besides mlflow; one --seed stays the old behaviour
    assert cli(["experiment", "run", "tiny", "--seed", "1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["seed"] == 1 and got["seeds"] == [1] and got["csv"] == []


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("flags, named", [(["--model", "MODEL"], "--model"), (["--trace", "MODEL"], "--trace"),
                                          (["--seed", "1", "--seed", "2"], "--seed")])
def test_cli_rejects_inputs_an_experiment_does_not_take(suite, store, monkeypatch, capsys, tmp_path, flags, named):
    monkeypatch.setattr(harness, "SUITE_PACKAGE", suite)
    model = tmp_path / "job.yaml"
    model.write_text("augury: 1\n")
    argv = ["experiment", "run", "tiny", *[str(model) if f == "MODEL" else f for f in flags]]
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0] and "tiny" in err[0]
    with pytest.raises(UsageError):  # the library says the same before running anything
        run_experiment("tiny", package=suite, seeds=(1, 2))


def test_cli_model_flag_on_the_real_suite(capsys, tmp_path):
    """forecast takes no model files: exit 2 naming the flag, before anything runs; convergence
    takes them (a missing file is named)."""
    model = tmp_path / "m.yaml"
    model.write_text("augury: 1\n")
    assert cli(["experiment", "run", "forecast", "--quick", "--model", str(model)]) == 2
    assert "--model" in capsys.readouterr().err
    assert cli(["experiment", "run", "convergence", "--quick", "--model", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert "--model" in err and "missing.yaml" in err
    assert cli(["experiment", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"]["convergence"] == ["--seed", "--model"]


def test_steps_are_plain_lines_without_bars(capsys):
    said = []
    ctx = harness.ExperimentContext(progress=said.append)
    with ctx.steps(3, "runs") as steps:
        for unit in ("a", "b", "c"):
            steps.advance(unit)
    assert said == ["[1/3] a", "[2/3] b", "[3/3] c"]
    assert capsys.readouterr().err == ""


def test_steps_done_counts_finished_units(capsys):
    said = []
    with harness.ExperimentContext(progress=said.append).steps(2, "replays") as steps:
        steps.done("x")
        steps.done("y")
    assert said == ["[1/2] x", "[2/2] y"]
    with harness.ExperimentContext(bars=True).steps(2, "replays") as steps:
        steps.done("x")
        steps.done("y")
    err = capsys.readouterr().err
    assert "2/2" in err and "3/2" not in err  # nothing counted twice on close


def test_steps_draw_one_bar_on_stderr_with_bars(capsys):
    said = []
    ctx = harness.ExperimentContext(progress=said.append, bars=True)
    with ctx.steps(2, "runs") as steps:
        steps.advance("first")
        steps.advance("second")
    err = capsys.readouterr().err
    assert said == []  # no per-unit lines: the bar says it
    assert "runs" in err and "2/2" in err and "second" in err


def test_run_experiment_draws_bars_only_when_stderr_is_a_terminal(suite, store, monkeypatch, tmp_path):
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    made = []
    real = harness.ExperimentContext
    monkeypatch.setattr(harness, "ExperimentContext", lambda **kw: made.append(real(**kw)) or made[-1])
    run_experiment("tiny", package=suite, workdir=tmp_path / "piped")  # pytest's stderr: not a terminal
    monkeypatch.setattr(harness.sys, "stderr", Terminal())
    run_experiment("tiny", package=suite, workdir=tmp_path / "tty")
    assert [c.bars for c in made] == [False, True]
