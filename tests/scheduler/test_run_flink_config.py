"""``augury run`` with the live Flink source and actuator: config checks and an unreachable cluster
(no Flink needed; the live closed loop is tests/experiments/flink/test_run_live.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from augury.commands.run import load_run_config
from modeler.errors import AuguryError

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "experiments" / "flink" / "jobs" / "sleep_pipeline.yaml"


def _write(tmp_path, metrics: str, actuator: str = "", extra: str = "") -> str:
    path = tmp_path / "run.toml"
    path.write_text(f'[job]\nmodel = "{MODEL}"\n[metrics]\n{metrics}\n[actuator]\n{actuator}\n{extra}')
    return str(path)


def test_flink_source_and_actuator_settings_are_parsed(tmp_path):
    spec = load_run_config(_write(
        tmp_path, 'source = "flink"\nrest_url = "http://127.0.0.1:8081"\njob_name = "j"\nsettle_s = 3.0',
        'kind = "flink-rest"\nready_timeout_s = 30.0', "[intervals]\ninterval_s = 5.0"))
    f = spec["flink"]
    assert spec["actuator"] == "flink-rest" and f["job_name"] == "j" and f["job_id"] is None
    assert f["metrics"].window_s == 5.0 and f["metrics"].settle_s == 3.0
    assert f["actuator"].ready_timeout_s == 30.0 and f["actuator_url"] == "http://127.0.0.1:8081"


@pytest.mark.parametrize("metrics, actuator, field", [
    ('source = "flink"\njob_name = "j"', "", "metrics.rest_url"),
    ('source = "flink"\nrest_url = "http://h:1"', "", "metrics.job_id"),
    ('source = "flink"\nrest_url = "http://h:1"\njob_name = "j"\njob_id = "x"', "", "metrics.job_id"),
    ('source = "flink"\nrest_url = "http://h:1"\njob_name = "j"\nwindow = 3', "", "metrics.window"),
    ('source = "flink"\nrest_url = "http://h:1"\njob_name = "j"', 'kind = "flink-rest"\nwait = 1', "actuator.wait"),
    ('source = "flink"\nrest_url = "http://h:1"\njob_name = "j"', 'kind = "testbed"', "actuator.kind"),
    ('source = "testbed"', 'kind = "flink-rest"', "actuator.kind"),
    ('source = "kafka"', "", "metrics.source"),
])
def test_bad_flink_settings_name_the_field(tmp_path, metrics, actuator, field):
    with pytest.raises(AuguryError) as err:
        load_run_config(_write(tmp_path, metrics, actuator))
    assert err.value.exit_code == 2 and field in str(err.value)


def test_an_unreachable_cluster_is_an_environment_failure(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    config = _write(tmp_path, f'source = "flink"\nrest_url = "http://127.0.0.1:{port}"\njob_name = "j"\ntimeout_s = 2.0')
    r = subprocess.run([sys.executable, "-m", "augury", "run", "--config", config, "--iterations", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("augury run: error:") and "jobs/overview" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
