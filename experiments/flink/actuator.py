"""Live rescaling of a running Flink job (adaptive scheduler), with the measured restart time.

``LiveFlinkActuator`` implements ``scheduler.interfaces.Actuator`` over operator names (the
names ``experiments.flink.metrics`` gives vertices). ``apply`` asks for the new parallelism and
then waits until every vertex runs at the requested parallelism with all subtasks RUNNING;
``Actuation.restart_s`` is the time from the request to that moment (what the scheduler's lead
time needs).

The request itself is ``PUT /jobs/<id>/resource-requirements`` with, for every vertex,
``{"parallelism": {"lowerBound": 1, "upperBound": p}}`` (the adaptive scheduler runs each vertex
at the upper bound when slots allow). Pass ``inner=`` an actuator that speaks operator names
(e.g. the scheduler's Flink REST actuator) to let it issue the request; this class then only
waits and measures.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable, Mapping

from experiments.flink.metrics import FlinkMetricsConfig, FlinkMetricsSource, JobGraph
from scheduler.interfaces import Actuation, ActuationFailed, Actuator, MetricsUnavailable


@dataclass(frozen=True)
class LiveActuatorConfig:
    """Timeouts of a live rescale."""

    ready_timeout_s: float = 120.0
    """How long to wait for the new parallelism to be RUNNING, s."""
    poll_s: float = 0.25
    """Status poll interval, s."""
    request_timeout_s: float = 10.0
    """Per HTTP request, s."""
    lower_bound: int = 1
    """The ``lowerBound`` sent with every vertex."""


class LiveFlinkActuator:
    """Rescales a running job and waits for it; ``Actuator`` over operator names."""

    def __init__(self, rest_url: str, job_id: str, config: LiveActuatorConfig = LiveActuatorConfig(),
                 inner: Actuator | None = None, clock: Callable[[], float] = time.monotonic):
        self.rest_url = rest_url.rstrip("/")
        self.job_id = job_id
        self.config = config
        self.inner = inner
        self._clock = clock
        self._graph_source = FlinkMetricsSource(
            rest_url, job_id, FlinkMetricsConfig(timeout_s=config.request_timeout_s, retries=2))

    def graph(self) -> JobGraph:
        try:
            return self._graph_source.graph()
        except MetricsUnavailable as err:
            raise ActuationFailed(f"cannot read the job graph: {err}", field="job",
                                  value=self.job_id) from None

    def current(self) -> dict[str, int]:
        return self.graph().config()

    def _put(self, graph: JobGraph, config: Mapping[str, int]) -> None:
        body = {v.id: {"parallelism": {"lowerBound": min(self.config.lower_bound, int(config[v.operator])),
                                       "upperBound": int(config[v.operator])}}
                for v in graph.vertices}
        req = urllib.request.Request(f"{self.rest_url}/jobs/{self.job_id}/resource-requirements",
                                     data=json.dumps(body).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.config.request_timeout_s) as resp:
                resp.read()
        except urllib.error.HTTPError as err:
            raise ActuationFailed(f"Flink refused the resource requirements (HTTP {err.code}: "
                                  f"{err.read().decode(errors='replace')[:300]})",
                                  field="config", value=dict(config)) from None
        except (urllib.error.URLError, OSError) as err:
            raise ActuationFailed(f"Flink REST unreachable ({err})", field="url",
                                  value=self.rest_url) from None

    def apply(self, config: Mapping[str, int], reason: str = "") -> Actuation:
        graph = self.graph()
        known = graph.config()
        unknown = sorted(set(config) - set(known))
        if unknown:
            raise ActuationFailed("unknown operator", field="config", value=unknown[0])
        bad = {k: v for k, v in config.items() if int(v) < 1}
        if bad:
            raise ActuationFailed("parallelism must be >= 1", field="config", value=bad)
        target = {**known, **{k: int(v) for k, v in config.items()}}
        if target == known:
            return Actuation(applied=False, config=target, restart_s=0.0,
                             detail=f"already running {target}; {reason}".strip("; "))
        started = self._clock()
        if self.inner is not None:
            self.inner.apply(target, reason)
        else:
            self._put(graph, target)
        final = self.wait_running(target, started)
        restart_s = self._clock() - started
        return Actuation(applied=True, config=final.config(), restart_s=restart_s,
                         detail=f"rescaled {known} -> {target} in {restart_s:.1f} s; {reason}".strip("; "))

    def wait_running(self, target: Mapping[str, int], started: float | None = None) -> JobGraph:
        """Wait until every vertex runs at ``target`` with all subtasks RUNNING."""
        started = self._clock() if started is None else started
        deadline = started + self.config.ready_timeout_s
        last: JobGraph | None = None
        while self._clock() < deadline:
            try:
                last = self._graph_source.graph()
            except MetricsUnavailable:
                last = None
            if last is not None:
                if last.state in ("FAILED", "CANCELED", "FINISHED"):
                    raise ActuationFailed("the job ended while rescaling", field="state", value=last.state)
                if last.state == "RUNNING" and last.config() == dict(target) and \
                        all(v.status == "RUNNING" for v in last.vertices):
                    return last
            time.sleep(self.config.poll_s)
        seen = last.config() if last else None
        raise ActuationFailed(f"the new parallelism was not running after "
                              f"{self.config.ready_timeout_s:.0f} s (last seen {seen})",
                              field="config", value=dict(target))
