"""A real standalone Spark cluster (a master and two one-core workers started from the pyspark
installation, all on 127.0.0.1): ``augury history summarize`` and ``augury whatif`` with ``--spark-master spark://127.0.0.1:PORT`` write the
tables local mode writes, and nothing the cluster or the applications start listens beyond
loopback. The cluster is torn down (its process groups killed) whatever happens."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from augury.cli import main
from history.summarize import summarize_store
from tests.conftest import EXAMPLES
from tests.history.test_spark import _children, _listening, _socket_inodes
from tests.history.test_summarize import _ingest, assert_same_tables, dag_rows, flat_rows, tables

pytestmark = [pytest.mark.spark, pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/net/tcp").is_file(), reason="needs Linux /proc")]

LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")
EXECUTOR_MEMORY = "512m"


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Cluster:
    """A standalone master and its workers, each in a process group of its own."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        import pyspark

        self.root = root
        self.home = Path(pyspark.__file__).parent
        ports = _free_ports(2 + 2 * workers)
        self.port, self.ui_port = ports[0], ports[1]
        self.url = f"spark://127.0.0.1:{self.port}"
        conf = root / "conf"
        conf.mkdir(parents=True)
        # what a user's spark-defaults.conf would say: small executors (the machine has 2 cores)
        (conf / "spark-defaults.conf").write_text(
            f"spark.executor.memory {EXECUTOR_MEMORY}\nspark.executor.cores 1\nspark.cores.max {workers}\n")
        self.env = {**os.environ, "SPARK_HOME": str(self.home), "SPARK_CONF_DIR": str(conf),
                    "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m",
                    "SPARK_LOG_DIR": str(root / "logs"), "SPARK_WORKER_DIR": str(root / "work"),
                    "PYSPARK_PYTHON": sys.executable}
        self.procs: list[subprocess.Popen] = []
        spark_class = str(self.home / "bin" / "spark-class")
        self._start("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(self.ui_port)])
        for i in range(workers):
            port, ui = ports[2 + 2 * i], ports[3 + 2 * i]
            self._start(f"worker-{i}", [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                        "--port", str(port), "--webui-port", str(ui), "--cores", "1",
                                        "--memory", "768m", "--work-dir", str(root / f"work-{i}"), self.url])
        self._wait_for_workers(workers)

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.log", "wb")
        self.procs.append(subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))
        log.close()

    def _wait_for_workers(self, n: int, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as answer:
                    if json.load(answer).get("aliveworkers", 0) >= n:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the standalone cluster did not start: {self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                         for p in sorted(self.root.glob("*.log")))

    def pids(self) -> set[int]:
        """The daemons, their children (executors) and their descendants."""
        pids = {p.pid for p in self.procs if p.poll() is None}
        return pids.union(*(_children(p) for p in pids)) if pids else set()

    def stop(self) -> None:
        for proc in self.procs:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)  # the worker's executors are in its group
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = Cluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield started
    finally:
        started.stop()


def _listening_sockets(pids: set[int]) -> list[tuple[str, int]]:
    return _listening(set().union(*(_socket_inodes(p) for p in pids))) if pids else []


def _augury(cluster: Cluster, *argv: str) -> tuple[int, str, str, list]:
    """``augury ARGV`` in its own process (the driver), with the sockets every process of the
    cluster and of the application listened on while it ran (sampled every 0.3 s)."""
    proc = subprocess.Popen([sys.executable, "-m", "augury", *argv], env=cluster.env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen: set = set()
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.update(_listening_sockets(cluster.pids() | {proc.pid} | _children(proc.pid)))
            done.wait(0.3)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        done.set()
        sampler.join()
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err, sorted(seen)


def test_the_daemons_listen_on_loopback_only(cluster):
    sockets = _listening_sockets(cluster.pids())
    assert {port for _, port in sockets} >= {cluster.port, cluster.ui_port}, sockets
    assert all(address in LOOPBACK for address, _ in sockets), sockets


def test_summarize_on_the_cluster_equals_local_mode(cluster, tmp_path, small_spark):
    store, local = tmp_path / "store", tmp_path / "local"
    _ingest(tmp_path, store, "b1", dag_rows(range(0, 12)) + flat_rows(range(0, 12)))
    shutil.copytree(store, local)
    code, out, err, sockets = _augury(cluster, "history", "summarize", "--store", str(store), "--window", "20s",
                                      "--spark-master", cluster.url, "--json")
    assert code == 0, err + cluster.logs()
    report = json.loads(out)
    assert report["mode"] == "full" and report["raw_rows_read"] == report["raw_rows"]
    summarize_store(local, window_s=20.0, spark=small_spark)
    assert_same_tables(tables(store), tables(local))
    # the executors ran on the workers: each worker has this application's executor directory
    assert any((cluster.root / "work-0").glob("app-*")) and any((cluster.root / "work-1").glob("app-*"))
    assert sockets and all(address in LOOPBACK for address, _ in sockets), sockets


def test_whatif_on_the_cluster_equals_local_mode(cluster, tmp_path, capsys):
    argv = ["whatif", str(EXAMPLES / "pipeline.yaml"), "--rates", "500:3000:4", "--sweep", "sessionize=1..6",
            "--json"]
    code_l = main([*argv, "--out", str(tmp_path / "local.parquet")])
    local = json.loads(capsys.readouterr().out)
    code, out, err, sockets = _augury(cluster, *argv, "--out", str(tmp_path / "cluster.parquet"),
                                      "--spark-master", cluster.url)
    assert code == code_l, err + cluster.logs()
    remote = json.loads(out)
    assert remote["engine"] == "spark"
    assert remote["cheapest"] == local["cheapest"] and remote["best_max_rate"] == local["best_max_rate"]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "cluster.parquet"),
                                  pd.read_parquet(tmp_path / "local.parquet"), rtol=1e-12)
    assert sockets and all(address in LOOPBACK for address, _ in sockets), sockets
