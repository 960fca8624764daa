"""flink-sql: the model on Flink's own SQL operators (Nexmark-style q1, q2, q5, q8), cores shared.

Starts the managed local cluster (``experiments.flink.cluster``; always stopped, also on errors;
one TaskManager, 8 slots, on this machine's cores) and, per query (``experiments.flink.sql``):

1. **Calibration** from at most three configurations (never a test configuration), with
   different total parallelism so the operators' CPU share is identifiable. The topology is the live job's
   (``JobGraph.topology()``) plus ``resources: {cores: os.cpu_count()}`` (the TaskManager runs on
   this machine's cores); the live metric windows (``FlinkMetricsSource``, counter differences)
   become operator/edge frames (``scheduler.observe.history_frames``: the in-memory path of
   history -> calibrate) and ``modeler.calibrate.Calibrator`` fits base service times and CPU
   shares jointly. **Calibration at saturation**: each calibration job's datagen asks
   ``OVERLOAD_RATE`` rows/s, so its windows are that configuration's own max sustainable rate,
   the regime the predictions are about. Per-tuple costs fall with load (docs/flink.md: at
   15-40 % of a datagen's limit the datagen read 1.26-1.29 us of CPU per tuple, 1.15-1.17 at its
   limit; q1's Calc 3.6 us of busy time per tuple at 40 000/s per instance, 1.0 at 837 000/s), so
   costs measured at moderate rates under-predicted the max rate (run 98827e66: by 12-16 % on
   q1, q2, q5). **Input rate**: a saturated datagen generates less than its ``rows-per-second``;
   each source's rate in a calibration window is the records in of the vertices right behind it
   (``source_input_rates``: counted by their task threads; the datagen's own counter differences
   over a 4 s window read 1-3 % off, its rate limiter working on the host clock).
   **Source CPU**: the datagen source reports no busy time (Flink answers NaN), yet it
   generates on the cores the operators share. Around each calibration job's windows (after
   its warm-up window) the CPU of its own threads is read from ``/proc``
   (``FlinkCluster.source_threads_cpu_s``: the local cluster's legacy source threads) and the
   TaskManager JVM's CPU time over REST (``FlinkMetricsSource.cpu_sample``,
   ``Status.JVM.CPU.Time``); their means over the windows are the job's ``source_cpu`` and
   ``engine_cpu``. Calibration takes the sources' ``cpu_ms_per_tuple`` from ``source_cpu``
   and the operators' CPU shares from ``engine_cpu`` and the busy time's stretch together
   (``engine_cpu`` alone is the fallback a remote cluster would have: it splits the JVM's CPU by
   the operators' busy time, which on contended cores overstates their CPU; both are logged). The
   model then caps the job where the datagen thread, stretched by sharing, cannot generate
   more, and counts its CPU among the cores' load.
2. **Predicted max sustainable rate** at >= 5 unseen configurations (per-vertex parallelism,
   most with more instances than cores): ``modeler.queueing.predict(model, config, 1.0).max_rate``
   (job input, tuples/s: the sum over the query's datagen tables). **Input mix** (q8's two
   tables): a two-input job's max rate depends on the mix of its inputs, and at overload each
   datagen is back-pressured on its own, so the measured job runs at a mix of its own (q8: 25-35 %
   persons) while a model without ``rate_share`` splits the input equally. The prediction
   compared is therefore at the mix each measured job ran at (``with_source_mix``: the sources'
   shares of the generated tuples over the measured windows; the input's composition, not its
   rate), logged as ``source_mix``; the prediction at the model's own mix is kept beside it
   (``predicted_at_model_mix``). Until 2026-12-06 (run d5da79ce and before) q8's predictions
   were at 50/50 against measurements at about 27/73. Beside it **DS2's linear
   extrapolation**: every measured operator's true processing rate per instance (tuples per busy
   second, pooled over the calibration windows) times its parallelism, divided by its visit
   ratio (operator tuples per job input tuple); the job's rate is the smallest (the bottleneck).
   Linear scaling is what DS2 assumes; with more busy instances than cores it cannot hold.
3. **Measured max sustainable rate**: the calibration's job, whose datagen asks for far more
   than any configuration carries (``OVERLOAD_RATE`` rows/s per table), rescaled at runtime
   through the test configurations (``LiveFlinkActuator``). **One job**: calibration and tests
   run on one job per query (since 2026-12-06; before, each calibration configuration and the
   tests were separate submissions). augury calibrates on the job it then rescales; separate
   submissions add a between-job spread production never sees (run 828b51a4: q1's calibration
   jobs read the datagen at 1.16 and 1.40 us per tuple, the tests' job 1.17-1.19 at all five
   configurations). The tests are measured before the fit, which uses the calibration windows
   only and runs once the job has stopped (its CPU would compete with the overloaded job).
   **Drift** (full runs since 2026-12-06, ``passes`` 2): the job's own speed wanders over its
   life (run 2ed8eef7: q2's datagen thread made 617 k tuples per core-second in calibration and
   773 k in the last test of the same job; the tests in order read 532, 606, 708, 678, 735 k,
   where the model says more instances carry less). So the configurations are measured in a
   counterbalanced order: calibration, tests, tests reversed, calibration reversed; each test's
   max rate is the mean over both passes' windows, and the fit takes both calibration passes. A
   drift linear in time then falls on calibration and tests alike. (Quick runs: one pass.)
   After each rescale one window is skipped (back
   pressure settles), then the rate reaching the vertices right behind the sources (their
   records in, summed over the sources: every input tuple passes there) is averaged over
   ``windows`` windows. Definition used: *max sustainable rate = the job input rate that flows
   while the input asks for more*. When no operator was back-pressured (>= 5 % on average) nor
   busy >= 90 %, the job did not hold the source back: the datagen itself could not generate more
   (it shares the cores), that row's measurement is the source's limit, flagged
   ``source_limited`` (the datagen's own back pressure is not measured: it has no clock).
4. **One step**: a job from a start configuration (below) at a target rate of
   ``target_share`` (0.8) of the best measured max rate; ``scheduler.plan.plan(model, target,
   utilization_target 0.85)`` applied by live rescale; success = job input >= 95 % of the target
   and no operator back-pressured more than 10 % of a window on average over the windows after
   the step (no sustained back pressure; the operator back-pressured most is logged,
   ``after_backpressure_operator``, and a failed step's summary names it). Its instance count is compared with the cheapest
   measured configuration that carried the target (from step 3). **What it can show on 2
   cores**: every query's max rate is flat or falls with more instances (source-limited q1, q2
   and mostly q5; q8 within about +-20 %), so a one-instance start carried the target
   (``start_carried_target``) in every recorded run for q1, q2 and q5, and in 7 of 11 for q8:
   the step mostly tests that the plan meets the target without over-provisioning, not that a
   step up to a larger configuration is found. Until 2026-12-06 the start was one instance per
   vertex and this said the target was above its capacity; for most queries it never was, and
   in run 5cc2fe8f the plan was the start for every query, so nothing was rescaled. Since then
   the start is the largest test configuration (the most instances, which on shared cores
   carries no more): the plan is a live rescale to a leaner configuration, an over-provisioned
   job right-sized in one step.

Rates in tuples/s (rows/s), times in ms (windows and rescales in s). A live cluster is not
deterministic: the seed changes nothing; other load on the 2 cores (the JobManager, the
TaskManager's own threads, the datagen source, this Python process) shows up in the numbers.
**Per-instance CPU overhead** (2026-12-06): calibration fits ``cpu_overhead_per_instance`` (every
operator's CPU work per tuple grows by that fraction per computing instance beyond the cores;
``modeler.queueing``, "Shared cores") from the TaskManager's CPU per tuple at the calibration
configurations' different instance counts; logged per query in the ``fits`` table and as the
metric ``<query>.cpu_overhead_per_instance``. **Capacity scale** (2026-12-06): every calibration window is at its configuration's max rate
(the datagen asks ``OVERLOAD_RATE``), so the fit is told so (``Calibrator.fit(at_max_rate=True)``)
and levels the model to those measured rates: one factor per query, the geometric mean over the
calibration configurations of measured / predicted max rate, divides every per-tuple time
(``modeler.calibrate``, "Capacity scale"; logged in ``fits`` and as ``<query>.capacity_scale``).
Every test prediction scales by it exactly, so the model before it is reported beside
(``predicted_unscaled``, ``unscaled_error``, ``max_rate_abs_error_median_unscaled``). Why: the
model missed its own calibration configurations by a level that differed per query and run
(refits of runs 0e5c3ed4, 5cc2fe8f, e9f87e65, a3ccc290: q1 2-13 % under at Calc 2 and 4, q5 up
to 33 % over at one instance each), and the tests carried the same offset; refitted with the
scale, those four runs' median |error| went 7.1 -> 3.2, 5.7 -> 4.0, 8.0 -> 2.7 and 7.0 -> 3.9 %,
every query within the goal in all four (before: two). The test configurations stay unseen: the
scale uses the calibration windows only. **Calibration windows as tables**: every window the
calibration read (``calibration_windows``: the operator frame; ``calibration_edge_windows``;
``calibration_cpu``: the TaskManager's and the source threads' CPU per window) and each query's
topology (``topologies``, JSON) are logged, so a later model change can be refitted offline from a
run (``refit_from_tables``).

Known limits: the TaskManager's CPU beyond the operators' is all charged to the sources (network
threads, garbage collection and timers that grow with the tuples included; the idle part is the
line's intercept, reported, not modelled); several datagen tables (q8) get one cost per tuple.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np
import pandas as pd

from experiments.flink.livejob import LiveJob
from experiments.harness import ExperimentContext, ExperimentError, ExperimentResult
from modeler.errors import ModelError

NAME = "flink-sql"
DESCRIPTION = ("Real Flink SQL operators (Nexmark-style q1, q2, q5, q8) on a 2-core machine: calibrate with "
               "shared cores, predict max sustainable rate at unseen configurations (beside DS2's linear "
               "extrapolation), one-step plan applied by live rescaling")
HEADLINE = ("max_rate_abs_error_median", "share_within_15pct", "share_within_15pct_above_cores",
            "ds2_abs_error_median", "one_step_successes")

GOAL_REL_ERROR = 0.15
"""A prediction within 15 % of the measured max rate counts as accurate (issue 23)."""
GOAL_MEDIAN = 0.10
"""Issue 23's goal for the median |error| per query and overall."""
THROUGHPUT_OK = 0.95
"""One step: the job input after the step must reach this share of the target."""
BACKPRESSURE_OK = 0.10
"""One step: the most back-pressured operator's back-pressured share of a window, averaged over
the windows after the step, must stay below this (no sustained back pressure)."""
HELD_BACK_BP = 0.05
"""The job held its overloading source back when some operator was back-pressured at least this
share of the windows on average, or some operator was busy at least ``HELD_BACK_BUSY``. Neither:
the datagen generated all it could (on cores it shares with the operators) and the measurement is
the source's limit (``source_limited``). The datagen's own back pressure cannot say: it has no
clock, and ``FlinkMetricsSource`` leaves its time metrics out (they read 0 in the windows; the
first two full runs flagged every row source-limited from that reading)."""
HELD_BACK_BUSY = 0.9
OVERLOAD_RATE = 2_000_000
"""rows/s per table asked of the datagen while measuring max rates: far above what 2 cores can
generate (a single datagen instance made 230 000-330 000 rows/s of bids here, q1 unloaded)."""
SLOTS = 8
UTILIZATION_TARGET = 0.85
"""The one step's ceiling on the hottest instance's utilization. The step's target rate is known
and constant (no forecast to hedge), so the headroom only has to cover the model's error: a max
rate over-predicted by ``GOAL_REL_ERROR`` (15 %) is still carried at 1 / 1.15 = 0.87 of it; 0.85
rounds that down. It was 0.7 (the planner's default without an SLO) until run 8b4a3114, where
q1's plan took Calc = 2 (3 instances) because Calc = 1's predicted utilization at the target was
0.78, though Calc = 1 carried 744 k for the 595 k target: the target is 0.8 of the best measured
max rate, so 0.7 cannot pick the best configuration of a one-operator job. (Changed after seeing
that run; offline on runs 8b4a3114 and 9a2922fd it changes q1's plan to Calc = 1 and q5's to
Calc = 1 in 8b4a3114, nothing else.)"""


@dataclass(frozen=True)
class QuerySetup:
    """One query's configurations. A configuration is a tuple of the scaled groups' parallelisms
    (``groups``: each group's vertices get the same parallelism); every other vertex keeps its
    submission parallelism (the sources 1, q5's final aggregate 1: max parallelism 1)."""

    query: str
    groups: tuple[tuple[str, ...], ...]
    """Scaled vertices per group (operator names of the live job)."""
    calibration: tuple[tuple[int, ...], ...]
    """Each calibration job's configuration; calibrated at its saturation (``OVERLOAD_RATE``:
    module docstring, "Calibration at saturation")."""
    tests: tuple[tuple[int, ...], ...]
    """Unseen configurations whose max rate is predicted and measured."""
    start: tuple[int, ...]
    """One step's start configuration: the largest test configuration (since 2026-12-06; it was
    one instance per vertex, which on 2 cores was also the plan for every query in run 5cc2fe8f,
    so nothing was rescaled: module docstring, "One step")."""
    target_share: float
    """One step's target = this share of the largest measured max rate (job input, tuples/s)."""
    step_mix: tuple[tuple[str, float], ...] = ()
    """One step's input mix, (source, share of the job input) per source; empty = every table
    at the same rate. The planner is given the same mix (``with_source_mix``): the workload's
    composition, which a user of a two-input job knows from its sources."""
    calibration_windows: int | None = None
    """Windows read per calibration job; None = the run's setting."""
    window_s: float | None = None
    """Metric window length for this query (s); None = the run's setting. A query whose windows
    fire on a period (q8's TUMBLE(10 s): the join works only when they fire, back-pressuring the
    inputs for a moment) is measured over whole periods: with 4 s windows each window held a
    firing or none, and q8's windows at one configuration spread 10-18 % (sd; run e9f87e65) where
    q5's (HOP slide 2 s, which 4 s windows hold whole) spread 2-3 %. Until 2026-12-06 q8 read
    five 4 s windows per calibration job instead, so that ``CalibrationConfig.min_windows`` (3)
    of them saw the join busy."""

    def window_in(self, settings: dict) -> float:
        """This query's metric window (s): its own ``window_s``, else the run's."""
        return self.window_s or settings["window_s"]

    def config(self, t: tuple[int, ...]) -> dict[str, int]:
        if len(t) != len(self.groups):
            raise ExperimentError("a configuration needs one parallelism per group", field="config", value=t)
        return {v: int(p) for group, p in zip(self.groups, t) for v in group}


SETUPS = {
    "q1": QuerySetup("q1", (("Calc",),), calibration=((2,), (4,)),
                     tests=((1,), (3,), (5,), (6,), (8,)), start=(8,), target_share=0.8),
    "q2": QuerySetup("q2", (("Calc",),), calibration=((2,), (4,)),
                     tests=((1,), (3,), (5,), (6,), (8,)), start=(8,), target_share=0.8),
    "q5": QuerySetup("q5", (("Calc",), ("GlobalWindowAggregate",)),
                     calibration=((1, 1), (2, 2), (3, 3)),
                     tests=((1, 2), (2, 1), (4, 2), (2, 4), (4, 4)), start=(4, 4), target_share=0.8),
    "q8": QuerySetup("q8", (("Calc", "Calc-2"), ("GlobalWindowAggregate", "GlobalWindowAggregate-2"),
                            ("WindowJoin",)),
                     calibration=((1, 1, 1), (2, 2, 2), (3, 3, 3)),
                     tests=((1, 2, 1), (2, 1, 1), (2, 2, 1), (3, 3, 2), (4, 4, 4)), start=(4, 4, 4),
                     target_share=0.8, window_s=10.0,
                     # Nexmark's generator: one person per three auctions (and near the mix the
                     # overloaded job ran at: 25-35 % persons in run d5da79ce)
                     step_mix=(("person", 0.25), ("auction", 0.75))),
}
"""The full run's configurations. Calibration configurations are never test configurations: each
is calibrated at its own saturation (the datagen asking ``OVERLOAD_RATE``), the regime the max-rate
predictions are about (until 2026-12-06 at moderate rates, 15-40 % of one datagen instance's
limit: per-tuple costs read 10-45 % high there, docs/flink.md)."""


def _settings(quick: bool) -> dict:
    if quick:
        q5 = SETUPS["q5"]
        # CI budget (issue 23: < 3 min with the cluster start-up): 3 s windows, two calibration
        # jobs of three windows (with two, CI once saw q5's second window aggregate busy in only
        # one of four: CalibrationConfig.min_windows is 3), two unseen configurations (one per
        # side of DS2's linear error), one step
        return {"window_s": 3.0, "windows": 2, "calibration_windows": 3, "queries": ("q5",),
                "step_before_windows": 1,
                "setups": {"q5": replace(q5, calibration=q5.calibration[:2], tests=((2, 1), (4, 4)))}}
    # two passes in counterbalanced order (module docstring, "Drift")
    return {"window_s": 4.0, "windows": 3, "calibration_windows": 3, "queries": ("q8", "q5", "q1", "q2"),
            "step_before_windows": 2, "passes": 2,
            "setups": dict(SETUPS)}


# --- pure parts (unit-tested) -------------------------------------------------------------------

def pooled_true_rates(rows: list[dict]) -> dict[str, float]:
    """DS2's true processing rate per instance of every measured operator (tuples per busy
    second of one instance), pooled over calibration windows: sum of tuples / sum of busy
    instance-seconds. ``rows``: per window and operator ``{"operator", "processed_rate",
    "busy_mean", "parallelism"}``; rows without finite positive busy time are left out (the
    datagen source reports none)."""
    tuples: dict[str, float] = {}
    busy: dict[str, float] = {}
    for r in rows:
        b, n, p = r["busy_mean"], r["processed_rate"], r["parallelism"]
        if not (np.isfinite(b) and b > 0 and np.isfinite(n) and n > 0):
            continue
        tuples[r["operator"]] = tuples.get(r["operator"], 0.0) + n
        busy[r["operator"]] = busy.get(r["operator"], 0.0) + b * p
    return {op: tuples[op] / busy[op] for op in tuples if busy[op] > 0}


def ds2_linear_max_rate(true_rates: dict[str, float], visits: dict[str, float], config: dict[str, int]) -> float:
    """DS2's linear extrapolation of the job's max input rate (tuples/s) at ``config``: each
    operator carries ``true_rate x parallelism`` tuples/s, i.e. ``true_rate x p / visit`` job
    input tuples/s (``visits``: operator tuples per job input tuple); the smallest bounds the
    job. Operators without a rate or with zero visits are no bound; inf when none bounds."""
    bounds = [true_rates[op] * config[op] / visits[op] for op in true_rates
              if op in config and visits.get(op, 0.0) > 0]
    return float(min(bounds)) if bounds else float("inf")


def rel_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured; nan when nothing was measured."""
    return (predicted - measured) / measured if measured > 0 else float("nan")


def error_summary(errors: pd.Series) -> dict[str, float]:
    """n, median |error| and the share within ``GOAL_REL_ERROR`` of a set of relative errors
    (nan ones left out; nan statistics for an empty set)."""
    e = errors.dropna().abs()
    if e.empty:
        return {"n": 0, "median": float("nan"), "within": float("nan")}
    return {"n": int(len(e)), "median": float(e.median()), "within": float((e <= GOAL_REL_ERROR).mean())}


def measurement_order(n_calibration: int, n_tests: int, passes: int) -> list[tuple[str, int]]:
    """The order one job measures its configurations in: ``("calibration", i)`` and
    ``("test", k)``. One pass: calibration, then tests. Two (module docstring, "Drift"): then the
    tests reversed and the calibration reversed, so each configuration's mean time in the job's
    life is the same for all (a linear drift falls on every one alike)."""
    if passes not in (1, 2):
        raise ExperimentError("flink-sql measures in one or two passes", field="passes", value=passes)
    order = [("calibration", i) for i in range(n_calibration)] + [("test", k) for k in range(n_tests)]
    return order + order[::-1] if passes == 2 else order


def cheapest_carrying(table: pd.DataFrame, query: str, target: float) -> int | None:
    """The fewest instances among the query's measured configurations that carried ``target``
    (measured max rate >= target); None when none did."""
    t = table[(table["query"] == query) & (table["measured_max_rate"] >= target)]
    return int(t["instances"].min()) if len(t) else None


def source_limited(backpressure_mean: float, busiest_busy: float) -> bool:
    """No operator held the overloading source back (``HELD_BACK_BP``, ``HELD_BACK_BUSY``)."""
    return not (backpressure_mean >= HELD_BACK_BP or (np.isfinite(busiest_busy) and busiest_busy >= HELD_BACK_BUSY))


def cores_used(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Cores each reading of ``FlinkCluster.cpu_reading`` used on average between two readings
    ``seconds`` apart (nan for an empty interval)."""
    return {k: (after[k] - before[k]) / seconds if seconds > 0 else float("nan") for k in before if k in after}


def one_step_verdict(after_rate: float, after_bp_mean: float, target: float) -> bool:
    """Meets the target without sustained back pressure (``THROUGHPUT_OK``, ``BACKPRESSURE_OK``)."""
    return after_rate >= THROUGHPUT_OK * target and after_bp_mean <= BACKPRESSURE_OK


# --- the live job ------------------------------------------------------------------------------

class SqlJob(LiveJob):
    """A submitted SQL query (``experiments.flink.sql.submit``) and its job graph, read once
    after the submission (``graph``: refreshed by ``rescale_to`` after a rescale)."""

    def __init__(self, cluster, spec, window_s: float):
        from experiments.flink.sql import submit

        super().__init__(cluster, submit(cluster, spec), window_s, spec.job_name, reason="flink-sql")
        self.spec = spec
        self.graph = self.source.graph()
        self.sources = self.graph.sources()


def _input_rate(w, sources: list[str], graph) -> float:
    """Job input tuples/s of a window: records in of the vertices right behind the sources (every
    input tuple passes there; counted by the task thread, unlike the datagen's own counter)."""
    first = {t for s in sources for t in graph.downstream(s)}
    return float(sum(w.operators[op].processed_rate for op in first))


def source_input_rates(w, sources: list[str], graph) -> dict[str, float]:
    """Each source's generated tuples/s in window ``w``: the records in of the vertices right
    behind it (counted by their task threads; the datagen's own counter reads 1-3 % off). A vertex
    fed by several sources is split by the sources' own output counts to it."""
    out = {}
    for s in sources:
        total = 0.0
        for t in graph.downstream(s):
            feeders = [u for u in sources if t in graph.downstream(u)]
            counted = {u: w.operators[u].output_rates.get(t, 0.0) for u in feeders}
            share = counted[s] / sum(counted.values()) if len(feeders) > 1 and sum(counted.values()) > 0 \
                else 1.0 / len(feeders)
            total += w.operators[t].processed_rate * share
        out[s] = float(total)
    return out


def with_source_rates(w, rates: dict[str, float]):
    """``w`` with each named source's processed and arrival rate replaced by ``rates``."""
    return replace(w, operators={k: (replace(o, processed_rate=float(rates[k]), arrival_rate=float(rates[k]))
                                     if k in rates else o) for k, o in w.operators.items()})


def source_mix(rates: list[dict[str, float]]) -> dict[str, float]:
    """Each source's share of the tuples the sources generated over several windows (``rates``:
    per window ``source_input_rates``); equal shares when nothing was generated."""
    totals = {s: float(sum(r.get(s, 0.0) for r in rates)) for s in (rates[0] if rates else {})}
    whole = sum(totals.values())
    return {s: (v / whole if whole > 0 else 1.0 / len(totals)) for s, v in totals.items()}


def with_source_mix(model, mix: dict[str, float]):
    """``model`` with its sources' ``rate_share`` set to ``mix`` (shares of the job input, summing
    to 1; a one-source model is returned as it is). A two-input job's max rate depends on the
    mix of its inputs: the prediction is compared with a measurement at the mix the measured job
    ran at (module docstring, "Input mix")."""
    try:
        return model.with_source_shares(mix)
    except ModelError as err:
        raise ExperimentError("a source mix needs every source's share, summing to 1", field="mix",
                              value=mix) from err


def summarize_windows(windows, job: SqlJob) -> dict:
    """Means over windows: job input rate, most back-pressured non-source instance (mean, max, and
    per window: ``bp_per_window``), mean busy per operator, configuration in force, the sources'
    mix (``source_mix``)."""
    rate = [_input_rate(w, job.sources, job.graph) for w in windows]
    bp = [max((o.backpressure_max for o in w.operators.values() if not o.is_source), default=0.0) for w in windows]
    busy = {op: float(np.nanmean([w.operators[op].busy_mean for w in windows])) for op in windows[0].operators}
    return {"rate": float(np.mean(rate)), "rate_sd": float(np.std(rate)), "bp_mean": float(np.mean(bp)),
            "bp_max": float(max(bp)), "bp_per_window": bp, "bp_operator": most_backpressured(windows), "busy": busy,
            "mix": source_mix([source_input_rates(w, job.sources, job.graph) for w in windows]),
            "config": dict(windows[-1].config)}


def most_backpressured(windows) -> str:
    """The non-source operator back-pressured the largest share of the windows on average (its
    hottest instance per window); "" when none was back-pressured at all. A failed verdict names
    it, so the operator it waits for can be looked at (``experiments.flink.bp_probe``)."""
    ops = [k for k, o in windows[0].operators.items() if not o.is_source]
    means = {k: float(np.mean([w.operators[k].backpressure_max for w in windows if k in w.operators])) for k in ops}
    best = max(means.items(), key=lambda kv: kv[1], default=("", 0.0))
    return best[0] if best[1] > 0 else ""


def _check_environment(ctx: ExperimentContext) -> None:
    from experiments.flink.cluster import check_java, ensure_flink_venv

    ctx.progress(f"java: {check_java()}")
    ensure_flink_venv()


def run(ctx: ExperimentContext) -> ExperimentResult:
    from experiments.flink.cluster import ClusterConfig, FlinkCluster

    s = _settings(ctx.quick)
    _check_environment(ctx)  # FlinkClusterError (exit 3) when Java or the wheel is missing
    started = time.monotonic()
    with FlinkCluster(ClusterConfig.free_ports(task_slots=SLOTS)) as cluster:
        ctx.progress(f"cluster up at {cluster.rest_url} ({time.monotonic() - started:.0f} s)")
        out = _body(ctx, cluster, s)
    return _result(s, out, time.monotonic() - started)


def _body(ctx, cluster, s) -> dict:
    queries = s["queries"]
    n = sum(len(measurement_order(len(s["setups"][q].calibration), len(s["setups"][q].tests), s.get("passes", 1))) + 1
            for q in queries)
    out = {"cores": os.cpu_count() or 1, "queries": {}, "failed": {}}
    with ctx.steps(n, "flink-sql measurements") as steps:
        for q in queries:
            try:
                out["queries"][q] = _measure_query(ctx, cluster, s, s["setups"][q], out["cores"], steps)
            except Exception as err:  # noqa: BLE001 - one query's failure must not lose the others' minutes
                if len(queries) == 1:
                    raise
                out["failed"][q] = f"{type(err).__name__}: {err}"
                ctx.progress(f"{q} FAILED: {out['failed'][q]}")
    if not out["queries"]:
        raise ExperimentError("every query failed", field="queries", value=out["failed"])
    return out


def query_spec(setup: QuerySetup, rate_per_table: int, person_rate: int | None = None):
    from experiments.flink.sql import NexmarkSqlSpec

    # parallelism 2 at submission, sources 1: a REBALANCE behind each source (experiments.flink.sql)
    return NexmarkSqlSpec(query=setup.query, rate_per_s=int(rate_per_table), parallelism=2,
                          source_parallelism=1, person_rate_per_s=person_rate,
                          name=f"augury-flink-sql-{setup.query}")


def step_rates(setup: QuerySetup, target: float, n_sources: int) -> tuple[int, int | None]:
    """The one step's datagen rates for a job input of ``target`` tuples/s: (``rate_per_s``,
    ``person_rate_per_s``). Every table at target / sources, or with a ``step_mix`` the person
    table at its share and the other tables at theirs (q8: one other)."""
    mix = dict(setup.step_mix)
    if not mix:
        return int(round(target / n_sources)), None
    others = {k: v for k, v in mix.items() if k != "person"}
    if "person" not in mix or len(set(others.values())) != 1:
        raise ExperimentError("a step mix gives the person table and one share for the others",
                              field="step_mix", value=setup.step_mix)
    return int(round(target * next(iter(others.values())))), int(round(target * mix["person"]))


def rescale_to(job: SqlJob, config: dict[str, int]) -> float:
    """Rescale to ``config`` unless it is in force; the rescale's seconds (0 when none)."""
    current = job.graph.config()
    if all(current.get(k) == v for k, v in config.items()):
        return 0.0
    restart = job.rescale(config)
    job.graph = job.source.graph()
    return restart


def calibration_config():
    """The run's ``CalibrationConfig``: every window counts for the service time (a window
    operator such as q8's WindowJoin is busy only when its windows fire)."""
    from modeler.calibrate import CalibrationConfig

    return CalibrationConfig(min_busy_fraction=0.0)


def _measure_query(ctx, cluster, s, setup: QuerySetup, cores: int, steps) -> dict:
    # One job per query for calibration and the max-rate tests, rescaled between them as augury
    # rescales the job it calibrated on (module docstring, "One job"); at saturation: the datagen
    # asks far more than any configuration carries ("Calibration at saturation").
    job = SqlJob(cluster, query_spec(setup, OVERLOAD_RATE), setup.window_in(s))
    try:
        return _measure_on(ctx, job, s, setup, cores, steps, base_job_config=job.graph.config())
    finally:
        job.cancel()


def _measure_on(ctx, job: SqlJob, s, setup: QuerySetup, cores: int, steps, base_job_config) -> dict:
    """Calibration and max-rate tests on ``job`` (overloaded), then the one step on a job of its
    own; ``base_job_config``: the job's configuration at submission (the vertices no group scales
    keep theirs)."""
    from modeler.calibrate import Calibrator
    from modeler.modelfile import parse_model
    from modeler.queueing import predict
    from scheduler.observe import history_frames
    from scheduler.plan import PlanConfig, plan

    cluster = job.cluster
    q, w_s, n = setup.query, setup.window_in(s), s["windows"]
    # 1. calibration
    calib_windows, calib_rows, topology, ds2_rows, engine_cpu, source_cpu = [], [], None, [], [], []
    n_sources = len(job.sources)
    first_on_job = True  # (two warm-up windows right after submission, one after a rescale)

    def calibrate_at(t) -> None:
        nonlocal first_on_job, topology
        steps.advance(f"{q} calibration {t} at saturation")
        restart = rescale_to(job, setup.config(t))
        # The TaskManager's CPU over the calibration windows (after the warm-up window, two
        # right after submission: JIT compilation burns CPU in the first seconds): the datagen's
        # CPU, which no busy time shows, is what it has beyond the operators' (module
        # docstring, "Source CPU").
        job.windows(0, skip=2 if first_on_job else 1)
        first_on_job = False
        t0, cpu0 = job.source.cpu_sample()
        h0, src0 = time.monotonic(), cluster.source_threads_cpu_s()
        ws = job.windows(setup.calibration_windows or s["calibration_windows"], skip=0)
        h1, src1 = time.monotonic(), cluster.source_threads_cpu_s()
        t1, cpu1 = job.source.cpu_sample()
        if topology is None:
            topology = job.graph.topology()
        m = summarize_windows(ws, job)
        cpu_cores = (cpu1 - cpu0) / (t1 - t0) if t1 > t0 else float("nan")
        source_cores = (src1 - src0) / (h1 - h0) if h1 > h0 else float("nan")
        starts = [pd.Timestamp(w.start_s, unit="s", tz="UTC") for w in ws]
        engine_cpu.extend({"window_start": ts, "cpu_cores": cpu_cores} for ts in starts)
        source_cpu.extend({"window_start": ts, "cpu_cores": source_cores} for ts in starts)
        # each source's rate: the records in right behind it (module docstring, "Input rate")
        ws = [with_source_rates(w, source_input_rates(w, job.sources, job.graph)) for w in ws]
        calib_windows.extend(ws)
        for w in ws:
            for name, o in w.operators.items():
                ds2_rows.append({"operator": name, "processed_rate": o.processed_rate, "busy_mean": o.busy_mean,
                                 "parallelism": o.parallelism, "input": w.input_rate})
        config = _fmt(job.graph.config())
        calib_rows.append({"query": q, "configuration": config,
                           "pass": 1 + sum(r["configuration"] == config for r in calib_rows),
                           "rate_per_table": OVERLOAD_RATE,
                           "job_input_rate": round(m["rate"], 1), "measured_input_rate": round(m["rate"], 1), "source_mix": _fmt_mix(m["mix"]),
                           "backpressure_max": round(m["bp_max"], 3), "rescale_s": round(restart, 1),
                           "taskmanager_cpu_cores": round(cpu_cores, 3), "source_threads_cpu_cores": round(source_cores, 3),
                           "source_us_per_tuple": round(source_cores / m["rate"] * 1e6, 3) if m["rate"] > 0 else float("nan"),
                           **{f"busy_{k}": round(v, 3) for k, v in m["busy"].items() if np.isfinite(v)}})
        ctx.progress(f"{q} calibration {t} at saturation: input {m['rate']:.0f}/s, source threads "
                     f"{source_cores:.2f} cores, TaskManager {cpu_cores:.2f} cores, busy "
                     + ", ".join(f"{k}={v:.2f}" for k, v in m["busy"].items() if np.isfinite(v)))

    # 2. max sustainable rate: the same overloaded job rescaled through the test configurations,
    # measured before the fit (which uses the calibration windows only): the fit's CPU would
    # otherwise compete with the overloaded job for the 2 cores (CI's quick run: 182 s, was 113)
    tests = [{**base_job_config, **setup.config(t)} for t in setup.tests]
    test_windows: list[list] = [[] for _ in tests]
    test_cores: list[list[dict]] = [[] for _ in tests]
    rescales = []

    def test_at(k: int) -> None:
        steps.advance(f"{q} max rate {setup.tests[k]}")
        rescales.append(rescale_to(job, tests[k]))
        # What the cores did meanwhile (from /proc): the datagen thread near one core is a
        # generator at its limit; the machine at all its cores with the cluster below them is
        # other load taking cores the model counts as the job's.
        job.windows(0, skip=1)
        before, since = cluster.cpu_reading(), time.monotonic()
        test_windows[k].extend(job.windows(n, skip=0))
        test_cores[k].append(cores_used(before, cluster.cpu_reading(), time.monotonic() - since))

    # Counterbalanced order (module docstring, "Drift"): calibration, tests, then with two passes
    # the tests and the calibration again in reverse, so a drift of the job over its life (the
    # datagen's CPU per tuple moved 25 % within one job in run 2ed8eef7) falls on both alike.
    for kind, k in measurement_order(len(setup.calibration), len(tests), s.get("passes", 1)):
        if kind == "calibration":
            calibrate_at(setup.calibration[k])
        else:
            test_at(k)
    measured = []
    for ws, cs in zip(test_windows, test_cores):
        m = summarize_windows(ws, job)
        m["cores"] = {key: float(np.mean([c[key] for c in cs])) for key in cs[0]}
        measured.append(m)
    # the fit, then the step at its own rate: this job stops first (cancelling again is harmless)
    job.cancel()

    topology = dict(topology, resources={"cores": cores})
    ops, edges = history_frames(calib_windows)
    fitted = Calibrator(calibration_config()).fit(
        ops, edges, topology=parse_model(topology, require_profiles=False), engine_cpu=pd.DataFrame(engine_cpu),
        source_cpu=pd.DataFrame(source_cpu), at_max_rate=True)
    model = fitted.model_
    scale = float(fitted.capacity_scale_.value)
    fits = {op: {"service_ms": float(f.service_time_ms.value),
                 "cpu_share": float(f.cpu_share.value) if f.cpu_share is not None else float("nan"),
                 "cpu_share_source": f.cpu_share.source if f.cpu_share is not None else "",
                 "cpu_ms_per_tuple": float("nan")}
            for op, f in fitted.operators_.items()}
    fits.update({src: {"service_ms": float("nan"), "cpu_share": float("nan"), "cpu_share_source": "",
                       "cpu_ms_per_tuple": float(f.value)} for src, f in fitted.sources_.items()})
    overhead = float(model.cpu_overhead_per_instance)
    ctx.progress(f"{q} calibrated: " + ", ".join(
        f"{k}: {v['cpu_ms_per_tuple'] * 1000:.2f} us CPU per tuple" if np.isfinite(v["cpu_ms_per_tuple"])
        else f"{k}: {v['service_ms']:.4f} ms, c={v['cpu_share']:.2f}" for k, v in fits.items())
        + (f", TaskManager idle {fitted.engine_idle_cores_:.3f} cores" if fitted.engine_idle_cores_ is not None else "")
        + f", engine CPU outside the operators {model.engine_cpu_ms_per_tuple * 1000:.2f} us per tuple"
        + f", CPU overhead per instance beyond the cores {overhead:.4f}"
        + (f" (fitted, holdout {fitted.cpu_overhead_.holdout_error:.1%})" if fitted.cpu_overhead_ is not None
           else " (not fitted)")
        + f", capacity scale {scale:.3f} (holdout {fitted.capacity_scale_.holdout_error:.1%})")
    true_rates = pooled_true_rates(ds2_rows)
    inputs = {}
    for r in ds2_rows:
        inputs.setdefault(r["operator"], [0.0, 0.0])
        inputs[r["operator"]][0] += r["processed_rate"]
        inputs[r["operator"]][1] += r["input"]
    visits = {op: a / b for op, (a, b) in inputs.items() if b > 0}

    base = base_job_config
    predicted = [float(predict(model, c, 1.0).max_rate) for c in tests]
    ds2 = [ds2_linear_max_rate(true_rates, visits, c) for c in tests]
    for c, t, pm, dm, m in zip(tests, setup.tests, predicted, ds2, measured):
        mixed = "" if len(job.sources) <= 1 else (
            f" ({predict(with_source_mix(model, m['mix']), c, 1.0).max_rate:.0f}/s at the measured mix "
            f"{_fmt_mix(m['mix'])})")
        ctx.progress(f"{q} max rate {t}: predicted {pm:.0f}/s{mixed}, DS2 linear {dm:.0f}/s, measured "
                     f"{m['rate']:.0f}/s (operators back-pressured {m['bp_mean']:.2f}; cores used: "
                     + ", ".join(f"{k} {v:.2f}" for k, v in m["cores"].items()) + ")")
    rows = []
    for c, pm0, dm, m in zip(tests, predicted, ds2, measured):
        inst = int(sum(c.values()))
        # like for like: the max rate at the mix the measured job ran at (module docstring,
        # "Input mix"); the prediction at the model's own mix is kept beside it
        pm = float(predict(with_source_mix(model, m["mix"]), c, 1.0).max_rate)
        # the busiest operator's mean busy share: near 1 it was the bottleneck; well below 1 with the
        # source not back-pressured, the datagen was (source_limited)
        busiest = max(((k, v) for k, v in m["busy"].items() if np.isfinite(v)), key=lambda kv: kv[1],
                      default=("", float("nan")))
        rows.append({"query": q, "configuration": _fmt(c), "instances": inst,
                     "above_cores": inst > cores, "predicted_max_rate": round(pm, 1),
                     "predicted_at_model_mix": round(pm0, 1), "source_mix": _fmt_mix(m["mix"]),
                     # the model before its capacity scale (exact: every max rate scales by it)
                     "predicted_unscaled": round(pm / scale, 1),
                     "unscaled_error": round(rel_error(pm / scale, m["rate"]), 4),
                     "ds2_linear_max_rate": round(dm, 1), "measured_max_rate": round(m["rate"], 1),
                     "measured_sd": round(m["rate_sd"], 1), "max_rate_error": round(rel_error(pm, m["rate"]), 4),
                     "ds2_error": round(rel_error(dm, m["rate"]), 4),
                     "source_limited": source_limited(m["bp_mean"], busiest[1]),
                     "busiest": busiest[0], "busiest_busy": round(busiest[1], 3),
                     "backpressure_mean": round(m["bp_mean"], 3),
                     **{f"{k}_cores": round(v, 3) for k, v in m.get("cores", {}).items()}})

    # 3. one step: the planner's configuration for the target (module docstring, 'One step')
    start = {**base, **setup.config(setup.start)}
    target = float(round(setup.target_share * max(m["rate"] for m in measured), -2))
    # the cluster has SLOTS slots (one subtask of every vertex per slot): the planner searches
    # within them, so a target the model thinks out of reach still gets the most the cluster can
    # run, which is applied and measured (not the topology's 128, which could never be applied)
    planned_model = with_source_mix(model, dict(setup.step_mix)) if setup.step_mix else model
    proposal = plan(within_slots(planned_model, SLOTS), target, PlanConfig(utilization_target=UTILIZATION_TARGET))
    planned = {k: int(v) for k, v in proposal.config.items()}
    steps.advance(f"{q} one step -> {planned} for {target:.0f}/s")
    step = {"query": q, "target": target, "start": start, "planned": planned, "feasible": bool(proposal.feasible),
            "planned_instances": int(sum(planned.values())), "predicted_max_at_plan": float(proposal.prediction.max_rate),
            "before": None, "after": None, "restart_s": float("nan"), "mix": setup.step_mix}
    job = SqlJob(cluster, query_spec(setup, *step_rates(setup, target, n_sources)), w_s)
    try:
        rescale_to(job, start)
        step["before"] = summarize_windows(job.windows(s["step_before_windows"], skip=1), job)
        step["restart_s"] = rescale_to(job, planned)
        step["after"] = summarize_windows(job.windows(n, skip=1), job)
    finally:
        job.cancel()
    ctx.progress(f"{q} one step {_fmt(start)} -> {_fmt(planned)} for {target:.0f}/s: before "
                 f"{step['before']['rate']:.0f}/s, after {step['after']['rate']:.0f}/s, back pressure "
                 f"{step['after']['bp_mean']:.3f}")
    return {"rows": rows, "calib_rows": calib_rows, "fits": fits, "true_rates": true_rates, "visits": visits,
            "step": step, "rescales": rescales, "topology": topology, "cpu_overhead_per_instance": overhead,
            "capacity_scale": scale, "capacity_scale_holdout": float(fitted.capacity_scale_.holdout_error),
            "engine_cpu_ms_per_tuple": float(model.engine_cpu_ms_per_tuple),
            "calibration_data": {"ops": ops, "edges": edges, "engine_cpu": pd.DataFrame(engine_cpu),
                                 "source_cpu": pd.DataFrame(source_cpu)}}


def within_slots(model, slots: int):
    """``model`` with every operator's max parallelism at most ``slots`` (Flink's slot sharing:
    a slot holds one subtask of each vertex, so a vertex can run at most ``slots`` subtasks)."""
    return replace(model, operators=tuple(
        replace(op, max_parallelism=min(op.max_parallelism, slots), min_parallelism=min(op.min_parallelism, slots))
        for op in model.operators))


def _fmt_mix(mix: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.3f}" for k, v in mix.items())


def _fmt(c: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in c.items())


def _result(s, out: dict, seconds: float) -> ExperimentResult:
    cores = out["cores"]
    table = pd.DataFrame([r for qo in out["queries"].values() for r in qo["rows"]])
    calib = pd.DataFrame([r for qo in out["queries"].values() for r in qo["calib_rows"]])
    fits = pd.DataFrame([{"query": q, "operator": op, "service_time_ms": round(f["service_ms"], 5),
                          "cpu_share": round(f["cpu_share"], 3), "cpu_share_source": f["cpu_share_source"],
                          "cpu_ms_per_tuple": round(f.get("cpu_ms_per_tuple", float("nan")), 6),
                          "ds2_true_rate_per_instance": round(qo["true_rates"].get(op, float("nan")), 1),
                          "visit_ratio": round(qo["visits"].get(op, float("nan")), 5),
                          "cpu_overhead_per_instance": round(qo.get("cpu_overhead_per_instance", 0.0), 5),
                          "engine_cpu_us_per_tuple": round(qo.get("engine_cpu_ms_per_tuple", 0.0) * 1000.0, 4),
                          "capacity_scale": round(qo.get("capacity_scale", float("nan")), 4),
                          "capacity_scale_holdout_error": round(qo.get("capacity_scale_holdout", float("nan")), 4)}
                         for q, qo in out["queries"].items() for op, f in qo["fits"].items()])
    steps, summary_rows, metrics = [], [], {}
    for q, qo in out["queries"].items():
        st = qo["step"]
        cheapest = cheapest_carrying(table, q, st["target"])
        a, b = st["after"], st["before"]
        ok = a is not None and one_step_verdict(a["rate"], a["bp_mean"], st["target"])
        lean = cheapest is not None and st["planned_instances"] <= 1.1 * cheapest
        steps.append({"query": q, "target_rate": st["target"], "start": _fmt(st["start"]),
                      "before_rate": round(b["rate"], 1) if b else None,
                      "before_backpressure_mean": round(b["bp_mean"], 3) if b else None,
                      "planned": _fmt(st["planned"]), "plan_feasible": st["feasible"],
                      "planned_instances": st["planned_instances"],
                      "predicted_max_at_plan": round(st["predicted_max_at_plan"], 1),
                      "after_rate": round(a["rate"], 1) if a else None,
                      "after_backpressure_mean": round(a["bp_mean"], 3) if a else None,
                      "step_mix": _fmt_mix(dict(st["mix"])) if st.get("mix") else "equal rates per table",
                      "after_source_mix": _fmt_mix(a["mix"]) if a and "mix" in a else None,
                      "after_backpressure_max": round(a["bp_max"], 3) if a else None,
                      "after_backpressure_operator": a.get("bp_operator", "") if a else None,
                      "start_carried_target": (b["rate"] >= THROUGHPUT_OK * st["target"]) if b else None,
                      "rescale_s": round(st["restart_s"], 1), "meets_target": ok,
                      "cheapest_measured_instances": cheapest,
                      "within_10pct_of_cheapest": lean})
        t = table[table["query"] == q]
        row = {"query": q}
        for part, sel in (("all", t), ("above_cores", t[t["above_cores"]]), ("at_or_below_cores", t[~t["above_cores"]])):
            e, d = error_summary(sel["max_rate_error"]), error_summary(sel["ds2_error"])
            row.update({f"n_{part}": e["n"], f"median_abs_error_{part}": round(e["median"], 4),
                        f"within_15pct_{part}": round(e["within"], 3), f"ds2_median_abs_error_{part}": round(d["median"], 4)})
        u = error_summary(t["unscaled_error"])
        row.update({"median_abs_error_unscaled": round(u["median"], 4), "within_15pct_unscaled": round(u["within"], 3),
                    "capacity_scale": round(qo.get("capacity_scale", float("nan")), 4)})
        row["source_limited"] = int(t["source_limited"].sum())
        row["one_step"] = "success" if ok else "FAILED"
        row["one_step_within_10pct"] = bool(lean)
        summary_rows.append(row)
        metrics[f"{q}.max_rate_abs_error_median"] = row["median_abs_error_all"]
        metrics[f"{q}.share_within_15pct"] = row["within_15pct_all"]
        metrics[f"{q}.ds2_abs_error_median"] = row["ds2_median_abs_error_all"]
        metrics[f"{q}.one_step_success"] = float(ok)
        metrics[f"{q}.cpu_overhead_per_instance"] = float(qo.get("cpu_overhead_per_instance", 0.0))
        metrics[f"{q}.capacity_scale"] = float(qo.get("capacity_scale", float("nan")))
        metrics[f"{q}.max_rate_abs_error_median_unscaled"] = row["median_abs_error_unscaled"]
    by_query = pd.DataFrame(summary_rows)
    one = pd.DataFrame(steps)
    e_all, e_above = error_summary(table["max_rate_error"]), error_summary(table[table["above_cores"]]["max_rate_error"])
    e_below = error_summary(table[~table["above_cores"]]["max_rate_error"])
    d_all, d_above = error_summary(table["ds2_error"]), error_summary(table[table["above_cores"]]["ds2_error"])
    metrics.update({
        "max_rate_abs_error_median": e_all["median"], "share_within_15pct": e_all["within"],
        "max_rate_abs_error_median_above_cores": e_above["median"], "share_within_15pct_above_cores": e_above["within"],
        "max_rate_abs_error_median_at_or_below_cores": e_below["median"],
        "ds2_abs_error_median": d_all["median"], "ds2_abs_error_median_above_cores": d_above["median"],
        "max_rate_abs_error_median_unscaled": error_summary(table["unscaled_error"])["median"],
        "test_configs": float(len(table)), "test_configs_above_cores": float(e_above["n"]),
        "source_limited_configs": float(table["source_limited"].sum()),
        "one_step_successes": float(one["meets_target"].sum()), "queries": float(len(one)),
        "one_step_within_10pct": float(one["within_10pct_of_cheapest"].sum()),
        "one_step_goal_met": float((one["meets_target"] & one["within_10pct_of_cheapest"]).sum()),
        "cores": float(cores), "experiment_seconds": seconds})
    params = {"queries": ",".join(out["queries"]), "failed_queries": ",".join(out.get("failed", {})), "window_s": s["window_s"], "windows": s["windows"],
              "calibration_windows": s["calibration_windows"], "cores": cores, "slots": SLOTS,
              "query_window_s": "; ".join(f"{q}: {s['setups'][q].window_in(s):g}" for q in out["queries"]),
              "overload_rate_per_table": OVERLOAD_RATE, "utilization_target": UTILIZATION_TARGET,
              "calibration_configs": "; ".join(f"{q}: " + " ".join(f"{t}" for t in s["setups"][q].calibration) + " at saturation"
                                               for q in out["queries"]),
              "test_configs": "; ".join(f"{q}: " + " ".join(str(t) for t in s["setups"][q].tests)
                                        for q in out["queries"])}
    goal = (e_all["median"] <= GOAL_MEDIAN and e_all["within"] >= 0.8 and
            all(r["median_abs_error_all"] <= GOAL_MEDIAN and r["within_15pct_all"] >= 0.8 for r in summary_rows))
    def why_back_pressured(q: str) -> str:
        st = one[one["query"] == q].iloc[0]
        bp = st["after_backpressure_mean"]
        if bp is None or not bp > BACKPRESSURE_OK:
            return ""
        where = f" at {st['after_backpressure_operator']}" if st.get("after_backpressure_operator") else ""
        return f" (back pressure {bp:.2f}{where})"

    per_q = "; ".join(f"{r['query']}: median |error| {r['median_abs_error_all']:.1%}, {r['within_15pct_all']:.0%} "
                      f"within 15 % (n={r['n_all']}), DS2 linear {r['ds2_median_abs_error_all']:.1%}, one step "
                      f"{r['one_step']}{why_back_pressured(r['query'])}" for r in summary_rows)
    own = [f"{q} {s['setups'][q].window_s:g} s" for q in out["queries"] if s["setups"][q].window_s]
    own_windows = f" ({', '.join(own)}: whole window periods)" if own else ""
    summary = (
        f"Flink SQL queries {', '.join(out['queries'])} on one TaskManager sharing {cores} cores; each calibrated "
        f"from <= 3 live configurations, max sustainable rate predicted at {len(table)} unseen configurations "
        f"({e_above['n']} with more instances than cores). Overall median |error| {e_all['median']:.1%}, "
        f"{e_all['within']:.0%} within 15 % (above the core count: median {e_above['median']:.1%}, "
        f"{e_above['within']:.0%} within 15 %); DS2's linear extrapolation: median |error| {d_all['median']:.1%}; "
        f"the model before its capacity scale (fitted to the calibration configurations' own max rates): "
        f"{metrics['max_rate_abs_error_median_unscaled']:.1%}. "
        f"Issue 23's accuracy goal (median <= 10 %, >= 80 % within 15 %, per query and overall): "
        f"{'met' if goal else 'missed'}. One step: {int(one['meets_target'].sum())}/{len(one)} queries met the "
        f"target without sustained back pressure, {int(one['within_10pct_of_cheapest'].sum())}/{len(one)} planned "
        f"at most 10 % more instances than the cheapest measured configuration carrying the target, "
        f"{int(metrics['one_step_goal_met'])}/{len(one)} both (issue 23's step goal). Per query: {per_q}. {int(table['source_limited'].sum())} of "
        f"{len(table)} measurements were source-limited (the datagen could not generate more; its CPU per tuple is "
        f"measured from its own threads, at the calibration configurations' saturation). One run on a live 2-core machine, {s['windows']} windows of {s['window_s']:g} s{own_windows} "
        f"per configuration: numbers move with other load."
        + ("".join(f" {q} FAILED ({e})." for q, e in out.get("failed", {}).items())))
    return ExperimentResult(params=params, metrics=metrics,
                            tables={"configurations": table, "by_query": by_query, "one_step": one,
                                    "calibration": calib, "fits": fits, **calibration_tables(out)},
                            summary=summary)


def calibration_tables(out: dict) -> dict[str, pd.DataFrame]:
    """Every calibration window the queries read, as tables (a ``query`` column first): the
    operator frame (``calibration_windows``), the edge frame (``calibration_edge_windows``), the
    TaskManager's and the source threads' CPU per window (``calibration_cpu``), and each query's
    topology as model-file JSON (``topologies``). Empty when no query kept its data."""
    import json

    ops, edges, cpu, tops = [], [], [], []
    for q, qo in out["queries"].items():
        data = qo.get("calibration_data")
        if not data:
            continue
        ops.append(data["ops"].assign(query=q))
        edges.append(data["edges"].assign(query=q))
        both = data["engine_cpu"].rename(columns={"cpu_cores": "taskmanager_cpu_cores"}).merge(
            data["source_cpu"].rename(columns={"cpu_cores": "source_threads_cpu_cores"}), on="window_start", how="outer")
        cpu.append(both.assign(query=q))
        tops.append({"query": q, "topology_json": json.dumps(qo.get("topology") or {}, sort_keys=True)})
    if not ops:
        return {}

    def first(frames):
        f = pd.concat(frames, ignore_index=True)
        return f[["query"] + [c for c in f.columns if c != "query"]]

    return {"calibration_windows": first(ops), "calibration_edge_windows": first(edges),
            "calibration_cpu": first(cpu), "topologies": pd.DataFrame(tops)}


def refit_from_tables(tables: Mapping[str, pd.DataFrame], query: str, config=None):
    """A query's calibration refitted offline from a run's ``calibration_tables`` (as logged: the
    CSVs read back), with ``config`` (``CalibrationConfig``; the run's when None). Returns the
    fitted ``Calibrator``; the same call as the run's, so a model change can be judged on
    recorded windows without the cluster."""
    import json

    from modeler.calibrate import Calibrator
    from modeler.modelfile import parse_model

    def of(name):
        f = tables[name]
        f = f[f["query"] == query].drop(columns="query")
        if "window_start" in f.columns:
            f = f.assign(window_start=pd.to_datetime(f["window_start"], utc=True))
        return f

    top = tables["topologies"]
    topology = json.loads(top[top["query"] == query]["topology_json"].iloc[0])
    cpu = of("calibration_cpu")
    return Calibrator(config or calibration_config()).fit(
        of("calibration_windows"), of("calibration_edge_windows"), topology=parse_model(topology, require_profiles=False),
        engine_cpu=cpu[["window_start", "taskmanager_cpu_cores"]].rename(columns={"taskmanager_cpu_cores": "cpu_cores"}),
        source_cpu=cpu[["window_start", "source_threads_cpu_cores"]].rename(
            columns={"source_threads_cpu_cores": "cpu_cores"}), at_max_rate=True)
