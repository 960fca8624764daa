"""Entry point of ``augury history summarize``: store raw rows -> Spark pipeline -> store tables.

``summarize_store(store, window_s=None, master="local[2]", spark=None) -> SummaryReport``
reads the committed raw files, runs ``history.pipeline.summarize`` and replaces the three
tables in the store atomically (``MetricStore.table_transaction``).
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from history.errors import CorruptStore, HistoryError, StoreError
from history.pipeline import resolve_window, summarize
from history.schema import TABLES
from history.store import MetricStore


@dataclass(frozen=True)
class SummaryReport:
    """What one summarize wrote."""

    store: str
    window_s: float
    raw_rows: int
    rows: Mapping[str, int] = field(default_factory=dict)
    """Table name -> rows written."""
    jobs: tuple[str, ...] = ()
    seconds: float = 0.0
    """Wall time of the pipeline and the writes (Spark start-up excluded)."""
    store_version: int = 0

    def to_dict(self) -> dict:
        return {"store": self.store, "window_s": self.window_s, "raw_rows": self.raw_rows,
                "rows": dict(self.rows), "jobs": list(self.jobs), "seconds": round(self.seconds, 3),
                "store_version": self.store_version}


def raw_spark_schema():
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("ts", T.TimestampType(), False),
        T.StructField("window_s", T.DoubleType(), False),
        T.StructField("job", T.StringType(), False),
        T.StructField("operator", T.StringType(), False),
        T.StructField("instance", T.IntegerType(), False),
        T.StructField("metric", T.StringType(), False),
        T.StructField("value", T.DoubleType(), False),
        T.StructField("target", T.StringType(), True),
    ])


_FAILED_READ = re.compile(r"FAILED_READ_FILE[^\]]*\]\s*Encountered error while reading file (?:file:)?(\S+?)\.?\s")


@contextmanager
def _unreadable_file_is_a_store_error():
    """Spark failing to read one of the store's files (its footer was sound: ``check_files``
    passed, a data page is damaged) is a corrupt store, as pyarrow's failure on it is
    (``StoreError``, exit 2, naming the file); any other Spark error passes unchanged (the command
    line maps it to an environment failure, exit 3)."""
    try:
        yield
    except Exception as err:
        if not (type(err).__module__ or "").startswith(("py4j", "pyspark")):
            raise
        text = str(err)
        java = getattr(err, "java_exception", None)
        if java is not None:
            try:
                text = f"{text} {java.toString()}"
            except Exception:  # the JVM may be gone
                pass
        found = _FAILED_READ.search(text + " ")
        if found is None:
            raise
        path = found.group(1)
        while path.startswith("//"):
            path = path[1:]
        raise CorruptStore("Spark cannot read this store file (its Parquet footer reads, so most likely a damaged "
                         "data page; Spark's log has the cause); restore it from a copy or rebuild the store "
                         "with `augury ingest`", file=path) from None


def summarize_store(store: str | Path, window_s: float | None = None, master: str = "local[2]",
                    spark=None, driver_memory: str | None = None) -> SummaryReport:
    """Summarize every job in the store into operator_windows, edge_windows and source_rates."""
    metric_store = MetricStore(store)
    if not metric_store.raw_files():
        raise HistoryError("the store holds no raw rows; run `augury ingest` first", file=str(store))
    # The store's lock and the raw files' footers before the JVM starts: a read-only store (exit
    # 3) or a corrupt partition (exit 2) is one line naming it, in a second, not a Java stack.
    with metric_store.table_transaction() as tx:
        metric_store.check_files(tx.raw_files)
        if spark is None:
            from history.spark import spark_session

            spark = spark_session(master=master, driver_memory=driver_memory)
        started = time.perf_counter()
        with _unreadable_file_is_a_store_error():
            raw = spark.read.schema(raw_spark_schema()).parquet(*tx.raw_files)
            natives = [r[0] for r in raw.select("window_s").distinct().collect()]
            width = resolve_window(natives, window_s)
            result = summarize(raw, width, persist=True)
            try:
                for name, frame in result.tables().items():
                    frame.write.mode("overwrite").parquet(str(tx.dir(name)))
                counts = {name: spark.read.parquet(str(tx.dir(name))).count() for name in TABLES}
                raw_rows = raw.count()
                jobs = tuple(sorted(r[0] for r in raw.select("job").distinct().collect()))
            finally:
                spark.catalog.clearCache()
        tx.summary = {"window_s": width, "raw_rows": raw_rows, "rows": counts, "jobs": list(jobs),
                      "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    return SummaryReport(store=str(store), window_s=width, raw_rows=raw_rows, rows=counts, jobs=jobs,
                         seconds=time.perf_counter() - started, store_version=metric_store.version)
