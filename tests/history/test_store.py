"""The store: partitioned layout, idempotent and atomic ingest, readers."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from history.errors import StoreError
from history.ingest import ingest
from history.store import MANIFEST, MetricStore

REPO = Path(__file__).resolve().parents[2]
HEADER = "ts,window_s,job,operator,instance,metric,value,target\n"


def csv(path: Path, lines: list[str]) -> Path:
    path.write_text(HEADER + "\n".join(lines) + "\n")
    return path


def day_rows(day: str, job: str = "wc", n: int = 3) -> list[str]:
    return [f"{day}T12:00:{10 * i:02d}Z,10,{job},map,{i % 2},records_in,{100 + i}," for i in range(n)] + \
           [f"{day}T12:00:00Z,10,{job},map,0,records_out,{90 + n},sink",
            f"{day}T12:00:00Z,10,{job},map,0,bogus,1,"]


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root -> its sha256 (the store's bytes, not just what readers see)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_layout_is_parquet_partitioned_by_job_and_date(tmp_path):
    store = tmp_path / "store"
    ingest([csv(tmp_path / "a.csv", day_rows("2024-05-01") + day_rows("2024-05-02", job="a/b"))],
           "normalized", store)
    files = sorted(str(p.relative_to(store)) for p in store.rglob("*.parquet"))
    dirs = sorted({str(Path(f).parent) for f in files})
    assert dirs == ["quarantine/job=a%2Fb/date=2024-05-02", "quarantine/job=wc/date=2024-05-01",
                    "raw/job=a%2Fb/date=2024-05-02", "raw/job=wc/date=2024-05-01"]
    reader = MetricStore(store)
    assert reader.jobs() == ["a/b", "wc"]
    assert len(reader.raw("a/b")) == 4 and len(reader.raw("wc")) == 4
    assert len(reader.raw(start="2024-05-02")) == 4
    assert len(reader.raw(end=pd.Timestamp("2024-05-01T12:00:10Z"))) == 2
    assert reader.raw()["ts"].dt.tz is not None


def test_ingesting_the_same_file_twice_changes_nothing(tmp_path):
    store = tmp_path / "store"
    path = csv(tmp_path / "a.csv", day_rows("2024-05-01") + day_rows("2024-05-02"))
    first = ingest([path], "normalized", store)
    before = snapshot(store)
    raw_before = MetricStore(store).raw()
    second = ingest([path], "normalized", store)
    assert first.new == 8 and second.new == 0 and second.already_stored == 8
    assert second.quarantined == first.quarantined  # reported again, but stored once
    assert snapshot(store) == before
    pd.testing.assert_frame_equal(MetricStore(store).raw(), raw_before)
    assert len(MetricStore(store).quarantine()) == 2


def test_host_column_is_optional_in_inputs_and_old_files_read_it_as_null(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    store = tmp_path / "store"
    with_host = tmp_path / "h.csv"
    with_host.write_text(HEADER.strip() + ",host\n2024-05-01T12:00:00Z,10,wc,map,0,records_in,5,,host-3\n")
    report = ingest([with_host, csv(tmp_path / "a.csv", day_rows("2024-05-02", n=1))], "normalized", store)
    assert report.new == 3
    raw = MetricStore(store).raw()
    assert raw.groupby(raw["ts"].dt.day)["host"].apply(list).to_dict() == {1: ["host-3"], 2: [None, None]}
    # a partition written before the column existed: its rows read host as null, and merge
    old = next((store / "raw").rglob("date=2024-05-02/*.parquet"))
    pq.write_table(pq.read_table(old).drop(["host"]), old)
    assert pq.read_schema(old).get_field_index("host") == -1
    ingest([csv(tmp_path / "b.csv", day_rows("2024-05-02", n=2))], "normalized", store)
    raw = MetricStore(store).raw("wc", start="2024-05-02")
    assert len(raw) == 3 and raw["host"].isna().all()


def test_overlapping_ingest_adds_only_new_rows(tmp_path):
    store = tmp_path / "store"
    ingest([csv(tmp_path / "a.csv", day_rows("2024-05-01", n=2))], "normalized", store)
    report = ingest([csv(tmp_path / "b.csv", day_rows("2024-05-01", n=2)[:1] + day_rows("2024-05-01", n=3)[2:3])],
                    "normalized", store)
    assert (report.new, report.already_stored) == (1, 1)
    raw = MetricStore(store).raw()
    assert len(raw) == 4 and not raw.duplicated(["ts", "operator", "instance", "metric", "target"]).any()
    # the partition was rewritten as one file; the superseded one is gone
    assert len(list((store / "raw").rglob("*.parquet"))) == 1


@pytest.mark.parametrize("stage", ["staged", "moved"])
def test_a_failure_before_the_commit_leaves_the_store_unchanged(tmp_path, monkeypatch, stage):
    store = tmp_path / "store"
    ingest([csv(tmp_path / "a.csv", day_rows("2024-05-01"))], "normalized", store)
    before = MetricStore(store).raw()
    manifest = (store / MANIFEST).read_bytes()

    def crash(at: str) -> None:
        if at == stage:
            raise RuntimeError(f"killed at {at}")

    monkeypatch.setattr(MetricStore, "_fault_hook", staticmethod(crash))
    with pytest.raises(RuntimeError, match="killed"):
        ingest([csv(tmp_path / "b.csv", day_rows("2024-05-01", n=6) + day_rows("2024-05-03"))],
               "normalized", store)
    monkeypatch.setattr(MetricStore, "_fault_hook", None)
    assert (store / MANIFEST).read_bytes() == manifest
    pd.testing.assert_frame_equal(MetricStore(store).raw(), before)
    # and the next write clears the debris and works
    report = ingest([csv(tmp_path / "c.csv", day_rows("2024-05-03"))], "normalized", store)
    assert report.new == 4
    listed = {Path(f) for f in MetricStore(store).raw_files()}
    assert set((store / "raw").rglob("*.parquet")) == listed
    assert not (store / "_txn").exists()


def test_an_ingest_process_killed_midway_leaves_the_store_readable_and_unchanged(tmp_path):
    store = tmp_path / "store"
    ingest([csv(tmp_path / "a.csv", day_rows("2024-05-01"))], "normalized", store)
    before = snapshot(store)
    raw_before = MetricStore(store).raw()
    big = csv(tmp_path / "big.csv", [line for d in range(1, 29) for line in day_rows(f"2024-06-{d:02d}", n=50)])
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from history.store import MetricStore
        from history.ingest import ingest
        def die(stage):
            if stage == "moved":  # files are in their final place, manifest not yet replaced
                os.kill(os.getpid(), signal.SIGKILL)
        MetricStore._fault_hook = staticmethod(die)
        ingest([{str(big)!r}], "normalized", {str(store)!r})
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert len(list((store / "raw").rglob("*.parquet"))) > 1  # debris of the killed ingest exists
    pd.testing.assert_frame_equal(MetricStore(store).raw(), raw_before)
    files_listed = [p for p in snapshot(store) if p.startswith(("raw/", "quarantine/"))]
    assert {k: v for k, v in snapshot(store).items() if k in before} == before
    assert set(before) <= set(files_listed) | {MANIFEST}


def test_not_a_store_and_missing_store_are_errors(tmp_path):
    with pytest.raises(StoreError, match="no such metric store") as err:
        MetricStore(tmp_path / "nothing")
    assert err.value.file == str(tmp_path / "nothing")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.txt").write_text("x")
    with pytest.raises(StoreError, match="not a metric store"):
        MetricStore(tmp_path / "junk")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / MANIFEST).write_text("{not json")
    with pytest.raises(StoreError, match="corrupt manifest") as info:
        MetricStore(bad)
    assert info.value.exit_code == 3  # the store's own file damaged: an environment failure


def test_tables_are_empty_with_their_columns_before_summarize(tmp_path):
    store = tmp_path / "store"
    ingest([csv(tmp_path / "a.csv", day_rows("2024-05-01"))], "normalized", store)
    reader = MetricStore(store)
    ow = reader.operator_windows()
    assert ow.empty and "service_time_ms" in ow.columns and "max_instance_share" in ow.columns
    assert reader.edge_windows().columns.tolist()[:7] == ["window_start", "window_s", "job", "source_op",
                                                          "target_op", "rate", "selectivity"]
    assert reader.summary() is None
    with pytest.raises(StoreError, match="unknown table"):
        reader.table("nope")


def test_a_non_empty_directory_is_never_adopted_as_a_store(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="not empty"):
        ingest([csv(tmp_path / "a.csv", day_rows("2024-05-01"))], "normalized", home)
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert ingest([csv(tmp_path / "a.csv", day_rows("2024-05-01"))], "normalized", empty).new == 4


def test_a_relative_store_path_reads_its_tables_and_raw_files(tmp_path, monkeypatch):
    """``MetricStore("calstore")`` used to look for ``calstore/calstore/...`` (issue 22)."""
    import pyarrow.parquet as pq

    from history.schema import OPERATOR_WINDOWS_SCHEMA

    monkeypatch.chdir(tmp_path)
    ingest([csv(tmp_path / "a.csv", day_rows("2024-05-01"))], "normalized", "calstore")
    store = MetricStore("calstore")
    with store.table_transaction() as tx:
        tx.dir("operator_windows").mkdir(parents=True)
        pq.write_table(OPERATOR_WINDOWS_SCHEMA.empty_table(), tx.dir("operator_windows") / "p.parquet")
    assert all(Path(f).is_absolute() for f in store.raw_files() + store.table_files("operator_windows"))
    assert len(store.raw()) == 4 and store.operator_windows().empty
    assert store.path == Path("calstore")  # messages keep naming the store as given
