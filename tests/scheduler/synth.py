"""Synthetic metric batches in the normalized raw schema (test helper, no simulator).

``FluidJob`` is a deterministic fluid approximation of a linear job (source -> ops...): each
operator processes min(arrival, capacity), instances share the work evenly unless a slow
instance or a hot share is set; saturation back-pressures the upstream operator and grows the
source backlog. Good enough to drive detectors and the loop; the testbed is the ground truth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from scheduler.interfaces import Actuation, ActuationFailed, MetricsBatch, MetricsUnavailable

T0 = pd.Timestamp("2026-01-01T00:00:00Z")


@dataclass
class FluidJob:
    """Operators in a chain after one source; ``service_ms`` per operator; ``config`` parallelism."""

    service_ms: dict
    config: dict
    rate: float = 1000.0
    window_s: float = 10.0
    slow: dict = field(default_factory=dict)
    """{(op, instance): factor}"""
    hot: dict = field(default_factory=dict)
    """{op: share of the hottest instance 0}"""
    queue_cap: float = 1000.0
    job: str = "job"
    t_s: float = 0.0
    lag: float = 0.0
    windows: list = field(default_factory=list)
    applied: list = field(default_factory=list)

    @property
    def order(self):
        return ["source"] + list(self.service_ms)

    def _caps(self, op):
        p = self.config[op]
        caps = []
        for i in range(p):
            st = self.service_ms[op] * self.slow.get((op, i), 1.0)
            caps.append(1000.0 / st)
        shares = [1.0 / p] * p
        if op in self.hot and p > 1:
            h = self.hot[op]
            shares = [h] + [(1 - h) / (p - 1)] * (p - 1)
        # the operator's capacity: the first instance to saturate limits it (shared upstream)
        return min(c / s for c, s in zip(caps, shares)), caps, shares

    def advance(self, seconds: float) -> None:
        n = int(round(seconds / self.window_s))
        for _ in range(n):
            self._window()

    def _window(self) -> None:
        w = self.window_s
        offered = self.rate
        cap = min(self._caps(op)[0] for op in self.service_ms)
        accepted = min(offered + self.lag / w, cap)
        self.lag = max(0.0, self.lag + (offered - accepted) * w)
        ts = T0 + pd.Timedelta(seconds=self.t_s)
        rows = []
        saturated = accepted >= cap * 0.999
        bottleneck = min(self.service_ms, key=lambda op: self._caps(op)[0]) if saturated else None
        prev = "source"
        rows += [(ts, w, self.job, "source", 0, "records_in", accepted * w, None),
                 (ts, w, self.job, "source", 0, "busy_ms", 0.0, None),
                 (ts, w, self.job, "source", 0, "idle_ms", 1000 * w * (0.0 if saturated else 1.0), None),
                 (ts, w, self.job, "source", 0, "backpressured_ms", 1000 * w * (1.0 if saturated else 0.0), None),
                 (ts, w, self.job, "source", 0, "records_out", accepted * w, self.order[1]),
                 (ts, w, self.job, "source", 0, "source_lag", self.lag, None),
                 (ts, w, self.job, "source", 0, "parallelism", 1.0, None)]
        upstream_of_bottleneck = True
        for k, op in enumerate(self.service_ms):
            _, caps, shares = self._caps(op)
            nxt = self.order[k + 2] if k + 2 < len(self.order) else None
            if op == bottleneck:
                upstream_of_bottleneck = False
            for i in range(self.config[op]):
                x = accepted * shares[i]
                busy = min(1.0, x / caps[i])
                bp = 1.0 - busy if (saturated and upstream_of_bottleneck and op != bottleneck) else 0.0
                q = self.queue_cap if busy >= 0.999 else busy / max(1e-9, 1 - busy)
                rows += [(ts, w, self.job, op, i, "records_in", x * w, None),
                         (ts, w, self.job, op, i, "busy_ms", busy * 1000 * w, None),
                         (ts, w, self.job, op, i, "backpressured_ms", bp * 1000 * w, None),
                         (ts, w, self.job, op, i, "idle_ms", max(0.0, 1 - busy - bp) * 1000 * w, None),
                         (ts, w, self.job, op, i, "queue_len", q, None)]
                if nxt:
                    rows.append((ts, w, self.job, op, i, "records_out", x * w, nxt))
            rows.append((ts, w, self.job, op, 0, "parallelism", float(self.config[op]), None))
        rows.append((ts, w, self.job, self.order[-1], 0, "latency_ms_mean", 5.0, None))
        self.t_s += w
        self.windows.append((T0.timestamp() + self.t_s, tuple(rows), dict(self.config)))

    # MetricsSource
    def read(self, since_s=None) -> MetricsBatch:
        rows, as_of = [], None
        for end, r, _ in self.windows:
            if since_s is None or end > since_s:
                rows.extend(r)
                as_of = end
        if as_of is None:
            raise MetricsUnavailable("nothing new", value=since_s)
        return MetricsBatch(as_of_s=as_of, rows=tuple(rows), config={"source": 1, **self.config},
                            window_s=self.window_s)

    # Actuator
    def current(self):
        return {"source": 1, **self.config}

    def apply(self, config, reason=""):
        new = {k: int(v) for k, v in config.items() if k != "source"}
        if new == self.config:
            return Actuation(applied=False, config=self.current(), restart_s=0.0, detail="no change")
        self.config = {**self.config, **new}
        self.applied.append((self.t_s, dict(self.config)))
        return Actuation(applied=True, config=self.current(), restart_s=0.0, detail=reason)

    def restart_instance(self, operator, instance, reason=""):
        self.slow.pop((operator, instance), None)
        self.applied.append((self.t_s, ("restart", operator, instance)))
        return Actuation(applied=True, config=self.current(), restart_s=0.0, detail=reason)


def model_text(service_ms: dict, config: dict, max_p: int = 64) -> str:
    ops = ["  - {name: source, role: source, parallelism: 1}"]
    ops += [f"  - {{name: {op}, parallelism: {config[op]}, service_time_ms: {st}, max_parallelism: {max_p}}}"
            for op, st in service_ms.items()]
    names = ["source"] + list(service_ms)
    edges = [f"  - {{from: {a}, to: {b}}}" for a, b in zip(names, names[1:])]
    return "augury: 1\njob: job\noperators:\n" + "\n".join(ops) + "\nedges:\n" + "\n".join(edges) + "\n"


class Flaky:
    """Fault-injecting wrapper around a metrics source + actuator (``inner``: a ``FluidJob`` or
    the testbed): reads fail (``p_fail``) or come back malformed (``p_malformed``: a truncated row,
    a NaN value, one operator's rows or one instance's records_in missing), applies fail
    (``p_act_fail``). ``read_ok`` records each read (False: failed or malformed), ``applies`` each
    apply attempt (reads so far, config), ``applied`` each applied change (``clock()``, config)."""

    def __init__(self, inner, rng, p_fail=0.2, p_malformed=0.1, p_act_fail=0.1, clock=lambda: 0.0):
        self.inner, self.rng, self.clock = inner, rng, clock
        self.p_fail, self.p_malformed, self.p_act_fail = p_fail, p_malformed, p_act_fail
        self.read_ok: list[bool] = []
        self.applies: list[tuple[int, dict]] = []
        self.applied: list[tuple[float, dict]] = []

    def read(self, since_s=None):
        r = self.rng.random()
        if r < self.p_fail:
            self.read_ok.append(False)
            raise MetricsUnavailable("injected outage")
        batch = self.inner.read(since_s)
        if r < self.p_fail + self.p_malformed and batch.rows:
            self.read_ok.append(False)
            rows = list(batch.rows)
            kind = self.rng.randrange(4)
            k = self.rng.randrange(len(rows))
            if kind == 0:
                rows[k] = rows[k][:4]
            elif kind == 1:
                rows[k] = rows[k][:6] + (float("nan"),) + rows[k][7:]
            elif kind == 2:
                op = rows[k][3]
                rows = [x for x in rows if x[3] != op]
            else:
                op, inst = rows[k][3], rows[k][4]
                rows = [x for x in rows if not (x[3] == op and x[4] == inst and x[5] == "records_in")]
            return MetricsBatch(as_of_s=batch.as_of_s, rows=tuple(rows), config=batch.config,
                                window_s=batch.window_s)
        self.read_ok.append(True)
        return batch

    def current(self):
        return self.inner.current()

    def apply(self, config, reason=""):
        self.applies.append((len(self.read_ok), dict(config)))
        if self.rng.random() < self.p_act_fail:
            raise ActuationFailed("injected failure")
        result = self.inner.apply(config, reason)
        if result.applied:
            self.applied.append((self.clock(), dict(result.config)))
        return result

    def restart_instance(self, operator, instance, reason=""):
        return self.inner.restart_instance(operator, instance, reason)
