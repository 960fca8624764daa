"""Model trust: does the model still explain what the job does?

Every settled metric window (no restart in it) is compared with the model's prediction for the
configuration in force, at the input rate the job actually accepted (``JobWindow.input_rate``):

* **throughput** — when the job is measurably saturated (the external backlog grew or the sources
  were back-pressured) the measured rate *is* its capacity and the error is
  ``|max_rate - x| / x``; otherwise the job sustained ``x``, and the model is wrong only if it
  says it could not: ``max(0, x - max_rate) / x``;
* **utilization** — per operator with a service time, ``|ln(measured busy / predicted)|`` with
  both floored at ``utilization_floor`` (low utilizations are timer noise); the worst operator
  counts;
* **latency** — ``|ln(measured / predicted)|`` of the end-to-end latency statistic, only when
  neither measurement nor model is saturated and the backlog is small (backlog wait is not in
  the model).

Each error is divided by its tolerance; the window's score is the largest ratio, and the window
is *bad* when the score exceeds 1. States: ``probation`` (a new or recalibrated model: not used
for planning until ``good_windows`` consecutive good windows), ``trusted``, ``untrusted``
(``bad_windows`` consecutive bad windows: the loop falls back to the reactive policy and
recalibrates on recent history with ``recalibrate``; a recalibrated model starts in probation,
so trust is regained only when it predicts new windows well).

Units: rates in tuples/s, latencies in ms, utilizations as fractions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from modeler.calibrate import CalibrationConfig, Calibrator
from modeler.modelfile import JobModel
from modeler.queueing import CompiledModel, compile_model, predict
from scheduler.observe import JobWindow, history_frames

STATES = ("probation", "trusted", "untrusted")


@dataclass(frozen=True)
class TrustConfig:
    """Tolerances and window counts of the trust monitor."""

    throughput_tolerance: float = 0.10
    """Relative throughput / capacity error allowed."""
    utilization_tolerance: float = 0.25
    """Allowed |ln(measured / predicted)| of an operator's mean utilization (0.25 ~ 28 %)."""
    utilization_floor: float = 0.05
    """Utilizations below this fraction are compared as this value (noise floor)."""
    latency_tolerance: float = 1.0
    """Allowed |ln(measured / predicted)| of end-to-end latency (1.0 = a factor e)."""
    latency_stat: str = "mean"
    """Latency statistic compared: mean | p95 | p99."""
    bad_windows: int = 3
    """k: consecutive bad windows that make the model untrusted."""
    good_windows: int = 3
    """Consecutive good windows that make a model on probation trusted."""
    saturation_backpressure: float = 0.10
    """Sources back-pressured more than this fraction of a window = the job is saturated."""
    saturation_backlog_growth: float = 0.02
    """Backlog growth above this fraction of the accepted rate = the job is saturated."""
    small_backlog_s: float = 1.0
    """Latency is compared only while the backlog is below this many seconds of input."""
    history_windows: int = 60
    """Most recent settled windows used to recalibrate."""
    recalibration_min_busy: float = 0.02
    """Busy fraction above which a live window measures service time when recalibrating
    (``CalibrationConfig.min_busy_fraction``; the bulk default of 10 % guards against per-window
    overheads in archived history, but a lightly loaded sink would then never be measurable)."""


@dataclass(frozen=True)
class WindowError:
    """How far one window is from the model's prediction (errors as defined in the module doc)."""

    start_s: float
    rate: float
    """Input rate the prediction was made at (tuples/s accepted)."""
    throughput_error: float
    utilization_error: float
    worst_operator: str | None
    latency_error: float | None
    score: float
    """Largest error / tolerance: > 1 is a bad window."""

    @property
    def ok(self) -> bool:
        return self.score <= 1.0


@dataclass(frozen=True)
class TrustAssessment:
    """The monitor's verdict after the newest windows."""

    state: str
    errors: tuple[WindowError, ...]
    """The windows evaluated in this step."""
    bad_streak: int
    good_streak: int
    recalibrate: bool
    """The loop should recalibrate now (just became, or still is, untrusted)."""
    reasons: tuple[str, ...]

    @property
    def trusted(self) -> bool:
        return self.state == "trusted"


def measured_saturated(window: JobWindow, config: TrustConfig = TrustConfig()) -> bool:
    x = window.input_rate
    growth = window.offered_rate - x
    bp = max((o.backpressure_max for o in window.sources), default=0.0)
    return bp > config.saturation_backpressure or (x > 0 and growth > config.saturation_backlog_growth * x)


def _log_err(measured: float, predicted: float, floor: float) -> float:
    return abs(math.log(max(measured, floor) / max(predicted, floor)))


def window_error(model: JobModel | CompiledModel, window: JobWindow,
                 config: TrustConfig = TrustConfig()) -> WindowError:
    """Compare one window with the model's prediction for the window's configuration."""
    compiled = model if isinstance(model, CompiledModel) else compile_model(model)
    known = {k: v for k, v in window.config.items() if k in compiled.index}
    x = window.input_rate
    pred = predict(compiled, known, x)
    if measured_saturated(window, config):
        tp = abs(pred.max_rate - x) / x if x > 0 else 0.0
    else:
        tp = max(0.0, x - pred.max_rate) / x if x > 0 else 0.0
    util, worst = 0.0, None
    for name, op in window.operators.items():
        p = pred.operators.get(name)
        if p is None or compiled.service_s[compiled.index[name]] <= 0:
            continue
        e = _log_err(op.busy_mean, p.utilization, config.utilization_floor)
        if e > util:
            util, worst = e, name
    lat = None
    measured = window.latency_ms.get(config.latency_stat)
    predicted = pred.latency_ms.get(config.latency_stat)
    if (measured and predicted and not pred.saturated and not measured_saturated(window, config)
            and window.backlog <= config.small_backlog_s * max(x, 1.0)):
        lat = _log_err(measured, predicted, 1e-6)
    score = max(tp / config.throughput_tolerance, util / config.utilization_tolerance,
                (lat or 0.0) / config.latency_tolerance)
    return WindowError(start_s=window.start_s, rate=x, throughput_error=tp, utilization_error=util,
                       worst_operator=worst, latency_error=lat, score=score)


def _describe(e: WindowError) -> str:
    parts = [f"throughput {e.throughput_error:.0%}",
             f"utilization {math.expm1(e.utilization_error):.0%}" + (f" ({e.worst_operator})" if e.worst_operator else "")]
    if e.latency_error is not None:
        parts.append(f"latency {math.expm1(e.latency_error):.0%}")
    return ", ".join(parts)


@dataclass
class TrustMonitor:
    """Tracks the trust state over windows (stateful; ``snapshot``/``restore`` persist it)."""

    config: TrustConfig = TrustConfig()
    state: str = "probation"
    bad_streak: int = 0
    good_streak: int = 0

    def update(self, model: JobModel | CompiledModel, windows: Sequence[JobWindow]) -> TrustAssessment:
        """Evaluate new settled windows (restarting ones are skipped) and move the state."""
        cfg = self.config
        compiled = model if isinstance(model, CompiledModel) else compile_model(model)
        errors = tuple(window_error(compiled, w, cfg) for w in windows if not w.restarting)
        reasons: list[str] = []
        before = self.state
        for e in errors:
            if e.ok:
                self.good_streak += 1
                self.bad_streak = 0
            else:
                self.bad_streak += 1
                self.good_streak = 0
            if self.state != "untrusted" and self.bad_streak >= cfg.bad_windows:
                self.state = "untrusted"
                reasons.append(f"model untrusted: {self.bad_streak} consecutive windows off ({_describe(e)})")
            elif self.state == "probation" and self.good_streak >= cfg.good_windows:
                self.state = "trusted"
                reasons.append(f"model trusted: {self.good_streak} consecutive windows within tolerance "
                               f"({_describe(e)})")
        if errors and not reasons:
            reasons.append(f"model {self.state}: last window {_describe(errors[-1])}")
        return TrustAssessment(state=self.state, errors=errors, bad_streak=self.bad_streak,
                               good_streak=self.good_streak,
                               recalibrate=self.state == "untrusted" and (before != "untrusted" or bool(errors)),
                               reasons=tuple(reasons))

    def recalibrated(self) -> None:
        """A new model is in force: it must earn trust on new windows."""
        self.state = "probation"
        self.bad_streak = 0
        self.good_streak = 0

    def snapshot(self) -> dict:
        return {"state": self.state, "bad_streak": self.bad_streak, "good_streak": self.good_streak}

    def restore(self, snap: Mapping | None) -> "TrustMonitor":
        if snap and snap.get("state") in STATES:
            self.state = snap["state"]
            self.bad_streak = int(snap.get("bad_streak", 0))
            self.good_streak = int(snap.get("good_streak", 0))
        return self


@dataclass(frozen=True)
class Recalibration:
    """The outcome of recalibrating on recent windows."""

    model: JobModel
    calibration_trust: float
    """``Calibrator.trust_``: the weakest parameter's trust in [0, 1]."""
    windows: int
    in_sample_score: float
    """Median window score of the new model on the windows it was fitted on."""


def recalibrate(model: JobModel, windows: Sequence[JobWindow], config: TrustConfig = TrustConfig(),
                calibration: CalibrationConfig | None = None) -> Recalibration:
    """Fit the model's profile again on the most recent ``history_windows`` settled windows, keeping
    its topology (operators, edges, groupings, bounds). Raises ``CalibrationError`` when the history
    does not measure every parameter (too few or too lightly loaded windows)."""
    recent = [w for w in windows if not w.restarting][-config.history_windows:]
    ops, edges = history_frames(recent)
    calibration = calibration or CalibrationConfig(min_busy_fraction=config.recalibration_min_busy)
    fitted = Calibrator(calibration).fit(ops, edges, topology=model)
    new = fitted.model_
    latest = recent[-1].config
    new = new.with_config({k: int(v) for k, v in latest.items() if k in new.config})
    scores = [window_error(new, w, config).score for w in recent]
    return Recalibration(model=new, calibration_trust=float(fitted.trust_), windows=len(recent),
                         in_sample_score=float(np.median(scores)) if scores else math.inf)
