"""The Spark pipeline: raw metric rows -> per-instance windows -> operator statistics.

Pure DataFrame -> DataFrame functions (no session, no I/O; ``history.summarize`` is the entry
point that reads the store and writes the tables). Rates are tuples/s, times ms, fractions in
[0, 1]. ``window_s`` (W) is the output window: every raw row is assigned to the window
``floor(ts / W) * W`` (epoch-aligned, UTC) by its start; W must be a multiple of every row's
window_s (``resolve_window`` checks).

* ``instance_windows``: one row per (window_start, job, operator, instance): counts and times
  summed, gauges averaged, ``source_lag`` = the last value in the window, ``busy_covered_s`` /
  ``bp_covered_s`` = seconds actually covered by busy / back-pressure measurements.
* ``operator_windows``: per (window_start, job, operator):
  - ``parallelism``: the ``parallelism`` gauge (max) when reported, else instances reporting;
  - ``processed_rate`` = processed tuples / W, where processed = sum of records_in, except for
    source operators that report no (or zero) records_in (Flink sources): their records_out;
  - ``arrival_rate``: sources: ``source_rates.arrival_rate``; others: the sum of the rates of
    their incoming ``edge_windows`` when there are any, else ``processed_rate``
    (``arrival_basis`` says which: ``external`` / ``edges`` / ``processed``);
  - ``busy_fraction_mean`` / ``_max``: over instances of busy_ms / (1000 x busy_covered_s);
  - ``service_time_ms`` = sum busy_ms / processed tuples (DS2's useful time per tuple), both
    summed over the same data: the instances' native windows (raw rows' ``ts``) that report both.
    An instance whose busy_ms (or processed count) is missing for the window, or for one of the
    native windows inside it (e.g. quarantined), contributes neither for that span instead of
    biasing the ratio (null when nothing reports both);
  - ``backpressure_fraction``: mean over instances of backpressured_ms / (1000 x bp_covered_s);
  - ``queue_len_mean``: mean over instances; ``max_instance_share`` = hottest instance's
    processed tuples / the operator's; ``latency_ms_*``: mean over instances (sinks report them).
* ``edge_windows``: per (window_start, job, source_op, target_op) from records_out rows with a
  target: ``rate`` = tuples / W, ``selectivity`` = tuples / source_op's processed tuples.
* ``source_rates``: per source operator and window: ``source_lag`` (summed over instances, at the
  window end), ``lag_growth_rate`` = (lag - lag of the previous window) / W (null when the previous
  window is missing), ``arrival_rate`` = max(0, processed_rate + lag_growth_rate): what arrived,
  not only what was processed.

Source operators: operators that report ``source_lag``, plus, in jobs that have any edge rows,
operators that are never the target of an edge.

Speed: the per-instance and per-operator aggregations group on a 64-bit ``operator_key``
(``xxhash64(job, operator)``) instead of the two strings, and the names are joined back from the
small ``operator_names`` table after aggregating (a collision fails the query, it never merges
operators); the names and the source flags come from one small aggregate of the raw rows per
(job, operator, target) (``_operators``: one scan, where separate name, edge-target and
edge-job tables scanned the raw rows three times).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from history.errors import HistoryError
from history.schema import LATENCIES


@dataclass(frozen=True)
class Summary:
    """The three summarized tables (Spark DataFrames)."""

    operator_windows: DataFrame
    edge_windows: DataFrame
    source_rates: DataFrame

    def tables(self) -> dict[str, DataFrame]:
        return {"operator_windows": self.operator_windows, "edge_windows": self.edge_windows,
                "source_rates": self.source_rates}


def resolve_window(native_windows_s: list[float], window_s: float | None) -> float:
    """The output window: ``window_s`` if given (a multiple of every native window), else the
    largest native window (all others must divide it)."""
    natives = sorted({float(w) for w in native_windows_s})
    if not natives:
        raise HistoryError("no raw rows to summarize", field="window_s")
    target = float(window_s) if window_s is not None else natives[-1]
    if not math.isfinite(target) or target <= 0:
        raise HistoryError("the window must be a positive duration", field="--window", value=window_s)
    for native in natives:
        ratio = target / native
        if ratio < 1 - 1e-9 or abs(ratio - round(ratio)) > 1e-9:
            flag = "--window" if window_s is not None else "window_s"
            raise HistoryError(
                f"the raw rows have window_s {native:g} s: the output window must be a multiple of "
                f"every row's window (raw windows: {', '.join(f'{w:g}' for w in natives)} s)",
                field=flag, value=f"{target:g}s")
    return target


def with_window_start(raw: DataFrame, window_s: float) -> DataFrame:
    """Add ``window_start``: the epoch-aligned output window that holds each row's ``ts``."""
    width_us = int(round(window_s * 1_000_000))
    micros = F.unix_micros(F.col("ts"))
    return raw.withColumn("window_start",
                          F.timestamp_micros(micros - F.pmod(micros, F.lit(width_us))))


def operator_key(job="job", operator="operator"):
    """A fixed-width (64-bit) stand-in for the (job, operator) pair: ``xxhash64(job, operator)``.

    The big aggregations group on it instead of the two strings (grouping 10 M rows on two
    string columns costs more than all the aggregate functions together); ``operator_names``
    maps it back."""
    return F.xxhash64(F.col(job) if isinstance(job, str) else job,
                      F.col(operator) if isinstance(operator, str) else operator)


def operator_links(raw: DataFrame) -> DataFrame:
    """One row per (job, operator, target) of the raw rows: ``_lag`` (1 when the operator reports
    ``source_lag`` there) and ``_edge`` (1 when it sends records_out to that target). Small, and
    mergeable by ``max`` over (job, operator, target): the links of all rows are the union of the
    links of any split of them, which is what an incremental summarize keeps between runs.
    ``_rows`` (raw rows) and ``_natives`` (their distinct window_s) come with it, so a reader of
    the links needs no other scan to count the rows or to check the output window."""
    m, target = F.col("metric"), F.col("target")
    return raw.groupBy("job", "operator", "target").agg(
        F.max((m == "source_lag").cast("int")).alias("_lag"),
        F.max(((m == "records_out") & target.isNotNull()).cast("int")).alias("_edge"),
        F.count(F.lit(1)).alias("_rows"), F.collect_set("window_s").alias("_natives"))


def _operators(raw: DataFrame, links: DataFrame | None = None) -> DataFrame:
    """The distinct operators of the raw rows, from one scan: ``_op`` (= ``operator_key``), job,
    operator, ``_lag`` (the operator reports ``source_lag``) and ``is_source`` (it reports
    ``source_lag``, or its job has edges and no edge targets it).

    One small aggregate per (job, operator, target) (``operator_links``; given as ``links`` when
    the raw rows are only part of the history: the flags are properties of the whole job) carries
    whether the operator reports ``source_lag`` and whether it sends records_out to that target;
    windows over its jobs give the jobs with edges and the edge targets (no further scans of the
    raw rows, no joins).
    A 64-bit hash collision between two operators (odds ~n^2 / 2^65 for n operators) would merge
    them: the query fails with an error instead (``raise_error``)."""
    target = F.col("target")
    links = operator_links(raw) if links is None else links
    job = Window.partitionBy("job")
    targets = F.collect_set(F.when(F.col("_edge") == 1, target)).over(job)
    names = links.select(
        "job", "operator", "_lag", F.max("_edge").over(job).alias("_job_edges"),
        F.array_contains(targets, F.col("operator")).cast("int").alias("_target"),
    ).groupBy("job", "operator").agg(
        F.max("_lag").alias("_lag"), F.max("_job_edges").alias("_job_edges"),
        F.max("_target").alias("_target"),
    ).withColumn("_op", operator_key())
    same_key = Window.partitionBy("_op")
    return names.select(
        F.when(F.count(F.lit(1)).over(same_key) == 1, F.col("_op"))
        .otherwise(F.raise_error(F.concat(F.lit("operator key collision: job "), F.col("job"),
                                          F.lit(" operator "), F.col("operator"))))
        .cast("long").alias("_op"),
        "job", "operator", (F.col("_lag") == 1).alias("_lag"),
        ((F.col("_lag") == 1) | ((F.col("_job_edges") == 1) & (F.col("_target") == 0)))
        .alias("is_source"))


def operator_names(raw: DataFrame) -> DataFrame:
    """The distinct operators of the raw rows: ``_op`` (= ``operator_key``), job, operator and
    ``_lag`` (whether the operator reports ``source_lag``); see ``_operators``."""
    return _operators(raw).drop("is_source")


def _instance_aggregates(raw: DataFrame, window_s: float) -> DataFrame:
    """``instance_windows`` keyed on (window_start, ``_op`` = ``operator_key``, instance).

    Two steps: per (instance, raw row timestamp ``ts``: one native window of the engine's), then
    per output window. The native step is what lets the service time pair busy_ms with the
    processed count *within* an output window: ``_busy_in`` / ``_in_paired`` (and ``_busy_out`` /
    ``_out_paired``, for sources counting their output) sum them over the native windows in
    which the instance reports both, so one native window's busy_ms quarantined while its
    records_in is kept drops that window's tuples too instead of lowering the ratio (an output
    window of six 10 s windows with one busy_ms row missing read 5.0 ms as 4.17 ms). Counts and
    times are sums either way; gauges are means over the raw rows (sum / count)."""
    m, v = F.col("metric"), F.col("value")
    out = F.col("target")

    def total(name: str, alias: str | None = None):
        return F.sum(F.when(m == name, v)).alias(alias or name)

    def count(name: str):
        return F.count(F.when(m == name, v)).alias(f"_n_{name}")

    gauges = ("queue_len", *LATENCIES)
    native = (
        with_window_start(raw, window_s)
        .groupBy("window_start", operator_key().alias("_op"), "instance", "ts")
        .agg(
            total("records_in"),
            F.sum(F.when((m == "records_out") & out.isNull(), v)).alias("_out_plain"),
            F.sum(F.when((m == "records_out") & out.isNotNull(), v)).alias("_out_edges"),
            total("busy_ms"), total("backpressured_ms"), total("idle_ms"),
            F.sum(F.when(m == "busy_ms", F.col("window_s"))).alias("busy_covered_s"),
            F.sum(F.when(m == "backpressured_ms", F.col("window_s"))).alias("bp_covered_s"),
            *[total(name, f"_sum_{name}") for name in gauges], *[count(name) for name in gauges],
            F.max(F.when(m == "source_lag", v)).alias("source_lag"),
            F.max(F.when(m == "parallelism", v)).alias("parallelism"),
        )
    )
    busy, rin = F.col("busy_ms"), F.col("records_in")
    rout = F.coalesce(F.col("_out_plain"), F.col("_out_edges"))
    both_in = busy.isNotNull() & rin.isNotNull()
    both_out = busy.isNotNull() & rout.isNotNull()
    mean = lambda name: _safe_div(F.sum(f"_sum_{name}"), F.sum(f"_n_{name}")).alias(name)  # noqa: E731
    # Partitioned by (window_start, _op): this aggregation and the per-operator one after it
    # (``_operator_stats``) then need no shuffle of their own (a hash partitioning on a subset of
    # the grouping keys satisfies both), so the two steps cost one exchange more than one step
    # would only where the raw rows' exchange was: on the (small) native aggregate.
    return (
        native.repartition("window_start", "_op").groupBy("window_start", "_op", "instance")
        .agg(
            F.sum("records_in").alias("records_in"),
            F.coalesce(F.sum("_out_plain"), F.sum("_out_edges")).alias("records_out"),
            F.sum("busy_ms").alias("busy_ms"), F.sum("backpressured_ms").alias("backpressured_ms"),
            F.sum("idle_ms").alias("idle_ms"),
            F.sum("busy_covered_s").alias("busy_covered_s"), F.sum("bp_covered_s").alias("bp_covered_s"),
            mean("queue_len"),
            F.max_by(F.col("source_lag"), F.when(F.col("source_lag").isNotNull(), F.col("ts"))).alias("source_lag"),
            *[mean(name) for name in LATENCIES],
            F.max("parallelism").alias("parallelism"),
            F.sum(F.when(both_in, busy)).alias("_busy_in"),
            F.sum(F.when(both_in, rin)).alias("_in_paired"),
            F.sum(F.when(both_out, busy)).alias("_busy_out"),
            F.sum(F.when(both_out, rout)).alias("_out_paired"),
        )
        .withColumn("window_s", F.lit(float(window_s)))
    )


def instance_windows(raw: DataFrame, window_s: float) -> DataFrame:
    """Raw rows -> one row per (window_start, job, operator, instance), metrics as columns."""
    iw = _instance_aggregates(raw, window_s)
    return (iw.join(F.broadcast(operator_names(raw).drop("_lag")), ["_op"])
            .select("window_start", "job", "operator", *[c for c in iw.columns
                                                          if c != "window_start" and not c.startswith("_")]))


def edge_tuples(raw: DataFrame, window_s: float) -> DataFrame:
    """Tuples sent per (window_start, job, source_op, target_op) (records_out rows with a target)."""
    return (
        with_window_start(raw.where((F.col("metric") == "records_out") & F.col("target").isNotNull()),
                          window_s)
        .groupBy("window_start", "job", F.col("operator").alias("source_op"),
                 F.col("target").alias("target_op"))
        .agg(F.sum("value").alias("tuples"))
    )


def _safe_div(num, den):
    return F.when(den > 0, num / den)


def _paired_sums():
    """The service time's numerator and denominator over the same data: busy_ms and records_in
    (``_busy_in``, ``_in_paired``) or records_out (``_busy_out``, ``_out_paired``: sources that
    count their output) summed over the instances' native windows that report both
    (``_instance_aggregates``)."""
    return tuple(F.sum(name).alias(name) for name in ("_busy_in", "_in_paired", "_busy_out", "_out_paired"))


def _operator_stats(iw: DataFrame, flags: DataFrame, window_s: float) -> DataFrame:
    """Per operator-window aggregates (``iw``: ``_instance_aggregates``, keyed on ``_op``; the
    names and the source flag joined back from the small ``flags`` after aggregating) and the
    processed count."""
    fraction = lambda ms, covered: _safe_div(F.col(ms), F.col(covered) * 1000.0)  # noqa: E731
    ops = iw.groupBy("window_start", "_op").agg(
        F.count(F.lit(1)).alias("instances"),
        F.max("parallelism").alias("parallelism_gauge"),
        F.sum("records_in").alias("records_in"), F.max("records_in").alias("max_in"),
        F.sum("records_out").alias("records_out"), F.max("records_out").alias("max_out"),
        # service time: only instances reporting both busy_ms and the processed count
        *_paired_sums(),
        F.avg(fraction("busy_ms", "busy_covered_s")).alias("busy_fraction_mean"),
        F.max(fraction("busy_ms", "busy_covered_s")).alias("busy_fraction_max"),
        F.avg(fraction("backpressured_ms", "bp_covered_s")).alias("backpressure_fraction"),
        F.avg("queue_len").alias("queue_len_mean"),
        F.sum("source_lag").alias("source_lag"),
        *[F.avg(name).alias(name) for name in LATENCIES],
    ).join(F.broadcast(flags), ["_op"]).drop("_op").withColumn("window_s", F.lit(float(window_s)))
    from_out = F.col("is_source") & (F.col("records_in").isNull() | (F.col("records_in") == 0))
    return (
        ops.withColumn("processed", F.when(from_out, F.col("records_out")).otherwise(F.col("records_in")))
        .withColumn("max_instance_share",
                    F.when(from_out, _safe_div(F.col("max_out"), F.col("records_out")))
                    .otherwise(_safe_div(F.col("max_in"), F.col("records_in"))))
        .withColumn("processed_rate", F.col("processed") / F.col("window_s"))
        .withColumn("service_time_ms", _safe_div(
            F.when(from_out, F.col("_busy_out")).otherwise(F.col("_busy_in")),
            F.when(from_out, F.col("_out_paired")).otherwise(F.col("_in_paired"))))
        .withColumn("parallelism", F.coalesce(F.col("parallelism_gauge").cast("long"),
                                              F.col("instances").cast("long")))
    )


def summarize(raw: DataFrame, window_s: float, persist: bool = False,
              links: DataFrame | None = None) -> Summary:
    """Raw rows (the normalized schema) -> the three tables, windowed to ``window_s`` seconds.

    ``links``: the ``operator_links`` of the whole history when ``raw`` is only the part of it
    being recomputed (incremental summarize), so that source flags are the whole job's.
    ``persist=True`` materializes the (small) edge and operator aggregates once (two Spark
    actions here), so that the three tables do not each re-aggregate the raw rows; the caller
    unpersists (``spark.catalog.clearCache()``).
    """
    iw = _instance_aggregates(raw, window_s)
    edges = edge_tuples(raw, window_s)
    if persist:
        from pyspark import StorageLevel

        edges = edges.persist(StorageLevel.MEMORY_AND_DISK)
        edges.count()
    ops = _operator_stats(iw, _operators(raw, links).select("_op", "job", "operator", "is_source"),
                          window_s)

    # lag growth over every operator's windows (one sort of the small operator aggregate); only
    # sources' is used: source_rates and the sources' arrival rate in operator_windows
    order = Window.partitionBy("job", "operator").orderBy("window_start")
    width_us = int(round(window_s * 1_000_000))
    consecutive = (F.unix_micros(F.col("window_start"))
                   - F.unix_micros(F.lag("window_start").over(order))) == width_us
    previous = F.lag("source_lag").over(order)
    growth = F.when(F.col("is_source") & consecutive & F.col("source_lag").isNotNull()
                    & previous.isNotNull(), (F.col("source_lag") - previous) / F.lit(float(window_s)))
    ops = ops.withColumn("lag_growth_rate", growth).withColumn(
        "_ext_rate", F.greatest(F.lit(0.0), F.col("processed_rate")
                                + F.coalesce(F.col("lag_growth_rate"), F.lit(0.0))))
    if persist:
        ops = ops.persist(StorageLevel.MEMORY_AND_DISK)
        ops.count()

    edge_windows = (
        edges.join(ops.select("window_start", "job", F.col("operator").alias("source_op"),
                              "processed"), ["window_start", "job", "source_op"], "left")
        .select("window_start", F.lit(float(window_s)).alias("window_s"), "job", "source_op",
                "target_op", (F.col("tuples") / F.lit(float(window_s))).alias("rate"),
                _safe_div(F.col("tuples"), F.col("processed")).alias("selectivity"))
    )

    source_rates = (
        ops.where(F.col("is_source"))
        .select("window_start", "window_s", "job", "operator", "processed_rate", "source_lag",
                "lag_growth_rate", F.col("_ext_rate").alias("arrival_rate"))
    )

    # the sum of the incoming edges' rates (tuples / W per edge, as in edge_windows.rate)
    incoming = edges.groupBy("window_start", "job", F.col("target_op").alias("operator")) \
        .agg(F.sum(F.col("tuples") / F.lit(float(window_s))).alias("_in_rate"))
    ow = (
        ops.join(incoming, ["window_start", "job", "operator"], "left")
        .withColumn("arrival_basis", F.when(F.col("is_source"), F.lit("external"))
                    .when(F.col("_in_rate").isNotNull(), F.lit("edges")).otherwise(F.lit("processed")))
        .withColumn("arrival_rate", F.when(F.col("is_source"), F.col("_ext_rate"))
                    .when(F.col("_in_rate").isNotNull(), F.col("_in_rate"))
                    .otherwise(F.col("processed_rate")))
        .select("window_start", "window_s", "job", "operator", "is_source", "parallelism",
                "arrival_rate", "processed_rate", "busy_fraction_mean", "busy_fraction_max",
                "service_time_ms", "backpressure_fraction", "queue_len_mean",
                "max_instance_share", *LATENCIES, "arrival_basis")
    )
    return Summary(ow, edge_windows, source_rates)
