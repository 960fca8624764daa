"""``augury schedule``: a pre-emptive timeline of configurations from a forecast of the load.

    augury schedule MODEL --series RATES --horizon 24h [--quantile 0.9] [--lead-time 5m]
                    [--latency-slo-ms L] [--latency-stat mean|p95|p99] [--utilization-target U]
                    [--stabilization 1h] [--max-reconfigs-per-day N] [--reserved-reconfigs R]
                    [--method auto|...]
                    [--step 15m] [--aggregate max|mean] [--season N] [--scale F]
                    [--current-load R] [--current-config op=p,...] [--json] [--plot FILE.png]

RATES is a CSV file of timestamps and input rates (tuples/s), as ``augury forecast`` reads.
The forecaster is fitted on it, forecasts ``--horizon`` past its last point at ``--quantile``,
and ``scheduler.schedule`` turns that path into reconfigurations (issued ``--lead-time`` before
the load needs them; scale-down after ``--stabilization``; at most ``--max-reconfigs-per-day``
in any 24 h window; never below the current load). Exit 0 ok, 1 some level has no feasible
configuration, 2 bad input.
"""

from __future__ import annotations

import argparse

from augury.commands._common import parse_config, parse_duration_s, parse_positive_float, print_json
from augury.commands._series import (add_series_flags, check_plot_path, horizon_s, horizon_steps,
                                     positive_int, read_regular_series, save_plot, series_options)
from augury.errors import UsageError


def register(subparsers) -> None:
    from augury.commands.plan import add_target_flags

    p = subparsers.add_parser(
        "schedule", help="plan a timeline of reconfigurations ahead of the forecast load",
        description=__doc__.splitlines()[0])
    p.add_argument("model", metavar="MODEL", help="model file (YAML or JSON)")
    p.add_argument("--series", required=True, metavar="RATES",
                   help="CSV file: a time column and the input rate (tuples/s)")
    p.add_argument("--horizon", required=True, help="how far ahead to schedule, e.g. 24h")
    p.add_argument("--quantile", default="0.9", help="forecast quantile to plan for, in (0, 1) (default 0.9)")
    p.add_argument("--lead-time", default="5m", help="restart time plus margin (default 5m)")
    p.add_argument("--stabilization", default="1h",
                   help="how long the load must stay low before a scale-down (default 1h)")
    p.add_argument("--max-reconfigs-per-day", default="12",
                   help="most reconfigurations in any 24 h window, the first one included (default 12)")
    p.add_argument("--reserved-reconfigs", default="0",
                   help="of the daily budget, leave this many unplanned for reactive changes (default 0)")
    add_target_flags(p)
    add_series_flags(p)
    p.add_argument("--aggregate", default="max", choices=("max", "mean"),
                   help="with --step: plan for the peak (max, default) or the mean within each step")
    p.add_argument("--scale", default="1",
                   help="multiply the series by this factor first (e.g. requests/min -> tuples/s)")
    p.add_argument("--current-load", default=None,
                   help="measured input rate now, tuples/s (default: the peak of the series over "
                        "the last stabilization period)")
    p.add_argument("--current-config", default=None, metavar="op=p,...",
                   help="the configuration running now (default: unknown; the first entry is a change)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="save a plot of the history, the forecast and the capacity over time")
    p.set_defaults(func=run)


def _quantile(text: str) -> float:
    try:
        q = float(text)
    except (TypeError, ValueError):
        raise UsageError("expected a number in (0, 1)", field="--quantile", value=text) from None
    if not 0.0 < q < 1.0:
        raise UsageError("a quantile must lie strictly between 0 and 1", field="--quantile", value=text)
    return q


def run(args: argparse.Namespace) -> int:
    from augury.commands.plan import targets
    from modeler.errors import ForecastError
    from modeler.forecast import Forecaster
    from modeler.modelfile import load_model
    from modeler.queueing import compile_model
    from scheduler.plan import PlanConfig
    from scheduler.schedule import ScheduleConfig, schedule

    horizon = horizon_s(args)
    q = _quantile(args.quantile)
    lead_s = parse_duration_s(args.lead_time, "--lead-time")
    stab_s = parse_duration_s(args.stabilization, "--stabilization")
    budget = positive_int(args.max_reconfigs_per_day, "--max-reconfigs-per-day")
    try:
        reserved = int(args.reserved_reconfigs)
    except ValueError:
        raise UsageError("expected an integer", field="--reserved-reconfigs", value=args.reserved_reconfigs) from None
    if not 0 <= reserved < budget:
        raise UsageError(f"expected an integer from 0 to {budget - 1} (below --max-reconfigs-per-day)",
                         field="--reserved-reconfigs", value=args.reserved_reconfigs)
    u, slo, stat = targets(args)
    step_s, season = series_options(args)
    scale = parse_positive_float(args.scale, "--scale")
    if scale <= 0:
        raise UsageError("expected a number > 0", field="--scale", value=args.scale)
    current_load = None if args.current_load is None else parse_positive_float(args.current_load, "--current-load")
    current_config = parse_config(args.current_config, "--current-config") if args.current_config else None
    check_plot_path(args.plot)

    model = load_model(args.model)
    compiled = compile_model(model)
    if current_config is not None:
        for name, p in current_config.items():
            if name not in compiled.names:
                raise UsageError(f"no such operator (operators: {', '.join(compiled.names)})",
                                 field="--current-config", value=name)
            if p < 1:
                raise UsageError("parallelism must be >= 1", field="--current-config", value=f"{name}={p}")

    reg = read_regular_series(args.series, args.time_col, args.value_col, step_s, how=args.aggregate)
    history = reg.values * scale
    try:
        steps = horizon_steps(horizon, reg.step_s)
        forecaster = Forecaster(method=args.method, season_length=season, horizon_s=steps * reg.step_s)
        fitted = forecaster.fit(history)
        fc = fitted.forecast(steps, quantiles=(0.5, q))
    except ForecastError as err:
        raise err.with_file(args.series)
    if current_load is None:
        observed = history.dropna()
        recent = observed[observed.index > observed.index[-1] - _td(max(stab_s, reg.step_s) - 1e-6)]
        current_load = float(recent.max())

    cfg = ScheduleConfig(lead_time_s=lead_s, stabilization_s=stab_s, max_reconfigurations_per_day=budget,
                         reserved_reconfigurations=reserved,
                         plan=PlanConfig(utilization_target=u, latency_slo_ms=slo, latency_stat=stat))
    now = fitted.last_timestamp + _td(reg.step_s)  # the end of the last measured step
    sched = schedule(compiled, fc.quantiles[q], current_load, cfg, now=now, current_config=current_config)

    payload = sched.to_dict()
    payload.update({
        "model": args.model, "series": args.series, "forecast_method": fitted.method, "quantile": q,
        "horizon_s": horizon, "step_s": reg.step_s, "aggregate": args.aggregate if step_s else None,
        "scale": scale, "current_load": current_load, "lead_time_s": lead_s, "stabilization_s": stab_s,
        "max_reconfigurations_per_day": budget, "reserved_reconfigurations": reserved,
        "utilization_target": u, "latency_slo_ms": slo,
        "latency_stat": stat,
        "steps": [{"timestamp": ts.isoformat(), "forecast_median": float(med), "forecast": float(row.forecast),
                   "level": float(row.level), "capacity": float(row.capacity), "instances": int(row.instances)}
                  for (ts, row), med in zip(sched.steps.iterrows(), fc.point)],
    })
    if args.plot:
        fig = schedule_figure(history, fc.timestamps, fc.point, sched, q)
        save_plot(fig, args.plot)
    if args.json:
        print_json(payload)
    else:
        print(format_schedule(payload))
    return 0 if sched.feasible else 1


def _td(seconds: float):
    import pandas as pd

    return pd.Timedelta(seconds=seconds)


def format_schedule(p: dict) -> str:
    head = "FEASIBLE" if p["feasible"] else "INFEASIBLE"
    lines = [
        f"{head}: {p['changes']} reconfiguration(s) over {p['horizon_s'] / 3600:g} h from {p['now']} "
        f"(at most {p['max_reconfigurations_in_24h']} in 24 h, budget {p['max_reconfigurations_per_day']}); "
        f"forecast {p['forecast_method']} at q{p['quantile']:g}, step {p['step_s']:g} s; "
        f"current load {p['current_load']:,.1f} tuples/s",
        f"peak {p['peak_instances']} instances, {p['instance_hours']:,.1f} instance-hours",
        "",
        f"{'issue at':<20} {'effective at':<20} {'direction':<9} {'level/s':>10} {'inst':>5}  config",
    ]
    for r in p["reconfigurations"]:
        cfg = ",".join(f"{n}={v}" for n, v in r["config"].items())
        late = " LATE" if r["late"] else ""
        lines.append(f"{r['issue_at'].replace('T', ' '):<20} {r['effective_at'].replace('T', ' '):<20} "
                     f"{r['direction'] + late:<9} {r['level']:>10,.1f} {r['instances']:>5}  {cfg}")
        lines.append(f"{'':<20} {r['reason']}")
    lines += [f"  - {r}" for r in p["reasons"]]
    return "\n".join(lines)


def schedule_figure(history, timestamps, median, sched, q: float, actual=None, title: str | None = None):
    """History (and, when given, the actual load over the horizon), the forecast median and
    quantile path, and the capacity of the configuration in force over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    span = max(2 * len(timestamps), 1)
    recent = history.iloc[-span:]
    ax.plot(recent.index, recent.to_numpy(), color="black", lw=0.8, label="measured load")
    if actual is not None:
        ax.plot(actual.index, actual.to_numpy(), color="dimgray", lw=0.8, label="actual load")
    ax.plot(timestamps, median, color="tab:blue", lw=0.8, ls="--", label="forecast median")
    ax.plot(timestamps, sched.steps["forecast"].to_numpy(), color="tab:blue", lw=1.2,
            label=f"forecast q{q:g}")
    ax.step(sched.steps.index, sched.steps["capacity"].to_numpy(), where="post", color="tab:red",
            lw=1.4, label="capacity (target x max rate)")
    for r in sched.changes():
        ax.axvline(r.issue_at, color="tab:red", lw=0.5, ls=":")
    ax.set_ylabel("tuples/s")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title or f"schedule: {len(sched.changes())} reconfigurations, "
                          f"at most {sched.per_day()} in 24 h")
    ax2.step(sched.steps.index, sched.steps["instances"].to_numpy(), where="post", color="tab:green")
    ax2.set_ylabel("instances")
    fig.autofmt_xdate()
    return fig

