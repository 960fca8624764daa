"""The side-effect boundaries of the decision loop: where metrics come from, where changes go.

Every implementation (the testbed, Flink REST, the in-memory doubles below) satisfies one of these
small protocols, and one contract test (``tests/scheduler/test_interfaces.py``) runs against all
of them.

Metric rows use the normalized raw schema of ``history`` (see ``docs/history.md``):
``ts`` (window start, UTC, pandas Timestamp or ISO string), ``window_s``, ``job``, ``operator``,
``instance``, ``metric``, ``value``, ``target``. Counts are per window; times in ms. A row may
carry one more field, ``host`` (``OPTIONAL_COLUMNS``: where the instance ran, a TaskManager or
node name; None on rows that are not one instance's): sources that know placement (the testbed
with hosts) send 9-field rows, the others (Flink's REST source, the in-memory one) 8-field rows,
and both are valid. The host is what lets the reactive policy tell a slow or lost host from a
slow instance (``scheduler.reactive``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence, runtime_checkable

from modeler.errors import AuguryError

RAW_COLUMNS = ("ts", "window_s", "job", "operator", "instance", "metric", "value", "target")
OPTIONAL_COLUMNS = ("host",)
"""Fields a row may carry after ``RAW_COLUMNS``, in this order (a row has 8 or 9 fields)."""
ROW_COLUMNS = RAW_COLUMNS + OPTIONAL_COLUMNS
"""Every field a row may have: ``RAW_COLUMNS`` then ``OPTIONAL_COLUMNS``."""


class MetricsUnavailable(AuguryError):
    """The metrics source could not deliver a complete batch (down, timed out, partial)."""

    exit_code = 3


class ActuationFailed(AuguryError):
    """The engine refused or failed to apply a configuration."""

    exit_code = 3


@dataclass(frozen=True)
class MetricsBatch:
    """Complete metric windows read from a source.

    ``rows``: tuples in ``RAW_COLUMNS`` order, covering windows that ended strictly after the
    ``since`` the caller asked for and no later than ``as_of_s``. ``config`` is the parallelism in
    force while the windows were measured.
    """

    as_of_s: float
    """Source clock at the end of the newest complete window, seconds."""
    rows: tuple[tuple, ...]
    config: Mapping[str, int]
    window_s: float = 10.0

    def to_frame(self):
        """The rows as a frame: ``RAW_COLUMNS``, plus ``host`` when some row carries it (None
        for the 8-field rows beside them)."""
        import pandas as pd

        if not any(len(r) > len(RAW_COLUMNS) for r in self.rows):
            return pd.DataFrame(list(self.rows), columns=list(RAW_COLUMNS))
        return pd.DataFrame([tuple(r) + (None,) * (len(ROW_COLUMNS) - len(r)) for r in self.rows],
                            columns=list(ROW_COLUMNS))


@dataclass(frozen=True)
class Actuation:
    """What an actuator did."""

    applied: bool
    config: Mapping[str, int]
    """The parallelism requested."""
    restart_s: float | None = None
    """Measured (or simulated) time until the new parallelism ran, seconds."""
    detail: str = ""


@runtime_checkable
class MetricsSource(Protocol):
    """Delivers complete metric windows. Raises ``MetricsUnavailable``; never returns partial data."""

    def read(self, since_s: float | None = None) -> MetricsBatch: ...


@runtime_checkable
class Actuator(Protocol):
    """Reads and changes a job's parallelism. Raises ``ActuationFailed``."""

    def current(self) -> dict[str, int]: ...

    def apply(self, config: Mapping[str, int], reason: str = "") -> Actuation: ...


# ------------------------------------------------------------- in-memory doubles


@dataclass
class InMemoryMetricsSource:
    """Serves batches pushed into it, oldest first; raises when empty (a source that is down)."""

    batches: list[MetricsBatch] = field(default_factory=list)

    def push(self, batch: MetricsBatch) -> None:
        self.batches.append(batch)

    def read(self, since_s: float | None = None) -> MetricsBatch:
        for batch in self.batches:
            if since_s is None or batch.as_of_s > since_s:
                rows = tuple(r for r in batch.rows if since_s is None or _row_end_s(r) > since_s)
                return MetricsBatch(as_of_s=batch.as_of_s, rows=rows, config=batch.config,
                                    window_s=batch.window_s)
        raise MetricsUnavailable("no metric windows newer than the last read", value=since_s)


def _row_end_s(row: Sequence) -> float:
    import pandas as pd

    ts = pd.Timestamp(row[0])
    if ts.tzinfo is None:
        ts = ts.tz_localize("UTC")
    return ts.timestamp() + float(row[1])


@dataclass
class InMemoryActuator:
    """Holds a configuration and records every change (the dry-run/advisor double). It can also
    move instances off a host (``scheduler.loop.HostMover``): it records the host in
    ``avoided_hosts`` and keeps the configuration."""

    config: dict[str, int]
    history: list[Actuation] = field(default_factory=list)
    avoided_hosts: list[str] = field(default_factory=list)
    """Hosts ``move_off_host`` was asked to leave, in order (no host twice)."""

    def current(self) -> dict[str, int]:
        return dict(self.config)

    def apply(self, config: Mapping[str, int], reason: str = "") -> Actuation:
        unknown = sorted(set(config) - set(self.config))
        if unknown:
            raise ActuationFailed("unknown operator", field="config", value=unknown[0])
        self.config.update({k: int(v) for k, v in config.items()})
        result = Actuation(applied=True, config=dict(self.config), restart_s=0.0, detail=reason)
        self.history.append(result)
        return result

    def move_off_host(self, host: str, reason: str = "") -> Actuation:
        """Leave ``host`` (a ``host`` name as metric rows carry it): recorded, nothing to restart
        here. A host already avoided is no change (``applied`` False)."""
        if not isinstance(host, str) or not host:
            raise ActuationFailed("a host name is needed", field="host", value=host)
        if host in self.avoided_hosts:
            result = Actuation(applied=False, config=dict(self.config), restart_s=0.0,
                               detail=f"{host} is already avoided")
        else:
            self.avoided_hosts.append(host)
            result = Actuation(applied=True, config=dict(self.config), restart_s=0.0,
                               detail=f"moved off {host}" + (f": {reason}" if reason else ""))
        self.history.append(result)
        return result
