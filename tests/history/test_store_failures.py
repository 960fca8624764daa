"""A read-only store and a store with a corrupt Parquet partition, end to end through
``augury.cli.main`` (issue 22): ``augury ingest``, ``augury history summarize`` and ``augury
calibrate`` exit 3 (environment: the store cannot be written, or a file of the store is not the
store's Parquet: the store is damaged; issue 22 files a corrupt partition with the environment
failures) with one line naming the store or the file, no traceback, no Java stack on
the terminal, and the store as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from augury.cli import main
from history.store import MetricStore
from tests.augury.test_calibrate_cli import ROWS, _store_with
from tests.modeler.test_calibrate import _chain_history

FIXTURES = Path(__file__).parent / "fixtures"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str, command: str) -> str:
    """The single error line on stderr (a "(Spark's ... output: FILE)" note may precede it)."""
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1 and lines[-1] == errors[0], err
    assert errors[0].startswith(f"augury {command}: error: "), err
    assert "Traceback" not in err and "\tat " not in err and "org.apache" not in err.replace(
        "org.apache.spark.SparkException", ""), err
    return errors[0]


def snapshot(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@contextlib.contextmanager
def read_only(path: Path):
    """``path`` and everything under it unwritable for this process: chmod for a normal user;
    for root (which ignores permissions) the immutable attribute (chattr +i), else skip."""
    everything = [path, *path.rglob("*")]
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in everything}
        for p in everything:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            yield
        finally:
            for p in everything:
                p.chmod(modes[p])
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "-R", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr +i: cannot make a read-only directory")
    try:
        yield
    finally:
        subprocess.run([chattr, "-R", "-i", str(path)], check=True)


def ingested(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    assert main(["ingest", "--format", "flink-rest", str(FIXTURES / "flink_rest_capture.json"),
                 "--store", str(store)]) == 0
    return store


def _damage_pages(path: Path) -> None:
    """Overwrite a Parquet file's data pages, keeping its magic bytes and its footer."""
    data = bytearray(path.read_bytes())
    footer = struct.unpack("<I", bytes(data[-8:-4]))[0]
    for i in range(4, len(data) - 8 - footer):
        data[i] = 0x7F
    path.write_bytes(bytes(data))


# ------------------------------------------------------------------ read-only store

def test_ingest_into_a_read_only_store_exits_3_and_changes_nothing(tmp_path, capsys):
    store = ingested(tmp_path)
    capsys.readouterr()
    before = snapshot(store)
    with read_only(store):
        code, out, err = run(capsys, "ingest", "--format", "prometheus", FIXTURES / "prometheus_flink.txt",
                             "--ts", "2024-05-01T12:00:10Z", "--store", store)
    assert code == 3 and out == ""
    line = one_error_line(err, "ingest")
    assert str(store) in line and "environment failure" in line
    assert snapshot(store) == before


@pytest.mark.spark
def test_summarize_a_read_only_store_exits_3_before_spark_runs(tmp_path, capsys, small_spark):
    store = ingested(tmp_path)
    capsys.readouterr()
    before = snapshot(store)
    with read_only(store):
        code, out, err = run(capsys, "history", "summarize", "--store", store)
    assert code == 3 and out == ""
    line = one_error_line(err, "history")
    assert str(store) in line and "environment failure" in line
    assert snapshot(store) == before


def test_calibrate_from_a_read_only_store_works(tmp_path, capsys):
    # calibrate only reads the store: read-only is fine
    ops, edges = _chain_history(ROWS, selectivity=2.0)
    store = Path(_store_with(tmp_path, ops, edges))
    out = tmp_path / "model.yaml"
    with read_only(store):
        code, _, err = run(capsys, "calibrate", "--store", store, "--job", "j", "--out", out, "--no-track")
    assert code == 0, err
    assert out.is_file()


# ------------------------------------------------------------------ a corrupt partition

@pytest.mark.parametrize("damage", ["garbage", "truncated", "pages"])
@pytest.mark.spark
def test_summarize_a_corrupt_raw_partition_exits_3_naming_the_file(tmp_path, capsys, small_spark, damage):
    # garbage / truncated: the footer check finds it before Spark runs; pages: the footer is intact,
    # Spark's read fails, and the failure is mapped to the same error (its Java stack is not shown).
    store = ingested(tmp_path)
    [part] = MetricStore(store).raw_files()
    if damage == "garbage":
        Path(part).write_bytes(b"not parquet at all\n")
    elif damage == "truncated":
        Path(part).write_bytes(Path(part).read_bytes()[:-20])
    else:
        _damage_pages(Path(part))
    capsys.readouterr()
    before = snapshot(store)
    code, out, err = run(capsys, "history", "summarize", "--store", store)
    assert code == 3 and out == "", err
    line = one_error_line(err, "history")
    assert part in line and ("corrupt store file" in line or "cannot read this store file" in line)
    assert snapshot(store) == before
    assert MetricStore(store).summary() is None


def test_ingest_into_a_corrupt_partition_exits_3_and_changes_nothing(tmp_path, capsys):
    store = ingested(tmp_path)
    [part] = MetricStore(store).raw_files()
    Path(part).write_bytes(b"PAR1" + b"\x00" * 64)
    capsys.readouterr()
    before = snapshot(store)
    # the same job and day: the partition must be merged, and cannot be read
    code, out, err = run(capsys, "ingest", "--format", "prometheus", FIXTURES / "prometheus_flink.txt",
                         "--ts", "2024-05-01T12:00:10Z", "--store", store)
    assert code == 3 and out == ""
    line = one_error_line(err, "ingest")
    assert part in line and "corrupt store file" in line
    assert snapshot(store) == before
    assert not (store / "_txn").exists()


@pytest.mark.parametrize("damage", ["garbage", "pages"])
def test_calibrate_from_a_corrupt_table_exits_3_and_writes_nothing(tmp_path, capsys, damage):
    ops, edges = _chain_history(ROWS, selectivity=2.0)
    store = Path(_store_with(tmp_path, ops, edges))
    [table] = MetricStore(store).table_files("operator_windows")
    if damage == "garbage":
        Path(table).write_text("garbage\n")
    else:
        _damage_pages(Path(table))
    out = tmp_path / "model.yaml"
    code, stdout, err = run(capsys, "calibrate", "--store", store, "--job", "j", "--out", out, "--no-track")
    assert code == 3 and stdout == "", err
    line = one_error_line(err, "calibrate")
    assert table in line and "corrupt store file" in line
    assert not out.exists()
