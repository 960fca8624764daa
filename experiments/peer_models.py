"""Re-implementations of the peers' performance models, for the ``accuracy`` experiment.

Pure functions over a ``JobModel`` (the same calibrated profile augury uses: service times,
SCVs, selectivities, network delay), a configuration and a total input rate. Rates in
tuples/s, times in ms. What each model is (``docs/design.md`` section 3):

- **Caladrius** (``caladrius``): arrival rates propagated level by level; each instance a G/G/1
  queue whose wait is Kingman's ``rho/(1-rho) * (ca2 + cs2)/2 * E[S]``; end-to-end latency the
  sum of sojourns (plus per-hop network delay) along source->sink paths, mixed by flow. No
  capping: back pressure is only a flag (``rho >= 1``), the predicted throughput is the offered
  rate, and the latency is undefined (``None``) once any instance is saturated. Routing comes
  from observed shares in Caladrius; it has no way to know the shares of a key-grouped operator
  at a *new* parallelism, so every split here is even (1/p). Arrivals are taken as Poisson
  (``ca2 = 1``) at every operator: Caladrius does not propagate variability.
- **DRS** (``drs``): an open Jackson network, one M/M/k node per operator with k = parallelism
  (a single shared queue, even split, exponential service whatever the SCV). Mean latency is
  the visit-weighted sum of sojourns, ``sum_v (lambda_v / R) * T_v`` (Little's law over the
  network, as in the DRS paper; with selectivity > 1 this counts every derived tuple's sojourn),
  plus the network delay weighted the same way per edge. Stable while ``lambda_v < k mu_v``;
  the predicted throughput is ``min(rate, max_rate)`` (DRS itself only checks stability: this is
  generous to it).

Both models use the operator's base service time (no contention scaling) and predict no tail
percentiles. ``max_rate`` is where the first operator's (even-split) utilization reaches 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import networkx as nx

from modeler.modelfile import JobModel, to_graph

PEER_MODELS = ("caladrius", "drs")


@dataclass(frozen=True)
class PeerPrediction:
    """One peer model's answer at one configuration and rate (tuples/s, ms)."""

    model: str
    rate: float
    throughput: float
    max_rate: float
    saturated: bool
    """Some operator at or above utilization 1 (Caladrius: the back-pressure flag)."""
    latency_mean_ms: float | None
    """None when saturated (the model has no finite answer)."""


def erlang_c(k: int, offered: float) -> float:
    """Probability of waiting in an M/M/k queue with offered load ``offered`` = lambda/mu
    (Erlang's C formula); 1.0 when ``offered >= k``. Computed with the stable Erlang-B
    recursion."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if offered <= 0:
        return 0.0
    if offered >= k:
        return 1.0
    b = 1.0
    for n in range(1, k + 1):
        b = offered * b / (n + offered * b)
    rho = offered / k
    return b / (1.0 - rho + rho * b)


def mmk_sojourn(rate: float, service_s: float, k: int) -> float:
    """Mean sojourn (wait + service) of an M/M/k queue, in the unit of ``service_s``;
    ``inf`` when unstable."""
    if service_s <= 0:
        return 0.0
    mu = 1.0 / service_s
    if rate >= k * mu:
        return math.inf
    return erlang_c(k, rate / mu) / (k * mu - rate) + service_s


def kingman_wait(rho: float, ca2: float, cs2: float, service: float) -> float:
    """Kingman's G/G/1 mean wait ``rho/(1-rho) * (ca2+cs2)/2 * E[S]``; ``inf`` at rho >= 1."""
    if rho <= 0:
        return 0.0
    if rho >= 1:
        return math.inf
    return rho / (1.0 - rho) * (ca2 + cs2) / 2.0 * service


def _traffic(model: JobModel, config: Mapping[str, int], rate: float):
    """Topological order, offered arrival rate per operator and flow per edge (no capping)."""
    graph = to_graph(model)
    order = list(nx.lexicographical_topological_sort(graph, key=list(graph.nodes).index))
    shares = model.source_shares()
    lam: dict[str, float] = {}
    flow: dict[tuple[str, str], float] = {}
    for v in order:
        ins = [e for e in model.edges if e.target == v]
        if not ins:
            lam[v] = rate * shares.get(v, 0.0)
            continue
        total = 0.0
        for e in ins:
            f = e.selectivity * lam[e.source] * (config[v] if e.grouping == "broadcast" else 1.0)
            flow[(e.source, v)] = f
            total += f
        lam[v] = total
    return order, lam, flow


def _max_rate(model: JobModel, config: Mapping[str, int]) -> float:
    _, lam, _ = _traffic(model, config, 1.0)
    worst = 0.0
    for op in model.operators:
        if op.service_time_ms:
            worst = max(worst, lam[op.name] * op.service_time_ms / 1000.0 / config[op.name])
    return 1.0 / worst if worst > 0 else math.inf


def caladrius_predict(model: JobModel, config: Mapping[str, int] | None, rate: float,
                      arrival_scv: float = 1.0) -> PeerPrediction:
    """The Caladrius model (see the module docstring)."""
    config = model.resolve_config(config)
    order, lam, flow = _traffic(model, config, rate)
    delay = model.network_delay_ms
    saturated = False
    soj: dict[str, float] = {}
    for v in order:
        op = model.operator(v)
        es = op.service_time_ms or 0.0
        rho = lam[v] / config[v] * es / 1000.0
        if es > 0 and rho >= 1.0:
            saturated = True
        soj[v] = kingman_wait(rho, arrival_scv, op.service_scv, es) + es
    reach: dict[str, float] = {}
    for v in order:
        ins = [(u, f) for (u, w), f in flow.items() if w == v]
        total = sum(f for _, f in ins)
        upstream = sum(f * (reach[u] + delay) for u, f in ins) / total if total > 0 else 0.0
        reach[v] = upstream + soj[v]
    graph = to_graph(model)
    sinks = [v for v in order if graph.out_degree(v) == 0]
    weight = sum(lam[s] for s in sinks)
    latency = None
    if not saturated and weight > 0:
        latency = sum(lam[s] * reach[s] for s in sinks) / weight
    return PeerPrediction("caladrius", float(rate), float(rate), _max_rate(model, config),
                          saturated, latency)


def drs_predict(model: JobModel, config: Mapping[str, int] | None, rate: float) -> PeerPrediction:
    """The DRS model (see the module docstring)."""
    config = model.resolve_config(config)
    order, lam, flow = _traffic(model, config, rate)
    saturated = False
    total = 0.0
    for v in order:
        es_s = (model.operator(v).service_time_ms or 0.0) / 1000.0
        t = mmk_sojourn(lam[v], es_s, config[v])
        if math.isinf(t):
            saturated = True
        total += lam[v] * t * 1000.0
    total += sum(f for f in flow.values()) * model.network_delay_ms
    latency = None if saturated or rate <= 0 else total / rate
    mr = _max_rate(model, config)
    return PeerPrediction("drs", float(rate), float(min(rate, mr)), mr, saturated, latency)


def peer_predict(name: str, model: JobModel, config: Mapping[str, int] | None, rate: float) -> PeerPrediction:
    if name == "caladrius":
        return caladrius_predict(model, config, rate)
    if name == "drs":
        return drs_predict(model, config, rate)
    raise ValueError(f"unknown peer model {name!r} (known: {', '.join(PEER_MODELS)})")
