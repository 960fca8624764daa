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

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from history.errors import CorruptStore, StoreError
from history.schema import (KEY_COLUMNS, QUARANTINE_COLUMNS, QUARANTINE_SCHEMA, RAW_COLUMNS,
                            RAW_SCHEMA, TABLE_SCHEMAS, TABLES, Reason, job_fits_path)
from history.validate import quarantine_frame, time_violations

MANIFEST = "_manifest.json"
FORMAT = 1


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
    """A summarize in progress: write each table's Parquet files under ``dir(name)``."""

    stage: Path
    raw_files: list[str]
    summary: dict = field(default_factory=dict)

    def dir(self, name: str) -> Path:
        if name not in TABLE_SCHEMAS:
            raise StoreError("unknown table", field="table", value=name)
        return self.stage / "tables" / name


def _part_key(job: str, date: str) -> str:
    return f"job={quote(job, safe='')}/date={date}"


class MetricStore:
    """A store directory. ``MetricStore(path)`` opens one; ``create=True`` makes it if absent."""

    _fault_hook: Callable[[str], None] | None = None
    """Test seam: called with 'staged' and 'moved' during a write, before the commit."""

    def __init__(self, path: str | Path, create: bool = False) -> None:
        self.path = Path(path)
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
                "tables": {name: [] for name in TABLES}, "summary": None}

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
                merged = merged.sort_values(["ts", "operator", "instance", "metric", "target"],
                                            na_position="first", kind="stable")
                pq.write_table(pa.Table.from_pandas(merged, schema=RAW_SCHEMA, preserve_index=False),
                               staged)
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
        number of ``*.parquet`` files, e.g. Spark's output directory), set ``tx.summary``."""
        with self._locked():
            manifest = self._read_manifest()
            self._recover(manifest)
            txn, stage = self._new_txn()
            try:
                tx = TableTransaction(stage, [str(self._root / f) for f in
                                              sorted(manifest["raw"].values())])
                yield tx
                new_manifest = json.loads(json.dumps(manifest))
                moves: dict[str, Path] = {}
                for name in TABLES:
                    files = sorted(p for p in tx.dir(name).rglob("*.parquet")
                                   if not p.name.startswith((".", "_")))
                    finals = []
                    for i, staged in enumerate(files):
                        final = f"tables/{name}/part-{txn}-{i:05d}.parquet"
                        moves[final] = staged
                        finals.append(final)
                    new_manifest["tables"][name] = finals
                new_manifest["summary"] = tx.summary
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
                tables.append(pq.read_table(p, filters=filters).select(schema.names).cast(schema))
        return pa.concat_tables(tables).to_pandas()

    def check_files(self, files: list[str]) -> None:
        """Read the Parquet footer of every file (paths as ``raw_files``/``table_files`` return
        them): ``StoreError`` naming the first that is not a Parquet file (truncated, overwritten)
        before a reader such as Spark fails on it in the middle of a job. Cheap: the footers only."""
        for f in files:
            with _corrupt_file_is_a_store_error(f):
                pq.read_metadata(f)

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


def _empty(schema: pa.Schema) -> pd.DataFrame:
    return schema.empty_table().to_pandas()


def _empty_q() -> pd.DataFrame:
    return _empty(QUARANTINE_SCHEMA)


def _merge(existing: pd.DataFrame, incoming: pd.DataFrame):
    """(merged rows, n new, n already stored, [quarantine frames]) of one partition."""
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
    return (merged.drop(columns="_new")[list(RAW_COLUMNS)].reset_index(drop=True), n_new,
            int(same.sum()), rejected)
