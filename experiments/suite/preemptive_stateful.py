"""``preemptive-stateful``: the ``preemptive`` replays on a stateful job, where a restart takes
30 s to 5 min, with and without augury's restart-aware issue times.

The job is the WordCount example with keyed state on its ``count`` operator: every change
restores the whole job's state (``modeler.restart``: Flink restarts the job on a rescale), so a
restart lasts ``restart_base_s + state_mb / restore_mb_per_s``; ``STATE_MB`` gives restarts of
about 60 s, 150 s and 300 s at 10 MB/s and a 30 s base. The testbed's outage follows it, and each
restart is charged its real-time cost, restart plus backlog drain (``experiments.replay``), for
every policy alike.

Policies:

* **augury** (the ``preemptive`` experiment's augury: the product loop, model learned from a
  warm-up recording) pricing its changes with the job's restart time (``scheduler.deciders``:
  the model's restart model; augury is *given* the state size and restore rate, as Flink's
  checkpoint statistics and a measured restart would tell it), changes at their default times;
* **augury/shift**: the same with ``shift_s`` (``scheduler.schedule`` step 7): a scale-up may be
  issued up to ``shift_s`` earlier, a scale-down up to ``shift_s`` later, where the forecast
  load is lower and the restart's backlog drains faster;
* **flink-autoscaler**: the faithful Flink rules (``experiments.baselines``), which do not know
  the restart time.

Reported per policy and restart time: SLO-violation minutes (and the restart share),
instance-hours, reconfigurations, and the load at each change as a fraction of the replay's
peak (``load_at_change``: lower is cheaper).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from experiments.harness import ExperimentContext, ExperimentResult

NAME = "preemptive-stateful"
DESCRIPTION = ("stateful WordCount (restarts of 60 s to 5 min) replayed on the real traces: augury with and "
               "without restart-aware issue times, and the Flink rules")
HEADLINE = ("augury.restart_share", "augury/shift.restart_share", "augury.load_at_change",
            "augury/shift.load_at_change", "augury.violation_minutes", "augury/shift.violation_minutes",
            "flink_autoscaler.violation_minutes")
INPUTS = ("seeds",)
POLICIES = ("augury", "augury/shift", "flink-autoscaler")
STATE_MB = (300.0, 1200.0, 2700.0)
"""The count operator's keyed state, MB: restarts of 60, 150 and 300 s."""
RESTART_BASE_S = 30.0
RESTORE_MB_PER_S = 10.0


@dataclass(frozen=True)
class Params:
    shift_s: float = 6 * 3600.0
    """augury/shift's ``shift_s`` (trace s)."""
    days: float = 3.0
    """Days per trace (``--quick``: 1 day of one trace at one restart time)."""
    workers: int = 2


def stateful(truth, state_mb: float):
    """``truth`` with ``state_mb`` of keyed state on ``count`` and the restart model."""
    ops = tuple(replace(op, state_mb=state_mb) if op.name == "count" else op for op in truth.operators)
    return replace(truth, operators=ops, restart_base_s=RESTART_BASE_S, restore_mb_per_s=RESTORE_MB_PER_S)


@dataclass(frozen=True)
class Case:
    state_mb: float
    seed: int
    trace: str
    days: float
    learned_file: str
    repo: str
    traces_dir: str
    shift_s: float


def run_case(case: Case) -> list[dict]:
    """Every policy on one trace at one state size: one row each."""
    from experiments.suite import preemptive as pe
    from experiments.tracereplay import summary
    from modeler.modelfile import load_model

    base = pe.Params()
    truth = stateful(pe.job_truth(pe.DAGS[0], case.repo, base), case.state_mb)
    learned = load_model(case.learned_file)
    # augury is given the state and restore rate (module docstring); the rest it learned
    known = {op.name: op.state_mb for op in truth.operators}
    learned = replace(learned, operators=tuple(replace(op, state_mb=known.get(op.name, 0.0)) for op in learned.operators),
                      restart_base_s=truth.restart_base_s, restore_mb_per_s=truth.restore_mb_per_s)
    from modeler.restart import restart_time_s

    some = next(op for op in truth.operators if not op.is_source)
    restart_s = restart_time_s(truth, {some.name: some.parallelism}, {some.name: some.parallelism + 1})
    rows = []
    for policy in POLICIES:
        params = replace(base, shift_s=case.shift_s if policy == "augury/shift" else 0.0)
        (tr, r, c), = pe.run_trace(case.trace, params, case.days, pe.replay_seed(case.seed, case.trace), Path(case.repo),
                                   case.traces_dir, lambda m: None, learned=learned, policies=(policy,), truth=truth)
        tl = r.timeline
        peak = float(tl["rate"].max()) or 1.0
        changes = tl[tl["applied"]]
        figures = summary(r, case.days)
        rows.append({"state_mb": case.state_mb, "restart_s": restart_s, "trace": tr, "seed": case.seed, **figures,
                     "restart_share": (figures["restart_violation_minutes"] / r.violation_minutes
                                       if r.violation_minutes > 0 else math.nan),
                     "load_at_change": float((changes["rate"] / peak).mean()) if len(changes) else math.nan})
    return rows


def run(ctx: ExperimentContext) -> ExperimentResult:
    from experiments.recording import learn_model
    from experiments.suite import preemptive as pe
    from modeler.modelfile import dump_model

    params = Params()
    days = 1.0 if ctx.quick else params.days
    traces = ("nyc_taxi",) if ctx.quick else tuple(pe.TRACES)
    states = STATE_MB[-1:] if ctx.quick else STATE_MB
    seeds = tuple(ctx.seeds) or (ctx.seed,)
    cases = []
    for seed in seeds:
        truth = stateful(pe.job_truth(pe.DAGS[0], ctx.repo, pe.Params()), 0.0)
        ctx.progress(f"seed {seed}: augury learns its model (warm-up -> ingest -> Spark -> calibrate)")
        learned, _ = learn_model(truth, Path(ctx.workdir) / f"learn-{seed}", seed=seed)
        learned_file = Path(ctx.workdir) / f"learned_model-{seed}.yaml"
        learned_file.write_text(dump_model(learned))
        cases += [Case(state_mb=m, seed=seed, trace=t, days=days, learned_file=str(learned_file), repo=str(ctx.repo),
                       traces_dir=str(ctx.traces_dir), shift_s=params.shift_s) for m in states for t in traces]
    rows = []
    for k, case_rows in enumerate(pe._map_cases(cases, params.workers, run_case), 1):
        rows += case_rows
        ctx.progress(f"[{k}/{len(cases)}] replayed {case_rows[0]['trace']} at {case_rows[0]['restart_s']:.0f} s restarts")
    table = pd.DataFrame(rows)
    return _result(table, traces, seeds, days, params)


def _result(table: pd.DataFrame, traces, seeds, days: float, params: Params) -> ExperimentResult:
    from experiments.bootstrap import bootstrap_ci

    grouped = table.groupby(["policy", "restart_s"], sort=False)
    totals = grouped[["violation_minutes", "restart_violation_minutes", "instance_hours", "reconfigurations"]].sum()
    totals = totals.div(len(seeds)).reset_index()
    totals["restart_share"] = totals["restart_violation_minutes"] / totals["violation_minutes"]
    totals["load_at_change"] = grouped["load_at_change"].mean().to_numpy()
    metrics, lines = {}, [f"{', '.join(traces)}: {days:g} day(s) each, restarts of "
                          f"{', '.join(f'{x:.0f}' for x in sorted(set(table['restart_s'])))} s (state "
                          f"{', '.join(f'{x:g}' for x in sorted(set(table['state_mb'])))} MB at "
                          f"{RESTORE_MB_PER_S:g} MB/s + {RESTART_BASE_S:g} s), seed(s) {', '.join(map(str, seeds))}; "
                          f"augury/shift moves priced changes up to {params.shift_s / 3600:g} h."]
    for policy, g in table.groupby("policy", sort=False):
        key = policy.replace("-", "_")
        v, rv = float(g["violation_minutes"].sum()) / len(seeds), float(g["restart_violation_minutes"].sum()) / len(seeds)
        ih = float(g["instance_hours"].sum()) / len(seeds)
        share = rv / v if v > 0 else math.nan
        lac = float(g["load_at_change"].mean())
        lo, hi = bootstrap_ci(g["load_at_change"], "mean")
        metrics.update({f"{key}.violation_minutes": v, f"{key}.restart_violation_minutes": rv,
                        f"{key}.instance_hours": ih, f"{key}.restart_share": share, f"{key}.load_at_change": lac,
                        f"{key}.reconfigurations": float(g["reconfigurations"].sum()) / len(seeds)})
        lines.append(f"- {policy}: {v:.1f} violation minutes ({share:.0%} restarts), {ih:.0f} instance-hours, "
                     f"{metrics[f'{key}.reconfigurations']:.0f} changes; load at a change {lac:.2f} of the peak "
                     f"[95 % CI {lo:.2f}, {hi:.2f}] (n = {len(g)} replays)")
    return ExperimentResult(params={**params.__dict__, "traces": ",".join(traces), "days": days,
                                    "seeds": ",".join(map(str, seeds)), "policies": ",".join(POLICIES)},
                            metrics=metrics, tables={"runs": table, "totals": totals}, summary="\n".join(lines))
