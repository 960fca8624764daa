"""``Testbed``: a tuple-level discrete-event simulation of a stream-processing job (ground truth).

It reads the job's shape and profile from a model file (``modeler.modelfile.JobModel``), runs
it tuple by tuple (``experiments.testbed.kernel``), produces the metrics a real engine exposes,
and accepts reconfigurations like a real engine. It implements ``scheduler.interfaces``'
``MetricsSource`` (``read``) and ``Actuator`` (``current`` / ``apply``).

Units: rates tuples/s, times ms inside (``_ms``), simulated seconds in the API (``_s``). Clock:
simulated time 0 is ``TestbedConfig.start_time``; ``read``'s ``since_s`` and ``as_of_s`` are
epoch seconds of that clock (``start_time`` + simulated time), like a real engine's.
See ``docs/testbed.md`` for the semantics of every metric.

Shared cores (the model's ``cores``, issue 23): each service of drawn service time S is a CPU
phase of ``cpu_share`` x S core-ms, shared egalitarian by all instances then in their CPU phase
(each at min(1, cores / n) of a core), then a wait of the rest of S that nothing slows. With
``cores`` None or not fewer than the instances that compute (a service time > 0 and
``cpu_share`` > 0) the kernel takes its unshared path: results are identical to the testbed
without cores. ``busy_ms`` stays wall time from service start to completion. At a rebuild
(rescale, restart) the carried instances keep their remaining CPU work (``_cpu_left``); a
restarted instance's tuple is replayed, so it leaves the CPU phase. With the model's
``cpu_overhead_per_instance`` h (the model's per-instance CPU overhead) and n instances computing
on fewer cores, every operator's CPU phase is m = 1 + h (n - cores) times its ``cpu_share`` x S
and the wait phase stays (1 - ``cpu_share``) x S: per configuration, its mean service becomes
S (1 + c (m - 1)) and its CPU part c m / (1 + c (m - 1)) (``_with_cpu_overhead``); a
generating source's CPU work is not grown, as in the model.

Hosts (issue 26): with ``TestbedConfig.hosts`` every instance has a host (``State.inst_host``;
the rule: ``experiments.testbed.hosts``), and the host faults act through the kernel's
``slow`` (slow host), ``link_ms`` / ``link_gap`` (slow link) and ``dead`` (lost host: held until
``_failover`` restarts it elsewhere). Without hosts all of it is inert: the same draws, events and
metrics as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import networkx as nx
import numpy as np
import pandas as pd

from experiments.testbed import kernel as K
from experiments.testbed.config import TestbedConfig
from experiments.testbed.errors import TestbedError
from experiments.testbed.faults import (HotKey, LostHost, LostRack, Rescale, SlowHost, SlowInstance, SlowLink,
                                        check_faults)
from experiments.testbed.hosts import host_name, hosts_of_rack, slot_host
from experiments.testbed.load import as_load
from modeler.errors import ModelError
from modeler.keys import key_group_of, key_weights
from modeler.modelfile import JobModel, to_graph
from modeler.restart import restart_estimate
from scheduler.interfaces import Actuation, ActuationFailed, MetricsBatch, MetricsUnavailable

U_POOL = 1 << 18
POOL = 1 << 15
SPILL = 1 << 16
LAT_BUF = 1 << 18
_GROUPING = {"shuffle": K.G_SHUFFLE, "key": K.G_KEY, "broadcast": K.G_BROADCAST, "forward": K.G_FORWARD}


@dataclass(frozen=True)
class Conservation:
    """Tuple accounting at one instant, per operator and in total.

    ``entered`` = external arrivals (sources) + tuples delivered on in-edges; it always equals
    ``processed + in_service + queued + in_flight`` (nothing is lost, not even across restarts).
    """

    t_s: float
    entered: Mapping[str, int]
    processed: Mapping[str, int]
    in_service: Mapping[str, int]
    queued: Mapping[str, int]
    """In an input queue (sources: in the external backlog) and arrived."""
    in_flight: Mapping[str, int]
    """Sent, not yet arrived (network delay or an output buffer not yet flushed)."""

    def balanced(self) -> bool:
        return all(self.entered[o] == self.processed[o] + self.in_service[o] + self.queued[o]
                   + self.in_flight[o] for o in self.entered)


def _unit_service(rng, family: str, scv: float, n: int, slow_fraction: float, where: str) -> np.ndarray:
    """n service-time multipliers with mean 1 and the given SCV."""
    if family == "auto":
        family = "exponential" if scv == 1 else ("deterministic" if scv == 0 else "gamma")
    if family == "exponential":
        return rng.exponential(1.0, n)
    if family == "deterministic" or scv == 0:
        return np.ones(n)
    if family == "gamma":
        return rng.gamma(1.0 / scv, scv, n)
    if family == "lognormal":
        sigma2 = math.log1p(scv)
        return rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), n)
    if family == "bimodal":
        q = slow_fraction
        lo = 1 - math.sqrt(scv * q / (1 - q))
        hi = 1 + math.sqrt(scv * (1 - q) / q)
        if lo < 0:
            raise TestbedError(f"bimodal with slow fraction {q:g} reaches SCV <= {(1 - q) / q:g} only",
                               field=where, value=scv)
        return np.where(rng.random(n) < q, hi, lo)
    raise TestbedError("unknown service distribution", field=where, value=family)


class Testbed:
    """A simulated job: ``advance`` time, ``read`` metrics, ``apply`` configurations.

    ``Testbed(model, load, config=TestbedConfig(), faults=(), parallelism=None)``: ``load`` is a
    rate (tuples/s), a ``ConstantRate``, a ``PiecewiseRate`` or a ``TraceLoad``; ``parallelism``
    overrides the model's configuration; ``faults`` from ``experiments.testbed.faults``.
    """

    __test__ = False

    def __init__(self, model: JobModel, load, config: TestbedConfig | None = None, *,
                 faults: Sequence = (), parallelism: Mapping[str, int] | None = None,
                 faults_file: str | None = None) -> None:
        self.model = model
        self.cfg = (config or TestbedConfig()).validate(model)
        self.load = as_load(load)
        self.job = model.job
        for op in model.operators:
            if not op.is_source and op.service_time_ms is None and \
                    self.cfg.override(op.name).service_time_ms is None:
                raise TestbedError("the testbed needs a service time for every non-source operator",
                                   file=model.source_file, field=f"{op.name}.service_time_ms")
        p0 = model.resolve_config(parallelism)
        check_faults(faults, model, p0, faults_file, hosts=self.cfg.hosts, hosts_per_rack=self.cfg.hosts_per_rack)
        self.faults = tuple(faults)

        graph = to_graph(model)
        rank = {n: k for k, n in enumerate(model.operator_names)}
        self._names = list(nx.lexicographical_topological_sort(graph, key=rank.get))
        self._opi = {n: k for k, n in enumerate(self._names)}
        self._ops = [model.operator(n) for n in self._names]
        nops = len(self._ops)
        self._out: list[list[int]] = [[] for _ in range(nops)]
        self._edges = []
        for v, name in enumerate(self._names):
            for e in model.edges:
                if e.source == name:
                    self._out[v].append(len(self._edges))
                    self._edges.append(e)
        self._edge_index = {(e.source, e.target): k for k, e in enumerate(self._edges)}
        self._p = [p0[n] for n in self._names]
        self._maxp = np.array([op.max_parallelism for op in self._ops], dtype=np.int64)
        self._is_source = np.array([op.is_source for op in self._ops], dtype=np.bool_)
        self._is_sink = np.array([len(self._out[v]) == 0 for v in range(nops)], dtype=np.bool_)
        self._max_out = max(1, max(len(o) for o in self._out))
        self._window_ms = self.cfg.window_s * 1000.0
        self._start_ts = self.cfg.start_ts
        self._epoch0 = self._start_ts.timestamp()

        # random streams: one generator per purpose, all from the seed
        gens = [np.random.Generator(np.random.PCG64(c)) for c in np.random.SeedSequence(self.cfg.seed).spawn(6)]
        self._g_u, self._g_svc, self._g_sel, self._g_ext, self._g_net, self._g_misc = gens
        self._svc_family, self._svc_scv, self._svc_mean = [], [], []
        generating: set[int] = set()  # sources whose service is their cpu_ms_per_tuple
        for op in self._ops:
            ov = self.cfg.override(op.name)
            self._svc_family.append(ov.service_distribution or self.cfg.service_distribution)
            self._svc_scv.append(op.service_scv if ov.service_scv is None else ov.service_scv)
            mean = ov.service_time_ms if ov.service_time_ms is not None else op.service_time_ms
            if mean is None and op.is_source and op.cpu_ms_per_tuple is not None and model.cores is not None:
                # A source's CPU work per tuple it generates (the model's cpu_ms_per_tuple, which
                # counts only on shared cores): a service that is all CPU, so each instance
                # generates at most one tuple per (stretched) cost, as the model's source thread.
                mean = op.cpu_ms_per_tuple
                generating.add(len(self._svc_mean))
            self._svc_mean.append(mean)
        # CPU part of each operator's service: a generating source's is all CPU.
        self._cpu_share = [1.0 if v in generating else op.cpu_share for v, op in enumerate(self._ops)]
        self._generating = frozenset(generating)
        for v, op in enumerate(self._ops):  # fail early on impossible distributions
            _unit_service(self._g_misc, self._svc_family[v], self._svc_scv[v], 1,
                          self.cfg.bimodal_slow_fraction, f"operators.{op.name}.service_distribution")
        for k, e in enumerate(self._edges):
            if self.cfg.selectivity_distribution == "deterministic" and e.selectivity != round(e.selectivity):
                raise TestbedError("deterministic selectivity needs an integer selectivity",
                                   field=f"edges[{e.source}->{e.target}].selectivity", value=e.selectivity)
        self._net_ms = model.network_delay_ms if self.cfg.network_delay_ms is None else self.cfg.network_delay_ms
        timeout = model.buffer_timeout_ms if self.cfg.buffer_timeout_ms is None else self.cfg.buffer_timeout_ms
        records = model.buffer_records if self.cfg.buffer_records is None else self.cfg.buffer_records
        self._batch = int(records) if timeout > 0 and records > 1 else 1
        self._timeout_ms = float(timeout)
        self._shares = model.source_shares()
        self._keys()
        # hosts (issue 26): without ``hosts`` one implicit host 0 that nothing refers to
        self._nhosts = int(self.cfg.hosts) if self.cfg.hosts is not None else 1
        self._excluded: set[int] = set()
        """Hosts the placement avoids: lost hosts and hosts the operator moved instances off."""
        self._lost: set[int] = set()
        """Lost hosts (for good)."""
        self._failed_over: set[int] = set()
        """Lost hosts whose loss the engine has detected (their instances restarted elsewhere)."""

        # bookkeeping in Python
        self._t_ms = 0.0
        self._rate = self.load.rate_at(0.0)
        self._win_start_ms = 0.0
        self._windows: list[tuple[float, dict]] = []
        self._events: list[dict] = []
        self._pause_end: dict[int, float] = {}
        self._pause_from: dict[int, tuple[int, float, float]] = {}
        """Restarting operator -> (reconfiguration number, its start in s, state restored MB)."""
        self._reconfigurations = 0
        self._active_slow: list[SlowInstance] = []
        self._active_slow_hosts: list[SlowHost] = []
        self._active_links: list[SlowLink] = []
        self._tot_in = np.zeros(nops, dtype=np.int64)
        self._tot_soj = np.zeros(nops)
        self._tot_ext = np.zeros(nops, dtype=np.int64)
        self._tot_out = np.zeros(len(self._edges), dtype=np.int64)
        self._lat_all: list[np.ndarray] = []
        self._reset_window()
        ctl = []
        for k, f in enumerate(self.faults):
            if isinstance(f, Rescale):
                ctl.append((f.at_s * 1000.0, k, "rescale", f))
            elif isinstance(f, (LostHost, LostRack)):  # lost for good: the loss, then its detection
                ctl.append((f.start_s * 1000.0, k, "on", f))
                ctl.append(((f.start_s + f.detection_s) * 1000.0, k, "detect", f))
            else:
                ctl.append((f.start_s * 1000.0, k, "on", f))
                if math.isfinite(f.end_s):
                    ctl.append((f.end_s * 1000.0, k, "off", f))
        self._ctl = sorted(ctl, key=lambda c: (c[0], c[1], c[2] != "off"))
        self._ctl_pos = 0
        self._s = None
        self._build(list(self._p), set(range(nops)), [], initial=True)
        self._log("run_start", detail={"config": self.current(), "load": self.load.describe(),
                                      "seed": self.cfg.seed, "numba": K.HAVE_NUMBA})
        self._apply_controls()

    # ================================================================ public API
    @property
    def now_s(self) -> float:
        """Simulated seconds since the start."""
        return self._t_ms / 1000.0

    @property
    def events(self) -> list[dict]:
        """The event log: run start, faults, reconfigurations and restarts (dicts, oldest first)."""
        return list(self._events)

    def advance(self, seconds: float) -> None:
        """Simulate ``seconds`` more (windows that complete become readable)."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                or seconds < 0:
            raise TestbedError("must be a finite duration >= 0 s", field="seconds", value=seconds)
        self.run_until(self.now_s + seconds)

    def run_until(self, t_s: float, progress=None) -> None:
        """Simulate up to simulated time ``t_s``; ``progress(now_s)`` is called after each window."""
        target = t_s * 1000.0
        while self._t_ms < target - 1e-9:
            nxt = min(target, self._win_start_ms + self._window_ms)
            if self._ctl_pos < len(self._ctl):
                nxt = min(nxt, max(self._ctl[self._ctl_pos][0], self._t_ms))
            change = self.load.next_change_s(self._t_ms / 1000.0) * 1000.0
            nxt = min(nxt, change)
            for end in self._pause_end.values():
                if end > self._t_ms:
                    nxt = min(nxt, end)
            if nxt > self._t_ms:
                self._run_kernel(nxt)
                self._t_ms = nxt
            if self._t_ms >= self._win_start_ms + self._window_ms - 1e-9:
                self._close_window()
                if progress is not None:
                    progress(self.now_s)
            new_rate = self.load.rate_at(self._t_ms / 1000.0 + 1e-12)
            if new_rate != self._rate:
                self._retime(new_rate)
            for v, end in list(self._pause_end.items()):
                if end <= self._t_ms + 1e-9:
                    del self._pause_end[v]
                    k, start_s, state_mb = self._pause_from.pop(v, (None, self.now_s, 0.0))
                    self._log("restart_done", self._names[v],
                              {"reconfiguration": k, "restart_s": round(self.now_s - start_s, 9),
                               "state_mb": state_mb})
            self._apply_controls()

    @property
    def epoch0_s(self) -> float:
        """The metrics clock (epoch seconds) at simulated time 0: timestamps are this + simulated s."""
        return self._epoch0

    # ------------------------------------------------------------ MetricsSource
    def read(self, since_s: float | None = None) -> MetricsBatch:
        """Complete windows that ended after ``since_s`` (epoch seconds of the testbed clock).
        With ``TestbedConfig.hosts`` the rows have the optional 9th field ``host``
        (``scheduler.interfaces.OPTIONAL_COLUMNS``: ``host-<h>``, None on the operator's
        ``parallelism`` row), as ``frame`` has; without hosts the 8 fields of ``RAW_COLUMNS``."""
        rows = []
        as_of = None
        for start_ms, cols in self._windows:
            end_s = self._epoch0 + (start_ms + self._window_ms) / 1000.0
            if since_s is not None and end_s <= since_s:
                continue
            as_of = end_s
            rows.extend(self._rows_of(start_ms, cols))
        if as_of is None:
            raise MetricsUnavailable("no complete metric window newer than since_s "
                                     f"(testbed clock at {self.now_s:g} s)", value=since_s)
        return MetricsBatch(as_of_s=as_of, rows=tuple(rows), config=self.current(),
                            window_s=self.cfg.window_s)

    # ------------------------------------------------------------------ Actuator
    def current(self) -> dict[str, int]:
        return {name: int(self._p[v]) for v, name in enumerate(self._names)}

    def apply(self, config: Mapping[str, int], reason: str = "") -> Actuation:
        """Rescale now: the changed operators (all with ``restart_scope='job'``) pause for the
        model's restart time of the change (``modeler.restart.restart_time_s``: the model file's
        ``restart_base_s`` or else ``TestbedConfig.restart_s``, plus its state over its restore
        rate; exactly ``restart_s`` for a model without a restart model or state); their queued
        tuples are kept and follow their key groups."""
        current = self.current()
        try:
            new = self.model.resolve_config({**current, **dict(config)})
        except ModelError as err:
            raise ActuationFailed(err.message, field=err.field, value=err.value) from None
        changed = {self._opi[n] for n in new if new[n] != current[n]}
        if not changed:
            return Actuation(applied=False, config=current, restart_s=0.0, detail="no change")
        restarted = set(range(len(self._names))) if self.cfg.restart_scope == "job" else changed
        try:
            estimate = restart_estimate(self.model, current, new, default_base_s=float(self.cfg.restart_s))
        except ModelError as err:
            raise ActuationFailed(err.message, field=err.field, value=err.value) from None
        restart_s = float(estimate.restart_s)
        self._reconfigurations += 1
        for v in restarted:
            self._pause_from[v] = (self._reconfigurations, self.now_s, estimate.state_mb)
        self._reconfigure([new[n] for n in self._names], restarted, restart_s)
        self._log("reconfigure", detail={"from": current, "to": new, "restart_s": restart_s,
                                         "restarted": sorted(self._names[v] for v in restarted),
                                         "reason": reason, "reconfiguration": self._reconfigurations,
                                         "state_mb": estimate.state_mb})
        return Actuation(applied=True, config=new, restart_s=restart_s, detail=reason)

    def placement(self) -> dict[tuple[str, int], int]:
        """{(operator, instance): host} now (host indices; without ``hosts`` every instance is on
        host 0). The rule: ``experiments.testbed.hosts``."""
        s = self._s
        return {(self._names[int(s.inst_op[i])], int(s.inst_local[i])): int(s.inst_host[i])
                for i in range(len(s.inst_op))}

    def restart_instance(self, operator: str, instance: int, reason: str = "") -> Actuation:
        """Restart one instance on a healthy host (``scheduler.loop.InstanceRestarter``): the
        slow-instance faults active on it end (one that starts later still applies); its queue and
        key groups are kept. Modelled as instantaneous: a single task restarts in well under a
        metric window, unlike a rescale. With hosts it keeps its host (slow-host and slow-link
        faults stay on it; ``move_off_host`` moves instances off a host)."""
        if operator not in self._opi:
            raise ActuationFailed("unknown operator", field="operator", value=operator)
        v = self._opi[operator]
        if isinstance(instance, bool) or not isinstance(instance, int) or not 0 <= instance < self._p[v]:
            raise ActuationFailed(f"no such instance (parallelism {self._p[v]})",
                                  field=f"{operator}.instance", value=instance)
        ended = [f for f in self._active_slow if f.operator == operator and f.instance == instance]
        self._active_slow = [f for f in self._active_slow if f not in ended]
        self._set_slow()
        self._log("restart_instance", operator, {"instance": instance, "reason": reason,
                                                 "slow_faults_ended": len(ended)})
        return Actuation(applied=True, config=self.current(), restart_s=0.0,
                         detail=f"restarted {operator}[{instance}]" + (f": {reason}" if reason else ""))

    def move_off_host(self, host: int | str, reason: str = "") -> Actuation:
        """Move every instance off ``host`` and keep the placement away from it from now on (an
        operator draining a bad node, as Flink's blocklist does). The instances on it restart
        on other hosts (the placement rule with the host excluded); like ``restart_instance`` this
        is instantaneous, keeps their queues and key groups and ends their slow-instance faults;
        host faults (slow host, slow link) follow the new placement. A lost host whose loss the
        engine has not detected yet is failed over now (the restart of ``lost_host``, with its
        downtime: the instances there died). Raises ``ActuationFailed`` without hosts, for an
        unknown host, or when no live host would remain; a host already avoided is no change.
        ``host``: its index or its name in the metric rows (``host-<h>``, as the control loop's
        ``scheduler.loop.HostMover`` passes it)."""
        n = self._nhosts
        if isinstance(host, str) and host.startswith("host-") and host[5:].isdigit():
            host = int(host[5:])
        if self.cfg.hosts is None:
            raise ActuationFailed("the testbed has no hosts (TestbedConfig.hosts)", field="host", value=host)
        if isinstance(host, bool) or not isinstance(host, (int, np.integer)) or not 0 <= host < n:
            raise ActuationFailed(f"no such host ({n} host(s): 0..{n - 1})", field="host", value=host)
        host = int(host)
        if host in self._lost and host not in self._failed_over:
            restart_s = self._failover(None, None, reason=reason or "move_off_host")
            return Actuation(applied=True, config=self.current(), restart_s=restart_s,
                             detail=f"failed over lost host-{host}" + (f": {reason}" if reason else ""))
        if host in self._excluded:
            return Actuation(applied=False, config=self.current(), restart_s=0.0,
                             detail=f"host-{host} is already avoided")
        if len(self._excluded | {host}) >= n:
            raise ActuationFailed("no other live host to move its instances to", field="host", value=host)
        self._excluded.add(host)
        s = self._s
        moved = np.flatnonzero(s.inst_host == host)
        names = []
        for i in moved:
            v, l = int(s.inst_op[i]), int(s.inst_local[i])
            s.inst_host[i] = slot_host(l, n, self._excluded)
            names.append((self._names[v], l))
        ended = [f for f in self._active_slow if (f.operator, f.instance) in names]
        self._active_slow = [f for f in self._active_slow if f not in ended]
        self._set_slow()
        self._set_links()
        self._log("move_off_host", None, {"host": host, "reason": reason, "slow_faults_ended": len(ended),
                                          "moved": {f"{o}[{l}]": int(s.inst_host[i])
                                                    for (o, l), i in zip(names, moved)}})
        return Actuation(applied=True, config=self.current(), restart_s=0.0,
                         detail=f"moved {len(moved)} instance(s) off host-{host}" + (f": {reason}" if reason else ""))

    # ------------------------------------------------------------------ results
    def frame(self) -> pd.DataFrame:
        """Every complete window's rows in the normalized raw schema (``history.schema``); with
        ``TestbedConfig.hosts`` also its optional ``host`` column (``host-<h>``; None on the
        operator-level ``parallelism`` row)."""
        parts = []
        for start_ms, cols in self._windows:
            n = len(cols["metric"])
            parts.append(pd.DataFrame({
                "ts": np.full(n, start_ms, dtype=float), "operator": cols["operator"],
                "instance": cols["instance"], "metric": cols["metric"], "value": cols["value"],
                "target": cols["target"], "host": cols["host"],
            }))
        if not parts:
            df = pd.DataFrame({c: [] for c in ("ts", "operator", "instance", "metric", "value", "target",
                                               "host")})
        else:
            df = pd.concat(parts, ignore_index=True)
        ts = self._start_ts + pd.to_timedelta(df["ts"].to_numpy(dtype=float), unit="ms")
        out = pd.DataFrame({
            "ts": pd.DatetimeIndex(ts).as_unit("us"),
            "window_s": np.full(len(df), float(self.cfg.window_s)),
            "job": self.job,
            "operator": df["operator"].astype(object),
            "instance": df["instance"].astype(np.int32),
            "metric": df["metric"].astype(object),
            "value": df["value"].astype(float),
            "target": df["target"].astype(object),
        })
        if self.cfg.hosts is not None:
            out["host"] = df["host"].astype(object)
        return out

    def events_frame(self) -> pd.DataFrame:
        import json

        return pd.DataFrame([{**{k: v for k, v in e.items() if k != "detail"},
                              "detail": json.dumps(e.get("detail") or {}, sort_keys=True, default=str)}
                             for e in self._events],
                            columns=["t_s", "ts", "event", "operator", "detail"])

    def conservation(self) -> Conservation:
        """Where every tuple that entered each operator is now (see ``Conservation``)."""
        self._harvest()
        s = self._s
        now = self._t_ms
        entered, processed, in_service, queued, in_flight = {}, {}, {}, {}, {}
        into = np.zeros(len(self._names), dtype=np.int64)
        for k, e in enumerate(self._edges):
            into[self._opi[e.target]] += self._tot_out[k]
        chan_by_dst = np.zeros(len(s.inst_op), dtype=np.int64)
        if len(s.chan_n):
            np.add.at(chan_by_dst, s.chan_dst, s.chan_n)
        for v, name in enumerate(self._names):
            first, p = int(s.op_first[v]), self._p[v]
            q = f = 0
            for i in range(first, first + p):
                arr = self._ring(i)[1]
                f += int((arr > now).sum())
                q += int((arr <= now).sum())
            f += int(chan_by_dst[first:first + p].sum())
            entered[name] = int(self._tot_ext[v] + into[v])
            processed[name] = int(self._tot_in[v])
            in_service[name] = int((s.state[first:first + p] == K.BUSY).sum())
            queued[name] = q
            in_flight[name] = f
        return Conservation(t_s=self.now_s, entered=entered, processed=processed,
                            in_service=in_service, queued=queued, in_flight=in_flight)

    def operator_stats(self) -> dict[str, dict]:
        """Cumulative per-operator figures: processed tuples, mean sojourn per instance visit
        (queue wait + service, ms), external arrivals (sources)."""
        self._harvest()
        out = {}
        for v, name in enumerate(self._names):
            n = int(self._tot_in[v])
            out[name] = {"processed": n, "mean_sojourn_ms": self._tot_soj[v] / n if n else math.nan,
                         "external_arrivals": int(self._tot_ext[v]), "parallelism": self._p[v]}
        return out

    def latencies_ms(self) -> np.ndarray:
        """End-to-end latency (ms) of every tuple completed at a sink in complete windows."""
        return np.concatenate(self._lat_all) if self._lat_all else np.zeros(0)

    @property
    def hops(self) -> int:
        """Tuples processed by all instances so far (one tuple at one instance = one hop)."""
        self._harvest()
        return int(self._tot_in.sum())

    # ============================================================== internals
    def _log(self, event: str, operator: str | None = None, detail: dict | None = None) -> None:
        self._events.append({"t_s": round(self.now_s, 9),
                             "ts": (self._start_ts + pd.Timedelta(milliseconds=self._t_ms)).isoformat(),
                             "event": event, "operator": operator, "detail": detail or {}})

    def _keys(self) -> None:
        """Per key edge: key CDF and key -> key group (Flink's murmur hash), concatenated."""
        ptr = [0]
        cdfs, kgs = [], []
        self._e_uniform = np.zeros(len(self._edges), dtype=np.int64)
        self._e_nkeys = np.zeros(len(self._edges), dtype=np.int64)
        self._e_hot_frac = np.zeros(len(self._edges))
        self._e_hot_kg = np.zeros(len(self._edges), dtype=np.int64)
        for k, e in enumerate(self._edges):
            if e.grouping != "key":
                ptr.append(ptr[-1])
                continue
            maxp = int(self.model.operator(e.target).max_parallelism)
            w = key_weights(e.keys)
            if w is None:
                n = int(self.cfg.many_keys)
                self._e_uniform[k] = 1
                cdf = np.zeros(0)
            else:
                n = len(w)
                uniform = bool(np.all(w == w[0]))
                self._e_uniform[k] = int(uniform)
                cdf = np.zeros(0) if uniform else np.cumsum(w)
                if len(cdf):
                    cdf[-1] = 1.0
            self._e_nkeys[k] = n
            kg = key_group_of(np.arange(n), maxp).astype(np.int64)
            # the cdf array is indexed like key_kg (padding for uniform edges)
            cdfs.append(cdf if len(cdf) else np.zeros(n))
            kgs.append(kg)
            ptr.append(ptr[-1] + n)
        self._key_ptr = np.array(ptr, dtype=np.int64)
        self._key_cdf = np.concatenate(cdfs) if cdfs else np.zeros(1)
        self._key_kg = np.concatenate(kgs) if kgs else np.zeros(1, dtype=np.int64)

    def _svc_ms(self, v: int, p: int) -> float:
        op = self._ops[v]
        mean = self._svc_mean[v]
        if mean is None:
            return 0.0
        ov = self.cfg.override(op.name).contention_overhead
        extra = self.cfg.contention_overhead if ov is None else ov
        return float(mean * op.scaling.factor_at(p) * (1.0 + extra * (p - 1)))

    def _limit(self, v: int) -> int:
        if self._is_source[v]:
            return int(self.cfg.max_backlog)
        ov = self.cfg.override(self._ops[v].name).queue_capacity
        return int(ov or self.cfg.queue_capacity)

    def _inst_rate(self, v: int, p: int) -> float:
        """External arrival rate of one instance of source v, tuples/ms."""
        return self._rate * self._shares.get(self._names[v], 0.0) / p / 1000.0

    def _unit_arrival(self, v: int, n: int, rng) -> np.ndarray:
        scv = self._ops[v].arrival_scv
        if scv == 1:
            return rng.exponential(1.0, n)
        if scv == 0:
            return np.ones(n)
        return rng.gamma(1.0 / scv, scv, n)

    def _sel_counts(self, e, n: int) -> np.ndarray:
        s = e.selectivity
        mode = self.cfg.selectivity_distribution
        g = self._g_sel
        if mode == "auto":
            mode = "bernoulli" if s <= 1 else "poisson"
        if mode == "poisson":
            out = g.poisson(s, n)
        elif mode == "deterministic":
            out = np.full(n, int(round(s)))
        else:
            fl = math.floor(s)
            out = fl + (g.random(n) < (s - fl))
        return np.minimum(out, K.MAX_OUT_PER_EDGE).astype(np.int64)

    def _pools(self):
        nops = len(self._ops)
        svc = np.ones((nops, POOL))
        ext = np.ones((nops, POOL))
        for v in range(nops):
            svc[v] = _unit_service(self._g_svc, self._svc_family[v], self._svc_scv[v], POOL,
                                   self.cfg.bimodal_slow_fraction, self._names[v])
            if self._is_source[v]:
                ext[v] = self._unit_arrival(v, POOL, self._g_ext)
        sel = np.zeros((max(1, len(self._edges)), POOL), dtype=np.int64)
        for k, e in enumerate(self._edges):
            sel[k] = self._sel_counts(e, POOL)
        return self._g_u.random(U_POOL), svc, np.zeros(nops, dtype=np.int64), sel, \
            np.zeros(len(sel), dtype=np.int64), ext, np.zeros(nops, dtype=np.int64), self._net_pool()

    def _net_pool(self) -> np.ndarray:
        fam, scv = self.cfg.network_delay_distribution, self.cfg.network_delay_scv
        if fam == "deterministic" or self._net_ms == 0 or scv == 0 and fam != "exponential":
            return np.zeros(0)
        if fam == "exponential":
            return self._g_net.exponential(1.0, U_POOL)
        if fam == "gamma":
            return self._g_net.gamma(1.0 / scv, scv, U_POOL)
        sigma2 = math.log1p(scv)
        return self._g_net.lognormal(-sigma2 / 2, math.sqrt(sigma2), U_POOL)

    def _refill(self) -> None:
        s = self._s
        if s.m[K.M_UPOS] >= U_POOL // 2:
            s.u_pool[:] = self._g_u.random(U_POOL)
            s.m[K.M_UPOS] = 0
        if len(s.net_pool) and s.m[K.M_NPOS] >= U_POOL // 2:
            s.net_pool[:] = self._net_pool()
            s.m[K.M_NPOS] = 0
        for v in range(len(self._ops)):
            if s.svc_pos[v] >= POOL // 2:
                s.svc_pool[v] = _unit_service(self._g_svc, self._svc_family[v], self._svc_scv[v], POOL,
                                              self.cfg.bimodal_slow_fraction, self._names[v])
                s.svc_pos[v] = 0
            if self._is_source[v] and s.ext_pos[v] >= POOL // 2:
                s.ext_pool[v] = self._unit_arrival(v, POOL, self._g_ext)
                s.ext_pos[v] = 0
        for k, e in enumerate(self._edges):
            if s.sel_pos[k] >= POOL // 2:
                s.sel_pool[k] = self._sel_counts(e, POOL)
                s.sel_pos[k] = 0
        s.m[K.M_LOW] = 0

    def _run_kernel(self, t_end_ms: float) -> None:
        while True:
            code = K.run(self._s, t_end_ms)
            if code == K.DONE:
                return
            if code == K.NEED_POOL:
                self._refill()
            elif code == K.LAT_FULL:
                self._harvest_latency()
            elif code == K.GROW_HEAP:
                self._grow_heap()
            elif code == K.GROW_BACKLOG:
                self._grow_ring(int(self._s.m[K.M_ARG]))
            else:  # pragma: no cover
                raise RuntimeError(f"kernel returned {code}")

    def _grow_heap(self) -> None:
        s = self._s
        n = len(s.h_t) * 2
        new = {}
        for name in ("h_t", "h_seq", "h_kind", "h_id", "h_ver"):
            arr = getattr(s, name)
            grown = np.zeros(n, dtype=arr.dtype)
            grown[:len(arr)] = arr
            new[name] = grown
        self._s = s._replace(**new)

    def _ring(self, i: int):
        """(birth, arrival, key group) of instance i's ring, head first."""
        s = self._s
        off, cap, head, cnt = int(s.ring_off[i]), int(s.ring_cap[i]), int(s.ring_head[i]), int(s.ring_cnt[i])
        idx = off + (head + np.arange(cnt)) % cap
        return s.ring_birth[idx], s.ring_arr[idx], s.ring_kg[idx]

    def _grow_ring(self, i: int) -> None:
        s = self._s
        cap = int(s.ring_cap[i])
        if cap >= self.cfg.max_backlog:
            raise TestbedError(
                f"the external backlog of {self._names[s.inst_op[i]]}[{s.inst_local[i]}] exceeds "
                f"max_backlog ({self.cfg.max_backlog} tuples) at {self.now_s:.1f} s: the job is "
                "overloaded for too long (lower the rate or raise max_backlog)",
                field="max_backlog", value=self.cfg.max_backlog)
        caps = s.ring_cap.copy()
        caps[i] = min(cap * 2, int(self.cfg.max_backlog))
        self._relayout(caps)

    def _relayout(self, caps: np.ndarray) -> None:
        s = self._s
        n = len(caps)
        off = np.zeros(n, dtype=np.int64)
        off[1:] = np.cumsum(caps)[:-1]
        total = int(caps.sum())
        birth, arr, kg = np.zeros(total), np.zeros(total), np.full(total, -1, dtype=np.int64)
        for i in range(n):
            b, a, g = self._ring(i)
            c = len(b)
            birth[off[i]:off[i] + c], arr[off[i]:off[i] + c], kg[off[i]:off[i] + c] = b, a, g
        self._s = s._replace(ring_off=off, ring_cap=caps.astype(np.int64), ring_head=np.zeros(n, dtype=np.int64),
                             ring_birth=birth, ring_arr=arr, ring_kg=kg)

    # --------------------------------------------------------------- windows
    def _reset_window(self) -> None:
        self._w = []
        for v in range(len(self._ops)):
            mp = int(self._maxp[v])
            self._w.append({
                "in": np.zeros(mp, dtype=np.int64), "out": np.zeros((mp, self._max_out), dtype=np.int64),
                "time": np.zeros((mp, 3)), "q": np.zeros(mp), "seen": np.zeros(mp, dtype=bool),
                "ext": np.zeros(mp, dtype=np.int64), "host": np.full(mp, -1, dtype=np.int64),
            })
        self._w_lat: list[tuple[np.ndarray, np.ndarray]] = []

    def _harvest_latency(self) -> None:
        s = self._s
        n = int(s.m[K.M_LATN])
        if n:
            inst = s.lat_inst[:n]
            self._w_lat.append((s.lat_val[:n].copy(), s.inst_op[inst] * (1 << 32) + s.inst_local[inst]))
            s.m[K.M_LATN] = 0

    def _harvest(self) -> None:
        """Move the kernel's counters into the current window (by operator and instance index)."""
        s = self._s
        for v in range(len(self._ops)):
            first, p = int(s.op_first[v]), self._p[v]
            sl = slice(first, first + p)
            w = self._w[v]
            w["in"][:p] += s.rec_in[sl]
            w["out"][:p] += s.rec_out[sl]
            w["time"][:p] += s.acc_time[sl, :3]
            w["q"][:p] += s.q_area[sl]
            w["ext"][:p] += s.ext_in[sl]
            w["seen"][:p] = True
            w["host"][:p] = s.inst_host[sl]  # where it ran last in the window
            self._tot_in[v] += int(s.rec_in[sl].sum())
            self._tot_soj[v] += float(s.soj_sum[sl].sum())
            self._tot_ext[v] += int(s.ext_in[sl].sum())
            for k, e in enumerate(self._out[v]):
                self._tot_out[e] += int(s.rec_out[sl, k].sum())
        for name in ("rec_in", "rec_out", "acc_time", "q_area", "ext_in", "soj_sum"):
            getattr(s, name)[...] = 0
        self._harvest_latency()
        if len(self._w_lat) > 1:
            self._w_lat = [(np.concatenate([a for a, _ in self._w_lat]),
                            np.concatenate([b for _, b in self._w_lat]))]

    def _close_window(self) -> None:
        self._harvest()
        s = self._s
        ops, insts, metrics, values, targets, hosts = [], [], [], [], [], []
        named = self.cfg.hosts is not None

        def add(op, inst, metric, value, target=None, per_instance=True):
            ops.append(op)
            insts.append(inst)
            metrics.append(metric)
            values.append(float(value))
            targets.append(target)
            hosts.append(host_name(w["host"][inst]) if named and per_instance else None)

        lat_vals, lat_inst = (self._w_lat[0] if self._w_lat else (np.zeros(0), np.zeros(0, dtype=np.int64)))
        for v, name in enumerate(self._names):
            w = self._w[v]
            first = int(s.op_first[v])
            p = self._p[v]
            for l in np.flatnonzero(w["seen"]):
                l = int(l)
                if l < p and s.dead[first + l]:
                    continue  # its host is lost: a dead TaskManager reports nothing
                add(name, l, "records_in", w["in"][l])
                for k, e in enumerate(self._out[v]):
                    add(name, l, "records_out", w["out"][l, k], self._edges[e].target)
                add(name, l, "busy_ms", w["time"][l, 0])
                add(name, l, "backpressured_ms", w["time"][l, 1])
                add(name, l, "idle_ms", w["time"][l, 2])
                if self._is_source[v]:
                    lag = int(s.ring_cnt[first + l]) if l < self._p[v] else 0
                    add(name, l, "source_lag", lag)
                else:
                    add(name, l, "queue_len", w["q"][l] / self._window_ms)
            add(name, 0, "parallelism", self._p[v], per_instance=False)
            if self._is_sink[v] and len(lat_vals):
                mine = (lat_inst >> 32) == v
                locs = lat_inst[mine] & ((1 << 32) - 1)
                vals = lat_vals[mine]
                for l in np.unique(locs):
                    if l < self._p[v] and s.dead[int(s.op_first[v]) + l]:
                        continue
                    x = vals[locs == l]
                    p50, p95, p99 = np.percentile(x, [50, 95, 99])
                    add(name, int(l), "latency_ms_mean", x.mean())
                    add(name, int(l), "latency_ms_p50", p50)
                    add(name, int(l), "latency_ms_p95", p95)
                    add(name, int(l), "latency_ms_p99", p99)
        if len(lat_vals):
            self._lat_all.append(lat_vals)
        cols = {"operator": np.array(ops, dtype=object), "instance": np.array(insts, dtype=np.int32),
                "metric": np.array(metrics, dtype=object), "value": np.array(values),
                "target": np.array(targets, dtype=object), "host": np.array(hosts, dtype=object)}
        self._windows.append((self._win_start_ms, cols))
        self._win_start_ms += self._window_ms
        self._reset_window()

    def _rows_of(self, start_ms: float, cols: dict) -> list[tuple]:
        ts = self._start_ts + pd.Timedelta(milliseconds=start_ms)
        w = float(self.cfg.window_s)
        if self.cfg.hosts is not None:  # the optional host field: where the instance ran
            return [(ts, w, self.job, o, int(i), m, float(x), t, h)
                    for o, i, m, x, t, h in zip(cols["operator"], cols["instance"], cols["metric"],
                                                cols["value"], cols["target"], cols["host"])]
        return [(ts, w, self.job, o, int(i), m, float(x), t)
                for o, i, m, x, t in zip(cols["operator"], cols["instance"], cols["metric"],
                                         cols["value"], cols["target"])]

    # ---------------------------------------------------------- faults, load
    def _apply_controls(self) -> None:
        while self._ctl_pos < len(self._ctl) and self._ctl[self._ctl_pos][0] <= self._t_ms + 1e-9:
            _, k, what, f = self._ctl[self._ctl_pos]
            self._ctl_pos += 1
            if isinstance(f, Rescale):
                try:
                    self.apply(f.config, reason=f"faults[{k}]")
                except ActuationFailed as err:
                    raise TestbedError(f"scheduled rescale failed: {err.message}",
                                       field=f"faults[{k}].config", value=dict(f.config)) from None
            elif isinstance(f, SlowInstance):
                if what == "on":
                    self._active_slow.append(f)
                elif f in self._active_slow:  # not already ended by restart_instance
                    self._active_slow.remove(f)
                self._set_slow()
                self._log(f"fault_{'start' if what == 'on' else 'end'}", f.operator,
                          {"type": "slow_instance", "instance": f.instance, "factor": f.factor})
            elif isinstance(f, HotKey):
                e = self._edge_index[(f.source, f.target)]
                if what == "on":
                    maxp = int(self.model.operator(f.target).max_parallelism)
                    key = f.key if f.key is not None else int(self._e_nkeys[e])
                    kg = int(key_group_of(key, maxp))
                    self._e_hot_frac[e], self._e_hot_kg[e] = f.share, kg
                    detail = {"type": "hot_key", "edge": f"{f.source}->{f.target}", "share": f.share,
                              "key": key, "key_group": kg,
                              "instance": kg * self._p[self._opi[f.target]] // maxp}
                else:
                    self._e_hot_frac[e] = 0.0
                    detail = {"type": "hot_key", "edge": f"{f.source}->{f.target}"}
                self._s.e_hot_frac[:] = self._e_hot_frac
                self._s.e_hot_kg[:] = self._e_hot_kg
                self._log(f"fault_{'start' if what == 'on' else 'end'}", f.target, detail)
            elif isinstance(f, SlowHost):
                if what == "on":
                    self._active_slow_hosts.append(f)
                else:
                    self._active_slow_hosts.remove(f)
                self._set_slow()
                self._log(f"fault_{'start' if what == 'on' else 'end'}", None,
                          {"type": "slow_host", "host": f.host, "factor": f.factor,
                           "instances": self._instances_on({f.host})})
            elif isinstance(f, SlowLink):
                if what == "on":
                    self._active_links.append(f)
                else:
                    self._active_links.remove(f)
                self._set_links()
                self._log(f"fault_{'start' if what == 'on' else 'end'}", None,
                          {"type": "slow_link", "host": f.host, "delay_ms": f.delay_ms,
                           "bandwidth": f.bandwidth, "instances": self._instances_on({f.host})})
            elif isinstance(f, (LostHost, LostRack)):
                if what == "on":
                    self._lose(k, f)
                else:
                    self._failover(k, f)

    def _lost_hosts_of(self, f) -> list[int]:
        if isinstance(f, LostHost):
            return [f.host]
        return hosts_of_rack(f.rack, self._nhosts, self.cfg.hosts_per_rack)

    def _instances_on(self, hosts: set[int]) -> list[str]:
        """'operator[instance]' of every instance now on one of ``hosts`` (for the event log)."""
        s = self._s
        return [f"{self._names[int(s.inst_op[i])]}[{int(s.inst_local[i])}]"
                for i in np.flatnonzero(np.isin(s.inst_host, list(hosts)))]

    def _lose(self, k: int, f) -> None:
        """A host or rack is lost: its instances stop now (``kernel``: ``dead``), holding their
        queues, tuples in service and pending outputs for the restart; their rows vanish."""
        s = self._s
        hosts = self._lost_hosts_of(f)
        self._lost.update(hosts)
        self._excluded.update(hosts)  # nothing is placed there again
        on = np.isin(s.inst_host, hosts)
        s.dead[on] = 1
        kind = "lost_host" if isinstance(f, LostHost) else "lost_rack"
        where = {"host": f.host} if isinstance(f, LostHost) else {"rack": f.rack}
        self._log("fault_start", None, {"type": kind, **where, "hosts": hosts,
                                        "instances": self._instances_on(set(hosts)),
                                        "detection_s": f.detection_s})

    def _failover(self, k: int | None, f, reason: str | None = None) -> float:
        """The engine detects the loss: it restarts the whole job (``restart_scope: job``) or the
        operators with a dead instance, placed on the surviving hosts, for the restart time of a
        restore: the base restart time plus the restarted operators' state over the restore rate
        (``modeler.restart``'s base and rate; a failover restores what it restarts)."""
        s = self._s
        hosts = self._lost_hosts_of(f) if f is not None else sorted(self._lost - self._failed_over)
        self._failed_over.update(self._lost)  # every dead instance restarts now, whichever host it was on
        dead_ops = {int(v) for v in np.unique(s.inst_op[s.dead == 1])}
        kind = "lost_host" if isinstance(f, LostHost) else ("lost_rack" if f is not None else "lost_hosts")
        reason = reason if reason is not None else f"faults[{k}]"
        if not dead_ops:  # nothing ran there (or a restart already moved it): nothing to do
            self._log("failover", None, {"type": kind, "hosts": hosts, "restarted": [], "restart_s": 0.0,
                                         "reason": reason})
            return 0.0
        restarted = set(range(len(self._names))) if self.cfg.restart_scope == "job" else dead_ops
        base = self.model.restart_base_s if self.model.restart_base_s is not None else float(self.cfg.restart_s)
        state_mb = float(sum(self._ops[v].state_mb for v in restarted))
        rate = self.model.restore_mb_per_s
        restart_s = float(base) + (state_mb / rate if state_mb > 0 and rate else 0.0)
        for v in restarted:
            self._pause_from[v] = (None, self.now_s, state_mb)
        self._reconfigure(list(self._p), restarted, restart_s)
        self._log("failover", None, {"type": kind, "hosts": hosts, "restart_s": restart_s,
                                     "restarted": sorted(self._names[v] for v in restarted),
                                     "state_mb": state_mb, "reason": reason,
                                     "placement": {f"{o}[{i}]": h for (o, i), h in self.placement().items()}})
        return restart_s

    def _set_slow(self) -> None:
        """``slow`` per instance: the product of the active slow-instance and slow-host factors."""
        s = self._s
        s.slow[:] = 1.0
        for f in self._active_slow:
            v = self._opi[f.operator]
            if f.instance < self._p[v]:
                s.slow[int(s.op_first[v]) + f.instance] *= f.factor
        for f in self._active_slow_hosts:
            s.slow[s.inst_host == f.host] *= f.factor

    def _set_links(self) -> None:
        """``link_ms`` / ``link_gap`` per instance from the active slow links of its host (delays
        add up; the smallest bandwidth wins)."""
        s = self._s
        s.link_ms[:] = 0.0
        s.link_gap[:] = 0.0
        for f in self._active_links:
            on = s.inst_host == f.host
            s.link_ms[on] += f.delay_ms
            if f.bandwidth is not None:
                s.link_gap[on] = np.maximum(s.link_gap[on], 1000.0 / f.bandwidth)

    def _retime(self, new_rate: float) -> None:
        """Change the external rate now; pending arrivals are re-timed (time change)."""
        s = self._s
        now = self._t_ms
        old_rate = self._rate
        self._rate = new_rate
        for v in np.flatnonzero(self._is_source):
            p = self._p[v]
            r_new = self._inst_rate(v, p)
            for i in range(int(s.op_first[v]), int(s.op_first[v]) + p):
                r_old = s.ext_rate[i]
                if math.isfinite(s.ext_next[i]) and r_old > 0:
                    unit = (s.ext_next[i] - now) * r_old
                else:
                    unit = float(self._unit_arrival(v, 1, self._g_misc)[0])
                s.ext_rate[i] = r_new
                s.ext_ver[i] += 1
                if r_new > 0:
                    s.ext_next[i] = now + unit / r_new
                    K.hpush(s, s.ext_next[i], K.EXT, i, s.ext_ver[i])
                else:
                    s.ext_next[i] = np.inf
        _ = old_rate

    # ------------------------------------------------------ (re)construction
    def _reconfigure(self, new_p: list[int], restarted: set[int], restart_s: float) -> None:
        s = self._s
        now = self._t_ms
        K.flush_all(s, now)
        spilled = []
        inst_op = s.inst_op
        for i in range(len(inst_op)):
            if s.state[i] != K.BLOCKED:
                continue
            j = int(s.blocked_on[i])
            if inst_op[i] not in restarted and (j < 0 or inst_op[j] not in restarted):
                continue
            while True:
                s.m[K.M_SPILL] = 0
                done = K.force_deliver(s, i, now)
                n = int(s.m[K.M_SPILL])
                spilled.append((s.spill_j[:n].copy(), s.spill_birth[:n].copy(), s.spill_kg[:n].copy()))
                if done:
                    break
        self._harvest()
        self._forget_dead(restarted)
        self._build(new_p, restarted, spilled, restart_s=restart_s)
        self._set_slow()
        self._set_links()

    def _forget_dead(self, restarted: set[int]) -> None:
        """A dead instance restarted now reports, in this window, only what it does from now on:
        its counters of the window (before its host was lost, and its stale states since) went
        with the host."""
        s = self._s
        for v in restarted:
            first, p = int(s.op_first[v]), self._p[v]
            gone = np.flatnonzero(s.dead[first:first + p])
            if len(gone):
                w = self._w[v]
                for key in ("in", "out", "time", "q", "ext"):
                    w[key][gone] = 0
                w["seen"][gone] = False

    def _build(self, new_p: list[int], restarted: set[int], spilled, initial: bool = False,
               restart_s: float = 0.0) -> None:
        old = self._s
        old_p = list(self._p)
        now = self._t_ms
        nops = len(self._ops)
        restart_ms = 0.0 if initial else restart_s * 1000.0
        p = np.array(new_p, dtype=np.int64)
        op_first = np.zeros(nops, dtype=np.int64)
        op_first[1:] = np.cumsum(p)[:-1]
        N = int(p.sum())
        inst_op = np.repeat(np.arange(nops, dtype=np.int64), p)
        inst_local = np.arange(N, dtype=np.int64) - op_first[inst_op]
        old_first = None if old is None else old.op_first

        contents: list[list[tuple]] = [[] for _ in range(N)]  # per new instance: [(birth, arr, kg)]
        per = {}  # scalar fields
        fields_f = ("cur_birth", "cur_arr", "pause_until", "evt_time", "ext_next", "ext_rate", "last_arr",
                    "cat_since", "q_since", "svc_t0", "svc_len", "wait_ms", "link_free")
        fields_i = ("state", "cur_kg", "pend_k", "pend_rem", "pend_tot", "pend_tgt", "pend_kg", "cat",
                    "evt_kind", "ext_ver", "dead")
        for f in fields_f:
            per[f] = np.zeros(N)
        for f in fields_i:
            per[f] = np.zeros(N, dtype=np.int64)
        per["pend_tgt"][:] = -1
        per["ext_next"][:] = np.inf
        per["evt_kind"][:] = -1
        per["last_arr"][:] = -np.inf
        per["cat_since"][:] = now
        per["q_since"][:] = now
        per["cat"][:] = K.C_IDLE
        rr = np.zeros((N, self._max_out), dtype=np.int64)
        for i in range(N):  # round-robin starts at the instance's own index
            v = inst_op[i]
            for k, e in enumerate(self._out[v]):
                rr[i, k] = inst_local[i] % new_p[self._opi[self._edges[e].target]]
        # placement: the rule for every instance (re)started here; the others keep their host
        inst_host = np.array([slot_host(int(l), self._nhosts, self._excluded) for l in inst_local],
                             dtype=np.int64)
        if old is not None:
            for v in range(nops):
                if v not in restarted:
                    inst_host[op_first[v]:op_first[v] + new_p[v]] = \
                        old.inst_host[old_first[v]:old_first[v] + new_p[v]]
        events = []  # (time, kind, instance)
        svc_ms = np.array([self._svc_ms(v, new_p[v]) for v in range(nops)])
        cores = self._cores_of(svc_ms, new_p)
        svc_ms, op_cpu = self._with_cpu_overhead(svc_ms, new_p, cores)
        cpu_left = self._cpu_left(old, now, cores > 0) if old is not None else None
        in_cpu = []  # (remaining CPU work in core-ms, new instance) carried into the CPU phase

        def new_index_of_old(j):
            v = int(old.inst_op[j])
            return int(op_first[v] + old.inst_local[j])

        # spilled outputs, by target operator (old indices)
        sp_j = np.concatenate([a for a, _, _ in spilled]) if spilled else np.zeros(0, dtype=np.int64)
        sp_b = np.concatenate([b for _, b, _ in spilled]) if spilled else np.zeros(0)
        sp_k = np.concatenate([c for _, _, c in spilled]) if spilled else np.zeros(0, dtype=np.int64)
        sp_a = np.full(len(sp_j), now + self._net_ms)
        sp_op = old.inst_op[sp_j] if len(sp_j) else np.zeros(0, dtype=np.int64)

        for v in range(nops):
            pv = new_p[v]
            base = int(op_first[v])
            if old is not None and v not in restarted:
                for l in range(pv):
                    io, inew = int(old_first[v]) + l, base + l
                    for f in fields_f + fields_i:
                        per[f][inew] = getattr(old, f)[io]
                    for k, e in enumerate(self._out[v]):
                        rr[inew, k] = old.rr[io, k] % new_p[self._opi[self._edges[e].target]]
                    st = int(old.state[io])
                    if per["pend_tgt"][inew] >= 0:
                        per["pend_tgt"][inew] = new_index_of_old(int(per["pend_tgt"][inew]))
                    b, a, g = self._ring(io)
                    contents[inew].append((b, a, g))
                    if st == K.BUSY:
                        left = cpu_left[io]
                        if left < 0:  # no CPU work left (or no sharing before and after)
                            events.append((old.evt_time[io], K.COMPLETE, inew))
                        elif cores > 0:
                            in_cpu.append((left, inew))
                        else:  # sharing ends: the rest of the CPU phase at full speed, then the wait
                            events.append((now + left + per["wait_ms"][inew], K.COMPLETE, inew))
                    elif st == K.WAIT:
                        events.append((old.evt_time[io], K.START, inew))
                    elif st == K.BLOCKED:
                        events.append((now, K.WAKE, inew))
                    elif st == K.IDLE:
                        per["state"][inew] = K.WAIT  # re-check its queue (spilled outputs may arrive)
                        events.append((now, K.START, inew))
                    if per["ext_next"][inew] < np.inf:
                        events.append((per["ext_next"][inew], K.EXT, inew))
                mine = sp_op == v
                if mine.any():
                    for j, b, a, g in zip(sp_j[mine], sp_b[mine], sp_a[mine], sp_k[mine]):
                        contents[new_index_of_old(int(j))].append((np.array([b]), np.array([a]), np.array([g])))
                continue
            # a restarted (or new) operator: collect its tuples and spread them over the instances
            parts = []
            if old is not None:
                for l in range(old_p[v]):
                    io = int(old_first[v]) + l
                    if old.state[io] == K.BUSY:  # replayed after the restore
                        parts.append((np.array([old.cur_birth[io]]), np.array([old.cur_arr[io]]),
                                      np.array([old.cur_kg[io]])))
                    parts.append(self._ring(io))
                mine = sp_op == v
                if mine.any():
                    parts.append((sp_b[mine], sp_a[mine], sp_k[mine]))
            if parts:
                b = np.concatenate([x[0] for x in parts])
                a = np.concatenate([x[1] for x in parts])
                g = np.concatenate([x[2] for x in parts]).astype(np.int64)
                order = np.argsort(a, kind="stable")
                b, a, g = b[order], a[order], g[order]
                maxp = int(self._maxp[v])
                target = np.where(g >= 0, g * pv // maxp, 0)
                nokey = g < 0
                target[nokey] = np.arange(int(nokey.sum())) % pv
                for l in range(pv):
                    sel = target == l
                    contents[base + l].append((b[sel], a[sel], g[sel]))
            pause = now + restart_ms
            self._pause_end[v] = max(self._pause_end.get(v, 0.0), pause) if not initial else 0.0
            if initial:
                self._pause_end.pop(v, None)
            for l in range(pv):
                inew = base + l
                per["pause_until"][inew] = pause
                per["state"][inew] = K.WAIT
                per["cat"][inew] = K.C_NONE if restart_ms > 0 else K.C_IDLE
                events.append((pause, K.START, inew))
            if self._is_source[v]:
                r = self._inst_rate(v, pv)
                units = self._unit_arrival(v, pv, self._g_misc if not initial else self._g_ext)
                for l in range(pv):
                    inew = base + l
                    per["ext_rate"][inew] = r
                    if r > 0:
                        per["ext_next"][inew] = now + units[l] / r
                        events.append((per["ext_next"][inew], K.EXT, inew))

        # rings
        limit = np.array([self._limit(v) for v in inst_op], dtype=np.int64)
        sizes = []
        merged = []
        for i in range(N):
            if contents[i]:
                b = np.concatenate([c[0] for c in contents[i]])
                a = np.maximum.accumulate(np.concatenate([c[1] for c in contents[i]]))
                g = np.concatenate([c[2] for c in contents[i]]).astype(np.int64)
            else:
                b, a, g = np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
            merged.append((b, a, g))
            v = inst_op[i]
            want = len(b) + 1
            if self._is_source[v]:
                cap = 1 << 14
                while cap < 2 * want:
                    cap <<= 1
                cap = min(max(cap, want), max(int(self.cfg.max_backlog), want))
            else:
                cap = max(int(limit[i]), want)
            sizes.append(cap)
        caps = np.array(sizes, dtype=np.int64)
        off = np.zeros(N, dtype=np.int64)
        off[1:] = np.cumsum(caps)[:-1]
        total = int(caps.sum())
        ring_birth, ring_arr, ring_kg = np.zeros(total), np.zeros(total), np.full(total, -1, dtype=np.int64)
        ring_cnt = np.zeros(N, dtype=np.int64)
        for i, (b, a, g) in enumerate(merged):
            n = len(b)
            ring_birth[off[i]:off[i] + n], ring_arr[off[i]:off[i] + n], ring_kg[off[i]:off[i] + n] = b, a, g
            ring_cnt[i] = n
            if n:
                per["last_arr"][i] = max(per["last_arr"][i], a[-1])

        # output-buffer channels
        chan_base = np.zeros(len(self._edges), dtype=np.int64)
        nchan = 0
        chan_dst, chan_src = [], []
        for k, e in enumerate(self._edges):
            chan_base[k] = nchan
            pu, pv = new_p[self._opi[e.source]], new_p[self._opi[e.target]]
            if self._batch > 1:
                db = int(op_first[self._opi[e.target]])
                ub = int(op_first[self._opi[e.source]])
                for _iu in range(pu):
                    chan_dst.extend(range(db, db + pv))
                    chan_src.extend([ub + _iu] * pv)
                nchan += pu * pv
        B = self._batch

        if old is None:
            pools = self._pools()
            m = np.zeros(K.N_M, dtype=np.int64)
        else:
            pools = (old.u_pool, old.svc_pool, old.svc_pos, old.sel_pool, old.sel_pos, old.ext_pool,
                     old.ext_pos, old.net_pool)
            m = old.m.copy()
        m[K.M_HN] = 0
        m[K.M_LATN] = 0
        m[K.M_SPILL] = 0
        mf = np.zeros(K.N_F)
        mf[K.F_NET_MS] = self._net_ms
        mf[K.F_TIMEOUT_MS] = self._timeout_ms
        mf[K.F_NOW] = now
        mf[K.F_CORES] = cores
        mf[K.F_VT] = now
        m[K.M_NCPU] = 0
        H = 4 * N + 4 * nchan + 1024
        out_ptr = np.zeros(nops + 1, dtype=np.int64)
        out_ptr[1:] = np.cumsum([len(o) for o in self._out])
        e_dst = np.array([self._opi[e.target] for e in self._edges], dtype=np.int64)
        kind = np.array([_GROUPING[e.grouping] for e in self._edges], dtype=np.int64)
        rand = np.array([1 if (e.grouping == "shuffle" and self.cfg.shuffle == "random") else 0
                         for e in self._edges], dtype=np.int64)
        u_pool, svc_pool, svc_pos, sel_pool, sel_pos, ext_pool, ext_pos, net_pool = pools
        st = K.State(
            inst_op=inst_op, inst_local=inst_local, op_first=op_first, op_par=p, op_maxp=self._maxp,
            op_is_source=self._is_source, op_is_sink=self._is_sink, op_svc_ms=svc_ms,
            op_cpu=op_cpu,
            op_out_ptr=out_ptr, op_out_edge=np.array([e for o in self._out for e in o] or [0], dtype=np.int64),
            e_dst=e_dst if len(e_dst) else np.zeros(1, dtype=np.int64),
            e_kind=kind if len(kind) else np.zeros(1, dtype=np.int64),
            e_random=rand if len(rand) else np.zeros(1, dtype=np.int64),
            e_key_ptr=self._key_ptr, e_key_uniform=self._e_uniform if len(self._edges) else np.zeros(1, np.int64),
            e_nkeys=self._e_nkeys if len(self._edges) else np.zeros(1, np.int64),
            key_cdf=self._key_cdf, key_kg=self._key_kg,
            e_hot_frac=self._e_hot_frac.copy() if len(self._edges) else np.zeros(1),
            e_hot_kg=self._e_hot_kg.copy() if len(self._edges) else np.zeros(1, np.int64),
            e_chan_base=chan_base if len(self._edges) else np.zeros(1, np.int64),
            ring_off=off, ring_cap=caps, ring_head=np.zeros(N, dtype=np.int64), ring_cnt=ring_cnt,
            ring_limit=limit, reserved=np.zeros(N, dtype=np.int64), last_arr=per["last_arr"],
            ring_birth=ring_birth, ring_arr=ring_arr, ring_kg=ring_kg,
            state=per["state"], cur_birth=per["cur_birth"], cur_arr=per["cur_arr"], cur_kg=per["cur_kg"],
            pend_k=per["pend_k"], pend_rem=per["pend_rem"], pend_tot=per["pend_tot"],
            pend_tgt=per["pend_tgt"], pend_kg=per["pend_kg"],
            blocked_on=np.full(N, -1, dtype=np.int64), wait_head=np.full(N, -1, dtype=np.int64),
            wait_tail=np.full(N, -1, dtype=np.int64), wait_next=np.full(N, -1, dtype=np.int64),
            in_wait=np.zeros(N, dtype=np.int64), rr=rr,
            pause_until=per["pause_until"], slow=np.ones(N), evt_time=per["evt_time"],
            inst_host=inst_host, dead=per["dead"], link_ms=np.zeros(N), link_gap=np.zeros(N),
            link_free=per["link_free"],
            evt_kind=per["evt_kind"], evt_ver=np.zeros(N, dtype=np.int64),
            svc_t0=per["svc_t0"], svc_len=per["svc_len"], wait_ms=per["wait_ms"],
            cpu_on=np.zeros(N, dtype=np.int64), cpu_tag=np.zeros(N), c_v=np.zeros(N),
            c_seq=np.zeros(N, dtype=np.int64), c_id=np.zeros(N, dtype=np.int64),
            ext_next=per["ext_next"], ext_rate=per["ext_rate"], ext_ver=per["ext_ver"],
            chan_n=np.zeros(nchan, dtype=np.int64), chan_first=np.zeros(nchan),
            chan_ver=np.zeros(nchan, dtype=np.int64), chan_dst=np.array(chan_dst, dtype=np.int64),
            chan_src=np.array(chan_src, dtype=np.int64),
            chan_birth=np.zeros((max(nchan, 1), B)), chan_kg=np.zeros((max(nchan, 1), B), dtype=np.int64),
            cat=per["cat"], cat_since=per["cat_since"], acc_time=np.zeros((N, 4)), q_area=np.zeros(N),
            q_since=per["q_since"], rec_in=np.zeros(N, dtype=np.int64),
            rec_out=np.zeros((N, self._max_out), dtype=np.int64), ext_in=np.zeros(N, dtype=np.int64),
            soj_sum=np.zeros(N), lat_val=np.zeros(LAT_BUF), lat_inst=np.zeros(LAT_BUF, dtype=np.int64),
            h_t=np.zeros(H), h_seq=np.zeros(H, dtype=np.int64), h_kind=np.zeros(H, dtype=np.int64),
            h_id=np.zeros(H, dtype=np.int64), h_ver=np.zeros(H, dtype=np.int64),
            u_pool=u_pool, svc_pool=svc_pool, svc_pos=svc_pos, sel_pool=sel_pool, sel_pos=sel_pos,
            ext_pool=ext_pool, ext_pos=ext_pos, net_pool=net_pool,
            spill_j=np.zeros(SPILL, dtype=np.int64), spill_birth=np.zeros(SPILL),
            spill_kg=np.zeros(SPILL, dtype=np.int64), m=m, mf=mf,
        )
        self._s = st
        self._p = list(new_p)
        for t, kind_, i in events:
            if kind_ == K.EXT:
                K.hpush(st, float(t), K.EXT, int(i), int(st.ext_ver[i]))
            else:
                K.schedule(st, int(i), float(t), kind_)
        if in_cpu:
            # the carried CPU phases restart the virtual clock at 0: a sorted array is a heap
            in_cpu.sort()
            k = len(in_cpu)
            speed = min(1.0, cores / k)
            for pos, (left, i) in enumerate(in_cpu):
                st.c_v[pos], st.c_seq[pos], st.c_id[pos] = left, pos, i
                st.cpu_tag[i], st.cpu_on[i] = left, 1
                st.evt_time[i], st.evt_kind[i] = now + left / speed, K.CPU
            m[K.M_NCPU] = k
            m[K.M_CSEQ] = k
            m[K.M_CVER] += 1
            K.hpush(st, now + in_cpu[0][0] / speed, K.CPU, in_cpu[0][1], int(m[K.M_CVER]))

    def _cores_of(self, svc_ms: np.ndarray, p: Sequence[int]) -> float:
        """The kernel's ``F_CORES``: the model's cores, or 0 (unlimited: the unshared path) when
        there are none or they are not fewer than the instances that can compute at once."""
        cores = self.model.cores
        if cores is None:
            return 0.0
        computing = sum(int(p[v]) for v in range(len(self._ops)) if svc_ms[v] > 0 and self._cpu_share[v] > 0)
        return float(cores) if cores < computing else 0.0

    def _with_cpu_overhead(self, svc_ms: np.ndarray, p: Sequence[int], cores: float
                           ) -> tuple[np.ndarray, np.ndarray]:
        """(mean service per operator, CPU part per operator) at parallelism ``p`` with the model's
        per-instance CPU overhead: the operators' CPU work grows by m = 1 + h (n - cores) when the
        n instances computing outnumber the cores (``cores`` > 0, as ``_cores_of``), the wait
        part not; a generating source's is its own CPU, not grown. Unchanged without it."""
        share = np.array(self._cpu_share, dtype=float)
        h = float(self.model.cpu_overhead_per_instance)
        if cores <= 0 or h == 0.0:
            return svc_ms, share
        computing = sum(int(p[v]) for v in range(len(self._ops)) if svc_ms[v] > 0 and self._cpu_share[v] > 0)
        m = 1.0 + h * max(computing - cores, 0.0)
        grows = np.array([v not in self._generating and svc_ms[v] > 0 for v in range(len(self._ops))])
        grown = np.where(grows, svc_ms * (1.0 + share * (m - 1.0)), svc_ms)
        cpu = np.where(grows, share * m * svc_ms / np.where(grown > 0, grown, 1.0), share)
        return grown, cpu

    def _cpu_left(self, old, now: float, sharing: bool) -> np.ndarray:
        """Per instance of the old arrays: CPU work (core-ms) its service still needs at ``now``,
        or -1 when it is not in a CPU phase (not busy, waiting, or no sharing before and after).
        Old sharing: tag minus the virtual clock advanced to now. No old sharing but new sharing:
        the CPU phase the service would have had (cpu_share x S from its start, at full speed)."""
        left = np.full(len(old.inst_op), -1.0)
        old_cores = float(old.mf[K.F_CORES])
        if old_cores > 0:
            n = int(old.m[K.M_NCPU])
            speed = 1.0 if n <= old_cores else old_cores / n
            vnow = old.mf[K.F_V] + (now - old.mf[K.F_VT]) * speed
            on = (old.cpu_on == 1) & (old.state == K.BUSY)
            left[on] = np.maximum(old.cpu_tag[on] - vnow, 0.0)
        elif sharing:
            share = np.array(self._cpu_share)[old.inst_op]
            work = share * old.svc_len
            done = now - old.svc_t0
            on = (old.state == K.BUSY) & (work > 0) & (done < work)
            left[on] = work[on] - done[on]
            old.wait_ms[on] = old.svc_len[on] - work[on]  # as the kernel sets it at a start
        return left
