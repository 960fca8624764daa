"""Build a Ciw simulation of a model (the independent oracle for the queueing model).

Every operator instance is a Ciw node with one server (a queue per instance, as in the engines).
A source without a service time is an infinite-server node with zero service, so the external
Poisson stream is round-robined to the next operator like an engine's source task does.
Routing per upstream instance: an edge is chosen with probability = selectivity (selectivities
of an operator's out-edges must sum to <= 1: Ciw moves customers, it cannot copy them), then
shuffle = round-robin over the target's instances (one cycle per upstream instance), key =
random choice with the instance shares of Flink's key-group mapping. Bounded buffers
(``buffer_tuples``) are Ciw queue capacities (waiting room, the server not counted) with its
blocking after service: a sender whose target is full holds the tuple, blocked, until a slot
frees (blocked senders released first come, first served), as in the engines. Times in ms.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import ciw
import numpy as np

from modeler.keys import key_group_weights, instance_shares
from modeler.modelfile import JobModel


@dataclass(frozen=True)
class CiwRun:
    """One simulation's measurements (times in ms)."""

    latencies_ms: np.ndarray
    """End-to-end latency of every tuple that entered after the warm-up and left through a sink
    (first arrival to last exit), sorted."""
    utilization: dict[str, list[float]]
    """Per operator, each instance's served tuples per ms x its mean service time."""
    served: dict[str, list[float]]
    """Per operator, tuples each instance served after the warm-up."""

    @property
    def mean_ms(self) -> float:
        return float(np.mean(self.latencies_ms))


class _EngineRouter(ciw.routing.NodeRouting):
    """Picks an out-edge by selectivity, then an instance by the edge's grouping."""

    def __init__(self, choices, rng):
        # choices: list of (probability, kind, [node ids], [shares])
        self.choices = choices
        self.rng = rng
        self.cycles = [itertools.cycle(nodes) for _, _, nodes, _ in choices]

    def next_node(self, ind):
        u = self.rng.random()
        acc = 0.0
        for (prob, kind, nodes, shares), cycle in zip(self.choices, self.cycles):
            acc += prob
            if u < acc:
                if kind == "shuffle":
                    return self.simulation.nodes[next(cycle)]
                return self.simulation.nodes[self.rng.choices(nodes, weights=shares)[0]]
        return self.simulation.nodes[-1]


def _service_dist(mean_ms: float, scv: float):
    if mean_ms <= 0:
        return ciw.dists.Deterministic(0.0)
    if abs(scv - 1.0) < 1e-12:
        return ciw.dists.Exponential(1.0 / mean_ms)
    return ciw.dists.Gamma(shape=1.0 / scv, scale=mean_ms * scv)


def simulate(model: JobModel, rate: float, *, horizon_ms: float, warmup_ms: float, seed: int = 1):
    """Run the job at ``rate`` tuples/s.

    Returns a ``CiwRun``: the end-to-end latencies (ms) of tuples that entered after the warm-up
    and left through a sink, per-instance utilizations and per-instance served counts.
    """
    config = model.config
    nodes: list[tuple[str, int]] = []
    for op in model.operators:
        for i in range(config[op.name]):
            nodes.append((op.name, i))
    node_id = {key: k + 1 for k, key in enumerate(nodes)}
    # Routing randomness must be independent of Ciw's global `random` (seeded below with the same
    # seed): an identical stream would correlate branch choices with service-time draws.
    rng = random.Random(f"augury-routing-{seed}")
    out_edges = {op.name: [e for e in model.edges if e.source == op.name] for op in model.operators}

    arrivals, services, servers, routers, capacities = [], [], [], [], []
    shares = model.source_shares()
    for op_name, i in nodes:
        op = model.operator(op_name)
        if op.is_source:
            per_instance = rate * shares[op_name] / config[op_name] / 1000.0  # per ms
            arrivals.append(ciw.dists.Exponential(per_instance))
        else:
            arrivals.append(None)
        service = op.service_time_ms or 0.0
        services.append(_service_dist(service, op.service_scv))
        servers.append(float("inf") if service <= 0 else 1)
        bounds = [model.edge_buffer(e) for e in model.edges if e.target == op_name]
        bounds = [b for b in bounds if b is not None]
        capacities.append(min(bounds) if bounds else float("inf"))
        choices = []
        for e in out_edges[op_name]:
            targets = [node_id[(e.target, j)] for j in range(config[e.target])]
            if e.grouping == "shuffle":
                offset = i % len(targets)  # upstream instances start their cycles at different places
                targets = targets[offset:] + targets[:offset]
                choices.append((e.selectivity, "shuffle", targets, None))
            elif e.grouping == "key":
                target_op = model.operator(e.target)
                sh = instance_shares(key_group_weights(e.keys, target_op.max_parallelism), config[e.target])
                choices.append((e.selectivity, "key", targets, list(sh)))
            else:
                raise ValueError(f"the Ciw oracle does not model {e.grouping} edges")
        if sum(c[0] for c in choices) > 1 + 1e-9:
            raise ValueError("Ciw cannot copy tuples: out-edge selectivities must sum to <= 1")
        routers.append(_EngineRouter(choices, rng))

    network = ciw.create_network(
        arrival_distributions=arrivals, service_distributions=services,
        number_of_servers=servers, routing=ciw.routing.NetworkRouting(routers=routers),
        queue_capacities=capacities,
    )
    ciw.seed(seed)
    sim = ciw.Simulation(network)
    sim.simulate_until_max_time(horizon_ms)
    records = sim.get_all_records()
    first_arrival: dict[int, float] = {}
    last_exit: dict[int, float] = {}
    left: set[int] = set()
    sink_nodes = {node_id[(op.name, i)] for op in model.operators if not out_edges[op.name]
                  for i in range(config[op.name])}
    busy = np.zeros(len(nodes))  # tuples whose service started after the warm-up, per node
    for r in records:
        first_arrival[r.id_number] = min(first_arrival.get(r.id_number, np.inf), r.arrival_date)
        last_exit[r.id_number] = max(last_exit.get(r.id_number, -np.inf), r.exit_date)
        if r.destination == -1 and r.node in sink_nodes:  # dropped tuples (selectivity < 1) do not count
            left.add(r.id_number)
        if r.service_start_date >= warmup_ms:
            busy[r.node - 1] += 1
    latencies = [last_exit[c] - first_arrival[c] for c in left if first_arrival[c] >= warmup_ms]
    # Utilization = served tuples per ms * mean service time: the quantity the model predicts
    # (lambda * E[S]); summing sampled service times instead adds sampling noise of
    # sqrt(SCV / n) that says nothing about routing or traffic.
    util: dict[str, list[float]] = {}
    counts: dict[str, list[float]] = {}
    for (op_name, _), served in zip(nodes, busy):
        mean_ms = model.operator(op_name).service_time_ms or 0.0
        util.setdefault(op_name, []).append(served * mean_ms / (horizon_ms - warmup_ms))
        counts.setdefault(op_name, []).append(float(served))
    return CiwRun(np.sort(np.asarray(latencies, dtype=float)), util, counts)
