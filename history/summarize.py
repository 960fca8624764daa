"""Entry point of ``augury history summarize``: store raw rows -> Spark pipeline -> store tables.

``summarize_store(store, window_s=None, master="local[2]", spark=None, full=False) -> SummaryReport``
reads the committed raw files, runs ``history.pipeline.summarize`` and replaces the three
tables in the store atomically (``MetricStore.table_transaction``).

**Incremental.** Every output window depends only on the raw rows inside it, on the previous
window (a source's lag growth) and on the job's source flags (``pipeline.operator_links``, a small
union over all rows). So after the first summarize, only the windows touched by raw rows added
since (the store's ``pending`` record, ``history.store``) are recomputed: each run of new
timestamps [a, b] re-opens the output windows from floor(a / W) to floor(b / W) plus the one after
(whose lag growth reads the last of them); the raw rows of those windows and of the window before
them are read (Parquet row groups filtered on ``ts``), summarized with the stored links merged
with the links of the rows read, and the table files holding re-opened windows are rewritten
without them plus the new rows (the others are kept as they are). Late rows re-open exactly the
windows they fall in; rows already stored add nothing (no pending record). When a job's source
flags change (a new edge target, an operator that starts reporting source_lag), every window of
that job is recomputed. A full rebuild happens with ``full=True``, on the first summarize, when the
output window changes, or when the store holds no record of what changed (a store written by an
augury without incremental summaries). Both paths commit through one ``table_transaction``: a
summarize killed at any point leaves the previous tables.
"""

from __future__ import annotations

import functools
import operator as op
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Mapping
from urllib.parse import unquote

import pyarrow.parquet as pq

from history.errors import CorruptStore, HistoryError, StoreError
from history.pipeline import resolve_window
from history.schema import TABLES
from history.store import MetricStore, TableTransaction, epoch_us, merge_runs

INCREMENTAL_FORMAT = 1
"""``summary["incremental"]``: the version of the state an incremental summarize reads back."""

MAX_RANGES_PER_JOB = 64
"""Most time ranges one job's re-opened windows are read in (more: the closest are merged, which
recomputes the windows between them too: correct, only more work)."""

_DAY_US = 86_400_000_000


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
    mode: str = "full"
    """``full`` (every window computed), ``incremental`` (only re-opened windows) or ``unchanged``
    (no raw rows added since the last summarize: nothing computed, nothing written)."""
    full_reason: str | None = None
    """Why a full rebuild (None when incremental or unchanged)."""
    raw_rows_read: int = 0
    """Raw rows the pipeline aggregated (all of them in a full rebuild)."""
    raw_rows_scanned: int = 0
    """Rows of the Parquet row groups those reads overlap (what the readers decode)."""
    raw_files_read: int = 0
    windows_recomputed: int = 0
    """Output windows (job, window_start) computed and written by this run."""
    table_files_kept: int = 0
    """Table files carried over unchanged from the previous summary."""

    def to_dict(self) -> dict:
        return {"store": self.store, "window_s": self.window_s, "raw_rows": self.raw_rows,
                "rows": dict(self.rows), "jobs": list(self.jobs), "seconds": round(self.seconds, 3),
                "store_version": self.store_version, "mode": self.mode, "full_reason": self.full_reason,
                "raw_rows_read": self.raw_rows_read, "raw_rows_scanned": self.raw_rows_scanned,
                "raw_files_read": self.raw_files_read, "windows_recomputed": self.windows_recomputed,
                "table_files_kept": self.table_files_kept}


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


@dataclass(frozen=True)
class Plan:
    """What a summarize will do, decided from the manifest alone (``plan``)."""

    full_reason: str | None
    """Not None: rebuild everything, for this reason."""
    window_s: float | None = None
    """The output window (incremental: checked against the last summary's)."""
    ranges: Mapping[str, list | None] = field(default_factory=dict)
    """Job -> re-opened output windows as [start, end) epoch-us ranges, or None: all of them."""
    natives: tuple[float, ...] = ()


def _job_of(partition: str) -> str:
    return unquote(partition.split("/")[0][len("job="):])


def _day_of(partition: str) -> int:
    date = datetime.strptime(partition.split("/")[1][len("date="):], "%Y-%m-%d").replace(tzinfo=timezone.utc)
    return int(date.timestamp()) * 1_000_000


def _us(seconds: float) -> int:
    return int(round(seconds * 1_000_000))


def plan(manifest: dict, window_s: float | None = None, full: bool = False) -> Plan:
    """Full rebuild or the windows to re-open (see the module docstring), from the manifest."""
    last = manifest.get("summary")
    if full:
        return Plan("--full")
    if not last:
        return Plan("first summarize of this store")
    if last.get("incremental") != INCREMENTAL_FORMAT:
        return Plan("the tables were written by an augury without incremental summaries")
    raw, seen = manifest["raw"], last.get("raw", {})
    gone = sorted(set(seen) - set(raw))
    if gone:
        return Plan(f"raw partition {gone[0]} was summarized before and is gone")
    changed = sorted(k for k in raw if seen.get(k) != raw[k])
    pending = manifest.get("pending") or {}
    unknown = [k for k in changed if k not in pending]
    if unknown:
        return Plan(f"raw partition {unknown[0]} changed with no record of the rows added")
    natives = sorted({float(w) for w in last.get("natives", [])}
                     | {float(w) for k in changed for w in pending[k]["window_s"]})
    width = resolve_window(natives, window_s)
    if width != float(last["window_s"]):
        return Plan(f"the output window changed ({float(last['window_s']):g} s -> {width:g} s)")
    w = _us(width)
    by_job: dict[str, list] = {}
    for key in changed:
        for a, b in pending[key]["runs"]:
            # the windows of a..b, and the one after b's (its lag growth reads b's window)
            by_job.setdefault(_job_of(key), []).append([a - a % w, b - b % w + 2 * w])
    ranges = {job: merge_runs(runs, 0, MAX_RANGES_PER_JOB) for job, runs in by_job.items()}
    return Plan(None, width, ranges, tuple(natives))


def source_flags(links: list) -> dict[tuple[str, str], bool]:
    """(job, operator) -> is_source, from ``operator_links`` rows [job, operator, target, lag,
    edge]: the rule of ``pipeline._operators`` (reports source_lag, or its job has edges and no
    edge targets it), used to see whether new rows change a job's flags."""
    lag, edges, targets, ops = set(), set(), set(), set()
    for job, operator, target, has_lag, edge in links:
        ops.add((job, operator))
        if has_lag:
            lag.add((job, operator))
        if edge:
            edges.add(job)
            targets.add((job, target))
    return {(j, o): (j, o) in lag or (j in edges and (j, o) not in targets) for j, o in ops}


def _merge_links(*parts: list) -> list:
    merged: dict[tuple, list] = {}
    for part in parts:
        for job, operator, target, has_lag, edge in part:
            got = merged.setdefault((job, operator, target), [0, 0])
            got[0], got[1] = max(got[0], int(has_lag)), max(got[1], int(edge))
    return [[*k, *v] for k, v in sorted(merged.items(), key=lambda kv: tuple("" if x is None else x
                                                                              for x in kv[0]))]


def _timestamp(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=us)


def _in_ranges(column: str, ranges: Mapping[str, list | None], before_us: int = 0):
    """Rows of the given jobs whose ``column`` lies in their ranges (each widened by
    ``before_us`` at its start); a job with None: all its rows."""
    from pyspark.sql import functions as F

    terms = []
    for job, spans in sorted(ranges.items()):
        term = F.col("job") == F.lit(job)
        if spans is not None:
            term = term & functools.reduce(op.or_, [
                (F.col(column) >= F.lit(_timestamp(lo - before_us))) & (F.col(column) < F.lit(_timestamp(hi)))
                for lo, hi in spans])
        terms.append(term)
    return functools.reduce(op.or_, terms)


def _overlaps(lo: int | None, hi: int | None, ranges: Mapping[str, list | None]) -> bool:
    """Whether a table file with window_start in [lo, hi] may hold a re-opened window."""
    if lo is None or hi is None:
        return True
    for spans in ranges.values():
        if spans is None or any(lo < b and hi >= a for a, b in spans):
            return True
    return False


def _windows_written(files: list[Path], ranges: Mapping[str, list | None]) -> int:
    """Distinct (job, window_start) in the re-opened ranges among the operator_windows files just
    written: the windows recomputed, read from two columns of the (small) files of an incremental
    run; a Spark job for the count cost ~0.6 s of a ~20 s run in a fresh JVM."""
    import numpy as np
    import pyarrow as pa

    if not files:
        return 0
    table = pa.concat_tables(pq.read_table(f, columns=["job", "window_start"]) for f in files)
    jobs = table["job"].to_numpy(zero_copy_only=False).astype(object)
    starts = table["window_start"].cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy()
    keep = np.zeros(len(jobs), dtype=bool)
    for job, spans in ranges.items():
        mine = jobs == job
        if spans is not None:
            mine &= functools.reduce(np.logical_or, [(starts >= lo) & (starts < hi) for lo, hi in spans])
        keep |= mine
    return len(set(zip(jobs[keep].tolist(), starts[keep].tolist())))


def _raw_to_read(tx: TableTransaction, ranges: Mapping[str, list | None], before_us: int):
    """(files, rows in the row groups overlapping the ranges) of the raw partitions to read."""
    files, scanned = [], 0
    for key, entry in sorted(tx.manifest["raw"].items()):
        job = _job_of(key)
        if job not in ranges:
            continue
        spans = ranges[job]
        day = _day_of(key)
        if spans is not None and not any(day < b and day + _DAY_US > a - before_us for a, b in spans):
            continue
        path = tx.path(entry)
        files.append(path)
        meta = pq.read_metadata(path)
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            stats = group.column(0).statistics  # ts
            if spans is None or stats is None or not stats.has_min_max:
                scanned += group.num_rows
                continue
            lo, hi = epoch_us(stats.min), epoch_us(stats.max)
            if any(lo < b and hi >= a - before_us for a, b in spans):
                scanned += group.num_rows
    return files, scanned


def summarize_store(store: str | Path, window_s: float | None = None, master: str = "local[2]",
                    spark=None, driver_memory: str | None = None, full: bool = False) -> SummaryReport:
    """Summarize the store into operator_windows, edge_windows and source_rates: the windows
    touched since the last summarize (``plan``), or everything (``full=True`` and the cases
    ``plan`` names)."""
    metric_store = MetricStore(store)
    if not metric_store.raw_files():
        raise HistoryError("the store holds no raw rows; run `augury ingest` first", file=str(store))
    # The store's lock and the raw files' footers before the JVM starts: a read-only store (exit
    # 3) or a corrupt partition (exit 2) is one line naming it, in a second, not a Java stack.
    with metric_store.table_transaction() as tx:
        raw_rows = sum(metric_store.check_files(tx.raw_files).values())
        decided = plan(tx.manifest, window_s, full)
        last = tx.manifest.get("summary") or {}
        if decided.full_reason is None and not decided.ranges:
            tx.commit = False  # nothing added since the last summarize
            return SummaryReport(store=str(store), window_s=decided.window_s, raw_rows=raw_rows,
                                 rows=dict(last.get("rows", {})), jobs=tuple(last.get("jobs", [])),
                                 store_version=metric_store.version, mode="unchanged",
                                 table_files_kept=sum(len(v) for v in tx.manifest["tables"].values()))
        if decided.full_reason is None:
            to_read = _raw_to_read(tx, decided.ranges, _us(float(decided.window_s)))
            scanned = to_read[1]
        if spark is None:
            from history.spark import spark_session

            planned = raw_rows if decided.full_reason is not None else scanned
            spark = spark_session(master=master, driver_memory=driver_memory,
                                  short_lived=planned < SMALL_INPUT_ROWS)
        started = time.perf_counter()
        with _unreadable_file_is_a_store_error():
            try:
                if decided.full_reason is not None:
                    with _small_input(spark, raw_rows):
                        done = _full(spark, tx, window_s, raw_rows)
                else:
                    with _small_input(spark, scanned):
                        done = _incremental_run(spark, tx, decided, last, to_read)
            finally:
                spark.catalog.clearCache()
        rows = {name: sum(pq.read_metadata(p).num_rows for p in tx.staged_files(name))
                + sum((tx.manifest.get("table_ranges") or {}).get(f, [None, None, 0])[2] or 0
                      for f in tx.keep.get(name, []))
                for name in TABLES}
        jobs = tuple(sorted({link[0] for link in done["links"]}))
        tx.summary = {"window_s": done["window_s"], "raw_rows": raw_rows, "rows": rows, "jobs": list(jobs),
                      "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                      "incremental": INCREMENTAL_FORMAT, "natives": done["natives"],
                      "raw": dict(tx.manifest["raw"]), "links": done["links"],
                      "mode": "full" if decided.full_reason else "incremental",
                      "raw_rows_read": done["read"], "windows_recomputed": done["windows"]}
    return SummaryReport(store=str(store), window_s=done["window_s"], raw_rows=raw_rows, rows=rows, jobs=jobs,
                         seconds=time.perf_counter() - started, store_version=metric_store.version,
                         mode=tx.summary["mode"], full_reason=decided.full_reason, raw_rows_read=done["read"],
                         raw_rows_scanned=done["scanned"], raw_files_read=done["files"],
                         windows_recomputed=done["windows"],
                         table_files_kept=sum(len(v) for v in tx.keep.values()))


TABLE_FILE_RAW_ROWS = 2_000_000
"""A table is written in one file per this many raw rows summarized (at least one)."""


def _write_sorted(frame, path: Path, raw_rows: int) -> None:
    """A table written in window order, range-partitioned on window_start, so each file holds a
    contiguous span of windows (what lets the next incremental summarize keep the files it does
    not touch). One file (no sampling job) unless the raw rows are many."""
    files = max(1, -(-raw_rows // TABLE_FILE_RAW_ROWS))
    (frame.repartitionByRange(files, "window_start").sortWithinPartitions("window_start", "job")
     .write.mode("overwrite").parquet(str(path)))


def _collect_links(links_df) -> tuple[list, int, list[float]]:
    """(links as [job, operator, target, lag, edge] lists, raw rows, distinct native windows)."""
    rows = links_df.collect()
    links = [[r["job"], r["operator"], r["target"], int(r["_lag"]), int(r["_edge"])] for r in rows]
    natives = sorted({float(w) for r in rows for w in r["_natives"]})
    return links, sum(int(r["_rows"]) for r in rows), natives


def _full(spark, tx: TableTransaction, window_s: float | None, raw_rows: int) -> dict:
    from pyspark import StorageLevel

    from history.pipeline import operator_links, summarize

    raw = spark.read.schema(raw_spark_schema()).parquet(*tx.raw_files)
    links_df = operator_links(raw).persist(StorageLevel.MEMORY_AND_DISK)
    links, read, natives = _collect_links(links_df)
    width = resolve_window(natives, window_s)
    result = summarize(raw, width, persist=True, links=links_df.select("job", "operator", "target", "_lag", "_edge"))
    for name, frame in result.tables().items():
        _write_sorted(frame, tx.dir(name), raw_rows)
    windows = result.operator_windows.select("job", "window_start").distinct().count()
    return {"window_s": width, "natives": natives, "links": links, "read": read, "scanned": raw_rows,
            "files": len(tx.raw_files), "windows": windows}


SMALL_INPUT_ROWS = 2_000_000
"""A run that reads fewer raw rows than this (a small store, or an incremental run's re-opened
windows) runs with adaptive execution off and 2 shuffle partitions, and starts its JVM
``short_lived`` (client compiler only; ``history.spark.spark_session``)."""

INTERPRETED_INPUT_ROWS = 500_000
"""A run that reads fewer raw rows than this also turns whole-stage code generation off."""


@contextmanager
def _small_input(spark, rows: int):
    """For a small input, Spark's fixed costs dominate: adaptive execution's extra job per query
    stage, a task per shuffle partition (on a cluster each task is a round trip to an executor)
    and, for the smallest, compiling generated code for every query: adaptive execution off and
    2 shuffle partitions below ``SMALL_INPUT_ROWS``, code generation off too below
    ``INTERPRETED_INPUT_ROWS``. These settings change the plan, never the result; restored after.

    Measured in a fresh JVM started ``short_lived`` (bench_history --incremental at 100 M rows,
    +1 % and +0.1 %; medians of 3-4 runs, docs/history.md): at 1.13 M rows read, adaptive execution
    off and 2 partitions took 21.7 s against 22.6 s with them on, and code generation off 24.8 s
    against 21.4 s; at 229,000 rows code generation off took 17.3 s against 17.9 s."""
    keys = {}
    if rows < SMALL_INPUT_ROWS:
        keys = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "2"}
    if rows < INTERPRETED_INPUT_ROWS:
        keys["spark.sql.codegen.wholeStage"] = "false"
    if not keys:
        yield
        return
    before = {key: spark.conf.get(key, None) for key in keys}
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _incremental_run(spark, tx: TableTransaction, decided: Plan, last: dict, to_read: tuple) -> dict:
    """``to_read``: ``_raw_to_read`` of the plan's ranges (read once, before Spark started)."""
    from pyspark.sql import types as T

    from history.pipeline import operator_links, summarize

    width = float(decided.window_s)
    before = _us(width)  # the window before each range: its source_lag is the first one's lag base
    ranges = dict(decided.ranges)
    stored = last.get("links", [])
    files, scanned = to_read
    while True:
        raw = spark.read.schema(raw_spark_schema()).parquet(*files).where(_in_ranges("ts", ranges, before))
        read_links, read, _ = _collect_links(operator_links(raw))
        links = _merge_links(stored, read_links)
        old_flags, new_flags = source_flags(stored), source_flags(links)
        # a job whose flags changed (or an operator flag that is new for an operator already
        # summarized) is recomputed whole; the links of all its rows are already in ``links``
        flipped = {job for (job, o), flag in new_flags.items()
                   if (job, o) in old_flags and old_flags[(job, o)] != flag and ranges.get(job) is not None}
        if not flipped:
            break
        ranges.update({job: None for job in flipped})
        files, scanned = _raw_to_read(tx, ranges, before)
    schema = T.StructType([T.StructField("job", T.StringType()), T.StructField("operator", T.StringType()),
                           T.StructField("target", T.StringType()), T.StructField("_lag", T.IntegerType()),
                           T.StructField("_edge", T.IntegerType())])
    links_df = spark.createDataFrame(links, schema)
    result = summarize(raw, width, persist=True, links=links_df)
    reopened = _in_ranges("window_start", ranges)
    table_ranges = tx.manifest.get("table_ranges") or {}
    for name, frame in result.tables().items():
        fresh = frame.where(reopened)
        old = tx.manifest["tables"].get(name, [])
        rewrite = [f for f in old if _overlaps(*(table_ranges.get(f) or [None, None])[:2], ranges)]
        tx.keep[name] = [f for f in old if f not in rewrite]
        if rewrite:
            kept_rows = spark.read.parquet(*[tx.path(f) for f in rewrite]).where(~reopened)
            fresh = fresh.unionByName(kept_rows.select(*fresh.columns))
        _write_sorted(fresh, tx.dir(name), scanned)
    windows = _windows_written(tx.staged_files("operator_windows"), ranges)
    return {"window_s": width, "natives": list(decided.natives), "links": links, "read": read,
            "scanned": scanned, "files": len(files), "windows": windows}
