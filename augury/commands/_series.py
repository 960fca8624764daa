"""Reading a rate series for ``augury forecast`` and ``augury schedule``: shared flags
(``--time-col``, ``--value-col``, ``--step``, ``--season``, ``--method``) and the path from a
CSV file to a ``RegularSeries`` and a ``Forecaster``."""

from __future__ import annotations

import argparse
import math

from augury.commands._common import parse_duration_s
from augury.errors import UsageError

METHOD_CHOICES = ("auto", "seasonal-naive", "autoreg", "holt-winters", "theta")


def add_series_flags(parser: argparse.ArgumentParser) -> None:
    """--time-col, --value-col, --method, --step, --season."""
    parser.add_argument("--time-col", default=None, help="time column (default: detected)")
    parser.add_argument("--value-col", default=None, help="value column (default: detected)")
    parser.add_argument("--method", default="auto", choices=METHOD_CHOICES, help="default auto")
    parser.add_argument("--step", default=None,
                        help="aggregate to this step first (mean per bucket), e.g. 15m")
    parser.add_argument("--season", default=None,
                        help="season length in samples (default: detect the daily cycle; 1 = none)")


PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")
"""Figure formats ``--plot`` writes (matplotlib's)."""


def positive_int(text: str, flag: str, maximum: int | None = None) -> int:
    """An integer in [1, ``maximum``] (``modeler.limits``)."""
    from modeler.limits import check_number

    return int(check_number(text, flag, minimum=1, maximum=maximum, integer=True))


def horizon_s(args: argparse.Namespace) -> float:
    value = parse_duration_s(args.horizon, "--horizon")
    if value <= 0:
        raise UsageError("the horizon must be positive", field="--horizon", value=args.horizon)
    return value


def series_options(args: argparse.Namespace) -> tuple[float | None, int | None]:
    """(step_s or None, season or None) from the flags, checked."""
    season = None if args.season is None else positive_int(args.season, "--season")
    step_s = None if args.step is None else parse_duration_s(args.step, "--step")
    if step_s is not None and step_s <= 0:
        raise UsageError("the step must be positive", field="--step", value=args.step)
    return step_s, season


def read_regular_series(path: str, time_col: str | None, value_col: str | None,
                        step_s: float | None, how: str = "mean"):
    """The CSV at ``path`` on its regular grid (aggregated to ``step_s`` when given: ``how`` is
    ``mean`` (a rate stays a rate) or ``max`` (the peak within each step)). Errors name the
    file."""
    import pandas as pd

    from history.series import load_series
    from modeler.errors import ForecastError
    from modeler.forecast import regularize, resample

    series = load_series(path, time_col=time_col, value_col=value_col)
    if step_s is not None and len(series) > 1:
        from modeler.limits import MAX_STEPS

        span_s = (series.index.max() - series.index.min()).total_seconds()
        if span_s / step_s > MAX_STEPS:  # checked before the grid is built
            raise UsageError(f"the series spans {span_s:,.0f} s: more than {MAX_STEPS:,} steps of this size "
                             "(the documented limit)", field="--step", value=f"{step_s:g}s")
    try:
        if step_s is not None:
            means = resample(series, step_s, name=path)  # validates the values
            if how == "max":
                series = series.resample(pd.Timedelta(seconds=step_s)).max().dropna()
            else:
                series = means
        return regularize(series, name=series.name or "value")
    except ForecastError as err:
        raise err.with_file(path)


def horizon_steps(horizon: float, step_s: float) -> int:
    from modeler.limits import MAX_STEPS

    steps = max(1, math.ceil(horizon / step_s - 1e-9))
    if steps > MAX_STEPS:
        raise UsageError(f"{steps:,} steps of {step_s:g} s: more than {MAX_STEPS:,} (the documented limit)",
                         field="--horizon", value=f"{horizon:g}s")
    return steps


def check_plot_path(plot: str | None) -> None:
    from pathlib import Path

    if plot:
        if Path(plot).suffix.lower() not in PLOT_SUFFIXES:  # checked before the computation
            raise UsageError(f"the plot must end in {', '.join(PLOT_SUFFIXES)}", field="--plot", value=plot)
        plot_dir = Path(plot).expanduser().resolve().parent
        if not plot_dir.is_dir():
            raise UsageError("the plot's directory does not exist", field="--plot", value=plot)
        from history.files import check_writable

        check_writable(Path(plot).expanduser(), "--plot", create_parent=False)  # exit 3 now, not after the work


def save_plot(figure, plot: str) -> None:
    """``figure`` saved to ``plot`` atomically (the format from its suffix)."""
    from pathlib import Path

    from history.files import atomic_path

    path = Path(plot).expanduser()
    with atomic_path(path, "--plot") as tmp:
        figure.savefig(tmp, format=path.suffix.lower().lstrip("."), dpi=110, bbox_inches="tight")
