"""Faults and scheduled changes injected into a testbed run.

A fault file (YAML or JSON) is a mapping with a list ``faults``; times are simulated seconds
since the start of the run::

    faults:
      - {type: slow_instance, operator: split, instance: 1, factor: 3.0, start_s: 60, end_s: 120}
      - {type: hot_key, edge: split->count, share: 0.2, start_s: 100, end_s: 400, key: 123456}
      - {type: rescale, at_s: 300, config: {split: 4, count: 3}}
      - {type: slow_host, host: 1, factor: 2.0, start_s: 60, end_s: 120}
      - {type: slow_link, host: 0, delay_ms: 20, bandwidth: 500, start_s: 60, end_s: 120}
      - {type: lost_host, host: 2, start_s: 200, detection_s: 30}
      - {type: lost_rack, rack: 1, start_s: 500, detection_s: 30}

* ``slow_instance``: that instance's service times are multiplied by ``factor`` (> 0) from
  ``start_s`` to ``end_s`` (default: the end of the run).
* ``hot_key``: on the key-grouped edge ``edge`` (``from->to``), a fraction ``share`` (0..1) of the
  tuples carries the single key ``key`` (default: a new key id, the key count) from ``start_s``
  to ``end_s``; the other tuples keep the edge's key distribution.
* ``rescale``: at ``at_s`` the testbed applies ``config`` exactly as ``Testbed.apply`` does
  (with the restart downtime).

Host faults need ``TestbedConfig.hosts`` (hosts 0..hosts-1, racks of ``hosts_per_rack``; the
placement: ``experiments.testbed.hosts``):

* ``slow_host``: every instance placed on ``host`` has its service times multiplied by
  ``factor`` (> 0) from ``start_s`` to ``end_s`` (default: the end of the run); an instance moved
  off the host is no longer slowed, one moved onto it is.
* ``slow_link``: the network links leaving ``host``, from ``start_s`` to ``end_s``: a tuple an
  instance on the host sends to an instance on a *different* host arrives ``delay_ms`` (>= 0) later,
  and with ``bandwidth`` (tuples/s per sending instance, > 0; default: unlimited) each sending
  instance emits at most that many tuples/s across hosts: the next cross-host tuple waits until
  1 / bandwidth s after the previous one, the instance holding it back-pressured meanwhile (as
  an engine's task whose output buffers cannot drain). Tuples to instances on the same host are
  not affected. At least one of ``delay_ms`` > 0 or ``bandwidth`` is needed.
* ``lost_host`` / ``lost_rack``: at ``start_s`` the host (every host of rack ``rack``) is lost for
  good: its instances stop (they finish nothing more; what they hold, queues, the tuple in
  service, pending outputs, is held and replayed at the restart, as a replayable source and
  checkpoints give, so nothing is lost) and their metric rows vanish (a dead TaskManager reports
  nothing). ``detection_s`` (default 50 s, Flink's heartbeat timeout) later the engine notices and
  restarts: the whole job (``restart_scope: job``) or the operators with an instance on a lost
  host, with every restarted instance placed on the surviving hosts, for the restart time of
  a restore (the base restart time plus the restarted operators' state over the restore rate).

Every problem raises ``TestbedError`` naming the file, the field (``faults[2].instance``) and value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from experiments.testbed.errors import TestbedError


@dataclass(frozen=True)
class SlowInstance:
    operator: str
    instance: int
    factor: float
    """Service-time multiplier (> 0)."""
    start_s: float
    end_s: float = math.inf


@dataclass(frozen=True)
class HotKey:
    source: str
    target: str
    share: float
    """Fraction of the edge's tuples carrying the hot key."""
    start_s: float
    end_s: float = math.inf
    key: int | None = None
    """Key id; None = a new key (the key count of the edge's distribution)."""


@dataclass(frozen=True)
class Rescale:
    at_s: float
    config: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SlowHost:
    host: int
    factor: float
    """Service-time multiplier (> 0) of every instance on the host."""
    start_s: float
    end_s: float = math.inf


@dataclass(frozen=True)
class SlowLink:
    host: int
    """The host whose outgoing links are slow (tuples to other hosts only)."""
    start_s: float
    end_s: float = math.inf
    delay_ms: float = 0.0
    """Extra delay of every tuple sent to another host, ms."""
    bandwidth: float | None = None
    """Most tuples/s each sending instance emits to other hosts; None = unlimited."""


DEFAULT_DETECTION_S = 50.0
"""Time from a host's loss to the restart when a fault gives none, s (Flink's heartbeat.timeout)."""


@dataclass(frozen=True)
class LostHost:
    host: int
    start_s: float
    detection_s: float = DEFAULT_DETECTION_S
    """Time from the loss to the restart, s."""


@dataclass(frozen=True)
class LostRack:
    rack: int
    start_s: float
    detection_s: float = DEFAULT_DETECTION_S
    """Time from the loss to the restart, s."""


Fault = SlowInstance | HotKey | Rescale | SlowHost | SlowLink | LostHost | LostRack
HOST_FAULTS = (SlowHost, SlowLink, LostHost, LostRack)
_KEYS = {
    "slow_instance": {"type", "operator", "instance", "factor", "start_s", "end_s"},
    "hot_key": {"type", "edge", "share", "start_s", "end_s", "key"},
    "rescale": {"type", "at_s", "config"},
    "slow_host": {"type", "host", "factor", "start_s", "end_s"},
    "slow_link": {"type", "host", "delay_ms", "bandwidth", "start_s", "end_s"},
    "lost_host": {"type", "host", "start_s", "detection_s"},
    "lost_rack": {"type", "rack", "start_s", "detection_s"},
}


def parse_faults(data: Any, source: str | None = None) -> tuple[Fault, ...]:
    """Validate decoded fault-file content (see the module docstring)."""
    def fail(msg, fld, value=None):
        return TestbedError(msg, file=source, field=fld, value=value)

    if isinstance(data, Mapping):
        extra = sorted(set(data) - {"faults"})
        if extra:
            raise fail("unknown key (allowed: faults)", extra[0], extra[0])
        data = data.get("faults", [])
    if not isinstance(data, list):
        raise fail("must be a list of faults (or a mapping with 'faults')", "faults", type(data).__name__)

    def num(raw, key, where, default=None, *, integer=False, positive=False):
        value = raw.get(key, default)
        if value is None and default is None and key not in raw:
            raise fail("is required", f"{where}.{key}")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise fail("must be a number", f"{where}.{key}", value)
        if integer and (math.isinf(value) or int(value) != value):
            raise fail("must be an integer", f"{where}.{key}", value)
        if value < 0:
            raise fail("must be >= 0 (negative times are invalid)", f"{where}.{key}", value)
        if positive and value <= 0:
            raise fail("must be > 0", f"{where}.{key}", value)
        return int(value) if integer else float(value)

    faults: list[Fault] = []
    for i, raw in enumerate(data):
        where = f"faults[{i}]"
        if not isinstance(raw, Mapping):
            raise fail("must be a mapping with a 'type'", where, raw)
        kind = raw.get("type")
        if kind not in _KEYS:
            raise fail(f"unknown fault type (known: {', '.join(_KEYS)})", f"{where}.type", kind)
        extra = sorted(set(raw) - _KEYS[kind])
        if extra:
            raise fail(f"unknown key (allowed: {', '.join(sorted(_KEYS[kind]))})", f"{where}.{extra[0]}", extra[0])
        if kind == "rescale":
            at = num(raw, "at_s", where)
            config = raw.get("config")
            if not isinstance(config, Mapping) or not config:
                raise fail("must be a mapping {operator: parallelism}", f"{where}.config", config)
            for name, p in config.items():
                if isinstance(p, bool) or not isinstance(p, int) or p < 1:
                    raise fail("parallelism must be a positive integer", f"{where}.config.{name}", p)
            faults.append(Rescale(at_s=at, config=dict(config)))
            continue
        start = num(raw, "start_s", where)
        if kind in ("lost_host", "lost_rack"):  # for good: no end
            detection = num(raw, "detection_s", where, DEFAULT_DETECTION_S)
            if not math.isfinite(detection):
                raise fail("must be finite (the engine restarts the job after it)", f"{where}.detection_s",
                           detection)
            if kind == "lost_host":
                faults.append(LostHost(host=num(raw, "host", where, integer=True), start_s=start,
                                       detection_s=detection))
            else:
                faults.append(LostRack(rack=num(raw, "rack", where, integer=True), start_s=start,
                                       detection_s=detection))
            continue
        end = num(raw, "end_s", where, math.inf)
        if end <= start:
            raise fail(f"must be after start_s ({start:g})", f"{where}.end_s", end)
        if kind == "slow_host":
            faults.append(SlowHost(host=num(raw, "host", where, integer=True),
                                   factor=num(raw, "factor", where, positive=True), start_s=start, end_s=end))
        elif kind == "slow_link":
            delay = num(raw, "delay_ms", where, 0.0)
            bandwidth = num(raw, "bandwidth", where, None, positive=True) if "bandwidth" in raw else None
            for key, value in (("delay_ms", delay), ("bandwidth", bandwidth)):
                if value is not None and not math.isfinite(value):
                    raise fail("must be finite", f"{where}.{key}", value)
            if delay == 0 and bandwidth is None:
                raise fail("a slow link needs delay_ms > 0 or a bandwidth", f"{where}.delay_ms", delay)
            faults.append(SlowLink(host=num(raw, "host", where, integer=True), start_s=start, end_s=end,
                                   delay_ms=delay, bandwidth=bandwidth))
        elif kind == "slow_instance":
            operator = raw.get("operator")
            if not isinstance(operator, str) or not operator:
                raise fail("must name an operator", f"{where}.operator", operator)
            faults.append(SlowInstance(operator=operator, instance=num(raw, "instance", where, integer=True),
                                       factor=num(raw, "factor", where, positive=True),
                                       start_s=start, end_s=end))
        else:
            edge = raw.get("edge")
            if not isinstance(edge, str) or "->" not in edge:
                raise fail("must be 'from->to'", f"{where}.edge", edge)
            src, dst = (part.strip() for part in edge.split("->", 1))
            share = num(raw, "share", where)
            if share > 1:
                raise fail("must be within [0, 1]", f"{where}.share", share)
            key = num(raw, "key", where, None, integer=True) if "key" in raw else None
            faults.append(HotKey(source=src, target=dst, share=share, start_s=start, end_s=end, key=key))
    return tuple(faults)


def load_faults(path: str | Path) -> tuple[Fault, ...]:
    """Read and validate a fault file (YAML or JSON)."""
    from experiments.testbed.config import read_document

    data = read_document(path, "fault file")
    return parse_faults(data if data is not None else [], str(path))


def check_faults(faults, model, config: Mapping[str, int], source: str | None = None, *,
                 hosts: int | None = None, hosts_per_rack: int | None = None) -> None:
    """Check names against the model: operators, instances (in the initial config), key edges;
    and host faults against the hosts (``TestbedConfig.hosts`` / ``hosts_per_rack``): they need
    hosts, a host or rack that exists, and lost hosts must leave one host to restart on."""
    from experiments.testbed.hosts import hosts_of_rack

    names = set(model.operator_names)
    edges = {(e.source, e.target): e for e in model.edges}
    lost: set[int] = set()
    for i, f in enumerate(faults):
        where = f"faults[{i}]"
        if isinstance(f, HOST_FAULTS):
            if hosts is None:
                kind = {SlowHost: "slow_host", SlowLink: "slow_link", LostHost: "lost_host",
                        LostRack: "lost_rack"}[type(f)]
                raise TestbedError("a host fault needs hosts (TestbedConfig.hosts)", file=source,
                                   field=f"{where}.type", value=kind)
            if isinstance(f, LostRack):
                gone = hosts_of_rack(f.rack, hosts, hosts_per_rack)
                if not gone:
                    racks = (hosts - 1) // (hosts_per_rack or hosts) + 1
                    raise TestbedError(f"no such rack: {hosts} host(s) on {racks} rack(s) (0..{racks - 1})",
                                       file=source, field=f"{where}.rack", value=f.rack)
            elif f.host >= hosts:
                raise TestbedError(f"no such host: {hosts} host(s) (0..{hosts - 1})", file=source,
                                   field=f"{where}.host", value=f.host)
            else:
                gone = [f.host] if isinstance(f, LostHost) else []
            lost.update(gone)
            if len(lost) >= hosts:
                raise TestbedError("the lost hosts leave no host to restart the job on", file=source,
                                   field=where, value=sorted(lost))
        elif isinstance(f, SlowInstance):
            if f.operator not in names:
                raise TestbedError("unknown operator", file=source, field=f"{where}.operator", value=f.operator)
            if f.instance >= config[f.operator]:
                raise TestbedError(
                    f"no such instance: {f.operator} runs {config[f.operator]} instance(s) "
                    f"(0..{config[f.operator] - 1})", file=source, field=f"{where}.instance", value=f.instance)
        elif isinstance(f, HotKey):
            edge = edges.get((f.source, f.target))
            if edge is None:
                raise TestbedError("no such edge", file=source, field=f"{where}.edge",
                                   value=f"{f.source}->{f.target}")
            if edge.grouping != "key":
                raise TestbedError("a hot key needs a key-grouped edge", file=source,
                                   field=f"{where}.edge", value=f"{f.source}->{f.target}")
        else:
            for name in f.config:
                if name not in names:
                    raise TestbedError("unknown operator", file=source, field=f"{where}.config", value=name)
