"""Record metric history on the testbed and learn a model from it, through the real pipeline.

testbed (normalized raw rows) -> ``augury ingest`` (validation, quarantine, Parquet store) ->
``augury history summarize`` (Spark) -> ``modeler.calibrate``. Used by the calibration
acceptance tests, the experiments and the demo. Rates in tuples/s, durations in simulated seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from modeler.modelfile import JobModel
from modeler.queueing import predict


@dataclass(frozen=True)
class RecordingRun:
    """One stretch of history: a configuration held at a constant input rate."""

    config: Mapping[str, int]
    rate: float
    seconds: float = 60.0


def load_plan(model: JobModel, configs: Sequence[Mapping[str, int]],
              utilizations: Sequence[float] = (0.3, 0.55, 0.8), seconds: float = 60.0) -> list[RecordingRun]:
    """Runs at the given bottleneck utilizations (by the model) for each configuration."""
    runs = []
    for config in configs:
        capacity = predict(model, config, 0.0).max_rate
        runs.extend(RecordingRun(dict(config), u * capacity, seconds) for u in utilizations)
    return runs


def record(model: JobModel, runs: Sequence[RecordingRun], *, seed: int = 1, warmup_s: float = 10.0,
           testbed_config=None) -> pd.DataFrame:
    """Simulate each run on a fresh testbed and return all complete windows (normalized rows).

    Runs are laid end to end on the wall clock (their own start times), so their windows never
    collide in the store. The first ``warmup_s`` of each run (queues filling) are dropped.
    """
    from experiments.testbed import Testbed, TestbedConfig

    base = testbed_config or TestbedConfig()
    start = pd.Timestamp(base.start_time)
    frames = []
    for k, run in enumerate(runs):
        cfg = replace(base, seed=seed + k, start_time=start.isoformat())
        bed = Testbed(model, run.rate, cfg, parallelism=run.config)
        bed.advance(warmup_s + run.seconds)
        frame = bed.frame()
        frames.append(frame[frame["ts"] >= start + pd.Timedelta(seconds=warmup_s)])
        start = start + pd.Timedelta(seconds=warmup_s + run.seconds + 3600)
    return pd.concat(frames, ignore_index=True)


def ingest_and_summarize(raw: pd.DataFrame, store_dir: str | Path, *, spark=None, window_s: float | None = None):
    """Write ``raw`` through ``augury ingest`` into a store and summarize it with Spark."""
    from history.ingest import ingest
    from history.summarize import summarize_store

    store_dir = Path(store_dir)
    store_dir.mkdir(parents=True, exist_ok=True)
    path = store_dir.parent / f"{store_dir.name}-raw.parquet"
    raw.to_parquet(path, index=False)
    report = ingest([path], "normalized", store_dir)
    summary = summarize_store(store_dir, window_s=window_s, spark=spark)
    return report, summary


def calibrate_store(store_dir: str | Path, job: str, topology: JobModel | None = None, config=None):
    """The fitted ``Calibrator`` for ``job`` from a summarized store."""
    from history.store import MetricStore
    from modeler.calibrate import Calibrator

    store = MetricStore(store_dir)
    return Calibrator(config).fit(store.operator_windows(job), store.edge_windows(job), topology, job=job)


MIX_SOURCE = "__mix"
"""Name of the load generator ``mix_coupled`` puts in front of a job's sources."""
_ZERO_SERVICE_MS = 1e-6
"""Service time given to a former source without one (it served in zero time as a source)."""


def mix_coupled(model: JobModel) -> tuple[JobModel, str]:
    """The job fed by one load generator that keeps the sources' rate shares: a new source
    ``MIX_SOURCE`` (parallelism 1) sends each tuple on to source ``s`` with probability
    ``share(s)`` (a shuffle edge with selectivity = share), and the former sources become plain
    operators (no rate share; a zero service time when they had none). Everything downstream of
    the sources is unchanged. Returns (model, generator name).

    Why: the testbed's sources, like an engine's, are back-pressured one by one. Driven above
    capacity, a source whose tuples hit the bottleneck harder is throttled more, so the sources'
    summed throughput is not the max sustainable rate *at the job's mix* (what ``predict``'s
    ``max_rate`` is, and what a user whose sources keep their shares can run at). On random-2
    (two sources, shares 0.5 / 0.5) the independent sources pushed 202/s and 437/s; the sum was
    3-16 % off the rate at the mix at each of five configurations (-4, -3, +4, +12, +16 %), e.g.
    1,078/s where runs at the mix kept up at 950/s and fell behind at 965/s. One generator
    blocked by whichever source is full keeps the shares, and measured 965/s there.
    """
    from modeler.modelfile import model_to_dict, parse_model

    raw = model_to_dict(model)
    names = {op["name"] for op in raw["operators"]}
    gen = MIX_SOURCE
    while gen in names:
        gen = "_" + gen
    shares = model.source_shares()
    for op in raw["operators"]:
        if op.get("role") == "source":
            op.pop("role")
            op.pop("rate_share", None)
            op.pop("arrival_scv", None)
            op.setdefault("service_time_ms", _ZERO_SERVICE_MS)
    raw["operators"].insert(0, {"name": gen, "role": "source", "parallelism": 1})
    raw["edges"] = [{"from": gen, "to": name, "grouping": "shuffle", "selectivity": share}
                    for name, share in shares.items() if share > 0] + raw["edges"]
    return parse_model(raw, source=f"{model.job} (sources fed by one generator at their shares)"), gen


def max_rate_setup(model: JobModel, config: Mapping[str, int]) -> tuple[JobModel, dict[str, int]]:
    """The model and configuration ``measure_max_rate`` drives: the job itself when it has one
    source, ``mix_coupled`` (with the generator in the configuration) when it has several."""
    if len(model.sources) <= 1:
        return model, dict(config)
    coupled, gen = mix_coupled(model)
    return coupled, {**config, gen: 1}


def measure_max_rate(model: JobModel, config: Mapping[str, int], *, overload: float = 1.6,
                     seconds: float = 60.0, warmup_s: float = 20.0, seed: int = 99, testbed_config=None) -> float:
    """The testbed's max sustainable input rate of ``config`` at the job's source mix: drive it
    above capacity and measure what the source(s) manage to push (back pressure throttles them
    to the bottleneck). A job with several sources is fed by one generator that keeps their
    shares (``mix_coupled``: independently throttled sources would not)."""
    rates = max_rate_windows(model, config, overload=overload, seconds=seconds, warmup_s=warmup_s, seed=seed,
                             testbed_config=testbed_config)
    return float(rates.mean()) if len(rates) else float("nan")


def max_rate_windows(model: JobModel, config: Mapping[str, int], *, overload: float = 1.6,
                     seconds: float = 60.0, warmup_s: float = 20.0, seed: int = 99,
                     testbed_config=None) -> np.ndarray:
    """``measure_max_rate``'s measurement window by window: the source input rate (tuples/s) of
    every complete metric window after the warm-up, oldest first (their mean is the max rate;
    their sequence gives its standard error by batch means)."""
    from experiments.testbed import Testbed, TestbedConfig

    offered = overload * predict(model, config, 0.0).max_rate
    bed_model, bed_config = max_rate_setup(model, config)
    cfg = replace(testbed_config or TestbedConfig(), seed=seed)
    bed = Testbed(bed_model, offered, cfg, parallelism=bed_config)
    bed.advance(warmup_s + seconds)
    frame = bed.frame()
    start = frame["ts"].min() + pd.Timedelta(seconds=warmup_s)
    frame = frame[frame["ts"] >= start]
    sources = [op.name for op in bed_model.sources]
    rows = frame[frame["operator"].isin(sources) & (frame["metric"] == "records_in")]
    per_window = rows.groupby("ts", sort=True)["value"].sum()
    return per_window.to_numpy(float) / cfg.window_s


def truth_errors(truth: JobModel, fitted: JobModel) -> dict[str, float]:
    """Relative errors of fitted service times and selectivities against the true model."""
    out = {}
    for op in truth.operators:
        if op.service_time_ms is not None:
            out[f"service_time_ms.{op.name}"] = fitted.operator(op.name).service_time_ms / op.service_time_ms - 1
    fitted_edges = {(e.source, e.target): e for e in fitted.edges}
    for e in truth.edges:
        if e.selectivity > 0:
            out[f"selectivity.{e.source}.{e.target}"] = fitted_edges[(e.source, e.target)].selectivity / e.selectivity - 1
    return {k: float(v) for k, v in out.items() if np.isfinite(v)}


@dataclass(frozen=True)
class LearnConfig:
    """``[learn]`` of a testbed run: augury starts from no model and learns one from a warm-up
    recording of the simulated job (``learn_model``). Every field has a default."""

    seconds: float = 30.0
    """Length of each of the warm-up's six stretches (two configurations x three loads),
    simulated seconds."""
    seed: int = 1
    """Testbed seed of the warm-up recording."""
    workdir: str = "augury-learn"
    """Where the warm-up's metrics store and the learned model (``learned_model.yaml``) go,
    relative to the config file."""

    def check(self, file: str | None = None) -> None:
        from modeler.errors import AuguryError

        if isinstance(self.seconds, bool) or not isinstance(self.seconds, (int, float)) or not self.seconds > 0 \
                or not np.isfinite(self.seconds):
            raise AuguryError("must be a finite number > 0", file=file, field="learn.seconds", value=self.seconds)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise AuguryError("must be an integer >= 0", file=file, field="learn.seed", value=self.seed)
        if not isinstance(self.workdir, str) or not self.workdir:
            raise AuguryError("must be a directory name", file=file, field="learn.workdir", value=self.workdir)


def learn_model(truth: JobModel, workdir: str | Path, *, seed: int = 1, seconds: float = 30.0,
                spark=None, configs: Sequence[Mapping[str, int]] | None = None) -> tuple[JobModel, dict[str, float]]:
    """augury's model of ``truth``'s job, learned from measurements only, as a user's would be.

    The job runs on the testbed (the ground truth) at its deployed configuration and at twice it
    (capped by the bounds), three loads each (``load_plan``: 0.3, 0.55, 0.8 of each one's
    capacity), ``seconds`` each; the metrics go through ``augury ingest`` -> the Spark pipeline ->
    ``modeler.calibrate`` (topology from the metrics). ``configs`` replaces the two recorded
    configurations (overrides of the deployed one; e.g. a third one that loads an operator the
    default recording leaves too idle to measure). Returns the model and what to log next to
    the truth: ``calibration_trust`` and the relative error of every fitted service time and
    selectivity (``truth_errors``). The truth is used only to run the testbed."""
    workdir = Path(workdir)
    bigger = {op.name: min(op.max_parallelism, op.parallelism * 2) for op in truth.operators if not op.is_source}
    plan = [dict(c) for c in configs] if configs is not None else [{}, bigger]
    raw = record(truth, load_plan(truth, plan, seconds=seconds), seed=seed)
    ingest_and_summarize(raw, workdir / "store", spark=spark)
    calibrator = calibrate_store(workdir / "store", truth.job)
    model = calibrator.model_
    return model, {"calibration_trust": float(calibrator.trust_), **truth_errors(truth, model)}


def learn_model_following_advice(truth: JobModel, workdir: str | Path, *, seed: int = 1, seconds: float = 30.0,
                                 spark=None, attempts: int = 3) -> tuple[JobModel, dict[str, float], str]:
    """``learn_model``, recorded again when calibration finds an operator the warm-up left too idle
    to measure (``CalibrationError`` naming the operator, advising a recording at higher load):
    the advice is followed with a third configuration, every other operator at 4x its deployed
    parallelism, so the job carries enough load to keep the idle one busy. Each attempt records
    into ``workdir/warm-up-N``. Returns ``(model, figures, how)``; re-raises what advice cannot fix."""
    from modeler.errors import CalibrationError

    idle: list[str] = []
    bigger = {op.name: min(op.max_parallelism, op.parallelism * 2) for op in truth.operators if not op.is_source}
    for attempt in range(attempts):
        configs = None
        if idle:
            loaded = {op.name: (op.parallelism if op.name in idle else min(op.max_parallelism, op.parallelism * 4))
                      for op in truth.operators if not op.is_source}
            configs = [{}, bigger, loaded]
        try:
            model, info = learn_model(truth, Path(workdir) / f"warm-up-{attempt + 1}", seed=seed, seconds=seconds,
                                      spark=spark, configs=configs)
            return model, info, "warm-up" if not idle else f"warm-up again, loading {', '.join(idle)}"
        except CalibrationError as err:
            if err.field != "operator" or not err.value or str(err.value) in idle or attempt == attempts - 1:
                raise
            idle.append(str(err.value))
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
