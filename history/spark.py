"""The one place that starts Spark: ``spark_session(master, app_name, driver_memory)``.

Local mode by default (``local[2]``), any master URL otherwise. The UI is off, the session time
zone is UTC, local Python workers run this interpreter (``PYSPARK_PYTHON``), Parquet timestamps are written as INT64 micros (readable by
pyarrow as UTC timestamps), and the JVM logs only errors. Starting Spark needs Java; when it
cannot start, ``SparkUnavailable`` (exit code 3) says why, naming ``--spark-master`` and its
value. A master Spark would reject outright (not yarn / spark* / k8s* / local*) is refused before
the JVM starts; other failures (no Java, an unreachable master) come from the JVM, whose own
output on stderr precedes augury's one-line error. In local mode the driver listens on loopback
only (``LOOPBACK_CONF``).

Partitioning (the pipeline's big step is a hash aggregation of the raw rows with ~1 group per 4
rows, whose per-task hash map must fit in the task's share of execution memory, else it sorts
and spills): input splits of at most ``INPUT_SPLIT_BYTES`` (4 MiB of Parquet, ~1-2 M raw rows:
a ~100 MB map), shuffles into ``shuffle_partitions`` (8) partitions that adaptive execution
coalesces to ~``SHUFFLE_PARTITION_BYTES`` (8 MiB) each, so small tables end in one or two
partitions and the aggregate of 10 M rows in 8. With Spark's defaults (128 MiB splits, the
old 2 shuffle partitions) both aggregations of 10 M rows spilled ~580 MiB per stage under a
1 GB driver and took 12.4 s instead of 8.3 s.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from history.errors import SparkUnavailable

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


INPUT_SPLIT_BYTES = "4m"
"""``spark.sql.files.maxPartitionBytes``: the most Parquet one input task reads."""

SHUFFLE_PARTITION_BYTES = "8m"
"""``spark.sql.adaptive.advisoryPartitionSizeInBytes``: adaptive execution's target size of a
shuffle partition after coalescing."""

LOOPBACK_CONF: Mapping[str, str] = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}
"""Set in local mode: the driver (RPC endpoint, block manager) listens on loopback only."""

_MASTER_PREFIXES = ("local", "spark", "k8s", "yarn")
"""What ``spark-submit`` accepts as a master (anything else: "Master must either be yarn or
start with spark, k8s, or local")."""


JVM_LOG_ENV = "AUGURY_JVM_LOG"
"""When this environment variable names a file, a JVM started by ``spark_session`` writes its own
stderr there (the start-up lines, later warnings) instead of the terminal: the command line sets
it unless ``--verbose`` (``augury/commands/_logs.py``)."""


CDS_ENV = "AUGURY_SPARK_CDS"
"""``0`` starts local-mode JVMs without the class-data-sharing archive (``_ClassDataSharing``)."""

_CDS_KEEP = 3
"""Class-data-sharing archives kept (the most recently used; one per pyspark installation)."""

_CDS_LOCK_STALE_S = 900.0
"""A lock file whose pid cannot be read is stale once older than this (s)."""


class _ClassDataSharing:
    """Spark's classes, loaded and verified once, mapped by every later local-mode driver JVM.

    A fresh JVM spends seconds of a short Spark run loading and verifying Spark's classes. The
    JDK (13+) writes the classes a run loaded to a dynamic class-data-sharing archive when it
    exits (``-XX:ArchiveClassesAtExit``) and maps that archive at the next start
    (``-XX:SharedArchiveFile``): on bench_history's incremental summarize (100 M rows, +1 %) the
    session started in 3.0-3.3 s instead of 5.7-6.4 s and the summarize took 18.5-19.5 s instead
    of 17.8-21.9 s (3 runs each, client compiler). The archive (~190 MB) lives in
    ``$XDG_CACHE_HOME/augury/jvm`` (default ``~/.cache``), named after the pyspark version and the
    java binary; the three most recently used are kept (``_CDS_KEEP``), older ones deleted when a
    new one is written; ``AUGURY_SPARK_CDS=0`` turns it off.

    Safety: one process at a time creates it (an exclusive lock file holding its pid; stale once
    that process is gone), into a file of its own that is renamed to the archive only after its
    JVM exited with status 0 (at Python's exit: a process ended by ``os._exit``, as pytest-xdist's
    workers are, never promotes its dump, and the next creator deletes it), so no JVM ever maps a dump
    that was cut short (that kills the JVM with SIGBUS). A JVM that cannot start with the archive
    is started again without it, and the archive is removed. The JVM itself checks the archive
    against its class path and version and ignores one that does not match; its warning is
    silenced (``-Xlog:cds*=off``: it would go to stdout, which carries ``--json``)."""

    def __init__(self) -> None:
        import hashlib
        import shutil

        import pyspark

        java_home = os.environ.get("JAVA_HOME")
        java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java") or "java"
        identity = f"{pyspark.__version__}|{os.path.realpath(java)}|{Path(pyspark.__file__).parent}"
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "augury" / "jvm"
        self.directory = base
        self.archive = base / f"spark-{pyspark.__version__}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}.jsa"
        self.lock = self.archive.with_name(self.archive.name + ".creating")
        self.dump = self.archive.with_name(f"{self.archive.name}.{os.getpid()}.tmp")
        self.mode = "off"

    def options(self) -> str:
        """JVM options for the next start: map the archive, create it, or nothing."""
        quiet = f" -Xlog:cds*=off -XX:ErrorFile={self.directory / 'hs_err_pid%p.log'}"
        if self.archive.is_file():
            self.mode = "use"
            with contextlib.suppress(OSError):  # last used: what pruning keeps
                os.utime(self.archive)
            return f" -XX:SharedArchiveFile={self.archive}{quiet}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if self.lock.exists() and self._stale(self.lock):
                self.lock.unlink(missing_ok=True)
            fd = os.open(self.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            with os.fdopen(fd, "w") as lock:
                lock.write(str(os.getpid()))
        except OSError:  # another process is creating it, or the cache cannot be written
            return ""
        # dumps of processes that died before promoting theirs (killed, or ended by os._exit,
        # which runs no exit handler): whether they are whole cannot be known
        for dump in self.directory.glob(f"{self.archive.name}.*.tmp"):
            with contextlib.suppress(ValueError):
                if not _alive(dump.name[len(self.archive.name) + 1:-len(".tmp")]):
                    dump.unlink(missing_ok=True)
        self.mode = "create"
        atexit.register(self._finish)
        return f" -XX:ArchiveClassesAtExit={self.dump}{quiet}"

    def discard(self) -> None:
        """The JVM did not start with these options: never use this archive (or dump) again."""
        for path in (self.archive, self.dump) if self.mode == "use" else (self.dump, self.lock):
            path.unlink(missing_ok=True)
        self.mode = "off"

    @staticmethod
    def _stale(lock: Path) -> bool:
        """A lock whose process is gone (or, unreadable, older than ``_CDS_LOCK_STALE_S``)."""
        try:
            return not _alive(lock.read_text().strip())
        except OSError:
            return True
        except ValueError:
            return os.path.getmtime(lock) < time.time() - _CDS_LOCK_STALE_S

    def _prune(self) -> None:
        """Keep the ``_CDS_KEEP`` most recently used archives: each pyspark installation (every
        fresh virtual environment) and java binary has its own, ~185 MB each."""
        archives = sorted(self.directory.glob("spark-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in archives[_CDS_KEEP:]:
            if old != self.archive:
                old.unlink(missing_ok=True)

    def _finish(self) -> None:
        """At exit: end the JVM (it dumps the archive as it exits) and keep the dump only if the
        JVM exited normally."""
        try:
            from pyspark import SparkContext

            proc = getattr(SparkContext._gateway, "proc", None)
            if proc is not None and self.mode == "create":
                if proc.stdin is not None:
                    proc.stdin.close()  # the gateway exits on end of input: System.exit(0)
                if proc.wait(timeout=300) == 0 and self.dump.is_file() and self.dump.stat().st_size > 0:
                    os.replace(self.dump, self.archive)
                    self._prune()
        except Exception:  # noqa: BLE001 - an archive is an optimisation, never a failure
            pass
        finally:
            self.dump.unlink(missing_ok=True)
            self.lock.unlink(missing_ok=True)


def _alive(pid: str) -> bool:
    """Whether the process ``pid`` (text) exists; ValueError when it is not a number."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _jvm_running() -> bool:
    """Whether this process already has Spark's JVM (``getOrCreate`` then starts none)."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None


@contextmanager
def _stderr_to(path: str | None) -> Iterator[None]:
    """File descriptor 2 appended to ``path`` inside the block (for child processes started in it:
    the JVM inherits it); nothing changes when ``path`` is empty."""
    if not path:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _log4j_file() -> str:
    path = Path(tempfile.gettempdir()) / "augury-spark-log4j2.properties"
    if not path.is_file() or path.read_text() != _LOG4J:
        path.write_text(_LOG4J)
    return str(path)


def spark_session(master: str = "local[2]", app_name: str = "augury", *,
                  driver_memory: str | None = None, shuffle_partitions: int = 8,
                  conf: Mapping[str, str] | None = None, short_lived: bool = False):
    """A (possibly already running) SparkSession configured for augury.

    ``driver_memory`` (e.g. ``"2g"``; default ``$AUGURY_SPARK_DRIVER_MEMORY`` or ``"1g"``) only
    takes effect when this call starts the JVM. So does ``short_lived``: the caller knows the
    application has little work (an incremental summarize of a few hundred thousand rows), so
    its JVMs (the driver's; on a cluster the executors' too) compile with HotSpot's client
    compiler only (``-XX:TieredStopAtLevel=1``). A fresh JVM spends such a run mostly compiling
    Spark's own code; the optimizing compiler's slower, later code pays off only over minutes
    of work (bench_history --incremental: 21 s instead of 28 s, medians of 4, docs/history.md).
    """
    if not master.startswith(_MASTER_PREFIXES):
        # Spark's own rule (SparkSubmit): checked here so the JVM is not started just to print
        # a stack trace about it.
        raise SparkUnavailable("cannot start Spark: the master must be yarn or start with spark, "
                               "k8s or local", field="--spark-master", value=master)
    try:
        from pyspark.sql import SparkSession
    except ImportError as err:  # pragma: no cover - pyspark is a dependency
        raise SparkUnavailable(f"pyspark is not installed ({err})") from None
    memory = driver_memory or os.environ.get("AUGURY_SPARK_DRIVER_MEMORY", "1g")
    if master.startswith("local"):
        # Python workers (mapInPandas, UDFs) must run this interpreter, which has augury and its
        # dependencies; Spark otherwise starts whatever `python3` is first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    log4j = _log4j_file()
    jit = " -XX:TieredStopAtLevel=1" if short_lived else ""
    driver_options = f"-Dlog4j2.configurationFile=file:{log4j} -Duser.timezone=UTC{jit}"
    sharing = None
    if master.startswith("local") and os.environ.get(CDS_ENV, "1") != "0" and not _jvm_running():
        sharing = _ClassDataSharing()
    builder = (
        SparkSession.builder.master(master).appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.files.maxPartitionBytes", INPUT_SPLIT_BYTES)
        .config("spark.sql.adaptive.advisoryPartitionSizeInBytes", SHUFFLE_PARTITION_BYTES)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", memory)
        .config("spark.driver.extraJavaOptions", driver_options + (sharing.options() if sharing else ""))
        .config("spark.executor.extraJavaOptions", f"-Duser.timezone=UTC{jit}")
        .config("spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
    )
    if master.startswith("local"):
        # Local mode needs no network: the driver's RPC endpoint and block manager listen on
        # loopback only (Spark binds every interface by default). On a cluster, set
        # spark.driver.bindAddress/host for your network and spark.authenticate (docs/history.md).
        for key, value in LOOPBACK_CONF.items():
            builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    log = os.environ.get(JVM_LOG_ENV)
    try:
        try:
            with _stderr_to(log):  # the JVM started here keeps this stderr for its whole life
                session = builder.getOrCreate()
        except Exception:
            if sharing is None or sharing.mode == "off":
                raise
            # perhaps the archive: start again without it (and never use it again)
            sharing.discard()
            builder = builder.config("spark.driver.extraJavaOptions", driver_options)
            with _stderr_to(log):
                session = builder.getOrCreate()
    except Exception as err:  # Java missing, bad master URL, port trouble...
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SparkUnavailable(f"cannot start Spark ({first}{f'; its output: {log}' if log else ''})",
                               field="--spark-master", value=master) from None
    session.sparkContext.setLogLevel("ERROR")
    return session
