"""Actuators: where a chosen configuration goes. All satisfy ``scheduler.interfaces.Actuator``
(``current() -> {operator: parallelism}``, ``apply(config, reason) -> Actuation``; failures raise
``ActuationFailed``, exit code 3).

* ``DryRunActuator``: changes nothing; writes each change as one JSON line (to a stream or
  file) and remembers it (advisor mode).
* ``FlinkRestActuator``: Flink's adaptive scheduler. ``GET /jobs/<id>`` maps vertex ids to
  operator names, ``GET /jobs/<id>/resource-requirements`` reads the current parallelism (the
  upper bound of each vertex), ``PUT /jobs/<id>/resource-requirements`` sends every vertex as
  ``{"parallelism": {"lowerBound": lower_bound, "upperBound": p}}`` (unchanged vertices keep
  their current requirement).
* ``FlinkKubernetesActuator``: the Flink Kubernetes operator. ``patch(config)`` is a JSON merge
  patch of the FlinkDeployment setting ``spec.flinkConfiguration
  ["pipeline.jobvertex-parallelism-overrides"] = "<vertex id>:<p>,..."``; ``apply`` runs
  ``kubectl patch flinkdeployment <name> -n <ns> --type merge -p <patch>`` through an injectable
  runner.
* ``HeronActuator``: ``heron update <cluster> <topology> --component-parallelism=<op>:<p> ...``
  (one flag per changed component) through an injectable runner.

Runners take an argv list and return ``subprocess.CompletedProcess`` (``subprocess.run`` with
``capture_output=True, text=True`` by default), so tests execute nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence, TextIO

from scheduler.interfaces import Actuation, ActuationFailed

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess"]


def _default_runner(argv: Sequence[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ActuationFailed(f"could not run {argv[0]} ({err})", field="command", value=" ".join(argv)) from None


def _validated(config: Mapping[str, int], known: Mapping[str, int] | Sequence[str]) -> dict[str, int]:
    out = {}
    for name, p in config.items():
        if name not in known:
            raise ActuationFailed(f"unknown operator (known: {', '.join(known)})", field="config", value=name)
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise ActuationFailed("parallelism must be a positive integer", field=f"config.{name}", value=p)
        out[name] = int(p)
    return out


# ------------------------------------------------------------------------------ dry run


@dataclass
class DryRunActuator:
    """Applies nothing: writes one JSON line per change ``{"ts", "config", "changes", "reason"}``
    to ``out`` (a stream, or a file path appended to) and keeps the configuration in memory."""

    config: dict[str, int]
    out: TextIO | str | Path | None = None
    """Where the lines go: a text stream, a file path, or None for stdout."""
    clock: Callable[[], float] = time.time
    history: list[Actuation] = field(default_factory=list)

    def current(self) -> dict[str, int]:
        return dict(self.config)

    def apply(self, config: Mapping[str, int], reason: str = "") -> Actuation:
        new = _validated(config, self.config)
        changes = {n: {"from": self.config[n], "to": p} for n, p in new.items() if self.config[n] != p}
        self.config.update(new)
        line = json.dumps({"ts": self.clock(), "config": dict(self.config), "changes": changes,
                           "reason": reason}, sort_keys=True)
        if isinstance(self.out, (str, Path)):
            with open(self.out, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        else:
            stream = self.out or sys.stdout
            stream.write(line + "\n")
            stream.flush()
        result = Actuation(applied=False, config=dict(self.config), restart_s=None,
                           detail=f"dry run: {len(changes)} change(s) not applied; {reason}".rstrip("; "))
        self.history.append(result)
        return result


# --------------------------------------------------------------------------- Flink REST


@dataclass
class FlinkRestActuator:
    """Flink's adaptive scheduler over REST (``rest_url`` like ``http://127.0.0.1:8081``)."""

    rest_url: str
    job_id: str
    vertex_ids: Mapping[str, str] | None = None
    """operator name -> vertex id; None reads them from ``GET /jobs/<id>`` (vertex names)."""
    lower_bound: int = 1
    """``lowerBound`` sent with every vertex (the adaptive scheduler may run with fewer slots)."""
    timeout_s: float = 10.0

    def _request(self, method: str, path: str, body: object | None = None) -> object:
        url = f"{self.rest_url.rstrip('/')}{path}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                text = resp.read().decode() or "{}"
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:300]
            raise ActuationFailed(f"Flink REST {method} {path} failed: HTTP {err.code} {detail}",
                                  field="rest_url", value=self.rest_url) from None
        except (urllib.error.URLError, OSError) as err:
            raise ActuationFailed(f"Flink REST unreachable ({err})", field="rest_url", value=self.rest_url) from None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            raise ActuationFailed(f"Flink REST {method} {path} returned no JSON", field="rest_url",
                                  value=self.rest_url) from None

    def vertices(self) -> dict[str, str]:
        """operator name -> vertex id."""
        if self.vertex_ids is not None:
            return dict(self.vertex_ids)
        job = self._request("GET", f"/jobs/{self.job_id}")
        vertices = job.get("vertices", []) if isinstance(job, dict) else []
        self.vertex_ids = {v["name"]: v["id"] for v in vertices}
        return dict(self.vertex_ids)

    def requirements(self) -> dict:
        """The raw ``resource-requirements`` object: {vertex id: {"parallelism": {...}}}."""
        reqs = self._request("GET", f"/jobs/{self.job_id}/resource-requirements")
        if not isinstance(reqs, dict):
            raise ActuationFailed("unexpected resource-requirements response", field="job_id", value=self.job_id)
        return reqs

    def current(self) -> dict[str, int]:
        reqs = self.requirements()
        return {name: int(reqs[vid]["parallelism"]["upperBound"])
                for name, vid in self.vertices().items() if vid in reqs}

    def body(self, config: Mapping[str, int], requirements: Mapping) -> dict:
        """The PUT body: every vertex, the changed ones at their new upper bound."""
        names = self.vertices()
        new = _validated(config, names)
        body = {vid: {"parallelism": dict(req["parallelism"])} for vid, req in requirements.items()}
        for name, p in new.items():
            body[names[name]] = {"parallelism": {"lowerBound": min(self.lower_bound, p), "upperBound": p}}
        return body

    def apply(self, config: Mapping[str, int], reason: str = "") -> Actuation:
        body = self.body(config, self.requirements())
        self._request("PUT", f"/jobs/{self.job_id}/resource-requirements", body)
        return Actuation(applied=True, config=self.current(), restart_s=None,
                         detail=f"PUT resource-requirements; {reason}".rstrip("; "))


# --------------------------------------------------------------- Flink Kubernetes operator

OVERRIDES_KEY = "pipeline.jobvertex-parallelism-overrides"


@dataclass
class FlinkKubernetesActuator:
    """The Flink Kubernetes operator: a merge patch of the FlinkDeployment's configuration."""

    name: str
    """FlinkDeployment name."""
    vertex_ids: Mapping[str, str]
    """operator name -> Flink vertex id (the overrides are keyed by vertex id)."""
    config: dict[str, int]
    """The parallelism in force (the operator does not report it back through kubectl)."""
    namespace: str = "default"
    kubectl: str = "kubectl"
    runner: Runner = _default_runner

    def current(self) -> dict[str, int]:
        return dict(self.config)

    def patch(self, config: Mapping[str, int]) -> dict:
        """The merge patch for ``config`` applied on top of the current configuration."""
        merged = dict(self.config)
        merged.update(_validated(config, self.vertex_ids))
        overrides = ",".join(f"{self.vertex_ids[n]}:{merged[n]}" for n in self.vertex_ids if n in merged)
        return {"spec": {"flinkConfiguration": {OVERRIDES_KEY: overrides}}}

    def argv(self, config: Mapping[str, int]) -> list[str]:
        return [self.kubectl, "patch", "flinkdeployment", self.name, "-n", self.namespace,
                "--type", "merge", "-p", json.dumps(self.patch(config), sort_keys=True)]

    def apply(self, config: Mapping[str, int], reason: str = "") -> Actuation:
        argv = self.argv(config)
        done = self.runner(argv)
        if done.returncode != 0:
            raise ActuationFailed(f"kubectl patch failed ({(done.stderr or '').strip()[:300]})",
                                  field="flinkdeployment", value=self.name)
        self.config.update(_validated(config, self.vertex_ids))
        return Actuation(applied=True, config=dict(self.config), restart_s=None,
                         detail=f"patched FlinkDeployment {self.namespace}/{self.name}; {reason}".rstrip("; "))


# --------------------------------------------------------------------------------- Heron


@dataclass
class HeronActuator:
    """Apache Heron: ``heron update <cluster> <topology> --component-parallelism=<op>:<p>``."""

    cluster: str
    """``cluster[/role[/env]]`` as the heron CLI takes it."""
    topology: str
    config: dict[str, int]
    """The parallelism in force (components -> instances)."""
    heron: str = "heron"
    runner: Runner = _default_runner

    def current(self) -> dict[str, int]:
        return dict(self.config)

    def argv(self, config: Mapping[str, int]) -> list[str]:
        new = _validated(config, self.config)
        flags = [f"--component-parallelism={n}:{p}" for n, p in new.items() if self.config[n] != p]
        return [self.heron, "update", self.cluster, self.topology, *flags]

    def apply(self, config: Mapping[str, int], reason: str = "") -> Actuation:
        argv = self.argv(config)
        if len(argv) == 4:  # nothing changes: heron update without flags is an error
            return Actuation(applied=False, config=dict(self.config), restart_s=None,
                             detail=f"no change; {reason}".rstrip("; "))
        done = self.runner(argv)
        if done.returncode != 0:
            raise ActuationFailed(f"heron update failed ({(done.stderr or '').strip()[:300]})",
                                  field="topology", value=self.topology)
        self.config.update(_validated(config, self.config))
        return Actuation(applied=True, config=dict(self.config), restart_s=None,
                         detail=f"heron update {self.topology}; {reason}".rstrip("; "))
