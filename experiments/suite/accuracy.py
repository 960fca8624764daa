"""``accuracy``: out-of-sample prediction error of augury's model beside Caladrius and DRS.

For every example model (the testbed's ground truth):

1. **Calibrate** from history recorded on the testbed at two configurations (the example's
   own and one with more instances), at 35/60/85 % bottleneck utilization, through the real
   pipeline: normalized rows -> ``augury ingest`` -> Spark summarize -> ``modeler.calibrate``
   (topology file = the example without its profile, with the testbed's queue capacity as its
   ``buffer_tuples``: the engine configuration a user would give; ``engine_buffer``).
2. **Measure** on the testbed, at configurations drawn at random (seeded) that the calibration
   never saw: the max sustainable rate (drive at 1.6x capacity, measure what the sources push
   once the queues upstream of the bottleneck are full: the warm-up is extended by the time
   they take to fill, ``max_rate_warmup_s``; with the plain 10 s warm-up the sources' rate still
   included the filling, +4.9 % on a pipeline configuration with 11,000 queue slots upstream;
   a job with several sources is fed by one generator that keeps their rate shares,
   ``experiments.recording.mix_coupled``: independently back-pressured sources summed to 3-16 %
   above or below the rate the job sustains at its mix on random-2, which put its loads at up to
   ~0.98 where the table said 0.85), then at loads of 10-95 % of that measured rate the throughput and the mean and p99
   end-to-end latency of every tuple reaching a sink (after a warm-up); and the throughput at
   1.3x the measured max rate (overload, where capping matters).

   **How long.** Near saturation a queue relaxes slowly (relaxation time ~ 4 E[S] / (1 - rho)^2
   for M/M/1), so a fixed-length measurement of a mean waiting time gets noisier, and a fixed
   warm-up from an empty start biases it lower, the closer the load is to 1. Each load point is
   therefore warmed up and measured ``duration_factor(load) = min(cap, max(1, (0.5 / (1 -
   load))^2))`` times the plan's base (full run: 10 s + 60 s; x2.8 at 0.7, x11.1 at 0.85, x25 at
   0.95 where the rule would ask x100: the cap bounds the full run, 16 min wall / 10.5 min of CPU
   on a shared 2-core machine (it was ~3.5 min), and leaves the 0.95 points ~2x noisier than the
   others). Before this, every
   point was 10 s + 60 s: at 0.95 on random-1 the 60 s measurement alone differed from 3 x
   1,200 s runs at the same rate by 13 % (mean latency) and 25 % (p99) in median, more than the
   model with the true profile did (3.3 %, 4.8 %; ``experiments/saturation_diag.py``). The max
   rate, which places every load point, is measured over 600 s (it was 60 s: 0.7-0.8 % median,
   up to 4 %, from a 1,200 s measurement; at 0.95 a 1 % error in it moves the latency ~20 %).
   Every measured point carries its batch-means standard error (``measured_se``, ``batch_se``:
   10 contiguous batches of the sink tuples or metric windows), and ``errors_by_band`` the median
   relative one per band (``measured_rel_se``): what the ground truth's own noise is.
3. **Predict** the same quantities (each model, and the true profile, against the same
   measurement of each point) with augury's calibrated model (``modeler.queueing.predict``)
   and with re-implementations of Caladrius and DRS (``experiments.peer_models``) fed the same
   calibrated profile.

The full run covers the bundled examples and ``RANDOM_DAGS`` seeded random jobs
(``experiments.randomdag``: fan-out, fan-in, key skew, contention). Besides the calibrated
model, every point is also predicted by the model with the **true** profile (``pred_true``:
the example's own file): the difference separates the queueing approximation's error from
calibration's.

Errors are absolute relative errors ``|predicted - measured| / measured``. A model that gives no
latency (it predicts saturation) at a load the testbed sustains is counted in ``undefined`` and
left out of the error statistics. Peers predict no p99. ``errors_by_band`` gives, per quantity,
example (and ``all``) and load band, the median error with its percentile-bootstrap 95 % CI
(``experiments.bootstrap``; n = configurations per band, so the intervals are wide), the signed
median and the same for the true profile. Units: tuples/s, ms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from experiments.harness import ExperimentContext, ExperimentResult

NAME = "accuracy"
DESCRIPTION = ("prediction error (throughput, max rate, mean/p99 latency) on unseen configurations, "
               "augury vs Caladrius vs DRS, on every example")
MODELS = ("augury", "caladrius", "drs")
QUANTITIES = ("throughput", "max_rate", "latency_mean", "latency_p99", "throughput_overload")
HEADLINE = ("median_err.throughput.augury", "median_err.max_rate.augury",
            "median_err.latency_mean.augury", "median_err.latency_p99.augury",
            "median_err.max_rate.caladrius", "median_err.latency_mean.caladrius",
            "median_err.latency_mean.drs")
GOALS = {"throughput": 0.05, "max_rate": 0.05, "latency_mean": 0.15}
"""Issue 8 goals: median absolute relative error on unseen configurations, augury's model."""


@dataclass(frozen=True)
class Plan:
    """How much the run measures (seconds are simulated seconds)."""

    examples: tuple[str, ...]
    unseen_configs: int
    """Configurations per example the calibration never saw."""
    loads: tuple[float, ...]
    """Input rates as fractions of the measured max sustainable rate."""
    overload: float = 1.3
    record_s: float = 30.0
    """Length of each calibration recording (3 loads x 2 configurations per example)."""
    measure_s: float = 60.0
    """Measured length of a load point at or below ``REFERENCE_LOAD``; longer above it
    (``point_seconds``)."""
    warmup_s: float = 10.0
    """Warm-up of a load point at or below ``REFERENCE_LOAD``; longer above it (``point_seconds``)."""
    max_rate_s: float = 30.0
    saturation_cap: float = 1.0
    """Largest ``duration_factor``: how much longer than at ``REFERENCE_LOAD`` a point near
    saturation may be warmed up and measured (keeps the run's length bounded)."""

    def point_seconds(self, load: float) -> tuple[float, float]:
        """(warm-up, measured) simulated seconds of the load point at ``load`` (a fraction of the
        measured max rate): ``warmup_s`` and ``measure_s`` times ``duration_factor``; a lengthened
        one rounded up to whole metric windows (``measure`` counts the latencies and throughput of
        complete windows: a warm-up ending mid-window would leave part of it in the measurement)."""
        from experiments.testbed import TestbedConfig

        f = duration_factor(load, self.saturation_cap)
        if f == 1.0:
            return self.warmup_s, self.measure_s
        window = TestbedConfig().window_s
        return tuple(math.ceil(base * f / window - 1e-9) * window for base in (self.warmup_s, self.measure_s))


REFERENCE_LOAD = 0.5
"""Load at and below which a point gets the plan's base warm-up and measured length."""


def duration_factor(load: float, cap: float) -> float:
    """How many times the base warm-up and measurement a load point at ``load`` gets:
    ``min(cap, max(1, ((1 - REFERENCE_LOAD) / (1 - load))**2))``, and 1 at or above capacity
    (``load >= 1``: only the throughput is measured there, which converges like the max rate).

    Why: near saturation the queue's relaxation time grows like ``E[S] / (1 - sqrt(rho))**2 ~
    4 E[S] / (1 - rho)**2`` (M/M/1; Abate and Whitt 1987), and with it both the sampling error of a
    time-averaged waiting time (for M/M/1 the relative variance of the mean queue length over a
    run of length T is ~``2 (1 + rho) / (rho mu T (1 - rho)**2)``: the same relative precision
    needs T ~ 1/(1 - rho)**2) and the time an empty start takes to reach steady state (a short
    warm-up biases the mean low). Scaling both by ``1/(1 - rho)**2`` relative to a load where the
    base lengths are adequate keeps the relative error roughly constant across loads up to the
    cap; above it (``rho`` > 1 - 0.5 / sqrt(cap)) the points are noisier than the rest, by
    ``sqrt(factor the rule asks / cap)``."""
    if not (math.isfinite(load) and load >= 0) or not cap >= 1:
        raise ValueError(f"need a load >= 0 and a cap >= 1, got load={load!r}, cap={cap!r}")
    if load >= 1.0:
        return 1.0
    return min(cap, max(1.0, ((1.0 - REFERENCE_LOAD) / (1.0 - load)) ** 2))


SE_BATCHES = 10
"""Contiguous batches a measurement is cut into for its batch-means standard error."""


def batch_se(values, statistic=np.mean, batches: int = SE_BATCHES) -> float:
    """Standard error of ``statistic`` over a correlated sequence (oldest first) by batch means:
    cut it into ``batches`` contiguous batches of equal size (fewer, one value each, when the
    sequence is shorter: a 60 s measurement has 6 metric windows), ``std(batch statistics,
    ddof=1) / sqrt(batches)`` (a leftover shorter than a batch at the end is left out). Valid when
    a batch is much longer than the sequence's correlation time (near saturation the queue's
    relaxation time; shorter batches underestimate the error). NaN with fewer than two values."""
    x = np.asarray(values, dtype=float)
    batches = min(batches, len(x))
    if batches < 2:
        return math.nan
    size = len(x) // batches
    stats = [float(statistic(x[b * size:(b + 1) * size])) for b in range(batches)]
    return float(np.std(stats, ddof=1) / math.sqrt(batches))


def _p99(x) -> float:
    return float(np.percentile(x, 99))


QUICK = Plan(examples=("wordcount",), unseen_configs=2, loads=(0.2, 0.6, 0.9), record_s=20.0,
             measure_s=20.0, warmup_s=5.0, max_rate_s=15.0, saturation_cap=2.0)
FULL = Plan(examples=("diamond", "pipeline", "wordcount"), unseen_configs=10,
            loads=(0.1, 0.3, 0.5, 0.7, 0.85, 0.95), record_s=30.0, measure_s=60.0, warmup_s=10.0,
            max_rate_s=600.0, saturation_cap=25.0)
# The full run: 10 unseen configurations per example (50 per load band; with 5, a band's
# bootstrap interval at 0.95 spanned 0.4-62 %). Each max rate is measured over 600 s: the load
# points are fractions of it, and at 0.95 a 1 % error in it moves the latency ~20 % (the point sits
# at 0.94 or 0.96 of the true max rate). Over 60 s it differed from a 1,200 s measurement by
# 0.7-0.8 % (median), up to 4 %, on the random DAGs (experiments/saturation_diag.py); the error
# of a mean falls like 1/sqrt(T), so 600 s leaves about a third. Load points: 60 s (10 s warm-up)
# up to 0.5, then duration_factor: 0.7 x2.8, 0.85 x11.1, 0.95 x25 (capped; the rule asks x100):
# the 0.95 points' sampling error is ~5x below the 60 s measurement's (which alone was 13 % on
# random-1's mean latency, 25 % on its p99, against 3 x 1,200 s runs), about 2x above the rest.
# Quick (CI): cap 2, so the rule runs but the test stays about as short.
# Measured (run 982ae409f64e4b1dad2cd44f2ca30538): the measurements' median relative standard
# error per band was 0.5-0.7 % (mean latency) and 1.2-2.2 % (p99) up to 0.85, 1.7 % and 3.7 % at
# 0.95 (random-2 3.1 % and 6.6 %); the true profile's median error at 0.95 fell from 7.3 % to
# 2.1 % (mean) and 13.1 % to 4.1 % (p99) over all jobs, from 12.1 % to 1.6 % (mean) on random-1.
RANDOM_DAGS = (1, 2)
"""Seeds of the random jobs (``experiments.randomdag``, default spec) the full run adds."""
_QUEUE_FILL_CAP_S = 60.0
"""Longest extension of the max-rate warm-up for filling the queues (simulated seconds)."""


# ----------------------------------------------------------------------- configurations


def topology_of(model):
    """The model without its performance profile (what a user's topology file says)."""
    from modeler.modelfile import model_to_dict, parse_model

    raw = model_to_dict(model)
    raw.pop("network_delay_ms", None)
    raw.pop("calibration", None)
    for op in raw["operators"]:
        for key in ("service_time_ms", "service_scv", "scaling"):
            op.pop(key, None)
    for e in raw["edges"]:
        e.pop("keys", None)
        e["selectivity"] = 1.0
    return parse_model(raw, source=f"{model.job} topology", require_profiles=False)


def seen_configs(model) -> list[dict[str, int]]:
    """The calibration's configurations: the example's own and one with more instances."""
    base = model.config
    more = {op.name: (op.parallelism if op.is_source else
                      min(op.max_parallelism, op.parallelism + 1 if op.parallelism <= 2
                          else math.ceil(1.5 * op.parallelism)))
            for op in model.operators}
    return [model.resolve_config(base), model.resolve_config(more)]


def unseen_configs(model, n: int, rng: np.random.Generator) -> list[dict[str, int]]:
    """``n`` distinct configurations, none a calibration configuration: every non-source
    operator's parallelism uniform in [1, max(4, 2p + 2)] (within its bounds)."""
    seen = {tuple(sorted(c.items())) for c in seen_configs(model)}
    out: list[dict[str, int]] = []
    for _ in range(1000):
        if len(out) == n:
            break
        cfg = {}
        for op in model.operators:
            if op.is_source:
                cfg[op.name] = op.parallelism
                continue
            hi = min(op.max_parallelism, max(4, 2 * op.parallelism + 2))
            cfg[op.name] = int(rng.integers(max(1, op.min_parallelism), hi + 1))
        key = tuple(sorted(cfg.items()))
        if key in seen:
            continue
        seen.add(key)
        out.append(model.resolve_config(cfg))
    return out


# ----------------------------------------------------------------------------- steps


def engine_buffer(model):
    """``model`` with the testbed's input buffer (``TestbedConfig.queue_capacity``, tuples per
    instance) as its ``buffer_tuples``: the engine configuration calibration is given, and what
    the true profile is predicted with (``modeler.queueing``'s blocking; the testbed itself
    reads its queue capacity from its own configuration)."""
    from experiments.testbed import TestbedConfig

    return replace(model, buffer_tuples=TestbedConfig().queue_capacity)


def calibrate_example(truth, plan: Plan, work: Path, spark, seed: int, label: str | None = None):
    """Record, ingest, summarize, calibrate (given the engine's buffer configuration). Returns
    (fitted model, calibration table rows)."""
    from experiments.recording import calibrate_store, ingest_and_summarize, load_plan, record, truth_errors

    runs = load_plan(truth, seen_configs(truth), utilizations=(0.35, 0.6, 0.85), seconds=plan.record_s)
    raw = record(truth, runs, seed=seed)
    store = work / f"store-{truth.job}"
    report, _ = ingest_and_summarize(raw, store, spark=spark)
    quarantined = int(sum(report.quarantined.values()))
    fitted = calibrate_store(store, truth.job, topology=engine_buffer(topology_of(truth))).model_
    label = label or truth.job
    rows = [{"example": label, "parameter": k, "relative_error": v}
            for k, v in truth_errors(truth, fitted).items()]
    rows.append({"example": label, "parameter": "quarantined_rows", "relative_error": float(quarantined)})
    return fitted, rows


def max_rate_warmup_s(truth, config: Mapping[str, int], plan: Plan, overload: float = 1.6) -> float:
    """Warm-up before measuring the max rate: ``plan.warmup_s`` plus the time the excess input
    takes to fill every queue upstream of (and at) the bottleneck (one after the other, from the
    bottleneck back), sized with the true model's visit ratios (this only sets how long to wait);
    at most ``_QUEUE_FILL_CAP_S`` more; rounded up to whole metric windows (so the measurement
    keeps its ``max_rate_s``)."""
    from experiments.recording import max_rate_setup
    from experiments.testbed import TestbedConfig
    from modeler.queueing import compile_model, predict

    truth, config = max_rate_setup(truth, config)  # the job as measure_max_rate drives it
    compiled = compile_model(truth)
    p = predict(compiled, config, 1.0)
    if p.bottleneck is None or not math.isfinite(p.max_rate):
        return plan.warmup_s
    b = compiled.index[p.bottleneck]
    capacity = TestbedConfig().queue_capacity
    excess = (overload - 1.0) * p.max_rate
    fill = 0.0
    for v in sorted(compiled.ancestors[b] | {b}):
        name = compiled.names[v]
        op = p.operators[name]
        if truth.operator(name).is_source or op.arrival_rate <= 0:
            continue
        fill += op.parallelism * capacity / (excess * op.arrival_rate)  # arrival_rate per unit input
    # whole metric windows: measure_max_rate counts only complete windows after the warm-up
    window = TestbedConfig().window_s
    return math.ceil((plan.warmup_s + min(fill, _QUEUE_FILL_CAP_S)) / window - 1e-9) * window


def measure(truth, config: Mapping[str, int], rate: float, *, warmup_s: float, measure_s: float,
            seed: int) -> dict[str, float]:
    """Throughput (source records/s after ``warmup_s``) and end-to-end latency of the sink tuples
    of the next ``measure_s``, each with its batch-means standard error (``*_se``: throughput
    over the metric windows, latency over the sink tuples in completion order)."""
    from experiments.testbed import Testbed, TestbedConfig

    cfg = TestbedConfig(seed=seed)
    bed = Testbed(truth, rate, cfg, parallelism=config)
    bed.advance(warmup_s)
    before = len(bed.latencies_ms())
    bed.advance(measure_s)
    latencies = bed.latencies_ms()[before:]
    frame = bed.frame()
    start = pd.Timestamp(cfg.start_time) + pd.Timedelta(seconds=warmup_s)
    rows = frame[(frame["ts"] >= start) & frame["operator"].isin([op.name for op in truth.sources])
                 & (frame["metric"] == "records_in")]
    per_window = rows.groupby("ts", sort=True)["value"].sum().to_numpy(float) / cfg.window_s
    throughput = float(per_window.mean()) if len(per_window) else math.nan
    if len(latencies):
        mean, p99 = float(latencies.mean()), _p99(latencies)
    else:
        mean = p99 = math.nan
    return {"throughput": throughput, "latency_mean": mean, "latency_p99": p99,
            "throughput_se": batch_se(per_window), "latency_mean_se": batch_se(latencies),
            "latency_p99_se": batch_se(latencies, _p99), "sink_tuples": float(len(latencies))}


def predictions(fitted, config: Mapping[str, int], rate: float, truth=None) -> dict[str, dict[str, float]]:
    """Each model's predictions; with ``truth``, also augury's model on the true profile
    (``true``)."""
    from experiments.peer_models import peer_predict
    from modeler.queueing import predict

    def num(x):
        return math.nan if x is None else float(x)

    def ours(model):
        a = predict(model, config, rate)
        return {"throughput": a.throughput, "max_rate": a.max_rate,
                "latency_mean": num(a.latency_ms.get("mean")), "latency_p99": num(a.latency_ms.get("p99"))}

    out = {"augury": ours(fitted)}
    if truth is not None:
        out["true"] = ours(engine_buffer(truth))
    for name in ("caladrius", "drs"):
        p = peer_predict(name, fitted, config, rate)
        out[name] = {"throughput": p.throughput, "max_rate": p.max_rate,
                     "latency_mean": num(p.latency_mean_ms), "latency_p99": math.nan}
    return out


def error_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per quantity and model: points, undefined predictions, median and p90 |relative error|."""
    rows = []
    for q in QUANTITIES:
        sub = points[points["quantity"] == q]
        if q == "max_rate":  # one measurement per configuration, repeated on every load row
            sub = sub.drop_duplicates(["example", "config"])
        for m in MODELS:
            measured = sub["measured"].to_numpy(float)
            pred = sub[f"pred_{m}"].to_numpy(float)
            ok = np.isfinite(measured) & (measured > 0)
            defined = ok & np.isfinite(pred)
            err = np.abs(pred[defined] - measured[defined]) / measured[defined]
            if m != "augury" and q == "latency_p99":
                continue  # the peers predict no tail
            rows.append({"quantity": q, "model": m, "points": int(ok.sum()),
                         "undefined": int((ok & ~np.isfinite(pred)).sum()),
                         "median_abs_rel_error": float(np.median(err)) if len(err) else math.nan,
                         "p90_abs_rel_error": float(np.percentile(err, 90)) if len(err) else math.nan})
    return pd.DataFrame(rows)


def _abs_errors(sub: pd.DataFrame, model: str) -> pd.Series:
    measured = sub["measured"].astype(float)
    return ((sub[f"pred_{model}"].astype(float) - measured).abs() / measured).where(measured > 0)


def breakdown_tables(points: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Median |relative error| per example (every quantity) and per load (latencies)."""
    by_example, by_load = [], []
    for q in QUANTITIES:
        sub = points[points["quantity"] == q]
        if q == "max_rate":
            sub = sub.drop_duplicates(["example", "config"])
        for example, g in sub.groupby("example", sort=True):
            row = {"quantity": q, "example": example, "points": len(g)}
            for m in MODELS:
                err = _abs_errors(g, m).dropna()
                row[f"median_{m}"] = float(err.median()) if len(err) else math.nan
            by_example.append(row)
    for q in ("latency_mean", "latency_p99"):
        sub = points[points["quantity"] == q]
        for load, g in sub.groupby("load", sort=True):
            row = {"quantity": q, "load": load, "points": len(g)}
            for m in MODELS:
                err = _abs_errors(g, m).dropna()
                row[f"median_{m}"] = float(err.median()) if len(err) else math.nan
            signed = ((g["pred_augury"] - g["measured"]) / g["measured"]).dropna()
            row["median_signed_augury"] = float(signed.median()) if len(signed) else math.nan
            by_load.append(row)
    return pd.DataFrame(by_example), pd.DataFrame(by_load)


BAND_QUANTITIES = ("latency_mean", "latency_p99", "throughput", "max_rate")


def band_table(points: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Per quantity, example (and ``all``) and load band: augury's median |relative error| with
    its percentile-bootstrap 95 % CI, the signed median, and the same median for the model on the
    true profile (``true_*``); with a ``measured_se`` column, the median relative standard error of
    the measurements themselves (``measured_rel_se``: the noise of the ground truth, which a
    perfect model would err by ~0.67 of in median). n = points in the band (one per
    configuration)."""
    from experiments.bootstrap import bootstrap_ci

    rows = []
    for q in BAND_QUANTITIES:
        sub = points[points["quantity"] == q]
        if sub.empty:
            continue
        for example in [*sorted(sub["example"].unique()), "all"]:
            g = sub if example == "all" else sub[sub["example"] == example]
            for load, b in g.groupby("load", sort=True):
                measured = b["measured"].astype(float)
                ok = measured > 0
                signed = ((b["pred_augury"].astype(float) - measured) / measured)[ok]
                err = signed.abs().dropna()
                lo, hi = bootstrap_ci(err, "median", seed=seed)
                row = {"quantity": q, "example": example, "load": load, "n": int(len(err)),
                       "median_abs_err": float(err.median()) if len(err) else math.nan,
                       "ci_lo": lo, "ci_hi": hi,
                       "median_signed": float(signed.dropna().median()) if len(err) else math.nan}
                if "pred_true" in b:
                    t = ((b["pred_true"].astype(float) - measured) / measured)[ok].dropna()
                    tlo, thi = bootstrap_ci(t.abs(), "median", seed=seed)
                    row.update({"true_median_abs_err": float(t.abs().median()) if len(t) else math.nan,
                                "true_ci_lo": tlo, "true_ci_hi": thi})
                if "measured_se" in b:
                    rel_se = (b["measured_se"].astype(float) / measured)[ok].dropna()
                    row["measured_rel_se"] = float(rel_se.median()) if len(rel_se) else math.nan
                rows.append(row)
    return pd.DataFrame(rows)


def plot(points: pd.DataFrame, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("max_rate", "max sustainable rate (tuples/s)"), ("latency_mean", "mean latency (ms)"),
              ("latency_p99", "p99 latency (ms)")]
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    markers = {"augury": ("o", "tab:blue"), "caladrius": ("s", "tab:orange"), "drs": ("^", "tab:green")}
    for ax, (q, label) in zip(axes, panels):
        sub = points[points["quantity"] == q]
        if q == "max_rate":
            sub = sub.drop_duplicates(["example", "config"])
        lo, hi = math.inf, 0.0
        for m, (mk, color) in markers.items():
            x, y = sub["measured"].to_numpy(float), sub[f"pred_{m}"].to_numpy(float)
            ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
            if ok.any():
                ax.scatter(x[ok], y[ok], s=14, marker=mk, color=color, alpha=0.7, label=m)
                lo, hi = min(lo, x[ok].min(), y[ok].min()), max(hi, x[ok].max(), y[ok].max())
        if hi > 0:
            ax.plot([lo, hi], [lo, hi], color="grey", lw=1, ls="--")
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel("predicted")
        ax.legend(fontsize=8)
    fig.suptitle("accuracy on unseen configurations (testbed = truth)")
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------- run


def truths(ctx: ExperimentContext, plan: Plan) -> list[tuple[str, object]]:
    """(label, true model) of every job the run measures: the examples, then (full run) the
    random DAGs."""
    from modeler.modelfile import load_model

    out = [(example, load_model(ctx.repo / "examples" / f"{example}.yaml")) for example in plan.examples]
    if not ctx.quick:
        from experiments.randomdag import random_model

        out += [(f"random-{s}", random_model(s, job=f"random{s}")) for s in RANDOM_DAGS]
    return out


def run(ctx: ExperimentContext) -> ExperimentResult:
    from experiments.recording import max_rate_windows
    from history.spark import spark_session
    from modeler.errors import CalibrationError

    plan = QUICK if ctx.quick else FULL
    rng = np.random.default_rng(ctx.seed)
    spark = spark_session(master=ctx.spark_master, app_name="augury-accuracy")
    point_rows, calib_rows = [], []
    jobs = truths(ctx, plan)
    steps = ctx.steps(len(jobs), "accuracy jobs")
    for k, (example, truth) in enumerate(jobs):
        steps.advance(f"accuracy: {example}: recording and calibrating")
        try:
            fitted, rows = calibrate_example(truth, plan, ctx.workdir, spark, seed=ctx.seed * 1000 + 100 * k + 1,
                                             label=example)
        except CalibrationError as err:  # reported, not hidden: the job is left out of the errors
            calib_rows.append({"example": example, "parameter": f"calibration failed: {err}",
                               "relative_error": math.nan})
            continue
        calib_rows.extend(rows)
        for c, config in enumerate(unseen_configs(truth, plan.unseen_configs, rng)):
            label = ",".join(f"{n}={p}" for n, p in config.items() if not truth.operator(n).is_source)
            seed = ctx.seed * 1000 + 100 * k + 10 * c + 50
            window_rates = max_rate_windows(truth, config, seconds=plan.max_rate_s,
                                            warmup_s=max_rate_warmup_s(truth, config, plan), seed=seed)
            max_rate = float(window_rates.mean()) if len(window_rates) else math.nan
            max_rate_se = batch_se(window_rates)
            ctx.progress(f"accuracy: {example} [{label}]: measured max rate {max_rate:.0f}/s "
                         f"(se {max_rate_se:.1f}/s)")
            for j, load in enumerate((*plan.loads, plan.overload)):
                rate = load * max_rate
                warmup_s, measure_s = plan.point_seconds(load)
                # one measurement per point: every model (and the true profile) is judged against it
                got = measure(truth, config, rate, warmup_s=warmup_s, measure_s=measure_s, seed=seed + j + 1)
                pred = predictions(fitted, config, rate, truth=truth)
                base = {"example": example, "config": label, "load": load, "rate": rate}
                quantities = (("throughput_overload", "throughput"),) if load == plan.overload else \
                    (("throughput", "throughput"), ("max_rate", "max_rate"),
                     ("latency_mean", "latency_mean"), ("latency_p99", "latency_p99"))
                for q, key in quantities:
                    measured = max_rate if key == "max_rate" else got[key]
                    measured_se = max_rate_se if key == "max_rate" else got[f"{key}_se"]
                    point_rows.append({**base, "quantity": q, "measured": measured, "measured_se": measured_se,
                                       "measure_s": plan.max_rate_s if key == "max_rate" else measure_s,
                                       **{f"pred_{m}": pred[m][key] for m in MODELS},
                                       "pred_true": pred["true"][key],
                                       "sink_tuples": got["sink_tuples"]})
    steps.close()
    points = pd.DataFrame(point_rows)
    errors = error_table(points)
    metrics: dict[str, float] = {}
    for r in errors.itertuples():
        metrics[f"median_err.{r.quantity}.{r.model}"] = r.median_abs_rel_error
        metrics[f"p90_err.{r.quantity}.{r.model}"] = r.p90_abs_rel_error
        metrics[f"undefined.{r.quantity}.{r.model}"] = float(r.undefined)
    metrics["points"] = float(len(points[points["quantity"] == "latency_mean"]))
    calib = pd.DataFrame(calib_rows)
    params_errors = calib[calib["parameter"] != "quarantined_rows"]["relative_error"].abs()
    metrics["calibration.max_abs_param_error"] = float(params_errors.max()) if len(params_errors) else math.nan
    by_example, by_load = breakdown_tables(points)
    bands = band_table(points, seed=ctx.seed)
    for r in bands[bands["example"] == "all"].itertuples():
        metrics[f"band_err.{r.quantity}.{r.load:g}"] = r.median_abs_err
    for q in ("latency_mean", "latency_p99"):
        worst = bands[(bands["quantity"] == q) & (bands["example"] != "all")]
        metrics[f"worst_band_err.{q}"] = float(worst["median_abs_err"].max()) if len(worst) else math.nan
    figure = plot(points, ctx.workdir / "accuracy_predicted_vs_measured.png")
    return ExperimentResult(
        params={"examples": ",".join(label for label, _ in jobs), "unseen_configs_per_example": plan.unseen_configs,
                "loads": ",".join(f"{x:g}" for x in plan.loads), "overload": plan.overload,
                "record_s": plan.record_s, "measure_s": plan.measure_s, "warmup_s": plan.warmup_s,
                "max_rate_s": plan.max_rate_s, "saturation_cap": plan.saturation_cap,
                "point_seconds": ",".join(f"{x:g}:{plan.point_seconds(x)[0]:g}+{plan.point_seconds(x)[1]:g}"
                                          for x in (*plan.loads, plan.overload)),
                "calibration_utilizations": "0.35,0.6,0.85"},
        metrics=metrics,
        tables={"errors": errors, "errors_by_example": by_example, "errors_by_load": by_load,
                "errors_by_band": bands, "calibration": calib, "points": points},
        figures={"predicted_vs_measured": figure},
        summary=_summary(errors, by_load, plan, len(points[points["quantity"] == "latency_mean"]), bands,
                         [label for label, _ in jobs]),
    )


def _summary(errors: pd.DataFrame, by_load: pd.DataFrame, plan: Plan, n_points: int,
             bands: pd.DataFrame | None = None, jobs: list[str] | None = None) -> str:
    def med(q, m):
        row = errors[(errors["quantity"] == q) & (errors["model"] == m)]
        return float(row["median_abs_rel_error"].iloc[0]) if len(row) else math.nan

    lines = [f"{n_points} load points on {plan.unseen_configs} unseen configurations per example "
             f"({', '.join(jobs or plan.examples)}), loads {', '.join(f'{x:g}' for x in plan.loads)} of the "
             "measured max sustainable rate; errors are |predicted - measured| / measured.", ""]
    for q, goal in GOALS.items():
        value = med(q, "augury")
        verdict = "met" if value <= goal else "missed"
        lines.append(f"- augury {q.replace('_', ' ')}: median error {100 * value:.1f} % "
                     f"(goal <= {100 * goal:.0f} %: {verdict}); Caladrius {100 * med(q, 'caladrius'):.1f} %, "
                     f"DRS {100 * med(q, 'drs'):.1f} %.")
        if q == "throughput":
            lines.append("  Below capacity every model predicts the offered rate, so this error is measurement "
                         "noise; the models differ at overload (below).")
    lines.append(f"- augury p99 latency: median error {100 * med('latency_p99', 'augury'):.1f} % "
                 "(the peers predict no tail).")
    top = by_load[by_load["load"] == by_load["load"].max()].set_index("quantity")
    if len(top):
        lines.append(f"- at the highest load ({top['load'].iloc[0]:g} of the max rate) augury's median error is "
                     f"{100 * top.loc['latency_mean', 'median_augury']:.1f} % (mean latency) and "
                     f"{100 * top.loc['latency_p99', 'median_augury']:.1f} % (p99); signed median "
                     f"{100 * top.loc['latency_mean', 'median_signed_augury']:+.1f} % (mean): see errors_by_load.")
    lines.append(f"- throughput at {plan.overload:g}x the max rate: augury {100 * med('throughput_overload', 'augury'):.1f} %, "
                 f"Caladrius (no capping) {100 * med('throughput_overload', 'caladrius'):.1f} %, "
                 f"DRS (capped at its stability limit) {100 * med('throughput_overload', 'drs'):.1f} %.")
    if bands is not None and len(bands):
        from experiments.bootstrap import fmt_ci

        lines.append("- by load band (median error [bootstrap 95 % CI], n configurations; true profile after /; "
                     "the measurements' median relative standard error by batch means in brackets):")
        for q in ("latency_mean", "latency_p99"):
            b = bands[(bands["quantity"] == q) & (bands["example"] == "all")]
            cells = [f"{r.load:g}: {fmt_ci(r.median_abs_err, r.ci_lo, r.ci_hi)} n={r.n}"
                     + (f" / {100 * r.true_median_abs_err:.0f} %" if hasattr(r, "true_median_abs_err") else "")
                     + (f" (measurement se {100 * r.measured_rel_se:.1f} %)" if hasattr(r, "measured_rel_se") else "")
                     for r in b.itertuples()]
            lines.append(f"  {q.replace('_', ' ')}: " + "; ".join(cells))
        per = bands[bands["example"] != "all"]
        for q, goal in (("latency_mean", 0.10), ("latency_p99", 0.15)):
            w = per[(per["quantity"] == q) & (per["load"] <= 0.95)]
            if len(w):
                top = w.loc[w["median_abs_err"].idxmax()]
                lines.append(f"  worst {q.replace('_', ' ')} band: {100 * top['median_abs_err']:.1f} % "
                             f"({top['example']} at {top['load']:g}; issue 27 goal <= {100 * goal:.0f} % in every band: "
                             f"{'met' if top['median_abs_err'] <= goal else 'missed'})")
    return "\n".join(lines)
