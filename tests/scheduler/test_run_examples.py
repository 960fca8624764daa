"""The bundled run configurations load, and the testbed ones run (``augury run``)."""

import json

import pytest

from augury.cli import main
from augury.commands.run import load_run_config
from experiments.bundled import examples_dir


@pytest.mark.parametrize("name", ["run-testbed.toml", "run-reactive-testbed.toml", "run-flink.toml",
                                  "run-preemptive-testbed.toml"])
def test_bundled_run_configs_load(name, tmp_path):
    spec = load_run_config(str(examples_dir() / name))
    assert spec["decider"] in ("model", "reactive", "preemptive")


@pytest.mark.parametrize("name,path", [("run-testbed.toml", "model"), ("run-reactive-testbed.toml", "reactive")])
def test_testbed_examples_run(name, path, tmp_path, capsys):
    import shutil

    for f in examples_dir().iterdir():
        shutil.copy(f, tmp_path / f.name)
    assert main(["run", "--config", str(tmp_path / name), "--duration", "300s", "--json"]) == 0
    steps = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    acted = [s for s in steps if s["applied"]]
    assert acted, "the load triples at 120 s: the loop must act"
    assert {s["decision"]["path"] for s in acted} <= {path, "reactive", "guard"}
