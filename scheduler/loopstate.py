"""The control loop's own memory in the ``StateStore`` (meta key ``"loop"``), so a restarted loop
continues where it stopped: trust, guard state, when the job settles, the last read, the
measured restart time and the (recalibrated) model.

``LoopMemory`` is the value; ``load_memory`` / ``save_memory`` turn it into the store's JSON
meta and back. Times in s (the metrics source's clock); infinite times are stored as null.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Mapping

from modeler.modelfile import JobModel, model_to_dict, parse_model
from scheduler.guard import GuardState
from scheduler.state import StateStore

META_KEY = "loop"

log = logging.getLogger("augury.loop")


@dataclass(frozen=True)
class LoopMemory:
    """What the loop keeps across restarts."""

    trust: Mapping[str, Any] | None
    """``TrustMonitor.snapshot()``."""
    guard_state: GuardState
    """Only ``last_action_s`` and ``changes_s`` are kept (a pending scale-down starts over)."""
    settled_after_s: float = -math.inf
    """Windows starting before this are unsettled (s)."""
    last_as_of: float | None = None
    """``as_of_s`` of the last batch read (s)."""
    measured_restart_s: float | None = None
    """The engine's restart time measured on the last applied change (s)."""
    model: JobModel | None = None
    """The recalibrated model; None: the configured one (or, on save, leave the stored one)."""


def load_memory(store: StateStore) -> LoopMemory | None:
    """The loop's memory in ``store``; None when there is none. A stored model the current code
    cannot read is left out (the configured one is used)."""
    meta = store.get_meta(META_KEY)
    if not meta:
        return None
    model = None
    if meta.get("model") is not None:
        try:
            model = parse_model(meta["model"], source="state:model")
        except Exception:  # a model the current code cannot read: keep the configured one
            log.warning("stored model unreadable; using the configured one")
    restart = meta.get("measured_restart_s")
    return LoopMemory(
        trust=meta.get("trust"),
        guard_state=GuardState(last_action_s=float(meta.get("last_action_s") or -math.inf),
                               changes_s=tuple(float(t) for t in meta.get("changes_s") or ())),
        settled_after_s=float(meta.get("settled_after_s") or -math.inf), last_as_of=meta.get("last_as_of"),
        measured_restart_s=float(restart) if restart is not None else None, model=model)


def save_memory(store: StateStore, memory: LoopMemory) -> None:
    """Write ``memory`` into ``store`` (merged into what is there: a model saved once stays until
    another is saved)."""
    meta = store.get_meta(META_KEY) or {}
    meta.update({"trust": memory.trust, "last_action_s": _finite(memory.guard_state.last_action_s),
                 "changes_s": list(memory.guard_state.changes_s),
                 "settled_after_s": _finite(memory.settled_after_s), "last_as_of": memory.last_as_of,
                 "measured_restart_s": memory.measured_restart_s})
    if memory.model is not None:
        meta["model"] = model_to_dict(memory.model)
    store.put_meta(META_KEY, meta)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
