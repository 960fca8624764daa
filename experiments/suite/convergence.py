"""``convergence``: after a load step (x2, x5, /3) from an under- or over-provisioned start, how
many reconfigurations each policy needs to reach the reference configuration (the fewest
instances that meet the run's targets, found without augury), how far from it it ends, and
whether it meets the SLO at the end.

**Targets and ground truth.** Every run states its targets: the new input rate, a p99 latency
SLO and a utilization ceiling of 0.7 for the hottest instance of every operator (the Flink
autoscaler's default target). The **reference configuration** for them is found by
``experiments.reference``: exhaustive enumeration within the operators' bounds on the true
model (``modeler.queueing`` on the true profile as the evaluator; nothing of ``scheduler``), then
confirmed on the testbed (the winner and every cheaper configuration that could meet the
ceiling simulated; the cheapest whose *measured* p99, hottest utilization and backlog meet the
targets). References are cached per (DAG, rate) and listed in the ``references`` table.

**Jobs.** Every bundled example model (``experiments.bundled``: diamond, pipeline, wordcount),
three seeded random DAGs (``experiments.randomdag``: ``RANDOM_DAGS``, unskewed, Zipf-skewed and
mixed key groupings, all with fan-in, fan-out and contention scaling) and every ``--model FILE``.
Per DAG the new rate ``B`` is scaled so that the ceiling alone needs about ``target_instances``
instances (lower when key skew caps the rates the bounds can carry: the highest rate used, 3B,
must stay feasible), and the SLO is ``slo_factor`` x the true p99 of that utilization-only
configuration at ``B`` (so it is attainable; where it binds, ``references.latency_bound``).

**Cases.** Steps x2, x5, /3 (old rate ``B / step``) from both sides: an *under*-provisioned start
is the reference for a lower rate than ``B``, an *over*-provisioned start the reference for a
higher one. The natural side of each step is the reference for the old rate (x2/x5 under, /3
over); the other side the reference for ``B x 1.5`` (over) or ``B / 1.5`` (under), or 2, 3 when
that is not outside the tolerance. Every start is checked: under = more than ``tolerance`` below
the reference's instances and its hottest instance above the ceiling at ``B``; over = more than
``tolerance`` above and within the ceiling. A case whose check fails is skipped and listed.

**History.** Every run starts with ``history_s`` (20 policy minutes) at the old rate before the
step, enough for every policy's windows (the Flink autoscaler's 15-minute window after its first
sample; Dhalion's 300 s; DS2's one-window activation; augury's trust on probation). During it
the configuration is held and every policy runs in advisor mode: it sees every window and
decides, but nothing is applied (augury: the product's ``guard.advisor``; the peers: a decision
is withdrawn, see ``HistoryController``). A start that cannot carry the old rate (only /3 under:
the reference for B/1.5 at 3B) would spend the history overloaded; its history runs on the
reference for the old rate and the job is rescaled to the start at the step (one restart, not
counted as a policy step; the Flink autoscaler restarts its window there, by its own rule).

**Policies** (``POLICIES``): augury's product ``ControlLoop`` on a model it learned from a warm-up
recording of the job (``experiments.recording.learn_model``: testbed -> ingest -> Spark ->
calibrate; never the true model), starting on probation, with the run's targets; DS2 and its
``ds2-max`` variant, the Flink autoscaler's rules and Dhalion (``experiments.baselines``; peers'
defaults, no targets beyond their own). All policies see the same testbed windows (common random
numbers per DAG, case and seed) and pay the same restart.

**Measures** (post-step windows only): ``steps`` = reconfigurations until the policy enters the
configurations it then keeps, if they are within ``tolerance`` of the reference's instances and
the SLO is met at the end, or it ends on the reference configuration itself (``on_reference``:
the reference is the targets' answer, so an SLO missed in the last windows on it is the
reference's miss, not the policy's; ``slo_met`` still reports it) (changes it makes later, within the tolerance, are
``reconfigurations_after_reaching``; ``one_step_only_share`` counts runs with none); ``reached``; ``over_provisioning`` = final / reference instances - 1
(signed); ``slo_met`` = the median p99 of the last ``tail_windows`` windows within the SLO and
the sources' backlog within 1 s of input at the end. Medians with percentile-bootstrap 95 %
intervals (``experiments.bootstrap``), per policy and per DAG.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from experiments.harness import ExperimentContext, ExperimentError, ExperimentResult

NAME = "convergence"
DESCRIPTION = ("load steps x2, x5, /3 from under- and over-provisioned starts on every bundled example, three "
               "random DAGs and any --model: reconfigurations to the reference configuration (exhaustive search "
               "on the truth, confirmed on the testbed), over-provisioning, SLO at the end; augury vs DS2, Flink "
               "rules, Dhalion")
HEADLINE = ("augury.one_step_share", "augury.median_over_provisioning", "augury.slo_met_share",
            "augury.reached_share", "ds2.unskewed_within_3_steps_share", "flink_autoscaler.reached_share",
            "dhalion.reached_share", "runs")
INPUTS = ("seeds", "models")

UNIFORM = "-uniform"
"""Example-name suffix: every key-grouped edge's keys made uniform (``unskewed``)."""

STEPS = {"x2": 2.0, "x5": 5.0, "/3": 1.0 / 3.0}
STARTS = ("under", "over")
POLICIES = ("augury", "ds2", "ds2-max", "flink-autoscaler", "dhalion")
RANDOM_DAGS = (("random-1", 1, "none"), ("random-2", 2, "zipf"), ("random-3", 3, "mixed"))
"""(name, generator seed, key skew) of the random DAGs: fixed here, not chosen from results."""
QUICK_DAGS = ("random-1",)
QUICK_CASES = (("x5", "under"), ("/3", "under"))
FULL_SEEDS = 5
"""Seeds of a full run when none is given: ``seed``, ``seed + 1``, ..."""


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


@dataclass(frozen=True)
class Params:
    """The experiment's settings. Policy times in policy seconds; the testbed runs ``time_scale``
    x faster (simulated seconds = policy seconds / time_scale)."""

    target_instances: int = 12
    """The new rate is scaled so that the utilization ceiling alone needs about this many instances."""
    max_rate_factor: float = 3.0
    """Highest rate a case uses, x the new rate (the /3 step's old rate): it must be feasible."""
    slo_factor: float = 1.5
    """p99 SLO = this x the true p99 of the utilization-only configuration at the new rate."""
    utilization_ceiling: float = 0.7
    time_scale: float = 80.0
    """Policy seconds per simulated second."""
    window_s: float = 3.0
    """Metrics window, simulated seconds (240 policy seconds)."""
    history_s: float = 1200.0
    """Policy seconds at the old rate before the step."""
    post_s: float = 4800.0
    """Policy seconds after the step (80 minutes: the Flink autoscaler's 1 h scale-down delay fits)."""
    restart_s: float = 30.0
    """Restart time per reconfiguration, policy seconds."""
    backlog_slo_s: float = 1.0
    """A window violates the SLO when the sources' backlog exceeds this many seconds of input."""
    tolerance: float = 0.10
    """Within this fraction of the reference's instances counts as reaching it."""
    tail_windows: int = 3
    """The SLO at the end is measured over the last this many windows."""
    start_factors: tuple[float, ...] = (1.5, 2.0, 3.0)
    """Rate factors tried for the non-natural starts (over: B x f; under: B / f)."""
    converge_steps: int = 3
    """DS2's published bound: converged within this many steps."""

    def check(self) -> None:
        for name in ("history_s", "post_s"):
            windows = getattr(self, name) / self.time_scale / self.window_s
            if abs(windows - round(windows)) > 1e-9 or windows < 1:
                raise ExperimentError("must be a whole number of windows", field=name, value=getattr(self, name))


# ------------------------------------------------------------------ jobs


@dataclass(frozen=True)
class Dag:
    name: str
    kind: str
    """bundled | random | user."""
    truth: object = field(repr=False)
    source: str
    """Where the model came from (file, or generator seed and skew)."""

    @property
    def skewed(self) -> bool:
        return is_skewed(self.truth)


def is_skewed(model) -> bool:
    """Some key-grouped edge's keys are not uniform over many keys (Zipf, explicit weights, or
    fewer than 20 keys per key group): DS2's no-skew assumption does not hold."""
    for e in model.edges:
        if e.grouping != "key" or e.keys is None:
            continue
        k = e.keys
        if k.distribution != "uniform" or (k.count is not None
                                           and k.count < 20 * model.operator(e.target).max_parallelism):
            return True
    return False


def dags(ctx: ExperimentContext, quick: bool) -> list[Dag]:
    """The jobs of this run: bundled examples and random DAGs (``QUICK_DAGS`` when quick), then
    every ``--model`` file. Random DAGs are written to ``<workdir>/dags/<name>.yaml``."""
    from experiments import bundled
    from experiments.randomdag import RandomDagSpec, random_model, write_model
    from modeler.modelfile import load_model

    out: list[Dag] = []
    if not quick:
        for name in bundled.list_examples():
            if name.endswith(".yaml"):
                out.append(Dag(Path(name).stem, "bundled", load_model(bundled.example(name)), f"examples/{name}"))
    folder = Path(ctx.workdir) / "dags"
    folder.mkdir(parents=True, exist_ok=True)
    for name, seed, skew in RANDOM_DAGS:
        if quick and name not in QUICK_DAGS:
            continue
        spec = RandomDagSpec(skew=skew)
        write_model(folder / f"{name}.yaml", seed, spec, job=name)
        out.append(Dag(name, "random", random_model(seed, spec, job=name), f"randomdag seed {seed}, skew {skew}"))
    taken = {d.name for d in out}
    for path in ctx.models:
        name = Path(path).stem
        while name in taken:
            name += "+"
        taken.add(name)
        out.append(Dag(name, "user", load_model(path), str(path)))
    return out


# ------------------------------------------------------------------ scale, targets, cases


def scale(truth, params: Params) -> tuple[float, float]:
    """(new rate B, p99 SLO ms) of a DAG (module docstring)."""
    from experiments.reference import _Space
    from modeler.queueing import predict

    space = _Space(truth)
    unit = space.utilization(1.0)  # offered utilization is linear in the rate
    c = params.utilization_ceiling
    r_max = c / max(float(np.min(u)) for u in unit) * (1 - 1e-9)

    def total(rate: float) -> int:
        return sum(int(lo) + int(np.flatnonzero(u * rate <= c + 1e-12)[0]) for lo, u in zip(space.lo, unit))
    lo, hi = 1e-9, r_max
    if total(hi) <= params.target_instances:
        best = hi
    else:
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if total(mid) <= params.target_instances else (lo, mid)
        best = lo
    rate = min(0.95 * best, r_max / (params.max_rate_factor * 1.05))
    rate = float(f"{rate:.3g}")
    from experiments.reference import utilization_only_config

    p99 = predict(truth, utilization_only_config(truth, rate, c), rate).latency_ms["p99"]
    if p99 is None:
        raise ExperimentError("the utilization-only configuration saturates", field="rate", value=rate)
    return rate, float(math.ceil(params.slo_factor * p99 * 10) / 10)


def margins(truth, rate: float, params: Params) -> dict[str, float]:
    """How close the new rate sits to a sizing boundary, next to how precisely one window measures
    it (the ``dags`` table): ``sizing_margin`` at the utilization ceiling (the reference's and
    augury's sizing) and ``ds2_sizing_margin`` at 100 % (DS2 sizes every operator to its true
    processing rate), each the smallest relative rate change that changes some operator's
    size (``experiments.reference.sizing_margin``); ``window_rate_noise`` the relative standard
    deviation of the input counted in one window (Poisson: ``1 / sqrt(rate x window_s)``,
    simulated seconds: the compressed window holds ``time_scale`` x fewer tuples than the policy
    window it stands for, so its noise is ``sqrt(time_scale)`` x larger). Where a margin is below
    about twice the noise, a policy that sizes from one window's rates cannot tell the two sides of
    the boundary apart and may move between them."""
    from experiments.reference import sizing_margin

    return {"sizing_margin": sizing_margin(truth, rate, params.utilization_ceiling),
            "ds2_sizing_margin": sizing_margin(truth, rate, 1.0),
            "window_rate_noise": 1.0 / math.sqrt(rate * params.window_s)}


@dataclass(frozen=True)
class Case:
    step: str
    start: str
    old_rate: float
    new_rate: float
    start_rate: float
    natural: bool
    """The start is the reference for the old rate."""
    start_config: Mapping[str, int]
    start_instances: int
    start_utilization: float
    """True hottest-instance utilization of the start configuration at the new rate."""
    history_config: Mapping[str, int]
    switch: bool
    """The job is rescaled from ``history_config`` to ``start_config`` at the step."""
    reference: object = field(repr=False)


def _hottest(truth, config: Mapping[str, int], rate: float) -> float:
    from modeler.queueing import predict

    pred = predict(truth, dict(config), float(rate))
    scale_ = pred.rate / pred.throughput if pred.throughput > 0 else 1.0
    return max(o.max_utilization * scale_ for n, o in pred.operators.items() if not truth.operator(n).is_source)


def make_case(truth, refs, step: str, start: str, rate: float, slo: float, params: Params) -> Case:
    """The case (step, start) on a DAG at new rate ``rate``; ``ExperimentError`` when no start of
    that side is outside the tolerance (module docstring)."""
    from experiments.reference import RunTargets

    c = params.utilization_ceiling

    def targets(r: float) -> RunTargets:
        return RunTargets(rate=float(r), latency_slo_ms=slo, utilization_ceiling=c)
    ref = refs.get(targets(rate))
    old = rate / STEPS[step]
    natural = (start == "under") == (STEPS[step] > 1)
    tries = [old] if natural else [rate * f if start == "over" else rate / f for f in params.start_factors]
    why = []
    for r in tries:
        s = refs.get(targets(r))
        util = _hottest(truth, s.config, rate)
        n = s.instances
        if start == "under":
            ok = util > c and n < (1 - params.tolerance) * ref.instances - 1e-9
        else:
            ok = util <= c + 1e-12 and n > (1 + params.tolerance) * ref.instances + 1e-9
        if ok:
            carries = _hottest(truth, s.config, old) < 1.0
            hist = s.config if carries else refs.get(targets(old)).config
            return Case(step=step, start=start, old_rate=old, new_rate=rate, start_rate=r, natural=natural,
                        start_config=dict(s.config), start_instances=n, start_utilization=float(util),
                        history_config=dict(hist), switch=not carries, reference=ref)
        why.append(f"reference for {r:.4g}/s has {n} instances, hottest {util:.2f} at the new rate")
    raise ExperimentError(f"no {start}-provisioned start outside {params.tolerance:.0%} of the reference's "
                          f"{ref.instances} instances ({'; '.join(why)})", field="start", value=f"{step} {start}")


# ------------------------------------------------------------------ augury's model


def learn(truth, workdir: Path, seed: int, attempts: int = 3):
    """augury's model of the job from measurements only: (model, info, how), recorded again with
    calibration's advice when the warm-up left an operator too idle to measure
    (``experiments.recording.learn_model_following_advice``, which ``augury run [learn]`` uses too)."""
    from experiments.recording import learn_model_following_advice

    return learn_model_following_advice(truth, workdir, seed=seed, attempts=attempts)


@dataclass(frozen=True)
class Learned:
    """What augury learned of one DAG before any run: the model calibrated from its warm-up
    recording (``learn``), or why there is none. Learned once per DAG (the warm-up runs on the
    testbed with the first seed) and given to every run of the DAG, every case and seed: the seeds
    vary the testbed, not the learning. Each run starts its own control loop on it, so what a
    loop recalibrates from its run's windows stays in that run."""

    model: object = field(repr=False)
    """The learned ``JobModel`` (immutable), or None when learning failed."""
    how: str
    """``warm-up``, ``warm-up again, loading ...`` or ``failed``."""
    trust: float
    """``calibration_trust`` of the fit (nan when it failed)."""
    seconds: float
    error: str = ""


def learn_once(dag: Dag, workdir: Path, seed: int) -> Learned:
    """``learn`` for one DAG into ``workdir/learn-<dag>``; the model is also written there as
    ``learned_model.yaml`` (as ``augury run [learn]`` does), so a run's files show what augury knew."""
    from modeler.modelfile import dump_model

    folder = Path(workdir) / f"learn-{dag.name}"
    t0 = time.perf_counter()
    try:
        model, info, how = learn(dag.truth, folder, seed)
    except Exception as err:  # noqa: BLE001 - reported as augury's failure on this DAG, not fatal
        return Learned(None, "failed", math.nan, time.perf_counter() - t0, f"{type(err).__name__}: {err}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "learned_model.yaml").write_text(dump_model(model), encoding="utf-8")
    return Learned(model, how, float(info.get("calibration_trust", math.nan)), time.perf_counter() - t0)


# ------------------------------------------------------------------ the history (advisor mode)


class HistoryController:
    """A controller that holds the configuration until the step: every window before it is shown
    to the policy, which decides as usual, but nothing is applied (advisor mode); at the step the
    policy takes over (and the job is rescaled to ``switch_to`` first, when given).

    augury's loop runs with the product's advisor flag (``GuardRails.advisor``) during the history;
    the peers are fed each window through their public ``advise(now_s, stats, config)``
    (``experiments.baselines``: the Flink autoscaler keeps its samples and pending scale-downs but
    does not restart its window, as its ``scaling.enabled: false``; Dhalion forgets the action: no
    log entry, no pending evaluation, the next round one interval later; DS2 has no state beyond
    its activation count). A policy without ``advise`` is restored from a copy taken before a
    decision it took.
    """

    def __init__(self, inner, step_sim_s: float, switch_to: Mapping[str, int] | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.step_sim_s = float(step_sim_s)
        self.switch_to = dict(switch_to) if switch_to else None
        self.in_history = True
        self.withdrawn = 0
        """Decisions taken in the history and withdrawn."""

    def start(self, bed, cfg) -> None:
        self.inner.start(bed, cfg)
        self._advisor(True)

    def _advisor(self, on: bool) -> None:
        loop = getattr(self.inner, "loop", None)
        if loop is not None:
            loop.config = replace(loop.config, guard=replace(loop.config.guard, advisor=on))

    def step(self, bed, view, stats, config) -> dict | None:
        if not self.in_history:
            return self.inner.step(bed, view, stats, config)
        self._observe(bed, view, stats, config)
        if view.sim_s < self.step_sim_s - 1e-9:
            return None
        self.in_history = False  # the last window before the step
        self._advisor(False)
        return dict(self.switch_to) if self.switch_to else None

    def applied(self, bed, view, config, restart_s) -> None:
        """The rescale at the step: augury's loop takes the new configuration as in force (an
        action made outside the loop; it would otherwise drop every later window as measured
        under another configuration than the one it knows)."""
        loop = getattr(self.inner, "loop", None)
        if loop is not None and not self.in_history:
            loop.external_change(bed.epoch0_s + bed.now_s)  # in force: re-read at the next collect
        hook = getattr(self.inner, "applied", None)
        if hook is not None:
            hook(bed, view, config, restart_s)

    def _observe(self, bed, view, stats, config) -> None:
        policy = getattr(self.inner, "policy", None)
        if policy is None:  # augury: advisor mode
            self.inner.step(bed, view, stats, config)
            return
        if hasattr(policy, "advise"):  # the peers' public advisor mode (experiments.baselines)
            if getattr(self.inner, "settle", False) and not view.settled:
                return  # the controller consults the policy only on settled windows
            out = policy.advise(view.now_s, stats, dict(config))
        else:
            saved = copy.deepcopy(policy)
            out = self.inner.step(bed, view, stats, config)
            if out and dict(out) != dict(config):
                self.inner.policy = saved
        if out and dict(out) != dict(config):
            self.withdrawn += 1


def _policies(truth, params: Params, slo: float, learned=None):
    from experiments.baselines import DhalionPolicy, DS2Policy, FlinkAutoscalerPolicy, ds2_max
    from experiments.replay import LoopController, PolicyController
    from modeler.modelfile import to_graph
    from scheduler.loop import LoopConfig
    from scheduler.targets import Targets

    graph = to_graph(truth)  # the peers read only the topology and bounds from it
    loop_cfg = LoopConfig(targets=Targets(utilization_target=params.utilization_ceiling, latency_slo_ms=slo))
    return {
        # the product loop on the model it learned from measurements, as augury run
        "augury": lambda: LoopController(learned if learned is not None else truth, loop_cfg, name="augury"),
        "ds2": lambda: PolicyController(DS2Policy(graph), settle=True),
        "ds2-max": lambda: PolicyController(ds2_max(graph), settle=True),  # a variant, not DS2
        "flink-autoscaler": lambda: PolicyController(FlinkAutoscalerPolicy(graph), settle=True),
        "dhalion": lambda: PolicyController(DhalionPolicy(graph), settle=True),
    }


# ------------------------------------------------------------------ one run


def assess(timeline: pd.DataFrame, step_s: float, reference: int, new_rate: float, latency_slo_ms: float,
           tolerance: float = 0.10, tail_windows: int = 3, backlog_slo_s: float = 1.0,
           time_scale: float = 1.0, converge_steps: int = 3,
           reference_config: Mapping[str, int] | None = None) -> dict:
    """What one run did after the step (simulated time ``step_s``), from ``drive``'s timeline.
    ``reference_config``: a run that ends on it has reached the reference even when the SLO
    measured in its last windows is missed (that miss is the reference's, not the policy's;
    ``slo_met`` still reports it)."""
    post = timeline[timeline["sim_s"] > step_s + 1e-9].reset_index(drop=True)
    history = timeline[timeline["sim_s"] <= step_s + 1e-9]
    if post.empty:
        raise ExperimentError("no window after the step", field="post_s", value=0)
    inst = post["instances"].to_numpy()
    applied = post["applied"].to_numpy(bool)
    seg = np.concatenate([[0], np.cumsum(applied)[:-1]])
    n_seg = int(seg[-1]) + 1
    seg_inst = [int(inst[np.flatnonzero(seg == s)[0]]) for s in range(n_seg)]
    within = [abs(i / reference - 1.0) <= tolerance + 1e-9 for i in seg_inst]
    suffix = None
    for s in range(n_seg - 1, -1, -1):
        if not within[s]:
            break
        suffix = s
    tail = post.iloc[-tail_windows:]
    p99 = tail["p99_ms"].to_numpy(float)
    final_p99 = float(np.median(np.where(np.isfinite(p99), p99, np.inf)))
    backlog_ok = bool(post["backlog"].iloc[-1] <= backlog_slo_s * new_rate)
    slo_met = bool(final_p99 <= latency_slo_ms and backlog_ok)
    final = seg_inst[-1]
    on_reference = reference_config is not None and dict(post["config"].iloc[-1]) == dict(reference_config)
    reached = bool(within[-1] and (slo_met or on_reference))
    reconfigs = int(applied.sum())
    stable = bool(seg[-min(tail_windows, len(seg))] == seg[-1] and not applied[-1])
    out = {"steps": float(suffix) if reached else math.nan, "reached": reached, "on_reference": on_reference,
           "final_instances": final, "first_instances": seg_inst[1] if n_seg > 1 else seg_inst[0],
           "over_provisioning": final / reference - 1.0, "slo_met": slo_met, "final_p99_ms": final_p99,
           "reconfigurations": reconfigs, "stable_at_end": stable, "sustains": backlog_ok,
           "converged_within": bool(stable and backlog_ok and reconfigs <= converge_steps),
           "time_to_reach_s": math.nan, "violation_minutes": float(post["violated_s"].sum() / 60.0),
           "history_changes": int(history["applied"].sum()) if len(history) else 0,
           "final_config": " ".join(f"{k}={v}" for k, v in post["config"].iloc[-1].items())}
    if reached:
        ok = np.flatnonzero((seg >= suffix) & ~post["violated"].to_numpy(bool))
        if len(ok):
            out["time_to_reach_s"] = float(post["t_s"].iloc[ok[0]] - step_s * time_scale)
    return out


def run_one(dag: Dag, case: Case, policy: str, params: Params, slo: float, seed: int, run_seed: int,
            learned=None) -> dict:
    """One run: history at the old rate, the step, ``post_s`` after it; its row of ``runs``."""
    from experiments.reference import fmt_config
    from experiments.replay import ReplayConfig, drive
    from experiments.testbed.load import PiecewiseRate

    step_s = params.history_s / params.time_scale
    duration = step_s + params.post_s / params.time_scale
    load = PiecewiseRate((0.0, step_s), (case.old_rate, case.new_rate))
    inner = _policies(dag.truth, params, slo, learned)[policy]()
    ctl = HistoryController(inner, step_s, case.start_config if case.switch else None)
    rcfg = ReplayConfig(window_s=params.window_s, time_scale=params.time_scale, restart_s=params.restart_s,
                        latency_slo_ms=slo, backlog_slo_s=params.backlog_slo_s, seed=run_seed)
    result = drive(dag.truth, load, ctl, rcfg, case.history_config, duration)
    ref = case.reference
    a = assess(result.timeline, step_s, ref.instances, case.new_rate, slo, params.tolerance, params.tail_windows,
               params.backlog_slo_s, params.time_scale, params.converge_steps, reference_config=ref.config)
    if a["history_changes"] != (1 if case.switch else 0):
        raise ExperimentError("the configuration changed during the history", field="history",
                              value=a["history_changes"])
    return {"dag": dag.name, "dag_kind": dag.kind, "skewed": dag.skewed, "seed": seed,
            "policy": policy, "start": case.start, "step": case.step,
            "steps": a["steps"], "reached": a["reached"], "on_reference": a["on_reference"],
            "final_instances": a["final_instances"], "first_instances": a["first_instances"],
            "reconfigurations_after_reaching": a["reconfigurations"] - a["steps"] if a["reached"] else math.nan,
            "reference_instances": ref.instances, "over_provisioning": a["over_provisioning"],
            "slo_met": a["slo_met"],
            "reconfigurations": a["reconfigurations"], "stable_at_end": a["stable_at_end"],
            "sustains": a["sustains"], "converged_within": a["converged_within"],
            "time_to_reach_s": a["time_to_reach_s"], "violation_minutes": a["violation_minutes"],
            "final_p99_ms": a["final_p99_ms"], "latency_slo_ms": slo, "utilization_ceiling": params.utilization_ceiling,
            "old_rate": case.old_rate, "new_rate": case.new_rate, "start_rate": case.start_rate,
            "natural_start": case.natural, "switched_at_step": case.switch,
            "start_instances": case.start_instances, "start_utilization": case.start_utilization,
            "history_withdrawn": ctl.withdrawn, "final_config": a["final_config"],
            "reference_config": fmt_config(ref.config), "run_seed": run_seed}


# ------------------------------------------------------------------ summaries


def _stats_row(t: pd.DataFrame, seed: int) -> dict:
    from experiments.bootstrap import describe, share

    over = describe(t["over_provisioning"], seed=seed)
    reached = share(t["reached"], seed=seed)
    one = share(t["reached"] & (t["steps"] == 1), seed=seed)
    only = share(t["reached"] & (t["steps"] == 1) & (t["reconfigurations"] == 1), seed=seed)
    slo = share(t["slo_met"], seed=seed)
    steps = describe(t.loc[t["reached"], "steps"], seed=seed)
    conv = share(t["converged_within"], seed=seed)
    return {"runs": len(t),
            "reached_share": reached["share"], "reached_lo": reached["share_lo"], "reached_hi": reached["share_hi"],
            "one_step_share": one["share"], "one_step_lo": one["share_lo"], "one_step_hi": one["share_hi"],
            "one_step_only_share": only["share"],
            "median_steps_when_reached": steps["median"], "steps_lo": steps["median_lo"],
            "steps_hi": steps["median_hi"], "max_steps_when_reached": steps["max"],
            "median_over_provisioning": over["median"], "over_lo": over["median_lo"], "over_hi": over["median_hi"],
            "p10_over_provisioning": over["p10"], "p90_over_provisioning": over["p90"],
            "min_over_provisioning": over["min"], "max_over_provisioning": over["max"],
            "slo_met_share": slo["share"], "slo_met_lo": slo["share_lo"], "slo_met_hi": slo["share_hi"],
            "converged_within_share": conv["share"],
            "mean_reconfigurations": float(t["reconfigurations"].mean()),
            "median_time_to_reach_s": float(t.loc[t["reached"], "time_to_reach_s"].median())
            if t["reached"].any() else math.nan,
            "median_violation_minutes": float(t["violation_minutes"].median())}


def summarize(table: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """One row per policy (all DAGs): shares and medians with bootstrap 95 % intervals."""
    rows = [{"policy": p, **_stats_row(table[table["policy"] == p], seed)}
            for p in POLICIES if (table["policy"] == p).any()]
    return pd.DataFrame(rows)


def summarize_by_dag(table: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """One row per (DAG, policy)."""
    rows = []
    for dag in dict.fromkeys(table["dag"]):
        for p in POLICIES:
            t = table[(table["dag"] == dag) & (table["policy"] == p)]
            if len(t):
                rows.append({"dag": dag, "policy": p, "skewed": bool(t["skewed"].iloc[0]), **_stats_row(t, seed)})
    return pd.DataFrame(rows)


def _metrics(summary: pd.DataFrame, table: pd.DataFrame, seed: int) -> dict[str, float]:
    from experiments.bootstrap import share

    metrics: dict[str, float] = {"runs": float(len(table))}
    for _, r in summary.iterrows():
        key = r["policy"].replace("-", "_")
        for col in ("reached_share", "one_step_share", "one_step_only_share", "median_steps_when_reached",
                    "max_steps_when_reached",
                    "median_over_provisioning", "over_lo", "over_hi", "p10_over_provisioning",
                    "p90_over_provisioning", "min_over_provisioning", "max_over_provisioning", "slo_met_share",
                    "mean_reconfigurations", "median_time_to_reach_s", "median_violation_minutes",
                    "converged_within_share"):
            v = r[col]
            if v == v:
                metrics[f"{key}.{col}"] = float(v)
        if r["slo_met_share"] == r["slo_met_share"]:
            metrics[f"{key}.final_slo_met_share"] = float(r["slo_met_share"])  # the name before issue 19
    d = table[(table["policy"] == "ds2") & ~table["skewed"]]
    if len(d):
        s = share(d["converged_within"], seed=seed)
        metrics["ds2.unskewed_within_3_steps_share"] = s["share"]
        metrics["ds2.unskewed_runs"] = float(len(d))
        metrics["ds2.unskewed_reached_within_3_share"] = float((d["reached"] & (d["steps"] <= 3)).mean())
    return metrics


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{x:+.0%}"


def _augury_misses(table: pd.DataFrame, params: Params) -> str:
    """Where augury's runs that did not reach the reference in one step went (a line)."""
    from scheduler.deciders import ModelDeciderConfig
    from scheduler.targets import Targets

    a = table[table["policy"] == "augury"]
    missed = a[~(a["reached"] & (a["steps"] == 1))]
    miss = missed  # what is left to classify
    if not len(miss):
        return "- augury reached the reference in one step in every run."
    tol = params.tolerance
    parts = []
    if "first_instances" in miss.columns:
        drained = miss[miss["reached"] & (miss["steps"] == 2)
                       & (miss["first_instances"] > (1 + tol) * miss["reference_instances"])]
        parts.append(f"{len(drained)} first scaled above it and settled on it one change later (the model decider "
                     f"sizes a backlog to drain within catch_up_s = {Targets().catch_up_s:g} s at <= "
                     f"{ModelDeciderConfig().catch_up_utilization:.0%} busy, then scales down; the Flink autoscaler's "
                     "catch-up duration is 30 min)")
        miss = miss.drop(drained.index)
    reached = miss[miss["reached"]]
    under = miss[~miss["reached"] & (miss["over_provisioning"] < -tol)]
    over = miss[~miss["reached"] & (miss["over_provisioning"] > tol)]
    other = len(miss) - len(reached) - len(under) - len(over)
    parts += [f"{len(reached)} reached it in more steps", f"{len(under)} ended below it ("
              f"{int(under['slo_met'].sum())} of them meeting the SLO)", f"{len(over)} ended above it"]
    if other:
        parts.append(f"{other} ended within {tol:.0%} of it missing the SLO")
    by_dag = ", ".join(f"{d} {n}" for d, n in missed.groupby("dag").size().items())
    return f"- Of augury's {len(missed)} runs not at the reference after one step ({by_dag}): " + "; ".join(parts) + "."


def _summary_text(table: pd.DataFrame, summary: pd.DataFrame, dag_list: list[Dag], dag_table: pd.DataFrame,
                  refs_table: pd.DataFrame, skipped: list[str], errors: list[str], params: Params,
                  seeds: tuple[int, ...], seed: int, settings=None) -> str:
    from experiments.reference import ConfirmSettings

    settings = settings or ConfirmSettings()
    from experiments.bootstrap import share

    by = summary.set_index("policy")
    n_cases = table.groupby(["dag", "step", "start"]).ngroups if len(table) else 0
    lines = [
        f"**Sample.** {len(table)} runs: {len(dag_list)} DAGs ({', '.join(d.name for d in dag_list)}) x "
        f"{n_cases // max(len(dag_list), 1) if dag_list else 0} cases (steps x2, x5, /3 from under and over) x "
        f"{len(seeds)} seed(s) ({', '.join(map(str, seeds))}) x {len(by)} policies; per policy "
        f"{int(by['runs'].iloc[0]) if len(by) else 0} runs. Intervals: percentile bootstrap, 95 %, 2,000 "
        f"resamples of the runs (seeded).",
        "",
        "**Ground truth.** The testbed simulator. Each run's targets: the new input rate, a p99 SLO "
        f"({params.slo_factor:g} x the true p99 of the configuration the utilization ceiling alone needs at the "
        f"new rate) and a hottest-instance utilization ceiling of {params.utilization_ceiling:g}. The reference "
        "configuration is the fewest instances meeting them: exhaustive enumeration within the operators' bounds "
        "on the true model (not augury's planner), then confirmed on the testbed (the winner and every cheaper "
        "configuration that could meet the ceiling simulated; the cheapest whose measured p99, hottest "
        f"utilization (+{settings.util_tolerance:g} for measurement noise; a configuration above the ceiling by the "
        "truth is never a candidate) and backlog meet the targets). "
        f"{len(refs_table)} references; {int(refs_table['latency_bound'].sum()) if len(refs_table) else 0} "
        f"where latency, not the ceiling, set the size; {int(refs_table['escalated'].sum()) if len(refs_table) else 0} "
        "where the testbed overruled the oracle upward; "
        f"{int((refs_table['reference_instances'] < refs_table['oracle_instances']).sum()) if len(refs_table) else 0} "
        "where a cheaper configuration than the oracle's passed on the testbed.",
        "",
        "**What each policy is given.** All: the same testbed metric windows (every "
        f"{params.window_s * params.time_scale:g} policy s), the same restart ({params.restart_s:g} s), "
        f"{params.history_s / 60:g} minutes of history at the old rate in advisor mode (nothing applied), "
        f"then {params.post_s / 60:g} minutes after the step. augury: a model learned from a warm-up recording "
        "(testbed -> ingest -> Spark -> calibrate; never the true model), starting on probation, and the run's "
        "targets (ceiling and SLO). DS2 / ds2-max: measured rates and busy time only (DS2 sizes for 100 % of "
        "the true processing rate; ds2-max from the busiest instance). Flink autoscaler: its defaults (target "
        "0.7, band 0.4-1.0, 15-min window, 1 h scale-down delay). Dhalion: back pressure and queues, its "
        "defaults. Peers know nothing of the SLO.",
        ""]
    a = by.loc["augury"] if "augury" in by.index else None
    if a is not None:
        lines.append(
            f"- **augury**: reached the reference (within {params.tolerance:.0%}) in one step in "
            f"{a.one_step_share:.0%} [{a.one_step_lo:.0%}, {a.one_step_hi:.0%}] of runs (goal >= 95 %: "
            f"{'met' if a.one_step_share >= 0.95 else 'missed'}; with no reconfiguration after it "
            f"{a.one_step_only_share:.0%}), at all in {a.reached_share:.0%}; "
            f"over-provisioning median {_pct(a.median_over_provisioning)} [{_pct(a.over_lo)}, {_pct(a.over_hi)}] "
            f"(goal <= +10 %: {'met' if a.median_over_provisioning <= 0.10 + 1e-9 else 'missed'}), p10 "
            f"{_pct(a.p10_over_provisioning)}, p90 {_pct(a.p90_over_provisioning)}, min "
            f"{_pct(a.min_over_provisioning)}, max {_pct(a.max_over_provisioning)}; SLO met at the end in "
            f"{a.slo_met_share:.0%} [{a.slo_met_lo:.0%}, {a.slo_met_hi:.0%}] (goal >= 95 %: "
            f"{'met' if a.slo_met_share >= 0.95 else 'missed'}).")
        lines.append(_augury_misses(table, params))
    for p in ("ds2", "ds2-max", "flink-autoscaler", "dhalion"):
        if p in by.index:
            r = by.loc[p]
            lines.append(
                f"- {p}: reached in {r.reached_share:.0%} [{r.reached_lo:.0%}, {r.reached_hi:.0%}] (one step "
                f"{r.one_step_share:.0%}); over-provisioning median {_pct(r.median_over_provisioning)} "
                f"[{_pct(r.over_lo)}, {_pct(r.over_hi)}], p10 {_pct(r.p10_over_provisioning)}, p90 "
                f"{_pct(r.p90_over_provisioning)}; SLO met at the end {r.slo_met_share:.0%}; mean "
                f"{r.mean_reconfigurations:.2g} reconfigurations.")
    d = table[(table["policy"] == "ds2") & ~table["skewed"]]
    if len(d):
        s = share(d["converged_within"], seed=seed)
        lines.append(
            f"- DS2 on the unskewed DAGs ({', '.join(sorted(set(d['dag'])))}): settled within "
            f"{params.converge_steps} steps on a configuration that keeps up with the input in {s['share']:.0%} "
            f"[{s['share_lo']:.0%}, {s['share_hi']:.0%}] of {len(d)} runs (its paper: at most 3 steps; "
            f"{'reproduced' if s['share'] >= 0.95 else 'not reproduced'} at >= 95 %); it reached the reference "
            f"(ceiling {params.utilization_ceiling:g}, which DS2 does not aim for) within 3 steps in "
            f"{(d['reached'] & (d['steps'] <= 3)).mean():.0%}.")
    if len(dag_table) and {"sizing_margin", "window_rate_noise"} <= set(dag_table.columns):
        near = [f"{r.dag} ({r.sizing_margin:.1%} at the ceiling, {r.ds2_sizing_margin:.1%} at 100 %, noise "
                f"{r.window_rate_noise:.1%})" for r in dag_table.itertuples()
                if min(r.sizing_margin, r.ds2_sizing_margin) < 2 * r.window_rate_noise]
        if near:
            lines.append(
                "- Knife edges: the new rate is within twice one window's rate noise of a sizing boundary (the "
                "smallest rate change that changes some operator's size, at the ceiling or at 100 % for DS2) on "
                + ", ".join(near) + ". There a policy sizing from one window's rates sees either side of the "
                "boundary from window to window (the `dags` table; compressed windows hold "
                f"{params.time_scale:g}x fewer tuples than the policy windows they stand for).")
    lines += [
        "",
        "**What could still bias this.** (1) The testbed runs the model file's own service-time distributions, "
        "key routing and contention form: augury's model family matches the truth's, which a real engine does "
        "not guarantee (see `accuracy` and `flink-accuracy`). (2) augury learns one model per DAG from one "
        "warm-up (the first seed): the seeds vary the testbed, not its learning. (3) The SLO is loose by "
        "construction, so the utilization ceiling (the Flink autoscaler's own target) sets most references: "
        f"latency-aware sizing is barely tested here. (4) References are confirmed with one {settings.measure_s:g}-s "
        "testbed run each: a configuration within a few thousandths of the ceiling is decided by noise. (5) Time is "
        f"compressed {params.time_scale:g}x: windows of {params.window_s * params.time_scale / 60:g} policy minutes, "
        "so Dhalion's 60-s rounds run once per window and every policy waits a window after a restart; and a "
        f"window holds {params.time_scale:g}x fewer tuples than the policy window it stands for, so the rates and busy "
        f"times every policy sizes from are about {math.sqrt(params.time_scale):.0f}x noisier than a real engine's "
        "(see the knife edges above). (6) The "
        "peers' advisor mode during the history is ours (they have none). (7) Rates are scaled per DAG to a "
        f"reference of about {params.target_instances} instances; with few instances, within "
        f"{params.tolerance:.0%} means exact. (8) The bundled examples were written alongside augury; the random "
        "DAGs were not (generator seeds fixed in the code).",
    ]
    if skipped:
        lines.append(f"- {len(skipped)} case(s) skipped: " + "; ".join(skipped))
    if errors:
        lines.append(f"- {len(errors)} run(s) FAILED: " + "; ".join(errors[:10]))
    return "\n".join(lines)


# ------------------------------------------------------------------ the experiment


def run(ctx: ExperimentContext) -> ExperimentResult:
    from experiments.reference import ConfirmSettings, References

    params = Params()
    params.check()
    quick = ctx.quick
    seeds = tuple(ctx.seeds) if ctx.seeds else ((ctx.seed,) if quick else tuple(range(ctx.seed, ctx.seed + FULL_SEEDS)))
    cases_wanted = QUICK_CASES if quick else tuple((s, st) for s in STEPS for st in STARTS)
    dag_list = dags(ctx, quick)
    settings = ConfirmSettings(window_s=params.window_s)
    rows, errors, skipped, dag_rows, ref_rows = [], [], [], [], []
    plan: list[tuple[int, Dag, float, list[Case]]] = []
    started = time.perf_counter()
    for i, dag in enumerate(dag_list):
        ctx.progress(f"{dag.name}: targets and references")
        try:
            rate, slo = scale(dag.truth, params)
            refs = References(dag.truth, settings, ctx.progress)
            cases = []
            for step, start in cases_wanted:
                try:
                    cases.append(make_case(dag.truth, refs, step, start, rate, slo, params))
                except ExperimentError as err:
                    skipped.append(f"{dag.name} {step} {start}: {err.message}")
            for ref in refs.all():
                ref_rows.append({"dag": dag.name, **ref.row()})
            plan.append((i, dag, slo, cases))
            dag_rows.append({"dag": dag.name, "kind": dag.kind, "source": dag.source, "skewed": dag.skewed,
                             "operators": len(dag.truth.operators), "new_rate": rate, "latency_slo_ms": slo,
                             "reference_instances": refs.get(_targets(rate, slo, params)).instances,
                             "cases": len(cases), **margins(dag.truth, rate, params)})
        except Exception as err:  # noqa: BLE001 - one DAG failing is reported, not fatal to the rest
            skipped.append(f"{dag.name}: {type(err).__name__}: {err}")
            ctx.progress(f"  SKIPPED: {skipped[-1]}")
    ref_seconds = time.perf_counter() - started
    total = sum(len(c) for _, _, _, c in plan) * len(seeds) * len(POLICIES)
    learn_seconds = 0.0
    with ctx.steps(total, "convergence runs") as runs:
        for i, dag, slo, cases in plan:
            ctx.progress(f"{dag.name}: augury learns the job once (warm-up on the testbed -> ingest -> Spark -> "
                         "calibrate), for every case and seed")
            got = learn_once(dag, Path(ctx.workdir), seeds[0])
            learned = got.model
            if got.error:
                errors.append(f"{dag.name}: augury's learning failed: {got.error}")
            learn_seconds += got.seconds
            for row in dag_rows:
                if row["dag"] == dag.name:
                    row["augury_calibration_trust"] = got.trust
                    row["augury_learning"] = got.how
            for c_i, case in enumerate(cases):
                for seed in seeds:
                    run_seed = seed * 10000 + i * 10 + c_i  # the same testbed randomness for every policy
                    for policy in POLICIES:
                        runs.advance(f"{dag.name} {case.step} from {case.start}, seed {seed}: {policy}")
                        if policy == "augury" and learned is None:
                            errors.append(f"{dag.name} {case.step} {case.start} seed {seed} augury: no learned model")
                            continue
                        try:
                            rows.append(run_one(dag, case, policy, params, slo, seed, run_seed,
                                                learned if policy == "augury" else None))
                        except Exception as err:  # noqa: BLE001 - one failed run is reported, not fatal
                            errors.append(f"{dag.name} {case.step} {case.start} seed {seed} {policy}: "
                                          f"{type(err).__name__}: {err}")
                            ctx.progress(f"  FAILED: {errors[-1]}")
    if not rows:
        raise ExperimentError("every run failed or was skipped: " + "; ".join((skipped + errors)[:3]),
                              field="runs", value=total)
    table = pd.DataFrame(rows)
    summary = summarize(table, seed=ctx.seed)
    by_dag = summarize_by_dag(table, seed=ctx.seed)
    refs_table = pd.DataFrame(ref_rows)
    dags_table = pd.DataFrame(dag_rows)
    metrics = _metrics(summary, table, ctx.seed)
    metrics["failed_runs"] = float(len(errors))
    metrics["skipped_cases"] = float(len(skipped))
    metrics["reference_seconds"] = ref_seconds
    metrics["learn_seconds"] = learn_seconds
    text = _summary_text(table, summary, [d for _, d, _, _ in plan], dags_table, refs_table, skipped, errors,
                         params, seeds, ctx.seed, settings)
    tables = {"runs": table, "summary": summary, "by_dag": by_dag, "references": refs_table, "dags": dags_table}
    if skipped:
        tables["skipped"] = pd.DataFrame({"what": skipped})
    p = {k: (",".join(map(str, v)) if isinstance(v, tuple) else v) for k, v in params.__dict__.items()}
    return ExperimentResult(
        params={"dags": ",".join(d.name for d in dag_list), "seeds": ",".join(map(str, seeds)),
                "cases": ",".join(f"{s} {st}" for s, st in cases_wanted), "policies": ",".join(POLICIES), **p},
        metrics=metrics, tables=tables, figures={"convergence": _figure(table, ctx.workdir)}, summary=text)


def _targets(rate: float, slo: float, params: Params):
    from experiments.reference import RunTargets

    return RunTargets(rate=float(rate), latency_slo_ms=slo, utilization_ceiling=params.utilization_ceiling)


def _figure(table: pd.DataFrame, workdir) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    labels = [p for p in POLICIES if p in set(table["policy"])]
    steps = [table[(table["policy"] == p) & table["reached"]]["steps"].to_numpy() for p in labels]
    axes[0].boxplot([s if len(s) else [np.nan] for s in steps])
    axes[0].set_ylabel("reconfigurations to reach the reference")
    over = [table[table["policy"] == p]["over_provisioning"].to_numpy() * 100 for p in labels]
    axes[1].boxplot(over)
    axes[1].axhline(10, color="gray", ls="--", lw=1)
    axes[1].axhline(0, color="gray", ls=":", lw=1)
    axes[1].set_ylabel("final instances vs reference, % (signed)")
    for ax in axes:  # labels set here: boxplot's label keyword changed name in matplotlib 3.9
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=20)
    fig.suptitle("Convergence after load steps")
    fig.tight_layout()
    path = Path(workdir) / "convergence.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
