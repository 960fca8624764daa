"""The control loop's memory: action log, blacklist, last decisions (``StateStore``).

* **Action log.** Every action the loop takes (or, in advisor mode, would take) is recorded
  with its reasons and its *expected outcome* (e.g. ``{"busy_max": 0.7, "backpressure_max": 0.0,
  "throughput": 3000}``). Once the job has settled the loop evaluates it against what is then
  measured and records the outcome: ``helped``, ``did_not_help`` or ``failed`` (the actuator
  refused).
* **Blacklist** keyed by ``(action, operator, diagnosis, load band)``: an action that did not
  help is not repeated for the same diagnosis at a similar load, but — unlike Dhalion's — the
  entry *expires*: after ``base_s`` the first time, doubling per repeated strike up to ``max_s``.
* **Last decisions** and small loop metadata (trust state, last action time) so a restarted
  loop continues where it stopped.

Two implementations of the ``StateStore`` protocol: ``InMemoryStateStore`` and
``SQLiteStateStore`` (one file, survives restarts). Times are the loop's clock in seconds
(epoch seconds of the metrics source).
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Protocol, runtime_checkable

from modeler.errors import AuguryError

OUTCOMES = ("pending", "helped", "did_not_help", "failed", "advised")


class StateError(AuguryError):
    """The state database cannot be opened or is not an augury state database."""

    exit_code = 3


class NotAStateDatabase(StateError):
    """The file named as the state database is not one (missing, empty, not SQLite, or another
    program's database): the wrong file was named, a bad input (exit code 2), not a failure of
    the environment."""

    exit_code = 2


@dataclass(frozen=True)
class BlacklistConfig:
    """How long an action that did not help stays banned."""

    base_s: float = 600.0
    """Ban after the first strike, seconds."""
    max_s: float = 6 * 3600.0
    """Longest ban, seconds (the backoff doubles per strike up to this)."""
    band_ratio: float = 1.5
    """Load bands are geometric: rates r and r' share a band when they are within this ratio
    of the same power (band = floor(log(rate) / log(band_ratio)))."""


def load_band(rate: float, band_ratio: float = 1.5) -> int:
    """The load band of an input rate (tuples/s): floor(log(rate) / log(band_ratio))."""
    if not math.isfinite(rate) or rate <= 1.0:
        return 0
    return int(math.floor(math.log(rate) / math.log(band_ratio)))


@dataclass(frozen=True)
class ActionRecord:
    """One action in the log (times in loop seconds)."""

    at_s: float
    kind: str
    """scale | restart_instance | move_off_host (``operators`` = (host,)) | report_skew | undo."""
    operators: tuple[str, ...]
    diagnosis: str
    """under_provisioned | over_provisioned | slow_instance | data_skew | planned | ..."""
    load_band: int
    from_config: Mapping[str, int]
    to_config: Mapping[str, int]
    reasons: tuple[str, ...]
    expected: Mapping[str, float]
    """What the loop expects once settled: busy_max, backpressure_max, throughput, ..."""
    applied: bool
    advisor: bool = False
    detail: str = ""
    """Target instance, hot key groups, actuator message..."""
    outcome: str = "pending"
    evaluated_at_s: float | None = None
    measured: Mapping[str, float] = field(default_factory=dict)
    id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["operators"] = list(self.operators)
        d["reasons"] = list(self.reasons)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ActionRecord":
        d = dict(d)
        d["operators"] = tuple(d.get("operators", ()))
        d["reasons"] = tuple(d.get("reasons", ()))
        return cls(**d)


@dataclass(frozen=True)
class BlacklistEntry:
    """A banned action: (action, operator, diagnosis, load band) until ``until_s``."""

    action: str
    operator: str
    diagnosis: str
    load_band: int
    until_s: float
    strikes: int = 1
    reason: str = ""

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.action, self.operator, self.diagnosis, self.load_band)


def strike(previous: BlacklistEntry | None, action: str, operator: str, diagnosis: str, band: int,
           now_s: float, reason: str, config: BlacklistConfig) -> BlacklistEntry:
    """The entry after one more strike: ban for base_s * 2**(strikes-1), at most max_s."""
    strikes = (previous.strikes + 1) if previous is not None else 1
    ban = min(config.base_s * 2 ** (strikes - 1), config.max_s)
    return BlacklistEntry(action=action, operator=operator, diagnosis=diagnosis, load_band=band,
                          until_s=now_s + ban, strikes=strikes, reason=reason)


@runtime_checkable
class StateStore(Protocol):
    """Persistent loop state. Raises ``StateError`` on an unusable store."""

    def add_action(self, record: ActionRecord) -> ActionRecord:
        """Append; returns the record with its ``id``."""

    def update_action(self, record: ActionRecord) -> None: ...

    def actions(self, limit: int | None = None) -> list[ActionRecord]:
        """Oldest first; with ``limit``, the newest ``limit``."""

    def put_blacklist(self, entry: BlacklistEntry) -> None: ...

    def blacklist(self) -> list[BlacklistEntry]:
        """Every entry, expired or not (the loop compares ``until_s`` with its clock)."""

    def add_decision(self, at_s: float, decision: Mapping[str, Any]) -> None: ...

    def decisions(self, limit: int | None = None) -> list[dict[str, Any]]: ...

    def put_meta(self, key: str, value: Any) -> None: ...

    def get_meta(self, key: str, default: Any = None) -> Any: ...


def active_ban(store: StateStore, key: tuple[str, str, str, int], now_s: float) -> BlacklistEntry | None:
    """The unexpired blacklist entry for ``key``, if any."""
    for e in store.blacklist():
        if e.key == key and e.until_s > now_s:
            return e
    return None


def find_entry(store: StateStore, key: tuple[str, str, str, int]) -> BlacklistEntry | None:
    for e in store.blacklist():
        if e.key == key:
            return e
    return None


@dataclass
class InMemoryStateStore:
    """Everything in lists and dicts (tests, advisor runs without ``--state``)."""

    max_decisions: int = 1000
    _actions: list[ActionRecord] = field(default_factory=list)
    _blacklist: dict[tuple, BlacklistEntry] = field(default_factory=dict)
    _decisions: list[dict[str, Any]] = field(default_factory=list)
    _meta: dict[str, Any] = field(default_factory=dict)

    def add_action(self, record: ActionRecord) -> ActionRecord:
        record = replace(record, id=len(self._actions) + 1)
        self._actions.append(record)
        return record

    def update_action(self, record: ActionRecord) -> None:
        if record.id is None or not 1 <= record.id <= len(self._actions):
            raise StateError("no such action", field="id", value=record.id)
        self._actions[record.id - 1] = record

    def actions(self, limit: int | None = None) -> list[ActionRecord]:
        return list(self._actions[-limit:] if limit else self._actions)

    def put_blacklist(self, entry: BlacklistEntry) -> None:
        self._blacklist[entry.key] = entry

    def blacklist(self) -> list[BlacklistEntry]:
        return list(self._blacklist.values())

    def add_decision(self, at_s: float, decision: Mapping[str, Any]) -> None:
        self._decisions.append({"at_s": at_s, **json.loads(json.dumps(decision, default=str))})
        del self._decisions[:-self.max_decisions]

    def decisions(self, limit: int | None = None) -> list[dict[str, Any]]:
        return list(self._decisions[-limit:] if limit else self._decisions)

    def put_meta(self, key: str, value: Any) -> None:
        self._meta[key] = json.loads(json.dumps(value))

    def get_meta(self, key: str, default: Any = None) -> Any:
        return self._meta.get(key, default)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS augury_state (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS actions (id INTEGER PRIMARY KEY AUTOINCREMENT, at_s REAL NOT NULL,
    kind TEXT NOT NULL, outcome TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blacklist (action TEXT NOT NULL, operator TEXT NOT NULL,
    diagnosis TEXT NOT NULL, load_band INTEGER NOT NULL, until_s REAL NOT NULL,
    strikes INTEGER NOT NULL, reason TEXT NOT NULL,
    PRIMARY KEY (action, operator, diagnosis, load_band));
CREATE TABLE IF NOT EXISTS decisions (id INTEGER PRIMARY KEY AUTOINCREMENT, at_s REAL NOT NULL,
    body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
STATE_VERSION = 1


class SQLiteStateStore:
    """One SQLite file; every write is its own transaction, so a killed loop loses nothing
    it has reported. ``max_decisions`` bounds the decisions table."""

    def __init__(self, path: str | Path, max_decisions: int = 10_000) -> None:
        self.path = str(path)
        self.max_decisions = max_decisions
        try:
            self._db = sqlite3.connect(self.path)
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT version FROM augury_state").fetchone()
            if row is None:
                self._db.execute("INSERT INTO augury_state VALUES (?)", (STATE_VERSION,))
                self._db.commit()
            elif row[0] != STATE_VERSION:
                raise StateError(f"state version {row[0]} is not {STATE_VERSION}", file=self.path,
                                 field="version", value=row[0])
        except sqlite3.DatabaseError as err:
            raise StateError(f"not a usable state database ({err})", file=self.path) from None

    @classmethod
    def open_existing(cls, path: str | Path) -> "SQLiteStateStore":
        """Open for reading (never creates one); a missing, empty or foreign file is
        ``NotAStateDatabase`` (exit 2), a database that cannot be read a ``StateError`` (exit 3)."""
        if not Path(path).is_file():
            raise NotAStateDatabase("no such state database", file=str(path))
        # Read-only look first: an empty file or another SQLite database is refused, not given
        # augury's schema (opening for reading never writes).
        try:
            probe = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
            try:
                found = probe.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                      "name = 'augury_state'").fetchone()
            finally:
                probe.close()
        except sqlite3.DatabaseError as err:
            kind = NotAStateDatabase if getattr(err, "sqlite_errorname", "") == "SQLITE_NOTADB" else StateError
            raise kind(f"not a usable state database ({err})", file=str(path)) from None
        if found is None:
            raise NotAStateDatabase("not an augury state database (empty, or written by something else)",
                                    file=str(path))
        return cls(path)

    def close(self) -> None:
        self._db.close()

    def _write(self, sql: str, args: tuple) -> sqlite3.Cursor:
        with self._db:
            return self._db.execute(sql, args)

    def add_action(self, record: ActionRecord) -> ActionRecord:
        body = json.dumps({**record.to_dict(), "id": None})
        cur = self._write("INSERT INTO actions (at_s, kind, outcome, body) VALUES (?, ?, ?, ?)",
                          (record.at_s, record.kind, record.outcome, body))
        return replace(record, id=int(cur.lastrowid))

    def update_action(self, record: ActionRecord) -> None:
        cur = self._write("UPDATE actions SET outcome = ?, body = ? WHERE id = ?",
                          (record.outcome, json.dumps(record.to_dict()), record.id))
        if cur.rowcount != 1:
            raise StateError("no such action", file=self.path, field="id", value=record.id)

    def actions(self, limit: int | None = None) -> list[ActionRecord]:
        rows = self._db.execute("SELECT id, body FROM actions ORDER BY id").fetchall()
        if limit:
            rows = rows[-limit:]
        return [ActionRecord.from_dict({**json.loads(body), "id": int(i)}) for i, body in rows]

    def put_blacklist(self, entry: BlacklistEntry) -> None:
        self._write("INSERT OR REPLACE INTO blacklist VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (entry.action, entry.operator, entry.diagnosis, entry.load_band, entry.until_s,
                     entry.strikes, entry.reason))

    def blacklist(self) -> list[BlacklistEntry]:
        rows = self._db.execute("SELECT action, operator, diagnosis, load_band, until_s, strikes, reason "
                                "FROM blacklist ORDER BY until_s").fetchall()
        return [BlacklistEntry(*r) for r in rows]

    def add_decision(self, at_s: float, decision: Mapping[str, Any]) -> None:
        with self._db:
            self._db.execute("INSERT INTO decisions (at_s, body) VALUES (?, ?)",
                             (at_s, json.dumps(decision, default=str)))
            self._db.execute("DELETE FROM decisions WHERE id <= (SELECT MAX(id) FROM decisions) - ?",
                             (self.max_decisions,))

    def decisions(self, limit: int | None = None) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT at_s, body FROM decisions ORDER BY id").fetchall()
        if limit:
            rows = rows[-limit:]
        return [{"at_s": at, **json.loads(body)} for at, body in rows]

    def put_meta(self, key: str, value: Any) -> None:
        self._write("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default
