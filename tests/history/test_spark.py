"""history.spark: in local mode the driver listens on loopback only (issue 22); a short-lived
session's JVMs run the client compiler only."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

import pytest

from history.spark import LOOPBACK_CONF

pytestmark = pytest.mark.spark
PROC = Path("/proc")


def _children(pid: int) -> set[int]:
    """``pid``'s descendants (from /proc/<n>/stat)."""
    parents: dict[int, int] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in (PROC / str(pid) / "fd").iterdir():
            with_target = os.readlink(fd) if fd.is_symlink() else ""
            if with_target.startswith("socket:["):
                inodes.add(with_target[len("socket:["):-1])
    except OSError:
        pass
    return inodes


def _listening(inodes: set[str]) -> list[tuple[str, int]]:
    """(address, port) of the LISTEN sockets among ``inodes`` (from /proc/net/tcp{,6})."""
    found = []
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in (PROC / "net" / name).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)  # each 32-bit word printed in host (little-endian) order
            raw = b"".join(struct.pack("<I", struct.unpack(">I", raw[i:i + 4])[0]) for i in range(0, len(raw), 4))
            found.append((socket.inet_ntop(family, raw), int(port, 16)))
    return found


@pytest.mark.skipif(not (PROC / "net" / "tcp").is_file(), reason="needs Linux /proc")
def test_local_spark_listens_on_loopback_only(spark):
    conf = spark.sparkContext.getConf()
    for key, value in LOOPBACK_CONF.items():
        assert conf.get(key) == value
    spark.range(10).count()  # the block manager is up
    inodes = set().union(*(_socket_inodes(p) for p in _children(os.getpid())))
    sockets = _listening(inodes)
    driver_port = int(conf.get("spark.driver.port"))
    assert driver_port in {port for _, port in sockets}, sockets
    assert all(address in ("127.0.0.1", "::1", "::ffff:127.0.0.1") for address, _ in sockets), sockets


def test_every_spark_session_is_started_by_spark_session():
    """``history summarize``, ``whatif --spark-master``, the demo and the experiments get the
    loopback settings because none of them builds a session itself: ``SparkSession.builder``
    appears in history/spark.py only (issue 22: Spark bound every interface during summarize and
    whatif). Checked by hand with ``ss -ltnp`` during both commands: every LISTEN socket of their
    JVM on 127.0.0.1."""
    root = Path(__file__).resolve().parents[2]
    builders = [str(path.relative_to(root)) for package in ("augury", "history", "modeler", "scheduler", "experiments")
                for path in (root / package).rglob("*.py") if ".builder" in path.read_text(encoding="utf-8")]
    assert builders == ["history/spark.py"], builders


def test_a_short_lived_session_compiles_with_the_client_compiler_only(spark):
    """The shared test session is started ``short_lived`` (conftest): the option reaches the JVM
    that runs (its input arguments, not only the configuration) and the executors' options."""
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert "-XX:TieredStopAtLevel=1" in list(runtime.getInputArguments())
    executor = spark.sparkContext.getConf().get("spark.executor.extraJavaOptions")
    assert "-XX:TieredStopAtLevel=1" in executor.split() and "-Duser.timezone=UTC" in executor.split()


_SESSION_SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
from history.spark import spark_session
spark = spark_session(short_lived=True)
print(spark.range(5).count())
runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print("ARGS " + " ".join(str(a) for a in runtime.getInputArguments()))
"""


@pytest.mark.slow
def test_local_jvms_share_sparks_classes_through_an_archive_the_first_one_writes(tmp_path):
    """The first local JVM writes the class-data-sharing archive as it exits (promoted only once
    it exited normally; nothing left behind, a dead creator's lock and dump included; older
    archives beyond three deleted); the next maps it and prints nothing of its own on
    stdout; a damaged archive (cut short: mapping it kills the JVM) costs one failed start, after
    which the session starts without it and the archive is gone."""
    import subprocess
    import sys

    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "AUGURY_SPARK_CDS": "1"}
    env.pop("AUGURY_JVM_LOG", None)

    def run() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _SESSION_SCRIPT.format(repo=repo)], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)

    import time

    jvm_dir = tmp_path / "augury" / "jvm"
    jvm_dir.mkdir(parents=True)
    others = [jvm_dir / f"spark-0.0.{k}-000000000000.jsa" for k in range(3)]  # other installations'
    for age, other in enumerate(others):
        other.write_bytes(b"x")
        os.utime(other, (time.time() - 1000 * (3 - age),) * 2)  # others[0] the least recently used
    # left by a creator that died (killed, or ended by os._exit): its lock and its partial dump
    from unittest import mock

    from history.spark import _ClassDataSharing

    with mock.patch.dict(os.environ, {"XDG_CACHE_HOME": str(tmp_path)}):
        archive = _ClassDataSharing().archive
    dead = subprocess.Popen(["true"])
    dead.wait()
    archive.with_name(archive.name + ".creating").write_text(str(dead.pid))
    archive.with_name(f"{archive.name}.{dead.pid}.tmp").write_bytes(b"cut short")
    first = run()
    assert first.returncode == 0, first.stderr[-2000:]
    assert "-XX:ArchiveClassesAtExit=" in first.stdout
    archives = [p for p in jvm_dir.glob("*.jsa") if p not in others]
    assert len(archives) == 1 and archives[0].stat().st_size > 0
    # no dump and no lock left; the three most recently used archives kept
    assert sorted(p.name for p in jvm_dir.iterdir()) == sorted([archives[0].name, others[1].name, others[2].name])

    second = run()
    assert second.returncode == 0, second.stderr[-2000:]
    lines = second.stdout.splitlines()
    assert lines[0] == "5" and len(lines) == 2, lines
    assert f"-XX:SharedArchiveFile={archives[0]}" in lines[1].split()

    archives[0].chmod(0o644)
    os.truncate(archives[0], 1 << 20)
    third = run()
    assert third.returncode == 0, third.stderr[-2000:]
    assert "5" in third.stdout.splitlines()
    assert not archives[0].exists()
