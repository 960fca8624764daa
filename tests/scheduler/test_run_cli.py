import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _augury(*args, cwd):
    return subprocess.run([sys.executable, "-m", "augury", *args], cwd=cwd, capture_output=True, text=True)


def _config(tmp_path, extra=""):
    (tmp_path / "run.toml").write_text(f"""
[job]
model = "{ROOT / 'examples/wordcount.yaml'}"
state = "state.db"
[metrics]
source = "testbed"
seed = 2
steps = [{{at_s = 0, rate = 600.0}}, {{at_s = 60, rate = 1800.0}}]
[guard]
stabilization_s = 60
{extra}
""")
    return "run.toml"


@pytest.mark.slow
def test_run_then_log(tmp_path):
    r = _augury("run", "--config", _config(tmp_path), "--iterations", "14", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "decision: scale" in r.stdout and "applied" in r.stdout
    log = _augury("log", "--state", "state.db", "--json", cwd=tmp_path)
    assert log.returncode == 0
    payload = json.loads(log.stdout)
    assert payload["actions"][0]["kind"] == "scale" and payload["actions"][0]["reasons"]


@pytest.mark.slow
def test_advisor_mode_never_acts(tmp_path):
    cfg = _config(tmp_path, "advisor = true")
    r = _augury("run", "--config", cfg, "--iterations", "14", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    steps = [json.loads(line) for line in r.stdout.splitlines()]
    assert not any(s["applied"] for s in steps)
    assert any(s["decision"]["kind"] == "scale" and s["decision"]["advisor"] for s in steps)


def test_bad_config_is_one_line_exit_2(tmp_path):
    cfg = _config(tmp_path, "wobble = 3")
    r = _augury("run", "--config", cfg, "--iterations", "1", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "guard.wobble" in r.stderr
    r = _augury("log", "--state", "missing.db", cwd=tmp_path)
    assert r.returncode == 2 and "missing.db" in r.stderr  # the wrong file named: bad input


def _rates_csv(path, rate, days=3, end="2026-01-01T00:00:00"):
    import numpy as np
    import pandas as pd

    idx = pd.date_range(end=pd.Timestamp(end), periods=int(days * 288), freq="300s")
    noise = np.random.default_rng(0).lognormal(0.0, 0.01, len(idx))
    pd.DataFrame({"timestamp": idx.strftime("%Y-%m-%dT%H:%M:%S"), "value": rate * noise}).to_csv(path, index=False)


@pytest.mark.slow
def test_forecast_section_sizes_for_the_forecast_before_the_load_arrives(tmp_path):
    # 600/s offered until t = 60 s; the rate history says 1,800/s is the norm at this hour.
    _rates_csv(tmp_path / "rates.csv", 1800.0)
    cfg = _config(tmp_path, '[forecast]\nseries = "rates.csv"\nquantile = 0.9\nlookahead_s = 600.0')
    r = _augury("run", "--config", cfg, "--iterations", "6", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    steps = [json.loads(line) for line in r.stdout.splitlines()]
    applied = [s for s in steps if s["applied"]]
    assert applied, [s["decision"]["reasons"] for s in steps]
    assert any("forecast" in reason for reason in applied[0]["decision"]["reasons"])


def test_bad_forecast_section_is_exit_2(tmp_path):
    r = _augury("run", "--config", _config(tmp_path, "[forecast]\nquantile = 0.9"), "--iterations", "1", cwd=tmp_path)
    assert r.returncode == 2 and "forecast.store" in r.stderr
    r = _augury("run", "--config", _config(tmp_path, '[forecast]\nseries = "none.csv"'), "--iterations", "1",
                cwd=tmp_path)
    assert r.returncode == 2 and "forecast.series" in r.stderr
    _rates_csv(tmp_path / "rates.csv", 100.0)
    r = _augury("run", "--config", _config(tmp_path, '[forecast]\nseries = "rates.csv"\nquantile = 2'),
                "--iterations", "1", cwd=tmp_path)
    assert r.returncode == 2 and "quantile" in r.stderr and r.stderr.count("\n") == 1
