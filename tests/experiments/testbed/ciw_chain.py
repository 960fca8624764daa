"""A Ciw model of source -> A (instances fed round-robin) -> B (one instance): per-node sojourns.

The independent oracle for the testbed's queueing (tests only). Times in ms.
"""

from __future__ import annotations

import itertools

import ciw
import numpy as np


class _RoundRobin(ciw.routing.NodeRouting):
    def __init__(self, targets):
        self.cycle = itertools.cycle(targets)

    def next_node(self, ind):
        return self.simulation.nodes[next(self.cycle)]


class _To(ciw.routing.NodeRouting):
    def __init__(self, target):
        self.target = target

    def next_node(self, ind):
        return self.simulation.nodes[self.target]


def _dist(mean_ms, scv):
    if scv == 1:
        return ciw.dists.Exponential(1.0 / mean_ms)
    return ciw.dists.Gamma(shape=1.0 / scv, scale=mean_ms * scv)


def chain_sojourns(rate_per_ms, p_a, a_ms, a_scv, b_ms, *, horizon_ms, warmup_ms, seed=1):
    """Mean sojourn (wait + service, ms) at A's instances and at B, after the warm-up."""
    n = 1 + p_a + 1
    arrivals = [ciw.dists.Exponential(rate_per_ms)] + [None] * (n - 1)
    services = [ciw.dists.Deterministic(0.0)] + [_dist(a_ms, a_scv)] * p_a + [_dist(b_ms, 1.0)]
    servers = [float("inf")] + [1] * (p_a + 1)
    routers = [_RoundRobin(list(range(2, 2 + p_a)))] + [_To(n)] * p_a + [_To(-1)]
    network = ciw.create_network(arrival_distributions=arrivals, service_distributions=services,
                                 number_of_servers=servers,
                                 routing=ciw.routing.NetworkRouting(routers=routers))
    ciw.seed(seed)
    sim = ciw.Simulation(network)
    sim.simulate_until_max_time(horizon_ms)
    a, b = [], []
    for r in sim.get_all_records():
        if r.arrival_date < warmup_ms:
            continue
        if 2 <= r.node <= 1 + p_a:
            a.append(r.waiting_time + r.service_time)
        elif r.node == n:
            b.append(r.waiting_time + r.service_time)
    return float(np.mean(a)), float(np.mean(b)), len(a)
