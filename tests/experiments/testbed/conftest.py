from __future__ import annotations

import pytest

from modeler.modelfile import parse_model


def chain(a_ms=1.0, b_ms=0.5, p_a=1, p_b=1, a_scv=1.0, **extra):
    """source -> A -> B, shuffle edges."""
    return parse_model({
        "augury": 1, "job": "chain", **extra,
        "operators": [{"name": "src", "role": "source"},
                      {"name": "A", "parallelism": p_a, "service_time_ms": a_ms, "service_scv": a_scv},
                      {"name": "B", "parallelism": p_b, "service_time_ms": b_ms}],
        "edges": [{"from": "src", "to": "A"}, {"from": "A", "to": "B"}],
    })


@pytest.fixture
def chain_model():
    return chain


def per_window(frame, metric, operator=None, instance=None, target=None):
    """Sum of a metric per window (optionally one operator / instance / target)."""
    f = frame[frame.metric == metric]
    if operator is not None:
        f = f[f.operator == operator]
    if instance is not None:
        f = f[f.instance == instance]
    if target is not None:
        f = f[f.target == target]
    return f.groupby("ts")["value"].sum()
