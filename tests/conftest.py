"""Shared fixtures: one SparkSession for the whole run, a throw-away mlflow store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from experiments import bundled

REPO = Path(__file__).resolve().parent.parent

# Hypothesis: random examples on a developer's machine (new ones every run: that is how the
# point-mass p99 of test_end_to_end_dp_as_matrices_equals_row_by_row was found), the same ones
# on every CI run (``.ci/run`` sets HYPOTHESIS_PROFILE=ci): a property failing there fails every
# time, reproducibly, and a green commit stays green. (Two of the three CI failures of
# 2026-11-29 were examples or timings no earlier run had drawn.)
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
EXAMPLES = bundled.examples_dir()
"""The bundled example model files and run configurations (the repository's examples/)."""
TRACES = bundled.traces_dir()
"""The bundled real traces."""

# Tests leave the user's cache alone: no JVM they start (the shared session, the commands run as
# subprocesses) writes or maps the ~185 MB class-data-sharing archive of history.spark; the test
# of that archive turns it on in a cache directory of its own.
os.environ.setdefault("AUGURY_SPARK_CDS", "0")


@pytest.fixture(scope="session")
def spark():
    """Local Spark, UI off, 2 shuffle partitions; started once, stopped at the end. Short-lived
    (client compiler only): every test runs seconds of Spark work on a few rows."""
    from history.spark import spark_session

    session = spark_session(master="local[2]", app_name="augury-tests", shuffle_partitions=2,
                            short_lived=True)
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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``--dist loadgroup``): every Flink test on one worker (one cluster per
    run) and every Spark test on one worker (one SparkSession per run); the rest spread freely."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        for marker in ("flink", "spark"):
            if item.get_closest_marker(marker):
                item.add_marker(pytest.mark.xdist_group(marker))
                break


def pytest_collection_finish(session):
    """Say so when xdist's grouping silently does not take effect (pytest-xdist#1386: with pytest
    9.2 the group no longer reaches the node id, so each Flink test could start its own cluster)."""
    if os.environ.get("PYTEST_XDIST_WORKER") != "gw0" or not session.config.getoption("loadgroup", False):
        return
    lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        import warnings

        warnings.warn(f"--dist loadgroup is not grouping ({len(lost)} tests, e.g. {lost[0]}): Flink and "
                      "Spark tests may run on several workers (see pytest-xdist issue 1386)")


@pytest.fixture(autouse=True, scope="session")
def _log_dir(tmp_path_factory):
    """Commands run by the tests write their library-output logs here, not in ~/.cache."""
    os.environ.setdefault("AUGURY_LOG_DIR", str(tmp_path_factory.mktemp("logs")))
    yield


@pytest.fixture(autouse=True, scope="session")
def _mlflow_store(tmp_path_factory):
    """Never write into the developer's mlflow store from tests. Under pytest-xdist every worker
    has a sqlite store of its own (two processes creating one sqlite store's tables at once
    collide)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if uri is None:
        db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{db}"
    elif worker and uri.startswith("sqlite:///") and uri.endswith(".db"):
        os.environ["MLFLOW_TRACKING_URI"] = f"{uri[:-len('.db')]}-{worker}.db"
    yield


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The bundled real traces (shipped with augury: never skipped)."""
    return TRACES
