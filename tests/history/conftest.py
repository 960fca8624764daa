"""Fixtures of the history tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def small_spark(spark):
    """The shared session with whole-stage code generation off: compiling generated code costs
    seconds per query and buys nothing on a few rows (benchmarks keep it on)."""
    before = spark.conf.get("spark.sql.codegen.wholeStage")
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
    yield spark
    spark.conf.set("spark.sql.codegen.wholeStage", before)
