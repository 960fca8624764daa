"""Faults and scheduled changes injected into a testbed run.

A fault file (YAML or JSON) is a mapping with a list ``faults``; times are simulated seconds
since the start of the run::

    faults:
      - {type: slow_instance, operator: split, instance: 1, factor: 3.0, start_s: 60, end_s: 120}
      - {type: hot_key, edge: split->count, share: 0.2, start_s: 100, end_s: 400, key: 123456}
      - {type: rescale, at_s: 300, config: {split: 4, count: 3}}

* ``slow_instance``: that instance's service times are multiplied by ``factor`` (> 0) from
  ``start_s`` to ``end_s`` (default: the end of the run).
* ``hot_key``: on the key-grouped edge ``edge`` (``from->to``), a fraction ``share`` (0..1) of the
  tuples carries the single key ``key`` (default: a new key id, the key count) from ``start_s``
  to ``end_s``; the other tuples keep the edge's key distribution.
* ``rescale``: at ``at_s`` the testbed applies ``config`` exactly as ``Testbed.apply`` does
  (with the restart downtime).

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


Fault = SlowInstance | HotKey | Rescale
_KEYS = {
    "slow_instance": {"type", "operator", "instance", "factor", "start_s", "end_s"},
    "hot_key": {"type", "edge", "share", "start_s", "end_s", "key"},
    "rescale": {"type", "at_s", "config"},
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
        end = num(raw, "end_s", where, math.inf)
        if end <= start:
            raise fail(f"must be after start_s ({start:g})", f"{where}.end_s", end)
        if kind == "slow_instance":
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


def check_faults(faults, model, config: Mapping[str, int], source: str | None = None) -> None:
    """Check names against the model: operators, instances (in the initial config), key edges."""
    names = set(model.operator_names)
    edges = {(e.source, e.target): e for e in model.edges}
    for i, f in enumerate(faults):
        where = f"faults[{i}]"
        if isinstance(f, SlowInstance):
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
