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

import os
import sys
import tempfile
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
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j} "
                f"-Duser.timezone=UTC{jit}")
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
        with _stderr_to(log):  # the JVM started here keeps this stderr for its whole life
            session = builder.getOrCreate()
    except Exception as err:  # Java missing, bad master URL, port trouble...
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SparkUnavailable(f"cannot start Spark ({first}{f'; its output: {log}' if log else ''})",
                               field="--spark-master", value=master) from None
    session.sparkContext.setLogLevel("ERROR")
    return session
