"""The history benchmark's pyarrow baseline computes the same operator_windows as the pipeline.

The benchmark's ratio means something only while both sides compute the same table: when the
pipeline's definitions change, this fails until the baseline follows. Small generated data (the
benchmark's own generator), the shared SparkSession without whole-stage code generation."""

from __future__ import annotations

import math

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from experiments.bench.bench_history import (
    INSTANCES, OPERATORS, WINDOW_S, _instance_metrics, compare, generate, pyarrow_operator_windows)
from history.pipeline import summarize
from history.summarize import raw_spark_schema

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """(native windows, Parquet files) of ~20,000 generated raw rows."""
    out = tmp_path_factory.mktemp("bench-raw")
    rows, files = generate(20_000, out)
    per_window = INSTANCES * sum(len(_instance_metrics(op)) for op in OPERATORS)
    return rows // per_window, files


@pytest.mark.parametrize("window_s", [10.0, 20.0])
def test_baseline_equals_the_pipeline_on_every_column(small_spark, generated, tmp_path, window_s):
    native_windows, raw_files = generated
    raw = small_spark.read.schema(raw_spark_schema()).parquet(*raw_files)
    summarize(raw, window_s).operator_windows.write.parquet(str(tmp_path / "spark" / "operator_windows"))
    baseline = pyarrow_operator_windows(raw_files, window_s)
    pq.write_table(baseline, tmp_path / "baseline.parquet")

    assert baseline.num_rows == len(OPERATORS) * math.ceil(native_windows * WINDOW_S / window_s)
    assert set(baseline.column_names) >= {"arrival_rate", "arrival_basis", "latency_ms_mean"}
    assert compare(tmp_path / "spark", tmp_path / "baseline.parquet") < 1e-9


def test_compare_sees_a_changed_column(small_spark, generated, tmp_path):
    _, raw_files = generated
    raw = small_spark.read.schema(raw_spark_schema()).parquet(*raw_files)
    summarize(raw, 10.0).operator_windows.write.parquet(str(tmp_path / "spark" / "operator_windows"))
    baseline = pyarrow_operator_windows(raw_files, 10.0)
    column = baseline.column_names.index("arrival_rate")
    changed = baseline.set_column(column, "arrival_rate", pc.multiply(baseline["arrival_rate"], 1.01))
    pq.write_table(changed, tmp_path / "baseline.parquet")
    # relative to the baseline's value: |x - 1.01 x| / (1.01 x)
    assert compare(tmp_path / "spark", tmp_path / "baseline.parquet") == pytest.approx(0.01 / 1.01, rel=1e-6)


def test_bulk_store_holds_the_generated_rows_in_ingest_layout(tmp_path):
    from experiments.bench.bench_history import bulk_store
    from history.store import MetricStore

    (tmp_path / "raw").mkdir()
    # windows from 23:58:20 on: the rows cross midnight, so two date partitions
    rows, files = generate(5_000, tmp_path / "raw", first_window=8_630)
    assert bulk_store(files, tmp_path / "store") == rows
    store = MetricStore(tmp_path / "store")
    assert sorted(store.raw_files()) == sorted(str(p) for p in (tmp_path / "store" / "raw").rglob("*.parquet"))
    assert len(store.raw_files()) == 2 and sum(store.check_files(store.raw_files()).values()) == rows
    raw = store.raw()
    assert len(raw) == rows and raw["ts"].is_monotonic_increasing
    assert raw["ts"].min().isoformat() == "2024-05-01T23:58:20+00:00"
