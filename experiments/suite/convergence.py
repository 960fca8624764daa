"""``convergence``: load steps (x2, x5, /3) from under- and over-provisioned starts; how many
reconfigurations and how long each policy needs to reach the cheapest SLO-meeting configuration,
and how far above it it ends.

Setup (``EXAMPLES``; the full run uses ``FULL_EXAMPLES`` = WordCount with Zipf keys and with
uniform keys, for time; ``--quick``: both, steps x5 and /3, the ``under`` start only):

* The new rate ``r1`` is ``rate_factor`` x the example's max rate at its default configuration;
  the old rate is ``r0 = r1 / step``. The load is ``r1`` from t = 0 (the step has just happened;
  no pre-step history is simulated).
* Start configuration: the cheapest configuration (``scheduler.plan`` on the true model) for
  ``start_factor x r0``: ``under`` = 0.6 (the job was already short before the step), ``over`` =
  1.6. So x2 and x5 start under-provisioned for ``r1`` in both cases, /3 over-provisioned.
* Policies: augury's product ``ControlLoop`` on the model it learned from a warm-up recording
  (ingest -> Spark -> calibrate; on probation until it predicts well, reactive meanwhile); DS2
  (and ``ds2-max``, a labelled variant sizing from the busiest instance); the Flink autoscaler's
  rules; Dhalion (``experiments.baselines``; ``PEERS`` there lists each one's differences).
  Every policy's time constants are in policy seconds and the run is compressed ``time_scale`` x (restart 30 s, Dhalion's 3 min wait, Flink's 15 min
  window / 5 min stabilization / 1 h scale-down delay, the loop's guard rails alike); times
  below are policy seconds since the step. Baselines are consulted only on settled windows
  (started after the last restart ended).
* **Cheapest** = ``plan(true model, r1)`` (utilization target 0.7, p99 latency SLO). A window
  violates the SLO when the sinks' p99 exceeds the SLO or the source backlog exceeds 1 s of input.
* **Reached**: a configuration with at most (1 + ``tolerance``) x the cheapest instance count
  that meets the SLO on the testbed (its last window not violated; for the final one the last
  ``tail_windows``), and the policy stays on such configurations to the end of the run.
  ``steps`` = reconfigurations until the first of them; ``time_to_reach_s`` = from the step to
  the first non-violated window on it. **Over-provisioning** = final instances / cheapest - 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.harness import ExperimentContext, ExperimentError, ExperimentResult

NAME = "convergence"
DESCRIPTION = ("load steps x2, x5, /3 from under- and over-provisioned starts: reconfigurations and time to "
               "the cheapest SLO-meeting configuration, over-provisioning; augury vs DS2, Flink rules, Dhalion")

EXAMPLES = ("wordcount", "pipeline", "diamond", "wordcount-uniform")
FULL_EXAMPLES = ("wordcount", "wordcount-uniform")
"""The full run's examples. All are supported; the default full run keeps WordCount only
(Zipf-keyed words), plus the same job with uniform keys (``-uniform``: no key skew, where DS2's
documented no-skew assumption holds), because 72 runs took far over 15 minutes on the shared
2-core machine."""
UNIFORM = "-uniform"
"""Example-name suffix: every key-grouped edge's keys made uniform (``unskewed``)."""


def unskewed(path) -> "JobModel":
    """The model file at ``path`` with every key-grouped edge's keys uniform over many keys
    (key groups evenly loaded): a workload without key skew, where DS2's assumption holds."""
    import yaml

    from modeler.modelfile import parse_model

    raw = yaml.safe_load(open(path, encoding="utf-8"))
    for edge in raw.get("edges", []):
        if "keys" in edge:
            edge["keys"] = {"distribution": "uniform"}
    return parse_model(raw, source=f"{path} (uniform keys)")


def load_example(repo, example: str):
    """``examples/<example>.yaml``; the ``-uniform`` suffix: the same job without key skew."""
    from modeler.modelfile import load_model

    if example.endswith(UNIFORM):
        return unskewed(repo / "examples" / f"{example[:-len(UNIFORM)]}.yaml")
    return load_model(str(repo / "examples" / f"{example}.yaml"))
STEPS = {"x2": 2.0, "x5": 5.0, "/3": 1.0 / 3.0}
STARTS = {"under": 0.6, "over": 1.6}
POLICIES = ("augury", "ds2", "ds2-max", "flink-autoscaler", "dhalion")


@dataclass(frozen=True)
class Params:
    rate_factor: float = 1.5
    """New rate = this x the example's max rate at its default configuration."""
    time_scale: float = 12.0
    """Policy seconds per simulated second."""
    window_s: float = 5.0
    """Metrics window, simulated seconds (60 policy seconds)."""
    duration_s: float = 420.0
    """Simulated seconds per run (84 policy minutes: Flink's 1 h scale-down delay fits)."""
    restart_s: float = 30.0
    """Restart time per reconfiguration, policy seconds."""
    latency_slo_ms: float = 50.0
    utilization_target: float = 0.7
    tolerance: float = 0.10
    """A configuration within this fraction above the cheapest counts as reaching it."""
    tail_windows: int = 6
    """The final configuration must meet the SLO in the last this many windows."""


def _policies(truth, params: Params, learned=None):
    from experiments.baselines import DhalionPolicy, DS2Policy, FlinkAutoscalerPolicy, ds2_max
    from experiments.replay import LoopController, PolicyController
    from modeler.modelfile import to_graph
    from scheduler.loop import LoopConfig

    graph = to_graph(truth)
    from scheduler.targets import Targets

    loop_cfg = LoopConfig(targets=Targets(utilization_target=params.utilization_target,
                                          latency_slo_ms=params.latency_slo_ms))
    return {
        # the product loop on the model it learned from measurements (``learned``), as augury run
        "augury": lambda: LoopController(learned if learned is not None else truth, loop_cfg, name="augury"),
        # peers take every duration in policy seconds (``drive`` hands them policy time)
        "ds2": lambda: PolicyController(DS2Policy(graph), settle=True),
        "ds2-max": lambda: PolicyController(ds2_max(graph), settle=True),  # a variant, not DS2
        "flink-autoscaler": lambda: PolicyController(FlinkAutoscalerPolicy(graph), settle=True),
        "dhalion": lambda: PolicyController(DhalionPolicy(graph), settle=True),
    }


def _instances(truth, config) -> int:
    return int(sum(v for n, v in config.items() if not truth.operator(n).is_source))


def assess(timeline: pd.DataFrame, cheapest: int, tolerance: float, tail_windows: int) -> dict:
    """Reached / steps / time to reach / final over-provisioning from one run's timeline."""
    inst = timeline["instances"].to_numpy()
    violated = timeline["violated"].to_numpy(bool)
    # segments of constant configuration: a new one starts after each applied window
    seg_id = np.concatenate([[0], np.cumsum(timeline["applied"].to_numpy(bool))[:-1]])
    n_seg = int(seg_id[-1]) + 1
    good = []
    for s in range(n_seg):
        idx = np.flatnonzero(seg_id == s)
        within = inst[idx[0]] <= (1 + tolerance) * cheapest + 1e-9
        if s == n_seg - 1:
            ok = not violated[idx[-tail_windows:]].any()
        else:
            ok = not violated[idx[-1]]
        good.append(bool(within and ok))
    first_good = None
    for s in range(n_seg - 1, -1, -1):
        if not good[s]:
            break
        first_good = s
    final = int(inst[-1])
    out = {"reached": first_good is not None, "steps": float(first_good) if first_good is not None else math.nan,
           "time_to_reach_s": math.nan, "final_instances": final,
           "over_provisioning": final / cheapest - 1.0,
           "final_slo_met": not violated[-tail_windows:].any(),
           "violation_minutes": float(timeline["violated_s"].sum() / 60.0)}
    if first_good is not None:
        idx = np.flatnonzero((seg_id >= first_good) & ~violated)
        if len(idx):
            out["time_to_reach_s"] = float(timeline["t_s"].iloc[idx[0]])
    return out


def run_case(example: str, step: str, start: str, policy: str, params: Params, seed: int, repo,
             learned=None) -> dict:
    from experiments.replay import ReplayConfig, drive
    from modeler.queueing import predict
    from scheduler.plan import PlanConfig, plan

    truth = load_example(repo, example)
    pc = PlanConfig(utilization_target=params.utilization_target, latency_slo_ms=params.latency_slo_ms)
    r1 = params.rate_factor * predict(truth, None, 0.0).max_rate
    r0 = r1 / STEPS[step]
    initial = dict(plan(truth, STARTS[start] * r0, pc).config)
    cheap = plan(truth, r1, pc)
    controller = _policies(truth, params, learned)[policy]()
    rcfg = ReplayConfig(window_s=params.window_s, time_scale=params.time_scale, restart_s=params.restart_s,
                        latency_slo_ms=params.latency_slo_ms, seed=seed)
    result = drive(truth, r1, controller, rcfg, initial, params.duration_s)
    row = {"example": example, "step": step, "start": start, "policy": policy, "seed": seed,
           "old_rate": r0, "new_rate": r1, "start_instances": _instances(truth, initial),
           "cheapest_instances": int(cheap.instances), "cheapest_feasible": bool(cheap.feasible),
           "reconfigurations": result.reconfigurations,
           **assess(result.timeline, int(cheap.instances), params.tolerance, params.tail_windows),
           "final_config": " ".join(f"{k}={v}" for k, v in result.timeline["config"].iloc[-1].items()),
           "cheapest_config": " ".join(f"{k}={v}" for k, v in cheap.config.items())}
    return row


def summarize(table: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    rows = []
    for policy in POLICIES:
        t = table[table["policy"] == policy]
        if not len(t):
            continue
        reached = t[t["reached"]]
        rows.append({
            "policy": policy, "runs": len(t),
            "reached_share": float(t["reached"].mean()),
            "one_step_share": float((t["reached"] & (t["steps"] <= 1)).mean()),  # 0: already there
            "mean_steps_when_reached": float(reached["steps"].mean()) if len(reached) else math.nan,
            "max_steps_when_reached": float(reached["steps"].max()) if len(reached) else math.nan,
            "median_time_to_reach_s": float(reached["time_to_reach_s"].median()) if len(reached) else math.nan,
            "mean_reconfigurations": float(t["reconfigurations"].mean()),
            "median_over_provisioning": float(t["over_provisioning"].median()),
            "max_over_provisioning": float(t["over_provisioning"].max()),
            "over_within_tolerance_share": float((t["over_provisioning"] <= tolerance + 1e-9).mean()),
            "final_slo_met_share": float(t["final_slo_met"].mean()),
            "mean_violation_minutes": float(t["violation_minutes"].mean()),
        })
    return pd.DataFrame(rows)


def run(ctx: ExperimentContext) -> ExperimentResult:
    params = Params()
    examples = FULL_EXAMPLES
    steps = ("x5", "/3") if ctx.quick else tuple(STEPS)
    seeds = [ctx.seed]
    rows, errors = [], []
    starts = ("under",) if ctx.quick else tuple(STARTS)
    cases = [(e, s, st, p) for e in examples for s in steps for st in starts for p in POLICIES]
    from experiments.recording import learn_model

    learned: dict[str, object] = {}
    for k, (e, s, st, p) in enumerate(cases):
        seed = ctx.seed * 1000 + k  # one seed per run, reproducible
        ctx.progress(f"[{k + 1}/{len(cases)}] {e} {s} start {st}: {p}")
        try:
            if p == "augury" and e not in learned:  # augury learns each job from a warm-up recording
                ctx.progress(f"  augury learns {e}: warm-up on the testbed -> ingest -> Spark -> calibrate")
                learned[e] = learn_model(load_example(ctx.repo, e), Path(ctx.workdir) / f"learn-{e}",
                                         seed=ctx.seed)[0]
            rows.append(run_case(e, s, st, p, params, seed, ctx.repo, learned.get(e)))
        except Exception as err:  # noqa: BLE001 - one failed case is reported, not fatal to the rest
            errors.append(f"{e} {s} {st} {p}: {type(err).__name__}: {err}")
            ctx.progress(f"  FAILED: {errors[-1]}")
    if not rows:
        raise ExperimentError("every case failed: " + "; ".join(errors[:3]), field="cases", value=len(cases))
    table = pd.DataFrame(rows)
    summary = summarize(table, params.tolerance)
    by = summary.set_index("policy")
    metrics = {}
    for policy in by.index:
        key = policy.replace("-", "_")
        for col in ("reached_share", "one_step_share", "mean_steps_when_reached", "median_over_provisioning",
                    "max_over_provisioning", "median_time_to_reach_s", "mean_reconfigurations",
                    "final_slo_met_share"):
            v = by.loc[policy, col]
            if v == v:  # not NaN
                metrics[f"{key}.{col}"] = float(v)
    figures = {"steps": _figure(table, ctx.workdir)}
    a = by.loc["augury"] if "augury" in by.index else None
    lines = [f"{len(table)} runs ({len(examples)} example(s) x steps {', '.join(steps)} x starts {'/'.join(starts)} "
             f"x {len(POLICIES)} policies), new rate = {params.rate_factor} x default max rate, time "
             f"compressed {params.time_scale:g}x; seeds {ctx.seed * 1000}..{ctx.seed * 1000 + len(cases) - 1}."]
    if a is not None:
        lines.append(f"- augury reached the cheapest SLO-meeting configuration (within "
                     f"{params.tolerance:.0%}) in at most one step in {a.one_step_share:.0%} of runs (goal >= 95 %: "
                     f"{'met' if a.one_step_share >= 0.95 else 'missed'}); median over-provisioning "
                     f"{a.median_over_provisioning:+.0%}, worst {a.max_over_provisioning:+.0%} (goal <= 10 %: "
                     f"{'met' if a.max_over_provisioning <= 0.10 + 1e-9 else 'missed'}).")
    for p in ("ds2", "ds2-max", "flink-autoscaler", "dhalion"):
        if p in by.index:
            r = by.loc[p]
            lines.append(f"- {p}: reached in {r.reached_share:.0%} of runs, mean {r.mean_steps_when_reached:.2g} "
                         f"steps when reached, median over-provisioning {r.median_over_provisioning:+.0%}.")
    if errors:
        lines.append(f"- {len(errors)} case(s) FAILED to run: " + "; ".join(errors))
    metrics["failed_cases"] = float(len(errors))
    return ExperimentResult(
        params={"examples": ",".join(examples), "steps": ",".join(steps), "starts": ",".join(starts),
                "policies": ",".join(POLICIES), **{k: v for k, v in params.__dict__.items()}},
        metrics=metrics, tables={"runs": table, "summary": summary}, figures=figures,
        summary="\n".join(lines))


def _figure(table: pd.DataFrame, workdir) -> "Path":
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pathlib import Path

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    labels = [p for p in POLICIES if p in set(table["policy"])]
    steps = [table[(table["policy"] == p) & table["reached"]]["steps"].to_numpy() for p in labels]
    axes[0].boxplot([s if len(s) else [np.nan] for s in steps])
    axes[0].set_ylabel("reconfigurations to reach the cheapest")
    over = [table[table["policy"] == p]["over_provisioning"].to_numpy() * 100 for p in labels]
    axes[1].boxplot(over)
    axes[1].axhline(10, color="gray", ls="--", lw=1)
    axes[1].set_ylabel("final over-provisioning, %")
    for ax in axes:  # labels set here: boxplot's label keyword changed name in matplotlib 3.9
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=20)
    fig.suptitle("Convergence after load steps")
    fig.tight_layout()
    path = Path(workdir) / "convergence.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
