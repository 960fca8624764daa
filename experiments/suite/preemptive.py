"""``preemptive``: replay real traces, time-compressed, on the testbed for every policy.

Traces (bundled: ``experiments.bundled``, sources and licences in its traces README): WC98 (World Cup 1998, tournament weeks), NYC taxi,
AMZN tweets. Each replayed period follows three weeks of history; the trace is scaled so its peak
over history and replay is ``peak_over_capacity`` x the job's max rate at its default
configuration (the job: ``examples/wordcount.yaml``, the true model). The replay runs
``speedup`` x faster than real time (rates unchanged; every policy's time constants keep their
real-time meaning, see ``experiments.replay``).

Policies:

* **augury** (pre-emptive: the product loop, ``scheduler.loop.ControlLoop`` with
  ``scheduler.deciders.PreemptiveDecider``, on a model *learned from measurements*: a warm-up
  recording on the testbed through ingest -> Spark -> calibrate; exactly what ``augury run``
  runs): every ``replan_s`` of trace time (and at once when the load measured over
  the last forecasting step leaves the forecast's ``band_quantile`` upper band: a forecast miss) the forecaster
  (``modeler.forecast``, ``auto``; fitted on the history up to now every ``refit_s``, updated with
  the newest history in between) gives its ``quantile`` path and ``scheduler.schedule.schedule``
  turns it into a timeline (at most ``max_reconfigurations_per_day`` counting the changes already
  made in the last 24 h, lead time, stabilization before scale-down, the measured load as a
  floor, the configuration in force kept when it suffices); the model decider is the floor (the
  configuration applied is the per-operator maximum of the schedule's and the model decider's)
  and the reactive policy decides while the model is on probation.
  Its targets: the latency SLO, the utilization only a 0.9 ceiling (``scheduler.targets``:
  the SLO sizes). **augury/u0.7**: the same at the peers' fixed 0.7 target, to show what the
  SLO-driven sizing is worth.
* **flink-autoscaler**, **ds2**, **ds2-max** (a labelled variant: DS2 sized from the busiest
  instance), **dhalion**: the baselines (``experiments.baselines``; ``PEERS`` there lists each
  one's differences from the original). **ds2/uniform-keys**: DS2 on the same job with uniform
  keys, where its no-skew assumption holds.
* **static-peak**: the cheapest configuration for the replayed period's actual peak, never changed.
* **oracle**: knows the trace; every ``oracle_interval_s`` the cheapest configuration for the
  peak until the next decision plus restart (at that cadence; not a lower bound: policies that
  change more often, or size hotter, use less).
* **hindsight/<s>** (references, not peers; ``HINDSIGHT_PRICES``): perfect foresight under the
  replay's restart charge. The cheapest schedule for the actual load (``scheduler.schedule``'s
  priced solver on the true model at augury's targets, instance-hours priced at ``<s>`` seconds
  of violation each, every change at ``restart_s x mu / (mu - lambda)``), replayed like every
  policy. The prices trace the frontier of violation minutes against instance-hours; the
  ``goals`` table reads off the fewest violation minutes reached within the Flink rules'
  instance-hours, i.e. whether issue 20's two goals can both be met by any schedule.
* **hindsight** (a bound, not a replay): every window at the fewest instances meeting the SLO and
  utilization 0.7 for the load it saw, by exhaustive search on the true model
  (``experiments.reference.TrueOracle``), no restarts: the lower bound each policy's
  instance-hours are divided by (also at 0.9, augury's ceiling).

Metrics per trace and policy: SLO-violation minutes (sink p99 > SLO or source backlog > 1 s of
input, in trace minutes), instance-hours (trace hours), reconfigurations per day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.harness import ExperimentContext, ExperimentError, ExperimentResult
from scheduler.targets import SLO_UTILIZATION_CEILING

NAME = "preemptive"
DESCRIPTION = ("real traces (WC98, NYC taxi, AMZN tweets) replayed time-compressed: SLO-violation minutes, "
               "instance-hours, reconfigurations/day for augury pre-emptive, Flink rules, DS2, Dhalion, "
               "static peak, oracle")

TRACES = {
    # name: (file, history start, replay start)
    "wc98": ("wc98_requests_per_minute.csv", "1998-06-01", "1998-06-22"),
    "nyc_taxi": ("nab_nyc_taxi.csv", "2014-07-01", "2014-07-22"),
    "amzn_tweets": ("nab_Twitter_volume_AMZN.csv", "2015-03-11", "2015-04-01"),
    # 14 days in all: 11 of history, the last 3 replayed
    "elb": ("nab_elb_request_count_8c0756.csv", "2014-04-10", "2014-04-21"),
}
"""The evaluation days: ``days`` from each replay start. augury's settings were chosen on other
days of the same traces (``TUNING_DAYS``), never on these."""
TUNING_DAYS = {
    "wc98": ("wc98_requests_per_minute.csv", "1998-05-25", "1998-06-15"),
    "nyc_taxi": ("nab_nyc_taxi.csv", "2014-08-01", "2014-08-19"),
    "amzn_tweets": ("nab_Twitter_volume_AMZN.csv", "2015-03-01", "2015-03-24"),
    "elb": ("nab_elb_request_count_8c0756.csv", "2014-04-10", "2014-04-17"),
}
"""Held-out days (one per trace, none in the evaluation replays) on which augury's
pre-emptive settings were compared before the evaluation ran (``docs/RESULTS.md`` says how)."""
DAGS = ("wordcount", "wordcount/uniform-keys")
"""The jobs replayed: the bundled WordCount (Zipf-skewed keys) and the same job with uniform
keys (``experiments.suite.convergence.unskewed``: no key skew, DS2's assumption holds)."""
HINDSIGHT = "hindsight"
"""Policies named ``hindsight/<s>`` follow the cheapest schedule for the actual load
(``experiments.baselines.HindsightSchedulePolicy``), priced at ``<s>`` seconds of violation per
instance-hour: references for what perfect foresight reaches under the replay's restart charge,
not peers."""


def hindsight_price(policy: str) -> float:
    """``hindsight/<s>`` -> ``<s>`` (seconds of violation per instance-hour)."""
    try:
        return float(policy.split("/", 1)[1])
    except (IndexError, ValueError):
        raise ExperimentError("expected hindsight/<seconds per instance-hour>", field="policy", value=policy) from None


PERFECT_FORECAST = "augury/perfect"
"""augury as evaluated, but with a forecaster that knows the load
(``experiments.tracereplay.PerfectForecaster``): what its schedule rules cost without forecast
errors (a diagnostic of ``preemptive_tune``, not replayed by the experiment)."""
HINDSIGHT_PRICES = (5.0, 20.0, 60.0)
"""The ``hindsight/<s>`` references replayed (seconds of violation per instance-hour). Chosen on
the tuning days (``TUNING_DAYS``, 2026-12-06) to span the Flink rules' instance-hours: at 5 the
schedules change 0-1.5 times a day, at 60 up to 10 times."""
HINDSIGHT_POLICIES = tuple(f"{HINDSIGHT}/{p:g}" for p in HINDSIGHT_PRICES)
UNSKEWED_POLICIES = ("augury", "flink-autoscaler", "ds2", "dhalion", "static-peak", "oracle") + HINDSIGHT_POLICIES
"""The policies replayed on the uniform-keys job (the skewed job's variants are its own)."""
HEADLINE = ("augury.violation_minutes", "augury.instance_hours", "augury.reconfigurations_per_day",
            "flink_autoscaler.violation_minutes", "flink_autoscaler.instance_hours",
            "augury.violation_reduction_vs_flink", "augury/u0.7.violation_minutes", "augury/u0.7.instance_hours",
            "hindsight.instance_hours", "augury.instance_hours_over_hindsight")
"""The metrics quoted in the README (all are in RESULTS.md)."""
INPUTS = ("seeds", "traces")
"""``--seed`` (repeatable: every trace replayed with each seed, augury learning its model anew)
and ``--trace FILE`` (a user trace, timestamp,count CSV: its last ``days`` replayed after the
history before them)."""
POLICIES = ("augury", "augury/u0.7", "flink-autoscaler", "ds2", "ds2-max", "dhalion", "static-peak", "oracle",
            "ds2/uniform-keys") + HINDSIGHT_POLICIES
UNIFORM_KEYS = ("ds2/uniform-keys",)
"""Policies replayed on the same job with uniform keys (no key skew: DS2's assumption holds;
``experiments.suite.convergence.unskewed``), same trace and scale."""


@dataclass(frozen=True)
class Params:
    model_file: str = "examples/wordcount.yaml"
    days: float = 3.0
    """Days replayed per trace, one continuous replay (``--quick``: 1 day of one trace)."""
    seeds: int = 3
    """Seeds of the full run when none is given (``--seed``): the run's seed and the next ones.
    Each seed re-learns augury's model and re-seeds the testbed."""
    workers: int = 2
    """Processes replaying (job, seed, trace) cases side by side (one core each); 1 = in this
    process."""
    speedup: float = 960.0
    """Trace seconds per simulated second (a day in 90 simulated seconds)."""
    window_s: float = 0.25
    """Metrics window, simulated seconds (4 trace minutes). Settled windows count whole when
    violated; a restart's windows are charged its real-time cost (restart plus backlog drain:
    ``experiments.replay``), so the count does not depend on the window or the compression."""
    restart_s: float = 30.0
    """Restart time per reconfiguration, trace seconds."""
    peak_over_capacity: float = 1.6
    latency_slo_ms: float = 50.0
    utilization_target: float = 0.7
    """The peers' and the oracle's utilization target (the Flink autoscaler's default) and the
    starting configuration's."""
    augury_utilization_target: float | None = None
    """augury's: None = ``scheduler.targets``' rule, a 0.9 ceiling under the latency SLO (the
    SLO sizes); ``augury/u0.7`` replays augury at the peers' 0.7 to show the ceiling's effect."""
    quantile: float = 0.5
    """augury's forecast quantile (``scheduler.deciders.PreemptiveConfig``: chosen on ``TUNING_DAYS``)."""
    forecast_step_s: float = 900.0
    """Forecasting grid (the trace is averaged onto it when finer)."""
    replay_resample_s: float = 300.0
    """The replayed trace's resolution (finer traces are re-binned)."""
    replan_s: float = 2 * 3600.0
    """augury re-plans the schedule this often (trace s), as ``experiments.schedule_eval`` does."""
    refit_s: float = 86400.0
    """augury re-fits the forecaster this often (trace s); re-plans in between condition the
    fitted forecaster on the newest history (``ForecastResult.update``: cheap)."""
    band_quantile: float = 0.9
    """augury re-plans at once, with the measured load as the floor, when the load over the last
    forecasting step leaves the forecast's upper band (this quantile)."""
    reactive_trigger: float = 1.0
    """... or when a settled window's measured input exceeds this fraction of the capacity at the
    utilization target of the configuration in force."""
    horizon_s: float = 30 * 3600.0
    lead_time_s: float = 600.0
    stabilization_s: float = 3600.0
    max_reconfigurations_per_day: int = 6
    violation_s_per_instance_hour: float = 60.0
    """augury prices its planned scale-downs at this exchange rate (``scheduler.schedule`` step
    6) with the engine's ``restart_s``."""
    shift_s: float = 0.0
    """augury's restart-aware issue times (``scheduler.schedule`` step 7): how far a priced change
    may move to a lower load (trace s); the ``preemptive-stateful`` experiment compares."""
    budget_spares_scale_ups: bool = True
    """augury's guard lets a scale-up past a spent daily budget (``GuardRails.budget_spares_scale_ups``).
    Chosen on the held-out tuning days (``TUNING_DAYS``, 2 days each, seed 0, WordCount on its true
    model, 2026-12-05; ``python -m experiments.suite.preemptive_tune``): off 69.0 violation min
    (29.0 of them restarts) / 621.5 inst-h / 23 changes, on 38.4 (34.4) / 631.5 / 25; the Flink
    rules 52.6 (28.6) / 636.9 / 28. Off, a spent budget had held ELB under-provisioned for hours."""
    miss_correction_s: float = 0.0
    """``scheduler.deciders.PreemptiveConfig.miss_correction_s`` (a missed level planned for in one step)."""
    miss_utilization_target: float = 1.0
    """``scheduler.deciders.PreemptiveConfig.miss_utilization_target`` (a missed level sized at this target)."""
    price_running: bool = False
    """augury re-plans may scale the running configuration down at once when that pays
    (``scheduler.deciders.PreemptiveConfig.price_running``)."""
    reserved_reconfigurations: int = 0
    """Of augury's daily budget, changes left unplanned for reactive re-plans
    (``scheduler.deciders.PreemptiveConfig.reserved_reconfigurations``)."""
    anchored_floor: bool = True
    """``scheduler.deciders.PreemptiveConfig.anchored_floor`` (a measured load floors the plan a
    stabilization period from when it was measured, not from every re-plan)."""
    surge_escalation_s: float = 0.0
    """``scheduler.deciders.PreemptiveConfig.surge_escalation_s`` (a load still rising soon after
    a scale-up is planned for one step ahead; trace s)."""
    budget_per_calendar_day: bool = False
    """augury's daily budget per calendar day of the trace, in the schedule
    (``scheduler.deciders.PreemptiveConfig.budget_per_calendar_day``) and the guard
    (``GuardRails.budget_per_calendar_day``), not in every 24 h window."""
    guard_budget: bool = True
    """augury's guard keeps the daily budget too (``GuardRails.max_reconfigurations_per_day``);
    False: only the schedule budgets its changes."""
    committed_scale_down: bool = False
    """``scheduler.deciders.PreemptiveConfig.committed_scale_down`` (a scheduled scale-down of the
    running configuration is not put off by later re-plans)."""
    solver: str = "rules"
    """augury's schedule solver (``scheduler.deciders.PreemptiveConfig.solver``)."""
    oracle_interval_s: float = 4 * 3600.0
    """The oracle decides this often (6 times a day, augury's budget)."""


def settings(params: Params):
    """augury's pre-emptive decider settings (``scheduler.deciders.PreemptiveConfig``)."""
    from scheduler.deciders import PreemptiveConfig

    return PreemptiveConfig(
        quantile=params.quantile, forecast_step_s=params.forecast_step_s, horizon_s=params.horizon_s,
        lead_time_s=params.lead_time_s, stabilization_s=params.stabilization_s,
        max_reconfigurations_per_day=params.max_reconfigurations_per_day, replan_s=params.replan_s,
        refit_s=params.refit_s, reactive_trigger=params.reactive_trigger, band_quantile=params.band_quantile,
        restart_s=params.restart_s,
        violation_s_per_instance_hour=params.violation_s_per_instance_hour, shift_s=params.shift_s,
        solver=params.solver, reserved_reconfigurations=params.reserved_reconfigurations,
        price_running=params.price_running, anchored_floor=params.anchored_floor,
        committed_scale_down=params.committed_scale_down, budget_per_calendar_day=params.budget_per_calendar_day,
        surge_escalation_s=params.surge_escalation_s,
        miss_correction_s=params.miss_correction_s,
        miss_utilization_target=params.miss_utilization_target)


def replay_seed(seed: int, trace: str) -> int:
    """The testbed seed of ``trace``'s replay in a run with ``seed`` (by the trace's place in
    ``TRACES``, so ``--quick`` and the full run replay a trace alike; user traces after them)."""
    names = list(TRACES)
    return seed * 100 + (names.index(trace) if trace in names else len(names) + sum(map(ord, trace)) % 50)


def user_trace(path, days: float) -> tuple[str, str, str]:
    """A user trace file as a ``TRACES`` entry: (file, history start, replay start), replaying
    its last whole ``days`` days after whatever history precedes them."""
    from history.series import load_series

    series = load_series(path)
    step = series.index.to_series().diff().median() if len(series) > 1 else pd.Timedelta(0)
    end = (series.index[-1] + step).normalize()  # the end of the last whole day covered
    start = end - pd.Timedelta(days=math.ceil(days))
    if start <= series.index[0]:
        raise ExperimentError(f"the trace spans {series.index[0]} .. {series.index[-1]}: too short for "
                              f"{days:g} replayed day(s) after some history", file=str(path), field="--trace",
                              value=str(path))
    return str(Path(path).resolve()), str(series.index[0]), str(start.date())


def trace_config(trace: str, params: Params, days: float, seed: int, spec: tuple | None = None):
    """The replay of ``trace`` as ``augury run`` reads it from ``[metrics]``
    (``experiments.tracereplay.TraceReplayConfig``); ``spec``: a user trace's (file, history
    start, replay start) instead of ``TRACES[trace]``."""
    from experiments.tracereplay import TraceReplayConfig

    file, hist_start, replay_start = spec or TRACES[trace]
    return TraceReplayConfig(trace=file, start=replay_start, history_start=hist_start, days=days,
                             speedup=params.speedup, peak_over_capacity=params.peak_over_capacity,
                             resample_s=params.replay_resample_s, restart_s=params.restart_s, seed=seed)


def loop_config(params: Params):
    """augury's loop settings (the ``[slo]``, ``[intervals]`` and ``[guard]`` of a run config):
    the targets, one step per metrics window, the daily budget of the schedule."""
    from scheduler.guard import GuardRails
    from scheduler.loop import LoopConfig
    from scheduler.targets import Targets

    return LoopConfig(interval_s=params.window_s * params.speedup,
                      targets=Targets(utilization_target=params.augury_utilization_target,
                                      latency_slo_ms=params.latency_slo_ms),
                      guard=GuardRails(max_reconfigurations_per_day=(params.max_reconfigurations_per_day
                                                                     if params.guard_budget else None),
                                       budget_spares_scale_ups=params.budget_spares_scale_ups,
                                       budget_per_calendar_day=params.budget_per_calendar_day))


def prepare(trace: str, params: Params, days: float, seed: int, truth, traces_dir, spec: tuple | None = None):
    """``experiments.tracereplay.prepare`` for one trace of the suite (or a user trace: ``spec``)."""
    from experiments.tracereplay import prepare as prepare_trace

    cfg = trace_config(trace, params, days, seed, spec)
    return prepare_trace(truth, Path(traces_dir) / cfg.trace, cfg, window_s=params.window_s,
                         forecast_step_s=params.forecast_step_s, utilization_target=params.utilization_target,
                         latency_slo_ms=params.latency_slo_ms)


def run_augury(model, truth, prepared, params: Params, store=None, on_step=None, name: str = "augury",
               forecaster=None):
    """augury's row: the product loop with the pre-emptive decider on ``model`` (learned from
    measurements), exactly what ``augury run`` runs for a trace replay
    (``experiments.tracereplay.replay_augury``). Returns ``(ReplayResult, LoopController)``."""
    from experiments.replay import preemptive_decider
    from experiments.tracereplay import replay_augury

    loop = loop_config(params)
    return replay_augury(model, truth, prepared, loop,
                         preemptive_decider(settings(params), prepared.history, prepared.day0, loop.model,
                                            forecaster=forecaster),
                         store=store, on_step=on_step, name=name)


def job_truth(dag: str, repo, params: Params):
    """The true model of ``dag`` (one of ``DAGS``)."""
    from experiments.suite.convergence import unskewed
    from modeler.modelfile import load_model

    if dag not in DAGS:
        raise ExperimentError("unknown job", field="dag", value=dag)
    path = Path(repo) / params.model_file
    return unskewed(path) if dag.endswith("/uniform-keys") else load_model(str(path))


def run_trace(trace: str, params: Params, days: float, seed: int, repo, traces_dir, progress,
              learned=None, policies=POLICIES, spec: tuple | None = None, dag: str = DAGS[0],
              truth=None) -> list:
    """Replay ``trace`` for every policy in ``policies``: ``(trace, ReplayResult, controller)``
    each. ``truth``: the job's true model instead of ``dag``'s (e.g. a stateful variant);
    ``learned``: what augury knows (default: the truth). ``augury/...`` policies other than
    ``augury/u0.7`` are augury with ``params`` as given (the caller's variant); ``augury/perfect``
    (``PERFECT_FORECAST``) forecasts with ``experiments.tracereplay.PerfectForecaster``."""
    from experiments.baselines import (DhalionPolicy, DS2Policy, FlinkAutoscalerPolicy, HindsightSchedulePolicy,
                                       OraclePolicy, StaticPolicy, ds2_max)
    from experiments.replay import PolicyController, drive
    from experiments.suite.convergence import unskewed
    from experiments.tracereplay import PerfectForecaster
    from modeler.modelfile import to_graph
    from scheduler.plan import PlanConfig, plan

    if trace not in TRACES and spec is None:
        raise ExperimentError("unknown trace", field="trace", value=trace)
    truth = truth if truth is not None else job_truth(dag, repo, params)
    prepared = prepare(trace, params, days, seed, truth, traces_dir, spec)
    pc = PlanConfig(utilization_target=params.utilization_target, latency_slo_ms=params.latency_slo_ms)
    actual_peak = max(prepared.load.rates)
    graph = to_graph(truth)
    uniform = unskewed(repo / params.model_file)
    controllers = {
        # peers take every duration in policy seconds (``drive`` hands them policy time)
        "flink-autoscaler": lambda: PolicyController(FlinkAutoscalerPolicy(graph), settle=True),
        "ds2": lambda: PolicyController(DS2Policy(graph), settle=True),
        "ds2-max": lambda: PolicyController(ds2_max(graph), settle=True),  # a variant, not DS2
        "dhalion": lambda: PolicyController(DhalionPolicy(graph), settle=True),
        "ds2/uniform-keys": lambda: PolicyController(DS2Policy(graph, name="ds2/uniform-keys"), settle=True),
        "static-peak": lambda: PolicyController(StaticPolicy(name="static-peak")),
        "oracle": lambda: PolicyController(OraclePolicy(truth, prepared.rate_at, interval_s=params.oracle_interval_s,
                                                        restart_s=params.restart_s, sample_s=300.0,
                                                        utilization_target=params.utilization_target,
                                                        latency_slo_ms=params.latency_slo_ms)),
    }
    out = []
    for policy in policies:
        progress(f"{trace} {prepared.day0.date()} +{days:g} d: {policy}")
        if policy == "augury" or policy.startswith("augury/"):
            p = replace(params, augury_utilization_target=params.utilization_target) if policy == "augury/u0.7" \
                else params
            perfect = PerfectForecaster(prepared) if policy == PERFECT_FORECAST else None
            r, c = run_augury(learned if learned is not None else truth, truth, prepared, p, name=policy,
                              forecaster=perfect)
            out.append((trace, r, c))
            continue
        if policy.startswith(HINDSIGHT + "/"):
            c = PolicyController(HindsightSchedulePolicy(
                truth, prepared.rate_at, prepared.duration_s * prepared.speedup,
                violation_s_per_instance_hour=hindsight_price(policy), restart_s=params.restart_s,
                utilization_target=SLO_UTILIZATION_CEILING, latency_slo_ms=params.latency_slo_ms, name=policy),
                settle=True)
        else:
            c = controllers[policy]()
        if policy == "static-peak":
            initial = dict(plan(truth, actual_peak, pc).config)
        elif policy == "oracle":
            initial = dict(c.policy.config_for(c.policy.peak(0.0)))
        else:
            initial = dict(prepared.initial)
        r = drive(uniform if policy in UNIFORM_KEYS else truth, prepared.load, c, prepared.replay, initial,
                  prepared.duration_s)
        out.append((trace, r, c))
    return out


@dataclass(frozen=True)
class Case:
    """One replay case: every policy on one job, seed and trace (``run_case``)."""

    dag: str
    seed: int
    trace: str
    spec: tuple | None
    days: float
    learned_file: str
    repo: str
    traces_dir: str
    params: Params
    policies: tuple[str, ...]
    keep_timelines: bool


def run_case(case: Case) -> tuple[list[dict], list[dict], dict, list[dict]]:
    """Replay ``case`` (in a worker process or this one): its rows (one per policy), its per-day
    rows, when asked the timelines for the figures by policy, and every policy's applied
    changes (``changes_of``)."""
    from experiments.tracereplay import summary
    from modeler.modelfile import load_model

    params = case.params
    truth = job_truth(case.dag, case.repo, params)
    learned = load_model(case.learned_file)
    done = run_trace(case.trace, params, case.days, replay_seed(case.seed, case.trace), Path(case.repo),
                     case.traces_dir, lambda message: None, learned=learned, policies=case.policies,
                     spec=case.spec, dag=case.dag)
    timeline = done[0][1].timeline
    # the same load for every policy; each day's bound searched once, the replay's is their sum
    daily_bounds = {day: hindsight(truth, part, params) for day, part in timeline.groupby(_day(timeline))}
    bounds = {key: sum(b[key] for b in daily_bounds.values()) for key in next(iter(daily_bounds.values()))}
    rows, days_rows, timelines, changes = [], [], {}, []
    for tr, r, c in done:
        changes += [{"dag": case.dag, "trace": tr, "seed": case.seed, "policy": r.policy, **x}
                    for x in changes_of(r.timeline)]
        rows.append({"dag": case.dag, **_row(tr, case.seed, r, c, case.days, summary), **bounds,
                     "instance_hours_over_hindsight": r.instance_hours / bounds["hindsight_instance_hours"]})
        tl = r.timeline
        for day, part in tl.groupby(_day(tl)):
            ih = float((part["instances"] * part["dt_s"]).sum() / 3600.0)
            b = daily_bounds.get(day, {}).get("hindsight_instance_hours", math.nan)
            days_rows.append({"dag": case.dag, "trace": tr, "seed": case.seed, "day": int(day), "policy": r.policy,
                              "violation_minutes": float(part["violated_s"].sum() / 60.0),
                              "instance_hours": ih, "reconfigurations": int(part["applied"].sum()),
                              "hindsight_instance_hours": b, "instance_hours_over_hindsight": ih / b if b else math.nan})
        if case.keep_timelines:
            timelines[(case.dag, tr, r.policy)] = r.timeline
    return rows, days_rows, timelines, changes


def changes_of(timeline: pd.DataFrame) -> list[dict]:
    """One row per applied reconfiguration of a replay's timeline: when (trace hours), which way,
    instances before and after, the input rate then, the new configuration's max rate, the load
    over it (rho: the restart's backlog drains at mu - lam, so a change near rho 1 is dear) and
    the violation seconds the restart was charged (its windows until the next settled one)."""
    out = []
    n = len(timeline)
    settled, violated_s = timeline["settled"].to_numpy(bool), timeline["violated_s"].to_numpy(float)
    for pos in np.flatnonzero(timeline["applied"].to_numpy(bool)):
        row = timeline.iloc[pos]
        after = timeline.iloc[pos + 1] if pos + 1 < n else row
        end = pos + 1
        while end < n and not settled[end]:
            end += 1
        charged = float(violated_s[pos + 1:end].sum())
        mu, lam = float(after["capacity"]), float(row["arrival_rate"])
        out.append({"t_h": float(row["t_s"]) / 3600.0,
                    "direction": "up" if after["instances"] > row["instances"] else
                    "down" if after["instances"] < row["instances"] else "same",
                    "instances_before": int(row["instances"]), "instances_after": int(after["instances"]),
                    "load": lam, "new_max_rate": mu, "rho_at_change": lam / mu if mu > 0 else math.nan,
                    "charged_s": charged})
    return out


def _day(timeline: pd.DataFrame) -> pd.Series:
    """The replayed day (0, 1, ...) each window of a timeline falls in, by its start."""
    return (timeline["t_s"] - timeline["dt_s"]) // 86400.0


def run(ctx: ExperimentContext) -> ExperimentResult:
    params = Params()
    days = 1 if ctx.quick else params.days
    specs: dict[str, tuple | None] = {t: None for t in (("nyc_taxi",) if ctx.quick else tuple(TRACES))}
    if ctx.traces:  # user traces: only those
        specs = {}
        for path in ctx.traces:
            name = Path(path).stem
            while name in specs:
                name += "+"
            specs[name] = user_trace(path, days)
    traces = tuple(specs)
    seeds = tuple(ctx.seeds) or ((ctx.seed,) if ctx.quick else tuple(ctx.seed + i for i in range(params.seeds)))
    dags = DAGS[:1] if ctx.quick else DAGS
    from experiments.recording import learn_model
    from modeler.modelfile import dump_model

    cases, calibration = [], {}
    for dag in dags:
        truth = job_truth(dag, ctx.repo, params)
        for seed in seeds:
            ctx.progress(f"{dag}, seed {seed}: augury learns its model: warm-up on the testbed -> ingest -> "
                         "Spark -> calibrate")
            tag = f"{dag.replace('/', '-')}-{seed}"
            learned, figures = learn_model(truth, Path(ctx.workdir) / f"learn-{tag}", seed=seed)
            if dag == dags[0] and seed == seeds[0]:
                calibration = figures
            learned_file = Path(ctx.workdir) / f"learned_model-{tag}.yaml"
            learned_file.write_text(dump_model(learned))
            for trace in traces:
                cases.append(Case(dag=dag, seed=seed, trace=trace, spec=specs[trace], days=days,
                                  learned_file=str(learned_file), repo=str(ctx.repo), traces_dir=str(ctx.traces_dir),
                                  params=params, policies=_policies(dag, dags),
                                  keep_timelines=seed == seeds[0]))
    rows, days_rows, timelines, changes = [], [], {}, []
    steps = ctx.steps(len(cases), "preemptive replays")
    for k, (case_rows, case_days, case_timelines, case_changes) in enumerate(_map_cases(cases, params.workers), 1):
        rows += case_rows
        days_rows += case_days
        timelines.update(case_timelines)
        changes += case_changes
        steps.done(f"replayed {case_rows[0]['dag']}, seed {case_rows[0]['seed']}, "
                   f"{case_rows[0]['trace']}: {len(case_rows)} policies x {days:g} day(s)")
    steps.close()
    table = pd.DataFrame(rows)
    return _result(ctx, params, table, pd.DataFrame(days_rows), timelines, traces, seeds, days, calibration,
                   changes=pd.DataFrame(changes))


def _policies(dag: str, dags: tuple[str, ...]) -> tuple[str, ...]:
    """The policies replayed on ``dag``: ``ds2/uniform-keys`` only when the uniform-keys job is
    not itself in the run (there, DS2 on that job is the same case)."""
    if dag != DAGS[0]:
        return UNSKEWED_POLICIES
    return POLICIES if len(dags) == 1 else tuple(p for p in POLICIES if p not in UNIFORM_KEYS)


def _map_cases(cases: list, workers: int, fn=None):
    """``fn`` (default ``run_case``; a module-level function) over ``cases``, in order, on
    ``workers`` processes (spawned: no Spark or JVM state is inherited) or in this process when
    one suffices."""
    fn = fn or run_case
    if workers <= 1 or len(cases) <= 1:
        yield from map(fn, cases)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(workers, len(cases)),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        yield from pool.map(fn, cases)


def hindsight(truth, timeline: pd.DataFrame, params: Params) -> dict[str, float]:
    """The hindsight lower bounds on instance-hours for a replayed load
    (``experiments.tracereplay.hindsight_instance_hours``): at the peers' utilization target
    (0.7, the issue's ground truth) and at augury's SLO ceiling (0.9), both with the SLO."""
    from experiments.tracereplay import hindsight_instance_hours
    from scheduler.targets import SLO_UTILIZATION_CEILING

    return {"hindsight_instance_hours": hindsight_instance_hours(truth, timeline, params.latency_slo_ms,
                                                                params.utilization_target),
            "hindsight_instance_hours_at_0.9": hindsight_instance_hours(truth, timeline, params.latency_slo_ms,
                                                                       SLO_UTILIZATION_CEILING)}


def _row(tr: str, seed: int, r, c, days: float, summary) -> dict:
    decider = getattr(c, "decider", None)
    return {"trace": tr, "seed": seed, **summary(r, days),
            "violated_share": float(r.timeline["violated"].mean()),
            "peak_instances": int(r.timeline["instances"].max()),
            "forecast_methods": ",".join(sorted(set(getattr(decider, "forecast_methods_", [])))),
            "planned_reconfigurations_max_24h": max((s.per_day() for s in getattr(decider, "schedules_", [])),
                                                    default=0),
            "reactive_replans": getattr(decider, "reactive_replans_", 0)}


def by_trace(days_table: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Per job, trace and policy: the mean per day of violation minutes, instance-hours and
    reconfigurations, each with its bootstrap 95 % interval over the n replayed days (days x
    seeds), and instance-hours over the hindsight bound (summed over the days)."""
    from experiments.bootstrap import bootstrap_ci

    out = []
    for (dag, trace, policy), g in days_table.groupby(["dag", "trace", "policy"], sort=False):
        row = {"dag": dag, "trace": trace, "policy": policy, "n_days": len(g)}
        for col in ("violation_minutes", "instance_hours", "reconfigurations"):
            lo, hi = bootstrap_ci(g[col], "mean", seed=seed)
            row.update({f"{col}_per_day": float(g[col].mean()), f"{col}_per_day_lo": lo, f"{col}_per_day_hi": hi})
        row["instance_hours_over_hindsight"] = float(g["instance_hours"].sum() / g["hindsight_instance_hours"].sum())
        out.append(row)
    return pd.DataFrame(out)


def goals(per_trace: pd.DataFrame) -> pd.DataFrame:
    """Issue 20's goals per job and trace, each met or missed (on the means per day): augury's
    violation minutes >= 90 % below the Flink autoscaler's, its instance-hours at or below them,
    no peer dominating it (fewer violation minutes *and* fewer instance-hours), instance-hours
    <= 1.15 x the hindsight bound, <= 4 reconfigurations a day."""
    out = []
    for (dag, trace), g in per_trace.groupby(["dag", "trace"], sort=False):
        t = g.set_index("policy")
        if "augury" not in t.index or "flink-autoscaler" not in t.index:
            continue
        a, f = t.loc["augury"], t.loc["flink-autoscaler"]
        peers = [p for p in t.index if not p.startswith(("augury", HINDSIGHT)) and p not in ("oracle",)]
        dominating = [p for p in peers if t.loc[p, "violation_minutes_per_day"] < a.violation_minutes_per_day
                      and t.loc[p, "instance_hours_per_day"] < a.instance_hours_per_day]
        fv = f.violation_minutes_per_day
        # perfect foresight's frontier: the fewest violation minutes a hindsight schedule reaches
        # within the Flink rules' instance-hours (nan: none of the prices replayed stays within)
        within = [p for p in t.index if p.startswith(HINDSIGHT + "/")
                  and t.loc[p, "instance_hours_per_day"] <= f.instance_hours_per_day]
        best = min(within, key=lambda p: t.loc[p, "violation_minutes_per_day"]) if within else None
        best_v = float(t.loc[best, "violation_minutes_per_day"]) if best else math.nan
        out.append({"dag": dag, "trace": trace,
                    "hindsight_best_within_flink_hours": best or "",
                    "hindsight_violation_minutes_per_day": best_v,
                    "hindsight_reduction_vs_flink": 1 - best_v / fv if fv > 0 and best else math.nan,
                    "both_goals_reachable_in_hindsight": bool(best is not None and (fv == 0 or best_v <= 0.1 * fv)),
                    "violation_reduction_vs_flink": 1 - a.violation_minutes_per_day / fv if fv > 0 else math.nan,
                    "violations_90pct_below_flink": bool(a.violation_minutes_per_day <= 0.1 * fv),
                    "instance_hours_over_flink": a.instance_hours_per_day / f.instance_hours_per_day,
                    "instance_hours_at_most_flink": bool(a.instance_hours_per_day <= f.instance_hours_per_day),
                    "dominated_by": ",".join(dominating), "no_peer_dominates": not dominating,
                    "instance_hours_over_hindsight": a.instance_hours_over_hindsight,
                    "within_1.15_of_hindsight": bool(a.instance_hours_over_hindsight <= 1.15),
                    "reconfigurations_per_day": a.reconfigurations_per_day,
                    "at_most_4_per_day": bool(a.reconfigurations_per_day <= 4)})
    return pd.DataFrame(out)


def _result(ctx, params: Params, table: pd.DataFrame, days_table: pd.DataFrame, timelines, traces, seeds,
            days: float, calibration, changes: pd.DataFrame | None = None):
    main = table[table["dag"] == DAGS[0]]
    totals = main.groupby("policy", sort=False)[["violation_minutes", "restart_violation_minutes",
                                                 "load_violation_minutes", "instance_hours",
                                                 "reconfigurations"]].sum() / len(seeds)
    totals["reconfigurations_per_day"] = totals["reconfigurations"] / (days * len(traces))
    totals = totals.reset_index()
    t = totals.set_index("policy")
    metrics = {}
    for policy in t.index:
        key = policy.replace("-", "_")
        for col in ("violation_minutes", "restart_violation_minutes", "load_violation_minutes",
                    "instance_hours", "reconfigurations_per_day"):
            metrics[f"{key}.{col}"] = float(t.loc[policy, col])
    a, f, s = t.loc["augury"], t.loc["flink-autoscaler"], t.loc["static-peak"]
    reduction = 1.0 - a.violation_minutes / f.violation_minutes if f.violation_minutes > 0 else math.nan
    metrics["augury.violation_reduction_vs_flink"] = reduction
    metrics["augury.instance_hours_over_static_peak"] = a.instance_hours / s.instance_hours
    metrics["augury.instance_hours_over_oracle"] = a.instance_hours / t.loc["oracle", "instance_hours"]
    # the hindsight lower bounds (one per trace and seed; every policy saw the same load)
    once = main[main["policy"] == main["policy"].iloc[0]]
    bound = float(once["hindsight_instance_hours"].sum()) / len(seeds)
    bound_09 = float(once["hindsight_instance_hours_at_0.9"].sum()) / len(seeds)
    metrics["hindsight.instance_hours"] = bound
    metrics["hindsight_0.9.instance_hours"] = bound_09
    for policy in t.index:
        metrics[f"{policy.replace('-', '_')}.instance_hours_over_hindsight"] = float(t.loc[policy, "instance_hours"]) / bound
    per_trace = by_trace(days_table, seed=ctx.seed)
    goal_table = goals(per_trace)
    for col in ("violations_90pct_below_flink", "instance_hours_at_most_flink", "no_peer_dominates",
                "within_1.15_of_hindsight", "at_most_4_per_day", "both_goals_reachable_in_hindsight"):
        metrics[f"goals.{col}"] = float(goal_table[col].sum()) if len(goal_table) else math.nan
    metrics["goals.cases"] = float(len(goal_table))
    n_days = int(days_table[(days_table["dag"] == DAGS[0]) & (days_table["policy"] == "augury")].shape[0])
    lines = [f"{', '.join(traces)}: {days:g} day(s) each replayed {params.speedup:g}x compressed on the WordCount "
             f"job" + (" and on the same job with uniform keys" if len(set(table['dag'])) > 1 else "")
             + f" (trace peak = {params.peak_over_capacity} x its default max rate), seed(s) "
             f"{', '.join(map(str, seeds))}" + (" (totals: per trace and seed, averaged over the seeds)" if len(seeds) > 1
                                               else "") + f"; {n_days} replayed days per policy on the WordCount job.",
             f"- augury (WordCount, all traces): {a.violation_minutes:.1f} SLO-violation minutes vs "
             f"{f.violation_minutes:.1f} for the Flink rules ({reduction:.0%} fewer; goal >= 90 %: "
             f"{'met' if reduction >= 0.9 else 'missed'}), {a.instance_hours:.0f} instance-hours vs "
             f"{f.instance_hours:.0f} for the Flink rules, {s.instance_hours:.0f} static peak and "
             f"{t.loc['oracle', 'instance_hours']:.0f} oracle; {a.reconfigurations_per_day:.1f} reconfigurations/day.",
             f"- of which restarts (charged restart + backlog drain in real time): augury "
             f"{a.restart_violation_minutes:.1f} min, Flink rules {f.restart_violation_minutes:.1f}; the rest "
             f"(settled windows over the SLO: under-provisioning, late reaction): augury "
             f"{a.load_violation_minutes:.1f} min, Flink rules {f.load_violation_minutes:.1f}.",
             f"- hindsight lower bound (each window at the fewest instances meeting the SLO and utilization 0.7 "
             f"for the load it saw, on the true model; no restarts, no lead time): {bound:.0f} instance-hours "
             f"({bound_09:.0f} at augury's 0.9 ceiling). Instance-hours / bound: " + ", ".join(
                 f"{p} {float(t.loc[p, 'instance_hours']) / bound:.2f}" for p in t.index)
             + f" (goal for augury <= 1.15: {'met' if a.instance_hours <= 1.15 * bound else 'missed'}).",
             "- per policy (WordCount, all traces): " + "; ".join(
                 f"{p}: {t.loc[p, 'violation_minutes']:.1f} min, {t.loc[p, 'instance_hours']:.0f} inst-h, "
                 f"{t.loc[p, 'reconfigurations_per_day']:.1f}/day" for p in t.index)]
    if len(goal_table) and goal_table["hindsight_best_within_flink_hours"].astype(bool).any():
        lines.append("- perfect foresight under the same restart charge (`hindsight/<s>`: the cheapest schedule for "
                     "the actual load on the true model at augury's targets, priced at <s> s of violation per "
                     "instance-hour, replayed like every policy): the fewest violation minutes per day it reaches "
                     "within the Flink rules' instance-hours, and whether 90 % below the Flink rules is reachable "
                     "there at all: " + "; ".join(
                         f"{g.dag}/{g.trace}: "
                         + (f"{g.hindsight_violation_minutes_per_day:.2f} ({g.hindsight_best_within_flink_hours}, "
                            f"{g.hindsight_reduction_vs_flink:.0%} below Flink; "
                            f"{'reachable' if g.both_goals_reachable_in_hindsight else 'not reachable'})"
                            if g.hindsight_best_within_flink_hours else "no hindsight price within Flink's hours")
                         for g in goal_table.itertuples()))
    if len(goal_table):
        lines.append("- issue 20's goals per job and trace (means per day, n days each; `goals` table): " + "; ".join(
            f"{g.dag}/{g.trace}: violations {g.violation_reduction_vs_flink:.0%} below Flink "
            f"({'met' if g.violations_90pct_below_flink else 'missed'}), instance-hours "
            f"{g.instance_hours_over_flink:.2f}x Flink ({'met' if g.instance_hours_at_most_flink else 'missed'}), "
            f"{'no peer dominates' if g.no_peer_dominates else 'dominated by ' + g.dominated_by}, "
            f"{g.instance_hours_over_hindsight:.2f}x bound, {g.reconfigurations_per_day:.1f} changes/day"
            for g in goal_table.itertuples()))
    for dag in dict.fromkeys(per_trace["dag"]):
        rows = per_trace[per_trace["dag"] == dag]
        lines.append(f"- {dag}, per trace, mean per day [95 % CI over the days] violation minutes / instance-hours: "
                     + "; ".join(f"{r.trace} {r.policy} {r.violation_minutes_per_day:.2f} "
                                 f"[{r.violation_minutes_per_day_lo:.2f}, {r.violation_minutes_per_day_hi:.2f}] / "
                                 f"{r.instance_hours_per_day:.1f} [{r.instance_hours_per_day_lo:.1f}, "
                                 f"{r.instance_hours_per_day_hi:.1f}]"
                                 for r in rows.itertuples() if r.policy in ("augury", "flink-autoscaler")))
    figures = {f"capacity_{tr}": _figure(tr, timelines, ctx.workdir) for tr in traces}
    figures.update({f"pareto_{tr}": _pareto(tr, per_trace, days_table, ctx.workdir) for tr in traces})
    metrics.update({f"calibration.{k}": float(v) for k, v in calibration.items()})
    lines.append("- augury's model was learned from a warm-up recording (ingest -> Spark -> calibrate) for every job "
                 f"and seed; first: calibration trust {calibration['calibration_trust']:.2f}; largest relative error "
                 f"against the truth {max((abs(v) for k, v in calibration.items() if k != 'calibration_trust'), default=0.0):.1%}.")
    return ExperimentResult(
        params={"traces": ",".join(traces), "policies": ",".join(POLICIES), **params.__dict__, "days": days,
                "seeds": ",".join(map(str, seeds)), "dags": ",".join(dict.fromkeys(table["dag"]))},
        metrics=metrics, tables={"runs": table, "totals": totals, "days": days_table, "by_trace": per_trace,
                                 "goals": goal_table,
                                 **({"changes": changes} if changes is not None and len(changes) else {})},
        figures=figures, summary="\n".join(lines))


def _pareto(trace: str, per_trace: pd.DataFrame, days_table: pd.DataFrame, workdir):
    """Violation minutes vs instance-hours per day, one point per policy with its 95 % intervals,
    one panel per job, the hindsight bound as a vertical line and perfect foresight's frontier
    (the ``hindsight/<s>`` rows) as a dashed grey line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = per_trace[per_trace["trace"] == trace]
    dags = list(dict.fromkeys(rows["dag"]))
    palette = plt.get_cmap("tab10")
    colour = {p: palette(i % 10) for i, p in enumerate(dict.fromkeys(POLICIES + tuple(rows["policy"])))}
    fig, axes = plt.subplots(1, len(dags), figsize=(6 * len(dags), 4.5), squeeze=False)
    for ax, dag in zip(axes[0], dags):
        g = rows[rows["dag"] == dag]
        foresight = g[g["policy"].str.startswith(HINDSIGHT + "/")].sort_values("instance_hours_per_day")
        if len(foresight):
            ax.plot(foresight["instance_hours_per_day"], foresight["violation_minutes_per_day"], "s--",
                    color="grey", lw=1, ms=4, label="perfect foresight (hindsight/<s>)")
            for r in foresight.itertuples():
                ax.annotate(r.policy.split("/", 1)[1], (r.instance_hours_per_day, r.violation_minutes_per_day),
                            fontsize=6, color="grey", xytext=(3, -8), textcoords="offset points")
        for r in g[~g["policy"].str.startswith(HINDSIGHT + "/")].itertuples():
            ax.errorbar(r.instance_hours_per_day, r.violation_minutes_per_day,
                        xerr=[[r.instance_hours_per_day - r.instance_hours_per_day_lo],
                              [r.instance_hours_per_day_hi - r.instance_hours_per_day]],
                        yerr=[[r.violation_minutes_per_day - r.violation_minutes_per_day_lo],
                              [r.violation_minutes_per_day_hi - r.violation_minutes_per_day]],
                        fmt="o", capsize=3, label=r.policy, color=colour[r.policy])
            ax.annotate(r.policy, (r.instance_hours_per_day, r.violation_minutes_per_day), fontsize=7,
                        xytext=(4, 4), textcoords="offset points")
        d = days_table[(days_table["dag"] == dag) & (days_table["trace"] == trace)]
        bound = d[d["policy"] == d["policy"].iloc[0]]["hindsight_instance_hours"].mean()
        ax.axvline(bound, color="grey", ls="--", lw=1, label="hindsight bound")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_ylim(bottom=0.0)  # minutes are >= 0 (symlog would show an empty negative range)
        ax.set_xlabel("instance-hours per day")
        ax.set_ylabel("SLO-violation minutes per day")
        ax.set_title(f"{trace}, {dag} (n = {int(g['n_days'].max())} days)", fontsize=9)
    axes[0][0].legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    path = Path(workdir) / f"preemptive_pareto_{trace}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _figure(trace: str, timelines, workdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pathlib import Path

    fig, ax = plt.subplots(figsize=(10, 4.5))
    mine = {policy: tl for (dag, tr, policy), tl in timelines.items() if tr == trace and dag == DAGS[0]}
    first = next(iter(mine.values()))
    ax.plot(first["t_s"] / 3600.0, first["rate"], color="black", lw=1.5, label="load")
    for policy, tl in mine.items():
        ax.step(tl["t_s"] / 3600.0, tl["capacity"], where="post", lw=1, label=f"capacity: {policy}")
    ax.set_xlabel("trace hours since the replay start")
    ax.set_ylabel("tuples/s")
    ax.legend(loc="upper left", fontsize=7)
    ax.set_title(f"{trace}: load and capacity per policy")
    fig.tight_layout()
    path = Path(workdir) / f"preemptive_{trace}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
