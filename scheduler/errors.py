"""Errors of the scheduler package.

Every user-caused error is an ``modeler.errors.AuguryError`` naming the file, field and value.
``InfeasiblePlan`` is the one *negative answer* among them: nothing is wrong with the input, there
is just no configuration that meets the targets (exit code 1, like ``augury plan`` itself).
"""

from __future__ import annotations

from typing import Any, Sequence

from modeler.errors import AuguryError


class SchedulerError(AuguryError):
    """Bad input to a scheduler function (rate, target, SLO, series, sweep...): exit code 2."""


class InfeasiblePlan(AuguryError):
    """No configuration within the bounds meets the targets. ``reasons`` say why."""

    exit_code = 1

    def __init__(self, message: str, *, reasons: Sequence[str] = (), plan: Any = None,
                 file: str | None = None, field: str | None = None, value: Any = None) -> None:
        self.reasons = tuple(reasons)
        self.plan = plan
        super().__init__(message, file=file, field=field, value=value)


class ProposalError(SchedulerError):
    """A proposal file (vertex -> parallelism) cannot be read."""
