"""experiments.suite.preemptive_tune: --set parsing against the preemptive experiment's Params."""

import dataclasses

import pytest

from experiments.suite.preemptive import Params
from experiments.suite.preemptive_tune import _value, main

FIELDS = {f.name: f for f in dataclasses.fields(Params)}


@pytest.mark.parametrize("name,raw,expected", [
    ("solver", "priced", "priced"),
    ("budget_spares_scale_ups", "false", False),
    ("budget_spares_scale_ups", "1", True),
    ("max_reconfigurations_per_day", "4", 4),
    ("violation_s_per_instance_hour", "120", 120.0),
    ("augury_utilization_target", "none", None),
    ("augury_utilization_target", "0.8", 0.8),
])
def test_set_values_take_the_fields_type(name, raw, expected):
    assert _value(FIELDS[name], raw) == expected


def test_bad_set_arguments_exit_naming_them():
    with pytest.raises(SystemExit, match="nope"):
        main(["--set", "nope=1"])
    with pytest.raises(SystemExit, match="not a boolean"):
        main(["--set", "price_running=maybe"])
    with pytest.raises(SystemExit, match="expected FIELD=VALUE"):
        main(["--set", "solver"])


def test_bad_hindsight_prices_exit_naming_them():
    with pytest.raises(SystemExit, match="expected prices"):
        main(["--hindsight", "5,lots"])
    with pytest.raises(SystemExit, match="finite and >= 0"):
        main(["--hindsight", "-5"])


def test_the_perfect_forecaster_forecasts_each_steps_actual_mean():
    """``PerfectForecaster``: every quantile of step k is the load's mean over step k (a step
    load 100/s -> 400/s at 00:20 gives 300/s over 00:15-00:30: 5 min at 100, 10 at 400), from the last history step on."""
    import math

    import pandas as pd

    from experiments.testbed.load import PiecewiseRate
    from experiments.tracereplay import PerfectForecaster

    day0 = pd.Timestamp("2026-01-01")
    load = PiecewiseRate((0.0, 1200.0 / 10.0), (100.0, 400.0))  # simulated s at 10x: the step at 1,200 trace s
    prepared = type("Prepared", (), {"day0": day0, "rate_at": lambda self, t: load.rate_at(t / 10.0)})()
    history = pd.Series(100.0, index=pd.date_range(end=day0 - pd.Timedelta(minutes=15), periods=8, freq="15min"))
    fitted = PerfectForecaster(prepared).fit(history)
    fc = fitted.forecast(3, quantiles=(0.5, 0.9))
    assert list(fc.timestamps) == [day0, day0 + pd.Timedelta(minutes=15), day0 + pd.Timedelta(minutes=30)]
    assert list(fc.quantiles[0.5]) == [100.0, 300.0, 400.0] and list(fc.quantiles[0.9]) == [100.0, 300.0, 400.0]
    later = fitted.update(pd.concat([history, pd.Series(100.0, index=[day0])])).forecast(1, quantiles=(0.5,))
    assert math.isclose(later.quantiles[0.5][0], 300.0)
