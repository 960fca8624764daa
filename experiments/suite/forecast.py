"""``forecast``: the rolling-origin backtest table over the real traces.

The cases of ``experiments.forecast_table`` (taxi, WC98 during the tournament, AMZN tweets, an
AWS ELB): ``Forecaster(method="auto")`` with a 2-hour horizon against the seasonal-naive
baseline, origins 2 hours apart, refit daily; MASE (scaled by the in-sample seasonal-naive
error), sMAPE and the coverage of the 0.5 and 0.9 quantile forecasts. ``--quick`` scores the
last 12 origins (one day) of each trace instead of 4-14 days.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd

from experiments.harness import ExperimentContext, ExperimentError, ExperimentResult

NAME = "forecast"
DESCRIPTION = "2-hour-ahead rolling-origin backtest of the auto forecaster vs seasonal naive on the real traces"
HEADLINE = ("mase.taxi", "mase.wc98", "mase.amzn", "mase.elb", "beats_naive_mase", "coverage_q0.9.mean")
QUICK_FOLDS = 12


def run(ctx: ExperimentContext) -> ExperimentResult:
    from experiments.forecast_table import CASES, HORIZON_S, QUANTILES, run_case

    if not ctx.traces_dir.is_dir():
        raise ExperimentError("traces directory not found", field="traces_dir", value=str(ctx.traces_dir))
    cases = [replace(c, folds=min(c.folds, QUICK_FOLDS), note=f"{c.note.split(',')[0]}, last {QUICK_FOLDS} "
                     "origins (quick)") if ctx.quick else c for c in CASES]
    rows = []
    steps = ctx.steps(len(cases), "forecast backtests")
    for case in cases:
        steps.advance(f"backtesting {case.name} ({case.folds} origins)")
        bt = run_case(case, ctx.traces_dir)
        rows.append({
            "trace": case.name, "window": case.note, "method": bt.method, "fits": bt.n_fits,
            "origins": bt.folds, "points": bt.n_points, "mase": bt.mase, "smape_pct": bt.smape,
            "coverage_q0.5": bt.coverage[0.5], "coverage_q0.9": bt.coverage[0.9],
            "naive_mase": bt.baseline.mase, "naive_smape_pct": bt.baseline.smape,
            "naive_coverage_q0.9": bt.baseline.coverage[0.9],
            "season": f"{bt.season_steps} x {bt.step_s / 60:g} min",
        })
    steps.close()
    table = pd.DataFrame(rows)
    metrics: dict[str, float] = {}
    for r in rows:
        t = r["trace"]
        metrics[f"mase.{t}"] = r["mase"]
        metrics[f"smape_pct.{t}"] = r["smape_pct"]
        metrics[f"coverage_q0.9.{t}"] = r["coverage_q0.9"]
        metrics[f"naive_mase.{t}"] = r["naive_mase"]
    metrics["beats_naive_mase"] = float(sum(r["mase"] < r["naive_mase"] for r in rows))
    metrics["coverage_q0.9.mean"] = float(table["coverage_q0.9"].mean())
    figure = _plot(table, ctx.workdir / "forecast_mase.png")
    return ExperimentResult(
        params={"horizon_s": HORIZON_S, "quantiles": ",".join(f"{q:g}" for q in QUANTILES),
                "method": "auto", "origins": ",".join(f"{c.name}={c.folds}" for c in cases),
                "traces_dir": str(ctx.traces_dir)},
        metrics=metrics, tables={"backtest": table}, figures={"mase": figure},
        summary=_summary(rows))


def _summary(rows: list[dict]) -> str:
    beats = [r["trace"] for r in rows if r["mase"] < r["naive_mase"]]
    lines = ["2-hour horizon, rolling origin (origins 2 h apart, refit daily); MASE scaled by the "
             "in-sample MAE of the seasonal-naive forecast; coverage = fraction of actuals at or below "
             "the quantile forecast (goal for q0.9: 0.85-0.95).", ""]
    for r in rows:
        cov_ok = 0.85 <= r["coverage_q0.9"] <= 0.95
        lines.append(f"- {r['trace']}: MASE {r['mase']:.3f} vs naive {r['naive_mase']:.3f} "
                     f"({'beats' if r['mase'] < r['naive_mase'] else 'does not beat'} naive), sMAPE "
                     f"{r['smape_pct']:.1f} % vs {r['naive_smape_pct']:.1f} %, q0.9 coverage "
                     f"{r['coverage_q0.9']:.3f} ({'within' if cov_ok else 'outside'} 0.85-0.95).")
    lines.append("")
    lines.append(f"auto beats seasonal naive on MASE on {len(beats)} of {len(rows)} traces"
                 f"{' (' + ', '.join(beats) + ')' if beats else ''}.")
    return "\n".join(lines)


def _plot(table: pd.DataFrame, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    x = range(len(table))
    ax.bar([i - 0.2 for i in x], table["mase"], width=0.4, label="auto")
    ax.bar([i + 0.2 for i in x], table["naive_mase"], width=0.4, label="seasonal naive")
    ax.set_xticks(list(x), table["trace"])
    ax.set_ylabel("MASE (2 h ahead)")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return path
