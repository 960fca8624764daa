"""Seeded random job DAGs: valid model files (``modeler.modelfile``, version 1) for experiments
that must not rest on the bundled examples alone.

``random_model_dict(seed, RandomDagSpec(...))`` returns the decoded model file (a dict that
``modeler.modelfile.parse_model`` accepts); ``random_model`` parses it; ``to_yaml`` writes it.
The same seed and spec always give the same model (``numpy.random.default_rng(seed)``; nothing
else is random).

What every generated job has (checked by ``check_shape``; the tests run it over many seeds):

* one or two sources, ``operators`` non-source operators, a DAG in which every operator is
  reachable from a source;
* **fan-out** (an operator with two or more successors) and **fan-in** (an operator with two or
  more predecessors);
* at least one **key-grouped** edge; ``skew`` chooses its keys: ``none`` = uniform over many keys
  (key groups evenly loaded), ``zipf`` = Zipf-distributed (exponent 0.6-1.1 over 1,000-20,000
  keys), ``mixed`` = each key edge Zipf with probability 1/2 (at least one of each);
* with ``contention``, at least one operator whose per-instance service time grows with its
  parallelism (``scaling: {form: contention, overhead: 0.005-0.03}``);
* service times drawn log-uniformly from ``service_time_ms`` (ms), SCVs from 0.5-2,
  selectivities 0.5-1.5 (sinks' inputs included), the Flink-like bounds 1 .. 32/64/128
  (``max_parallelism`` is also the number of key groups) and a deployed parallelism of 1-3.

Units: times in ms, rates in tuples/s (the model file's units). No I/O except ``write_model``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SKEWS = ("none", "zipf", "mixed")


@dataclass(frozen=True)
class RandomDagSpec:
    """What kind of job to draw. Every field has a default."""

    operators: tuple[int, int] = (4, 6)
    """Number of non-source operators, inclusive range (at least 3: fan-out and fan-in need it)."""
    sources: tuple[int, int] = (1, 2)
    """Number of sources, inclusive range."""
    skew: str = "mixed"
    """Key distributions of the key-grouped edges: none | zipf | mixed."""
    contention: bool = True
    """At least one operator with contention scaling."""
    service_time_ms: tuple[float, float] = (1.0, 5.0)
    """Range of mean service times per tuple, ms (log-uniform)."""
    network_delay_ms: float = 0.1
    """Per-hop network delay, ms."""

    def check(self) -> None:
        from modeler.errors import UsageError

        lo, hi = self.operators
        if not 3 <= lo <= hi <= 50:
            raise UsageError("must satisfy 3 <= low <= high <= 50", field="operators", value=self.operators)
        slo, shi = self.sources
        if not 1 <= slo <= shi <= 5:
            raise UsageError("must satisfy 1 <= low <= high <= 5", field="sources", value=self.sources)
        if self.skew not in SKEWS:
            raise UsageError(f"unknown skew (known: {', '.join(SKEWS)})", field="skew", value=self.skew)
        a, b = self.service_time_ms
        if not 0 < a <= b:
            raise UsageError("must satisfy 0 < low <= high", field="service_time_ms", value=self.service_time_ms)


def random_model_dict(seed: int, spec: RandomDagSpec = RandomDagSpec(), job: str | None = None) -> dict[str, Any]:
    """The decoded model file of a random job (see the module docstring)."""
    spec.check()
    rng = np.random.default_rng(seed)
    n_src = int(rng.integers(spec.sources[0], spec.sources[1] + 1))
    n_ops = int(rng.integers(spec.operators[0], spec.operators[1] + 1))
    sources = [f"src{i + 1}" for i in range(n_src)]
    ops = [f"op{i + 1}" for i in range(n_ops)]
    preds: dict[str, list[str]] = {o: [] for o in ops}
    # Topological order src*, op1, op2, ...: op1 reads every source (fan-in when there are two);
    # each later operator reads one earlier operator (mostly a recent one) and sometimes a second
    # earlier node, so the graph is connected from the sources by construction.
    preds[ops[0]] = list(sources)
    for k in range(1, n_ops):
        recent = ops[max(0, k - 2):k]
        first = recent[int(rng.integers(len(recent)))]
        preds[ops[k]] = [first]
        if rng.random() < 0.35:
            others = [x for x in sources + ops[:k] if x != first]
            preds[ops[k]].append(others[int(rng.integers(len(others)))])

    def out_degree(x: str) -> int:
        return sum(x in p for p in preds.values())

    if not any(out_degree(x) >= 2 for x in sources + ops):  # fan-out
        u = ops[int(rng.integers(0, n_ops - 2))]
        later = [o for o in ops[ops.index(u) + 1:] if u not in preds[o]]
        preds[later[int(rng.integers(len(later)))]].append(u)
    if not any(len(preds[o]) >= 2 for o in ops):  # fan-in
        target = ops[-1]
        others = [x for x in ops[:-1] if x not in preds[target]]
        preds[target].append(others[int(rng.integers(len(others)))])

    # Groupings: each operator's inputs are key-grouped with probability 1/2; at least one key
    # edge (two for ``mixed``).
    edges: list[dict[str, Any]] = []
    keyed = {o: bool(rng.random() < 0.5) for o in ops}
    need = 2 if spec.skew == "mixed" else 1  # mixed: a Zipf and a uniform key edge
    while sum(len(preds[o]) for o in ops if keyed[o]) < need:
        free = [o for o in ops if not keyed[o]]
        keyed[free[int(rng.integers(len(free)))]] = True
    zipf_edges: list[int] = []
    for o in ops:
        for u in preds[o]:
            edge: dict[str, Any] = {"from": u, "to": o, "grouping": "key" if keyed[o] else "shuffle"}
            if u not in sources:
                edge["selectivity"] = round(float(np.exp(rng.uniform(np.log(0.5), np.log(1.5)))), 3)
            if keyed[o]:
                edge["keys"] = {"distribution": "uniform"}
                zipf_edges.append(len(edges))
            edges.append(edge)
    if spec.skew != "none":
        chosen = [i for i in zipf_edges if spec.skew == "zipf" or rng.random() < 0.5]
        if spec.skew == "mixed":
            if not chosen:
                chosen = [zipf_edges[0]]
            if len(chosen) == len(zipf_edges):
                chosen = chosen[:-1]
        for i in chosen:
            edges[i]["keys"] = {"distribution": "zipf", "exponent": round(float(rng.uniform(0.6, 1.1)), 2),
                                "count": int(rng.choice([1000, 5000, 20000]))}

    lo, hi = spec.service_time_ms
    operators: list[dict[str, Any]] = []
    for i, s in enumerate(sources):
        raw: dict[str, Any] = {"name": s, "role": "source", "parallelism": 1}
        if n_src > 1:
            each = round(1.0 / n_src, 6)
            raw["rate_share"] = each if i < n_src - 1 else round(1.0 - (n_src - 1) * each, 6)
        operators.append(raw)
    contended = set()
    if spec.contention:
        contended = {o for o in ops if rng.random() < 0.3} or {ops[int(rng.integers(n_ops))]}
    for o in ops:
        max_p = int(rng.choice([32, 64, 128]))
        raw = {"name": o, "parallelism": int(rng.integers(1, 4)),
               "service_time_ms": round(float(np.exp(rng.uniform(np.log(lo), np.log(hi)))), 3),
               "service_scv": round(float(rng.uniform(0.5, 2.0)), 2), "max_parallelism": max_p}
        if o in contended:
            raw["scaling"] = {"form": "contention", "overhead": round(float(rng.uniform(0.005, 0.03)), 4)}
        operators.append(raw)
    return {"augury": 1, "job": job or f"random-{seed}", "network_delay_ms": spec.network_delay_ms,
            "operators": operators, "edges": edges}


def random_model(seed: int, spec: RandomDagSpec = RandomDagSpec(), job: str | None = None):
    """The parsed ``JobModel`` of ``random_model_dict(seed, spec, job)``."""
    from modeler.modelfile import parse_model

    raw = random_model_dict(seed, spec, job)
    return parse_model(raw, source=f"random DAG (seed {seed}, skew {spec.skew})")


def to_yaml(raw: dict[str, Any]) -> str:
    """Model-file text of ``raw`` (one operator / edge per line, like the bundled examples)."""
    import yaml

    def flow(d: dict[str, Any]) -> str:
        return yaml.safe_dump(d, default_flow_style=True, sort_keys=False, width=10_000).strip()

    lines = [f"# {raw['job']}: generated by experiments.randomdag", "augury: 1", f"job: {raw['job']}",
             f"network_delay_ms: {raw.get('network_delay_ms', 0.0)}", "operators:"]
    lines += [f"  - {flow(op)}" for op in raw["operators"]]
    lines.append("edges:")
    lines += [f"  - {flow(e)}" for e in raw["edges"]]
    return "\n".join(lines) + "\n"


def write_model(path: str | Path, seed: int, spec: RandomDagSpec = RandomDagSpec(), job: str | None = None) -> Path:
    """Write the random model file for ``seed`` to ``path`` and return the path."""
    path = Path(path)
    path.write_text(to_yaml(random_model_dict(seed, spec, job)), encoding="utf-8")
    return path


def check_shape(model) -> dict[str, bool]:
    """Which of the promised properties ``model`` (a ``JobModel``) has: fan_out, fan_in,
    key_edge, reachable (every operator from a source), zipf, uniform_key, contention."""
    import networkx as nx

    from modeler.modelfile import to_graph

    g = to_graph(model)
    srcs = [op.name for op in model.sources]
    reach = set(srcs)
    for s in srcs:
        reach |= nx.descendants(g, s)
    keys = [e.keys for e in model.edges if e.grouping == "key"]
    return {"fan_out": any(g.out_degree(v) >= 2 for v in g), "fan_in": any(g.in_degree(v) >= 2 for v in g),
            "key_edge": bool(keys), "reachable": reach == set(g.nodes),
            "zipf": any(k is not None and k.distribution == "zipf" for k in keys),
            "uniform_key": any(k is None or k.distribution == "uniform" for k in keys),
            "contention": any(op.scaling.form == "contention" for op in model.operators)}
