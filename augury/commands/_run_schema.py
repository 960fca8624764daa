"""The schema of ``augury run --config FILE.toml``: one table for the docs and the checks.

``SCHEMA`` says which TOML section feeds which frozen config dataclass (and which of its keys, and
under which TOML names); ``HAND_READ`` lists the keys ``augury/commands/run.py`` reads itself
(``[job]``, the testbed's ``[metrics]``, ``[actuator] kind`` ...). From them:

* ``field_rows()`` / ``render_markdown()``: the reference page ``docs/run-config.md``, read from
  the dataclasses themselves (type from the annotation, default from the field, meaning from the
  attribute docstring under the field, unit from the name or the docstring, range from the
  checks below). ``python -m augury.commands._run_schema --write docs/run-config.md`` writes it,
  ``--check`` exits 1 when the committed page differs.
* ``coerce(cls, raw, path, section, renames)``: every key of one section checked (unknown key,
  wrong type, out of range, a few cross-field rules) before the dataclass is built; each error is
  a ``UsageError`` (exit 2) naming the file, ``section.key`` and the value.
* ``build(cls, raw, path, section, rename=None)``: ``coerce`` then construct, a drop-in for
  ``run._dataclass_from`` (same arguments); the dataclass's own validation errors
  (``SchedulerError`` / ``AuguryError`` with ``.field``) come back as ``UsageError`` with the
  section prefix.
* ``split_section(section, raw, path, context)``: one section's keys divided among its
  ``Part`` s and the hand-read keys; an unknown key names every key the section knows.

Ranges come from the field's metadata when it has one (``field(default=..., metadata={"range":
"(0, 1]"})``: a plain string, so ``scheduler`` never imports the command line), otherwise from
``RANGES`` below, which must name every numeric field of every dataclass in ``SCHEMA`` (a test
checks). They mirror the dataclasses' own ``__post_init__`` / ``check()`` and what ``run.py``
checked after construction, and add the bounds the code silently relies on (``band_ratio > 1``:
it divides by ``log(band_ratio)``; ``trend_windows >= 3``: ``queue_trend`` needs three windows).

**Adding a config dataclass** (e.g. a trace-replay ``[metrics]`` mode or a ``[learn]`` section):
append a ``Part`` to ``SCHEMA`` (``when`` says under which ``[decider] kind`` / ``[metrics]
source`` / ``[actuator] kind`` it applies; a new mode, e.g. "``[metrics]`` has ``trace``", is one
more entry in ``CONTEXT``; a new section is appended to the page after ``SECTION_ORDER``), add its
numeric fields to ``RANGES`` (or ``metadata={"range": ...}`` on the fields), its string choices to
``CHOICES``, give hand-read keys that only apply in another mode a ``when``, then rewrite the page.
``tests/augury/test_run_schema.py`` then checks every ``examples/run-*.toml`` against it. Importing
this module is cheap (``augury.errors`` and the standard library): the dataclasses are imported on
first use (``Part.cls``).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import math
import re
import sys
import textwrap
import types
import typing
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from augury.errors import AuguryError, UsageError

__all__ = ["CHOICES", "CONTEXT", "CROSS_CHECKS", "Cross", "HAND_READ", "HandKey", "Part", "RANGES", "Range",
           "Row", "SCHEMA", "SECTION_ORDER", "attribute_docs", "build", "coerce", "context_of", "field_rows",
           "main", "parts", "range_of", "render_markdown", "split_section", "type_text", "unit_of"]


# ------------------------------------------------------------------ the table


@dataclass(frozen=True)
class Part:
    """One TOML section (or part of one) that is one config dataclass."""

    section: str
    """The TOML section, e.g. ``slo``."""
    target: str
    """The dataclass, ``module.Class`` (imported on first use)."""
    rename: tuple[tuple[str, str], ...] = ()
    """``(TOML key, field name)`` pairs where they differ."""
    keys: tuple[str, ...] | None = None
    """The TOML keys of the section that go to this dataclass; None = every field."""
    when: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``(setting, values)``: applies only when each setting (``context_of``: ``decider``,
    ``source``, ``actuator``) has one of the values."""
    note: str = ""
    """One line for the docs page."""
    defaults: tuple[tuple[str, str], ...] = ()
    """``(TOML key, text)``: a default ``run.py`` supplies instead of the field's."""

    @property
    def cls(self) -> type:
        module, _, name = self.target.rpartition(".")
        return getattr(importlib.import_module(module), name)

    @property
    def renames(self) -> dict[str, str]:
        return dict(self.rename)

    @property
    def class_name(self) -> str:
        return self.target.rpartition(".")[2]

    def toml_keys(self) -> tuple[str, ...]:
        """The TOML keys of this part, in field order."""
        back = {f: k for k, f in self.rename}
        names = tuple(back.get(f.name, f.name) for f in fields(self.cls))
        return names if self.keys is None else tuple(k for k in names if k in self.keys)

    def field_name(self, key: str) -> str:
        return self.renames.get(key, key)

    def applies(self, context: Mapping[str, str] | None) -> bool:
        """Does this part apply under ``context`` (None: every part applies)?"""
        return _applies(self.when, context)

    def when_text(self) -> str:
        return _when_text(self.when)


def _when_text(when: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    names = {"decider": "[decider] kind", "source": "[metrics] source", "actuator": "[actuator] kind"}
    loads = {("trace",): "[metrics] trace given", ("rate",): "no [metrics] trace"}
    return ", ".join(loads[values] if s == "load" else f"{names.get(s, s)} = "
                     + " or ".join(f'"{v}"' for v in values) for s, values in when)


def _applies(when: tuple[tuple[str, tuple[str, ...]], ...], context: Mapping[str, str] | None) -> bool:
    return context is None or all(context.get(setting, _UNSTATED.get(setting)) in values for setting, values in when)


_UNSTATED = {"load": "rate"}
"""A setting a context may leave out, and what it then means (no ``trace``: a rate or steps)."""


_PREEMPTIVE = (("decider", ("preemptive",)),)
_NOT_PREEMPTIVE = (("decider", ("model", "reactive")),)
_FLINK = (("source", ("flink",)),)
_TESTBED = (("source", ("testbed",)),)
_TESTBED_RATE = (("source", ("testbed",)), ("load", ("rate",)))
_TRACE = (("source", ("testbed",)), ("load", ("trace",)))

SCHEMA: tuple[Part, ...] = (
    Part("slo", "scheduler.targets.Targets", rename=(("latency_ms", "latency_slo_ms"),),
         keys=("utilization_target", "latency_ms", "latency_stat", "headroom"),
         defaults=(("utilization_target", "`0.9` with `latency_ms` (a ceiling: the SLO sizes), else `0.7`"),),
         note="one value for every decider (`catch_up_s` is under [intervals])"),
    Part("slo", "scheduler.deciders.ModelDeciderConfig",
         keys=("utilization_band", "scale_down_saving", "catch_up_utilization"),
         note="when the model decider acts"),
    Part("intervals", "scheduler.loop.LoopConfig", keys=("interval_s", "evaluate_after_s", "history_windows")),
    Part("intervals", "scheduler.targets.Targets", keys=("catch_up_s",)),
    Part("intervals", "scheduler.deciders.ModelDeciderConfig", keys=("confirm_windows",)),
    Part("guard", "scheduler.guard.GuardRails"),
    Part("trust", "scheduler.trust.TrustConfig"),
    Part("reactive", "scheduler.reactive.ReactiveConfig"),
    Part("reactive", "scheduler.targets.Targets", keys=("utilization_target", "catch_up_s"),
         note="older spellings of `slo.utilization_target` and `intervals.catch_up_s`: the same one "
              "target (given in both places, the values must agree)"),
    Part("blacklist", "scheduler.state.BlacklistConfig"),
    Part("forecast", "scheduler.deciders.PreemptiveConfig", when=_PREEMPTIVE,
         note="the pre-emptive decider: forecast -> schedule, the model decider as the floor"),
    Part("forecast", "scheduler.forecasting.LoadForecastConfig", when=_NOT_PREEMPTIVE,
         note="optional: on the trusted path size for max(offered, forecast)"),
    Part("metrics", "scheduler.flink.FlinkMetricsConfig", when=_FLINK,
         defaults=(("window_s", "`intervals.interval_s`"),), note="the live Flink source, over REST"),
    Part("actuator", "scheduler.flink.LiveActuatorConfig", when=(("actuator", ("flink-rest",)),),
         note="the live Flink rescale (adaptive scheduler)"),
    Part("metrics", "experiments.tracereplay.TraceReplayConfig", when=_TRACE,
         note="a real trace day replayed time-compressed on the testbed (`trace` given): the loop steps "
              "once per `intervals.interval_s` trace seconds, then prints `{\"summary\": ...}`"),
    Part("learn", "experiments.recording.LearnConfig", when=_TESTBED,
         note="optional: augury starts from no model and learns one from a warm-up recording of the "
              "simulated job (ingest -> Spark -> calibrate); the model file then only runs the testbed"),
)
"""Every (section, dataclass, renames, keys) of the run config. The docs and the checks read it."""

SECTION_ORDER = ("job", "learn", "metrics", "actuator", "decider", "slo", "intervals", "guard", "trust", "reactive",
                 "blacklist", "forecast")
"""Order of the sections on the docs page; a section only ``SCHEMA`` names is appended."""


class HandKey(NamedTuple):
    """A key ``run.py`` reads itself (no dataclass behind it)."""

    section: str
    key: str
    type: str
    default: str
    unit: str
    meaning: str
    when: tuple[tuple[str, tuple[str, ...]], ...] = ()


HAND_READ: tuple[HandKey, ...] = (
    HandKey("job", "model", "string", "required", "", "The model file (relative to the config file)."),
    HandKey("job", "state", "string", "— (in memory)", "",
            "SQLite state database (action log, blacklist, trust), relative to the config file."),
    HandKey("metrics", "source", "string", '`"testbed"`', "", "`testbed` (the simulator; the loop advances it "
            "by `interval_s` per step) or `flink` (a live job)."),
    HandKey("metrics", "seed", "integer", "`0`", "", "The testbed's random seed.", _TESTBED_RATE),
    HandKey("metrics", "rate", "float", "`1000.0`", "tuples/s", "Constant input rate (unless `steps`).", _TESTBED_RATE),
    HandKey("metrics", "steps", "array of {at_s, rate}", "—", "s, tuples/s",
            "Piecewise-constant input rate: from `at_s` on, `rate`.", _TESTBED_RATE),
    HandKey("metrics", "faults", "string", "—", "", "Testbed fault file (docs/testbed.md §3), relative to the "
            "config file.", _TESTBED_RATE),
    HandKey("metrics", "restart_s", "float", "`10.0`", "s", "The testbed's restart time of a rescale.", _TESTBED_RATE),
    HandKey("metrics", "rest_url", "string", "required", "", "The Flink REST URL, `http://host:port`.", _FLINK),
    HandKey("metrics", "job_id", "string", "—", "", "The job's id (32 hex); exactly one of `job_id`, `job_name`.",
            _FLINK),
    HandKey("metrics", "job_name", "string", "—", "", "The newest RUNNING job of this name.", _FLINK),
    HandKey("actuator", "kind", "string", '`"testbed"` (source testbed), `"flink-rest"` (source flink)', "",
            "`testbed`, `dry-run` (records only) or `flink-rest`."),
    HandKey("actuator", "rest_url", "string", "`metrics.rest_url`", "", "The Flink REST URL of the rescale.",
            (("actuator", ("flink-rest",)),)),
    HandKey("actuator", "out", "string", "— (stderr)", "", "JSON-lines file of the changes a dry run records.",
            (("actuator", ("dry-run",)), ("source", ("flink",)))),
    HandKey("decider", "kind", "string", '`"model"`', "", "`model` (one-step plans while trusted), `reactive` "
            "(never the model) or `preemptive` (needs [forecast] with `store` or `series`)."),
    HandKey("forecast", "store", "string", "—", "", "History store directory (its source_rates); exactly one of "
            "`store`, `series`."),
    HandKey("forecast", "series", "string", "—", "", "A timestamp,value CSV of input rates (tuples/s)."),
    HandKey("forecast", "job", "string", "the model's job", "", "The job whose rates `store` holds."),
)
"""The hand-read keys, for the docs page (``run.py`` checks them itself)."""


def parts(section: str | None = None, context: Mapping[str, str] | None = None) -> tuple[Part, ...]:
    """The parts of ``section`` (all sections when None) that apply under ``context``."""
    return tuple(p for p in SCHEMA if (section is None or p.section == section) and p.applies(context))


def _source(raw: Mapping[str, Any]) -> str:
    return raw.get("metrics", {}).get("source", "testbed")


CONTEXT: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "decider": lambda raw: raw.get("decider", {}).get("kind", "model"),
    "source": _source,
    "load": lambda raw: "trace" if "trace" in raw.get("metrics", {}) else "rate",
    "actuator": lambda raw: raw.get("actuator", {}).get("kind", "testbed" if _source(raw) == "testbed"
                                                        else "flink-rest"),
}
"""The settings ``Part.when`` / ``HandKey.when`` can name, each read from the parsed file with
``run.py``'s defaults. A new mode (e.g. a trace replay on the testbed) adds one entry here."""


def context_of(raw: Mapping[str, Any]) -> dict[str, str]:
    """The settings ``Part.when`` reads (``CONTEXT``), from a parsed config file."""
    return {name: read(raw) for name, read in CONTEXT.items()}


# ------------------------------------------------------------------ ranges and choices


@dataclass(frozen=True)
class Range:
    """An interval of allowed numbers, ``(lo, hi]`` style; None = unbounded."""

    lo: float | None = None
    hi: float | None = None
    lo_closed: bool = True
    hi_closed: bool = True

    @classmethod
    def parse(cls, text: str) -> "Range":
        """``"(0, 1]"``, ``"[1, inf)"``, ``"[0, 100]"`` ..."""
        m = re.fullmatch(r"\s*([(\[])\s*(-?inf|[-+0-9.e]+)\s*,\s*(-?inf|[-+0-9.e]+)\s*([)\]])\s*", text)
        if not m:
            raise ValueError(f"not an interval: {text!r} (write e.g. '(0, 1]' or '[1, inf)')")
        lo, hi = float(m.group(2)), float(m.group(3))
        return cls(None if math.isinf(lo) else lo, None if math.isinf(hi) else hi,
                   m.group(1) == "[", m.group(4) == "]")

    def __contains__(self, x: float) -> bool:
        if self.lo is not None and (x < self.lo or (x == self.lo and not self.lo_closed)):
            return False
        if self.hi is not None and (x > self.hi or (x == self.hi and not self.hi_closed)):
            return False
        return True

    def __str__(self) -> str:
        def num(v: float) -> str:
            return f"{v:g}"
        if self.hi is None and self.lo is None:
            return "any number"
        if self.hi is None:
            return ">= " + num(self.lo) if self.lo_closed else "> " + num(self.lo)
        if self.lo is None:
            return "<= " + num(self.hi) if self.hi_closed else "< " + num(self.hi)
        return f"{'[' if self.lo_closed else '('}{num(self.lo)}, {num(self.hi)}{']' if self.hi_closed else ')'}"


RANGES: dict[str, str] = {
    # experiments.tracereplay.TraceReplayConfig (mirrors its check())
    "TraceReplayConfig.days": "(0, inf)",
    "TraceReplayConfig.speedup": "(0, inf)",
    "TraceReplayConfig.peak_over_capacity": "(0, inf)",
    "TraceReplayConfig.resample_s": "(0, inf)",
    "TraceReplayConfig.restart_s": "[0, inf)",
    "TraceReplayConfig.backlog_slo_s": "[0, inf)",
    "TraceReplayConfig.seed": "[0, inf)",
    # experiments.recording.LearnConfig (mirrors its check())
    "LearnConfig.seconds": "(0, inf)",
    "LearnConfig.seed": "[0, inf)",
    # scheduler.targets.Targets (mirrors Targets.__post_init__)
    "Targets.utilization_target": "(0, 1]",
    "Targets.latency_slo_ms": "(0, inf)",
    "Targets.headroom": "[0, 100]",
    "Targets.catch_up_s": "(0, inf)",
    # scheduler.deciders.ModelDeciderConfig (no own checks); the band's elements
    "ModelDeciderConfig.utilization_band": "[0, 1]",
    "ModelDeciderConfig.confirm_windows": "[1, inf)",
    "ModelDeciderConfig.catch_up_utilization": "(0, 1]",
    "ModelDeciderConfig.scale_down_saving": "[0, 1]",
    # scheduler.loop.LoopConfig (run.py checked interval_s > 0)
    "LoopConfig.interval_s": "(0, inf)",
    "LoopConfig.evaluate_after_s": "[0, inf)",
    "LoopConfig.history_windows": "[1, inf)",
    # scheduler.guard.GuardRails (no own checks)
    "GuardRails.min_parallelism": "[1, inf)",
    "GuardRails.max_parallelism": "[1, inf)",
    "GuardRails.max_change_per_step": "[1, inf)",
    "GuardRails.stabilization_s": "[0, inf)",
    "GuardRails.settle_s": "[0, inf)",
    "GuardRails.scale_down_delay_s": "[0, inf)",
    "GuardRails.max_reconfigurations_per_day": "[1, inf)",
    "GuardRails.budget_window_s": "(0, inf)",
    "GuardRails.budget_day_origin_s": "(-inf, inf)",
    # scheduler.trust.TrustConfig (no own checks)
    "TrustConfig.throughput_tolerance": "(0, inf)",
    "TrustConfig.utilization_tolerance": "(0, inf)",
    "TrustConfig.utilization_floor": "[0, 1]",
    "TrustConfig.latency_tolerance": "(0, inf)",
    "TrustConfig.bad_windows": "[1, inf)",
    "TrustConfig.good_windows": "[1, inf)",
    "TrustConfig.saturation_backpressure": "[0, 1]",
    "TrustConfig.saturation_backlog_growth": "[0, inf)",
    "TrustConfig.small_backlog_s": "[0, inf)",
    "TrustConfig.history_windows": "[1, inf)",
    "TrustConfig.recalibration_min_busy": "[0, 1)",
    # scheduler.reactive.ReactiveConfig (no own checks)
    "ReactiveConfig.backpressure_enter": "[0, 1]",
    "ReactiveConfig.backpressure_exit": "[0, 1]",
    "ReactiveConfig.queue_growth_enter": "[0, inf)",
    "ReactiveConfig.queue_growth_exit": "[0, inf)",
    "ReactiveConfig.trend_windows": "[3, inf)",  # scheduler.reactive.queue_trend needs >= 3 windows
    "ReactiveConfig.rate_skew_enter": "[1, inf)",
    "ReactiveConfig.rate_skew_exit": "[1, inf)",
    "ReactiveConfig.queue_skew_enter": "(0, inf)",
    "ReactiveConfig.queue_skew_exit": "(0, inf)",
    "ReactiveConfig.load_skew_enter": "[1, inf)",
    "ReactiveConfig.load_skew_exit": "[1, inf)",
    "ReactiveConfig.enter_windows": "[1, inf)",
    "ReactiveConfig.exit_windows": "[1, inf)",
    "ReactiveConfig.baseline_windows": "[1, inf)",
    "ReactiveConfig.saturated_busy": "(0, 1]",
    "ReactiveConfig.min_busy": "[0, 1)",
    "ReactiveConfig.low_utilization": "[0, 1]",
    "ReactiveConfig.max_scale_factor": "[1, inf)",
    "ReactiveConfig.host_min_instances": "[1, inf)",
    "ReactiveConfig.link_blocked_enter": "[0, 1]",
    "ReactiveConfig.link_blocked_exit": "[0, 1]",
    "ReactiveConfig.link_receiver_idle": "[0, 1]",
    "ReactiveConfig.lost_enter": "(0, 1]",
    "ReactiveConfig.lost_exit": "[0, 1]",
    # scheduler.state.BlacklistConfig (no own checks; load_band divides by log(band_ratio))
    "BlacklistConfig.base_s": "[0, inf)",
    "BlacklistConfig.max_s": "[0, inf)",
    "BlacklistConfig.band_ratio": "(1, inf)",
    # scheduler.deciders.PreemptiveConfig (run.py's _preemptive_spec checks, mirrored)
    "PreemptiveConfig.restart_s": "[0, inf)",
    "PreemptiveConfig.shift_s": "[0, inf)",
    "PreemptiveConfig.surge_escalation_s": "[0, inf)",
    "PreemptiveConfig.violation_s_per_instance_hour": "[0, inf)",
    "PreemptiveConfig.quantile": "(0, 1)",
    "PreemptiveConfig.band_quantile": "[0, 1)",
    "PreemptiveConfig.forecast_step_s": "(0, inf)",
    "PreemptiveConfig.horizon_s": "(0, inf)",
    "PreemptiveConfig.lead_time_s": "[0, inf)",  # ScheduleConfig.check
    "PreemptiveConfig.stabilization_s": "[0, inf)",  # ScheduleConfig.check
    "PreemptiveConfig.max_reconfigurations_per_day": "[1, inf)",
    "PreemptiveConfig.reserved_reconfigurations": "[0, inf)",  # and below max_reconfigurations_per_day (run.py)
    "PreemptiveConfig.replan_s": "(0, inf)",
    "PreemptiveConfig.refit_s": "(0, inf)",
    "PreemptiveConfig.reactive_trigger": "(0, inf)",
    "PreemptiveConfig.quiet_s": "[0, inf)",
    "PreemptiveConfig.history_days": "(0, inf)",
    "PreemptiveConfig.miss_correction_s": "[0, inf)",
    "PreemptiveConfig.miss_utilization_target": "(0, 1]",
    # scheduler.forecasting.LoadForecastConfig (mirrors LoadForecastConfig.check)
    "LoadForecastConfig.quantile": "(0, 1)",
    "LoadForecastConfig.lookahead_s": "[0, inf)",
    "LoadForecastConfig.refit_s": "[0, inf)",
    "LoadForecastConfig.min_history_s": "[0, inf)",
    # scheduler.flink.FlinkMetricsConfig (run.py checked window_s > 0)
    "FlinkMetricsConfig.window_s": "(0, inf)",
    "FlinkMetricsConfig.settle_s": "[0, inf)",
    "FlinkMetricsConfig.fetch_interval_s": "[0, inf)",
    "FlinkMetricsConfig.timeout_s": "(0, inf)",
    "FlinkMetricsConfig.retries": "[1, inf)",
    "FlinkMetricsConfig.retry_delay_s": "[0, inf)",
    "FlinkMetricsConfig.max_wait_windows": "[1, inf)",
    # scheduler.flink.LiveActuatorConfig
    "LiveActuatorConfig.ready_timeout_s": "(0, inf)",
    "LiveActuatorConfig.poll_s": "(0, inf)",
    "LiveActuatorConfig.request_timeout_s": "(0, inf)",
    "LiveActuatorConfig.lower_bound": "[1, inf)",
}
"""``Class.field`` -> allowed interval of every numeric field (of each element, for a tuple of
numbers) without ``metadata={"range": ...}``. Numbers must also be finite (TOML allows inf, nan)."""

_LATENCY_STATS = ("mean", "p95", "p99")  # scheduler.targets.LATENCY_STATS (a test checks)
_FORECAST_METHODS = ("auto", "seasonal-naive", "autoreg", "holt-winters", "theta")  # modeler.forecast

CHOICES: dict[str, tuple[str, ...]] = {
    "Targets.latency_stat": _LATENCY_STATS,
    "TrustConfig.latency_stat": _LATENCY_STATS,
    "PreemptiveConfig.method": _FORECAST_METHODS,
    "PreemptiveConfig.solver": ("rules", "priced"),  # scheduler.schedule.SOLVERS
    "LoadForecastConfig.method": _FORECAST_METHODS,
    "FlinkMetricsConfig.mode": ("counters", "rates"),
}
"""``Class.field`` -> the allowed values of a string field (metadata ``"choices"`` wins)."""

_HHMM = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]")


def _blackout_ok(v: Mapping[str, Any]) -> str | None:
    for window in v["blackout"]:
        if len(window) != 2 or not all(_HHMM.fullmatch(t) for t in window):
            return f'each window must be ["HH:MM", "HH:MM"] (00:00 to 23:59), not {list(window)!r}'
    return None


def _order(low: str, high: str) -> Callable[[Mapping[str, Any]], str | None]:
    def check(v: Mapping[str, Any]) -> str | None:
        return f"{low} ({v[low]!r}) must not exceed {high} ({v[high]!r})" if v[low] > v[high] else None
    return check


def _band_ok(v: Mapping[str, Any]) -> str | None:
    lo, hi = v["utilization_band"]
    return None if lo < hi else "must be [low, high] with low < high"


class Cross(NamedTuple):
    """A rule over the merged values (defaults + given keys) of one dataclass."""

    names: tuple[str, ...]
    """The fields it reads; it runs when any of them is given, and blames the last one given."""
    check: Callable[[Mapping[str, Any]], str | None]
    """Merged values -> what is wrong, or None."""


CROSS_CHECKS: dict[str, tuple[Cross, ...]] = {
    "GuardRails": (Cross(("blackout",), _blackout_ok),  # guard._minutes would fail mid-run
                   Cross(("min_parallelism", "max_parallelism"), _order("min_parallelism", "max_parallelism"))),
    "ModelDeciderConfig": (Cross(("utilization_band",), _band_ok),),
    "BlacklistConfig": (Cross(("base_s", "max_s"), _order("base_s", "max_s")),),
    "ReactiveConfig": tuple(Cross((f"{s}_exit", f"{s}_enter"), _order(f"{s}_exit", f"{s}_enter"))
                            for s in ("backpressure", "queue_growth", "rate_skew", "queue_skew", "load_skew")),
}
"""``Class`` -> rules over more than one field (or a field's inner format)."""


def range_of(cls: type, name: str) -> Range | None:
    """The allowed interval of a numeric field: its metadata, else ``RANGES``; None when neither."""
    f = {f.name: f for f in fields(cls)}[name]
    text = f.metadata.get("range") or RANGES.get(f"{cls.__name__}.{name}")
    return Range.parse(text) if text else None


def _choices_of(cls: type, name: str) -> tuple[str, ...] | None:
    f = {f.name: f for f in fields(cls)}[name]
    return tuple(f.metadata["choices"]) if "choices" in f.metadata else CHOICES.get(f"{cls.__name__}.{name}")


# ------------------------------------------------------------------ types


def _optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (tp, False)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _is_numeric(tp: Any) -> bool:
    tp, _ = _optional(tp)
    if tp in (int, float):
        return True
    if typing.get_origin(tp) is tuple:
        return any(_is_numeric(a) for a in typing.get_args(tp) if a is not Ellipsis)
    return False


def type_text(tp: Any) -> str:
    """The TOML-side name of an annotation: ``float``, ``integer``, ``[float, float]`` ..."""
    tp, optional = _optional(tp)
    if tp is bool:
        text = "boolean"
    elif tp is int:
        text = "integer"
    elif tp is float:
        text = "float"
    elif tp is str:
        text = "string"
    elif typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            text = f"array of {type_text(args[0])}"
        else:
            text = "[" + ", ".join(type_text(a) for a in args) + "]"
    else:
        raise TypeError(f"no TOML form for {tp!r}")
    return f"{text} (optional)" if optional else text


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def _finite(value: int | float) -> bool:
    """``math.isfinite`` that also answers for integers beyond a float (TOML reads 10**400)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


class _Bad(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _convert(tp: Any, value: Any, rng: Range | None, choices: tuple[str, ...] | None) -> Any:
    """``value`` as the annotation ``tp`` wants it (int -> float, list -> tuple), or ``_Bad``."""
    tp, optional = _optional(tp)
    if value is None:
        if optional:
            return None
        raise _Bad(f"must be {type_text(tp)}")
    if tp is bool:
        if not isinstance(value, bool):
            raise _Bad(f"must be true or false, not {_kind(value)}")
        return value
    if tp in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Bad(f"must be {'an integer' if tp is int else 'a number'}, not {_kind(value)}")
        if tp is int and not isinstance(value, int):
            raise _Bad(f"must be an integer, not {_kind(value)}")
        if not _finite(value) or (isinstance(value, int) and abs(value) >= 2**63):
            raise _Bad("must be a finite number (64-bit)" if isinstance(value, int) else "must be a finite number")
        if rng is not None and value not in rng:
            raise _Bad(f"must be {'an integer' if tp is int else 'a number'} "
                       + (f"in {rng}" if rng.lo is not None and rng.hi is not None else str(rng)))
        return float(value) if tp is float else value
    if tp is str:
        if not isinstance(value, str):
            raise _Bad(f"must be a string, not {_kind(value)}")
        if choices is not None and value not in choices:
            raise _Bad(f"must be one of {', '.join(choices)}")
        return value
    if typing.get_origin(tp) is tuple:
        if not isinstance(value, (list, tuple)):
            raise _Bad(f"must be {type_text(tp)}, not {_kind(value)}")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            args = (args[0],) * len(value)
        elif len(value) != len(args):
            raise _Bad(f"must be {type_text(tp)} ({len(args)} elements, not {len(value)})")
        out = []
        for i, (a, v) in enumerate(zip(args, value)):
            try:
                out.append(_convert(a, v, rng, choices))
            except _Bad as bad:
                raise _Bad(f"[{i}]" + ("" if bad.message.startswith("[") else " ") + bad.message) from None
        return tuple(out)
    raise _Bad(f"cannot be set from a config file (type {tp!r})")


# ------------------------------------------------------------------ coerce / build


def coerce(cls: type, raw: Mapping[str, Any], path: str | None, section: str,
           renames: Mapping[str, str] | None = None, *, keys: Sequence[str] | None = None) -> dict[str, Any]:
    """The keyword arguments of ``cls`` from one TOML section's ``raw`` keys, every key checked.

    ``renames`` maps TOML key -> field name (``{"latency_ms": "latency_slo_ms"}``); the field's own
    name is accepted too (as ``run._dataclass_from`` does). ``keys``: the TOML keys allowed (None =
    every field). Numbers are checked against ``range_of``, strings against ``CHOICES``, then
    ``CROSS_CHECKS`` on the defaults merged with the given values. Arrays become tuples, integers
    become floats for float fields. Raises ``UsageError(message, file=path,
    field=f"{section}.{key}", value=value)``.
    """
    renames = dict(renames or {})
    back = {f: k for k, f in renames.items()}
    by_name = {f.name: f for f in fields(cls)}
    hints = typing.get_type_hints(cls)
    allowed = {back.get(n, n): n for n in by_name}
    if keys is not None:
        allowed = {k: n for k, n in allowed.items() if k in keys}
    accepted = dict(allowed)
    accepted.update({n: n for n in allowed.values()})  # the field's own name
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for key, value in raw.items():
        name = accepted.get(key)
        if name is None:
            raise UsageError(f"unknown key (known: {', '.join(sorted(allowed))})", file=path,
                             field=f"{section}.{key}", value=value)
        if name in given:
            raise UsageError(f"given twice (also as {given[name]})", file=path, field=f"{section}.{key}", value=value)
        given[name] = key
        try:
            out[name] = _convert(hints[name], value, range_of(cls, name) if _is_numeric(hints[name]) else None,
                                 _choices_of(cls, name))
        except _Bad as bad:
            raise UsageError(bad.message, file=path, field=f"{section}.{key}", value=value) from None
    merged = {f.name: _default(f) for f in fields(cls)}
    merged.update(out)
    for rule in CROSS_CHECKS.get(cls.__name__, ()):
        named = [n for n in rule.names if n in out]
        if not named:
            continue  # the defaults alone: not the file's fault
        message = rule.check(merged)
        if message:
            raise UsageError(message, file=path, field=f"{section}.{given[named[-1]]}", value=raw[given[named[-1]]])
    return out


def _default(f) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def build(cls: type, raw: Mapping[str, Any], path: str | None, section: str,
          rename: Mapping[str, str] | None = None, *, keys: Sequence[str] | None = None) -> Any:
    """``coerce`` then ``cls(**kwargs)`` (and ``check()`` when the class has one): a drop-in for
    ``run._dataclass_from(cls, raw, path, section, rename)``. The dataclass's own errors
    (``AuguryError`` with ``.field``) become ``UsageError`` naming ``section.key``."""
    kwargs = coerce(cls, raw, path, section, rename, keys=keys)
    back = {f: k for k, f in (rename or {}).items()}
    try:
        obj = cls(**kwargs)
        check = getattr(obj, "check", None)
        if callable(check):
            check()
    except AuguryError as err:
        name = str(err.field or "")
        name = name[len(section) + 1:] if name.startswith(section + ".") else name
        field = f"{section}.{back.get(name, name)}" if name else section
        raise UsageError(err.message, file=path, field=field, value=err.value) from None
    except TypeError as err:  # cannot happen after coerce; kept as _dataclass_from had it
        raise UsageError(str(err), file=path, field=section) from None
    return obj


def split_section(section: str, raw: Mapping[str, Any], path: str | None,
                  context: Mapping[str, str] | None = None) -> tuple[list[tuple[Part, dict]], dict]:
    """One section's keys divided among its parts (under ``context``) and the hand-read keys:
    ``([(part, {toml key: value})...], {hand-read key: value})``. A key of neither raises
    ``UsageError`` listing every key the section knows; a hand-read key's value is checked for its
    type and range (``check_hand``); the parts' keys are not (``coerce`` does)."""
    sections = _sections() + [h.section for h in HAND_READ if h.section not in _sections()]
    if section not in sections:
        raise UsageError(f"unknown section (known: {', '.join(sorted(sections))})", file=path, field=section)
    mine = parts(section, context)
    hand = {h.key for h in HAND_READ if h.section == section and _applies(h.when, context)}
    owner: dict[str, Part] = {}
    for p in mine:
        for key in p.toml_keys():
            owner.setdefault(key, p)
    split = {p: {} for p in mine}
    hand_raw = {}
    by_key = {h.key: h for h in HAND_READ if h.section == section}
    for key, value in raw.items():
        if key in hand:
            check_hand(by_key[key], value, path)
            hand_raw[key] = value
        elif key in owner:
            split[owner[key]][key] = value
        else:
            known = sorted(hand | {k for p in mine for k in p.toml_keys()})
            raise UsageError(f"unknown key (known: {', '.join(known)})", file=path, field=f"{section}.{key}",
                             value=value)
    return [(p, split[p]) for p in mine], hand_raw


def check_hand(key: HandKey, value: Any, path: str | None) -> None:
    """A hand-read key's value against its documented type: ``string`` (non-empty), ``integer``
    (>= 0, 64-bit), ``float`` (>= 0, at most ``modeler.limits.MAX_MODEL_NUMBER``), ``array of
    {at_s, rate}`` (a non-empty array of tables with exactly those two numbers, ``at_s`` within
    ``MAX_DURATION_S``). ``UsageError`` naming ``section.key`` and the value; through
    ``modeler.limits.check_number``, so a 400-digit integer is an error, not an overflow."""
    from modeler.limits import MAX_DURATION_S, MAX_MODEL_NUMBER, check_number

    field = f"{key.section}.{key.key}"

    def number(v: Any, where: str, maximum: float, integer: bool = False) -> None:
        if isinstance(v, str) or isinstance(v, bool) or not isinstance(v, (int, float)):
            raise UsageError(f"must be {'an integer' if integer else 'a number'}, not {_kind(v)}", file=path,
                             field=where, value=v)
        check_number(v, where, minimum=0, maximum=maximum, integer=integer, file=path)

    if key.type == "string":
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"must be a non-empty string, not {_kind(value) if not isinstance(value, str) else 'empty'}",
                             file=path, field=field, value=value)
    elif key.type == "integer":
        number(value, field, 2**63 - 1, integer=True)
    elif key.type == "float":
        number(value, field, MAX_MODEL_NUMBER)
    elif key.type == "array of {at_s, rate}":
        if not isinstance(value, list) or not value:
            raise UsageError("must be a non-empty array of {at_s, rate} tables", file=path, field=field, value=value)
        for i, step in enumerate(value):
            where = f"{field}[{i}]"
            if not isinstance(step, dict) or set(step) != {"at_s", "rate"}:
                raise UsageError("must be a table {at_s = ..., rate = ...}", file=path, field=where, value=step)
            number(step["at_s"], f"{where}.at_s", MAX_DURATION_S)
            number(step["rate"], f"{where}.rate", MAX_MODEL_NUMBER)


# ------------------------------------------------------------------ docs


class Row(NamedTuple):
    """One key of the docs page. ``row[:6]`` is (section, key, type, default, unit, meaning)."""

    section: str
    key: str
    type: str
    default: str
    unit: str
    meaning: str
    range: str
    """Allowed values (interval, choices); "" when unchecked."""
    source: str
    """``module.Class`` behind the key, or ``run.py`` for a hand-read key."""
    when: str
    """When the key applies ("" = always)."""


def attribute_docs(cls: type) -> dict[str, str]:
    """``field name -> docstring`` from the string literal right under each annotated field
    (whitespace normalized); fields without one are absent."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for stmt, nxt in zip(body, body[1:] + [None]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[stmt.target.id] = " ".join(inspect.cleandoc(nxt.value.value).split())
    return docs


_DOC_UNITS = ((re.compile(r"tuples/s"), "tuples/s"),
              (re.compile(r"\bs of [\w ]+ per s\b"), "s/s"),
              (re.compile(r"\bfractions?\b"), "fraction"),
              (re.compile(r"\bms\b"), "ms"),
              (re.compile(r"\((?:s|seconds)[,)]|, s\b|\bseconds\b"), "s"))


def unit_of(name: str, doc: str, metadata: Mapping[str, Any] | None = None) -> str:
    """The unit of a field: metadata ``"unit"``; else the name's suffix (``_ms``, ``_s``, ``_days``,
    ``_windows``); else the docstring (``tuples/s``, ``s of ... per s``, ``fraction``, ``ms``,
    ``(s)``/``, s``/``seconds``); else ""."""
    if metadata and "unit" in metadata:
        return str(metadata["unit"])
    for suffix, unit in (("_ms", "ms"), ("_s", "s"), ("_days", "days"), ("_windows", "windows")):
        if name.endswith(suffix):
            return unit
    for pattern, unit in _DOC_UNITS:
        if pattern.search(doc):
            return unit
    return ""


def toml_text(value: Any) -> str:
    """A default as TOML would write it."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    return repr(value)


def field_rows() -> list[Row]:
    """Every key of the run config, section by section: the dataclass keys read from ``SCHEMA``
    (annotation, default, attribute docstring, range) and the hand-read keys."""
    rows = []
    for section in _sections():
        for h in HAND_READ:
            if h.section == section:
                rows.append(Row(section, h.key, h.type, h.default, h.unit, h.meaning, "", "run.py",
                                _when_text(h.when)))
        for p in parts(section):
            cls = p.cls
            hints = typing.get_type_hints(cls)
            docs = attribute_docs(cls)
            by_name = {f.name: f for f in fields(cls)}
            overrides = dict(p.defaults)
            for key in p.toml_keys():
                name = p.field_name(key)
                f, tp = by_name[name], hints[name]
                default = overrides.get(key) or (f"`{toml_text(_default(f))}`" if _default(f) is not None
                                                 else "— (omitted)")
                rng = range_of(cls, name) if _is_numeric(tp) else None
                choices = _choices_of(cls, name)
                allowed = str(rng) if rng else (", ".join(choices) if choices else "")
                if rng and typing.get_origin(_optional(tp)[0]) is tuple:
                    allowed = f"each {allowed}"
                rows.append(Row(section, key, type_text(tp), default, unit_of(name, docs.get(name, ""), f.metadata),
                                docs.get(name, ""), allowed, f"{cls.__module__}.{cls.__qualname__}", p.when_text()))
    return rows


def _sections() -> list[str]:
    extra = [p.section for p in SCHEMA if p.section not in SECTION_ORDER]
    return list(SECTION_ORDER) + list(dict.fromkeys(extra))


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|") or " "


GENERATED = "python -m augury.commands._run_schema --write docs/run-config.md"

_HEADER = f"""<!-- Generated by `{GENERATED}`
from augury/commands/_run_schema.py and the config dataclasses' field docstrings: do not edit by
hand (`--check` exits 1 when this page is stale; tests/augury/test_run_schema.py fails too). -->

# `augury run --config FILE.toml`: every key

The sections, their defaults and what they mean; the walk-through is in
[control-loop.md](control-loop.md) §4. Most sections are frozen config dataclasses: the type,
default, unit and meaning below are read from each field (annotation, default, the docstring under
the field), so the code is the source of truth. The keys marked `run.py` are read by
`augury/commands/run.py` itself.

`augury.commands._run_schema.build` checks every key of a dataclass section: an unknown key, a
value of the wrong type (`true` for a number, `"10"` for a number, `1.5` for an integer; an
integer is fine for a float) or a value outside the "allowed" column is a usage error naming the
file, `section.key` and the value (exit 2). Until `augury run` reads its sections through it,
`augury run` itself rejects unknown keys and what the dataclasses validate on their own.
Optional fields are set by giving the key and left unset by leaving it out (TOML has no null).
Durations are plain numbers of seconds in this file.
"""
# ^ once run.py calls build() for every dataclass section, drop the "Until ..." sentence.


def render_markdown() -> str:
    """The docs page: the header, then one table per section."""
    out = [_HEADER]
    rows = field_rows()
    for section in _sections():
        mine = [r for r in rows if r.section == section]
        if not mine:
            continue
        out.append(f"\n## [{section}]\n")
        sources = []
        for p in parts(section):
            text = f"`{p.target}`" + (f" (keys {', '.join(f'`{k}`' for k in p.toml_keys())})" if p.keys else "")
            if p.rename:
                text += "; " + ", ".join(f"`{k}` is the field `{f}`" for k, f in p.rename)
            if p.when:
                text += f"; when {p.when_text()}"
            if p.note:
                text += f": {p.note}"
            sources.append(f"* {text}")
        if sources:
            out.append("\n".join(sources) + "\n")
        out.append("\n| key | type | default | unit | allowed | meaning | from | when |\n"
                   "|---|---|---|---|---|---|---|---|\n")
        for r in mine:
            origin = "run.py" if r.source == "run.py" else r.source.rpartition(".")[2]
            out.append("| " + " | ".join(_cell(c) for c in (f"`{r.key}`", r.type, r.default, r.unit, r.range,
                                                            r.meaning, origin, r.when)) + " |\n")
    return "".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """``--write FILE`` writes the page, ``--check FILE`` exits 1 when it differs; neither prints it."""
    root = Path(__file__).resolve().parents[2]
    default = root / "docs" / "run-config.md"
    parser = argparse.ArgumentParser(prog="python -m augury.commands._run_schema",
                                     description="Write or check docs/run-config.md (the run config reference).")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", nargs="?", const=str(default), metavar="FILE", help="write the page")
    group.add_argument("--check", nargs="?", const=str(default), metavar="FILE",
                       help="exit 1 when FILE differs from the generated page")
    args = parser.parse_args(argv)
    text = render_markdown()
    if args.write:
        Path(args.write).write_text(text)
        return 0
    if args.check:
        where = Path(args.check)
        if not where.is_file() or where.read_text() != text:
            print(f"{where} is out of date: run {GENERATED}", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
