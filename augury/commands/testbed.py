"""``augury testbed run MODEL --rate R | --trace FILE [--speedup X] --duration D [--config op=p,...]
[--faults FILE] --out DIR [--seed N]``: run the simulated job and write its metrics."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from augury.commands._common import parse_config, parse_duration_s, parse_positive_float, print_json
from augury.errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "testbed", help="simulate a job tuple by tuple (the ground truth)",
        description="The testbed: a tuple-level simulator of a stream-processing job.",
    )
    sub = parser.add_subparsers(dest="testbed_command", metavar="SUBCOMMAND")
    run_p = sub.add_parser("run", help="run a job at a rate or over a trace; write metrics",
                           description="Simulate MODEL and write metrics (Parquet + CSV), events "
                                       "and a summary into DIR. See docs/testbed.md.")
    run_p.add_argument("model", metavar="MODEL", help="model file (YAML or JSON)")
    load = run_p.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", help="constant Poisson input rate, tuples/s")
    load.add_argument("--trace", metavar="FILE", help="rate trace CSV (time, count per interval)")
    run_p.add_argument("--speedup", default="1",
                       help="trace time compression: simulated t s replays trace t*X s (rates kept)")
    run_p.add_argument("--peak-rate", help="scale the trace so its peak in the replayed span is this, tuples/s")
    run_p.add_argument("--trace-start", help="trace timestamp replayed at simulated time 0 (default: its first)")
    run_p.add_argument("--duration", required=True, help="simulated time: 30s, 10m, 2h")
    run_p.add_argument("--config", help="parallelism overrides: op=p[,op=p...]")
    run_p.add_argument("--faults", metavar="FILE", help="fault file (YAML/JSON), see docs/testbed.md")
    run_p.add_argument("--settings", metavar="FILE",
                       help="testbed settings (YAML/JSON): service_distribution, queue_capacity, "
                            "network delay, shuffle, contention, per-operator overrides... "
                            "(TestbedConfig fields, see docs/testbed.md); flags win over the file")
    run_p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    run_p.add_argument("--seed", default=None,
                       help="random seed (same seed, same metrics; default: the settings file's, else 0)")
    run_p.add_argument("--window", default=None,
                       help="metrics window (default: the settings file's window_s, else 10s)")
    run_p.add_argument("--queue", help="input queue capacity per instance, tuples (default 1000)")
    run_p.add_argument("--restart", help="reconfiguration downtime (default 10s)")
    run_p.add_argument("--no-progress", action="store_true", help="no progress bar")
    run_p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    run_p.set_defaults(func=run)
    parser.set_defaults(func=_help(parser))


def _help(parser):
    def show(args) -> int:
        parser.print_help()
        return 2
    return show


def _int(text: str, flag: str, minimum: int, maximum: int | None = None) -> int:
    from modeler.limits import check_number

    return int(check_number(text, flag, minimum=minimum, maximum=maximum, integer=True))


def _check_windows(duration_s: float, window_s: float, field: str, shown, file: str | None = None) -> None:
    """The window and the number of windows within the documented limits (before the simulation
    allocates anything)."""
    from modeler.limits import MAX_WINDOWS, MIN_WINDOW_S

    if window_s < MIN_WINDOW_S:
        raise UsageError(f"must be >= {MIN_WINDOW_S * 1000:g} ms (the documented limit)", file=file, field=field,
                         value=shown)
    if duration_s / window_s > MAX_WINDOWS:
        raise UsageError(f"--duration / window is more than {MAX_WINDOWS:,} windows (the documented limit)",
                         file=file, field=field, value=shown)


def run(args: argparse.Namespace) -> int:
    from experiments.testbed import Testbed, TestbedConfig, load_faults, load_trace
    from experiments.testbed.config import load_testbed_config
    from experiments.testbed.output import summary, write_outputs
    from modeler.limits import MAX_QUEUE
    from modeler.modelfile import load_model

    duration = parse_duration_s(args.duration, "--duration")
    if duration <= 0:
        raise UsageError("must be > 0", field="--duration", value=args.duration)
    # --seed and --window override the settings file only when given (the file's values were
    # silently replaced by the flags' defaults).
    kwargs = {}
    if args.window is not None:
        kwargs["window_s"] = parse_duration_s(args.window, "--window")
        _check_windows(duration, kwargs["window_s"], "--window", args.window)
    if args.seed is not None:
        kwargs["seed"] = _int(args.seed, "--seed", 0, 2**63 - 1)
    speedup = parse_positive_float(args.speedup, "--speedup")
    if speedup <= 0:
        raise UsageError("must be > 0", field="--speedup", value=args.speedup)
    config = parse_config(args.config)
    if args.queue is not None:
        kwargs["queue_capacity"] = _int(args.queue, "--queue", 1, MAX_QUEUE)
    if args.restart is not None:
        kwargs["restart_s"] = parse_duration_s(args.restart, "--restart")
    from history.files import check_writable

    model = load_model(args.model)
    check_writable(Path(args.out) / "summary.json", "--out")  # before the simulation, not after it
    if args.trace:
        peak = parse_positive_float(args.peak_rate, "--peak-rate") if args.peak_rate else None
        load = load_trace(args.trace, speedup=speedup, peak_rate=peak, start=args.trace_start,
                          duration_s=duration)
    else:
        if args.peak_rate or args.trace_start or args.speedup != "1":
            raise UsageError("--speedup, --peak-rate and --trace-start need --trace", field="--rate",
                             value=args.rate)
        load = parse_positive_float(args.rate, "--rate")
    faults = load_faults(args.faults) if args.faults else ()
    settings = load_testbed_config(args.settings, model, **kwargs) if args.settings else TestbedConfig(**kwargs)
    if args.window is None:
        _check_windows(duration, settings.window_s, "window_s", settings.window_s, file=args.settings)
    testbed = Testbed(model, load, settings, faults=faults, parallelism=config,
                      faults_file=args.faults)

    start = time.perf_counter()
    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=round(duration), unit="sim s", desc=f"testbed {model.job}", leave=False)

    def progress(now_s: float) -> None:
        if bar is not None:
            bar.n = min(round(now_s), bar.total)
            bar.refresh()

    try:
        testbed.run_until(duration, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - start
    paths = write_outputs(testbed, args.out, wall)
    info = summary(testbed, wall)
    if args.json:
        print_json({**info, "files": paths})
    else:
        lat = info["latency_ms"]
        print(f"{model.job}: {info['simulated_s']:g} simulated s in {wall:.1f} s wall, "
              f"{info['hops']:,} hops ({info['hops'] / max(wall, 1e-9):,.0f}/s), "
              f"{info['windows']} windows")
        if lat["count"]:
            print(f"latency ms: mean {lat['mean']:.3f}  p50 {lat['p50']:.3f}  p95 {lat['p95']:.3f}  "
                  f"p99 {lat['p99']:.3f}")
        print(f"wrote {paths['metrics_parquet']}, {paths['metrics_csv']}, {paths['events']}, "
              f"{paths['summary']}")
    return 0
