"""Per-window operator statistics from a ``MetricsBatch`` (the live path of the control loop).

Pure functions over the normalized raw rows (``scheduler.interfaces.RAW_COLUMNS``, units in
``docs/history.md``): no clock, no I/O. The bulk history uses the Spark pipeline in ``history``;
the loop sees a few windows at a time and computes the same quantities with pandas.

Units: rates in tuples/s, times in ms, fractions of the window in [0, 1], window lengths in s.

Validation is strict, because the loop must never act on partial or malformed metrics: a batch
whose rows are not 8-field tuples, name unknown metrics, carry negative or non-finite values, or
leave an operator or instance of the configuration in force without ``records_in``/``busy_ms`` in
some window raises ``MalformedMetrics`` (a ``MetricsUnavailable``: the read counts as failed). A
source instance may lack ``busy_ms`` (a source task without a clock, e.g. Flink SQL's datagen): it
counts busy 0 and has no service time.

Hosts: rows with the optional ``host`` field give every ``InstanceWindow`` its ``host`` (None
without it, e.g. Flink's REST source). A batch that is partial because whole instances sent no
rows (a lost host: a dead TaskManager reports nothing) still raises; ``vanished_instances``
names them, so the loop can diagnose the host instead of only failing the read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from scheduler.interfaces import RAW_COLUMNS, ROW_COLUMNS, MetricsBatch, MetricsUnavailable

METRICS = frozenset({
    "records_in", "records_out", "busy_ms", "backpressured_ms", "idle_ms", "queue_len",
    "source_lag", "latency_ms_mean", "latency_ms_p50", "latency_ms_p95", "latency_ms_p99",
    "parallelism",
})
_REQUIRED = ("records_in", "busy_ms")
_CONTIGUOUS_S = 1e-3
"""Windows this close (s) follow each other (timestamps are read to the microsecond)."""


class MalformedMetrics(MetricsUnavailable):
    """A batch that cannot be trusted: bad rows, unknown metrics, missing operators or instances."""


@dataclass(frozen=True)
class InstanceWindow:
    """One instance in one window."""

    instance: int
    processed_rate: float
    """Tuples/s the instance processed."""
    busy_fraction: float
    backpressure_fraction: float
    idle_fraction: float
    queue_len: float | None
    """Mean input queue length (items); None when not reported (sources)."""
    service_time_ms: float | None
    """Busy ms per processed tuple (DS2's useful time); None when it processed nothing."""
    host: str | None = None
    """Where the instance ran in the window (the rows' optional ``host``); None when not reported."""

    @property
    def accounted_fraction(self) -> float:
        """Busy + back-pressured + idle: below 1 while the instance was restarting."""
        return self.busy_fraction + self.backpressure_fraction + self.idle_fraction


@dataclass(frozen=True)
class OperatorWindow:
    """One operator in one window (the live counterpart of a row of ``operator_windows``)."""

    operator: str
    parallelism: int
    is_source: bool
    processed_rate: float
    """Tuples/s processed by all instances."""
    arrival_rate: float
    """Tuples/s offered: sources = processed + growth of the external backlog; others = tuples
    sent to it by upstream operators."""
    busy_mean: float
    busy_max: float
    backpressure_max: float
    """Back-pressured fraction of the window, overlap-aware: the most back-pressured instance
    (a lower bound on the union of the instances' back-pressured intervals; never a sum)."""
    backpressure_mean: float
    queue_len_total: float | None
    source_lag: float
    """Sources: external backlog (tuples) at the window end; 0 otherwise."""
    output_rates: Mapping[str, float]
    """Tuples/s emitted to each downstream operator."""
    instances: tuple[InstanceWindow, ...]
    restarting: bool = False
    """Some instance's accounted time was short: it was paused (restarting) in this window."""

    @property
    def service_time_ms(self) -> float | None:
        """Mean busy ms per processed tuple over the operator; None when nothing was processed or
        no instance reported busy time (a source without a clock)."""
        if self.instances and all(i.service_time_ms is None for i in self.instances) and \
                any(i.processed_rate > 0 for i in self.instances):
            return None
        busy_ms = sum(i.busy_fraction for i in self.instances)
        n = sum(i.processed_rate for i in self.instances)
        return busy_ms * 1000.0 / n if n > 0 else None

    @property
    def true_rate_per_instance(self) -> float:
        """Tuples one instance processes per second of busy time (DS2's true processing rate)."""
        st = self.service_time_ms
        return 1000.0 / st if st else math.inf

    @property
    def max_instance_share(self) -> float | None:
        """Share of the operator's tuples processed by its busiest instance."""
        total = sum(i.processed_rate for i in self.instances)
        return max(i.processed_rate for i in self.instances) / total if total > 0 else None


@dataclass(frozen=True)
class JobWindow:
    """Every operator of the job in one metric window."""

    start_s: float
    """Window start, epoch seconds."""
    window_s: float
    job: str
    config: Mapping[str, int]
    """Parallelism in force during the window (its ``parallelism`` rows, else the batch's)."""
    operators: Mapping[str, OperatorWindow]
    latency_ms: Mapping[str, float] = field(default_factory=dict)
    """End-to-end latency at the sinks: {'mean', 'p50', 'p95', 'p99'} (those measured)."""

    @property
    def end_s(self) -> float:
        return self.start_s + self.window_s

    @property
    def sources(self) -> tuple[OperatorWindow, ...]:
        return tuple(o for o in self.operators.values() if o.is_source)

    @property
    def input_rate(self) -> float:
        """Tuples/s the job accepted at its sources."""
        return sum(o.processed_rate for o in self.sources)

    @property
    def offered_rate(self) -> float:
        """Tuples/s arriving from outside (accepted + growth of the external backlog)."""
        return sum(o.arrival_rate for o in self.sources)

    @property
    def backlog(self) -> float:
        return sum(o.source_lag for o in self.sources)

    @property
    def restarting(self) -> bool:
        return any(o.restarting for o in self.operators.values())


def _ts_seconds(col: pd.Series) -> np.ndarray:
    ts = pd.to_datetime(col, utc=True, errors="coerce")
    if ts.isna().any():
        bad = col[ts.isna()].iloc[0]
        raise MalformedMetrics("unreadable window timestamp", field="ts", value=str(bad))
    return (ts.astype("int64") // 1000).to_numpy(dtype=np.int64) / 1e6


def batch_frame(batch: MetricsBatch) -> pd.DataFrame:
    """The batch's rows as a validated frame with a numeric ``start_s`` column."""
    if not isinstance(batch, MetricsBatch):
        raise MalformedMetrics("not a MetricsBatch", value=type(batch).__name__)
    for k, row in enumerate(batch.rows):
        if not isinstance(row, (tuple, list)) or len(row) not in (len(RAW_COLUMNS), len(ROW_COLUMNS)):
            raise MalformedMetrics(f"row is not a {len(RAW_COLUMNS)}- or {len(ROW_COLUMNS)}-field tuple",
                                   field=f"rows[{k}]", value=repr(row)[:80])
    pad = (None,) * (len(ROW_COLUMNS) - len(RAW_COLUMNS))
    df = pd.DataFrame([tuple(r) if len(r) == len(ROW_COLUMNS) else tuple(r) + pad for r in batch.rows],
                      columns=list(ROW_COLUMNS))
    if df.empty:
        raise MalformedMetrics("the batch has no rows", field="rows")
    unknown = sorted(set(df["metric"].astype(str)) - METRICS)
    if unknown:
        raise MalformedMetrics("unknown metric", field="metric", value=unknown[0])
    value = pd.to_numeric(df["value"], errors="coerce")
    bad = ~np.isfinite(value.to_numpy(dtype=float)) | (value.to_numpy(dtype=float) < 0)
    if bad.any():
        raise MalformedMetrics("metric value must be a finite number >= 0", field="value",
                               value=df["value"][bad].iloc[0])
    window = pd.to_numeric(df["window_s"], errors="coerce").to_numpy(dtype=float)
    if not (np.isfinite(window) & (window > 0)).all():
        raise MalformedMetrics("window_s must be > 0", field="window_s",
                               value=df["window_s"][~(window > 0)].iloc[0])
    inst = pd.to_numeric(df["instance"], errors="coerce").to_numpy(dtype=float)
    if not (np.isfinite(inst) & (inst >= 0) & (inst == np.round(inst))).all():
        raise MalformedMetrics("instance must be an integer >= 0", field="instance",
                               value=df["instance"][~(inst >= 0)].iloc[0] if (~(inst >= 0)).any() else None)
    df["value"] = value.astype(float)
    df["window_s"] = window
    df["instance"] = inst.astype(int)
    df["operator"] = df["operator"].astype(str)
    df["start_s"] = _ts_seconds(df["ts"])
    return df


def job_windows(batch: MetricsBatch, sources: Sequence[str] | None = None,
                lag_before: Mapping[str, float] | None = None,
                lag_before_s: float | None = None) -> tuple[JobWindow, ...]:
    """Every complete window of ``batch`` as a ``JobWindow``, oldest first.

    ``sources``: the job's source operators (default: operators that report ``source_lag`` or
    receive no ``records_out``). A source's arrival rate is what it processed plus the growth
    of its backlog since the window before; ``lag_before``: each source's backlog at the end of
    the window before the batch's first one, measured at ``lag_before_s`` (s; None: right
    before the first window). A window with no backlog measured right before it (the batch's
    first without ``lag_before``, or one after a gap: ``lag_before_s`` or the previous window
    ending elsewhere than where it starts) counts no backlog growth: a backlog it already
    carries is not taken for its arrivals, nor is growth over a longer stretch divided by its
    length. Raises ``MalformedMetrics`` (see the module docstring).
    """
    df = batch_frame(batch)
    config = {str(k): int(v) for k, v in batch.config.items()}
    ops_seen = set(df["operator"])
    missing = sorted(set(config) - ops_seen)
    if missing:
        raise MalformedMetrics("operator in the configuration has no metrics", field="operator",
                               value=missing[0])
    targets = set(df.loc[df["metric"] == "records_out", "target"].dropna().astype(str))
    if sources is None:
        lagged = set(df.loc[df["metric"] == "source_lag", "operator"])
        sources = sorted(lagged | (ops_seen - targets))
    sources = set(sources)
    lag_prev = dict(lag_before or {})
    prev_end_s = lag_before_s
    out = []
    for start, g in df.groupby("start_s", sort=True):
        w = float(g["window_s"].iloc[0])
        if prev_end_s is not None and abs(float(start) - prev_end_s) > _CONTIGUOUS_S:
            lag_prev = {}  # a gap: the backlog right before this window is unknown
        prev_end_s = float(start) + w
        job = str(g["job"].iloc[0])
        piv = g.groupby(["operator", "metric", "instance"])["value"].sum()
        hosted = g.dropna(subset=["host"])
        where = ({(str(o), int(i)): str(h) for o, i, h in
                  hosted.drop_duplicates(["operator", "instance"], keep="last")[["operator", "instance", "host"]]
                  .itertuples(index=False)} if len(hosted) else {})
        operators: dict[str, OperatorWindow] = {}
        inflow: dict[str, float] = {}
        out_rows = g[g["metric"] == "records_out"]
        for (op, tgt), v in out_rows.dropna(subset=["target"]).groupby(["operator", "target"])["value"]:
            inflow[str(tgt)] = inflow.get(str(tgt), 0.0) + float(v.sum()) / w
        declared = g[(g["metric"] == "parallelism")].groupby("operator")["value"].max()
        wconfig = {op: int(declared[op]) if op in declared.index else p for op, p in config.items()}
        for op in sorted(set(g["operator"])):
            p = wconfig.get(op)
            if p is None:
                raise MalformedMetrics("operator not in the configuration in force", field="operator",
                                       value=op)

            def metric(name: str) -> pd.Series:
                try:
                    return piv.loc[(op, name)]
                except KeyError:
                    return pd.Series(dtype=float)

            # A source task may have no clock (the SQL datagen source: Flink answers busy time NaN,
            # so ``FlinkMetricsSource`` writes no time rows for it): its records are required, its
            # busy time is not; it counts busy 0 and no service time (sources need none).
            for name in _REQUIRED if op not in sources else ("records_in",):
                have = set(int(i) for i in metric(name).index)
                if not set(range(p)) <= have:
                    lacking = min(set(range(p)) - have)
                    raise MalformedMetrics(f"window lacks {name} of an instance (partial batch)",
                                           field=f"{op}[{lacking}].{name}", value=float(start))
            rin, busy = metric("records_in"), metric("busy_ms")
            bp, idle, q = metric("backpressured_ms"), metric("idle_ms"), metric("queue_len")
            insts = []
            for i in range(p):
                n = float(rin.get(i, 0.0))
                b = float(busy.get(i, 0.0))
                insts.append(InstanceWindow(
                    instance=i, processed_rate=n / w, busy_fraction=min(b / (1000.0 * w), 1.0),
                    backpressure_fraction=min(float(bp.get(i, 0.0)) / (1000.0 * w), 1.0),
                    idle_fraction=min(float(idle.get(i, 0.0)) / (1000.0 * w), 1.0),
                    queue_len=float(q[i]) if i in q.index else None,
                    service_time_ms=b / n if n > 0 and i in busy.index else None,
                    host=where.get((op, i))))
            has_idle = len(idle) > 0
            restarting = has_idle and any(x.accounted_fraction < 0.95 for x in insts)
            lag = float(metric("source_lag").sum())
            processed = sum(x.processed_rate for x in insts)
            is_source = op in sources
            if is_source:
                arrival = processed + (lag - lag_prev.get(op, lag)) / w
                lag_prev[op] = lag
            else:
                arrival = inflow.get(op, 0.0)
            outs = out_rows[(out_rows["operator"] == op)].dropna(subset=["target"])
            output_rates = {str(t): float(v.sum()) / w for t, v in outs.groupby("target")["value"]}
            qlens = [x.queue_len for x in insts if x.queue_len is not None]
            operators[op] = OperatorWindow(
                operator=op, parallelism=p, is_source=is_source, processed_rate=processed,
                arrival_rate=max(arrival, 0.0),
                busy_mean=float(np.mean([x.busy_fraction for x in insts])),
                busy_max=max(x.busy_fraction for x in insts),
                backpressure_max=max(x.backpressure_fraction for x in insts),
                backpressure_mean=float(np.mean([x.backpressure_fraction for x in insts])),
                queue_len_total=float(sum(qlens)) if qlens else None,
                source_lag=lag if is_source else 0.0,
                output_rates=output_rates, instances=tuple(insts), restarting=restarting)
        missing = sorted(set(wconfig) - set(operators))
        if missing:
            raise MalformedMetrics("window lacks an operator (partial batch)", field="operator",
                                   value=missing[0])
        latency = {}
        for stat in ("mean", "p50", "p95", "p99"):
            vals = g.loc[g["metric"] == f"latency_ms_{stat}", "value"]
            if len(vals):
                latency[stat] = float(vals.mean())
        out.append(JobWindow(start_s=float(start), window_s=w, job=job, config=dict(wconfig),
                             operators=operators, latency_ms=latency))
    return tuple(out)


def vanished_instances(batch: MetricsBatch, config: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """``(operator, instance)`` of every instance of ``config`` (the parallelism in force) that
    sent no row at all in the batch's newest window, sorted; empty when all reported or the
    batch cannot be read. An instance that vanished whole is not a late metric but a dead task:
    a lost host (``scheduler.reactive.diagnose_hosts``). An operator with a ``parallelism`` row
    in that window is judged at that parallelism."""
    try:
        df = batch_frame(batch)
    except MalformedMetrics:
        return ()
    last = df[df["start_s"] == df["start_s"].max()]
    declared = last[last["metric"] == "parallelism"].groupby("operator")["value"].max()
    seen = set(zip(last.loc[last["metric"] != "parallelism", "operator"],
                   last.loc[last["metric"] != "parallelism", "instance"].astype(int)))
    out = []
    for op, p in config.items():
        p = int(declared[op]) if op in declared.index else int(p)
        out += [(str(op), i) for i in range(p) if (str(op), i) not in seen]
    return tuple(sorted(out))


def history_frames(windows: Sequence[JobWindow]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(operator_windows, edge_windows)`` frames (``history.schema`` columns) of live windows,
    for ``modeler.calibrate.Calibrator``. Windows with a restart are left out."""
    op_rows, edge_rows = [], []
    for jw in windows:
        if jw.restarting:
            continue
        ts = pd.Timestamp(jw.start_s, unit="s", tz="UTC")
        for name, o in jw.operators.items():
            st = o.service_time_ms
            op_rows.append({
                "window_start": ts, "window_s": jw.window_s, "job": jw.job, "operator": name,
                "is_source": o.is_source, "parallelism": o.parallelism, "arrival_rate": o.arrival_rate,
                "processed_rate": o.processed_rate, "busy_fraction_mean": o.busy_mean,
                "busy_fraction_max": o.busy_max,
                "service_time_ms": st if st is not None else float("nan"),
                "backpressure_fraction": o.backpressure_max,
                "queue_len_mean": (o.queue_len_total / o.parallelism
                                   if o.queue_len_total is not None else float("nan")),
                "max_instance_share": o.max_instance_share if o.max_instance_share is not None
                else float("nan"),
                **{f"latency_ms_{k}": float(jw.latency_ms.get(k, float("nan")))
                   if not jw.operators[name].output_rates else float("nan")
                   for k in ("mean", "p50", "p95", "p99")},
                "arrival_basis": "lag" if o.is_source else "edges",
            })
            for tgt, rate in o.output_rates.items():
                edge_rows.append({
                    "window_start": ts, "window_s": jw.window_s, "job": jw.job, "source_op": name,
                    "target_op": tgt, "rate": rate,
                    "selectivity": rate / o.processed_rate if o.processed_rate > 0 else float("nan"),
                })
    ops = pd.DataFrame(op_rows)
    edges = pd.DataFrame(edge_rows, columns=["window_start", "window_s", "job", "source_op", "target_op",
                                             "rate", "selectivity"])
    return ops, edges
