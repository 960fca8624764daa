"""Restart time of a reconfiguration from the state it restores (the SEEP seed: scale-out and
recovery of stateful operators), and its calibration from measured restarts.

Units: seconds (``_s``), state in MB (``_mb``), restore rate in MB/s. Pure: values in, values
out (no files, clocks or network; the testbed's events and Flink's REST answers are turned into
``(state_mb, restart_s)`` pairs by their callers).

The model (model file v1, all optional: ``operators[].state_mb``, ``restart_base_s``,
``restore_mb_per_s``)::

    restart_s(from -> to) = 0                                        when no parallelism changes
                          = base_s + state_moved_mb / restore_mb_per_s   otherwise

``base_s`` is the model's ``restart_base_s``; when the file gives none, the caller's
``default_base_s`` (``DEFAULT_RESTART_BASE_S`` = 10 s, the testbed's default ``restart_s``), so
a model without a restart model and without state predicts exactly the fixed restart time every
caller used before (``RestartEstimate.base_assumed`` says so).

**Which state moves** (``state_moved_mb``, the one place this rule lives): *all keyed state of
the job* (the sum of every operator's ``state_mb``) whenever any operator's parallelism changes.
Why this rule: Flink, the engine augury drives, applies a new parallelism by restarting the whole
job (the adaptive scheduler's rescale, like stop-with-savepoint and resubmit), and every task of
every operator then restores its key groups from the last completed checkpoint in checkpoint
storage, not only the tasks of the rescaled operators (task-local recovery, off by default, is not
assumed). The rejected alternative, "only the state of the operators whose parallelism changes,
because only their key groups are redistributed", is right for engines that migrate just the
moved key groups (SEEP, Megaphone, Rhino) but would under-predict Flink's restarts. The rule
makes every change of one job cost the same restart; a planner still trades fewer changes against
more instances. ``restore_mb_per_s`` is the job's *aggregate* restore rate (all tasks restore in
parallel, bounded by checkpoint storage and the network), which is what calibration measures.

An operator's ``state_mb`` is its total over its instances (each instance holds its key groups'
share, ``state_mb / p`` on average): it does not change with parallelism.

**Calibration** (``fit_restart_model``): a least-squares line ``restart_s = base + slope x
state_mb`` through measured restarts, ``restore_mb_per_s = 1 / slope``. Fewer than two restarts,
or restarts that all moved the same state (the line is undetermined), or a slope <= 0 (restart
time does not grow with state) are a ``CalibrationError``; a negative intercept is refitted
through the origin (base 0). A fit from fewer than ``min_samples`` restarts, a narrow state range
or a large leave-one-out error is returned with ``trusted = False`` and the reasons.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from modeler.errors import CalibrationError, ConfigError, ModelError
from modeler.modelfile import JobModel

DEFAULT_RESTART_BASE_S = 10.0
"""Restart time of a change when the model file gives no ``restart_base_s`` and the caller no
default: the testbed's default ``restart_s``."""


# ------------------------------------------------------------------ prediction


@dataclass(frozen=True)
class RestartEstimate:
    """The predicted restart of one change ``from -> to``."""

    restart_s: float
    """Predicted outage, s (0 when nothing changes)."""
    base_s: float
    """The fixed part used, s."""
    state_mb: float
    """State restored, MB (``state_moved_mb``; 0 when nothing changes)."""
    restore_mb_per_s: float | None
    """The model's restore rate, MB/s (None when the model gives none)."""
    base_assumed: bool
    """True when the model file gives no ``restart_base_s`` (the default base was used)."""
    changed: tuple[str, ...] = ()
    """Operators whose parallelism changes (empty: no restart)."""

    def to_dict(self) -> dict[str, Any]:
        return {"restart_s": self.restart_s, "base_s": self.base_s, "state_mb": self.state_mb,
                "restore_mb_per_s": self.restore_mb_per_s, "base_assumed": self.base_assumed,
                "changed": list(self.changed)}


def _full_config(model: JobModel, config: Mapping[str, int] | None, field: str) -> dict[str, int]:
    full = model.config
    for name, p in (config or {}).items():
        if name not in full:
            raise ConfigError(f"unknown operator (known: {', '.join(full)})",
                              file=model.source_file, field=field, value=name)
        full[name] = p
    return full


def changed_operators(model: JobModel, from_config: Mapping[str, int] | None,
                      to_config: Mapping[str, int] | None) -> tuple[str, ...]:
    """Operators whose parallelism differs between the two configurations (operators a config
    does not name keep the model's parallelism), in model order."""
    a = _full_config(model, from_config, "from_config")
    b = _full_config(model, to_config, "to_config")
    return tuple(n for n in model.operator_names if a[n] != b[n])


def state_moved_mb(model: JobModel, from_config: Mapping[str, int] | None,
                   to_config: Mapping[str, int] | None) -> float:
    """MB of state a change restores: all the job's keyed state when any parallelism changes,
    else 0 (the rule and its reasons: module docstring)."""
    return model.state_mb if changed_operators(model, from_config, to_config) else 0.0


def restart_estimate(model: JobModel, from_config: Mapping[str, int] | None,
                     to_config: Mapping[str, int] | None, *,
                     default_base_s: float = DEFAULT_RESTART_BASE_S) -> RestartEstimate:
    """The predicted restart of changing ``from_config`` into ``to_config`` (mappings operator ->
    parallelism; operators not named keep the model's parallelism; ``None`` = the model's)."""
    changed = changed_operators(model, from_config, to_config)
    assumed = model.restart_base_s is None
    base = float(default_base_s if assumed else model.restart_base_s)
    if not math.isfinite(base) or base < 0:
        raise ModelError("must be a finite number >= 0", file=model.source_file,
                         field="restart_base_s" if not assumed else "default_base_s", value=base)
    rate = model.restore_mb_per_s
    if not changed:
        return RestartEstimate(0.0, base, 0.0, rate, assumed, ())
    moved = state_moved_mb(model, from_config, to_config)
    if moved > 0 and (rate is None or not rate > 0):
        raise ModelError(f"the job holds {moved:g} MB of state: a restore rate > 0 (MB/s) is needed "
                         "to predict its restart time", file=model.source_file,
                         field="restore_mb_per_s", value=rate)
    restore_s = moved / rate if moved > 0 else 0.0
    return RestartEstimate(base + restore_s, base, moved, rate, assumed, changed)


def restart_time_s(model: JobModel, from_config: Mapping[str, int] | None,
                   to_config: Mapping[str, int] | None, *,
                   default_base_s: float = DEFAULT_RESTART_BASE_S) -> float:
    """Predicted restart time (s) of changing ``from_config`` into ``to_config``:
    ``restart_estimate(...).restart_s``."""
    return restart_estimate(model, from_config, to_config, default_base_s=default_base_s).restart_s


def compress_restart(model: JobModel, time_scale: float) -> JobModel:
    """The model with its restart model ``time_scale`` times faster (base / X, restore rate x X),
    for a time-compressed replay whose policy seconds last 1/X simulated seconds. A model without
    a ``restart_base_s`` keeps none (the caller's default base is scaled by the caller)."""
    if isinstance(time_scale, bool) or not isinstance(time_scale, (int, float)) \
            or not math.isfinite(time_scale) or time_scale <= 0:
        raise ModelError("must be a finite number > 0", field="time_scale", value=time_scale)
    base = None if model.restart_base_s is None else model.restart_base_s / time_scale
    rate = None if model.restore_mb_per_s is None else model.restore_mb_per_s * time_scale
    return replace(model, restart_base_s=base, restore_mb_per_s=rate)


# ----------------------------------------------------------------- calibration


@dataclass(frozen=True)
class RestartFitConfig:
    """When a restart fit is trusted."""

    min_samples: int = 3
    """Fewest restarts for a trusted fit (two determine the line but leave nothing to check it)."""
    min_state_spread: float = 0.2
    """Smallest (max - min) / max of the state moved for a trusted fit: restarts that all moved
    about the same state separate base and rate poorly."""
    max_holdout_error: float = 0.2
    """Largest leave-one-out median relative error of the restart time for a trusted fit."""


@dataclass(frozen=True)
class RestartFit:
    """A fitted restart model and how far to trust it."""

    base_s: float
    """Fixed part of a restart, s."""
    restore_mb_per_s: float
    """Aggregate restore rate, MB/s."""
    samples: int
    """Restarts used."""
    rms_error_s: float
    """Root-mean-square residual of the fitted line, s."""
    holdout_error: float
    """Leave-one-out median relative error of the restart time (NaN below 3 restarts)."""
    trusted: bool
    """All of ``RestartFitConfig``'s conditions hold."""
    reasons: tuple[str, ...] = ()
    """Why the fit is not trusted, and what was adjusted (a negative base refitted at 0)."""

    def predict_s(self, state_mb: float) -> float:
        """Restart time of a change that moves ``state_mb``."""
        return self.base_s + state_mb / self.restore_mb_per_s

    def to_dict(self) -> dict[str, Any]:
        return {"base_s": self.base_s, "restore_mb_per_s": self.restore_mb_per_s,
                "samples": self.samples, "rms_error_s": self.rms_error_s,
                "holdout_error": None if math.isnan(self.holdout_error) else self.holdout_error,
                "trusted": self.trusted, "reasons": list(self.reasons)}


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, bool]:
    """Least-squares (intercept, slope); an intercept below 0 is refitted at 0 (flag True)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    intercept = my - slope * mx
    if intercept < 0:
        slope = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
        return 0.0, slope, True
    return intercept, slope, False


def _samples(samples: Iterable[Any]) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for i, sample in enumerate(samples):
        try:
            mb, s = sample
        except (TypeError, ValueError):
            raise CalibrationError("must be a pair (state_mb, restart_s)", field=f"restarts[{i}]",
                                   value=sample) from None
        for name, v in (("state_mb", mb), ("restart_s", s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise CalibrationError("must be a finite number >= 0", field=f"restarts[{i}].{name}",
                                       value=v)
        xs.append(float(mb))
        ys.append(float(s))
    return xs, ys


def fit_restart_model(samples: Iterable[tuple[float, float]],
                      config: RestartFitConfig | None = None) -> RestartFit:
    """Fit ``restart_base_s`` and ``restore_mb_per_s`` from measured restarts, each a pair
    ``(state_mb moved, restart_s measured)``. Raises ``CalibrationError`` when the line is
    undetermined (fewer than 2 restarts, one state size only) or does not rise with state."""
    cfg = config or RestartFitConfig()
    xs, ys = _samples(samples)
    n = len(xs)
    if n < 2:
        raise CalibrationError("at least 2 measured restarts are needed to fit base and restore rate",
                               field="restarts", value=n)
    if max(xs) - min(xs) <= 1e-9 * max(1.0, max(xs)):
        raise CalibrationError("every restart moved the same state: base and restore rate cannot be "
                               "told apart (restarts with different state sizes are needed)",
                               field="restarts.state_mb", value=xs[0])
    base, slope, clamped = _line(xs, ys)
    if not slope > 0:
        raise CalibrationError("restart time does not grow with the state moved: the restore rate "
                               "cannot be fitted", field="restarts", value=f"slope {slope:.3g} s/MB")
    residuals = [y - (base + slope * x) for x, y in zip(xs, ys)]
    rms = math.sqrt(sum(r * r for r in residuals) / n)
    errors = []
    if n >= 3:
        for i in range(n):
            ox = xs[:i] + xs[i + 1:]
            oy = ys[:i] + ys[i + 1:]
            if max(ox) - min(ox) <= 1e-9 * max(1.0, max(ox)):
                continue
            b, m, _ = _line(ox, oy)
            pred = b + m * xs[i]
            errors.append(abs(pred - ys[i]) / max(abs(ys[i]), 1e-9))
    holdout = statistics.median(errors) if errors else float("nan")
    reasons = []
    if clamped:
        reasons.append("the least-squares base was negative: refitted through the origin (base 0)")
    if n < cfg.min_samples:
        reasons.append(f"{n} restarts < min_samples {cfg.min_samples}")
    spread = (max(xs) - min(xs)) / max(xs)
    if spread < cfg.min_state_spread:
        reasons.append(f"state moved spans only {spread:.0%} of its largest value "
                       f"(< min_state_spread {cfg.min_state_spread:.0%})")
    if not math.isnan(holdout) and holdout > cfg.max_holdout_error:
        reasons.append(f"leave-one-out error {holdout:.0%} > max_holdout_error {cfg.max_holdout_error:.0%}")
    trusted = n >= cfg.min_samples and spread >= cfg.min_state_spread and \
        not math.isnan(holdout) and holdout <= cfg.max_holdout_error
    return RestartFit(base_s=base, restore_mb_per_s=1.0 / slope, samples=n, rms_error_s=rms,
                      holdout_error=holdout, trusted=trusted, reasons=tuple(reasons))


def apply_restart_fit(model: JobModel, fit: RestartFit) -> JobModel:
    """The model with the fitted ``restart_base_s`` and ``restore_mb_per_s``, and the fit's
    diagnostics under ``calibration.restart``."""
    section = dict(model.calibration or {})
    section["restart"] = fit.to_dict()
    return replace(model, restart_base_s=fit.base_s, restore_mb_per_s=fit.restore_mb_per_s,
                   calibration=section)
