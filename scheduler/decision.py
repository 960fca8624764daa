"""The decide stage's values: ``Decision``, ``DecisionContext`` and the ``Decider`` protocol.

A decider turns the evaluate stage's ``Evaluation`` and a ``DecisionContext`` (the configuration
in force, the model and whether it is trusted, the settled windows, the targets, the clock) into
a ``Decision``: what to do, why (``reasons``) and what is expected to follow (``expected``).
Deciders never act and never read a clock, a file or the network: the loop hands them everything
as values. The guard rails (``scheduler.guard``) then bound what the decision may do.

Times are the metrics source's clock in seconds; rates tuples/s; latencies ms.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Protocol, runtime_checkable

from scheduler.targets import Targets

if TYPE_CHECKING:
    from modeler.modelfile import JobModel
    from scheduler.observe import JobWindow
    from scheduler.reactive import Proposal


class DecisionKind(str, enum.Enum):
    """What a decision does. A ``str`` enum: ``kind == "scale"`` and JSON keep working."""

    NONE = "none"
    """Nothing to do."""
    HOLD = "hold"
    """Something may be due, but the guard rails hold every action now (stabilization, blackout)."""
    SCALE = "scale"
    """Change the parallelism of some operators."""
    RESTART_INSTANCE = "restart_instance"
    """Restart (reschedule elsewhere) one instance of one operator."""
    UNDO = "undo"
    """Go back to the configuration before an action that did not help."""
    MOVE_OFF_HOST = "move_off_host"
    """Move every instance off one host (``Decision.host``) and keep them away from it: a slow
    or lost host, or the sender of a slow link (``scheduler.loop.HostMover``)."""

    def __str__(self) -> str:
        return self.value

    def __hash__(self) -> int:  # equal to its value, so hash like it (dict and set lookups by "scale")
        return hash(self.value)


@dataclass(frozen=True)
class Decision:
    """decide: what to do, why, and what is expected."""

    kind: DecisionKind
    path: str
    """Who decided: model | preemptive | reactive | guard | -."""
    config: Mapping[str, int] | None
    """The whole configuration to apply (``scale``/``undo``); None otherwise."""
    reasons: tuple[str, ...]
    expected: Mapping[str, float] = field(default_factory=dict)
    """What should be measured once the action settled (``busy_max``, ``throughput``,
    ``backpressure_max``, ``latency_<stat>_ms``)."""
    operators: tuple[str, ...] = ()
    diagnosis: str = ""
    instance: int | None = None
    host: str | None = None
    """``move_off_host``: the host to leave (as the metric rows name it; also ``operators[0]``, so
    the action log and the blacklist key it like an operator)."""
    reports: tuple["Proposal", ...] = ()
    """Findings that are not actions (a data-skew report with the hot key's key groups)."""
    blocked: tuple[str, ...] = ()
    """Proposals the guard rails or blacklist stopped, and why."""
    advisor: bool = False
    """Advisor mode: decided and logged, never applied."""
    fallbacks: tuple["Decision", ...] = field(default=(), compare=False)
    """What to do instead, in order, when the guard rails block this decision entirely (a slow
    instance's restart behind a held scale-down)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", DecisionKind(self.kind))

    def to_dict(self) -> dict:
        return {"kind": self.kind.value, "path": self.path, "config": dict(self.config) if self.config else None,
                "reasons": list(self.reasons), "expected": dict(self.expected),
                "operators": list(self.operators), "diagnosis": self.diagnosis, "instance": self.instance,
                "host": self.host,
                "reports": [r.to_dict() for r in self.reports], "blocked": list(self.blocked),
                "advisor": self.advisor}


def no_action(path: str, reasons: tuple[str, ...], reports: tuple = ()) -> Decision:
    return Decision(kind=DecisionKind.NONE, path=path, config=None, reasons=reasons or ("nothing to do",),
                    reports=reports)


@dataclass(frozen=True)
class DecisionContext:
    """Everything a decider may look at besides the evaluation, as values."""

    now_s: float
    """End of the newest settled window (s, source clock)."""
    config: Mapping[str, int]
    """The configuration in force."""
    model: "JobModel"
    """The loop's current model (calibrated from measurements; possibly recalibrated)."""
    trusted: bool
    """The trust monitor trusts the model's predictions for this job now."""
    history: tuple["JobWindow", ...]
    """Settled windows, oldest first (the newest is ``evaluation.window``)."""
    targets: Targets = Targets()
    lead_time_s: float | None = None
    """The engine's measured restart time plus settle time (s), None until a change was measured."""
    recent_changes_s: tuple[float, ...] = ()
    """When the applied reconfigurations of the last 24 h were made (s, source clock)."""


@runtime_checkable
class Decider(Protocol):
    """``decide(evaluation, context) -> Decision``. ``path`` names the decider in decisions."""

    path: str

    def decide(self, evaluation, context: DecisionContext) -> Decision: ...
