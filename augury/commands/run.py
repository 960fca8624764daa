"""``augury run --config FILE [--iterations N | --duration D] [--json]``: the control loop.

The TOML config (``docs/control-loop.md``)::

    [job]
    model = "examples/wordcount.yaml"      # model file (relative to the config file)
    state = "augury-state.db"              # SQLite state (action log, blacklist); optional
    [metrics]
    source = "testbed"                     # testbed (simulated job; the loop advances it) | flink
    rate = 1000.0                          # testbed: input rate, tuples/s (or [[metrics.steps]])
    seed = 1
    faults = "faults.yaml"                 # testbed: optional fault file
    # source = "flink": rest_url, job_id or job_name, and any FlinkMetricsConfig field
    # (window_s defaults to intervals.interval_s; a step runs per metric window)
    [actuator]
    kind = "testbed"                       # testbed | dry-run (in-memory, records only) | flink-rest
    # kind = "flink-rest": rest_url (default metrics.rest_url), any LiveActuatorConfig field
    [slo]
    utilization_target = 0.7
    latency_ms = 50.0                      # optional
    latency_stat = "p99"
    [intervals]
    interval_s = 10.0
    [guard]
    advisor = false
    min_parallelism = 1 ...                # every GuardRails field
    [forecast]                             # optional: size for max(offered, forecast) when trusted
    store = "store"                        # history store (its source_rates), or series = "rates.csv"
    quantile = 0.9                         # and any other LoadForecastConfig field
    lookahead_s = 600.0
"""

from __future__ import annotations

import math

import argparse
import json
import sys
from pathlib import Path

from augury.commands._common import parse_duration_s
from augury.errors import UsageError

_SECTIONS = {"job", "metrics", "actuator", "slo", "intervals", "guard", "trust", "reactive", "blacklist",
             "forecast", "decider", "learn"}
DECIDERS = ("model", "reactive", "preemptive")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run", help="run the control loop (collect, evaluate, decide, act) beside a job",
        description="Run augury's control loop with a TOML config; print each decision and its reasons.")
    parser.add_argument("--config", required=True, metavar="FILE", help="TOML config file")
    parser.add_argument("--iterations", type=int, help="stop after N steps")
    parser.add_argument("--duration", help="stop after this much (wall, or simulated for the testbed) time")
    parser.add_argument("--quiet", action="store_true", help="print only steps that decide something")
    parser.add_argument("--json", action="store_true", help="print one JSON object per step (JSON lines)")
    parser.add_argument("--spark-master", default="local[2]", metavar="URL",
                        help="Spark master for the [learn] warm-up's metrics pipeline (default local[2])")
    parser.set_defaults(func=run)


def _fail(path: str, field: str, value, message: str) -> UsageError:
    return UsageError(message, file=path, field=field, value=value)


def _dataclass_from(cls, raw: dict, path: str, section: str, rename: dict | None = None):
    """``cls`` from one section's keys, every key checked for name, type and range (and the
    dataclass's own ``check()``): ``augury.commands._run_schema.build``, the same table the docs
    page ``docs/run-config.md`` is generated from."""
    from augury.commands._run_schema import build

    return build(cls, raw, path, section, rename)


def load_run_config(path: str) -> dict:
    """Parse and check the TOML file; returns the pieces ``run`` needs."""
    from modeler.errors import AuguryError
    from scheduler.deciders import ModelDeciderConfig
    from scheduler.loop import GuardRails, LoopConfig
    from scheduler.reactive import ReactiveConfig
    from scheduler.targets import Targets
    from scheduler.state import BlacklistConfig
    from scheduler.trust import TrustConfig

    from modeler.documents import read_document

    raw = read_document(path, "toml", "run configuration (TOML)", UsageError)
    unknown = sorted(set(raw) - _SECTIONS)
    if unknown:
        raise _fail(path, unknown[0], None, f"unknown section (known: {', '.join(sorted(_SECTIONS))})")
    job = raw.get("job", {})
    if not isinstance(job, dict):
        raise _fail(path, "job", job, "must be a table")
    if "model" not in job:
        raise _fail(path, "job.model", None, "the model file is required")
    for key in ("model", "state"):
        if key in job and (not isinstance(job[key], str) or not job[key].strip() or "\0" in job[key]):
            raise _fail(path, f"job.{key}", job[key], "must be a file name (a non-empty string)")
    base = Path(path).parent
    model_path = str(base / job["model"])
    state = str(base / job["state"]) if "state" in job else None
    slo = raw.get("slo", {})
    intervals = raw.get("intervals", {})
    # [slo] -> Targets (+ the model decider's band keys); [intervals] -> the loop, catch_up_s ->
    # Targets, confirm_windows -> the model decider. Older [reactive] utilization_target /
    # catch_up_s (the reactive policy's own copies, now one Targets) are read as the same keys.
    target_keys = {"utilization_target": "utilization_target", "latency_ms": "latency_slo_ms",
                   "latency_stat": "latency_stat", "headroom": "headroom"}
    model_keys = ("utilization_band", "scale_down_saving", "catch_up_utilization")
    targets_raw, model_raw, loop_kwargs = {}, {}, {}
    for key, value in slo.items():
        if key in target_keys:
            targets_raw[target_keys[key]] = value
        elif key in model_keys:
            model_raw[key] = tuple(value) if isinstance(value, list) else value
        else:
            raise _fail(path, f"slo.{key}", value, "unknown key (known: "
                        + ", ".join(sorted(set(target_keys) | set(model_keys))) + ")")
    for key, value in intervals.items():
        if key in ("interval_s", "evaluate_after_s"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value > 10 * 365 * 86400 \
                    or not math.isfinite(value) or value < 0 or (key == "interval_s" and value <= 0):
                raise _fail(path, f"intervals.{key}", value,
                            f"must be a number of seconds {'> 0' if key == 'interval_s' else '>= 0'} "
                            "and at most 10 years")
            loop_kwargs[key] = float(value)
        elif key == "history_windows":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
                raise _fail(path, f"intervals.{key}", value, "must be an integer from 1 to 1,000,000")
            loop_kwargs[key] = value
        elif key == "catch_up_s":
            targets_raw["catch_up_s"] = value
        elif key == "confirm_windows":
            model_raw[key] = value
        else:
            raise _fail(path, f"intervals.{key}", value, "unknown key (known: catch_up_s, confirm_windows, "
                        "evaluate_after_s, history_windows, interval_s)")
    reactive_raw = dict(raw.get("reactive", {}))
    for key in ("utilization_target", "catch_up_s"):
        if key in reactive_raw:
            value = reactive_raw.pop(key)
            if key in targets_raw and targets_raw[key] != value:
                raise _fail(path, f"reactive.{key}", value, f"disagrees with the one target "
                            f"({'slo' if key == 'utilization_target' else 'intervals'}.{key} = {targets_raw[key]!r})")
            targets_raw[key] = value
    try:
        loop_kwargs["targets"] = _dataclass_from(Targets, targets_raw, path, "slo")
    except AuguryError as err:
        # name the key as the file spells it ([slo] latency_ms, not Targets.latency_slo_ms)
        toml_name = {v: k for k, v in target_keys.items()}
        field = (err.field or "").removeprefix("slo.")
        field = f"slo.{toml_name.get(field, field)}" if field else "slo"
        raise _fail(path, field, err.value, err.message) from None
    loop_kwargs["model"] = _dataclass_from(ModelDeciderConfig, model_raw, path, "slo")
    loop_kwargs["guard"] = _dataclass_from(GuardRails, raw.get("guard", {}), path, "guard")
    loop_kwargs["trust"] = _dataclass_from(TrustConfig, raw.get("trust", {}), path, "trust")
    loop_kwargs["reactive"] = _dataclass_from(ReactiveConfig, reactive_raw, path, "reactive")
    loop_kwargs["blacklist"] = _dataclass_from(BlacklistConfig, raw.get("blacklist", {}), path, "blacklist")
    cfg = LoopConfig(**loop_kwargs)
    if cfg.interval_s <= 0:
        raise _fail(path, "intervals.interval_s", cfg.interval_s, "must be > 0")
    metrics = dict(raw.get("metrics", {}))
    source = metrics.get("source", "testbed")
    if source not in ("testbed", "flink"):
        raise _fail(path, "metrics.source", source, "supported: testbed, flink")
    actuator_raw = dict(raw.get("actuator", {}))
    actuator = actuator_raw.get("kind", "testbed" if source == "testbed" else "flink-rest")
    if actuator not in ("testbed", "dry-run", "flink-rest"):
        raise _fail(path, "actuator.kind", actuator, "supported: testbed, dry-run, flink-rest")
    spec = {"model": model_path, "state": state, "loop": cfg, "metrics": metrics, "actuator": actuator,
            "base": base, "source": source}
    if actuator == "testbed" and source != "testbed":
        raise _fail(path, "actuator.kind", actuator, "the testbed actuator needs the testbed metrics source")
    if actuator == "flink-rest" and source != "flink":
        raise _fail(path, "actuator.kind", actuator, "the flink-rest actuator needs metrics.source = \"flink\"")
    if source == "flink":
        spec.update(_flink_spec(path, metrics, actuator_raw, actuator, cfg))
        if "learn" in raw:
            raise _fail(path, "learn", None, "learning from a warm-up needs the testbed (a live job's model "
                        "comes from `augury calibrate` on its metrics store)")
    else:
        spec.update(_testbed_spec(path, metrics, raw.get("learn"), cfg, actuator))
    decider = dict(raw.get("decider", {}))
    kind = decider.pop("kind", "model")
    if kind not in DECIDERS:
        raise _fail(path, "decider.kind", kind, f"supported: {', '.join(DECIDERS)}")
    if decider:
        raise _fail(path, f"decider.{sorted(decider)[0]}", None, "unknown key (known: kind)")
    spec["decider"] = kind
    if kind == "preemptive":
        spec["forecast"] = None
        spec["preemptive"] = _preemptive_spec(path, base, raw.get("forecast"), model_path,
                                              trace=spec.get("trace") is not None)
    else:
        spec["forecast"] = _forecast_spec(path, base, raw.get("forecast"), model_path)
    return spec


def _history_source(path: str, base: Path, f: dict, model_path: str):
    """``store`` (a history store: its source_rates for ``job``, default the model's) or ``series``
    (a timestamp,value CSV of input rates): a ``read_history()`` callable."""
    from scheduler.forecasting import store_history, series_history

    store, series, job = f.pop("store", None), f.pop("series", None), f.pop("job", None)
    if (store is None) == (series is None):
        raise _fail(path, "forecast.store", store, "give exactly one of forecast.store and forecast.series")
    if store is not None:
        where = base / str(store)
        if not where.is_dir():
            raise _fail(path, "forecast.store", store, "no such store directory")
        if job is None:
            from modeler.modelfile import load_model

            job = load_model(model_path).job
        return store_history(where, str(job))
    where = base / str(series)
    if not where.is_file():
        raise _fail(path, "forecast.series", series, "no such file")
    return series_history(where)


def _testbed_spec(path: str, metrics: dict, learn: dict | None, cfg, actuator: str) -> dict:
    """The testbed source: a constant ``rate`` or ``steps`` (and ``faults``), or a real ``trace``
    replayed time-compressed (``experiments.tracereplay.TraceReplayConfig``; then the loop steps
    once per metrics window of ``intervals.interval_s`` trace seconds). ``[learn]``: augury starts
    from no model and learns one from a warm-up (``experiments.recording.LearnConfig``)."""
    from experiments.recording import LearnConfig
    from experiments.tracereplay import TraceReplayConfig

    out: dict = {"trace": None, "learn": None}
    if learn is not None:
        out["learn"] = _dataclass_from(LearnConfig, learn, path, "learn")
    if "trace" not in metrics:  # the testbed's own keys, as the schema table lists them
        from augury.commands._run_schema import split_section

        try:
            split_section("metrics", metrics, path, {"source": "testbed", "load": "rate"})
        except UsageError as err:
            raise _fail(path, err.field, err.value, err.message + "; or trace, to replay a real trace") from None
        return out
    for key in ("rate", "steps", "faults"):
        if key in metrics:
            raise _fail(path, f"metrics.{key}", metrics[key], "a trace replay takes its load from metrics.trace")
    if actuator != "testbed":
        raise _fail(path, "actuator.kind", actuator, "a trace replay applies its decisions to the testbed")
    out["trace"] = _dataclass_from(TraceReplayConfig, {k: v for k, v in metrics.items() if k != "source"},
                                   path, "metrics")
    return out


def _preemptive_spec(path: str, base: Path, raw: dict | None, model_path: str, trace: bool = False):
    """``[decider] kind = "preemptive"``: ``[forecast]`` holds the history (``store`` or ``series``;
    in a trace replay the trace before ``metrics.start``) and any
    ``scheduler.deciders.PreemptiveConfig`` field. Returns (config, read_history or None)."""
    from scheduler.deciders import PreemptiveConfig

    f = dict(raw or {})
    if trace:
        for key in ("store", "series", "job"):
            if key in f:
                raise _fail(path, f"forecast.{key}", f[key], "in a trace replay the history is the trace "
                            "before metrics.start")
        read_history = None
    elif not raw:
        raise _fail(path, "forecast", None, "the pre-emptive decider needs a [forecast] section "
                    "with store or series")
    else:
        read_history = _history_source(path, base, f, model_path)
    config = _dataclass_from(PreemptiveConfig, f, path, "forecast")
    if not 0 < config.quantile < 1:
        raise _fail(path, "forecast.quantile", config.quantile, "must lie strictly between 0 and 1")
    for name in ("forecast_step_s", "horizon_s", "replan_s", "refit_s"):
        v = getattr(config, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise _fail(path, f"forecast.{name}", v, "must be a number > 0")
    if not isinstance(config.max_reconfigurations_per_day, int) or config.max_reconfigurations_per_day < 1:
        raise _fail(path, "forecast.max_reconfigurations_per_day", config.max_reconfigurations_per_day,
                    "must be an integer >= 1")
    from scheduler.schedule import SOLVERS

    r = config.reserved_reconfigurations
    if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < config.max_reconfigurations_per_day:
        raise _fail(path, "forecast.reserved_reconfigurations", r,
                    "must be an integer >= 0 and below max_reconfigurations_per_day")
    if config.solver not in SOLVERS:
        raise _fail(path, "forecast.solver", config.solver, f"must be one of {', '.join(SOLVERS)}")
    return config, read_history


def build_decider(spec: dict):
    """The primary decider of a run config: model (default), reactive only, or pre-emptive."""
    from scheduler.deciders import ModelDecider, PreemptiveDecider, ReactiveDecider

    cfg = spec["loop"]
    if spec["decider"] == "reactive":
        return ReactiveDecider(cfg.reactive, cfg.guard.scale_down_delay_s)
    if spec["decider"] == "preemptive":
        config, read_history = spec["preemptive"]
        return PreemptiveDecider(config, read_history, floor=ModelDecider(cfg.model))
    return ModelDecider(cfg.model, load_forecast=spec["forecast"])


def _forecast_spec(path: str, base: Path, raw: dict | None, model_path: str):
    """``[forecast]``: ``store`` (history store directory; ``job`` defaults to the model's job) or
    ``series`` (a timestamp,value CSV of input rates, tuples/s), plus LoadForecastConfig fields.
    Returns the loop's ``load_forecast`` callable or None."""
    if not raw:
        return None
    from scheduler.forecasting import HistoryLoadForecast, LoadForecastConfig

    f = dict(raw)
    if ("store" in f) == ("series" in f):  # checked before the settings, as before
        raise _fail(path, "forecast.store", f.get("store"), "give exactly one of forecast.store and forecast.series")
    config = _dataclass_from(LoadForecastConfig, {k: v for k, v in f.items() if k not in ("store", "series", "job")},
                             path, "forecast")
    try:
        config.check()
    except Exception as err:  # SchedulerError names the field
        raise _fail(path, getattr(err, "field", "forecast"), getattr(err, "value", None),
                    getattr(err, "message", str(err))) from None
    return HistoryLoadForecast(_history_source(path, base, f, model_path), config)


def _flink_spec(path: str, metrics: dict, actuator_raw: dict, actuator: str, cfg) -> dict:
    """The live Flink source / actuator settings: ``metrics.rest_url`` (required), ``job_id`` or
    ``job_name`` (one of them), FlinkMetricsConfig fields; ``actuator.rest_url`` and
    LiveActuatorConfig fields (flink-rest) or ``out`` (dry-run)."""
    from scheduler.flink import FlinkMetricsConfig, LiveActuatorConfig

    m = {k: v for k, v in metrics.items() if k != "source"}
    rest_url = m.pop("rest_url", None)
    if not isinstance(rest_url, str) or not rest_url.startswith(("http://", "https://")):
        raise _fail(path, "metrics.rest_url", rest_url, "the Flink REST URL (http://host:port) is required")
    job_id, job_name = m.pop("job_id", None), m.pop("job_name", None)
    if (job_id is None) == (job_name is None):
        raise _fail(path, "metrics.job_id", job_id, "give exactly one of metrics.job_id and metrics.job_name")
    m.setdefault("window_s", cfg.interval_s)
    metrics_cfg = _dataclass_from(FlinkMetricsConfig, m, path, "metrics")
    if metrics_cfg.mode not in ("counters", "rates"):
        raise _fail(path, "metrics.mode", metrics_cfg.mode, "supported: counters, rates")
    if not metrics_cfg.window_s > 0:
        raise _fail(path, "metrics.window_s", metrics_cfg.window_s, "must be > 0")
    a = {k: v for k, v in actuator_raw.items() if k != "kind"}
    actuator_url = a.pop("rest_url", rest_url)
    out = a.pop("out", None) if actuator == "dry-run" else None
    actuator_cfg = _dataclass_from(LiveActuatorConfig, a, path, "actuator") if actuator == "flink-rest" else None
    if actuator == "dry-run" and a:
        raise _fail(path, f"actuator.{sorted(a)[0]}", None, "unknown key (known: kind, out)")
    return {"flink": {"rest_url": rest_url, "job_id": job_id, "job_name": job_name, "metrics": metrics_cfg,
                      "actuator_url": actuator_url, "actuator": actuator_cfg, "out": out}}


def run(args: argparse.Namespace) -> int:
    spec = load_run_config(args.config)
    if args.iterations is not None and args.iterations < 1:
        raise UsageError("must be >= 1", field="--iterations", value=args.iterations)
    duration = parse_duration_s(args.duration, "--duration") if args.duration else None
    if spec["source"] == "flink":
        return _run_flink(args, spec, duration)

    from experiments.testbed import PiecewiseRate, Testbed, TestbedConfig, load_faults
    from modeler.modelfile import load_model
    from scheduler.interfaces import InMemoryActuator
    from scheduler.loop import ControlLoop, format_step
    from scheduler.state import InMemoryStateStore, SQLiteStateStore
    if spec["trace"] is not None:
        return _run_trace(args, spec, duration)
    if args.iterations is None and duration is None:
        raise UsageError("the testbed source needs a bound: --iterations N or --duration D", field="--iterations")
    model = load_model(spec["model"])
    m = spec["metrics"]
    if "steps" in m:
        times = tuple(float(s["at_s"]) for s in m["steps"])
        load = PiecewiseRate(times, tuple(float(s["rate"]) for s in m["steps"]))
    else:
        load = float(m.get("rate", 1000.0))
    faults = load_faults(str(spec["base"] / m["faults"])) if m.get("faults") else ()
    tb = Testbed(model, load, TestbedConfig(seed=int(m.get("seed", 0)), restart_s=float(m.get("restart_s", 10.0))),
                 faults=faults)
    actuator = tb if spec["actuator"] == "testbed" else InMemoryActuator(tb.current())
    store = SQLiteStateStore(spec["state"]) if spec["state"] else InMemoryStateStore()
    known, _ = _learned(args, spec, model)
    loop = ControlLoop(known, tb, actuator, spec["loop"], store=store, decider=build_decider(spec))
    sim_clock = lambda: tb.now_s  # noqa: E731 - the testbed's time is simulated

    def show(step):
        if args.json:
            sys.stdout.write(json.dumps(step.to_dict(), default=str) + "\n")
        elif not args.quiet or step.decision.kind not in ("none", "hold"):
            print(format_step(step), flush=True)

    loop.run(iterations=args.iterations, duration_s=duration, wait=tb.advance, on_step=show, clock=sim_clock)
    return 0


def _learned(args: argparse.Namespace, spec: dict, truth):
    """augury's model: the testbed's own model file (no ``[learn]``), or one learned from a warm-up
    recording of the simulated job through ingest -> Spark -> calibrate (``[learn]``; the model
    file then only runs the testbed). Returns ``(model, calibration figures or None)``."""
    learn = spec.get("learn")
    if learn is None:
        return truth, None
    from experiments.recording import learn_model_following_advice
    from history.spark import spark_session
    from modeler.modelfile import dump_model

    workdir = spec["base"] / learn.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"learning the model: {6 * learn.seconds:g} simulated seconds of warm-up -> ingest -> Spark -> "
          f"calibrate ({workdir})", file=sys.stderr, flush=True)
    # an operator the warm-up leaves too idle to measure: recorded again as calibration advises
    model, calibration, how = learn_model_following_advice(truth, workdir, seed=learn.seed, seconds=learn.seconds,
                                                           spark=spark_session(master=args.spark_master))
    if how != "warm-up":
        print(f"learning the model: {how}", file=sys.stderr, flush=True)
    (workdir / "learned_model.yaml").write_text(dump_model(model))
    return model, calibration


def _run_trace(args: argparse.Namespace, spec: dict, duration: float | None) -> int:
    """A real trace day replayed on the testbed (``experiments.tracereplay``), the loop stepping
    once per metrics window; prints the steps, then one JSON object ``{"summary": {...}}``:
    SLO-violation minutes (of which restarts / load), instance-hours, reconfigurations, windows,
    days, the calibration figures of a learned model."""
    import pandas as pd

    from experiments.replay import ReplayConfig, preemptive_decider
    from experiments.tracereplay import prepare, replay_augury, resolve_trace, summary
    from scheduler.deciders import PreemptiveConfig
    from modeler.modelfile import load_model
    from scheduler.loop import format_step
    from scheduler.state import InMemoryStateStore, SQLiteStateStore

    if args.iterations is not None or duration is not None:
        raise UsageError("a trace replay runs metrics.days of the trace; set that instead",
                         field="--iterations" if args.iterations is not None else "--duration",
                         value=args.iterations if args.iterations is not None else args.duration)
    trace, loop_cfg = spec["trace"], spec["loop"]
    truth = load_model(spec["model"])
    path = resolve_trace(trace.trace, spec["base"])
    targets = loop_cfg.targets
    decider_kind = spec["decider"]
    # the history's grid (only the pre-emptive decider reads it) and the SLO windows are scored
    # against: the configured ones, else the defaults of PreemptiveConfig and ReplayConfig
    forecast_step_s = (spec["preemptive"][0] if decider_kind == "preemptive" else PreemptiveConfig()).forecast_step_s
    prepared = prepare(truth, path, trace, window_s=loop_cfg.interval_s / trace.speedup,
                       forecast_step_s=forecast_step_s, utilization_target=targets.utilization_target,
                       latency_slo_ms=targets.latency_slo_ms if targets.latency_slo_ms is not None
                       else ReplayConfig().latency_slo_ms)
    model, calibration = _learned(args, spec, truth)
    if decider_kind == "preemptive":
        decider = preemptive_decider(spec["preemptive"][0], prepared.history, prepared.day0, loop_cfg.model)
    else:
        decider = lambda bed, cfg: build_decider(spec)  # noqa: E731 - the same decider, built per replay

    def show(step, view):
        when = (prepared.day0 + pd.Timedelta(seconds=view.now_s)).strftime("%Y-%m-%d %H:%M")
        if args.json:
            sys.stdout.write(json.dumps({"trace_time": when, **step.to_dict()}, default=str) + "\n")
        elif not args.quiet or step.decision.kind not in ("none", "hold"):
            print(f"[{when}] {format_step(step)}", flush=True)

    store = SQLiteStateStore(spec["state"]) if spec["state"] else InMemoryStateStore()
    result, _ = replay_augury(model, truth, prepared, loop_cfg, decider, store=store, on_step=show)
    out = {**summary(result, trace.days), "trace": str(trace.trace), "start": str(prepared.day0),
           "decider": decider_kind, "learned": calibration is not None}
    if calibration is not None:
        out["calibration"] = calibration
    sys.stdout.write(json.dumps({"summary": out}, default=float) + "\n")
    sys.stdout.flush()
    return 0


def _shower(args):
    from scheduler.loop import format_step

    def show(step):
        if args.json:
            sys.stdout.write(json.dumps(step.to_dict(), default=str) + "\n")
            sys.stdout.flush()
        elif not args.quiet or step.decision.kind not in ("none", "hold"):
            print(format_step(step), flush=True)
    return show


def _run_flink(args: argparse.Namespace, spec: dict, duration: float | None) -> int:
    """The loop beside a live Flink job: the metrics source blocks until the next complete window,
    so the loop steps once per metric window (no extra wait); wall-clock ``--duration``; neither
    bound = until interrupted."""
    import time

    from modeler.modelfile import load_model
    from scheduler.actuators import DryRunActuator
    from scheduler.flink import FlinkMetricsSource, LiveFlinkActuator, find_job
    from scheduler.loop import ControlLoop
    from scheduler.state import InMemoryStateStore, SQLiteStateStore

    f = spec["flink"]
    model = load_model(spec["model"])
    job_id = f["job_id"] or find_job(f["rest_url"], f["job_name"], timeout_s=f["metrics"].timeout_s)
    source = FlinkMetricsSource(f["rest_url"], job_id, f["metrics"])
    graph = source.graph()  # MetricsUnavailable (exit 3) when the cluster or the job is gone
    unknown = sorted(set(graph.config()) - set(model.config))
    if unknown:
        raise UsageError("the Flink job has an operator the model does not know (operator names must "
                         "match the vertices' first operator)", file=spec["model"], field="operators",
                         value=unknown[0])
    if spec["actuator"] == "flink-rest":
        actuator = LiveFlinkActuator(f["actuator_url"], job_id, f["actuator"])
    else:
        actuator = DryRunActuator(graph.config(), out=str(spec["base"] / f["out"]) if f["out"] else sys.stderr)
    store = SQLiteStateStore(spec["state"]) if spec["state"] else InMemoryStateStore()
    loop = ControlLoop(model, source, actuator, spec["loop"], store=store, decider=build_decider(spec))
    loop.run(iterations=args.iterations, duration_s=duration, wait=lambda s: None, on_step=_shower(args),
             clock=time.monotonic)
    return 0
