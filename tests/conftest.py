"""Shared fixtures: one SparkSession for the whole run, a throw-away mlflow store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from experiments import bundled

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = bundled.examples_dir()
"""The bundled example model files and run configurations (the repository's examples/)."""
TRACES = bundled.traces_dir()
"""The bundled real traces."""


@pytest.fixture(scope="session")
def spark():
    """Local Spark, UI off, 2 shuffle partitions; started once, stopped at the end."""
    from history.spark import spark_session

    session = spark_session(master="local[2]", app_name="augury-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def small_spark(spark):
    """The shared session with whole-stage code generation off: compiling generated code costs
    seconds per query and buys nothing on a few rows (benchmarks keep it on)."""
    before = spark.conf.get("spark.sql.codegen.wholeStage")
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
    yield spark
    spark.conf.set("spark.sql.codegen.wholeStage", before)


@pytest.fixture(autouse=True, scope="session")
def _mlflow_store(tmp_path_factory):
    """Never write into the developer's mlflow store from tests."""
    if "MLFLOW_TRACKING_URI" not in os.environ:
        db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{db}"
    yield


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The bundled real traces (shipped with augury: never skipped)."""
    return TRACES
