"""``healing``: a slow instance and a hot key injected into a running job; time to detect, to
diagnose correctly and to recover, for augury's control loop and Dhalion.

Setup: the WordCount example at ``load_factor`` x its default max rate, starting on the cheapest
configuration for that rate (``scheduler.plan``, true model). At ``fault_at_s`` one fault starts
and lasts to the end of the run:

* ``slow_instance``: instance 0 of ``split`` runs ``slow_factor`` x slower (a bad host);
  the correct diagnosis is *slow instance split[0]*; the remedy a restart elsewhere.
* ``hot_key``: ``hot_share`` of the tuples on ``split -> count`` carry one key; the correct
  diagnosis is *data skew on count* (naming the hot instance); no rescaling removes a single
  hot key's load from its instance, so it has to be reported (augury's resolver) — scaling may
  still recover the SLO when the rest of the instance's keys move away.

Policies: augury's product ``ControlLoop`` (on the model learned from a warm-up recording; instance restarts move the instance to
a healthy host, i.e. end its slow-instance fault) and Dhalion (``experiments.baselines``:
back-pressure detection, bottleneck scale-up; the re-implementation has no slow-instance or skew
diagnoser, so its only diagnosis is *under-provisioned*).

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
DESCRIPTION = ("slow instance and hot key injected: time to detect, to diagnose correctly and to recover, "
               "augury's loop vs Dhalion")

FAULTS = ("slow_instance", "hot_key")
POLICIES = ("augury", "dhalion")


@dataclass(frozen=True)
class Params:
    model_file: str = "examples/wordcount.yaml"
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


def _faults(kind: str, params: Params):
    from experiments.testbed import HotKey, SlowInstance

    if kind == "slow_instance":
        return [SlowInstance("split", 0, params.slow_factor, params.fault_at_s)]
    return [HotKey("split", "count", params.hot_share, params.fault_at_s)]


def run_case(kind: str, policy: str, params: Params, duration_s: float, seed: int, repo, learned=None) -> dict:
    from experiments.replay import LoopController, ReplayConfig, drive
    from modeler.modelfile import load_model, to_graph
    from modeler.queueing import predict
    from scheduler.loop import LoopConfig
    from scheduler.plan import PlanConfig, plan
    from scheduler.targets import Targets

    truth = load_model(str(repo / params.model_file))
    rate = params.load_factor * predict(truth, None, 0.0).max_rate
    initial = dict(plan(truth, rate, PlanConfig(utilization_target=params.utilization_target,
                                                latency_slo_ms=params.latency_slo_ms)).config)
    if policy == "augury":
        c = LoopController(learned if learned is not None else truth,
                           LoopConfig(targets=Targets(utilization_target=params.utilization_target,
                                                      latency_slo_ms=params.latency_slo_ms)),
                           name="augury", keep_steps=True)
    else:
        c = _DhalionWatch(to_graph(truth))
    rcfg = ReplayConfig(window_s=params.window_s, time_scale=1.0, restart_s=params.restart_s,
                        latency_slo_ms=params.latency_slo_ms, seed=seed)
    r = drive(truth, rate, c, rcfg, initial, duration_s, faults=_faults(kind, params))
    t0 = params.fault_at_s
    tl = r.timeline
    after = tl[tl["t_s"] > t0 + 1e-9]
    fault_event = next((e for e in r.events if e["event"] == "fault_start"), {})
    hot_instance = (fault_event.get("detail") or {}).get("instance")
    detect = diagnose = math.nan
    diagnosis_text, actions = "", []
    if policy == "augury":
        for now, s in c.steps:
            if now <= t0 + 1e-9:
                continue
            ev = s.evaluation
            if math.isnan(detect) and any(sym.active for sym in ev.symptoms):
                detect = now - t0
            if math.isnan(diagnose):
                for d in ev.diagnoses:
                    if kind == "slow_instance" and d.operator == "split" and "slow_instance" in d.causes \
                            and d.instance == 0:
                        diagnose, diagnosis_text = now - t0, f"slow_instance split[{d.instance}]"
                    if kind == "hot_key" and d.operator == "count" and "data_skew" in d.causes:
                        diagnose = now - t0
                        diagnosis_text = f"data_skew count[{d.instance}]"
            if s.result.applied or (s.decision.kind not in ("none", "hold") and s.decision.kind):
                if s.decision.kind not in ("none", "hold"):
                    actions.append(f"{now - t0:+.0f}s {s.decision.kind} {','.join(s.decision.operators)}"
                                   + (f"[{s.decision.instance}]" if s.decision.instance is not None else ""))
            for rep in s.decision.reports:
                if rep.kind == "report_skew" and f"report_skew {','.join(rep.operators)}" not in " ".join(actions):
                    actions.append(f"{now - t0:+.0f}s report_skew {','.join(rep.operators)}")
        causes = [(now, d.operator, d.causes) for now, s in c.steps if now > t0 for d in s.evaluation.diagnoses
                  if d.causes]
        if not diagnosis_text and causes:
            diagnosis_text = "wrong: " + ", ".join(sorted({f"{o}:{'+'.join(cs)}" for _, o, cs in causes}))
    else:
        det = [t for t in c.detected if t > t0 + 1e-9]
        detect = det[0] - t0 if det else math.nan
        actions = [f"{t - t0:+.0f}s scale " + ",".join(k for k in cfg) for t, cfg in c.actions if t > t0]
        diagnosis_text = "under-provisioned (scale-up)" if c.actions else ""
    violated = after["violated"].to_numpy(bool)
    ever = bool(violated.any())
    recover = math.nan
    if ever and not violated[-1]:
        last_bad = int(np.flatnonzero(violated)[-1])
        recover = float(after["t_s"].iloc[last_bad] - t0)  # the next window starts here and stays good
    return {"fault": kind, "policy": policy, "seed": seed, "rate": rate,
            "initial_instances": int(tl["instances"].iloc[0]), "final_instances": int(tl["instances"].iloc[-1]),
            "hot_instance": hot_instance, "slo_violated_after_fault": ever,
            "detect_s": detect, "diagnose_s": diagnose, "recover_s": recover if ever else 0.0,
            "recovered": (not ever) or not math.isnan(recover),
            "violation_minutes": float(after["violated"].sum() * params.window_s / 60.0),
            "reconfigurations": r.reconfigurations, "diagnosis": diagnosis_text,
            "actions": "; ".join(actions[:8])}


def run(ctx: ExperimentContext) -> ExperimentResult:
    params = Params()
    duration = 240.0 if ctx.quick else params.duration_s
    rows = []
    cases = [(f, p) for f in FAULTS for p in POLICIES]
    from pathlib import Path

    from experiments.recording import learn_model
    from modeler.modelfile import load_model

    ctx.progress("augury learns its model: warm-up on the testbed -> ingest -> Spark -> calibrate")
    learned, calibration = learn_model(load_model(str(ctx.repo / params.model_file)), Path(ctx.workdir) / "learn",
                                       seed=ctx.seed)
    with ctx.steps(len(cases), "healing runs") as steps:
        for k, (f, p) in enumerate(cases):
            steps.advance(f"{f}: {p}")
            rows.append(run_case(f, p, params, duration, ctx.seed * 100 + k, ctx.repo, learned))
    table = pd.DataFrame(rows)
    metrics = {}
    for row in rows:
        key = f"{row['policy']}.{row['fault']}"
        for col in ("detect_s", "diagnose_s", "recover_s", "violation_minutes"):
            if row[col] == row[col]:
                metrics[f"{key}.{col}"] = float(row[col])
        metrics[f"{key}.recovered"] = float(row["recovered"])
    # the calibrated parameters next to the truth (relative errors), as every experiment logs them
    metrics.update({f"calibration.{k}": float(v) for k, v in calibration.items()})
    fmt = lambda v: "never" if v != v else f"{v:.0f} s"  # noqa: E731
    lines = [f"WordCount at {params.load_factor} x its default max rate on the cheapest configuration; fault at "
             f"{params.fault_at_s:g} s, run {duration:g} s (real time), seeds {ctx.seed * 100}..{ctx.seed * 100 + 3}."]
    for row in rows:
        lines.append(f"- {row['fault']}, {row['policy']}: detect {fmt(row['detect_s'])}, correct diagnosis "
                     f"{fmt(row['diagnose_s'])} ({row['diagnosis'] or 'none'}), SLO "
                     + ("never violated" if not row["slo_violated_after_fault"] else
                        f"met again after {fmt(row['recover_s'])}") + f"; actions: {row['actions'] or 'none'}.")
    errors = [abs(v) for k, v in calibration.items() if k != "calibration_trust"]
    lines.append("- augury's model was learned from a warm-up recording (ingest -> Spark -> calibrate), not given: "
                 f"calibration trust {calibration['calibration_trust']:.2f}; largest relative error against the truth "
                 f"{max(errors, default=0.0):.1%}.")
    return ExperimentResult(params={**params.__dict__, "duration_s": duration, "faults": ",".join(FAULTS),
                                    "policies": ",".join(POLICIES)},
                            metrics=metrics, tables={"runs": table}, summary="\n".join(lines))
