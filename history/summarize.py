"""Entry point of ``augury history summarize``: store raw rows -> Spark pipeline -> store tables.

``summarize_store(store, window_s=None, master="local[2]", spark=None) -> SummaryReport``
reads the committed raw files, runs ``history.pipeline.summarize`` and replaces the three
tables in the store atomically (``MetricStore.table_transaction``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from history.errors import HistoryError
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


def summarize_store(store: str | Path, window_s: float | None = None, master: str = "local[2]",
                    spark=None, driver_memory: str | None = None) -> SummaryReport:
    """Summarize every job in the store into operator_windows, edge_windows and source_rates."""
    metric_store = MetricStore(store)
    if not metric_store.raw_files():
        raise HistoryError("the store holds no raw rows; run `augury ingest` first", file=str(store))
    if spark is None:
        from history.spark import spark_session

        spark = spark_session(master=master, driver_memory=driver_memory)
    started = time.perf_counter()
    with metric_store.table_transaction() as tx:
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
