"""``augury run`` closed-loop beside a live Flink job (the session cluster of conftest.py).

The SleepPipeline at (Enrich=1, Aggregate=1) is offered 200 tuples/s; one Aggregate instance
carries ~120/s, so the job is under-provisioned. In advisor mode the loop decides to scale and
logs it, and the job keeps its parallelism; in acting mode the same config (advisor off) rescales
the job through the live actuator.

Bounded by ``BUDGET_S`` (conftest.py's ``live_deadline``: cluster start-up included when this test
starts the cluster, every subprocess and wait gets the time that is left, a SIGALRM timer fails the
test when it is spent); only the job's cancel in ``finally`` (at most ``CANCEL_S``) runs after.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.flink.jobs import SleepPipelineSpec, submit
from scheduler.flink import FlinkMetricsSource, LiveFlinkActuator

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "experiments" / "flink" / "jobs" / "sleep_pipeline.yaml"
JOB = "augury-run-it"
BUDGET_S = 235.0
"""Seconds (cluster start-up included when this test starts it); two 5-step ``augury run``
subprocesses (4 s windows) and a rescale: about 70 s at load average 12-20 (docs/flink.md: both
live files 235 s with an 80 s start-up)."""
CANCEL_S = 30.0


def _config(path: Path, rest_url: str, advisor: bool) -> Path:
    path.write_text(f"""
[job]
model = "{MODEL}"
state = "state-{'advisor' if advisor else 'acting'}.db"

[metrics]
source = "flink"
rest_url = "{rest_url}"
job_name = "{JOB}"
window_s = 4.0
settle_s = 1.0

[actuator]
kind = "flink-rest"
ready_timeout_s = 90.0

[slo]
utilization_target = 0.7

[intervals]
interval_s = 4.0
confirm_windows = 1
evaluate_after_s = 8.0

[guard]
advisor = {'true' if advisor else 'false'}
max_parallelism = 8
stabilization_s = 0.0
settle_s = 2.0

[trust]
good_windows = 1
""")
    return path


def _run(config: Path, iterations: int, timeout_s: float) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "augury", "run", "--config", str(config), "--iterations",
                        str(iterations), "--json"], cwd=config.parent, capture_output=True, text=True,
                       timeout=timeout_s)
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def _decided_scale(steps: list[dict]) -> list[dict]:
    return [s for s in steps if s["decision"]["kind"] == "scale"]


@pytest.mark.flink
@pytest.mark.slow
def test_augury_run_advises_then_acts_on_a_live_flink_job(flink_cluster, live_deadline, tmp_path):
    deadline = live_deadline(BUDGET_S)
    spec = SleepPipelineSpec(rate_per_s=200.0, enrich_ms=5.0, aggregate_ms=8.0, name=JOB)
    job = submit(flink_cluster, spec, wait_running_s=deadline.left(at_most=90))
    actuator = LiveFlinkActuator(flink_cluster.rest_url, job)
    try:
        # advisor: decides to scale (and says why), never acts
        steps = _run(_config(tmp_path / "advisor.toml", flink_cluster.rest_url, advisor=True), 5,
                     deadline.left())
        assert any(s["ok"] and s["windows"] for s in steps)
        scale = _decided_scale(steps)
        assert scale, [(s["decision"], s["trust_reasons"], s["read_error"]) for s in steps]
        assert all(s["decision"]["advisor"] for s in scale)
        assert not any(s["applied"] for s in steps)
        assert scale[0]["decision"]["config"]["Aggregate"] > 1 and scale[0]["decision"]["reasons"]
        assert actuator.current() == spec.config()

        # acting: the same loop rescales the job at runtime
        steps = _run(_config(tmp_path / "acting.toml", flink_cluster.rest_url, advisor=False), 5,
                     deadline.left())
        applied = [s for s in steps if s["applied"]]
        assert applied, [(s["decision"], s["act_error"]) for s in steps]
        assert applied[0]["decision"]["config"]["Aggregate"] > 1
        log = subprocess.run([sys.executable, "-m", "augury", "log", "--state", "state-acting.db", "--json"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=deadline.left(at_most=120))
        assert log.returncode == 0, log.stderr
        actions = json.loads(log.stdout)["actions"]
        assert any(a["applied"] and "rescaled" in a["detail"] for a in actions), actions
        now = actuator.current()
        assert now["Aggregate"] > 1 and now != spec.config()
        # and the metrics show the new parallelism
        graph = FlinkMetricsSource(flink_cluster.rest_url, job).graph()
        assert graph.config() == now
    finally:
        flink_cluster.cancel(job, timeout_s=CANCEL_S)
