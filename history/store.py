"""The metric store: Parquet partitioned by job and date, written atomically, read as pandas.

Layout under the store directory::

    _manifest.json                                  the committed state (the only source of truth)
    raw/job=<job>/date=<YYYY-MM-DD>/part-<txn>.parquet          RAW_SCHEMA rows, unique on the key
    quarantine/job=<job>/date=<YYYY-MM-DD|unknown>/part-<txn>.parquet   QUARANTINE_SCHEMA rows
    tables/<operator_windows|edge_windows|source_rates>/part-<txn>-<n>.parquet
    _txn/<txn>/                                     staging area of a write in progress
    .lock                                           serializes writers (flock)

(``<job>`` is URL-quoted.) A write stages every new file under ``_txn/<txn>/``, moves the files
to their final, never-before-used names, and commits by atomically replacing ``_manifest.json``
(``os.replace``). Readers only read files the manifest lists, so a write killed at any point
leaves the committed store exactly as it was; the next write deletes the debris (files no manifest
lists, staging directories). Ingesting rows already stored changes nothing (no file, no manifest
version), because rows are deduplicated on the key (ts, job, operator, instance, metric, target).

Spark reads the same files: ``MetricStore.raw_files()``.

Incremental summaries: every write that adds raw rows records, under the manifest's ``pending``
key, which native windows of which partition it touched (``{partition: {"runs": [[first_ts_us,
last_ts_us], ...], "window_s": [...]}}``: runs of the new rows' distinct ``ts``, split where two
consecutive ones are more than the largest native window apart, so every output window between
the two ends of a run holds a new row; past ``MAX_PENDING_RUNS`` runs the closest are merged, which
only over-approximates). A summarize consumes and clears it in the same commit that replaces the
tables (``table_transaction``), and records each table file's ``window_start`` range and row count
under ``table_ranges`` so the next summarize rewrites only the files holding windows it recomputes.
Raw partitions are written in row groups of ``RAW_ROW_GROUP_ROWS`` rows sorted by ``ts``, so a
reader filtering on ``ts`` (Spark, pyarrow) decodes only the row groups that overlap.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import quote, unquote

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from history.errors import CorruptStore, StoreError
from history.schema import (ADDED_COLUMNS, KEY_COLUMNS, QUARANTINE_COLUMNS, QUARANTINE_SCHEMA, RAW_COLUMNS,
                            RAW_SCHEMA, TABLE_SCHEMAS, TABLES, Reason, job_fits_path)
from history.validate import quarantine_frame, time_violations

MANIFEST = "_manifest.json"
FORMAT = 1

RAW_ROW_GROUP_ROWS = 131_072
"""Rows per Parquet row group of a raw partition (pyarrow's default is 1 Mi rows: a whole day of
a busy job). Row groups are what a ``ts`` filter can skip (min/max statistics), so an incremental
summarize of one new hour decodes ~this many rows per touched partition, not the whole day."""

MAX_PENDING_RUNS = 256
"""Most ``ts`` runs recorded per partition between two summaries (more: the closest are merged)."""


@dataclass(frozen=True)
class WriteResult:
    """What one ingest changed in the store."""

    new: int
    """Rows added to the raw table."""
    already_stored: int
    """Rows identical to rows already stored (an idempotent re-ingest)."""
    quarantined: pd.DataFrame
    """Rows the store quarantined while merging (duplicate_conflict against stored rows,
    time_exceeds_window); the caller's quarantine rows are written too but not repeated here."""
    quarantine_written: int
    """Quarantine rows added (identical quarantine rows are stored once)."""
    partitions: tuple[str, ...] = ()
    """The raw partitions (``job=../date=..``) rewritten."""
    version: int = 0
    """The manifest version after the write."""


@dataclass
class TableTransaction:
    """A summarize in progress: write each table's Parquet files under ``dir(name)``.

    ``manifest`` is the committed manifest read under the lock (the summarize's view of the store:
    ``raw``, ``pending``, the last ``summary``, ``tables``, ``table_ranges``; do not modify it).
    ``keep[name]``: committed files of table ``name`` (manifest entries, as in
    ``manifest["tables"][name]``) that stay in the new table beside the files written under
    ``dir(name)``; by default none (the table is replaced). ``commit = False``: leave the store
    as it is (nothing to do)."""

    stage: Path
    raw_files: list[str]
    summary: dict = field(default_factory=dict)
    manifest: dict = field(default_factory=dict)
    keep: dict = field(default_factory=dict)
    commit: bool = True
    root: Path | None = None

    def dir(self, name: str) -> Path:
        if name not in TABLE_SCHEMAS:
            raise StoreError("unknown table", field="table", value=name)
        return self.stage / "tables" / name

    def staged_files(self, name: str) -> list[Path]:
        """The Parquet files written under ``dir(name)`` so far (Spark's hidden and marker
        files left out), in name order."""
        return sorted(p for p in self.dir(name).rglob("*.parquet") if not p.name.startswith((".", "_")))

    def path(self, entry: str) -> str:
        """The absolute path of a manifest entry (``raw/...``, ``tables/...``)."""
        return str((self.root or Path(".")) / entry)


def _part_key(job: str, date: str) -> str:
    return f"job={quote(job, safe='')}/date={date}"


def store_path(location: str | Path) -> Path:
    """The directory of a store given as a path or a ``file://`` URI. Any other URI scheme
    (``s3a://``, ``hdfs://``, ``gs://``...) is refused (``StoreError``, exit 2): the store commits
    with a file lock and an atomic rename, which object stores do not offer; on a cluster, put the
    store on a file system every node mounts at the same path (docs/history.md)."""
    text = str(location)
    if text.startswith("file://"):
        from urllib.parse import unquote as _unquote, urlparse

        parsed = urlparse(text)
        if parsed.netloc not in ("", "localhost"):
            raise StoreError("a file:// store must be on this machine (file:///path)", field="--store",
                             value=text)
        return Path(_unquote(parsed.path))
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
        raise StoreError("the store must be a directory on a (local or mounted) file system, a path or "
                         "file:///path: it commits with a file lock and an atomic rename, which object "
                         "stores do not offer", field="--store", value=text)
    return Path(location)


class MetricStore:
    """A store directory. ``MetricStore(path)`` opens one; ``create=True`` makes it if absent.
    ``path`` may be a ``file://`` URI (``store_path``)."""

    _fault_hook: Callable[[str], None] | None = None
    """Test seam: called with 'staged' and 'moved' during a write, before the commit."""

    def __init__(self, path: str | Path, create: bool = False) -> None:
        self.path = store_path(path)
        """The store directory as given (messages name it so)."""
        self._root = self.path.absolute()
        """The same, absolute: every path handed out (``raw_files``, ``table_files``) is absolute,
        so it stays valid whatever the reader's working directory and is never joined twice."""
        manifest = self.path / MANIFEST
        if not manifest.is_file():
            if not create:
                if self.path.is_dir() and any(self.path.iterdir()):
                    raise StoreError("not a metric store (no _manifest.json)", file=str(self.path))
                raise StoreError("no such metric store; run `augury ingest` first", file=str(self.path))
            if self.path.exists() and not self.path.is_dir():
                raise StoreError("not a directory", file=str(self.path))
            self._refuse_foreign()
            self.path.mkdir(parents=True, exist_ok=True)
            with self._locked():
                if not manifest.is_file():
                    self._refuse_foreign()
                    self._write_manifest(self._empty_manifest(), self.path / MANIFEST)
        self._read_manifest()

    def _refuse_foreign(self) -> None:
        """A store is only created in a new or empty directory: a directory holding anything
        but a store being created by another writer (``.lock``, ``_txn``) is not adopted."""
        if not self.path.is_dir():
            return
        foreign = sorted(p.name for p in self.path.iterdir() if p.name not in (".lock", "_txn", MANIFEST))
        if foreign:
            raise StoreError(f"not a metric store (no {MANIFEST}) and not empty ({', '.join(foreign[:3])}"
                             f"{', ...' if len(foreign) > 3 else ''}): refusing to create a store in it; "
                             "give a new or empty directory", file=str(self.path))

    # ----------------------------------------------------------------- manifest
    @staticmethod
    def _empty_manifest() -> dict:
        return {"format": FORMAT, "version": 0, "raw": {}, "quarantine": {},
                "tables": {name: [] for name in TABLES}, "summary": None, "pending": {},
                "table_ranges": {}}

    def _read_manifest(self) -> dict:
        path = self.path / MANIFEST
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise StoreError("no such metric store", file=str(self.path)) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise CorruptStore(f"corrupt manifest ({err})", file=str(path)) from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise StoreError("unsupported manifest format", file=str(path), field="format",
                             value=manifest.get("format") if isinstance(manifest, dict) else None)
        return manifest

    def _write_manifest(self, manifest: dict, path: Path) -> None:
        with open(path, "w", encoding="utf-8") as out:
            json.dump(manifest, out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())

    def _commit(self, staged_manifest: Path) -> None:
        os.replace(staged_manifest, self.path / MANIFEST)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.path / ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _fault(self, stage: str) -> None:
        hook = type(self)._fault_hook
        if hook is not None:
            hook(stage)

    def _referenced(self, manifest: dict) -> set[str]:
        files = set(manifest["raw"].values()) | set(manifest["quarantine"].values())
        for paths in manifest["tables"].values():
            files.update(paths)
        return files

    def _recover(self, manifest: dict) -> None:
        """Delete what an interrupted write left behind (caller holds the lock)."""
        shutil.rmtree(self.path / "_txn", ignore_errors=True)
        referenced = self._referenced(manifest)
        for area in ("raw", "quarantine", "tables"):
            root = self.path / area
            if not root.is_dir():
                continue
            for file in root.rglob("*"):
                if file.is_file() and file.relative_to(self.path).as_posix() not in referenced:
                    file.unlink()
            for directory in sorted((d for d in root.rglob("*") if d.is_dir()), reverse=True):
                with contextlib.suppress(OSError):
                    directory.rmdir()

    def _new_txn(self) -> tuple[str, Path]:
        txn = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:10]}"
        stage = self.path / "_txn" / txn
        stage.mkdir(parents=True)
        return txn, stage

    def _publish(self, stage: Path, moves: dict[str, Path], manifest: dict,
                 superseded: set[str]) -> None:
        """Move staged files to their final names, then commit the manifest."""
        staged_manifest = stage / MANIFEST
        self._write_manifest(manifest, staged_manifest)
        self._fault("staged")
        for final, staged in moves.items():
            target = self.path / final
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staged, target)
        self._fault("moved")
        self._commit(staged_manifest)
        for old in superseded - self._referenced(manifest):
            with contextlib.suppress(FileNotFoundError):
                (self.path / old).unlink()
        shutil.rmtree(stage, ignore_errors=True)
        with contextlib.suppress(OSError):
            (self.path / "_txn").rmdir()

    # ----------------------------------------------------------------- writing
    def write(self, accepted: pd.DataFrame, quarantined: pd.DataFrame) -> WriteResult:
        """Merge validated rows (``RAW_COLUMNS``) and quarantine rows into the store, atomically."""
        with self._locked():
            manifest = self._read_manifest()
            self._recover(manifest)
            txn, stage = self._new_txn()
            try:
                return self._write(manifest, txn, stage, accepted, quarantined)
            finally:
                shutil.rmtree(stage, ignore_errors=True)
                with contextlib.suppress(OSError):
                    (self.path / "_txn").rmdir()

    def _write(self, manifest: dict, txn: str, stage: Path, accepted: pd.DataFrame,
               quarantined: pd.DataFrame) -> WriteResult:
        new_manifest = json.loads(json.dumps(manifest))
        moves: dict[str, Path] = {}
        superseded: set[str] = set()
        store_q: list[pd.DataFrame] = []
        new = already = 0
        partitions: list[str] = []
        if len(accepted):
            dates = accepted["ts"].dt.strftime("%Y-%m-%d")
            for (job, date), part in accepted.groupby([accepted["job"], dates], sort=True):
                key = _part_key(job, date)
                old_file = manifest["raw"].get(key)
                existing = self._read_files([old_file], RAW_SCHEMA) if old_file else _empty(RAW_SCHEMA)
                cols = list(RAW_COLUMNS) + [c for c in ("file", "line") if c in part]
                merged, n_new, n_already, rejected = _merge(existing, part[cols])
                already += n_already
                store_q.extend(rejected)
                if n_new == 0:  # nothing new: leave the partition (and its file) as it is
                    continue
                new += n_new
                final = f"raw/{key}/part-{txn}.parquet"
                staged = stage / final
                staged.parent.mkdir(parents=True, exist_ok=True)
                fresh = merged["_new"].to_numpy(dtype=bool)
                pending = new_manifest.setdefault("pending", {})
                pending[key] = _pending_entry(pending.get(key), merged["ts"][fresh],
                                              merged["window_s"][fresh])
                merged = merged.drop(columns="_new")
                merged = merged.sort_values(["ts", "operator", "instance", "metric", "target"],
                                            na_position="first", kind="stable")
                pq.write_table(pa.Table.from_pandas(merged, schema=RAW_SCHEMA, preserve_index=False),
                               staged, row_group_size=RAW_ROW_GROUP_ROWS)
                moves[final] = staged
                new_manifest["raw"][key] = final
                if old_file:
                    superseded.add(old_file)
                partitions.append(key)
        extra = pd.concat(store_q, ignore_index=True) if store_q else _empty_q()
        all_q = pd.concat([q for q in (quarantined, extra) if len(q)], ignore_index=True) \
            if (len(quarantined) or len(extra)) else _empty_q()
        q_written = 0
        if len(all_q):
            parsed = pd.to_datetime(all_q["ts"], utc=True, errors="coerce", format="ISO8601")
            q_dates = parsed.dt.strftime("%Y-%m-%d").fillna("unknown")
            # A job too long for a directory name (quarantined as bad_name) is kept under _unknown.
            q_jobs = all_q["job"].fillna("").map(lambda j: j if j and job_fits_path(j) else "_unknown")
            for (job, date), part in all_q.groupby([q_jobs, q_dates], sort=True):
                key = _part_key(job, date)
                old_file = manifest["quarantine"].get(key)
                existing = self._read_files([old_file], QUARANTINE_SCHEMA) if old_file else _empty_q()
                combined = pd.concat([existing, part[list(QUARANTINE_COLUMNS)]], ignore_index=True)
                combined = combined.drop_duplicates(ignore_index=True)
                added = len(combined) - len(existing)
                if added == 0:
                    continue
                q_written += added
                final = f"quarantine/{key}/part-{txn}.parquet"
                staged = stage / final
                staged.parent.mkdir(parents=True, exist_ok=True)
                combined["line"] = combined["line"].astype("Int64")
                pq.write_table(pa.Table.from_pandas(combined, schema=QUARANTINE_SCHEMA,
                                                    preserve_index=False), staged)
                moves[final] = staged
                new_manifest["quarantine"][key] = final
                if old_file:
                    superseded.add(old_file)
        version = manifest["version"]
        if moves:
            version += 1
            new_manifest["version"] = version
            self._publish(stage, moves, new_manifest, superseded)
        return WriteResult(new=new, already_stored=already, quarantined=extra,
                           quarantine_written=q_written, partitions=tuple(partitions),
                           version=version)

    @contextlib.contextmanager
    def table_transaction(self) -> Iterator[TableTransaction]:
        """Replace the summarized tables atomically: write them under ``tx.dir(name)`` (any
        number of ``*.parquet`` files, e.g. Spark's output directory), list the committed files
        that stay in ``tx.keep[name]``, set ``tx.summary``. The commit clears ``pending`` (the
        lock is held throughout, so every change recorded when it started is summarized) and
        records each table file's ``window_start`` range and rows under ``table_ranges``."""
        with self._locked():
            manifest = self._read_manifest()
            self._recover(manifest)
            txn, stage = self._new_txn()
            try:
                tx = TableTransaction(stage, [str(self._root / f) for f in
                                              sorted(manifest["raw"].values())],
                                      manifest=json.loads(json.dumps(manifest)), root=self._root)
                yield tx
                if not tx.commit:
                    return
                new_manifest = json.loads(json.dumps(manifest))
                old_ranges = manifest.get("table_ranges") or {}
                ranges: dict[str, list] = {}
                moves: dict[str, Path] = {}
                for name in TABLES:
                    kept = list(tx.keep.get(name, []))
                    unknown = set(kept) - set(manifest["tables"].get(name, []))
                    if unknown:
                        raise StoreError("a kept table file is not in the table", field="table",
                                         value=sorted(unknown)[0])
                    files = tx.staged_files(name)
                    finals = []
                    for i, staged in enumerate(files):
                        final = f"tables/{name}/part-{txn}-{i:05d}.parquet"
                        moves[final] = staged
                        finals.append(final)
                        ranges[final] = _window_range(staged)
                    for f in kept:
                        ranges[f] = old_ranges.get(f) or _window_range(self._root / f)
                    new_manifest["tables"][name] = kept + finals
                new_manifest["summary"] = tx.summary
                new_manifest["pending"] = {}
                new_manifest["table_ranges"] = ranges
                new_manifest["version"] = manifest["version"] + 1
                superseded = {f for name in TABLES for f in manifest["tables"].get(name, [])}
                self._publish(stage, moves, new_manifest, superseded)
            finally:
                shutil.rmtree(stage, ignore_errors=True)

    # ----------------------------------------------------------------- reading
    @property
    def version(self) -> int:
        return int(self._read_manifest()["version"])

    def jobs(self) -> list[str]:
        """Jobs with raw rows."""
        return sorted({unquote(k.split("/")[0][len("job="):]) for k in self._read_manifest()["raw"]})

    def raw_files(self, job: str | None = None) -> list[str]:
        """Absolute paths of the committed raw Parquet files (for Spark), optionally of one job."""
        prefix = f"job={quote(job, safe='')}/" if job is not None else ""
        return [str(self._root / f) for k, f in sorted(self._read_manifest()["raw"].items())
                if k.startswith(prefix)]

    def table_files(self, name: str) -> list[str]:
        if name not in TABLE_SCHEMAS:
            raise StoreError(f"unknown table (tables: {', '.join(TABLES)})", field="table", value=name)
        """Absolute paths of the committed Parquet files of table ``name``."""
        return [str(self._root / f) for f in self._read_manifest()["tables"].get(name, [])]

    def summary(self) -> dict | None:
        """What the last ``augury history summarize`` recorded (window_s, row counts, time)."""
        return self._read_manifest().get("summary")

    def _read_files(self, files: list[str], schema: pa.Schema, filters=None) -> pd.DataFrame:
        """Read ``files``: manifest entries (relative to the store) or paths ``raw_files``/
        ``table_files`` returned (absolute)."""
        paths = [f if os.path.isabs(f) else str(self._root / f) for f in files if f]
        if not paths:
            return _empty(schema)
        tables = []
        for p in paths:
            with _corrupt_file_is_a_store_error(p):
                table = pq.read_table(p, filters=filters)
                for name in ADDED_COLUMNS:  # a file written before the column existed: null
                    if name in schema.names and name not in table.column_names:
                        table = table.append_column(name, pa.nulls(table.num_rows, schema.field(name).type))
                tables.append(table.select(schema.names).cast(schema))
        return pa.concat_tables(tables).to_pandas()

    def check_files(self, files: list[str]) -> dict[str, int]:
        """Read the Parquet footer of every file (paths as ``raw_files``/``table_files`` return
        them): ``StoreError`` naming the first that is not a Parquet file (truncated, overwritten)
        before a reader such as Spark fails on it in the middle of a job. Cheap: the footers only.
        Returns each file's row count."""
        rows = {}
        for f in files:
            with _corrupt_file_is_a_store_error(f):
                rows[f] = pq.read_metadata(f).num_rows
        return rows

    def _read_with_retry(self, files_of: Callable[[], list[str]], schema: pa.Schema, filters=None):
        try:
            return self._read_files(files_of(), schema, filters)
        except FileNotFoundError:  # a writer replaced a file between manifest and read
            return self._read_files(files_of(), schema, filters)

    def raw(self, job: str | None = None, start=None, end=None) -> pd.DataFrame:
        """Raw rows (``RAW_COLUMNS``; ts tz-aware UTC), optionally of one job and ts in [start, end)."""
        filters = []
        if start is not None:
            filters.append(("ts", ">=", pd.Timestamp(start, tz="UTC") if pd.Timestamp(start).tzinfo is None
                            else pd.Timestamp(start)))
        if end is not None:
            filters.append(("ts", "<", pd.Timestamp(end, tz="UTC") if pd.Timestamp(end).tzinfo is None
                            else pd.Timestamp(end)))
        frame = self._read_with_retry(lambda: self.raw_files(job), RAW_SCHEMA, filters or None)
        return frame.sort_values(["ts", "job", "operator", "instance", "metric"],
                                 kind="stable", ignore_index=True)

    def quarantine(self, job: str | None = None) -> pd.DataFrame:
        """Quarantined rows (``QUARANTINE_COLUMNS``)."""
        def files() -> list[str]:
            prefix = f"job={quote(job, safe='')}/" if job is not None else ""
            return [f for k, f in sorted(self._read_manifest()["quarantine"].items())
                    if k.startswith(prefix)]
        frame = self._read_with_retry(files, QUARANTINE_SCHEMA)
        frame["line"] = frame["line"].astype("Int64")
        return frame

    def table(self, name: str, job: str | None = None) -> pd.DataFrame:
        """A summarized table as pandas (empty, with its columns, before the first summarize)."""
        schema = TABLE_SCHEMAS.get(name)
        if schema is None:
            raise StoreError(f"unknown table (tables: {', '.join(TABLES)})", field="table", value=name)
        frame = self._read_with_retry(lambda: self.table_files(name), schema)
        if job is not None:
            frame = frame[frame["job"] == job]
        sort = [c for c in ("job", "window_start", "operator", "source_op", "target_op") if c in frame]
        return frame.sort_values(sort, kind="stable", ignore_index=True)

    def operator_windows(self, job: str | None = None) -> pd.DataFrame:
        return self.table("operator_windows", job)

    def edge_windows(self, job: str | None = None) -> pd.DataFrame:
        return self.table("edge_windows", job)

    def source_rates(self, job: str | None = None) -> pd.DataFrame:
        return self.table("source_rates", job)


@contextlib.contextmanager
def _corrupt_file_is_a_store_error(path: str) -> Iterator[None]:
    """A store file that pyarrow cannot read as the store's Parquet (not Parquet at all, a damaged
    footer, another schema) is a corrupt store: ``CorruptStore`` (exit 3) naming the file. A missing
    file and the operating system's own errors (an ``OSError`` with an errno: no permission, I/O)
    pass unchanged: the first is retried by the caller, the others are environment failures
    (exit 3). pyarrow's own ``OSError`` (no errno: "Couldn't deserialize thrift") is a damaged file."""
    try:
        yield
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, KeyError) as err:
        if isinstance(err, OSError) and err.errno is not None:
            raise
        first = (str(err).splitlines() or [type(err).__name__])[0]
        first = re.sub(r"^Could not open Parquet input source '.*?': ", "", first)  # the path, again
        raise CorruptStore(f"corrupt store file, not readable as the store's Parquet ({first[:200]}); "
                         "restore it from a copy or rebuild the store with `augury ingest`", file=path) from None


def _window_range(path: str | Path) -> list:
    """[first window_start (epoch us), last window_start, rows] of a table file, from its footer
    (the first two None when it has no rows or no statistics)."""
    meta = pq.read_metadata(path)
    column = meta.schema.names.index("window_start")
    lo = hi = None
    for i in range(meta.num_row_groups):
        chunk = meta.row_group(i)
        if chunk.num_rows == 0:
            continue
        stats = chunk.column(column).statistics
        if stats is None or not stats.has_min_max:
            return [None, None, meta.num_rows]
        a, b = epoch_us(stats.min), epoch_us(stats.max)
        lo = a if lo is None else min(lo, a)
        hi = b if hi is None else max(hi, b)
    return [lo, hi, meta.num_rows]


def epoch_us(value) -> int:
    """A Parquet statistic of a timestamp column (a datetime, naive meaning UTC, or int micros)
    as epoch microseconds."""
    if isinstance(value, int):
        return value
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp
    return int(stamp.as_unit("ns").value // 1000)


def _pending_entry(previous: dict | None, ts: pd.Series, window_s: pd.Series) -> dict:
    """The pending record of a partition after adding rows with these ``ts``/``window_s``:
    the runs of their distinct timestamps merged with the runs already recorded."""
    natives = sorted({float(w) for w in window_s.unique()} | set((previous or {}).get("window_s", [])))
    gap = int(round(max(natives) * 1_000_000)) if natives else 0
    stamps = np.unique(ts.to_numpy(dtype="datetime64[us]").astype(np.int64))
    runs = [list(r) for r in (previous or {}).get("runs", [])]
    if len(stamps):
        breaks = np.flatnonzero(np.diff(stamps) > gap)
        starts = np.concatenate([[0], breaks + 1])
        ends = np.concatenate([breaks, [len(stamps) - 1]])
        runs += [[int(stamps[a]), int(stamps[b])] for a, b in zip(starts, ends)]
    return {"runs": merge_runs(runs, gap, MAX_PENDING_RUNS), "window_s": natives}


def merge_runs(runs: list, gap: int, cap: int) -> list[list[int]]:
    """Sorted [first, last] runs merged where they overlap or lie at most ``gap`` apart; then,
    while more than ``cap``, merged across the smallest gaps (an over-approximation: a run covers
    everything between its ends)."""
    out: list[list[int]] = []
    for a, b in sorted(runs):
        if out and a - out[-1][1] <= gap:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    if len(out) > cap:
        gaps = np.array([out[i + 1][0] - out[i][1] for i in range(len(out) - 1)])
        threshold = np.sort(gaps)[len(out) - cap - 1]
        merged: list[list[int]] = [out[0]]
        for run, before in zip(out[1:], gaps):
            if before <= threshold:  # at least len(out) - cap gaps are this small
                merged[-1][1] = run[1]
            else:
                merged.append(run)
        out = merged
    return out


def _empty(schema: pa.Schema) -> pd.DataFrame:
    return schema.empty_table().to_pandas()


def _empty_q() -> pd.DataFrame:
    return _empty(QUARANTINE_SCHEMA)


def _merge(existing: pd.DataFrame, incoming: pd.DataFrame):
    """(merged rows with ``_new``: added by this write, n new, n already stored, [quarantine
    frames]) of one partition."""
    keys = list(KEY_COLUMNS)
    left = existing.assign(_t=existing["target"].fillna("\x00"))
    right = incoming.assign(_t=incoming["target"].fillna("\x00"))
    on = [k if k != "target" else "_t" for k in keys]
    joined = right.merge(left[on + ["value", "window_s"]], on=on, how="left",
                         suffixes=("", "_stored"), indicator=True)
    stored = joined["_merge"] == "both"
    same = stored & (joined["value"] == joined["value_stored"]) & \
        (joined["window_s"] == joined["window_s_stored"])
    conflict = stored & ~same
    rejected: list[pd.DataFrame] = []
    if conflict.any():
        bad = joined[conflict]
        detail = ("stored value " + bad["value_stored"].map(repr) + "@" + bad["window_s_stored"].map(repr)
                  + " differs from " + bad["value"].map(repr) + "@" + bad["window_s"].map(repr))
        rejected.append(quarantine_frame(bad, Reason.DUPLICATE_CONFLICT, detail.to_numpy()))
    fresh = incoming[~stored.to_numpy()]
    merged = pd.concat([existing.assign(_new=False, file=None, line=None),
                        fresh.assign(_new=True)], ignore_index=True)
    over = time_violations(merged) & merged["_new"]
    if over.any():
        bad = merged[over]
        group = ["ts", "job", "operator", "instance"]
        timed = merged[merged["metric"].isin(("busy_ms", "backpressured_ms", "idle_ms"))]
        totals = timed.groupby(group)["value"].sum().rename("_total").reset_index()
        bad = bad.merge(totals, on=group, how="left")
        detail = ("busy + backpressured + idle = " + bad["_total"].map(lambda v: f"{v:g}")
                  + " ms > window " + (bad["window_s"] * 1000).map(lambda v: f"{v:g}") + " ms")
        rejected.append(quarantine_frame(bad, Reason.TIME_EXCEEDS_WINDOW, detail.to_numpy()))
        merged = merged[~over]
    n_new = int(merged["_new"].sum())
    return (merged[[*RAW_COLUMNS, "_new"]].reset_index(drop=True), n_new, int(same.sum()), rejected)
