"""Incremental ``summarize_store``: after each batch of raw rows (appended, late, duplicate,
conflicting, flag-changing), the incrementally maintained tables equal a full rebuild of the same
store on every column; a summarize killed mid-way leaves the previous tables and the next run
completes them."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest

from history.ingest import ingest
from history.schema import TABLES
from history.store import MetricStore, merge_runs
from history.summarize import plan, source_flags, summarize_store

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
HEADER = "ts,window_s,job,operator,instance,metric,value,target\n"
# 23:58:00 UTC: the batches cross midnight, so the rows span two date partitions
T0 = datetime(2024, 5, 1, 23, 58, 0, tzinfo=timezone.utc)


def _ts(i: int) -> str:
    return (T0 + timedelta(seconds=10 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")


def dag_rows(windows, job: str = "j", skip: frozenset = frozenset(), only: frozenset | None = None) -> list[str]:
    """src -> map -> sink, two instances each, 10 s windows; values vary with the window so a
    window computed from the wrong rows shows. ``skip``: (window, operator, instance, metric)
    rows left out (sent later as late rows); ``only``: just those rows."""
    out = []
    for i in windows:
        for inst in (0, 1):
            rows = [
                ("src", "records_out", 1000 + 10 * i + inst, "map"), ("src", "source_lag", 50 * i + 7 * inst, ""),
                ("map", "records_in", 900 + 11 * i + inst, ""), ("map", "busy_ms", 4000 + 13 * i, ""),
                ("map", "idle_ms", 3000, ""), ("map", "records_out", 1800 + 3 * i, "sink"),
                ("map", "queue_len", 2 + i % 3, ""),
                ("sink", "records_in", 1700 + 5 * i, ""), ("sink", "busy_ms", 2000 + i, ""),
                ("sink", "latency_ms_p99", 40 + i % 4, ""),
            ]
            for operator, metric, value, target in rows:
                if (i, operator, inst, metric) not in skip and (only is None or (i, operator, inst, metric) in only):
                    out.append(f"{_ts(i)},10,{job},{operator},{inst},{metric},{value},{target}")
    return out


def flat_rows(windows, job: str = "k", edge: bool = False) -> list[str]:
    """A job without edges (nothing is a source) until ``edge``: then a -> b makes a a source."""
    out = []
    for i in windows:
        out += [f"{_ts(i)},10,{job},a,0,records_in,{300 + i},", f"{_ts(i)},10,{job},a,0,busy_ms,{1000 + i},",
                f"{_ts(i)},10,{job},b,0,records_in,{200 + 2 * i},"]
        if edge:
            out.append(f"{_ts(i)},10,{job},a,0,records_out,{250 + i},b")
    return out


def _ingest(tmp_path: Path, store: Path, name: str, lines: list[str]):
    path = tmp_path / f"{name}.csv"
    path.write_text(HEADER + "\n".join(lines) + "\n")
    return ingest([path], "normalized", store)


def tables(store: Path) -> dict[str, pd.DataFrame]:
    reader = MetricStore(store)
    out = {}
    for name in TABLES:
        frame = reader.table(name)
        key = [c for c in ("job", "window_start", "operator", "source_op", "target_op") if c in frame]
        out[name] = frame.sort_values(key, ignore_index=True)
    return out


def assert_same_tables(a: dict, b: dict) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=False, rtol=1e-12, atol=1e-12,
                                      obj=name)


def full_rebuild(store: Path, copy: Path, spark, window_s: float) -> dict:
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(store, copy)
    report = summarize_store(copy, window_s=window_s, spark=spark, full=True)
    assert report.mode == "full" and report.full_reason == "--full"
    return tables(copy)


@pytest.mark.slow
def test_incremental_equals_a_full_rebuild_after_every_batch(tmp_path, small_spark):
    store, copy, w = tmp_path / "store", tmp_path / "copy", 20.0
    late = frozenset({(3, "map", 1, "busy_ms"), (3, "src", 0, "source_lag"), (4, "sink", 0, "records_in")})

    # 1. the first summarize is a full rebuild
    _ingest(tmp_path, store, "b1", dag_rows(range(0, 10), skip=late) + flat_rows(range(0, 10)))
    first = summarize_store(store, window_s=w, spark=small_spark)
    assert first.mode == "full" and first.full_reason == "first summarize of this store"
    assert first.raw_rows_read == first.raw_rows

    # 2. nothing added: nothing computed, nothing written
    version = MetricStore(store).version
    again = summarize_store(store, window_s=w, spark=small_spark)
    assert again.mode == "unchanged" and MetricStore(store).version == version
    assert again.rows == first.rows

    # 3. appended windows (past midnight: a new date partition) of job j only
    _ingest(tmp_path, store, "b2", dag_rows(range(10, 16)))
    step = summarize_store(store, window_s=w, spark=small_spark)
    assert step.mode == "incremental" and step.full_reason is None
    # 20 s windows 100-120, 120-140, 140-160 s re-opened (the one after has no rows), plus the
    # window before them read for the lag growth: windows 8..15 of 10 s, job j only
    assert step.windows_recomputed == 3
    assert step.raw_rows_read == len(dag_rows(range(8, 16)))
    assert step.raw_rows == first.raw_rows + len(dag_rows(range(10, 16)))
    assert_same_tables(tables(store), full_rebuild(store, copy, small_spark, w))

    # 4. late rows into windows 3 and 4, exact duplicates of stored rows (nothing new) and a
    #    conflicting duplicate (quarantined): only windows 2-3 and 4-5 (20 s) and the next re-open
    batch = dag_rows(range(3, 5), only=late)
    assert len(batch) == 3
    report = _ingest(tmp_path, store, "b3", batch + dag_rows(range(0, 2)) +
                     [f"{_ts(7)},10,j,map,0,idle_ms,1,"])
    assert report.new == 3 and report.quarantined == {"duplicate_conflict": 1}
    step = summarize_store(store, window_s=w, spark=small_spark)
    assert step.mode == "incremental" and step.windows_recomputed == 2 + 1  # 20-40, 40-60 and 60-80 s
    assert_same_tables(tables(store), full_rebuild(store, copy, small_spark, w))
    # nothing but rows already stored: no change record, nothing to do
    assert _ingest(tmp_path, store, "b4", dag_rows(range(5, 7))).new == 0
    assert summarize_store(store, window_s=w, spark=small_spark).mode == "unchanged"

    # 5. job k gets an edge in its new windows: its operator a becomes a source in *every* window
    before = tables(store)["operator_windows"]
    assert not before[before["job"] == "k"]["is_source"].any()
    _ingest(tmp_path, store, "b5", flat_rows(range(10, 12), edge=True))
    step = summarize_store(store, window_s=w, spark=small_spark)
    assert step.mode == "incremental"
    assert step.windows_recomputed == 6  # all of job k's 20 s windows (0-120 s)
    after = tables(store)["operator_windows"]
    assert after[(after["job"] == "k") & (after["operator"] == "a")]["is_source"].all()
    assert_same_tables(tables(store), full_rebuild(store, copy, small_spark, w))

    # 6. another output window: a full rebuild, said why
    step = summarize_store(store, window_s=10.0, spark=small_spark)
    assert step.mode == "full" and "window changed" in step.full_reason
    assert step.raw_rows_read == step.raw_rows and set(tables(store)["operator_windows"]["window_s"]) == {10.0}


@pytest.mark.slow
def test_a_summarize_killed_mid_way_leaves_the_previous_tables_and_the_next_run_completes(tmp_path, small_spark):
    store, copy = tmp_path / "store", tmp_path / "copy"
    _ingest(tmp_path, store, "b1", dag_rows(range(0, 8)))
    summarize_store(store, spark=small_spark)
    previous = tables(store)
    _ingest(tmp_path, store, "b2", dag_rows(range(8, 12)))
    # its own interpreter (and JVM), killed once the new table files are in place but the
    # manifest is not yet replaced
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from history.store import MetricStore
        from history.summarize import summarize_store
        def die(stage):
            if stage == "moved":
                os.kill(os.getpid(), signal.SIGKILL)
        MetricStore._fault_hook = staticmethod(die)
        summarize_store({str(store)!r}, master="local[1]")
    """)
    log = tmp_path / "killed.log"
    with open(log, "wb") as out:  # not a pipe: the orphaned JVM would hold it open
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        returncode = proc.wait(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its JVM, orphaned by the kill
    assert returncode == -signal.SIGKILL, log.read_text(errors="replace")[-2000:]
    assert len(list((store / "tables").rglob("*.parquet"))) > sum(len(MetricStore(store).table_files(n))
                                                                 for n in TABLES)  # its debris
    assert_same_tables(tables(store), previous)  # the previous tables, readable
    step = summarize_store(store, spark=small_spark)
    assert step.mode == "incremental"
    assert_same_tables(tables(store), full_rebuild(store, copy, small_spark, 10.0))


def test_plan_reopens_the_windows_of_each_run_and_the_next_one():
    w = 20_000_000
    manifest = {"raw": {"job=j/date=2024-05-01": "raw/a.parquet", "job=j/date=2024-05-02": "raw/b2.parquet"},
                "pending": {"job=j/date=2024-05-02": {"runs": [[w * 10 + 5, w * 12], [w * 40, w * 40]],
                                                      "window_s": [10.0]}},
                "summary": {"incremental": 1, "window_s": 20.0, "natives": [10.0],
                            "raw": {"job=j/date=2024-05-01": "raw/a.parquet", "job=j/date=2024-05-02": "raw/b.parquet"}}}
    decided = plan(manifest, window_s=20.0)
    assert decided.full_reason is None and decided.window_s == 20.0
    assert decided.ranges == {"j": [[w * 10, w * 14], [w * 40, w * 42]]}
    assert plan(manifest, window_s=20.0, full=True).full_reason == "--full"
    assert "window changed" in plan(manifest, window_s=40.0).full_reason
    assert "window changed" in plan(manifest).full_reason  # no --window: the raw window, 10 s
    manifest["pending"] = {}
    assert "no record" in plan(manifest, window_s=20.0).full_reason
    manifest["summary"]["raw"]["job=x/date=2024-05-01"] = "raw/x.parquet"
    assert "is gone" in plan(manifest, window_s=20.0).full_reason


def test_merge_runs_and_source_flags():
    assert merge_runs([[0, 1], [5, 6], [20, 21], [22, 30]], 1, 10) == [[0, 1], [5, 6], [20, 30]]
    assert merge_runs([[0, 1], [5, 6], [20, 21], [40, 41], [100, 101]], 1, 3) == [[0, 21], [40, 41], [100, 101]]
    links = [["j", "src", "map", 1, 1], ["j", "map", "sink", 0, 1], ["j", "sink", None, 0, 0],
             ["j", "side", None, 0, 0], ["k", "a", None, 0, 0]]
    assert source_flags(links) == {("j", "src"): True, ("j", "map"): False, ("j", "sink"): False,
                                   ("j", "side"): True, ("k", "a"): False}
