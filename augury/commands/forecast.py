"""``augury forecast``: quantile forecast of a rate series, or a rolling-origin backtest.

    augury forecast SERIES --horizon 2h [--time-col C --value-col C] [--quantiles 0.5,0.9]
                    [--method auto|seasonal-naive|autoreg|holt-winters|theta]
                    [--step 15m] [--season N] [--json] [--plot FILE.png]
    augury forecast SERIES --backtest --horizon 2h [--folds N] [--json] [--plot FILE.png]

SERIES is a CSV file of timestamps and values. The forecast prints one row per future grid
point: timestamp, point (median) forecast, one column per quantile. The backtest prints the
method, MASE (scaled by the in-sample seasonal naive error at the season shown), sMAPE,
coverage ({quantile: fraction of actuals at or below it}) and the same for the seasonal
naive baseline. Each run is logged to mlflow (``experiments.tracking``) unless
``--no-track``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from augury.commands._common import print_json
from augury.commands._series import (METHOD_CHOICES, add_series_flags, check_plot_path,  # noqa: F401
                                     horizon_s as _horizon_s, horizon_steps as _horizon_steps,
                                     positive_int as _positive_int, read_regular_series,
                                     save_plot, series_options)
from augury.errors import UsageError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "forecast", help="forecast a rate series with quantiles, or backtest the forecaster",
        description=__doc__.splitlines()[0])
    p.add_argument("series", metavar="SERIES", help="CSV file: a time column and a value column")
    p.add_argument("--horizon", required=True, help="how far ahead, e.g. 30m, 2h, 1d")
    add_series_flags(p)
    p.add_argument("--quantiles", default="0.5,0.9", help="comma-separated, in (0, 1) (default 0.5,0.9)")
    p.add_argument("--backtest", action="store_true", help="rolling-origin backtest instead")
    p.add_argument("--folds", default="50", help="backtest origins (default 50, a horizon apart)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="save a plot")
    p.add_argument("--no-track", action="store_true", help="do not log the run to mlflow")
    p.set_defaults(func=run)


def _quantiles(text: str) -> tuple[float, ...]:
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            q = float(part)
        except ValueError:
            raise UsageError("expected numbers in (0, 1), comma-separated",
                             field="--quantiles", value=part) from None
        if not (0.0 < q < 1.0):
            raise UsageError("a quantile must lie strictly between 0 and 1",
                             field="--quantiles", value=part)
        out.append(q)
    if not out:
        raise UsageError("give at least one quantile", field="--quantiles", value=text)
    return tuple(sorted(set(out)))


def run(args: argparse.Namespace) -> int:
    from modeler.errors import ForecastError
    from modeler.forecast import Forecaster, backtest
    from modeler.limits import MAX_FOLDS

    horizon_s = _horizon_s(args)
    quantiles = _quantiles(args.quantiles)
    folds = _positive_int(args.folds, "--folds", MAX_FOLDS)
    step_s, season = series_options(args)
    check_plot_path(args.plot)

    reg = read_regular_series(args.series, args.time_col, args.value_col, step_s)
    try:
        horizon_steps = _horizon_steps(horizon_s, reg.step_s)
        forecaster = Forecaster(method=args.method, season_length=season,
                                horizon_s=horizon_steps * reg.step_s)
        if args.backtest:
            result = backtest(reg, forecaster, horizon_steps=horizon_steps, folds=folds,
                              quantiles=quantiles)
        else:
            fitted = forecaster.fit(reg)
            result = fitted.forecast(horizon_steps, quantiles=quantiles)
    except ForecastError as err:
        raise err.with_file(args.series)

    if args.backtest:
        payload = _backtest_payload(result, args.series)
        figure = _backtest_figure(result, quantiles) if (args.plot or not args.no_track) else None
    else:
        payload = _forecast_payload(fitted, result, args.series, horizon_s)
        figure = _forecast_figure(reg, fitted, result) if (args.plot or not args.no_track) else None
    if args.plot:
        save_plot(figure, args.plot)
    if args.json:
        print_json(payload)
    elif args.backtest:
        _print_backtest(payload)
    else:
        _print_forecast(payload, quantiles)
    if not args.no_track:  # after the answer is printed: a tracking store that cannot be reached is
        sys.stdout.flush()  # then exit 3 with one line (the answer is not lost, the failure not hidden)
        _track(args, payload, figure, quantiles, horizon_s)
    return 0


# --------------------------------------------------------------------------- payloads


def _qname(q: float) -> str:
    return f"q{q:g}"


def _forecast_payload(fitted, fc, path: str, horizon_s: float) -> dict:
    frame = fc.to_frame()
    rows = []
    for stamp, row in frame.iterrows():
        item = {"timestamp": stamp.isoformat()}
        item.update({k: float(v) for k, v in row.items()})
        rows.append(item)
    s = fitted.seasonality
    return {
        "series": path, "method": fitted.method, "requested_method": fitted.forecaster.method,
        "step_s": fitted.step_s, "horizon_s": horizon_s, "horizon_steps": len(rows),
        "season_steps": s.season_steps, "weekly": s.weekly,
        "acf_daily": s.acf_daily, "acf_weekly": s.acf_weekly,
        "n_obs": fitted.n_obs, "n_missing": fitted.n_missing,
        "validation_mase": fitted.selection, "validation_origins": fitted.validation_origins,
        "quantiles": [float(q) for q in fc.quantiles.columns], "forecast": rows,
    }


def _backtest_payload(bt, path: str) -> dict:
    out = {"series": path}
    out.update(bt.as_dict())
    out["mase_scale_note"] = (f"MAE / in-sample MAE of the seasonal naive forecast with lag "
                              f"{bt.season_steps} samples ({bt.season_steps * bt.step_s / 3600:g} h)")
    return out


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _print_forecast(p: dict, quantiles) -> None:
    season_h = p["season_steps"] * p["step_s"] / 3600
    print(f"# {p['series']}: method {p['method']}, step {p['step_s']:g} s, season "
          f"{p['season_steps']} samples ({season_h:g} h){', weekly' if p['weekly'] else ''}, "
          f"{p['n_missing']} of {p['n_obs']} points missing (interpolated)", file=sys.stdout)
    cols = ["point"] + [_qname(q) for q in quantiles]
    header = f"{'timestamp':<20} " + " ".join(f"{c:>12}" for c in cols)
    print(header)
    for row in p["forecast"]:
        stamp = row["timestamp"].replace("T", " ")
        print(f"{stamp:<20} " + " ".join(f"{row[c]:>12.4f}" for c in cols))


def _print_backtest(p: dict) -> None:
    cov = ", ".join(f"{q}: {v:.3f}" for q, v in p["coverage"].items())
    bcov = ", ".join(f"{q}: {v:.3f}" for q, v in p["baseline"]["coverage"].items())
    print(f"series    {p['series']}")
    print(f"folds     {p['folds']} origins x {p['horizon_steps']} steps of {p['step_s']:g} s, "
          f"{p['first_origin']} .. {p['last_origin']}, {p['n_fits']} fits, "
          f"{p['n_points']} points scored")
    print(f"method    {p['method']}")
    print(f"mase      {_fmt(p['mase'])}")
    print(f"smape     {_fmt(p['smape'])} %")
    print(f"coverage  {{{cov}}}")
    print(f"baseline  seasonal-naive: mase {_fmt(p['baseline']['mase'])}, smape "
          f"{_fmt(p['baseline']['smape'])} %, coverage {{{bcov}}}")
    print(f"scale     {p['mase_scale_note']}")


# --------------------------------------------------------------------------- plots


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(10, 4))


def _forecast_figure(reg, fitted, fc):
    fig, ax = _figure()
    recent = reg.values.iloc[-max(3 * len(fc.point), int(2 * 86400 / reg.step_s)):]
    ax.plot(recent.index, recent.to_numpy(), color="black", lw=0.8, label="observed")
    ax.plot(fc.timestamps, fc.point, color="tab:blue", label=f"point ({fitted.method})")
    qs = list(fc.quantiles.columns)
    if len(qs) >= 2:
        ax.fill_between(fc.timestamps, fc.quantiles[qs[0]], fc.quantiles[qs[-1]], color="tab:blue",
                        alpha=0.2, label=f"q{qs[0]:g}..q{qs[-1]:g}")
    for q in qs:
        ax.plot(fc.timestamps, fc.quantiles[q], lw=0.7, ls="--", label=_qname(q))
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("forecast")
    fig.autofmt_xdate()
    return fig


def _backtest_figure(bt, quantiles):
    fig, ax = _figure()
    f = bt.forecasts.sort_values(["timestamp", "step"]).drop_duplicates("timestamp")
    ax.plot(f["timestamp"], f["actual"], color="black", lw=0.8, label="actual")
    ax.plot(f["timestamp"], f["point"], color="tab:blue", lw=0.8, label=f"point ({bt.method})")
    ax.plot(f["timestamp"], f["baseline"], color="tab:gray", lw=0.6, label="seasonal naive")
    top = _qname(max(quantiles))
    ax.plot(f["timestamp"], f[top], color="tab:red", lw=0.6, ls="--", label=top)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"backtest: MASE {bt.mase:.3f} vs {bt.baseline.mase:.3f} (seasonal naive)")
    fig.autofmt_xdate()
    return fig


# --------------------------------------------------------------------------- tracking


def _track(args, payload: dict, figure, quantiles, horizon_s: float) -> None:
    """Log the run to mlflow. A tracking store that cannot be reached or written is
    ``TrackingUnavailable`` (exit 3, like calibrate), no longer a warning with exit 0."""
    from experiments import tracking

    kind = "backtest" if args.backtest else "fit"
    with tracking.start_run("forecast", run_name=f"{kind} {Path(args.series).name}",
                            tags={"command": "forecast", "kind": kind}):
        tracking.log_params({
            "series": args.series, "kind": kind, "requested_method": args.method,
            "horizon_s": horizon_s, "quantiles": ",".join(f"{q:g}" for q in quantiles),
            "step": args.step, "season": args.season,
            "folds": args.folds if args.backtest else None,
        })
        if args.backtest:
            tracking.log_params({"method": payload["method"],
                                 "season_steps": payload["season_steps"],
                                 "step_s": payload["step_s"]})
            tracking.log_metrics({k: payload[k] for k in ("mase", "smape", "coverage",
                                                          "baseline", "n_points", "n_missing")})
        else:
            tracking.log_params({k: payload[k] for k in ("method", "season_steps", "weekly",
                                                         "step_s", "n_obs")})
            tracking.log_metrics({"n_missing": payload["n_missing"],
                                  "validation_mase": payload["validation_mase"]})
        tracking.log_dict(payload, f"{kind}.json")
        if figure is not None:
            tracking.log_figure(figure, f"{kind}.png")
