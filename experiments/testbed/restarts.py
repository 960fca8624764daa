"""Measured restarts from the testbed's event log, for ``modeler.restart.fit_restart_model``.

Every ``reconfigure`` event carries its number (``detail.reconfiguration``), the state it restores
(``detail.state_mb``) and the restarted operators; every ``restart_done`` event the number of the
reconfiguration that paused the operator and the measured outage (``detail.restart_s`` = end of
the pause - the reconfiguration's time, simulated seconds). A reconfiguration's measured restart
is the longest outage of its operators. One that a later reconfiguration interrupted (some of its
operators were re-paused before they finished) is not a clean measurement and is left out.

This is the minimal path from restart events to calibration: the history store has no table of
restart events; ``augury testbed run --out DIR`` writes them to ``DIR/events.csv`` (``detail``
as JSON), which ``restart_samples`` reads as well.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

import pandas as pd

from experiments.testbed.errors import TestbedError


def _records(events: Any) -> list[dict]:
    if isinstance(events, pd.DataFrame):
        out = []
        for row in events.to_dict("records"):
            detail = row.get("detail")
            if isinstance(detail, str):
                try:
                    detail = json.loads(detail) if detail else {}
                except json.JSONDecodeError:
                    raise TestbedError("not JSON", field="events.detail", value=detail) from None
            out.append({**row, "detail": detail if isinstance(detail, dict) else {}})
        return out
    return [e if isinstance(e.get("detail"), dict) else {**e, "detail": {}} for e in events]


def restart_samples(events: Iterable[dict] | pd.DataFrame) -> list[tuple[float, float]]:
    """``[(state_mb, restart_s)]``, one per completed, uninterrupted reconfiguration, oldest
    first, from ``Testbed.events`` (dicts) or ``Testbed.events_frame()`` / ``events.csv``."""
    records = _records(events)
    started: dict[int, tuple[float, set[str]]] = {}
    done: dict[int, dict[str, float]] = {}
    for e in records:
        detail = e["detail"]
        k = detail.get("reconfiguration")
        if k is None or (isinstance(k, float) and k != k):
            continue
        k = int(k)
        if e.get("event") == "reconfigure":
            started[k] = (float(detail.get("state_mb", 0.0)), set(detail.get("restarted", ())))
        elif e.get("event") == "restart_done":
            done.setdefault(k, {})[str(e.get("operator"))] = float(detail["restart_s"])
    samples = []
    for k in sorted(started):
        state_mb, operators = started[k]
        finished = done.get(k, {})
        if operators and operators <= set(finished):
            samples.append((state_mb, max(finished[op] for op in operators)))
    return samples
