"""modeler.units.parse_duration_s: text durations -> seconds, errors naming the flag and value."""

from __future__ import annotations

import pytest

from modeler.errors import UsageError
from modeler.units import parse_duration_s


@pytest.mark.parametrize("text, seconds", [("90", 90.0), ("90s", 90.0), ("250ms", 0.25), ("5m", 300.0),
                                           ("5min", 300.0), ("2h", 7200.0), ("1.5d", 129600.0),
                                           ("1w", 604800.0), (" 3 s ", 3.0)])
def test_parses(text, seconds):
    assert parse_duration_s(text, "--window") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "x", "-5s", "5 years", "1e3s", "5s5"])
def test_rejects_naming_flag_and_value(text):
    with pytest.raises(UsageError) as info:
        parse_duration_s(text, "--window")
    assert info.value.field == "--window" and info.value.value == text


def test_common_reexports_it():
    from augury.commands import _common

    assert _common.parse_duration_s is parse_duration_s
