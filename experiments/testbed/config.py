"""The testbed's own configuration: how the simulated engine differs from the model's assumptions.

The model file gives each operator's mean service time and its SCV; ``TestbedConfig`` chooses the
distribution family, queue sizes, network delay, selectivity and shuffle behaviour, restart times
and contention. Times in ms unless a name ends in ``_s``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import pandas as pd

from experiments.testbed.errors import TestbedError
from modeler.limits import (MAX_BUFFER_TUPLES, MAX_DURATION_S, MAX_KEYS, MAX_MODEL_NUMBER, MAX_PARALLELISM,
                            MAX_QUEUE, check_number)

SERVICE_DISTRIBUTIONS = ("auto", "exponential", "gamma", "lognormal", "deterministic", "bimodal")
DELAY_DISTRIBUTIONS = ("deterministic", "exponential", "gamma", "lognormal")
SELECTIVITY_DISTRIBUTIONS = ("auto", "poisson", "bernoulli", "deterministic")
SHUFFLES = ("round_robin", "random")
RESTART_SCOPES = ("operator", "job")


@dataclass(frozen=True)
class OperatorOverride:
    """Per-operator settings that win over the model file and ``TestbedConfig`` (None = keep)."""

    service_distribution: str | None = None
    """One of ``SERVICE_DISTRIBUTIONS``."""
    service_time_ms: float | None = None
    """Mean service time per tuple, ms (the truth the model should recover)."""
    service_scv: float | None = None
    """Squared coefficient of variation of the service time."""
    contention_overhead: float | None = None
    """Extra relative service-time growth per extra instance (on top of the model's scaling)."""
    queue_capacity: int | None = None
    """Input queue capacity of each instance, tuples."""


@dataclass(frozen=True)
class TestbedConfig:
    """How the testbed simulates a job. Every field has a default."""

    __test__ = False  # not a pytest test class despite the name

    seed: int = 0
    """Seed of every random stream (same seed, same metrics)."""
    window_s: float = 10.0
    """Metrics window, s."""
    start_time: str = "2026-01-01T00:00:00Z"
    """Wall-clock (UTC) time of simulated time 0: ``ts`` of the first window."""
    queue_capacity: int = 1000
    """Input queue capacity per instance, tuples (credits of Flink's credit-based flow control)."""
    service_distribution: str = "auto"
    """Service-time family: auto (exponential when SCV = 1, deterministic when SCV = 0, else gamma
    matching mean and SCV), exponential (SCV 1 whatever the model says), gamma, lognormal,
    deterministic, bimodal (two values, ``bimodal_slow_fraction`` of tuples slow, mean and SCV
    matched)."""
    bimodal_slow_fraction: float = 0.1
    """Fraction of tuples taking the slow mode of the bimodal distribution (0 < f < 1)."""
    selectivity_distribution: str = "auto"
    """Per-tuple output count on an edge of mean s: auto = Bernoulli(s) when s <= 1, Poisson(s)
    when s > 1; poisson; bernoulli (floor(s) + Bernoulli(s - floor(s)), least variance);
    deterministic (round(s), only for integer s)."""
    shuffle: str = "round_robin"
    """Shuffle edges: round_robin per upstream instance (engines) or random (Jackson's split)."""
    network_delay_ms: float | None = None
    """Mean per-hop network delay, ms; None = the model file's ``network_delay_ms``."""
    network_delay_distribution: str = "deterministic"
    """deterministic | exponential | gamma | lognormal (the last two with ``network_delay_scv``)."""
    network_delay_scv: float = 1.0
    """SCV of the network delay (gamma, lognormal)."""
    buffer_timeout_ms: float | None = None
    """Output buffer flush timeout, ms; None = the model file's ``buffer_timeout_ms`` (0 = off)."""
    buffer_records: int | None = None
    """Tuples per output buffer (flush when full); None = the model file's ``buffer_records``."""
    contention_overhead: float = 0.0
    """Testbed-only extra relative service-time growth per extra instance, on top of the model's
    ``scaling``: E[S](p) = E[S] * scaling.factor_at(p) * (1 + contention_overhead * (p - 1))."""
    restart_s: float = 10.0
    """Downtime of a reconfiguration, s (the restarted operators process nothing meanwhile), for a
    model file without a restart model; with one (``state_mb``, ``restart_base_s``,
    ``restore_mb_per_s``) the downtime is ``modeler.restart.restart_time_s`` of the change and
    this is its base when the model file gives no ``restart_base_s``."""
    restart_scope: str = "operator"
    """operator (only rescaled operators restart) or job (every operator restarts, as Flink does)."""
    many_keys: int = 1 << 20
    """Key ids drawn uniformly for key edges with 'many uniform keys' (count unset)."""
    max_backlog: int = 1 << 25
    """Largest external backlog per source instance, tuples (memory guard)."""
    hosts: int | None = None
    """Hosts the instances run on (numbered 0..hosts-1; placement: ``experiments.testbed.hosts``).
    None = one implicit host: the testbed without hosts, bit for bit (no ``host`` column, and
    host faults are refused). With hosts every per-instance metric row names its host."""
    hosts_per_rack: int | None = None
    """Hosts per rack (host h is on rack h // hosts_per_rack); None = every host on rack 0.
    Needs ``hosts``."""
    operators: Mapping[str, OperatorOverride] = field(default_factory=dict)
    """Per-operator overrides by operator name."""

    # ------------------------------------------------------------------ checks
    def validate(self, model=None) -> "TestbedConfig":
        """Raise ``TestbedError`` naming the field and value of the first problem."""
        def bad(msg: str, fld: str, value) -> TestbedError:
            return TestbedError(msg, field=fld, value=value)

        def number(fld: str, value, *, positive=False, integer=False, allow_none=False,
                   maximum: float = MAX_MODEL_NUMBER):
            """>= 0 (> 0 when ``positive``), finite, at most ``maximum`` (``modeler.limits``:
            the one check for numbers, which compares a 400-digit integer as an integer)."""
            if value is None and allow_none:
                return
            if isinstance(value, (str, bool)) or not isinstance(value, (int, float)):
                raise bad("must be a number", fld, value)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise bad("must be >= 0 (negative times and sizes are invalid)", fld, value)
            checked = check_number(value, fld, minimum=0, maximum=maximum, integer=integer, error=TestbedError)
            if positive and checked <= 0:
                raise bad("must be > 0", fld, value)

        if isinstance(self.seed, float):  # numpy seeds with an int
            raise bad("must be an integer >= 0", "seed", self.seed)
        number("seed", self.seed, integer=True, maximum=2**63 - 1)
        number("window_s", self.window_s, positive=True, maximum=MAX_DURATION_S)
        number("queue_capacity", self.queue_capacity, positive=True, integer=True, maximum=MAX_QUEUE)
        number("restart_s", self.restart_s, maximum=MAX_DURATION_S)
        number("contention_overhead", self.contention_overhead)
        number("network_delay_ms", self.network_delay_ms, allow_none=True)
        number("network_delay_scv", self.network_delay_scv)
        number("buffer_timeout_ms", self.buffer_timeout_ms, allow_none=True)
        number("buffer_records", self.buffer_records, positive=True, integer=True, allow_none=True,
               maximum=MAX_BUFFER_TUPLES)
        number("many_keys", self.many_keys, positive=True, integer=True, maximum=MAX_KEYS)
        number("max_backlog", self.max_backlog, positive=True, integer=True, maximum=MAX_QUEUE)
        # a host per slot at most is the placement's useful range; more hosts stay empty
        number("hosts", self.hosts, positive=True, integer=True, allow_none=True, maximum=MAX_PARALLELISM)
        number("hosts_per_rack", self.hosts_per_rack, positive=True, integer=True, allow_none=True,
               maximum=MAX_PARALLELISM)
        if self.hosts_per_rack is not None and self.hosts is None:
            raise bad("needs hosts (racks group hosts)", "hosts_per_rack", self.hosts_per_rack)
        frac = self.bimodal_slow_fraction
        if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 < frac < 1:
            raise bad("must be within (0, 1)", "bimodal_slow_fraction", self.bimodal_slow_fraction)
        for fld, value, allowed in (
            ("service_distribution", self.service_distribution, SERVICE_DISTRIBUTIONS),
            ("network_delay_distribution", self.network_delay_distribution, DELAY_DISTRIBUTIONS),
            ("selectivity_distribution", self.selectivity_distribution, SELECTIVITY_DISTRIBUTIONS),
            ("shuffle", self.shuffle, SHUFFLES),
            ("restart_scope", self.restart_scope, RESTART_SCOPES),
        ):
            if value not in allowed:
                raise bad(f"unknown value (known: {', '.join(allowed)})", fld, value)
        try:
            start = pd.Timestamp(self.start_time)
        except (ValueError, TypeError, OverflowError):
            raise bad("not a timestamp", "start_time", self.start_time) from None
        if start is pd.NaT:
            raise bad("not a timestamp", "start_time", self.start_time)
        names = set(model.operator_names) if model is not None else None
        for name, ov in self.operators.items():
            where = f"operators.{name}"
            if names is not None and name not in names:
                raise bad(f"unknown operator (known: {', '.join(sorted(names))})", "operators", name)
            if not isinstance(ov, OperatorOverride):
                raise bad("must be an OperatorOverride", where, ov)
            if ov.service_distribution is not None and ov.service_distribution not in SERVICE_DISTRIBUTIONS:
                raise bad(f"unknown value (known: {', '.join(SERVICE_DISTRIBUTIONS)})",
                          f"{where}.service_distribution", ov.service_distribution)
            number(f"{where}.service_time_ms", ov.service_time_ms, positive=True, allow_none=True)
            number(f"{where}.service_scv", ov.service_scv, allow_none=True)
            number(f"{where}.contention_overhead", ov.contention_overhead, allow_none=True)
            number(f"{where}.queue_capacity", ov.queue_capacity, positive=True, integer=True,
                   allow_none=True, maximum=MAX_QUEUE)
        return self

    @property
    def start_ts(self) -> pd.Timestamp:
        ts = pd.Timestamp(self.start_time)
        return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")

    def override(self, operator: str) -> OperatorOverride:
        return self.operators.get(operator) or OperatorOverride()


def parse_testbed_config(data, source: str | None = None, model=None, **overrides) -> TestbedConfig:
    """A ``TestbedConfig`` from a mapping of its fields (``operators``: {name: {OperatorOverride
    fields}}), then ``overrides`` (command-line flags win over the file), validated (against
    ``model``'s operator names when given). Unknown keys and bad values raise ``TestbedError``
    naming the file, the field and the value."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise TestbedError("must be a mapping of testbed settings", file=source, field="settings",
                           value=type(data).__name__)
    known = {f.name for f in dataclasses.fields(TestbedConfig)}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            raise TestbedError(f"unknown setting (known: {', '.join(sorted(known))})", file=source,
                               field=str(key), value=value)
        kwargs[key] = value
    operators = kwargs.pop("operators", None) or {}
    if not isinstance(operators, Mapping):
        raise TestbedError("must be a mapping of operator name to settings", file=source,
                           field="operators", value=operators)
    op_fields = {f.name for f in dataclasses.fields(OperatorOverride)}
    parsed = {}
    for name, ov in operators.items():
        if not isinstance(ov, Mapping):
            raise TestbedError("must be a mapping of operator settings", file=source,
                               field=f"operators.{name}", value=ov)
        for key in ov:
            if key not in op_fields:
                raise TestbedError(f"unknown operator setting (known: {', '.join(sorted(op_fields))})",
                                   file=source, field=f"operators.{name}.{key}", value=ov[key])
        parsed[str(name)] = OperatorOverride(**ov)
    config = TestbedConfig(**{**kwargs, **overrides}, operators=parsed)
    if not isinstance(config.start_time, str):  # YAML reads an unquoted timestamp as a datetime
        config = dataclasses.replace(config, start_time=str(config.start_time))
    try:
        return config.validate(model)
    except TestbedError as err:
        raise err.with_file(source) if source is not None else err


def read_document(path: str | Path, kind: str):
    """The parsed content of a YAML or JSON file (JSON when it starts with ``{`` or ends in
    ``.json``); ``kind`` names the file in errors ("fault file", "settings file"). Parsed by
    ``modeler.documents`` (the one document reader: deep nesting, huge integers refused there)."""
    from modeler.documents import parse_document

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise TestbedError(f"cannot read {kind}: {err.strerror}", file=str(path)) from None
    except UnicodeDecodeError:
        raise TestbedError(f"{kind} is not UTF-8 text", file=str(path)) from None
    fmt = "json" if text.lstrip().startswith("{") or path.suffix == ".json" else "yaml"
    return parse_document(text, fmt, kind, TestbedError, str(path))


def load_testbed_config(path: str | Path, model=None, **overrides) -> TestbedConfig:
    """Read a testbed settings file (YAML or JSON; ``TestbedConfig`` fields) and validate it
    (against ``model`` when given)."""
    return parse_testbed_config(read_document(path, "settings file"), str(path), model, **overrides)
