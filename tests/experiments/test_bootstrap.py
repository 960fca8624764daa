"""``experiments.bootstrap``: percentile-bootstrap intervals, checked against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.bootstrap import bootstrap_ci, describe, fmt_ci, share


def test_the_interval_contains_the_median_and_narrows_with_n():
    rng = np.random.default_rng(1)
    widths = []
    for n in (20, 80, 320, 1280):
        x = rng.normal(5.0, 2.0, n)
        lo, hi = bootstrap_ci(x, "median", seed=3)
        assert lo <= np.median(x) <= hi
        widths.append(hi - lo)
    assert widths == sorted(widths, reverse=True)
    # the median's standard error is sqrt(pi/2) sigma / sqrt(n): width ~ 2 x 1.96 x that
    closed = 2 * 1.96 * math.sqrt(math.pi / 2) * 2.0 / math.sqrt(1280)
    assert widths[-1] == pytest.approx(closed, rel=0.25)


def test_the_mean_interval_matches_the_normal_theory_interval():
    x = np.random.default_rng(7).normal(10.0, 3.0, 400)
    lo, hi = bootstrap_ci(x, "mean", seed=0, n_boot=4000)
    half = 1.96 * x.std(ddof=1) / math.sqrt(len(x))
    assert lo == pytest.approx(x.mean() - half, abs=0.1 * half)
    assert hi == pytest.approx(x.mean() + half, abs=0.1 * half)


def test_seeded_and_edge_cases():
    x = [0.1, -0.2, 0.0, 0.3, 0.05, float("nan")]
    assert bootstrap_ci(x, seed=5) == bootstrap_ci(x, seed=5)  # reproducible; NaN dropped
    assert all(math.isnan(v) for v in bootstrap_ci([]))
    assert bootstrap_ci([2.5]) == (2.5, 2.5)
    with pytest.raises(ValueError):
        bootstrap_ci(x, "mode")
    with pytest.raises(ValueError):
        bootstrap_ci(x, level=1.0)


def test_describe_and_share():
    d = describe(np.arange(11) / 10.0)
    assert d["n"] == 11 and d["median"] == 0.5 and d["min"] == 0.0 and d["max"] == 1.0
    assert d["p10"] == pytest.approx(0.1) and d["p90"] == pytest.approx(0.9)
    assert d["median_lo"] <= 0.5 <= d["median_hi"]
    s = share([True] * 19 + [False])
    assert s["share"] == 0.95 and s["n"] == 20 and s["share_lo"] <= 0.95 <= s["share_hi"] <= 1.0
    assert share([True, True])["share_lo"] == 1.0  # no variation, no width
    assert math.isnan(share([])["share"]) and describe([])["n"] == 0
    assert fmt_ci(0.05, 0.0, 0.1, signed=True) == "+5% [+0%, +10%]"
    assert fmt_ci(float("nan"), 0, 0) == "n/a"


def test_wilson_interval_matches_the_closed_form_and_does_not_collapse_at_the_ends():
    from experiments.bootstrap import wilson

    # Wilson (1927) at z = 1.96: 3 of 5 -> [0.2307, 0.8824]; 5 of 5 -> [0.5655, 1]; 0 of 5 mirrors it
    assert wilson(3, 5) == pytest.approx((0.2307, 0.8824), abs=1e-4)
    lo, hi = wilson(5, 5)
    assert lo == pytest.approx(0.5655, abs=1e-4) and hi == 1.0
    lo0, hi0 = wilson(0, 5)
    assert lo0 == pytest.approx(0.0, abs=1e-12) and hi0 == pytest.approx(1 - 0.5655, abs=1e-4)
    assert all(math.isnan(v) for v in wilson(0, 0))
