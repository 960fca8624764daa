"""Benchmark: fit + forecast time per method on one week of 5-minute data (2,016 points).

    python -m experiments.bench.bench_forecast [--repeat 5] [--traces DIR]

The series is the last week of the AMZN tweet trace (bundled, ``experiments.bundled``; ``--traces``
points elsewhere), or a synthetic daily-seasonal series when that directory has no such trace. For each method: the median wall time of
``Forecaster(method=...).fit(week)`` followed by ``.forecast(24, (0.5, 0.9))`` (2 hours), and
of the cheap path a control loop takes between refits, ``result.update(newer).forecast(24)``.
Figures are printed, not asserted (no timed assertions in tests).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import bundled
from modeler.forecast import Forecaster

TRACES = bundled.traces_dir()
METHODS = ("seasonal-naive", "autoreg", "holt-winters", "theta", "auto")
WEEK = 7 * 288


def week_of_data(traces: Path) -> tuple[pd.Series, str]:
    path = traces / "nab_Twitter_volume_AMZN.csv"
    if path.is_file():
        from history.series import load_series

        return load_series(path).iloc[-(WEEK + 12):], f"{path.name}, last week"
    rng = np.random.default_rng(0)
    t = np.arange(WEEK + 12)
    y = 100 * np.exp(0.5 * np.sin(2 * np.pi * t / 288) + rng.normal(0, 0.2, t.size))
    idx = pd.date_range("2024-01-01", periods=t.size, freq="5min")
    return pd.Series(y, index=idx), "synthetic daily cycle"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--traces", type=Path, default=TRACES)
    args = parser.parse_args(argv)
    series, what = week_of_data(args.traces)
    week, newer = series.iloc[:WEEK], series
    Forecaster(method="autoreg").fit(week)  # warm up imports
    print(f"# {len(week)} points of 5-min data ({what}); horizon 24 steps (2 h); "
          f"median of {args.repeat} runs")
    print(f"{'method':<16} {'fit+forecast ms':>16} {'update+forecast ms':>19}  chosen")
    for method in METHODS:
        fit_ms, upd_ms = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            result = Forecaster(method=method).fit(week)
            result.forecast(24, quantiles=(0.5, 0.9))
            t1 = time.perf_counter()
            result.update(newer).forecast(24, quantiles=(0.5, 0.9))
            t2 = time.perf_counter()
            fit_ms.append(1000 * (t1 - t0))
            upd_ms.append(1000 * (t2 - t1))
        print(f"{method:<16} {statistics.median(fit_ms):>16.0f} {statistics.median(upd_ms):>19.1f}"
              f"  {result.method}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
