"""What "good enough" means for every decision: one frozen ``Targets`` value.

``plan``, ``validate``, ``whatif``, ``schedule``, the control loop's deciders and the reactive
policy all take the same ``Targets``; its field defaults are the only place the default
utilization target, latency statistic and backlog catch-up time are written down. A ``Targets``
is validated when it is built (``SchedulerError`` naming the field and the value), so a value
that exists is a valid one.

Units: utilization is a fraction of one instance's capacity, latency in ms, times in s,
``headroom`` a fraction of the input rate.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from scheduler.errors import SchedulerError

if TYPE_CHECKING:  # pandas only for the what-if table helper
    import pandas as pd

UTILIZATION_TARGET = 0.7
"""The utilization target without a latency SLO: the hottest instance at most 70 % busy (the
Flink autoscaler's default target; leaves room for load noise and a backlog to drain)."""
SLO_UTILIZATION_CEILING = 0.9
"""The utilization ceiling with a latency SLO: the SLO decides how hot an operator may run, the
ceiling only keeps a hottest instance out of saturation's last 10 % (at 0.9 a 11 % load rise
saturates it; the forecast's upper quantile and ``headroom`` cover the load error, this covers
the model's error near saturation, where it over-predicts latency: ``docs/RESULTS.md``,
accuracy at 0.85-0.95 of the max rate)."""

LATENCY_STATS = ("mean", "p95", "p99")
"""The latency statistics a latency SLO can bound (``modeler.queueing.LATENCY_STATS``)."""


def _number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


@dataclass(frozen=True)
class Targets:
    """The targets a configuration must meet. Validated on construction."""

    utilization_target: float | None = None
    """Highest utilization of the hottest instance, in (0, 1]: what plans size for and what
    the reactive policy's DS2 sizing aims at. None (the default) = ``SLO_UTILIZATION_CEILING``
    (0.9) when a latency SLO is given, ``UTILIZATION_TARGET`` (0.7) when none is: with an SLO
    the plan is the cheapest configuration whose predicted latency meets it and the utilization
    is only a safety ceiling; without one, utilization is all there is to size by."""
    latency_slo_ms: float | None = None
    """Bound on the end-to-end ``latency_stat``, ms; None = no latency SLO."""
    latency_stat: str = "p99"
    """``mean``, ``p95`` or ``p99``: the statistic the SLO bounds (and the planner's tie-break)."""
    headroom: float = 0.0
    """Plan for ``rate x (1 + headroom)`` (a fraction >= 0): a margin on the load for forecast
    error or measurement noise, on top of the utilization target."""
    catch_up_s: float = 300.0
    """A backlog (external lag at the sources) is drained within this many seconds (s): both the
    model and the reactive sizing add ``backlog / catch_up_s`` to the input rate while one is
    left."""

    def __post_init__(self) -> None:
        if self.utilization_target is None:
            chosen = SLO_UTILIZATION_CEILING if self.latency_slo_ms is not None else UTILIZATION_TARGET
            object.__setattr__(self, "utilization_target", chosen)
        u = self.utilization_target
        if not _number(u) or not 0 < u <= 1:
            raise SchedulerError("must be a number in (0, 1]", field="utilization_target", value=u)
        slo = self.latency_slo_ms
        if slo is not None and (not _number(slo) or slo <= 0):
            raise SchedulerError("must be a finite number > 0", field="latency_slo_ms", value=slo)
        if self.latency_stat not in LATENCY_STATS:
            raise SchedulerError(f"must be one of {', '.join(LATENCY_STATS)}", field="latency_stat",
                                 value=self.latency_stat)
        if not _number(self.headroom) or not 0 <= self.headroom <= 100:
            raise SchedulerError("must be a number in [0, 100]", field="headroom", value=self.headroom)
        if not _number(self.catch_up_s) or self.catch_up_s <= 0:
            raise SchedulerError("must be a finite number > 0", field="catch_up_s", value=self.catch_up_s)

    def check(self) -> None:
        """Nothing to do: a ``Targets`` is checked when it is built (kept for callers that call
        ``check()`` on every config)."""

    @property
    def latency_column(self) -> str:
        """The what-if table's column of ``latency_stat``."""
        return f"latency_{self.latency_stat}_ms"

    def planned_rate(self, rate: float) -> float:
        """The rate a plan sizes for: ``rate x (1 + headroom)``."""
        return float(rate) * (1.0 + self.headroom)

    def meets(self, table: "pd.DataFrame") -> "pd.Series":
        """Rows of a what-if table that meet the utilization target and the SLO."""
        ok = (~table["saturated"]) & (table["max_utilization"] <= self.utilization_target)
        if self.latency_slo_ms is not None:
            ok &= table[self.latency_column] <= self.latency_slo_ms  # NaN compares False
        return ok

    def to_dict(self) -> dict:
        return asdict(self)


DEFAULT_TARGETS = Targets()
"""The defaults, for signatures that need a value."""
