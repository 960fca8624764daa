"""``healing``: a slow instance, a hot key, a slow host, a slow network link and a lost host
injected into a running job; time to detect, to diagnose correctly and to recover, for augury's
control loop and Dhalion.

Setup: each job of ``JOBS`` (WordCount, and the clickstream pipeline: two sources, two key
groupings) at ``load_factor`` x its default max rate, starting on the cheapest configuration for
that rate (``scheduler.plan``, true model), its instances on ``hosts`` hosts (the testbed's
placement rule: instance l on host l mod 3, so host 0 holds instance 0 of every operator). At
``fault_at_s`` one fault starts and lasts to the end of the run:

* ``slow_instance``: instance 0 of the job's ``slow_operator`` (WordCount: ``split``) runs
  ``slow_factor`` x slower (a bad host); the correct diagnosis is *slow instance op[0]*; the
  remedy a restart elsewhere, never a scale-up of that operator (``slow_scale_ups`` counts them).
* ``hot_key``: ``hot_share`` of the tuples on the job's ``hot_edge`` (WordCount:
  ``split -> count``) carry one key; the correct diagnosis is *data skew on* the edge's target
  (naming the hot instance); no rescaling removes a single hot key's load from its instance, so
  it has to be reported (augury's resolver, with whether the key fits one instance) — scaling
  may still recover the SLO when the rest of the instance's keys move away.
* ``slow_host``: every instance on host ``slow_host`` (0) runs ``slow_factor`` x slower; the
  correct diagnosis is *slow_host* naming it; the remedy ``move_off_host``, never a scale-up of an
  operator with an instance there (counted in ``slow_scale_ups`` like the slow instance's).
* ``slow_link``: the links leaving host ``link_host`` (0) carry at most ``link_bandwidth`` tuples/s
  per sending instance to other hosts (its senders back-pressured, their receivers idle); the
  correct diagnosis is *slow_link* naming the sending host.
* ``lost_host``: host ``lost_host`` (1) is lost; its instances' rows vanish and the engine fails
  over after ``detection_s`` (50 s, Flink's heartbeat timeout); the correct diagnosis is
  *lost_host* naming it. augury moves off it at once (which fails over now); Dhalion waits for
  the engine.
* ``lost_rack``: rack ``lost_rack`` (0: hosts 0 and 1 of the 3, ``hosts_per_rack`` 2) is lost at
  once; every instance but those on host 2 stops; the correct diagnosis is *lost_host* naming a
  host of the rack (the metrics carry hosts, not racks); the remedies as for a lost host.

Every (job, fault, policy) runs with ``seeds`` seeds (``--quick``: WordCount, one seed); augury
learns its model of each job once, from a warm-up recording.

Policies: augury's product ``ControlLoop`` (on the model learned from a warm-up recording; instance restarts move the instance to
a healthy host, i.e. end its slow-instance fault) and Dhalion (``experiments.baselines``:
back-pressure detection, bottleneck scale-up; the re-implementation has no slow-instance, skew
or host diagnoser, as published, so its only diagnosis is *under-provisioned*; it is not given
the new ones).

Times are seconds after the fault starts (real time, no compression):
``detect`` = first window after the fault in which the policy registered a symptom (augury: an
active detector; Dhalion: back pressure above its threshold); ``diagnose`` = first correct
diagnosis (augury: the diagnosis of the right operator with the right cause, and for the slow
instance the right instance); ``recover`` = start of the first window from which the SLO (sink
p99 latency, source backlog <= 1 s of input) holds to the end of the run, if it was violated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from experiments.harness import ExperimentContext, ExperimentResult

NAME = "healing"
DESCRIPTION = ("slow instance, hot key, slow host, slow link and lost host injected: time to detect, to diagnose "
               "correctly and to recover, augury's loop vs Dhalion")

FAULTS = ("slow_instance", "hot_key", "slow_host", "slow_link", "lost_host", "lost_rack")
SLOW_FAULTS = ("slow_instance", "slow_host")
"""Faults a scale-up must never answer (``slow_scale_ups``)."""
POLICIES = ("augury", "dhalion")
HEADLINE = ("augury.slow_instance.diagnosis_correct", "augury.slow_instance.recovered",
            "augury.slow_instance.recover_s", "augury.slow_instance.slow_scale_ups",
            "dhalion.slow_instance.recovered", "augury.hot_key.diagnosis_correct", "augury.hot_key.recovered",
            "dhalion.hot_key.recovered", "augury.slow_host.diagnosis_correct", "augury.slow_host.slow_scale_ups",
            "augury.slow_link.recovered", "augury.lost_host.recover_s", "dhalion.lost_host.recover_s")
"""The metrics quoted in the README (shares of runs over both jobs; medians of the times)."""


@dataclass(frozen=True)
class Job:
    """A job the faults are injected into."""

    model_file: str
    slow_operator: str
    """The operator whose instance 0 runs slow."""
    hot_edge: tuple[str, str]
    """The key-grouped edge that carries the hot key."""


JOBS = {
    "wordcount": Job("examples/wordcount.yaml", "split", ("split", "count")),
    "clickstream": Job("examples/pipeline.yaml", "score", ("dedup", "sessionize")),
}
"""The jobs: WordCount (the slow operator has one instance at the start, so it is judged against
its own earlier windows) and the clickstream pipeline (two sources; the slow operator has peers;
the hot key on the Zipf-keyed ``dedup -> sessionize``)."""


@dataclass(frozen=True)
class Params:
    jobs: tuple[str, ...] = tuple(JOBS)
    """``JOBS`` run in full (``--quick``: the first)."""
    seeds: int = 5
    """Seeds per (job, fault, policy) in full (``--quick``: 1): the run's seed x 100 + k."""
    load_factor: float = 0.8
    """Input rate = this x the default configuration's max rate."""
    window_s: float = 10.0
    fault_at_s: float = 60.0
    duration_s: float = 420.0
    """Simulated (= real) seconds per run (``--quick``: 240)."""
    restart_s: float = 30.0
    slow_factor: float = 5.0
    hot_share: float = 0.5
    latency_slo_ms: float = 50.0
    utilization_target: float = 0.7
    """The starting configuration's utilization target (the Flink autoscaler's default)."""
    augury_utilization_target: float | None = 0.7
    """augury's (``scheduler.targets.Targets``; None = its rule, a 0.9 ceiling under the latency SLO)."""
    hosts: int = 3
    """Hosts of the testbed (every fault's runs, so all see the same placement)."""
    slow_host: int = 0
    """The host that runs ``slow_factor`` x slower (``slow_host``)."""
    link_host: int = 0
    """The host whose outgoing links are slow (``slow_link``)."""
    link_bandwidth: float = 200.0
    """Tuples/s per sending instance across hosts on the slow link (below what the senders on
    ``link_host`` emit in both jobs, so they are back-pressured)."""
    lost_host: int = 1
    """The host that is lost (``lost_host``)."""
    hosts_per_rack: int = 2
    """Hosts per rack: rack r holds hosts ``r * hosts_per_rack`` onwards (``lost_rack``)."""
    lost_rack: int = 0
    """The rack that is lost (``lost_rack``)."""
    detection_s: float = 50.0
    """The engine's failover delay after the host's loss, s (Flink's heartbeat timeout)."""


class _DhalionWatch:
    """Dhalion as a controller, recording when its detector fires."""

    def __init__(self, graph, name="dhalion") -> None:
        from experiments.baselines import DhalionPolicy

        self.policy = DhalionPolicy(graph)
        self.name = name
        self.detected: list[float] = []
        self.actions: list[tuple[float, dict]] = []

    def start(self, bed, cfg) -> None:
        pass

    def step(self, bed, view, stats, config):
        if self.policy.backpressured(stats):  # its back-pressure detector fires
            self.detected.append(view.now_s)
        if not view.settled:
            return None
        new = self.policy.decide(view.now_s, stats, dict(config))
        if new:
            self.actions.append((view.now_s, {k: v for k, v in new.items() if v != config.get(k)}))
        return new


def _faults(kind: str, params: Params, job: Job = JOBS["wordcount"]):
    from experiments.testbed import HotKey, LostHost, LostRack, SlowHost, SlowInstance, SlowLink

    t0 = params.fault_at_s
    if kind == "slow_instance":
        return [SlowInstance(job.slow_operator, 0, params.slow_factor, t0)]
    if kind == "slow_host":
        return [SlowHost(params.slow_host, params.slow_factor, t0)]
    if kind == "slow_link":
        return [SlowLink(params.link_host, t0, bandwidth=params.link_bandwidth)]
    if kind == "lost_host":
        return [LostHost(params.lost_host, t0, detection_s=params.detection_s)]
    if kind == "lost_rack":
        return [LostRack(params.lost_rack, t0, detection_s=params.detection_s)]
    return [HotKey(*job.hot_edge, params.hot_share, t0)]


HOST_OF = {"slow_host": lambda p: {p.slow_host}, "slow_link": lambda p: {p.link_host},
           "lost_host": lambda p: {p.lost_host},
           "lost_rack": lambda p: set(range(p.lost_rack * p.hosts_per_rack,
                                            min((p.lost_rack + 1) * p.hosts_per_rack, p.hosts)))}
"""The hosts each host fault may name (its correct diagnosis names one of them)."""
CAUSE_OF = {"lost_rack": "lost_host"}
"""A host fault whose diagnosis has another name (a lost rack is seen as lost hosts)."""


def _hot_key_truth(truth, config, rate: float, job: Job, params: Params) -> dict:
    """Whether the injected hot key fits one instance of its operator, on the true model: its
    rate (``hot_share`` of the keyed edge's tuples at the run's input rate) against one
    instance's capacity at augury's utilization target (tuples/s)."""
    from modeler.queueing import predict
    from scheduler.targets import Targets

    target = Targets(utilization_target=params.augury_utilization_target,
                     latency_slo_ms=params.latency_slo_ms).utilization_target
    op = job.hot_edge[1]
    hot = params.hot_share * predict(truth, config, rate).operators[op].arrival_rate
    capacity = target * 1000.0 / truth.operator(op).service_time_ms
    return {"rate": hot, "capacity": capacity, "fits": bool(hot <= capacity)}


def run_case(kind: str, policy: str, params: Params, duration_s: float, seed: int, repo, learned=None,
             job: str = "wordcount") -> dict:
    from experiments.replay import LoopController, ReplayConfig, drive
    from modeler.modelfile import load_model, to_graph
    from modeler.queueing import predict
    from scheduler.loop import LoopConfig
    from scheduler.plan import PlanConfig, plan
    from scheduler.targets import Targets

    spec = JOBS[job]
    truth = load_model(str(repo / spec.model_file))
    rate = params.load_factor * predict(truth, None, 0.0).max_rate
    initial = dict(plan(truth, rate, PlanConfig(utilization_target=params.utilization_target,
                                                latency_slo_ms=params.latency_slo_ms)).config)
    if policy == "augury":
        c = LoopController(learned if learned is not None else truth,
                           LoopConfig(targets=Targets(utilization_target=params.augury_utilization_target,
                                                      latency_slo_ms=params.latency_slo_ms)),
                           name="augury", keep_steps=True)
    else:
        c = _DhalionWatch(to_graph(truth))
    rcfg = ReplayConfig(window_s=params.window_s, time_scale=1.0, restart_s=params.restart_s,
                        latency_slo_ms=params.latency_slo_ms, seed=seed, hosts=params.hosts,
                        hosts_per_rack=params.hosts_per_rack)
    r = drive(truth, rate, c, rcfg, initial, duration_s, faults=_faults(kind, params, spec))
    t0 = params.fault_at_s
    tl = r.timeline
    after = tl[tl["t_s"] > t0 + 1e-9]
    fault_event = next((e for e in r.events if e["event"] == "fault_start"), {})
    hot_instance = (fault_event.get("detail") or {}).get("instance")
    detect = diagnose = math.nan
    diagnosis_text, actions, verdict = "", [], ""
    slow_scale_ups = 0
    slow_op, hot_op = spec.slow_operator, spec.hot_edge[1]
    hosts = {f"host-{h}" for h in HOST_OF[kind](params)} if kind in HOST_OF else set()
    cause = CAUSE_OF.get(kind, kind)
    # the operators a scale-up must not answer: the slow instance's, or those with an instance on the slow host
    slow_ops = {slow_op} if kind == "slow_instance" else {
        i.split("[")[0] for i in (fault_event.get("detail") or {}).get("instances", [])} if kind == "slow_host" else set()
    if policy == "augury":
        for now, s in c.steps:
            if now <= t0 + 1e-9:
                continue
            ev = s.evaluation
            if math.isnan(detect) and any(sym.active for sym in ev.symptoms):
                detect = now - t0
            if math.isnan(diagnose):
                for d in ev.diagnoses:
                    if kind == "slow_instance" and d.operator == slow_op and "slow_instance" in d.causes \
                            and d.instance == 0:
                        diagnose, diagnosis_text = now - t0, f"slow_instance {slow_op}[{d.instance}]"
                    if kind == "hot_key" and d.operator == hot_op and "data_skew" in d.causes:
                        diagnose = now - t0
                        diagnosis_text = f"data_skew {hot_op}[{d.instance}]"
                for d in ev.host_diagnoses:
                    if d.host in hosts and cause in d.causes:
                        diagnose, diagnosis_text = now - t0, f"{cause} {d.host}"
            if math.isnan(detect) and any(sym.active for sym in ev.host_symptoms):
                detect = now - t0
            if (kind in SLOW_FAULTS and s.result.applied and s.decision.kind == "scale"
                    and slow_ops & {k for k in s.decision.operators
                                    if (s.decision.config or {}).get(k, 0) > (s.evaluation.window.config.get(k, 0)
                                                                              if s.evaluation.window else 0)}):
                slow_scale_ups += 1
            if s.result.applied or (s.decision.kind not in ("none", "hold") and s.decision.kind):
                if s.decision.kind not in ("none", "hold"):
                    actions.append(f"{now - t0:+.0f}s {s.decision.kind} {','.join(s.decision.operators)}"
                                   + (f"[{s.decision.instance}]" if s.decision.instance is not None else "")
                                   + (f" ({s.decision.diagnosis})" if s.decision.kind == "move_off_host" else ""))
            for rep in s.decision.reports:
                if rep.kind == "report_skew" and f"report_skew {','.join(rep.operators)}" not in " ".join(actions):
                    actions.append(f"{now - t0:+.0f}s report_skew {','.join(rep.operators)}")
                if rep.kind == "report_skew" and hot_op in rep.operators:  # the latest estimate's verdict
                    hot_key = (rep.detail or {}).get("hot_key")
                    verdict = ("" if not hot_key else "fits one instance" if hot_key["fits"] else
                               "unknown while saturated" if hot_key["fits"] is None else "cannot fix by scaling")
        causes = [(now, d.operator, d.causes) for now, s in c.steps if now > t0 for d in s.evaluation.diagnoses
                  if d.causes]
        causes += [(now, d.host, d.causes) for now, s in c.steps if now > t0 for d in s.evaluation.host_diagnoses
                   if d.causes]
        if not diagnosis_text and causes:
            diagnosis_text = "wrong: " + ", ".join(sorted({f"{o}:{'+'.join(cs)}" for _, o, cs in causes}))
    else:
        det = [t for t in c.detected if t > t0 + 1e-9]
        detect = det[0] - t0 if det else math.nan
        actions = [f"{t - t0:+.0f}s scale " + ",".join(k for k in cfg) for t, cfg in c.actions if t > t0]
        if kind in SLOW_FAULTS:
            slow_scale_ups = sum(1 for t, cfg in c.actions if t > t0 and slow_ops & set(cfg))
        diagnosis_text = "under-provisioned (scale-up)" if c.actions else ""
    hot_truth = _hot_key_truth(truth, initial, rate, spec, params) if kind == "hot_key" else None
    violated = after["violated"].to_numpy(bool)
    ever = bool(violated.any())
    recover = math.nan
    if ever and not violated[-1]:
        last_bad = int(np.flatnonzero(violated)[-1])
        recover = float(after["t_s"].iloc[last_bad] - t0)  # the next window starts here and stays good
    return {"job": job, "fault": kind, "policy": policy, "seed": seed, "rate": rate,
            "initial_instances": int(tl["instances"].iloc[0]), "final_instances": int(tl["instances"].iloc[-1]),
            "hot_instance": hot_instance, "slo_violated_after_fault": ever,
            "detect_s": detect, "diagnose_s": diagnose, "recover_s": recover if ever else 0.0,
            "recovered": (not ever) or not math.isnan(recover),
            "violation_minutes": float(after["violated"].sum() * params.window_s / 60.0),
            "reconfigurations": r.reconfigurations, "diagnosis": diagnosis_text,
            "diagnosis_correct": not math.isnan(diagnose), "slow_scale_ups": slow_scale_ups,
            "hot_key_verdict": verdict,
            "hot_key_rate": hot_truth["rate"] if hot_truth else math.nan,
            "hot_key_capacity": hot_truth["capacity"] if hot_truth else math.nan,
            "hot_key_fits": hot_truth["fits"] if hot_truth else None,
            "actions": "; ".join(actions[:8])}


def run(ctx: ExperimentContext) -> ExperimentResult:
    params = Params()
    duration = 240.0 if ctx.quick else params.duration_s
    jobs = params.jobs[:1] if ctx.quick else params.jobs
    n_seeds = 1 if ctx.quick else params.seeds
    cases = [(f, p) for f in FAULTS for p in POLICIES]
    from pathlib import Path

    from experiments.recording import learn_model_following_advice
    from modeler.modelfile import load_model

    rows, calibrations = [], {}
    with ctx.steps(len(jobs) * (1 + n_seeds * len(cases)), "healing runs") as steps:
        for job in jobs:
            steps.advance(f"{job}: augury learns its model: warm-up on the testbed -> ingest -> Spark -> calibrate")
            learned, calibrations[job], _ = learn_model_following_advice(
                load_model(str(ctx.repo / JOBS[job].model_file)), Path(ctx.workdir) / f"learn-{job}", seed=ctx.seed)
            for i in range(n_seeds):
                for k, (f, p) in enumerate(cases):
                    seed = ctx.seed * 100 + 10 * i + k
                    steps.advance(f"{job}, seed {seed}, {f}: {p}")
                    rows.append(run_case(f, p, params, duration, seed, ctx.repo, learned, job=job))
    table = pd.DataFrame(rows)
    summary_table = summarize(table)
    metrics = {}
    for (policy, fault), part in table.groupby(["policy", "fault"]):
        key = f"{policy}.{fault}"
        for col in ("detect_s", "diagnose_s", "recover_s", "violation_minutes"):
            values = part[col].dropna()
            if len(values):
                metrics[f"{key}.{col}"] = float(values.median())
        metrics[f"{key}.recovered"] = float(part["recovered"].mean())
        metrics[f"{key}.diagnosis_correct"] = float(part["diagnosis_correct"].mean())
        if fault in SLOW_FAULTS:
            metrics[f"{key}.slow_scale_ups"] = float(part["slow_scale_ups"].sum())
    # the calibrated parameters next to the truth (relative errors), as every experiment logs them
    first = calibrations[jobs[0]]
    metrics.update({f"calibration.{k}": float(v) for k, v in first.items()})
    lines = [f"{', '.join(jobs)} at {params.load_factor} x the default max rate on the cheapest configuration; "
             f"fault at {params.fault_at_s:g} s, run {duration:g} s (real time); {n_seeds} seed(s) per job, fault and "
             f"policy ({len(table)} runs). Shares of runs with 95 % Wilson intervals; medians over the runs "
             f"(recovery: over the runs that recovered)."]
    lines += summary_lines(summary_table)
    for job in jobs:
        cal = calibrations[job]
        errors = [abs(v) for k, v in cal.items() if k != "calibration_trust"]
        lines.append(f"- augury's model of {job} was learned from a warm-up recording (ingest -> Spark -> "
                     f"calibrate), not given: calibration trust {cal['calibration_trust']:.2f}; largest relative "
                     f"error against the truth {max(errors, default=0.0):.1%}.")
    return ExperimentResult(params={**{k: v for k, v in params.__dict__.items() if k != "jobs"},
                                    "jobs": ",".join(jobs), "seeds": n_seeds, "duration_s": duration,
                                    "faults": ",".join(FAULTS), "policies": ",".join(POLICIES)},
                            metrics=metrics, tables={"runs": table, "summary": summary_table},
                            summary="\n".join(lines))


def _hot_key_truth_of(part: pd.DataFrame, fault: str, policy: str) -> dict:
    """A (job, hot_key, policy) group's ground truth (``_hot_key_truth``, the same in every run)
    and, for augury, the share of its runs whose verdict matches it; NaN/None elsewhere."""
    if fault != "hot_key" or "hot_key_fits" not in part:
        return {"hot_key_fits": None, "hot_key_rate": math.nan, "hot_key_capacity": math.nan,
                "hot_key_verdict_correct": math.nan}
    fits = part["hot_key_fits"].iloc[0]
    right = "fits one instance" if fits else "cannot fix by scaling"
    return {"hot_key_fits": fits, "hot_key_rate": float(part["hot_key_rate"].iloc[0]),
            "hot_key_capacity": float(part["hot_key_capacity"].iloc[0]),
            "hot_key_verdict_correct": float((part["hot_key_verdict"] == right).mean())
            if policy == "augury" else math.nan}


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (job, fault, policy): runs, correct diagnoses, recoveries (share and median
    time), scale-ups of a slow instance's operator, violation minutes, the hot-key verdicts."""
    from experiments.bootstrap import wilson

    out = []
    for (job, fault, policy), part in table.groupby(["job", "fault", "policy"], sort=False):
        recovered = part[part["recovered"]]
        d_lo, d_hi = wilson(int(part["diagnosis_correct"].sum()), len(part))
        r_lo, r_hi = wilson(int(part["recovered"].sum()), len(part))
        out.append({"job": job, "fault": fault, "policy": policy, "runs": len(part),
                    "diagnosis_correct": float(part["diagnosis_correct"].mean()),
                    "diagnosis_correct_lo": d_lo, "diagnosis_correct_hi": d_hi,
                    "detect_s_median": float(part["detect_s"].median()),
                    "recovered": float(part["recovered"].mean()), "recovered_lo": r_lo, "recovered_hi": r_hi,
                    "recover_s_median": float(recovered["recover_s"].median()) if len(recovered) else math.nan,
                    "violation_minutes_mean": float(part["violation_minutes"].mean()),
                    "slow_scale_ups": int(part["slow_scale_ups"].sum()) if fault in SLOW_FAULTS else 0,
                    "hot_key_verdicts": ", ".join(f"{v}: {n}" for v, n in
                                                  part["hot_key_verdict"].replace("", "none").value_counts().items())
                    if fault == "hot_key" and policy == "augury" else "",
                    **_hot_key_truth_of(part, fault, policy)})
    return pd.DataFrame(out)


def summary_lines(summary: pd.DataFrame) -> list[str]:
    """The summary's rows as sentences, then issue 26's goals as measured."""
    fmt = lambda v: "never" if v != v else f"{v:.0f} s"  # noqa: E731
    lines = []
    for _, r in summary.iterrows():
        lines.append(f"- {r['job']}, {r['fault']}, {r['policy']}: correct diagnosis in {r['diagnosis_correct']:.0%} "
                     f"[{r['diagnosis_correct_lo']:.0%}, {r['diagnosis_correct_hi']:.0%}] of {r['runs']} runs, "
                     f"detected after {fmt(r['detect_s_median'])}, SLO met again in {r['recovered']:.0%} "
                     f"[{r['recovered_lo']:.0%}, {r['recovered_hi']:.0%}] (after {fmt(r['recover_s_median'])}), "
                     f"{r['violation_minutes_mean']:.2f} violation min per run"
                     + (f", {r['slow_scale_ups']} scale-up(s) of the slow instance's operator"
                        if r["fault"] == "slow_instance" else "")
                     + (f", {r['slow_scale_ups']} scale-up(s) of an operator on the slow host"
                        if r["fault"] == "slow_host" else "")
                     + (f"; hot-key verdicts: {r['hot_key_verdicts']}" if r["hot_key_verdicts"] else "") + ".")
    aug = summary[summary["policy"] == "augury"]
    for fault in FAULTS:
        part = aug[aug["fault"] == fault]
        if not len(part):
            continue
        worst = float(part["diagnosis_correct"].min())
        lines.append(f"- goal, {fault}: correct diagnosis in >= 90 % of runs per job: "
                     f"{'met' if worst >= 0.9 else 'missed'} (lowest {worst:.0%}).")
    slow = aug[aug["fault"].isin(SLOW_FAULTS)]
    if len(slow):
        n = int(slow["slow_scale_ups"].sum())
        lines.append(f"- goal: zero scale-ups answering a slow instance/host: {'met' if n == 0 else 'missed'} ({n}).")
    for _, r in aug[aug["fault"] == "hot_key"].iterrows():
        if pd.isna(r.get("hot_key_fits")):
            continue
        truth = (f"the key carries {r['hot_key_rate']:,.0f}/s, one instance {r['hot_key_capacity']:,.0f}/s at the target"
                 if math.isfinite(r["hot_key_rate"]) else "")
        if r["hot_key_fits"]:
            ok = r["recovered"] >= 1.0 and r["hot_key_verdict_correct"] >= 1.0
            lines.append(f"- goal, {r['job']} hot_key (fits one instance: {truth}): the SLO met again and the verdict "
                         f"'fits one instance' in every run: {'met' if ok else 'missed'} (recovered "
                         f"{r['recovered']:.0%}, verdict right in {r['hot_key_verdict_correct']:.0%}).")
        else:
            ok = r["hot_key_verdict_correct"] >= 1.0
            lines.append(f"- goal, {r['job']} hot_key (does not fit one instance: {truth}): a 'cannot fix by "
                         f"scaling' report in every run: {'met' if ok else 'missed'} "
                         f"({r['hot_key_verdict_correct']:.0%}).")
    for _, r in aug.iterrows():
        peer = summary[(summary["job"] == r["job"]) & (summary["fault"] == r["fault"])
                       & (summary["policy"] == "dhalion")]
        if len(peer) and peer["recovered"].iloc[0] > 0:
            faster = r["recovered"] >= peer["recovered"].iloc[0] and r["recover_s_median"] < peer["recover_s_median"].iloc[0]
            lines.append(f"- goal, {r['job']} {r['fault']}: recovery faster than Dhalion (which recovers in "
                         f"{peer['recovered'].iloc[0]:.0%}, after {fmt(peer['recover_s_median'].iloc[0])}): "
                         f"{'met' if faster else 'missed'}.")
    return lines
