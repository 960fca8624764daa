"""``augury run`` replaying a real trace day on the testbed (``[metrics] trace``) with the
pre-emptive decider, from no model (``[learn]``): the bundled example is the ``preemptive``
experiment's augury row, and both run one code path (``experiments.tracereplay``)."""

from __future__ import annotations

import json
import shutil

import pytest

from augury.cli import main
from augury.commands.run import load_run_config
from experiments.bundled import examples_dir

EXAMPLE = "run-preemptive-testbed.toml"


def _copy_examples(tmp_path):
    for f in examples_dir().iterdir():
        shutil.copy(f, tmp_path / f.name)
    return tmp_path / EXAMPLE


def test_the_example_is_the_preemptive_experiments_augury_setup():
    """Every setting of the bundled config equals what the experiment gives augury for nyc_taxi
    (experiment seed 0, its --quick length: one day): the replay, the decider, the loop's
    targets and guard, the warm-up."""
    from experiments.recording import LearnConfig, learn_model
    from experiments.suite import preemptive as pe
    import inspect

    spec = load_run_config(str(examples_dir() / EXAMPLE))
    params = pe.Params()
    assert spec["trace"] == pe.trace_config("nyc_taxi", params, 1.0, pe.replay_seed(0, "nyc_taxi"))
    assert spec["decider"] == "preemptive" and spec["preemptive"][0] == pe.settings(params)
    expected = pe.loop_config(params)
    assert spec["loop"].targets == expected.targets and spec["loop"].guard == expected.guard
    assert spec["loop"].interval_s == expected.interval_s and spec["loop"].model == expected.model
    # the experiment learns with learn_model(truth, workdir, seed=ctx.seed): default seconds
    assert spec["learn"] == LearnConfig(seed=0, seconds=inspect.signature(learn_model).parameters["seconds"].default,
                                        workdir=spec["learn"].workdir)


@pytest.mark.slow
@pytest.mark.spark
def test_augury_run_equals_the_experiments_augury_row(tmp_path, capsys, spark):
    """A quarter day of the example through ``augury run`` (learning its model first) and the
    experiment's ``run_trace`` for augury on the model ``augury run`` learned: the same SLO-violation
    minutes, instance-hours and reconfigurations; ``augury log`` shows each decision's reasons and
    its expected and measured outcome."""
    from experiments.bundled import data_dir, traces_dir
    from experiments.suite import preemptive as pe
    from modeler.modelfile import load_model

    config = _copy_examples(tmp_path)
    config.write_text(config.read_text().replace("days = 1.0", "days = 0.25"))
    assert main(["run", "--config", str(config), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    summary = lines[-1]["summary"]
    steps = lines[:-1]
    assert summary["learned"] and summary["calibration"]["calibration_trust"] > 0
    assert summary["windows"] == len(steps) == 90  # 6 trace hours in 4-minute windows
    assert steps[0]["trace_time"].startswith("2014-07-22")

    learned = load_model(str(tmp_path / "augury-learn" / "learned_model.yaml"))
    params = pe.Params(days=0.25)
    [(trace, result, controller)] = pe.run_trace("nyc_taxi", params, 0.25, pe.replay_seed(0, "nyc_taxi"),
                                                 data_dir(), traces_dir(), lambda _: None,
                                                 learned=learned, policies=("augury",))
    assert result.policy == "augury"
    assert summary["violation_minutes"] == pytest.approx(result.violation_minutes, abs=1e-12)
    assert summary["instance_hours"] == pytest.approx(result.instance_hours, abs=1e-12)
    assert summary["reconfigurations"] == result.reconfigurations
    # the pre-emptive decider forecast from the trace's history (no silent fallback to the floor)
    assert controller.decider.forecast_methods_ and controller.decider.schedules_

    assert main(["log", "--state", str(tmp_path / "augury-preemptive.db"), "--json"]) == 0
    log = json.loads(capsys.readouterr().out)
    assert len(log["actions"]) >= summary["reconfigurations"] >= 1
    for action in log["actions"]:
        assert action["reasons"] and action["expected"]
    assert any(a["measured"] for a in log["actions"])


@pytest.mark.parametrize("section,key,value,field", [
    ("metrics", "speedup", "0", "metrics.speedup"),
    ("metrics", "start", '"not a date"', "metrics.start"),
    ("metrics", "trace", '"no-such-trace.csv"', "metrics.trace"),
    ("learn", "seconds", "-1.0", "learn.seconds"),
])
def test_bad_trace_settings_exit_2_naming_the_key(tmp_path, capsys, section, key, value, field):
    config = _copy_examples(tmp_path)
    text = config.read_text()
    lines = text.splitlines()
    at = lines.index(f"[{section}]" if f"[{section}]" in lines else next(
        ln for ln in lines if ln.startswith(f"[{section}]")))
    end = next((i for i in range(at + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    body = [ln for ln in lines[at + 1:end] if not ln.startswith(f"{key} ")] + [f"{key} = {value}"]
    config.write_text("\n".join(lines[:at + 1] + body + lines[end:]) + "\n")
    assert main(["run", "--config", str(config)]) == 2
    assert field in capsys.readouterr().err


def test_a_trace_replay_takes_no_step_bound(tmp_path, capsys):
    config = _copy_examples(tmp_path)
    assert main(["run", "--config", str(config), "--iterations", "3"]) == 2
    assert "metrics.days" in capsys.readouterr().err


def test_an_unknown_testbed_metrics_key_names_the_known_ones_and_the_trace_mode(tmp_path, capsys):
    config = tmp_path / "run.toml"
    model = examples_dir() / "wordcount.yaml"
    config.write_text(f'[job]\nmodel = "{model}"\n[metrics]\nsource = "testbed"\nrat = 10\n')
    assert main(["run", "--config", str(config), "--iterations", "1"]) == 2
    err = capsys.readouterr().err
    assert "metrics.rat" in err and "rate" in err and "trace" in err
