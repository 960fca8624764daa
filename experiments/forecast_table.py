"""The forecast backtest table on the bundled real traces (``experiments.bundled``).

    python -m experiments.forecast_table [--traces DIR] [--write-docs docs/forecast.md]
                                         [--other-windows] [--no-track]

For each trace: a rolling-origin backtest of ``Forecaster(method="auto")`` with a 2-hour
horizon against the seasonal naive baseline (``modeler.forecast.backtest``), refitting once
a day. The traces and windows:

- ``taxi``: NYC taxi passengers, 30 min, all of it; the last 7 days are scored (84 origins).
- ``amzn``: tweets about AMZN, 5 min, all of it; the last 7 days are scored (84 origins).
- ``elb``: an AWS ELB's request count, 5 min, all 14 days; the last 4 days are scored.
- ``wc98``: World Cup 1998 requests per minute, aggregated to 15-minute means, during the
  tournament: 1998-06-10 00:00 to 1998-07-12 23:59 GMT (opening match to the final);
  the last 14 days (round of 16 to the final) are scored (168 origins).

Each backtest is logged to mlflow (``experiments.tracking``) unless ``--no-track``.
``--write-docs FILE`` replaces the table between the ``forecast-table`` markers in FILE
(and, with ``--other-windows``, the ``OTHER_WINDOWS`` table between the
``forecast-other-windows`` markers).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from experiments import bundled
from history.series import load_series
from modeler.forecast import Backtest, Forecaster, backtest, resample

TRACES = bundled.traces_dir()
HORIZON_S = 7200.0
QUANTILES = (0.5, 0.9)
START, END = "<!-- forecast-table:start -->", "<!-- forecast-table:end -->"


@dataclass(frozen=True)
class TraceCase:
    """One trace and how it is backtested."""

    name: str
    """Short name in the table."""
    file: str
    """File name under the traces directory."""
    folds: int
    """Backtest origins (2 hours apart: the scored stretch is folds x 2 h)."""
    step_s: float | None = None
    """Aggregate to this step (mean per bucket) first; ``None`` keeps the native step."""
    start: str | None = None
    """First timestamp used (inclusive); ``None`` = from the start."""
    end: str | None = None
    """Last timestamp used (inclusive); ``None`` = to the end."""
    note: str = ""
    """What the window is."""


CASES = (
    TraceCase("taxi", "nab_nyc_taxi.csv", folds=84, note="30 min, last 7 days scored"),
    TraceCase("wc98", "wc98_requests_per_minute.csv", folds=168, step_s=900.0,
              start="1998-06-10 00:00", end="1998-07-12 23:59",
              note="15-min means, 1998-06-10..07-12 (tournament), last 14 days scored"),
    TraceCase("amzn", "nab_Twitter_volume_AMZN.csv", folds=84, note="5 min, last 7 days scored"),
    TraceCase("elb", "nab_elb_request_count_8c0756.csv", folds=48, note="5 min, last 4 days scored"),
)


# the same forecaster on other windows and steps: how much the headline rows depend on them
OTHER_WINDOWS = (
    TraceCase("taxi", "nab_nyc_taxi.csv", folds=84, end="2015-01-17 23:59",
              note="30 min, 7 days to 2015-01-17"),
    TraceCase("taxi", "nab_nyc_taxi.csv", folds=84, end="2014-12-20 23:59",
              note="30 min, 7 days to 2014-12-20"),
    TraceCase("taxi", "nab_nyc_taxi.csv", folds=84, end="2014-11-08 23:59",
              note="30 min, 7 days to 2014-11-08"),
    TraceCase("amzn", "nab_Twitter_volume_AMZN.csv", folds=84, end="2015-04-15 23:59",
              note="5 min, 7 days to 2015-04-15"),
    TraceCase("amzn", "nab_Twitter_volume_AMZN.csv", folds=84, end="2015-04-01 23:59",
              note="5 min, 7 days to 2015-04-01"),
    TraceCase("wc98", "wc98_requests_per_minute.csv", folds=84, step_s=300.0,
              start="1998-06-10 00:00", end="1998-07-12 23:59",
              note="5-min means, tournament, last 7 days"),
    TraceCase("wc98", "wc98_requests_per_minute.csv", folds=168, step_s=1800.0,
              start="1998-06-10 00:00", end="1998-07-12 23:59",
              note="30-min means, tournament, last 14 days"),
)
OTHER_START, OTHER_END = "<!-- forecast-other-windows:start -->", "<!-- forecast-other-windows:end -->"


def load_case(case: TraceCase, traces_dir: Path = TRACES) -> pd.Series:
    series = load_series(Path(traces_dir) / case.file)
    if case.start or case.end:
        series = series.loc[case.start:case.end]
    if case.step_s:
        series = resample(series, case.step_s)
    return series


def run_case(case: TraceCase, traces_dir: Path = TRACES,
             forecaster: Forecaster | None = None) -> Backtest:
    series = load_case(case, traces_dir)
    forecaster = forecaster or Forecaster(method="auto", horizon_s=HORIZON_S)
    return backtest(series, forecaster, folds=case.folds, quantiles=QUANTILES)


def markdown(results: list[tuple[TraceCase, Backtest]]) -> str:
    head = ("| trace | window | method (fits) | MASE | sMAPE % | cov q0.5 | cov q0.9 "
            "| naive MASE | naive sMAPE % | naive cov q0.9 | season |")
    lines = [head, "|" + "---|" * 11]
    for case, bt in results:
        lines.append(
            f"| {case.name} | {case.note} | {bt.method} ({bt.n_fits}) | {bt.mase:.3f} "
            f"| {bt.smape:.1f} | {bt.coverage[0.5]:.3f} | {bt.coverage[0.9]:.3f} "
            f"| {bt.baseline.mase:.3f} | {bt.baseline.smape:.1f} | {bt.baseline.coverage[0.9]:.3f} "
            f"| {bt.season_steps} x {bt.step_s / 60:g} min |")
    return "\n".join(lines)


def _track(case: TraceCase, bt: Backtest) -> None:
    from experiments import tracking

    with tracking.start_run("forecast", run_name=f"backtest {case.name}",
                            tags={"command": "forecast_table", "kind": "backtest"}):
        tracking.log_params({"trace": case.file, "window": case.note, "folds": case.folds,
                             "step_s": bt.step_s, "horizon_s": HORIZON_S, "method": bt.method,
                             "season_steps": bt.season_steps})
        tracking.log_metrics({"mase": bt.mase, "smape": bt.smape, "coverage": bt.coverage,
                              "baseline": {"mase": bt.baseline.mase, "smape": bt.baseline.smape,
                                           "coverage": bt.baseline.coverage}})
        tracking.log_dict(bt.as_dict(), "backtest.json")


def write_docs(path: Path, table: str, start: str = START, end: str = END) -> None:
    text = path.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{path}: no {start} ... {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{start}\n{table}\n{end}{tail}")


def _run_all(cases, traces: Path, track: bool) -> list[tuple[TraceCase, Backtest]]:
    results = []
    for case in cases:
        started = time.perf_counter()
        bt = run_case(case, traces)
        print(f"{case.name} ({case.note}): {time.perf_counter() - started:.1f} s", file=sys.stderr)
        if track:
            _track(case, bt)
        results.append((case, bt))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--write-docs", type=Path, default=None)
    parser.add_argument("--no-track", action="store_true")
    parser.add_argument("--other-windows", action="store_true",
                        help="also backtest the other windows (OTHER_WINDOWS)")
    args = parser.parse_args(argv)
    table = markdown(_run_all(CASES, args.traces, not args.no_track))
    print(table)
    print("\nHorizon 2 h, rolling origin (origins 2 h apart, refit daily); MASE scaled by the "
          "in-sample MAE of the seasonal naive forecast at the season shown; coverage = fraction "
          "of actuals at or below the quantile forecast.")
    if args.write_docs:
        write_docs(args.write_docs, table)
    if args.other_windows:
        other = markdown(_run_all(OTHER_WINDOWS, args.traces, not args.no_track))
        print("\nOther windows:\n" + other)
        if args.write_docs:
            write_docs(args.write_docs, other, OTHER_START, OTHER_END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
