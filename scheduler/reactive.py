"""The reactive policy: detectors -> diagnosers -> resolvers, fixing Dhalion's known flaws.

Used when the model is not trusted, and always as a safety net for what the model does not
explain (a slow host, a hot key). Units: rates in tuples/s, times in s, fractions in [0, 1].

**Detectors with hysteresis** (``Hysteresis``): a symptom turns on after ``enter_windows``
consecutive windows above its *enter* threshold and off after ``exit_windows`` consecutive
windows below its (lower) *exit* threshold — not Dhalion's single threshold. Per operator:

* ``backpressure``: back-pressured fraction of the window, overlap-aware — the most
  back-pressured instance (``OperatorWindow.backpressure_max``), never a sum over instances;
* ``queue_growth``: least-squares trend of the queued work (input queues; the external backlog
  for sources) over ``trend_windows`` windows, in seconds of the operator's processing per second;
* ``rate_skew``: processing-rate skew across instances, measured on *true* rates (busy time per
  tuple: a slow host), as the slowest instance's service time over the median; an operator with
  one busy instance has no peers to compare with, so its service time is compared with its own
  median over the earlier windows at the same parallelism (``baseline_windows``): a host that
  turns slow shows as a step in it, while a model that was wrong from the start does not
  (without this, one slow instance looks like an under-provisioned operator);
* ``queue_skew``: longest queue over the median queue (+1);
* ``load_skew``: the busiest instance's share of the operator's tuples over the share the model
  explains (1/p without a key distribution): a hot key the model does not know.

**Diagnosers** score every hypothesis for every operator (``Diagnosis.scores`` in [0, 1]) rather
than stopping at the first match; a cause holds at ``score >= 0.5``, several at once, on several
operators at once: ``under_provisioned`` (all instances busy and work piling up upstream or in
its queues), ``slow_instance`` (one instance's service time is out of line; its queue is the
long one), ``data_skew`` (one instance receives an outsized share with normal service times),
``over_provisioned`` (every instance far below the target, no pressure, no backlog).

**Resolvers** (``resolve``): every under-provisioned operator — and every operator the new
load would push over the target — is sized *in the same step* from its true processing rate
(DS2: ``p = ceil(target_in / (true_rate_per_instance * utilization_target))``, the source rates
propagated downstream by the observed selectivities) plus the rate that drains the external
backlog in ``catch_up_s``, capped per step; a slow instance is restarted (moved); data skew is
reported with the key groups the hot key can be in (a repartition suggestion): metrics are per
instance, so one configuration only places it in the hot instance's key-group range; the ranges
of the hot instances at other parallelisms seen while skewed narrow it, and the report names the
hot key group once one candidate is left (``skew_report``); scale-down sizes by the *highest* offered rate over the stabilization
window, never by a fixed percentage.

**Hosts** (issue 26; needs rows with the optional ``host``: ``InstanceWindow.host``). Per host,
with the same hysteresis (``HostDetectors``):

* ``host_slowness``: the *least* slowed of the host's measured instances (busy >= ``min_busy``),
  each as its service time over its operator's median on the other hosts in the window (its
  operator's own earlier median, ``service_baseline``, when it has no busy peer elsewhere). The
  minimum, because a slow host slows every instance on it while a slow instance leaves its host
  mates normal; it needs ``host_min_instances`` measured instances (one instance alone is the
  slow-instance case);
* ``link_blocked``: the most back-pressured instance on the host whose downstream instances
  are idle (median idle >= ``link_receiver_idle``, none at ``saturated_busy``): its output is
  blocked by the network, not by a busy receiver (whose queue would be full and whose instances
  busy or back-pressured);
* ``lost``: the share of the host's instances (where the last complete windows placed them)
  that sent no row at all while instances elsewhere still reported (``observe.vanished_instances``):
  a dead TaskManager reports nothing.

``diagnose_hosts`` turns them into ``HostDiagnosis`` values (``slow_host``, ``slow_link``,
``lost_host``, naming the host, with evidence), and ``resolve_hosts`` answers each with
``move_off_host`` of that host (for a slow link, of the *sending* host): the instances there are
the cause, so a restart in place does not help and a scale-up only adds instances next to them.
A lost host is moved off at once instead of waiting for the engine's failover (``detection_s``,
Flink's heartbeat timeout, 50 s by default): the move fails over now (``Testbed.move_off_host``),
after ``enter_windows`` windows of vanished rows, and the loop checks that the rows come back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import networkx as nx
import numpy as np

from modeler.keys import hot_key_groups, instance_shares, key_group_weights, share_table
from modeler.modelfile import JobModel, to_graph
from scheduler.observe import JobWindow, OperatorWindow
from scheduler.targets import Targets

CAUSES = ("under_provisioned", "slow_instance", "data_skew", "over_provisioned")
HOST_CAUSES = ("slow_host", "slow_link", "lost_host")
"""Causes ``diagnose_hosts`` scores per host."""
HOST_SYMPTOMS = ("host_slowness", "link_blocked", "lost")
THROTTLED_BUSY = 0.95
"""An instance at least this busy may be the bottleneck: what it processes is capped, so its
share of the operator's tuples understates its share of the demand (``skew_report``)."""
SYMPTOMS = ("backpressure", "queue_growth", "rate_skew", "queue_skew", "load_skew")


@dataclass(frozen=True)
class ReactiveConfig:
    """Thresholds and sizing rules of the reactive policy."""

    backpressure_enter: float = 0.10
    """Back-pressured fraction of a window (0.10 = 100 ms/s) that turns the symptom on."""
    backpressure_exit: float = 0.02
    """... and below which it turns off."""
    queue_growth_enter: float = 0.02
    """Queued work growing faster than this (s of processing per s) turns queue_growth on."""
    queue_growth_exit: float = 0.005
    trend_windows: int = 4
    """Windows in the queue-growth trend."""
    rate_skew_enter: float = 1.5
    """Slowest instance's service time / median that turns rate_skew on."""
    rate_skew_exit: float = 1.2
    queue_skew_enter: float = 5.0
    """Longest queue / (median queue + 1) that turns queue_skew on."""
    queue_skew_exit: float = 2.5
    load_skew_enter: float = 1.15
    """Busiest instance's share / the expected share that turns load_skew on (the expected share
    already includes the skew the model's key distribution explains)."""
    load_skew_exit: float = 1.08
    enter_windows: int = 2
    """Consecutive windows above the enter threshold to turn a symptom on."""
    exit_windows: int = 3
    """Consecutive windows below the exit threshold to turn it off."""
    baseline_windows: int = 12
    """Earlier windows (at the same parallelism) whose median service time is the reference for
    an operator with one busy instance (``service_baseline``)."""
    saturated_busy: float = 0.85
    """Mean busy fraction at which an operator counts as fully loaded."""
    min_busy: float = 0.05
    """Instances less busy than this are ignored for service-time skew (noise)."""
    low_utilization: float = 0.3
    """Busiest instance below this (and no pressure) = over-provisioned."""
    max_scale_factor: float = 4.0
    """Per-step cap on scale-up: p_new <= p * factor."""
    host_min_instances: int = 2
    """Measured instances a host needs before it can be called slow: with one, a slow host and a
    slow instance look the same, and the instance's restart is the smaller remedy."""
    link_blocked_enter: float = 0.3
    """Back-pressured fraction of a window of an instance whose receivers idle (``link_blocked``)
    that turns the symptom on: a link throttled below the rate blocks most of the window."""
    link_blocked_exit: float = 0.1
    """... and below which it turns off."""
    link_receiver_idle: float = 0.5
    """Mean idle fraction of the downstream instances from which a sender's back pressure is
    blamed on its link, not on its receivers (a busy receiver is idle far less)."""
    lost_enter: float = 0.99
    """Share of a host's instances that vanished that turns ``lost`` on (all of them)."""
    lost_exit: float = 0.5
    """... and below which it turns off (the host's instances report again)."""


# ---------------------------------------------------------------- detectors


@dataclass
class Hysteresis:
    """On after ``enter_n`` windows above ``enter``, off after ``exit_n`` windows below ``exit``."""

    enter: float
    exit: float
    enter_n: int = 2
    exit_n: int = 3
    active: bool = False
    above: int = 0
    below: int = 0

    def update(self, value: float | None) -> bool:
        if value is None or not math.isfinite(value):
            return self.active
        self.above = self.above + 1 if value > self.enter else 0
        self.below = self.below + 1 if value < self.exit else 0
        if not self.active and self.above >= self.enter_n:
            self.active = True
        elif self.active and self.below >= self.exit_n:
            self.active = False
        return self.active


@dataclass(frozen=True)
class Symptom:
    """One detector's reading for one operator in the newest window."""

    kind: str
    operator: str
    value: float | None
    active: bool
    instance: int | None = None
    """The instance the symptom points at (slowest, longest queue, busiest)."""


def _median(xs: Sequence[float]) -> float:
    return float(np.median(xs)) if len(xs) else 0.0


def busy_instances(op: OperatorWindow, config: ReactiveConfig) -> list:
    """The instances whose service time is measured and which are busy enough (``min_busy``)
    for rate skew to compare."""
    return [i for i in op.instances if i.service_time_ms is not None and i.busy_fraction >= config.min_busy]


def symptom_values(op: OperatorWindow, trend: float | None, config: ReactiveConfig,
                   expected_share: float | None = None, baseline_service_ms: float | None = None
                   ) -> dict[str, tuple[float | None, int | None]]:
    """The raw value (and pointed-at instance) of every symptom for one operator window.

    ``expected_share``: the busiest instance's share the model explains (its key distribution
    through Flink's key groups; default 1/p): load skew is measured against it, so a Zipf skew
    the model already accounts for is not reported again. ``baseline_service_ms``: the
    operator's own earlier service time per tuple at this parallelism (``service_baseline``),
    the reference for rate skew when fewer than two instances are busy enough to compare."""
    out: dict[str, tuple[float | None, int | None]] = {"backpressure": (op.backpressure_max, None),
                                                      "queue_growth": (trend, None)}
    busy = busy_instances(op, config)
    if len(busy) >= 2:
        med = _median([i.service_time_ms for i in busy])
        slow = max(busy, key=lambda i: i.service_time_ms)
        out["rate_skew"] = (slow.service_time_ms / med if med > 0 else None, slow.instance)
    elif busy and baseline_service_ms is not None and math.isfinite(baseline_service_ms) and baseline_service_ms > 0:
        out["rate_skew"] = (busy[0].service_time_ms / baseline_service_ms, busy[0].instance)
    else:
        out["rate_skew"] = (None, None)
    qs = [i for i in op.instances if i.queue_len is not None]
    if len(qs) >= 2:
        longest = max(qs, key=lambda i: i.queue_len)
        out["queue_skew"] = (longest.queue_len / (_median([i.queue_len for i in qs]) + 1.0), longest.instance)
    else:
        out["queue_skew"] = (None, None)
    total = sum(i.processed_rate for i in op.instances)
    if op.parallelism >= 2 and total > 0:
        hot = max(op.instances, key=lambda i: i.processed_rate)
        base = expected_share if expected_share else 1.0 / op.parallelism
        out["load_skew"] = (hot.processed_rate / total / base, hot.instance)
    else:
        out["load_skew"] = (None, None)
    return out


def queue_trend(windows: Sequence[JobWindow], operator: str, n: int) -> float | None:
    """Least-squares slope of the operator's queued work (tuples/s) over the last ``n`` windows of
    one configuration, divided by its true capacity (tuples/s): seconds of work added per second."""
    recent = [w for w in windows if operator in w.operators][-n:]
    if len(recent) < 3 or any(w.config != recent[-1].config for w in recent):
        return None
    ops = [w.operators[operator] for w in recent]
    q = np.array([o.source_lag if o.is_source else (o.queue_len_total or 0.0) for o in ops])
    t = np.array([w.end_s for w in recent])
    slope = float(np.polyfit(t - t[0], q, 1)[0])
    last = ops[-1]
    if last.is_source:  # a source's capacity is what the job accepted
        cap = max(last.processed_rate, 1e-9)
    else:
        cap = last.true_rate_per_instance * last.parallelism
        cap = cap if math.isfinite(cap) and cap > 0 else max(last.processed_rate, 1e-9)
    return slope / cap


def service_baseline(windows: Sequence[JobWindow], operator: str, config: ReactiveConfig) -> float | None:
    """The operator's median measured service time per tuple (ms) over the windows before the
    newest one at its current parallelism (at most ``baseline_windows``, at least
    ``enter_windows + 1`` of them, else None): the reference against which one busy instance's
    service time is judged. A fault that lasts drifts into it after about half the windows; by
    then the instance has been restarted, or restarting did not help and the operator is judged
    by its capacity as it is."""
    if not windows or operator not in windows[-1].operators:
        return None
    p = windows[-1].operators[operator].parallelism
    times = []
    for w in reversed(windows[:-1]):
        o = w.operators.get(operator)
        if o is None or o.parallelism != p:
            continue
        busy = busy_instances(o, config)
        if busy:
            times.append(float(np.median([i.service_time_ms for i in busy])))
        if len(times) >= config.baseline_windows:
            break
    return float(np.median(times)) if len(times) > config.enter_windows else None


def _hysteresis_of(state: dict, key: tuple, thresholds: tuple[float, float], config: "ReactiveConfig") -> "Hysteresis":
    """The hysteresis of ``key`` in ``state`` (a detector's readings), made on first use with
    ``thresholds`` (enter, exit) and ``config``'s window counts."""
    if key not in state:
        enter, exit_ = thresholds
        state[key] = Hysteresis(enter, exit_, config.enter_windows, config.exit_windows)
    return state[key]


@dataclass
class Detectors:
    """Hysteresis state of every (symptom, operator); ``update`` reads the newest window."""

    config: ReactiveConfig = ReactiveConfig()
    _state: dict[tuple[str, str], Hysteresis] = field(default_factory=dict)
    _config_in_force: Mapping[str, int] | None = None

    def _det(self, kind: str, op: str) -> Hysteresis:
        c = self.config
        thresholds = {
            "backpressure": (c.backpressure_enter, c.backpressure_exit),
            "queue_growth": (c.queue_growth_enter, c.queue_growth_exit),
            "rate_skew": (c.rate_skew_enter, c.rate_skew_exit),
            "queue_skew": (c.queue_skew_enter, c.queue_skew_exit),
            "load_skew": (c.load_skew_enter, c.load_skew_exit),
        }
        return _hysteresis_of(self._state, (kind, op), thresholds[kind], c)

    def reset(self) -> None:
        """Forget every reading (after a reconfiguration: old symptoms describe another job)."""
        self._state.clear()

    def update(self, history: Sequence[JobWindow], expected_share: Mapping[str, float] | None = None
               ) -> tuple[Symptom, ...]:
        """Feed the newest window of ``history`` (settled windows, oldest first);
        ``expected_share``: {operator: busiest instance's share the model explains}."""
        if not history:
            return ()
        w = history[-1]
        if self._config_in_force is not None and dict(w.config) != dict(self._config_in_force):
            self.reset()
        self._config_in_force = dict(w.config)
        out = []
        for name, op in w.operators.items():
            trend = queue_trend(history, name, self.config.trend_windows)
            share = (expected_share or {}).get(name)
            # the baseline scans the history: only an operator without two busy peers needs it
            base = service_baseline(history, name, self.config) if len(busy_instances(op, self.config)) < 2 else None
            for kind, (value, inst) in symptom_values(op, trend, self.config, share, base).items():
                active = self._det(kind, name).update(value)
                out.append(Symptom(kind=kind, operator=name, value=value, active=active, instance=inst))
        return tuple(out)


# ---------------------------------------------------------------- host detectors


@dataclass(frozen=True)
class HostSymptom:
    """One host detector's reading for one host."""

    kind: str
    host: str
    value: float | None
    active: bool
    instances: tuple[str, ...] = ()
    """The instances the reading points at, as ``operator[instance]``."""


def placement(window: JobWindow) -> dict[tuple[str, int], str]:
    """``{(operator, instance): host}`` of the window's instances that report a host."""
    return {(name, i.instance): i.host for name, o in window.operators.items() for i in o.instances
            if i.host is not None}


def host_slowness(window: JobWindow, history: Sequence[JobWindow], config: ReactiveConfig = ReactiveConfig()
                  ) -> dict[str, tuple[float | None, tuple[str, ...]]]:
    """Per host: (the least slowed measured instance's service time over its reference, the
    instances measured), ``None`` with fewer than ``host_min_instances`` measured (module
    docstring). ``history``: the settled windows up to ``window`` (for ``service_baseline``)."""
    ratios: dict[str, list[tuple[float, str]]] = {}
    for name, o in window.operators.items():
        busy = busy_instances(o, config)
        if not busy or any(i.host is None for i in busy):
            continue
        base = None
        for i in busy:
            others = [j.service_time_ms for j in busy if j.host != i.host]
            if others:
                ref = _median(others)
            else:
                if base is None:
                    base = service_baseline(history, name, config) or math.nan
                ref = base
            if ref and math.isfinite(ref) and ref > 0:
                ratios.setdefault(i.host, []).append((i.service_time_ms / ref, f"{name}[{i.instance}]"))
    out: dict[str, tuple[float | None, tuple[str, ...]]] = {}
    for host in sorted({h for h in placement(window).values()}):
        rs = ratios.get(host, [])
        out[host] = ((min(r for r, _ in rs) if len(rs) >= config.host_min_instances else None),
                     tuple(n for _, n in rs))
    return out


def link_blocking(window: JobWindow, graph: nx.DiGraph, config: ReactiveConfig = ReactiveConfig()
                  ) -> dict[str, tuple[float, tuple[str, ...]]]:
    """Per host: (the back-pressured fraction of its most blocked instance whose downstream
    instances idle, those instances). An instance whose receivers are busy or blocked themselves
    (a full queue does not idle) is back-pressured by them, not by its link: it counts 0."""
    out: dict[str, tuple[float, tuple[str, ...]]] = {h: (0.0, ()) for h in set(placement(window).values())}
    for name, o in window.operators.items():
        succ = [window.operators[v] for v in graph.successors(name) if v in window.operators] \
            if name in graph else []
        receivers = [i for d in succ for i in d.instances]
        # one saturated receiver (a hot key, a slow instance) blocks its senders however idle the rest
        if not receivers or _median([i.idle_fraction for i in receivers]) < config.link_receiver_idle \
                or max(i.busy_fraction for i in receivers) >= config.saturated_busy:
            continue
        for i in o.instances:
            if i.host is None or i.backpressure_fraction <= 0:
                continue
            value, names = out.get(i.host, (0.0, ()))
            out[i.host] = (max(value, i.backpressure_fraction), names + (f"{name}[{i.instance}]",)
                           if i.backpressure_fraction >= config.link_blocked_exit else names)
    return out


def lost_share(vanished: Sequence[tuple[str, int]], where: Mapping[tuple[str, int], str]
               ) -> dict[str, tuple[float, tuple[str, ...]]]:
    """Per host of ``where`` (the last known placement): (share of its instances among
    ``vanished``, those instances). Every share is 0 when nothing vanished or everything did (a
    source or job that is down says nothing about one host)."""
    gone = set(vanished)
    hosts = sorted(set(where.values()))
    if not gone or all(k in gone for k in where):
        return {h: (0.0, ()) for h in hosts}
    out = {}
    for h in hosts:
        mine = [k for k, v in where.items() if v == h]
        lost = [k for k in mine if k in gone]
        out[h] = (len(lost) / len(mine), tuple(f"{o}[{i}]" for o, i in sorted(lost)))
    return out


@dataclass
class HostDetectors:
    """Hysteresis state of every (host symptom, host). ``update`` reads the newest settled window;
    ``update_vanished`` a read whose newest window lacks whole instances."""

    config: ReactiveConfig = ReactiveConfig()
    _state: dict[tuple[str, str], Hysteresis] = field(default_factory=dict)

    def _det(self, kind: str, host: str) -> Hysteresis:
        c = self.config
        thresholds = {"host_slowness": (c.rate_skew_enter, c.rate_skew_exit),
                      "link_blocked": (c.link_blocked_enter, c.link_blocked_exit),
                      "lost": (c.lost_enter, c.lost_exit)}
        return _hysteresis_of(self._state, (kind, host), thresholds[kind], c)

    def reset(self) -> None:
        """Forget every reading (after an action: the hosts hold other instances now)."""
        self._state.clear()

    def update(self, history: Sequence[JobWindow], graph: nx.DiGraph) -> tuple[HostSymptom, ...]:
        """Feed the newest window of ``history`` (settled windows, oldest first); a complete
        window also counts as no host lost."""
        if not history:
            return ()
        w = history[-1]
        out = []
        for host, (value, names) in sorted(host_slowness(w, history, self.config).items()):
            out.append(HostSymptom("host_slowness", host, value, self._det("host_slowness", host).update(value), names))
        for host, (value, names) in sorted(link_blocking(w, graph, self.config).items()):
            out.append(HostSymptom("link_blocked", host, value, self._det("link_blocked", host).update(value), names))
        for host in sorted(set(placement(w).values())):
            out.append(HostSymptom("lost", host, 0.0, self._det("lost", host).update(0.0)))
        return tuple(out)

    def update_vanished(self, vanished: Sequence[tuple[str, int]], where: Mapping[tuple[str, int], str]
                        ) -> tuple[HostSymptom, ...]:
        """Feed a read whose newest window lacks the ``vanished`` instances; ``where``: the last
        known placement (``placement`` of the newest complete window)."""
        return tuple(HostSymptom("lost", host, value, self._det("lost", host).update(value), names)
                     for host, (value, names) in lost_share(vanished, where).items())


@dataclass(frozen=True)
class HostDiagnosis:
    """Every host cause scored for one host; ``causes`` are those that hold (score >= 0.5)."""

    host: str
    scores: Mapping[str, float]
    causes: tuple[str, ...]
    evidence: tuple[str, ...]
    instances: tuple[str, ...] = ()
    """The instances the causes point at (``operator[instance]``)."""

    def to_dict(self) -> dict:
        return {"host": self.host, "scores": dict(self.scores), "causes": list(self.causes),
                "evidence": list(self.evidence), "instances": list(self.instances)}


def diagnose_hosts(window: JobWindow | None, symptoms: Sequence[HostSymptom],
                   config: ReactiveConfig = ReactiveConfig()) -> tuple[HostDiagnosis, ...]:
    """Score ``slow_host``, ``slow_link`` and ``lost_host`` for every host with a symptom.

    ``window``: the newest settled window (None when the read lacked instances: only ``lost``
    can hold then). A slow link is blamed on one host only when no other host's instances are
    link-blocked as much (peers of the same operators elsewhere would be blocked too by a
    receiver-side cause); a slow host needs the instances of its operators on other hosts
    normal, which ``host_slowness`` measures against."""
    c = config
    by = {(s.kind, s.host): s for s in symptoms}
    hosts = sorted({s.host for s in symptoms})
    out = []
    for h in hosts:
        def sym(kind):
            return by.get((kind, h))

        slow, link, lost = sym("host_slowness"), sym("link_blocked"), sym("lost")
        evidence, instances = [], ()
        s_slow = _ramp(slow.value, 1.0, c.rate_skew_enter) if slow and slow.active else 0.0
        s_link = 0.0
        if link and link.active:
            rivals = [by[("link_blocked", g)].value or 0.0 for g in hosts if g != h and ("link_blocked", g) in by]
            alone = all(r < c.link_blocked_exit or r < 0.5 * (link.value or 0.0) for r in rivals)
            s_link = _ramp(link.value, c.link_blocked_exit, c.link_blocked_enter) * (1.0 if alone else 0.3)
        s_lost = 1.0 if lost and lost.active and (lost.value or 0.0) >= c.lost_enter else 0.0
        if s_lost:
            s_slow = s_link = 0.0  # a dead host's other symptoms are stale
        # a host both slow and blocked: its instances are slow, and a slow sender blocks nothing
        if s_slow >= 0.5 and s_link >= 0.5:
            s_link = 0.0
        if s_slow >= 0.5:
            instances = slow.instances
            evidence.append(f"{h}: every measured instance on it slow together ({', '.join(slow.instances)}); "
                            f"the least slowed {slow.value:.2f}x its operator's service time on the other hosts "
                            f"(or its own before)")
        if s_link >= 0.5:
            instances = link.instances
            evidence.append(f"{h}: {', '.join(link.instances)} back-pressured {link.value:.0%} of the window while "
                            f"the instances they send to idle: output blocked on the network, not by the receivers")
        if s_lost:
            instances = lost.instances
            evidence.append(f"{h}: all its instances ({', '.join(lost.instances)}) sent no metrics while "
                            f"the other hosts' did: the host is lost")
        scores = {"slow_host": round(s_slow, 3), "slow_link": round(s_link, 3), "lost_host": round(s_lost, 3)}
        causes = tuple(k for k in HOST_CAUSES if scores[k] >= 0.5)
        out.append(HostDiagnosis(host=h, scores=scores, causes=causes, evidence=tuple(evidence),
                                 instances=tuple(instances)))
    return tuple(out)


def resolve_hosts(diagnoses: Sequence[HostDiagnosis]) -> tuple["Proposal", ...]:
    """``move_off_host`` of every host with a cause, lost hosts first (their instances process
    nothing), then slow hosts, then slow links' sending hosts."""
    out = []
    for cause in ("lost_host", "slow_host", "slow_link"):
        for d in diagnoses:
            if cause in d.causes:
                why = {"lost_host": "moved off now, failing its instances over, rather than waiting for the "
                                    "engine's heartbeat timeout",
                       "slow_host": "its instances are moved to healthy hosts: a restart in place keeps them "
                                    "slow and a scale-up adds instances beside them",
                       "slow_link": "the sending instances are moved off the host whose outgoing links are "
                                    "slow: more instances would share the same link"}[cause]
                out.append(Proposal(kind="move_off_host", operators=(d.host,), diagnosis=cause, config=None,
                                    reasons=tuple(d.evidence) + (f"{cause} on {d.host}: {why}",
                                                                 f"scores {dict(d.scores)}"),
                                    expected={"backpressure_max": 0.0}, detail={"host": d.host,
                                                                              "instances": list(d.instances)}))
    return tuple(out)


# ---------------------------------------------------------------- diagnosers


@dataclass(frozen=True)
class Diagnosis:
    """Every hypothesis scored for one operator; ``causes`` are those that hold (score >= 0.5)."""

    operator: str
    scores: Mapping[str, float]
    causes: tuple[str, ...]
    evidence: tuple[str, ...]
    instance: int | None = None
    """The slow or hot instance, when a cause points at one."""

    def to_dict(self) -> dict:
        return {"operator": self.operator, "scores": dict(self.scores), "causes": list(self.causes),
                "evidence": list(self.evidence), "instance": self.instance}


def _ramp(value: float | None, lo: float, hi: float) -> float:
    """0 at ``lo``, 1 at ``hi`` (linear, clamped)."""
    if value is None or not math.isfinite(value):
        return 0.0
    return float(min(1.0, max(0.0, (value - lo) / (hi - lo))))


def diagnose(window: JobWindow, symptoms: Sequence[Symptom], graph: nx.DiGraph,
             config: ReactiveConfig = ReactiveConfig(), targets: Targets = Targets()) -> tuple[Diagnosis, ...]:
    """Score every cause for every non-source operator of ``window`` (an operator counts as
    loaded from half the utilization target of ``targets`` up)."""
    c = config
    sym = {(s.kind, s.operator): s for s in symptoms}

    def on(kind: str, op: str) -> bool:
        s = sym.get((kind, op))
        return bool(s and s.active)

    def val(kind: str, op: str) -> float | None:
        s = sym.get((kind, op))
        return s.value if s else None

    out = []
    for name, op in window.operators.items():
        if op.is_source:
            continue
        preds = list(graph.predecessors(name)) if name in graph else []
        upstream_bp = any(on("backpressure", u) for u in preds)
        pressure_src = any(on("queue_growth", s.operator) for s in window.sources)
        pressure = upstream_bp or on("queue_growth", name) or pressure_src
        evidence = []
        if upstream_bp:
            evidence.append("upstream back-pressured: " + ", ".join(
                f"{u} {val('backpressure', u):.0%}" for u in preds if on("backpressure", u)))
        if on("queue_growth", name):
            evidence.append(f"queue growing {val('queue_growth', name):.3f} s/s")
        rate_skew = _ramp(val("rate_skew", name), 1.0, c.rate_skew_enter) if on("rate_skew", name) else 0.0
        queue_skew = _ramp(val("queue_skew", name), 1.0, c.queue_skew_enter) if on("queue_skew", name) else 0.0
        load_skew = _ramp(val("load_skew", name), 1.0, c.load_skew_enter) if on("load_skew", name) else 0.0
        loaded = _ramp(op.busy_mean, targets.utilization_target * 0.5, c.saturated_busy)
        # Under-provisioned: all instances busy and work piling up; not explained by one instance.
        under = (1.0 if pressure else 0.4) * loaded * (1.0 - 0.5 * max(rate_skew, load_skew))
        # Slow instance: its service time is out of line (a slow host); its queue is the long one.
        slow = (0.7 * rate_skew + 0.3 * queue_skew) if rate_skew > 0 else 0.0
        # Data skew: one instance receives an outsized share while service times are normal.
        skew = (0.7 * load_skew + 0.3 * queue_skew) * (1.0 - rate_skew) if load_skew > 0 else 0.0
        over = 0.0
        if not pressure and not upstream_bp and window.backlog <= max(window.input_rate, 1.0) \
                and not on("backpressure", name):
            over = 1.0 - _ramp(op.busy_max, c.low_utilization * 0.5, c.low_utilization)
            over *= 1.0 if op.parallelism > 1 else 0.0
        scores = {"under_provisioned": round(under, 3), "slow_instance": round(slow, 3),
                  "data_skew": round(skew, 3), "over_provisioned": round(over, 3)}
        instance = None
        if slow >= 0.5:
            s = sym[("rate_skew", name)]
            instance = s.instance
            evidence.append(f"instance {s.instance} service time {s.value:.2f}x "
                            + ("the median" if len(busy_instances(op, c)) >= 2
                               else "its own in the earlier windows (no busy peer)"))
        if skew >= 0.5:
            s = sym[("load_skew", name)]
            instance = s.instance if instance is None else instance
            share = op.instances[s.instance].processed_rate / max(op.processed_rate, 1e-9)
            evidence.append(f"instance {s.instance} processes {share:.0%} of the tuples "
                            f"({s.value:.2f}x the share the model expects)")
        if over >= 0.5:
            evidence.append(f"busiest instance {op.busy_max:.0%} busy, below {c.low_utilization:.0%}")
        if under >= 0.5:
            evidence.append(f"mean instance {op.busy_mean:.0%} busy")
        causes = tuple(k for k in CAUSES if scores[k] >= 0.5)
        out.append(Diagnosis(operator=name, scores=scores, causes=causes, evidence=tuple(evidence),
                             instance=instance))
    return tuple(out)


# ---------------------------------------------------------------- resolvers


@dataclass(frozen=True)
class Proposal:
    """A resolver's proposed action (the loop applies guard rails, blacklist, advisor mode)."""

    kind: str
    """scale | restart_instance | report_skew | move_off_host (``operators`` = (host,))."""
    operators: tuple[str, ...]
    diagnosis: str
    config: Mapping[str, int] | None
    """scale: the full new configuration."""
    reasons: tuple[str, ...]
    expected: Mapping[str, float]
    instance: int | None = None
    detail: Mapping[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "operators": list(self.operators), "diagnosis": self.diagnosis,
                "config": dict(self.config) if self.config is not None else None,
                "reasons": list(self.reasons), "expected": dict(self.expected),
                "instance": self.instance, "detail": dict(self.detail)}


def target_rates(window: JobWindow, graph: nx.DiGraph, source_rates: Mapping[str, float]
                 ) -> dict[str, float]:
    """Input rate every operator must sustain: source rates propagated by observed selectivities
    (the model's where the operator processed nothing)."""
    target: dict[str, float] = {}
    for v in nx.topological_sort(graph):
        preds = list(graph.predecessors(v))
        if not preds:
            target[v] = float(source_rates.get(v, 0.0))
            continue
        total = 0.0
        for u in preds:
            o = window.operators.get(u)
            if o is not None and o.processed_rate > 0 and v in o.output_rates:
                ratio = o.output_rates[v] / o.processed_rate
            else:
                ratio = float(graph.edges[u, v].get("selectivity", 1.0))
            total += target[u] * ratio
        target[v] = total
    return target


def ds2_size(window: JobWindow, graph: nx.DiGraph, source_rates: Mapping[str, float],
             utilization_target: float) -> dict[str, int]:
    """DS2 with a utilization target: ``ceil(target_in / (true_rate_per_instance * target))`` for
    every non-source operator with a measured true rate (others keep their parallelism)."""
    targets = target_rates(window, graph, source_rates)
    out = dict(window.config)
    for v, t in targets.items():
        o = window.operators.get(v)
        if o is None or o.is_source:
            continue
        r = o.true_rate_per_instance
        if not math.isfinite(r) or r <= 0:
            continue
        out[v] = max(1, math.ceil(t / (r * utilization_target) - 1e-9))
    return out


def key_group_range(instance: int, parallelism: int, max_parallelism: int) -> tuple[int, int]:
    """Key groups [first, last] owned by ``instance`` (Flink's contiguous ranges)."""
    first = -(-instance * max_parallelism // parallelism)
    last = -(-(instance + 1) * max_parallelism // parallelism) - 1
    return first, last


def _ranges(groups: Sequence[int]) -> list[list[int]]:
    """[[first, last], ...] runs of consecutive key groups."""
    out: list[list[int]] = []
    for g in sorted(groups):
        if out and g == out[-1][1] + 1:
            out[-1][1] = g
        else:
            out.append([g, g])
    return out


def _keyed_input(model: JobModel, operator: str):
    """The operator's key-grouped input edge with a key distribution (the first), or None."""
    return next((e for e in model.edges if e.target == operator and e.grouping == "key" and e.keys is not None),
                None)


def _expected_hot_share(model: JobModel, operator: str, parallelism: int) -> float:
    """Busiest instance's share the model's key distribution explains at ``parallelism``."""
    maxp = model.operator(operator).max_parallelism
    keyed = _keyed_input(model, operator)
    if keyed is not None:
        return float(instance_shares(key_group_weights(keyed.keys, maxp), parallelism).max())
    return 1.0 / parallelism


def skew_evidence(model: JobModel, operator: str, history: Sequence[JobWindow],
                  config: ReactiveConfig = ReactiveConfig()) -> list[tuple[int, int]]:
    """(parallelism, hot instance) per parallelism of the newest run of windows in ``history`` in
    which the operator was load-skewed (busiest instance's share >= ``load_skew_enter`` x the share
    the model explains; an unskewed window ends the run: an earlier hot key is another episode);
    per parallelism the instance that was hottest in most of those windows."""
    votes: dict[int, dict[int, int]] = {}
    for w in reversed(history):  # the trailing run of skewed windows only: one episode
        o = w.operators.get(operator)
        if o is None or o.parallelism < 2:
            continue
        total = sum(i.processed_rate for i in o.instances)
        if total <= 0:
            continue
        hot = max(o.instances, key=lambda i: i.processed_rate)
        if hot.processed_rate / total < config.load_skew_enter * _expected_hot_share(model, operator, o.parallelism):
            break
        by_inst = votes.setdefault(o.parallelism, {})
        by_inst[hot.instance] = by_inst.get(hot.instance, 0) + 1
    return [(p, max(v, key=v.get)) for p, v in sorted(votes.items())]


def skew_report(model: JobModel, operator: str, instance: int, parallelism: int, share: float,
                top: int = 5, history: Sequence[JobWindow] = (),
                config: ReactiveConfig = ReactiveConfig(), demand_rate: float | None = None,
                instance_rate: float | None = None, utilization_target: float = 0.7,
                instance_busy: float | None = None) -> dict:
    """What a data-skew report says about where the hot key is.

    Metrics are per instance (Flink exposes no per-key-group metric; neither does the testbed's
    normalized schema), so one configuration only places the hot key somewhere in the hot
    instance's contiguous key-group range. Every other parallelism observed in ``history`` while
    the operator was skewed places it in another range: the candidates are the intersection
    (assuming one hot key group). ``hot_key_groups`` names the hot key group only when that
    leaves exactly one candidate (``identified``); otherwise it is empty and ``candidate_key_groups``
    says where it lies. ``model_hot_key_groups``: the model's heaviest key groups among the
    candidates (what the model's key distribution expects, not a measurement).

    Whether scaling can help (``hot_key``): with ``demand_rate`` (tuples/s the operator is
    offered, throttling undone) and ``instance_rate`` (tuples/s one instance processes when
    busy all the time), the hot key's own rate is estimated from the hot instance's share as
    ``h = (share - e) / (1 - e)`` of the demand, where ``e`` is the share of the rest of the
    keys that the model's key distribution puts on that instance (``1/p`` without one: the
    other keys spread evenly; at p = 1 the whole share); when ``h x demand`` exceeds ``utilization_target`` of
    one instance, no parallelism brings its instance under the target (one key is never split),
    and the report says so: the key's rate, what one instance takes, and the rest of the
    operator's demand, which the other instances can be sized for. When the hot instance is
    saturated (``instance_busy`` at least ``THROTTLED_BUSY``) its share may be throttled, so
    the estimate is a lower bound: it can show that the key does not fit, never that it does
    (``fits`` is then None).
    """
    spec = model.operator(operator)
    maxp = spec.max_parallelism
    lo, hi = key_group_range(instance, parallelism, maxp)
    candidates = set(range(lo, hi + 1))
    evidence = [(parallelism, instance)]
    for p, inst in skew_evidence(model, operator, history, config):
        if p == parallelism:
            continue
        a, b = key_group_range(inst, p, maxp)
        narrowed = candidates & set(range(a, b + 1))
        if narrowed:  # an empty intersection: not one hot group throughout (keep the current range)
            candidates = narrowed
            evidence.append((p, inst))
    ranked_model: list[int] = []
    expected = None  # the model's share of the hot instance, for the hot key's capacity
    keyed = _keyed_input(model, operator)
    if keyed is not None:
        ranked_model = [g for g, _ in hot_key_groups(keyed.keys, maxp, top=maxp) if g in candidates][:top]
        if parallelism <= maxp:
            expected = float(share_table(keyed.keys, maxp)[parallelism, instance])
    identified = len(candidates) == 1
    ranges = _ranges(candidates)
    where = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges)
    seen = ", ".join(f"instance {i} at parallelism {p}" for p, i in evidence)
    if identified:
        place = f"the hot key is in key group {where} (hot: {seen})"
    else:
        place = (f"the hot key is in one of {len(candidates)} key groups {where} (hot: {seen}); per-instance "
                 f"metrics cannot tell which key group of an instance's range is hot — each further "
                 f"parallelism observed while skewed narrows it")
    saturated = instance_busy is not None and instance_busy >= THROTTLED_BUSY
    hot_key = _hot_key_capacity(share, parallelism, demand_rate, instance_rate, utilization_target, expected,
                                lower_bound=saturated)
    verdict = ""
    if hot_key is not None:
        verdict = (f"; the hot key alone carries {'at least ' if saturated else ''}~{hot_key['rate']:,.0f}/s of "
                   f"{operator}'s {hot_key['demand']:,.0f}/s, one instance takes {hot_key['instance_rate']:,.0f}/s "
                   f"({hot_key['instance_rate'] * utilization_target:,.0f}/s at the {utilization_target:.0%} target): "
                   + ("scaling cannot fix it (one key is never split); the other "
                      f"{hot_key['rest']:,.0f}/s can be sized for" if hot_key["fits"] is False else
                      "it fits one instance, so a parallelism that leaves its instance little other load can"
                      if hot_key["fits"] else
                      "its instance is saturated, so whether it fits one instance shows once it is not"))
    return {"instance": instance, "share": share, "key_groups": [lo, hi],
            "identified": identified, "hot_key_groups": sorted(candidates) if identified else [],
            "candidate_key_groups": ranges, "evidence": [list(x) for x in evidence],
            "model_hot_key_groups": ranked_model, "hot_key": hot_key,
            "suggestion": (f"repartition {operator}: instance {instance} receives {share:.0%} of the input; "
                           f"{place}; split the hot key (salting / two-phase aggregation) — adding "
                           f"instances does not divide one key" + verdict)}


def arrival_share(window: JobWindow, history: Sequence[JobWindow], operator: str, instance: int
                  ) -> tuple[float, bool]:
    """The share of ``operator``'s input that ``instance`` *receives* in ``window``, and whether
    it is measured from arrivals. A saturated instance processes less than it receives, so its
    processed share is only a lower bound; what it receives is what it processes plus the growth
    of its input queue, measured against the previous settled window of the same configuration
    in ``history`` (queue lengths are window means, so the growth is taken between the two
    windows' midpoints). Under credit-based flow control the queue is full and flat and the
    upstream throttles every key alike, so the processed share is already the received one.
    Without a previous window or queue lengths: the processed share, and False."""
    o = window.operators[operator]
    processed = o.instances[instance].processed_rate / max(o.processed_rate, 1e-9)
    prev = next((h for h in reversed(history) if h.start_s < window.start_s and dict(h.config) == dict(window.config)
                 and operator in h.operators), None)
    if prev is None:
        return processed, False
    p = prev.operators[operator]
    dt = (window.start_s + window.window_s / 2) - (prev.start_s + prev.window_s / 2)
    if dt <= 0 or len(p.instances) != len(o.instances) or any(
            i.queue_len is None for i in o.instances + p.instances):
        return processed, False
    received = [max(i.processed_rate + (i.queue_len - j.queue_len) / dt, 0.0)
                for i, j in zip(o.instances, p.instances)]
    total = sum(received)
    if total <= 0:
        return processed, False
    return received[instance] / total, True


def _hot_key_capacity(share: float, parallelism: int, demand_rate: float | None, instance_rate: float | None,
                      utilization_target: float, expected_share: float | None = None,
                      lower_bound: bool = False) -> dict | None:
    """The hot key's estimated rate against one instance's capacity (``skew_report``), or None
    without the rates. ``expected_share``: the model's share of the hot instance (default 1/p);
    ``lower_bound``: the share was throttled (``fits`` None unless the key is already too big)."""
    if demand_rate is None or instance_rate is None or not (math.isfinite(demand_rate) and demand_rate > 0) \
            or not (math.isfinite(instance_rate) and instance_rate > 0):
        return None
    p = max(int(parallelism), 1)
    e = expected_share if expected_share is not None else 1.0 / p
    h = share if p == 1 or e >= 1.0 else (share - e) / (1.0 - e)
    h = min(max(h, 0.0), 1.0)
    rate = h * demand_rate
    fits = rate <= utilization_target * instance_rate
    return {"share": round(h, 4), "rate": rate, "demand": demand_rate, "instance_rate": instance_rate,
            "rest": demand_rate - rate, "lower_bound": lower_bound,
            "fits": None if (lower_bound and fits) else fits}


def _placement(model: JobModel, operator: str, o: OperatorWindow, report: Mapping, targets: Targets
               ) -> tuple[int, str] | None:
    """The parallelism ``hot_key_placement`` gives a skewed operator and why, when it differs
    from the one in force and the one in force does not hold (None otherwise, and while the hot
    instance is saturated: the hot key's rate is then only a lower bound)."""
    hk = report.get("hot_key")
    if not hk or hk.get("fits") is None:
        return None
    groups = list(report.get("hot_key_groups") or
                  [g for a, b in report.get("candidate_key_groups", ()) for g in range(a, b + 1)])
    rate = o.true_rate_per_instance
    args = (model, operator, groups, float(hk["rate"]), float(hk["rest"]), rate, targets.utilization_target)
    found = hot_key_placement(*args)
    if found is None or found["parallelism"] == o.parallelism:
        return None
    now = _placement_at(*args, parallelism=o.parallelism)
    if now is not None and (now["hot_load"] <= targets.utilization_target * rate or not found["fits"]) \
            and now["max_other_load"] <= targets.utilization_target * rate:
        return None  # the parallelism in force already holds
    where = ", ".join(str(g) for g in groups[:6]) + (" ..." if len(groups) > 6 else "")
    p = found["parallelism"]
    if found["fits"]:
        why = (f"hot key on {operator} (key group {where}, ~{hk['rate']:,.0f}/s) fits one instance "
               f"({targets.utilization_target * rate:,.0f}/s at the target): parallelism {o.parallelism} -> {p}, "
               f"whose key-group ranges put it on instance {', '.join(map(str, found['hot_instances']))} with "
               f"{found['hot_load'] - hk['rate']:,.0f}/s of other keys ({found['hot_load'] / rate:.0%} busy)")
    else:
        why = (f"hot key on {operator} (key group {where}, ~{hk['rate']:,.0f}/s) exceeds one instance "
               f"({targets.utilization_target * rate:,.0f}/s at the target): scaling cannot fix it; the other "
               f"{hk['rest']:,.0f}/s sized: parallelism {o.parallelism} -> {p} (other instances at most "
               f"{found['max_other_load'] / rate:.0%} busy)")
    return p, why


def _placement_at(model, operator, groups, hot_rate, rest_rate, instance_rate, utilization_target,
                  parallelism: int) -> dict | None:
    """``hot_key_placement``'s loads at one given parallelism (whether or not it holds): the hot
    key's candidate instances, the load on the worst of them and the most on any other (tuples/s)."""
    from modeler.keys import instance_of_key_group

    spec = model.operator(operator)
    maxp = spec.max_parallelism
    if not groups or parallelism < 1 or parallelism > maxp or not instance_rate > 0:
        return None
    keyed = _keyed_input(model, operator)
    shares = share_table(keyed.keys, maxp)[parallelism, :parallelism] if keyed is not None \
        else np.full(parallelism, 1.0 / parallelism)
    loads = rest_rate * shares
    hot = sorted(set(instance_of_key_group(np.asarray(groups, dtype=np.int64), parallelism, maxp).tolist()))
    return {"hot_instances": hot, "hot_load": max(float(loads[i]) + hot_rate for i in hot),
            "max_other_load": max((float(loads[i]) for i in range(parallelism) if i not in hot), default=0.0)}


def hot_key_placement(model: JobModel, operator: str, hot_groups: Sequence[int], hot_rate: float,
                      rest_rate: float, instance_rate: float, utilization_target: float) -> dict | None:
    """The smallest parallelism of ``operator`` at which, by the model's exact key-group mapping,
    every instance stays at or below ``utilization_target`` of ``instance_rate`` (tuples/s one
    instance processes busy all the time), the hot key's instance included: it carries the hot
    key (``hot_rate`` tuples/s, in one of ``hot_groups``: the worst of them is taken, since
    per-instance metrics only narrow it to candidates) plus the other keys its key-group range
    holds (``rest_rate`` spread by the model's key distribution of the keyed input edge, evenly
    over the key groups without one). A parallelism whose ranges leave the hot key group little
    other load may need fewer instances than one sized for the total rate.

    When the hot key alone is above the target of one instance (no parallelism fits it), the
    smallest parallelism that keeps every *other* instance at the target is returned with
    ``fits`` False: the rest of the operator sized for what remains. None without
    ``hot_groups`` or rates. Returns ``parallelism``, ``fits``, ``hot_instances`` (the candidates'
    instances there), ``hot_load`` (tuples/s on the worst one) and ``max_other_load``."""
    if not hot_groups or not (instance_rate > 0 and math.isfinite(instance_rate)) or hot_rate < 0 or rest_rate < 0:
        return None
    spec = model.operator(operator)
    cap = utilization_target * instance_rate
    fits = hot_rate <= cap
    for p in range(max(spec.min_parallelism, 1), spec.max_parallelism + 1):
        at = _placement_at(model, operator, hot_groups, hot_rate, rest_rate, instance_rate, utilization_target, p)
        # with a hot key that does not fit, its instance is lost anyway; the others must hold
        ok = (at["hot_load"] <= cap if fits else True) and at["max_other_load"] <= cap
        if ok and (fits or len(at["hot_instances"]) < p or p == spec.max_parallelism):
            return {"parallelism": p, "fits": fits, **at}
    return None


def resolve(window: JobWindow, diagnoses: Sequence[Diagnosis], model: JobModel,
            offered_rates: Sequence[Mapping[str, float]], config: ReactiveConfig = ReactiveConfig(),
            allow_scale_down: bool = True, history: Sequence[JobWindow] = (),
            targets: Targets = Targets()) -> tuple[Proposal, ...]:
    """Proposals for the diagnoses of the newest ``window``, sized for ``targets`` (the
    utilization target; the backlog drained within ``targets.catch_up_s``).

    ``offered_rates``: per window of the stabilization window (oldest first), each source's
    offered rate; scale-down sizes by their maximum. ``history``: earlier settled windows (any
    configuration), which narrow down a data-skew report's hot key group (``skew_report``).
    """
    c = config
    graph = to_graph(model)
    by_cause = {cause: [d for d in diagnoses if cause in d.causes] for cause in CAUSES}
    out: list[Proposal] = []
    current = dict(window.config)
    placements: dict[str, tuple[int, str]] = {}
    """A hot key's operator -> (parallelism, why) from ``hot_key_placement``."""

    for d in by_cause["slow_instance"]:
        o = window.operators[d.operator]
        out.append(Proposal(
            kind="restart_instance", operators=(d.operator,), diagnosis="slow_instance", config=None,
            instance=d.instance, reasons=tuple(d.evidence) + (f"scores {dict(d.scores)}",),
            expected={"rate_skew": 1.0, "busy_max": round(o.busy_mean, 3)},
            detail={"instance": d.instance}))
    for d in by_cause["data_skew"]:
        o = window.operators[d.operator]
        inst = d.instance if d.instance is not None else 0
        share, arrivals = arrival_share(window, history, d.operator, inst)
        # the operator's demand with the sources' throttling undone (its arrivals scale with them)
        demand = o.arrival_rate * window.offered_rate / window.input_rate if window.input_rate > 0 else None
        report = skew_report(model, d.operator, inst, o.parallelism, share, history=history, config=c,
                             demand_rate=demand, instance_rate=o.true_rate_per_instance,
                             utilization_target=targets.utilization_target,
                             instance_busy=None if arrivals else o.instances[inst].busy_fraction)
        out.append(Proposal(kind="report_skew", operators=(d.operator,), diagnosis="data_skew", config=None,
                            instance=inst, reasons=tuple(d.evidence) + (report["suggestion"],),
                            expected={}, detail=report))
        placed = _placement(model, d.operator, o, report, targets)
        if placed is not None:
            placements[d.operator] = placed

    # A slow instance is restarted first, never answered with a scale-up of its operator in the
    # same step: its busy time says nothing about the operator's capacity until it is replaced.
    slow_ops = {d.operator for d in by_cause["slow_instance"]}
    placements = {k: v for k, v in placements.items() if k not in slow_ops}
    # a hot key's operator is sized by its placement, not by its total rate
    under = [d.operator for d in by_cause["under_provisioned"] if d.operator not in slow_ops | set(placements)]
    sources_now = {s.operator: s.arrival_rate for s in window.sources}
    if placements:
        new = {**current, **{k: p for k, (p, _) in placements.items()}}
        out.append(Proposal(kind="scale", operators=tuple(placements), diagnosis="data_skew", config=new,
                            reasons=tuple(why for _, why in placements.values()),
                            expected={"backpressure_max": 0.0, "throughput": sum(sources_now.values())}))
    if under:
        drain = {s.operator: s.arrival_rate + s.source_lag / targets.catch_up_s for s in window.sources}
        sized = ds2_size(window, graph, drain, targets.utilization_target)
        new = dict(current)
        changed = []
        for v, p in sized.items():
            if p > current[v] and v not in slow_ops:
                spec = model.operator(v)
                cap = max(current[v] + 1, math.floor(current[v] * c.max_scale_factor))
                new[v] = int(min(p, cap, spec.max_parallelism))
                if new[v] != current[v]:
                    changed.append(v)
        if changed:
            reasons = [f"under-provisioned: {', '.join(under)}"]
            for v in changed:
                o = window.operators[v]
                reasons.append(f"{v}: {current[v]} -> {new[v]} (true rate {o.true_rate_per_instance:,.0f}/s per "
                               f"instance, busy {o.busy_mean:.0%})")
            backlog = window.backlog
            reasons.append(f"offered {sum(sources_now.values()):,.0f}/s + backlog {backlog:,.0f} drained in "
                           f"{targets.catch_up_s:g}s, target utilization {targets.utilization_target:.0%}")
            if placements:  # one scale: the hot key's placement and the under-provisioned operators
                first = next(i for i, q in enumerate(out) if q.kind == "scale" and q.diagnosis == "data_skew")
                q = out[first]
                out[first] = Proposal(kind="scale", operators=q.operators + tuple(changed), diagnosis="data_skew",
                                      config={**new, **{k: p for k, (p, _) in placements.items()}},
                                      reasons=q.reasons + tuple(reasons), expected=q.expected)
            else:
                out.append(Proposal(kind="scale", operators=tuple(changed), diagnosis="under_provisioned",
                                    config=new, reasons=tuple(reasons),
                                    expected={"busy_max": targets.utilization_target, "backpressure_max": 0.0,
                                              "throughput": sum(sources_now.values())}))
    elif allow_scale_down and by_cause["over_provisioned"] and not by_cause["slow_instance"]:
        peak: dict[str, float] = {}
        for rates in offered_rates:
            for k, r in rates.items():
                peak[k] = max(peak.get(k, 0.0), r)
        sized = ds2_size(window, graph, peak or sources_now, targets.utilization_target)
        new = dict(current)
        changed = []
        for d in by_cause["over_provisioned"]:
            v = d.operator
            p = max(sized.get(v, current[v]), model.operator(v).min_parallelism)
            if p < current[v]:
                new[v] = p
                changed.append(v)
        if changed:
            reasons = [f"over-provisioned: {', '.join(changed)}",
                       f"sized for the peak offered rate over the stabilization window "
                       f"({sum(peak.values()):,.0f}/s) at utilization {targets.utilization_target:.0%}"]
            reasons += [f"{v}: {current[v]} -> {new[v]}" for v in changed]
            out.append(Proposal(kind="scale", operators=tuple(changed), diagnosis="over_provisioned",
                                config=new, reasons=tuple(reasons),
                                expected={"busy_max": targets.utilization_target, "backpressure_max": 0.0,
                                          "throughput": sum(sources_now.values())}))
    return tuple(out)
