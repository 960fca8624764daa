"""The Kubernetes admission check of ``augury serve`` (``POST /v1/admission``).

Units: rates in tuples/s, times in ms.

A ValidatingWebhookConfiguration sends an ``admission.k8s.io/v1`` ``AdmissionReview`` for each
CREATE or UPDATE of a ``FlinkDeployment`` (the Flink Kubernetes operator's resource). The
proposed configuration is read from the object:

* ``spec.job.parallelism``: the job's default parallelism, applied to every operator of the model
  (within the operator's [min_parallelism, max_parallelism]: a value outside is held at the
  bound, with a warning);
* ``spec.flinkConfiguration["pipeline.jobvertex-parallelism-overrides"]`` (``vertex:p,...``, what
  the Flink autoscaler writes): per-vertex overrides; a vertex is an operator name of the model or
  a key of the entry's ``vertices`` (Flink job-vertex id -> operator).

The deployment's entry of the **mapping file** names its model (a model the server loaded), the
current input rate and the targets; ``scheduler.validate.validate`` predicts the configuration at
that rate. Any violation (saturation: the rate at or above the configuration's max sustainable
rate; utilization above the target; the latency SLO) denies the change with a message naming
each one; otherwise it is allowed, with a warning when the headroom (max rate without violation /
rate) is below the entry's ``min_headroom``. Mapping file (YAML or JSON)::

    unmapped: allow            # allow | deny a FlinkDeployment with no entry (default allow, warned)
    deployments:
      - namespace: streaming
        name: wordcount
        model: wordcount       # a model of the server's --models directory (the file's stem)
        rate: 20000            # current input rate, tuples/s
        latency_slo_ms: 50     # optional
        latency_stat: p99      # mean | p95 | p99 (default p99)
        utilization_target: 0.9  # optional (default 0.9 with an SLO, else 0.7)
        min_headroom: 1.2      # optional (default 1.2): warn below
        vertices: {"0a448493b4782967b150582570326227": split}   # optional
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from modeler.errors import AuguryError

OVERRIDES_KEY = "pipeline.jobvertex-parallelism-overrides"
API_VERSION = "admission.k8s.io/v1"


class AdmissionError(AuguryError):
    """A bad mapping file or a malformed AdmissionReview."""

    status: int = 400


@dataclass(frozen=True)
class DeploymentEntry:
    """One FlinkDeployment's model, rate and targets."""

    namespace: str
    name: str
    model: str
    """The model's name on the server (its file's stem)."""
    rate: float
    """Current input rate, tuples/s."""
    latency_slo_ms: float | None = None
    """End-to-end latency bound, ms; None = no SLO."""
    latency_stat: str = "p99"
    """mean | p95 | p99."""
    utilization_target: float | None = None
    """Highest utilization of any instance, in (0, 1]; None = ``scheduler.targets.Targets``' default."""
    min_headroom: float = 1.2
    """Warn when the configuration sustains less than this multiple of the rate without violation."""
    vertices: Mapping[str, str] = field(default_factory=dict)
    """Flink job-vertex id -> operator name, for the overrides."""


@dataclass(frozen=True)
class AdmissionMapping:
    deployments: Mapping[tuple[str, str], DeploymentEntry]
    """(namespace, name) -> entry."""
    unmapped: str = "allow"
    """What to answer for a FlinkDeployment without an entry: allow (with a warning) or deny."""
    file: str | None = None


def _number(raw: Mapping, key: str, file: str, where: str, *, default: Any = None, low: float = 0.0,
            low_open: bool = False, high: float = 1e15) -> float | None:
    if key not in raw or raw[key] is None:
        return default
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < low or (low_open and value == low) or value > high:
        raise AdmissionError(f"expected a number in {'(' if low_open else '['}{low:g}, {high:g}]", file=file,
                             field=f"{where}.{key}", value=value)
    return float(value)


def parse_mapping(data: Any, file: str = "<mapping>") -> AdmissionMapping:
    """The mapping file's value (see the module docstring) as an ``AdmissionMapping``."""
    if not isinstance(data, Mapping):
        raise AdmissionError("expected a mapping with 'deployments'", file=file, value=type(data).__name__)
    unknown = set(data) - {"deployments", "unmapped"}
    if unknown:
        raise AdmissionError("unknown key", file=file, field=sorted(map(str, unknown))[0])
    unmapped = data.get("unmapped", "allow")
    if unmapped not in ("allow", "deny"):
        raise AdmissionError("expected allow or deny", file=file, field="unmapped", value=unmapped)
    items = data.get("deployments") or []
    if not isinstance(items, list):
        raise AdmissionError("expected a list", file=file, field="deployments", value=type(items).__name__)
    allowed = {"namespace", "name", "model", "rate", "latency_slo_ms", "latency_stat", "utilization_target",
               "min_headroom", "vertices"}
    out: dict[tuple[str, str], DeploymentEntry] = {}
    for i, raw in enumerate(items):
        where = f"deployments[{i}]"
        if not isinstance(raw, Mapping):
            raise AdmissionError("expected a mapping", file=file, field=where, value=raw)
        extra = set(raw) - allowed
        if extra:
            raise AdmissionError("unknown key", file=file, field=f"{where}.{sorted(map(str, extra))[0]}")
        for key in ("namespace", "name", "model"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise AdmissionError("expected a non-empty string", file=file, field=f"{where}.{key}",
                                     value=raw.get(key))
        if "rate" not in raw:
            raise AdmissionError("required: the current input rate, tuples/s", file=file, field=f"{where}.rate")
        stat = raw.get("latency_stat", "p99")
        if stat not in ("mean", "p95", "p99"):
            raise AdmissionError("expected mean, p95 or p99", file=file, field=f"{where}.latency_stat", value=stat)
        vertices = raw.get("vertices") or {}
        if not isinstance(vertices, Mapping) or not all(isinstance(v, str) for v in vertices.values()):
            raise AdmissionError("expected a mapping of vertex id -> operator name", file=file,
                                 field=f"{where}.vertices", value=vertices)
        entry = DeploymentEntry(
            namespace=raw["namespace"], name=raw["name"], model=raw["model"],
            rate=_number(raw, "rate", file, where),
            latency_slo_ms=_number(raw, "latency_slo_ms", file, where, low_open=True),
            latency_stat=stat,
            utilization_target=_number(raw, "utilization_target", file, where, low_open=True, high=1.0),
            min_headroom=_number(raw, "min_headroom", file, where, default=1.2),
            vertices={str(k): v for k, v in vertices.items()})
        key = (entry.namespace, entry.name)
        if key in out:
            raise AdmissionError("a second entry for this deployment", file=file, field=f"{where}.name",
                                 value=f"{entry.namespace}/{entry.name}")
        out[key] = entry
    return AdmissionMapping(deployments=out, unmapped=unmapped, file=file)


def load_mapping(path: str | Path) -> AdmissionMapping:
    """Read a mapping file (YAML or JSON)."""
    from modeler.documents import read_document

    file = str(path)
    if not Path(path).exists():
        raise AdmissionError("no such file", file=file, field="--admission")
    return parse_mapping(read_document(path, "yaml", "admission mapping (YAML/JSON)", AdmissionError), file)


# ----------------------------------------------------------------------------- the review


def _get(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, Mapping):
            return None
        data = data.get(part)
    return data


def _response(uid: str, allowed: bool, message: str | None = None, warnings: list[str] | None = None,
              code: int = 403) -> dict:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": code, "message": message or "denied"}
    elif message:
        response["status"] = {"code": 200, "message": message}
    if warnings:
        response["warnings"] = [w if len(w) <= 250 else w[:247] + "..." for w in warnings]
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def proposed_config(obj: Mapping, model, entry: DeploymentEntry) -> tuple[dict[str, int], list[str]]:
    """The configuration a FlinkDeployment asks for ({operator: parallelism}, only the operators
    it sets) and warnings. Raises ``AdmissionError`` naming the field for a malformed value."""
    warnings: list[str] = []
    config: dict[str, int] = {}
    job_p = _get(obj, "spec.job.parallelism")
    if job_p is not None:
        if isinstance(job_p, bool) or not isinstance(job_p, int) or job_p < 1:
            raise AdmissionError("expected an integer >= 1", field="spec.job.parallelism", value=job_p)
        for op in model.operators:
            p = min(max(job_p, op.min_parallelism), op.max_parallelism)
            if p != job_p:
                warnings.append(f"operator {op.name} runs at {p}, not {job_p}: its bounds are "
                                f"[{op.min_parallelism}, {op.max_parallelism}]")
            config[op.name] = p
    flink_conf = _get(obj, "spec.flinkConfiguration") or {}
    text = flink_conf.get(OVERRIDES_KEY) if isinstance(flink_conf, Mapping) else None
    if text is not None:
        from scheduler.validate import parse_proposal

        try:
            overrides = parse_proposal({OVERRIDES_KEY: text})
        except AuguryError as err:
            raise AdmissionError(err.message, field=f"spec.flinkConfiguration.{OVERRIDES_KEY}",
                                 value=err.value) from None
        known = set(model.operator_names)
        for vertex, p in overrides.items():
            name = entry.vertices.get(vertex, vertex)
            if name not in known:
                warnings.append(f"vertex {vertex} is not an operator of model {entry.model} (ignored)")
                continue
            config[name] = p
    return config, warnings


def review(data: Any, mapping: AdmissionMapping, registry) -> dict:
    """The ``AdmissionReview`` answer to the review ``data`` (``registry.get(name)`` gives a
    loaded model). Raises ``AdmissionError`` (400) for a request that is not an AdmissionReview."""
    from augury.commands import validate as validate_cmd
    from scheduler.targets import Targets

    if not isinstance(data, Mapping):
        raise AdmissionError("expected an AdmissionReview object", field="body", value=type(data).__name__)
    if data.get("apiVersion") != API_VERSION or data.get("kind") != "AdmissionReview":
        raise AdmissionError(f"expected apiVersion {API_VERSION} and kind AdmissionReview", field="apiVersion",
                             value=data.get("apiVersion"))
    request = data.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str):
        raise AdmissionError("expected a request with a uid", field="request.uid", value=_get(data, "request.uid"))
    uid = request["uid"]
    kind = _get(request, "kind.kind")
    if kind != "FlinkDeployment":
        return _response(uid, True, warnings=[f"augury checks FlinkDeployments only (got {kind})"])
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return _response(uid, True)
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        raise AdmissionError("expected the FlinkDeployment object", field="request.object", value=obj)
    namespace = _get(obj, "metadata.namespace") or request.get("namespace") or "default"
    name = _get(obj, "metadata.name") or request.get("name")
    for where, value in (("metadata.namespace", namespace), ("metadata.name", name)):
        if not isinstance(value, str) or not value:
            raise AdmissionError("expected a non-empty string", field=f"request.object.{where}", value=value)
    entry = mapping.deployments.get((namespace, name))
    if entry is None:
        why = f"augury: no model is registered for FlinkDeployment {namespace}/{name}"
        if mapping.unmapped == "deny":
            return _response(uid, False, why + " (the mapping denies unmapped deployments)")
        return _response(uid, True, warnings=[why + " (not checked)"])
    try:
        loaded = registry.get(entry.model)
    except AuguryError:
        return _response(uid, mapping.unmapped != "deny",
                         f"augury: model {entry.model} for {namespace}/{name} is not loaded",
                         warnings=[f"augury: model {entry.model} for {namespace}/{name} is not loaded (not checked)"],
                         code=500)
    try:
        config, warnings = proposed_config(obj, loaded.model, entry)
    except AdmissionError as err:
        return _response(uid, False, f"augury: {namespace}/{name}: {err.field} = {err.value!r}: {err.message}",
                         code=400)
    if not config:
        return _response(uid, True, warnings=warnings + ["augury: the spec sets no parallelism (not checked)"])
    goal = Targets(utilization_target=entry.utilization_target, latency_slo_ms=entry.latency_slo_ms,
                   latency_stat=entry.latency_stat)
    label = ",".join(f"{k}={v}" for k, v in sorted(config.items()))
    try:
        result = validate_cmd.answer(loaded.model, entry.rate, config, goal.utilization_target, goal.latency_slo_ms,
                                     goal.latency_stat, compiled=loaded.compiled)
    except AuguryError as err:
        return _response(uid, False, f"augury: the configuration {label} does not fit model {entry.model}: "
                                     f"{err.message} ({err.field} = {err.value!r})", warnings)
    if not result.ok:
        problems = []
        for v in result.violations:
            if v.kind == "saturation":
                problems.append(f"saturation at {v.operator}: the rate {v.value:,.1f} tuples/s is at or above "
                                f"the max sustainable rate {v.limit:,.1f}")
            elif v.kind == "utilization":
                problems.append(f"utilization at {v.operator}: {v.value:.3f} > target {v.limit:g}")
            else:
                lat = "unbounded" if v.value is None else f"{v.value:,.2f} ms"
                problems.append(f"latency {goal.latency_stat}: {lat} > SLO {v.limit:g} ms")
        message = (f"augury: {namespace}/{name} at {label} violates its targets at {entry.rate:,.1f} tuples/s "
                   f"(model {entry.model} {loaded.version}): " + "; ".join(problems))
        return _response(uid, False, message, warnings)
    h = result.headroom
    if h.ratio is not None and h.ratio < entry.min_headroom:
        warnings.append(f"augury: headroom x{h.ratio:.3g} (up to {h.max_rate:,.1f} tuples/s) is below "
                        f"x{entry.min_headroom:g}")
    return _response(uid, True, warnings=warnings)


def parse_review_body(text: str | bytes) -> Any:
    """The JSON value of a request body (``AdmissionError`` naming ``body`` when malformed)."""
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise AdmissionError(f"malformed JSON ({type(err).__name__})", field="body") from None


def review_json(text: str | bytes, mapping: AdmissionMapping, registry) -> dict:
    """``review`` of a JSON text."""
    return review(parse_review_body(text), mapping, registry)
