"""The normalized raw metrics schema, the metric vocabulary and the summarized tables' schemas.

One raw row is one measurement of one metric of one operator instance over one window:

==========  ===========================  ==================================================
column      type                         meaning
==========  ===========================  ==================================================
ts          timestamp (us, UTC)          window start
window_s    float64, s                   window length (> 0); default 10 when absent
job         string                       job name
operator    string                       operator (Flink vertex, Heron component)
instance    int32 (>= 0)                 instance index (Flink subtask index, Heron task id)
metric      string (``Metric``)          what was measured
value       float64                      the measurement, in the metric's unit
target      string, nullable             downstream operator (``records_out`` only)
host        string, nullable             host the instance ran on (optional; issue 26)
==========  ===========================  ==================================================

The row key is ``(ts, job, operator, instance, metric, target)``; ``host`` is not part of it (an
instance-window ran on one host), and rows without it stay valid: inputs may omit the column,
and store files written before it existed read it as null (``ADDED_COLUMNS``). Counts and times are totals
over the window; gauges are the window's mean (``source_lag``: the backlog at the window end).
Rates are tuples/s, times are ms everywhere (see ``docs/history.md``).
"""

from __future__ import annotations

from enum import Enum

import pyarrow as pa


class Metric(str, Enum):
    """The metric vocabulary. ``unit``: what ``value`` is measured in; ``kind``: how it aggregates."""

    RECORDS_IN = "records_in"
    RECORDS_OUT = "records_out"
    BUSY_MS = "busy_ms"
    BACKPRESSURED_MS = "backpressured_ms"
    IDLE_MS = "idle_ms"
    QUEUE_LEN = "queue_len"
    SOURCE_LAG = "source_lag"
    LATENCY_MS_MEAN = "latency_ms_mean"
    LATENCY_MS_P50 = "latency_ms_p50"
    LATENCY_MS_P95 = "latency_ms_p95"
    LATENCY_MS_P99 = "latency_ms_p99"
    PARALLELISM = "parallelism"

    @property
    def unit(self) -> str:
        return _UNITS[self][0]

    @property
    def kind(self) -> str:
        """``count`` (summed over time), ``time`` (ms summed over time), ``gauge`` (averaged),
        ``level`` (the last value of the window)."""
        return _UNITS[self][1]

    @property
    def description(self) -> str:
        return _UNITS[self][2]

    @property
    def per_edge(self) -> bool:
        """Whether rows of this metric may carry a ``target`` (only ``records_out``)."""
        return self is Metric.RECORDS_OUT


_UNITS: dict[Metric, tuple[str, str, str]] = {
    Metric.RECORDS_IN: ("tuples", "count", "tuples the instance processed (consumed) in the window"),
    Metric.RECORDS_OUT: ("tuples", "count",
                         "tuples the instance emitted in the window; with target: on the edge to "
                         "that operator, without: its total output"),
    Metric.BUSY_MS: ("ms", "time", "time spent processing (useful time) in the window"),
    Metric.BACKPRESSURED_MS: ("ms", "time", "time blocked by back pressure in the window"),
    Metric.IDLE_MS: ("ms", "time", "time idle (waiting for input) in the window"),
    Metric.QUEUE_LEN: ("items", "gauge", "mean input queue length (Flink: network buffers)"),
    Metric.SOURCE_LAG: ("tuples", "level",
                        "backlog waiting outside the job (e.g. Kafka consumer lag) at the window end"),
    Metric.LATENCY_MS_MEAN: ("ms", "gauge", "mean end-to-end latency of tuples leaving a sink"),
    Metric.LATENCY_MS_P50: ("ms", "gauge", "median end-to-end latency at a sink"),
    Metric.LATENCY_MS_P95: ("ms", "gauge", "95th percentile end-to-end latency at a sink"),
    Metric.LATENCY_MS_P99: ("ms", "gauge", "99th percentile end-to-end latency at a sink"),
    Metric.PARALLELISM: ("instances", "gauge", "the operator's configured parallelism"),
}

LATENCIES: tuple[str, ...] = (Metric.LATENCY_MS_MEAN.value, Metric.LATENCY_MS_P50.value,
                              Metric.LATENCY_MS_P95.value, Metric.LATENCY_MS_P99.value)
"""The end-to-end latency gauges (sinks report them); operator_windows averages each."""

METRIC_NAMES: frozenset[str] = frozenset(m.value for m in Metric)
TIME_METRICS: tuple[str, ...] = (Metric.BUSY_MS.value, Metric.BACKPRESSURED_MS.value,
                                 Metric.IDLE_MS.value)

DEFAULT_WINDOW_S = 10.0
"""Window length assumed when an input row carries no ``window_s``."""

TIME_TOLERANCE = 0.01
"""busy + back-pressured + idle may exceed the window by this fraction (measurement jitter)
before the rows are quarantined as ``time_exceeds_window``."""

MAX_NAME_CHARS = 200
"""Longest job, operator or target name (characters); longer names are quarantined (``bad_name``)."""

MAX_JOB_PATH_CHARS = 240
"""Longest job name once URL-quoted (non-ASCII characters take 6-12): the store keeps a job's rows
under the directory ``job=<quoted name>`` and file systems limit a name to 255 bytes."""

TS_MIN = "1678-01-01T00:00:00Z"
TS_MAX = "2262-04-11T00:00:00Z"
"""Timestamps outside [TS_MIN, TS_MAX) are quarantined as ``bad_timestamp``: the range every tool
of the pipeline (pandas, Spark, Parquet at ns) represents; an epoch in milliseconds read as
seconds lands far outside it."""


def job_fits_path(job: str) -> bool:
    """Whether ``job`` can name a store partition directory (see ``MAX_JOB_PATH_CHARS``)."""
    from urllib.parse import quote

    return len(quote(job, safe="")) <= MAX_JOB_PATH_CHARS


KEY_COLUMNS: tuple[str, ...] = ("ts", "job", "operator", "instance", "metric", "target")
RAW_COLUMNS: tuple[str, ...] = ("ts", "window_s", "job", "operator", "instance", "metric",
                                "value", "target", "host")
ADDED_COLUMNS: tuple[str, ...] = ("host",)
"""Nullable columns added to ``RAW_SCHEMA`` after stores were first written: a file without one
reads it as null."""

RAW_SCHEMA = pa.schema([
    pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("window_s", pa.float64(), nullable=False),
    pa.field("job", pa.string(), nullable=False),
    pa.field("operator", pa.string(), nullable=False),
    pa.field("instance", pa.int32(), nullable=False),
    pa.field("metric", pa.string(), nullable=False),
    pa.field("value", pa.float64(), nullable=False),
    pa.field("target", pa.string(), nullable=True),
    pa.field("host", pa.string(), nullable=True),
])


class Reason(str, Enum):
    """Why a row went to quarantine (the ``reason`` column)."""

    MALFORMED_ROW = "malformed_row"
    MISSING_FIELD = "missing_field"
    BAD_NAME = "bad_name"
    UNKNOWN_METRIC = "unknown_metric"
    BAD_TIMESTAMP = "bad_timestamp"
    BAD_WINDOW = "bad_window"
    BAD_INSTANCE = "bad_instance"
    NON_NUMERIC_VALUE = "non_numeric_value"
    NEGATIVE_VALUE = "negative_value"
    UNEXPECTED_TARGET = "unexpected_target"
    DUPLICATE_CONFLICT = "duplicate_conflict"
    TIME_EXCEEDS_WINDOW = "time_exceeds_window"


QUARANTINE_COLUMNS: tuple[str, ...] = ("ts", "window_s", "job", "operator", "instance", "metric",
                                       "value", "target", "reason", "detail", "file", "line")
QUARANTINE_SCHEMA = pa.schema([pa.field(c, pa.int64() if c == "line" else pa.string())
                               for c in QUARANTINE_COLUMNS])
"""Quarantined rows keep the fields as read (strings), plus why and where from."""

_TS = pa.timestamp("us", tz="UTC")
OPERATOR_WINDOWS_SCHEMA = pa.schema([
    ("window_start", _TS), ("window_s", pa.float64()), ("job", pa.string()),
    ("operator", pa.string()), ("is_source", pa.bool_()), ("parallelism", pa.int64()),
    ("arrival_rate", pa.float64()), ("processed_rate", pa.float64()),
    ("busy_fraction_mean", pa.float64()), ("busy_fraction_max", pa.float64()),
    ("service_time_ms", pa.float64()), ("backpressure_fraction", pa.float64()),
    ("queue_len_mean", pa.float64()), ("max_instance_share", pa.float64()),
    ("latency_ms_mean", pa.float64()), ("latency_ms_p50", pa.float64()),
    ("latency_ms_p95", pa.float64()), ("latency_ms_p99", pa.float64()),
    ("arrival_basis", pa.string()),
])
EDGE_WINDOWS_SCHEMA = pa.schema([
    ("window_start", _TS), ("window_s", pa.float64()), ("job", pa.string()),
    ("source_op", pa.string()), ("target_op", pa.string()), ("rate", pa.float64()),
    ("selectivity", pa.float64()),
])
SOURCE_RATES_SCHEMA = pa.schema([
    ("window_start", _TS), ("window_s", pa.float64()), ("job", pa.string()),
    ("operator", pa.string()), ("processed_rate", pa.float64()), ("source_lag", pa.float64()),
    ("lag_growth_rate", pa.float64()), ("arrival_rate", pa.float64()),
])
TABLE_SCHEMAS: dict[str, pa.Schema] = {
    "operator_windows": OPERATOR_WINDOWS_SCHEMA,
    "edge_windows": EDGE_WINDOWS_SCHEMA,
    "source_rates": SOURCE_RATES_SCHEMA,
}
TABLES: tuple[str, ...] = tuple(TABLE_SCHEMAS)
