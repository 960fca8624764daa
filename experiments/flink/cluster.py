"""A managed local Apache Flink cluster (standalone, from the ``apache-flink`` wheel), loopback only.

Flink lives in its **own** virtual environment (its pins clash with pyspark's pyarrow/pandas):
``$AUGURY_FLINK_VENV``, default ``~/.cache/augury/flink-venv-<FLINK_VERSION>``. ``ensure_flink_venv``
creates it when missing (``python -m venv`` + ``pip install apache-flink==FLINK_VERSION``, under a
file lock, marked complete only once the install succeeded). The Flink distribution is the
installed ``pyflink`` package directory (``bin/ conf/ lib/ opt/ plugins/``).

``FlinkCluster`` copies the wheel's ``conf/`` into a private ``FLINK_CONF_DIR`` and writes
``config.yaml``: adaptive scheduler with short stabilization / wait timeouts, several task slots,
small memory (2 cores), every bind and advertised address 127.0.0.1, the REST port of your choice,
metrics fetched for REST every second, and the Prometheus reporter from the wheel's ``plugins/``
served on loopback ports. (Flink's own ``PrometheusReporter`` binds every interface; augury compiles
``reporter/LoopbackPrometheusReporter*.java`` against the wheel's plugin jar and runs the two
together in a private plugin directory.) It starts the JobManager and one TaskManager with the
wheel's ``bin/jobmanager.sh`` / ``bin/taskmanager.sh``, waits for ``/overview`` to show every slot,
and always stops them: ``stop()`` runs on ``__exit__`` (errors included), on SIGINT/SIGTERM and at
interpreter exit, asks the scripts to stop, then kills (by pid) every process still running whose
command line names the cluster's private directory.

Command line (``python -m experiments.flink.cluster``): ``up`` (start, leave running), ``down``,
``status``, ``run`` (start, hold until interrupted, stop). Times in the config are seconds unless
the name says otherwise; memory in MiB.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import glob
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from modeler.errors import AuguryError

FLINK_VERSION = "2.2.1"
"""The pinned apache-flink wheel (Java 17)."""

HERE = Path(__file__).resolve().parent
JOB_SOURCES = (HERE / "jobs" / "SleepPipeline.java", HERE / "jobs" / "NexmarkSql.java")
REPORTER_SOURCES = tuple(sorted((HERE / "reporter").glob("*.java")))
REPORTER_FACTORY = "org.apache.flink.metrics.prometheus.LoopbackPrometheusReporterFactory"
LOOPBACK = "127.0.0.1"


SOURCE_THREAD = "Legacy Source T"
"""What ``/proc/<pid>/task/<tid>/comm`` (a thread name's first 15 characters) shows for a legacy
``SourceFunction``'s own thread ('Legacy Source Thread - Source: bid[1] (1/1)#0'): Flink's SQL
``datagen`` generates and serializes its rows there, outside the task's mailbox thread, which is
why it reports no busy time."""


def thread_cpu_s(stat: str, ticks_per_s: float) -> float:
    """CPU seconds (user + system) of one ``/proc/<pid>/task/<tid>/stat`` line. The thread's
    name may hold spaces and parentheses: the fields are counted after the last ')'
    (utime and stime are fields 14 and 15 of proc(5))."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks_per_s


def machine_busy_cpu_s(proc_stat: str, ticks_per_s: float) -> float:
    """CPU seconds every core of the machine has spent busy (not idle, not waiting for I/O) so
    far, from ``/proc/stat``'s ``cpu`` line."""
    for line in proc_stat.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            return (sum(values[:8]) - values[3] - values[4]) / ticks_per_s
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


class FlinkClusterError(AuguryError):
    """The local Flink cluster could not be created, started or reached."""

    exit_code = 3


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "augury"


def flink_venv_dir() -> Path:
    """``$AUGURY_FLINK_VENV`` or ``~/.cache/augury/flink-venv-<FLINK_VERSION>``."""
    env = os.environ.get("AUGURY_FLINK_VENV")
    return Path(env).expanduser() if env else cache_dir() / f"flink-venv-{FLINK_VERSION}"


def _log(msg: str) -> None:
    print(f"[flink] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _find_flink_home(venv: Path) -> Path | None:
    for cand in sorted(glob.glob(str(venv / "lib" / "python*" / "site-packages" / "pyflink"))):
        home = Path(cand)
        if all((home / d).is_dir() for d in ("bin", "conf", "lib", "plugins")):
            return home
    return None


def check_java() -> str:
    """``java -version`` text; raises FlinkClusterError when Java is missing."""
    java = shutil.which("java")
    if java is None and os.environ.get("JAVA_HOME"):
        java = str(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    if not java or not Path(java).exists():
        raise FlinkClusterError("Java is not installed (Flink 2.x needs Java 17 on PATH or JAVA_HOME)",
                                field="java")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    return (out.stderr or out.stdout).strip().splitlines()[0] if (out.stderr or out.stdout) else java


def ensure_flink_venv(venv: str | Path | None = None, python: str | None = None,
                      timeout_s: float = 900.0) -> Path:
    """Create the Flink virtual environment if missing; return the Flink home (the pyflink dir).

    ``python``: the interpreter to build the venv from (default: this one). Raises
    FlinkClusterError (naming the pip output) when the wheel cannot be installed.
    """
    venv = Path(venv) if venv else flink_venv_dir()
    marker = venv / ".augury-complete"
    home = _find_flink_home(venv)
    if marker.is_file() and home is not None:
        return home
    with _file_lock(venv.parent / f".{venv.name}.lock"):
        home = _find_flink_home(venv)
        if marker.is_file() and home is not None:
            return home
        if venv.exists():
            shutil.rmtree(venv)
        _log(f"creating the Flink virtual environment {venv} (apache-flink=={FLINK_VERSION})")
        started = time.monotonic()
        base = python or getattr(sys, "_base_executable", None) or sys.executable
        try:
            subprocess.run([base, "-m", "venv", str(venv)], check=True, capture_output=True,
                           text=True, timeout=300)
            pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install",
                                  "--disable-pip-version-check", "--quiet",
                                  f"apache-flink=={FLINK_VERSION}"],
                                 capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as err:
            shutil.rmtree(venv, ignore_errors=True)
            raise FlinkClusterError("creating the Flink virtual environment timed out",
                                    file=str(venv), value=f"{err.timeout:.0f} s") from None
        except subprocess.CalledProcessError as err:
            shutil.rmtree(venv, ignore_errors=True)
            raise FlinkClusterError(f"python -m venv failed: {err.stderr.strip()[-500:]}",
                                    file=str(venv)) from None
        if pip.returncode != 0:
            tail = "\n".join(line for line in (pip.stderr or "").splitlines()
                             if "is ignored" not in line)[-1500:]
            shutil.rmtree(venv, ignore_errors=True)
            raise FlinkClusterError(f"pip could not install apache-flink=={FLINK_VERSION}: {tail}",
                                    file=str(venv), field="apache-flink", value=FLINK_VERSION)
        home = _find_flink_home(venv)
        if home is None:
            raise FlinkClusterError("the installed wheel has no Flink distribution (pyflink/bin, lib)",
                                    file=str(venv))
        marker.write_text(f"apache-flink=={FLINK_VERSION}\n")
        _log(f"Flink virtual environment ready in {time.monotonic() - started:.0f} s")
        return home


def _sources_digest(sources, home: Path) -> str:
    digest = hashlib.sha256(FLINK_VERSION.encode())
    digest.update(str(home).encode())
    for src in sources:
        digest.update(Path(src).read_bytes())
    return digest.hexdigest()[:16]


def _javac(sources, classpath: list[str], out_jar: Path, services: dict[str, str] | None = None):
    javac = shutil.which("javac")
    if javac is None:
        raise FlinkClusterError("javac is not installed (a JDK 17 is needed to build the test job)",
                                field="javac")
    jar = shutil.which("jar")
    with tempfile.TemporaryDirectory(prefix="augury-javac-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        out = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-d", str(classes), "-cp",
                              ":".join(classpath), *map(str, sources)],
                             capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise FlinkClusterError(f"javac failed: {out.stderr.strip()[-1500:]}",
                                    file=str(sources[0]))
        for name, content in (services or {}).items():
            path = classes / "META-INF" / "services" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content + "\n")
        out_jar.parent.mkdir(parents=True, exist_ok=True)
        partial = out_jar.with_suffix(".partial")
        if jar:
            subprocess.run([jar, "cf", str(partial), "-C", str(classes), "."], check=True,
                           capture_output=True, timeout=120)
        else:  # a jar is a zip
            shutil.make_archive(str(partial), "zip", classes)
            os.replace(str(partial) + ".zip", partial)
        os.replace(partial, out_jar)
    return out_jar


def build_job_jar(home: Path) -> Path:
    """Compile the test jobs (``jobs/*.java``) against the distribution's lib jars; cached."""
    out = cache_dir() / "jars" / f"augury-flink-jobs-{_sources_digest(JOB_SOURCES, home)}.jar"
    if out.is_file():
        return out
    with _file_lock(out.parent / ".jobs.lock"):
        if not out.is_file():
            _javac(JOB_SOURCES, [str(home / "lib" / "*")], out)
    return out


def build_reporter_jar(home: Path) -> Path:
    """Compile the loopback Prometheus reporter against the wheel's plugin jar; cached."""
    plugin = home / "plugins" / "metrics-prometheus"
    out = cache_dir() / "jars" / f"augury-prometheus-loopback-{_sources_digest(REPORTER_SOURCES, home)}.jar"
    if out.is_file():
        return out
    with _file_lock(out.parent / ".reporter.lock"):
        if not out.is_file():
            _javac(REPORTER_SOURCES, [str(home / "lib" / "*"), str(plugin / "*")], out,
                   {"org.apache.flink.metrics.reporter.MetricReporterFactory": REPORTER_FACTORY})
    return out


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class ClusterConfig:
    """A local standalone cluster: one JobManager, one TaskManager, loopback only."""

    rest_port: int = 8081
    """REST API and web UI port (127.0.0.1)."""
    rpc_port: int = 6123
    """JobManager RPC port (127.0.0.1)."""
    prometheus_port: int = 9249
    """First Prometheus reporter port; the JobManager and TaskManager take ports from
    ``prometheus_port .. prometheus_port + 3`` (127.0.0.1)."""
    task_slots: int = 8
    """Task slots of the TaskManager (the most subtasks of one vertex)."""
    jobmanager_memory_mb: int = 1024
    """JobManager process memory, MiB."""
    taskmanager_memory_mb: int = 1728
    """TaskManager process memory, MiB."""
    stabilization_timeout_s: float = 1.0
    """Adaptive scheduler: wait this long for more resources before (re)starting with what it has."""
    resource_wait_timeout_s: float = 30.0
    """Adaptive scheduler: how long a submitted job waits for any resources before failing."""
    metrics_fetch_interval_ms: int = 1000
    """How often the REST layer refreshes metrics from the TaskManager (Flink default 10 000)."""
    startup_timeout_s: float = 120.0
    """How long to wait for ``/overview`` to show every slot."""
    buffer_debloat: bool = True
    """Flink's network buffer debloating (in-flight data sized to ~1 s of throughput): an overloaded
    operator back-pressures its upstream within seconds instead of after minutes of filling 32 KiB
    buffers with small records, as on a tuned production cluster."""
    work_dir: str | None = None
    """Private directory (conf, logs, pids, plugins); default a new temporary directory."""
    venv: str | None = None
    """Flink virtual environment; default ``flink_venv_dir()``."""

    @staticmethod
    def free_ports(**overrides) -> "ClusterConfig":
        """A config on ports free right now (tests run beside other clusters)."""
        base = dict(rest_port=free_port(), rpc_port=free_port(), prometheus_port=free_port())
        base.update(overrides)
        return ClusterConfig(**base)


def flink_config(config: ClusterConfig, original: dict | None = None) -> dict[str, object]:
    """The flattened ``config.yaml`` entries (the wheel's JVM options kept)."""
    flat: dict[str, object] = {}

    def flatten(prefix: str, value):
        if isinstance(value, dict):
            for key, sub in value.items():
                flatten(f"{prefix}.{key}" if prefix else str(key), sub)
        else:
            flat[prefix] = value

    flatten("", original or {})
    prom_ports = f"{config.prometheus_port}-{config.prometheus_port + 3}"
    flat.update({
        "jobmanager.rpc.address": LOOPBACK,
        "jobmanager.rpc.port": config.rpc_port,
        "jobmanager.bind-host": LOOPBACK,
        "jobmanager.memory.process.size": f"{config.jobmanager_memory_mb}m",
        "taskmanager.host": LOOPBACK,
        "taskmanager.bind-host": LOOPBACK,
        "taskmanager.numberOfTaskSlots": config.task_slots,
        "taskmanager.memory.process.size": f"{config.taskmanager_memory_mb}m",
        "taskmanager.memory.managed.fraction": 0.05,
        "taskmanager.memory.network.min": "64m",
        "taskmanager.memory.network.max": "128m",
        "taskmanager.network.memory.buffer-debloat.enabled": bool(config.buffer_debloat),
        "rest.address": LOOPBACK,
        "rest.bind-address": LOOPBACK,
        "rest.port": config.rest_port,
        "rest.bind-port": str(config.rest_port),
        "blob.server.port": "0",
        "parallelism.default": 1,
        "jobmanager.scheduler": "adaptive",
        "jobmanager.adaptive-scheduler.resource-stabilization-timeout":
            f"{int(config.stabilization_timeout_s * 1000)} ms",
        "jobmanager.adaptive-scheduler.submission.resource-stabilization-timeout":
            f"{int(config.stabilization_timeout_s * 1000)} ms",
        "jobmanager.adaptive-scheduler.executing.resource-stabilization-timeout":
            f"{int(config.stabilization_timeout_s * 1000)} ms",
        "jobmanager.adaptive-scheduler.executing.cooldown-after-rescaling": "1 s",
        "jobmanager.adaptive-scheduler.resource-wait-timeout":
            f"{int(config.resource_wait_timeout_s * 1000)} ms",
        "jobmanager.adaptive-scheduler.submission.resource-wait-timeout":
            f"{int(config.resource_wait_timeout_s * 1000)} ms",
        "jobmanager.execution.failover-strategy": "region",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "1 s",
        "metrics.fetcher.update-interval": config.metrics_fetch_interval_ms,
        "metrics.reporters": "prom",
        "metrics.reporter.prom.factory.class": REPORTER_FACTORY,
        "metrics.reporter.prom.host": LOOPBACK,
        "metrics.reporter.prom.port": prom_ports,
        "metrics.reporter.prom.interval": "5 s",
        "web.submit.enable": True,
        "web.cancel.enable": True,
        "heartbeat.timeout": 30000,
    })
    return flat


def _yaml_scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(str(value))


def http_json(url: str, method: str = "GET", body=None, timeout_s: float = 10.0,
              headers: dict | None = None):
    """One HTTP request; the decoded JSON answer (None when empty). urllib errors propagate."""
    data = None
    hdrs = dict(headers or {})
    if body is not None and not isinstance(body, bytes):
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    elif body is not None:
        data = body
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        text = resp.read().decode()
    return json.loads(text) if text.strip() else None


class FlinkCluster:
    """A local cluster. Use as a context manager (always stopped), or ``start()`` / ``stop()``.

    Attributes after ``start()``: ``home`` (the Flink distribution), ``conf_dir``, ``log_dir``,
    ``rest_url`` (``http://127.0.0.1:<rest_port>``), ``startup_s`` (seconds until ready).
    """

    def __init__(self, config: ClusterConfig = ClusterConfig()) -> None:
        self.config = config
        self._own_dir = config.work_dir is None
        self.work_dir = Path(config.work_dir or tempfile.mkdtemp(prefix="augury-flink-"))
        self.conf_dir = self.work_dir / "conf"
        self.log_dir = self.work_dir / "log"
        self.pid_dir = self.work_dir / "pid"
        self.plugins_dir = self.work_dir / "plugins"
        self.home: Path | None = None
        self.rest_url = f"http://{LOOPBACK}:{config.rest_port}"
        self.startup_s: float | None = None
        self._started = False
        self._stopping = threading.Lock()
        self._old_handlers: dict[int, object] = {}

    # ------------------------------------------------------------------ setup
    def prepare(self) -> Path:
        """Create the venv if missing, write the private conf and plugin dirs. Returns Flink home."""
        check_java()
        self.home = ensure_flink_venv(self.config.venv)
        for d in (self.log_dir, self.pid_dir):
            d.mkdir(parents=True, exist_ok=True)
        if self.conf_dir.exists():
            shutil.rmtree(self.conf_dir)
        shutil.copytree(self.home / "conf", self.conf_dir)
        import yaml

        original = yaml.safe_load((self.home / "conf" / "config.yaml").read_text()) or {}
        flat = flink_config(self.config, original)
        (self.conf_dir / "config.yaml").write_text(
            "# written by augury experiments.flink.cluster\n"
            + "".join(f"{k}: {_yaml_scalar(v)}\n" for k, v in sorted(flat.items())))
        (self.conf_dir / "masters").write_text(f"{LOOPBACK}:{self.config.rest_port}\n")
        (self.conf_dir / "workers").write_text(f"{LOOPBACK}\n")
        plugin = self.plugins_dir / "metrics-prometheus-loopback"
        if self.plugins_dir.exists():
            shutil.rmtree(self.plugins_dir)
        plugin.mkdir(parents=True)
        for jar in (self.home / "plugins" / "metrics-prometheus").glob("*.jar"):
            shutil.copy2(jar, plugin / jar.name)
        shutil.copy2(build_reporter_jar(self.home), plugin / "augury-prometheus-loopback.jar")
        return self.home

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(FLINK_CONF_DIR=str(self.conf_dir), FLINK_LOG_DIR=str(self.log_dir),
                   FLINK_PID_DIR=str(self.pid_dir), FLINK_PLUGINS_DIR=str(self.plugins_dir),
                   FLINK_HOME=str(self.home))
        env.pop("FLINK_ENV_JAVA_OPTS", None)
        # the wheel's scripts must not pick up augury's venv python
        env.pop("PYTHONPATH", None)
        return env

    def _script(self, name: str, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(self.home / "bin" / name), *args], env=self.env(),
                              capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "FlinkCluster":
        """Start and wait until ready; on any failure the cluster is stopped and the error raised."""
        begin = time.monotonic()
        self._install_handlers()
        atexit.register(self.stop)
        try:
            self.prepare()
            if self._rest_alive():
                raise FlinkClusterError("something already answers on the REST port",
                                        field="rest_port", value=self.config.rest_port)
            self._started = True
            for script in ("jobmanager.sh", "taskmanager.sh"):
                out = self._script(script, "start")
                if out.returncode != 0:
                    raise FlinkClusterError(f"{script} start failed: {out.stderr.strip()[-800:]}",
                                            file=str(self.home / "bin" / script))
            self.wait_ready()
            self.startup_s = time.monotonic() - begin
            _log(f"cluster ready at {self.rest_url} in {self.startup_s:.1f} s "
                 f"(work dir {self.work_dir})")
            return self
        except BaseException:
            self.stop()
            raise

    def wait_ready(self) -> dict:
        deadline = time.monotonic() + self.config.startup_timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                overview = http_json(self.rest_url + "/overview", timeout_s=5)
                last = overview
                if overview.get("taskmanagers", 0) >= 1 and \
                        overview.get("slots-total", 0) >= self.config.task_slots:
                    return overview
            except (urllib.error.URLError, OSError, ValueError) as err:
                last = err
            if not self.processes():
                raise FlinkClusterError(f"the Flink processes exited during startup; see "
                                        f"{self.log_dir}: {self._log_tail()}", file=str(self.log_dir))
            time.sleep(0.5)
        raise FlinkClusterError(f"cluster not ready after {self.config.startup_timeout_s:.0f} s "
                                f"(last answer: {last}); {self._log_tail()}",
                                field="startup_timeout_s", value=self.config.startup_timeout_s)

    def _log_tail(self) -> str:
        lines: list[str] = []
        for path in sorted(self.log_dir.glob("*.log")) + sorted(self.log_dir.glob("*.out")):
            text = path.read_text(errors="replace").splitlines()
            errors = [l for l in text if "ERROR" in l or "Exception" in l][-3:]
            if errors:
                lines.append(f"{path.name}: " + " | ".join(errors))
        return "; ".join(lines)[-1500:] or "no errors in the logs"

    def _rest_alive(self) -> bool:
        try:
            http_json(self.rest_url + "/config", timeout_s=2)
            return True
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def processes(self) -> list[int]:
        """Pids of processes started for this cluster (command line names its private dir)."""
        marker = str(self.work_dir).encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline and b"java" in cmdline.split(b"\0", 1)[0]:
                pids.append(int(entry.name))
        return sorted(pids)

    def source_threads_cpu_s(self) -> float:
        """CPU seconds used so far by the legacy source threads (``SOURCE_THREAD``) of this
        cluster's TaskManagers, summed, read from ``/proc`` now (exact, unlike REST's cached
        metrics). The datagen sources' own CPU, which no Flink metric reports. A thread that
        ended (a cancelled job, a restart) drops out of the sum: compare two readings only
        within one run of a job."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for pid in self.processes():
            for task in Path(f"/proc/{pid}/task").glob("*"):
                try:
                    if not (task / "comm").read_text().startswith(SOURCE_THREAD):
                        continue
                    total += thread_cpu_s((task / "stat").read_text(), ticks)
                except (OSError, IndexError, ValueError):
                    continue  # the thread ended between the listing and the read
        return total

    def cpu_reading(self) -> dict[str, float]:
        """CPU seconds so far, from ``/proc``: ``machine`` (every core, busy), ``cluster`` (this
        cluster's JobManager and TaskManager processes) and ``source_threads``
        (``source_threads_cpu_s``). Two readings over an interval say what the cores did: the
        datagen thread near one core is a generator at its limit; the machine near all its
        cores with the cluster well below them is other load taking cores the model counts
        as the job's."""
        ticks = os.sysconf("SC_CLK_TCK")
        cluster = 0.0
        for pid in self.processes():
            try:
                cluster += thread_cpu_s(Path(f"/proc/{pid}/stat").read_text(), ticks)
            except (OSError, IndexError, ValueError):
                continue
        return {"machine": machine_busy_cpu_s(Path("/proc/stat").read_text(), ticks), "cluster": cluster,
                "source_threads": self.source_threads_cpu_s()}

    def stop(self) -> None:
        """Stop the JobManager and TaskManager; kill what is left. Safe to call repeatedly."""
        if not self._stopping.acquire(blocking=False):
            return
        try:
            if self.home is not None and self.conf_dir.exists():
                for script in ("taskmanager.sh", "jobmanager.sh"):
                    with contextlib.suppress(Exception):
                        self._script(script, "stop", timeout_s=60)
            deadline = time.monotonic() + 15
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.3)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                left = self.processes()
                for pid in left:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig)
                deadline = time.monotonic() + 10
                while self.processes() and time.monotonic() < deadline:
                    time.sleep(0.2)
            if self._started:
                _log("cluster stopped")
            self._started = False
        finally:
            self._restore_handlers()
            with contextlib.suppress(Exception):
                atexit.unregister(self.stop)
            self._stopping.release()

    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, frame):
            self.stop()
            previous = self._old_handlers.get(signum)
            if callable(previous):
                previous(signum, frame)
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + signum)

        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[sig] = signal.getsignal(sig)
            signal.signal(sig, handler)

    def _restore_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, old in self._old_handlers.items():
            with contextlib.suppress(Exception):
                signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._old_handlers.clear()

    def __enter__(self) -> "FlinkCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        if self._own_dir and os.environ.get("AUGURY_FLINK_KEEP_LOGS") != "1":
            shutil.rmtree(self.work_dir, ignore_errors=True)

    # ------------------------------------------------------------------ jobs
    def submit_jar(self, jar: Path, entry_class: str, args: list[str],
                   timeout_s: float = 60.0) -> str:
        """Upload a jar through REST and run it; returns the job id."""
        boundary = "augury" + hashlib.sha1(str(time.time()).encode()).hexdigest()
        payload = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"jarfile\"; "
                   f"filename=\"{jar.name}\"\r\nContent-Type: application/x-java-archive\r\n\r\n"
                   ).encode() + jar.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
        up = http_json(self.rest_url + "/jars/upload", "POST", payload, timeout_s=timeout_s,
                       headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        if not up or up.get("status") != "success":
            raise FlinkClusterError(f"jar upload failed: {up}", file=str(jar))
        jar_id = Path(up["filename"]).name
        try:
            run = http_json(f"{self.rest_url}/jars/{jar_id}/run", "POST",
                            {"entryClass": entry_class, "programArgsList": list(args)},
                            timeout_s=timeout_s)
        except urllib.error.HTTPError as err:
            raise FlinkClusterError(f"job submission failed: {err.read().decode()[-1500:]}",
                                    file=str(jar), field="entryClass", value=entry_class) from None
        return run["jobid"]

    def cancel(self, job_id: str, timeout_s: float = 30.0) -> None:
        """Cancel a job and wait until it is no longer running."""
        with contextlib.suppress(urllib.error.HTTPError):
            http_json(f"{self.rest_url}/jobs/{job_id}?mode=cancel", "PATCH", timeout_s=10)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = http_json(f"{self.rest_url}/jobs/{job_id}", timeout_s=10).get("state")
            if state in ("CANCELED", "FAILED", "FINISHED"):
                return
            time.sleep(0.5)

    def listening_sockets(self) -> list[tuple[str, int]]:
        """(address, port) of every TCP socket the cluster's processes listen on (/proc/net/tcp*)."""
        inodes: set[str] = set()
        for pid in self.processes():
            with contextlib.suppress(OSError):
                for fd in Path(f"/proc/{pid}/fd").iterdir():
                    with contextlib.suppress(OSError):
                        target = os.readlink(fd)
                        if target.startswith("socket:["):
                            inodes.add(target[8:-1])
        return [(addr, port) for addr, port, inode in _listening() if inode in inodes]


def _listening() -> list[tuple[str, int, str]]:
    """Every listening TCP socket of the host: (address, port, inode)."""
    out = []
    for name, width in (("tcp", 4), ("tcp6", 16)):
        path = Path(f"/proc/net/{name}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            parts = line.split()
            if len(parts) < 10 or parts[3] != "0A":  # 0A = LISTEN
                continue
            hex_addr, hex_port = parts[1].split(":")
            out.append((_decode_addr(hex_addr, width), int(hex_port, 16), parts[9]))
    return out


def _decode_addr(hex_addr: str, width: int) -> str:
    raw = bytes.fromhex(hex_addr)
    if width == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1") or \
        address.startswith("::ffff:127.")


# ---------------------------------------------------------------------- command line
STATE_FILE = "augury-cluster.json"


def _default_work_dir() -> Path:
    return cache_dir() / "flink-cluster"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.flink.cluster",
                                     description="A local loopback-only Flink cluster.")
    parser.add_argument("action", choices=("up", "down", "status", "run"))
    parser.add_argument("--rest-port", type=int, default=8081)
    parser.add_argument("--rpc-port", type=int, default=6123)
    parser.add_argument("--prometheus-port", type=int, default=9249)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--work-dir", default=str(_default_work_dir()))
    args = parser.parse_args(argv)
    work = Path(args.work_dir)
    state_path = work / STATE_FILE
    if args.action in ("up", "run"):
        config = ClusterConfig(rest_port=args.rest_port, rpc_port=args.rpc_port,
                               prometheus_port=args.prometheus_port, task_slots=args.slots,
                               work_dir=str(work))
        cluster = FlinkCluster(config)
        try:
            cluster.start()
        except FlinkClusterError as err:
            print(f"flink cluster: error: {err}", file=sys.stderr)
            return 3
        state_path.write_text(json.dumps({"config": asdict(config), "home": str(cluster.home)}))
        print(json.dumps({"rest_url": cluster.rest_url, "work_dir": str(work),
                          "startup_s": round(cluster.startup_s, 1)}))
        if args.action == "up":
            # leave it running: forget the exit hooks
            atexit.unregister(cluster.stop)
            cluster._restore_handlers()
            return 0
        try:
            while cluster.processes():
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        finally:
            cluster.stop()
        return 0
    if not state_path.is_file():
        print(json.dumps({"running": False, "work_dir": str(work)}))
        return 0 if args.action == "down" else 1
    state = json.loads(state_path.read_text())
    cluster = FlinkCluster(ClusterConfig(**state["config"]))
    cluster.home = Path(state["home"])
    if args.action == "down":
        cluster._started = True
        cluster.stop()
        state_path.unlink(missing_ok=True)
        print(json.dumps({"running": False, "work_dir": str(work)}))
        return 0
    try:
        overview = http_json(cluster.rest_url + "/overview", timeout_s=5)
    except (urllib.error.URLError, OSError, ValueError):
        overview = None
    print(json.dumps({"running": overview is not None, "rest_url": cluster.rest_url,
                      "pids": cluster.processes(), "overview": overview}))
    return 0 if overview is not None else 1


if __name__ == "__main__":
    sys.exit(main())
