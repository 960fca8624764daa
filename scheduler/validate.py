"""Validating a proposed configuration (another scheduler's, a person's) before it is deployed.

Units: rates in tuples/s, times in ms.

``validate(model, rate, config, ValidateConfig(...)) -> Validation``: the model's prediction for
``config`` at ``rate``, every violation of the targets, and the **headroom**:

* violations: ``utilization`` (an operator whose hottest instance is above the target; value =
  that utilization, limit = the target), ``saturation`` (the rate is at or above the
  configuration's max sustainable rate; operator = the bottleneck, value = the rate, limit =
  ``max_rate``), ``latency`` (operator None; value = the latency statistic, or None when
  saturated (unbounded), limit = the SLO).
* headroom: ``max_rate`` = the highest input rate at which the configuration has no violation
  at all, ``ratio`` = ``max_rate / rate`` (> 1: the load may grow by that factor; < 1: it must
  shrink), ``limited_by`` = the violation that appears first above ``max_rate``
  (``{"kind", "operator"}``). Utilization is linear in the rate, so its limit is exact:
  ``target * max_rate_of_config``; latency rises with the rate (a Hypothesis-tested invariant
  of the model), so its limit is found by vectorized bisection (64 rates per round, relative
  precision 1e-9).

``read_proposal(path, model)`` reads a proposal file: JSON mapping operator (vertex) name to
parallelism, in any of the shapes documented in ``docs/scheduler.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from modeler.limits import MAX_PARALLELISM
from modeler.modelfile import JobModel
from modeler.queueing import LATENCY_STATS, CompiledModel, Prediction, compile_model, predict, predict_batch
from scheduler.errors import ProposalError, SchedulerError
from scheduler.plan import slo_slack
from scheduler.targets import Targets

_EPS = 1e-9


ValidateConfig = Targets
"""The targets a proposal is checked against: ``scheduler.targets.Targets`` (the old name kept)."""


@dataclass(frozen=True)
class Violation:
    operator: str | None
    kind: str
    """utilization | saturation | latency."""
    value: float | None
    limit: float

    def to_dict(self) -> dict:
        return {"operator": self.operator, "kind": self.kind, "value": self.value, "limit": self.limit}


@dataclass(frozen=True)
class Headroom:
    max_rate: float
    """Highest input rate (tuples/s) with no violation."""
    ratio: float | None
    """max_rate / rate; None when rate is 0."""
    limited_by: Mapping[str, Any]
    """{"kind": utilization|latency, "operator": name or None}: what breaks first above max_rate."""

    def to_dict(self) -> dict:
        return {"max_rate": self.max_rate, "ratio": self.ratio, "limited_by": dict(self.limited_by)}


@dataclass(frozen=True)
class Validation:
    ok: bool
    violations: tuple[Violation, ...]
    headroom: Headroom
    prediction: Prediction

    def to_dict(self) -> dict:
        """The ``augury validate --json`` object."""
        return {"ok": self.ok, "violations": [v.to_dict() for v in self.violations],
                "headroom": self.headroom.to_dict(), "prediction": self.prediction.to_dict()}


def validate(model: JobModel | CompiledModel, rate: float, config: Mapping[str, int] | None = None,
             targets: Targets = Targets()) -> Validation:
    """Check ``config`` (operators it does not name keep the model's parallelism) at ``rate``."""
    targets.check()
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0:
        raise SchedulerError("the input rate must be a finite number >= 0", field="rate", value=rate)
    compiled = model if isinstance(model, CompiledModel) else compile_model(model)
    pred = predict(compiled, config, float(rate))
    U, slo, stat = targets.utilization_target, targets.latency_slo_ms, targets.latency_stat
    violations: list[Violation] = []
    if pred.saturated:
        violations.append(Violation(pred.bottleneck, "saturation", float(rate), pred.max_rate))
    for name, op in pred.operators.items():
        if op.max_utilization > U * (1 + _EPS):
            violations.append(Violation(name, "utilization", op.max_utilization, U))
    if slo is not None:
        lat = pred.latency_ms[stat]
        if lat is None or lat > slo * (1 + slo_slack(stat)):
            violations.append(Violation(None, "latency", lat, slo))
    return Validation(ok=not violations, violations=tuple(violations),
                      headroom=_headroom(compiled, pred, float(rate), targets), prediction=pred)


def _headroom(compiled: CompiledModel, pred: Prediction, rate: float, targets: ValidateConfig) -> Headroom:
    U, slo, stat = targets.utilization_target, targets.latency_slo_ms, targets.latency_stat
    # Utilization: every instance's utilization is rate * c, the hottest reaches 1 at max_rate.
    if math.isfinite(pred.max_rate):
        util_limit = U * pred.max_rate
        hot = pred.bottleneck  # the highest utilization per unit of rate
    else:
        util_limit, hot = math.inf, None
    limit, limited_by = util_limit, {"kind": "utilization", "operator": hot}
    if slo is not None:
        lat_limit = _latency_limit(compiled, pred.config, stat, slo, util_limit)
        if lat_limit < limit:
            limit, limited_by = lat_limit, {"kind": "latency", "operator": None}
    if not math.isfinite(limit):
        limited_by = {"kind": None, "operator": None}
    ratio = (limit / rate) if rate > 0 else None
    return Headroom(max_rate=limit, ratio=ratio, limited_by=limited_by)


def _latency_limit(compiled: CompiledModel, config: Mapping[str, int], stat: str, slo: float,
                   util_limit: float) -> float:
    """Highest rate with latency <= slo (latency rises with the rate), by vectorized bisection."""
    P = compiled.config_array([config])
    if math.isfinite(util_limit):
        hi = util_limit * (1 - 1e-12)
        if predict_batch(compiled, P, hi).latency(stat)[0] <= slo:
            return math.inf  # the utilization target binds first
    else:
        hi = 1.0
        while True:  # no capacity limit anywhere: grow until the SLO breaks (or give up)
            lat = predict_batch(compiled, P, hi).latency(stat)[0]
            if not lat <= slo or hi > 1e15:
                break
            hi *= 16
        if hi > 1e15:
            return math.inf
    lo = 0.0
    if not predict_batch(compiled, P, max(hi * 1e-12, 1e-12)).latency(stat)[0] <= slo:
        return 0.0
    for _ in range(6):
        grid = np.linspace(lo, hi, 66)[1:-1]
        lat = predict_batch(compiled, np.repeat(P, len(grid), axis=0), grid).latency(stat)
        good = np.nan_to_num(lat, nan=np.inf) <= slo
        if good.all():
            lo = grid[-1]
        elif not good.any():
            hi = grid[0]
        else:
            first_bad = int(np.argmin(good))
            lo = grid[first_bad - 1] if first_bad > 0 else lo
            hi = grid[first_bad]
        if hi - lo <= 1e-9 * hi:
            break
    return float(lo)


# ------------------------------------------------------------------------- proposals


def read_proposal(path: str | Path, model: JobModel | None = None) -> dict[str, int]:
    """A proposal file as {operator: parallelism}. Accepted JSON shapes:

    * ``{"op": 4, ...}``;
    * ``{"op": {"parallelism": 4}, ...}``;
    * Flink's resource requirements: ``{"op": {"parallelism": {"lowerBound": 1, "upperBound": 4}}}``
      (the upper bound is the parallelism);
    * Flink's job details: ``{"vertices": [{"name": "op", "parallelism": 4}, ...]}``;
    * the Flink autoscaler's override string: ``{"pipeline.jobvertex-parallelism-overrides":
      "op:4,other:2"}``.

    Keys must be operator names of ``model`` (when given).
    """
    file = str(path)
    from modeler.documents import read_document

    data = read_document(path, "json", "proposal (JSON)", ProposalError)
    config = parse_proposal(data, file=file)
    if model is not None:
        known = set(model.operator_names)
        for name in config:
            if name not in known:
                raise ProposalError(f"unknown operator (known: {', '.join(model.operator_names)})",
                                    file=file, field=name, value=name)
    return config


def parse_proposal(data: Any, file: str | None = None) -> dict[str, int]:
    """The value of a proposal file (see ``read_proposal``) as {operator: parallelism}."""
    if not isinstance(data, Mapping):
        raise ProposalError("expected a JSON object of operator -> parallelism", file=file, value=type(data).__name__)
    if "vertices" in data and isinstance(data["vertices"], list):
        out = {}
        for i, v in enumerate(data["vertices"]):
            if not isinstance(v, Mapping) or "name" not in v or "parallelism" not in v:
                raise ProposalError("each vertex needs 'name' and 'parallelism'", file=file,
                                    field=f"vertices[{i}]", value=v)
            out[str(v["name"])] = _int(v["parallelism"], file, f"vertices[{i}].parallelism")
        return out
    key = "pipeline.jobvertex-parallelism-overrides"
    if key in data:
        text = data[key]
        out = {}
        for part in str(text).split(","):
            if not part.strip():
                continue
            name, sep, value = part.rpartition(":")
            if not sep or not name.strip():
                raise ProposalError("expected vertex:parallelism[,vertex:parallelism...]", file=file,
                                    field=key, value=part)
            out[name.strip()] = _int(value.strip(), file, key)
        return out
    out = {}
    for name, value in data.items():
        field = str(name)
        if isinstance(value, Mapping):
            if "parallelism" not in value:
                raise ProposalError("expected a number or {'parallelism': ...}", file=file, field=field, value=value)
            value = value["parallelism"]
            if isinstance(value, Mapping):
                if "upperBound" not in value:
                    raise ProposalError("expected {'lowerBound': ..., 'upperBound': ...}", file=file,
                                        field=f"{field}.parallelism", value=value)
                value = value["upperBound"]
        out[field] = _int(value, file, field)
    return out


def _int(value: Any, file: str | None, field: str) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    # ints are compared as ints: a 400-digit parallelism is an error, not an OverflowError
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not value.is_integer()) or value < 1:
        raise ProposalError("parallelism must be a positive integer", file=file, field=field, value=value)
    if value > MAX_PARALLELISM:
        raise ProposalError(f"parallelism must be <= {MAX_PARALLELISM:,} (the documented limit)", file=file,
                            field=field, value=value if value < 10**18 else f"<{len(str(int(value)))}-digit integer>")
    return int(value)
