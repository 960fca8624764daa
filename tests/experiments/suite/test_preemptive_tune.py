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
