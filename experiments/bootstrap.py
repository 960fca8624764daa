"""Bootstrap confidence intervals and the order statistics the experiments report.

``bootstrap_ci(values, stat)`` is the percentile bootstrap (Efron): ``n_boot`` resamples of the
values with replacement, the statistic of each, and the ``(1 - level) / 2`` and
``(1 + level) / 2`` quantiles of those. Seeded (``numpy.random.default_rng(seed)``), so a run
reproduces its intervals. ``describe(values)`` gives what a result table quotes for one sample:
n, median with its 95 % CI, p10, p90, min and max; ``share(flags)`` a proportion with its CI.

The percentile bootstrap is honest about what it assumes: the runs are exchangeable draws of
the population the interval speaks about (here: runs of one experiment's design). It is
approximate for small samples (below ~10 the interval is too narrow) and for medians of
discrete values (the interval's ends are sample values).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

import numpy as np

STATS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "median": lambda a: np.median(a, axis=-1),
    "mean": lambda a: np.mean(a, axis=-1),
}


def _clean(values: Iterable[float]) -> np.ndarray:
    x = np.asarray(list(values), dtype=float)
    return x[np.isfinite(x)]


def bootstrap_ci(values: Iterable[float], stat: str = "median", level: float = 0.95, n_boot: int = 2000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap ``level`` confidence interval of ``stat`` (``median`` or ``mean``) of
    the finite ``values`` (NaNs and infinities dropped). ``(nan, nan)`` for no values; a single
    value is its own interval."""
    if stat not in STATS:
        raise ValueError(f"unknown statistic {stat!r} (known: {', '.join(STATS)})")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = _clean(values)
    if len(x) == 0:
        return (math.nan, math.nan)
    if len(x) == 1:
        return (float(x[0]), float(x[0]))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n_boot, len(x)))
    boots = STATS[stat](x[idx])
    lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2])
    return (float(lo), float(hi))


def describe(values: Iterable[float], seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """n, median, its CI (``median_lo``, ``median_hi``), p10, p90, min, max of the finite values."""
    x = _clean(values)
    if len(x) == 0:
        return {"n": 0, "median": math.nan, "median_lo": math.nan, "median_hi": math.nan,
                "p10": math.nan, "p90": math.nan, "min": math.nan, "max": math.nan}
    lo, hi = bootstrap_ci(x, "median", level, seed=seed)
    p10, p90 = np.quantile(x, [0.1, 0.9])
    return {"n": int(len(x)), "median": float(np.median(x)), "median_lo": lo, "median_hi": hi,
            "p10": float(p10), "p90": float(p90), "min": float(x.min()), "max": float(x.max())}


def share(flags: Sequence[bool] | Iterable[bool], seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """The share of true ``flags`` with its bootstrap CI (``share``, ``share_lo``, ``share_hi``, ``n``)."""
    x = np.asarray([bool(f) for f in flags], dtype=float)
    if len(x) == 0:
        return {"n": 0, "share": math.nan, "share_lo": math.nan, "share_hi": math.nan}
    lo, hi = bootstrap_ci(x, "mean", level, seed=seed)
    return {"n": int(len(x)), "share": float(x.mean()), "share_lo": lo, "share_hi": hi}


def wilson(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a share ``successes / n``: unlike the bootstrap it does not
    collapse to a point at 0 or n (5 of 5 -> [0.57, 1.0]), which small samples (a handful of
    seeded runs per cell) need. (nan, nan) for n = 0."""
    from statistics import NormalDist

    if n <= 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def fmt_ci(value: float, lo: float, hi: float, percent: bool = True, signed: bool = False) -> str:
    """``12 % [8, 15]`` (``percent``) or ``1.5 [1, 2]``: a value with its interval, for summaries."""
    if not math.isfinite(value):
        return "n/a"
    if percent:
        sign = "+" if signed else ""
        return f"{value:{sign}.0%} [{lo:{sign}.0%}, {hi:{sign}.0%}]"
    return f"{value:.3g} [{lo:.3g}, {hi:.3g}]"
