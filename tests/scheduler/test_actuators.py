"""Actuators: one contract for all of them, plus the exact requests each one makes."""

from __future__ import annotations

import io
import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from scheduler.actuators import (OVERRIDES_KEY, DryRunActuator, FlinkKubernetesActuator, FlinkRestActuator,
                                 HeronActuator)
from scheduler.interfaces import ActuationFailed, Actuator, InMemoryActuator

START = {"source": 1, "split": 2, "count": 2}
VERTICES = {"source": "a1", "split": "b2", "count": "c3"}


class FakeFlink:
    """A local HTTP server speaking the two adaptive-scheduler endpoints; records PUT bodies."""

    def __init__(self, job="j1"):
        self.job = job
        self.reqs = {VERTICES[n]: {"parallelism": {"lowerBound": 1, "upperBound": p}} for n, p in START.items()}
        self.bodies: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == f"/jobs/{fake.job}":
                    self._send(200, {"jid": fake.job, "vertices": [
                        {"id": vid, "name": name, "parallelism": fake.reqs[vid]["parallelism"]["upperBound"]}
                        for name, vid in VERTICES.items()]})
                elif self.path == f"/jobs/{fake.job}/resource-requirements":
                    self._send(200, fake.reqs)
                else:
                    self._send(404, {"errors": ["not found"]})

            def do_PUT(self):
                if self.path != f"/jobs/{fake.job}/resource-requirements":
                    self._send(404, {"errors": ["not found"]})
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.bodies.append(body)
                fake.reqs = body
                self._send(200, {})

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_flink():
    fake = FakeFlink()
    yield fake
    fake.close()


class FakeRunner:
    def __init__(self, returncode=0):
        self.calls: list[list[str]] = []
        self.returncode = returncode

    def __call__(self, argv):
        self.calls.append(list(argv))
        return subprocess.CompletedProcess(list(argv), self.returncode, stdout="", stderr="boom" if self.returncode else "")


def _make(kind, fake_flink):
    if kind == "in-memory":
        return InMemoryActuator(dict(START))
    if kind == "dry-run":
        return DryRunActuator(dict(START), out=io.StringIO(), clock=lambda: 0.0)
    if kind == "flink-rest":
        return FlinkRestActuator(fake_flink.url, "j1")
    if kind == "flink-kubernetes":
        return FlinkKubernetesActuator("wordcount", VERTICES, dict(START), runner=FakeRunner())
    if kind == "heron":
        return HeronActuator("local", "wordcount", dict(START), runner=FakeRunner())
    raise AssertionError(kind)


KINDS = ["in-memory", "dry-run", "flink-rest", "flink-kubernetes", "heron"]


@pytest.mark.parametrize("kind", KINDS)
def test_actuator_contract(kind, fake_flink):
    actuator = _make(kind, fake_flink)
    assert isinstance(actuator, Actuator)
    assert actuator.current() == START
    result = actuator.apply({"split": 3, "count": 5}, reason="forecast peak")
    assert dict(result.config) == {"source": 1, "split": 3, "count": 5}
    assert actuator.current() == {"source": 1, "split": 3, "count": 5}
    # A partial configuration changes only what it names.
    actuator.apply({"count": 4})
    assert actuator.current() == {"source": 1, "split": 3, "count": 4}
    with pytest.raises(ActuationFailed):
        actuator.apply({"nope": 2})
    assert actuator.current() == {"source": 1, "split": 3, "count": 4}


def test_dry_run_writes_one_json_line_per_change(tmp_path):
    out = io.StringIO()
    dry = DryRunActuator(dict(START), out=out, clock=lambda: 1700000000.0)
    result = dry.apply({"split": 4}, reason="r1")
    assert not result.applied
    assert json.loads(out.getvalue()) == {"ts": 1700000000.0, "config": {"source": 1, "split": 4, "count": 2},
                                          "changes": {"split": {"from": 2, "to": 4}}, "reason": "r1"}
    path = tmp_path / "changes.jsonl"
    dry = DryRunActuator(dict(START), out=path, clock=lambda: 5.0)
    dry.apply({"count": 3})
    dry.apply({"count": 3})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["changes"] for line in lines] == [{"count": {"from": 2, "to": 3}}, {}]


def test_flink_rest_put_bodies_are_exact(fake_flink):
    actuator = FlinkRestActuator(fake_flink.url, "j1", lower_bound=1)
    actuator.apply({"split": 6})
    actuator.apply({"count": 1, "split": 2})
    assert fake_flink.bodies == [
        {"a1": {"parallelism": {"lowerBound": 1, "upperBound": 1}},
         "b2": {"parallelism": {"lowerBound": 1, "upperBound": 6}},
         "c3": {"parallelism": {"lowerBound": 1, "upperBound": 2}}},
        {"a1": {"parallelism": {"lowerBound": 1, "upperBound": 1}},
         "b2": {"parallelism": {"lowerBound": 1, "upperBound": 2}},
         "c3": {"parallelism": {"lowerBound": 1, "upperBound": 1}}},
    ]


def test_flink_rest_errors_are_actuation_failures(fake_flink):
    with pytest.raises(ActuationFailed, match="HTTP 404"):
        FlinkRestActuator(fake_flink.url, "other", vertex_ids=VERTICES).current()
    fake_flink.close()
    with pytest.raises(ActuationFailed, match="unreachable"):
        FlinkRestActuator(fake_flink.url, "j1", timeout_s=1.0).current()
    fake_flink.close = lambda: None  # already closed


def test_kubernetes_patch_and_command():
    runner = FakeRunner()
    k8s = FlinkKubernetesActuator("wordcount", VERTICES, dict(START), namespace="jobs", runner=runner)
    assert k8s.patch({"split": 4}) == {"spec": {"flinkConfiguration": {OVERRIDES_KEY: "a1:1,b2:4,c3:2"}}}
    k8s.apply({"split": 4, "count": 8})
    assert runner.calls == [["kubectl", "patch", "flinkdeployment", "wordcount", "-n", "jobs", "--type", "merge",
                             "-p", json.dumps({"spec": {"flinkConfiguration": {OVERRIDES_KEY: "a1:1,b2:4,c3:8"}}},
                                              sort_keys=True)]]
    failing = FlinkKubernetesActuator("wordcount", VERTICES, dict(START), runner=FakeRunner(returncode=1))
    with pytest.raises(ActuationFailed, match="kubectl patch failed"):
        failing.apply({"split": 4})
    assert failing.current() == START


def test_heron_command_line():
    runner = FakeRunner()
    heron = HeronActuator("aurora/www/devel", "wordcount", dict(START), runner=runner)
    heron.apply({"split": 5, "count": 2, "source": 1})
    assert runner.calls == [["heron", "update", "aurora/www/devel", "wordcount", "--component-parallelism=split:5"]]
    assert heron.apply({"split": 5}).applied is False  # no change: no command
    assert len(runner.calls) == 1
    failing = HeronActuator("local", "wordcount", dict(START), runner=FakeRunner(returncode=2))
    with pytest.raises(ActuationFailed, match="heron update failed"):
        failing.apply({"split": 3})
