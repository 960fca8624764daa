"""Moved to ``scheduler.flink`` (``augury run`` uses it against any Flink cluster); re-exported here."""

from scheduler.flink import (COUNTERS, GROUPINGS, LATENCY_COUNT, LATENCY_HIST, LATENCY_SUM,  # noqa: F401
                             RATES_REFRESH_S, RATES_SPAN_S, TIME_COUNTERS, Edge, FlinkMetricsConfig,
                             FlinkMetricsSource, JobGraph, Vertex, find_job, operator_name, write_to_store)
