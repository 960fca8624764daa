"""history.series.load_series: CSV -> Series, with errors naming file, column and value."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from history.series import load_series
from modeler.errors import AuguryError


def _write(tmp_path, text: str, name: str = "s.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_loads_and_detects_columns(tmp_path):
    path = _write(tmp_path, "period,count\n2024-01-01 00:02:00,5\n2024-01-01 00:00:00,3\n"
                            "2024-01-01 00:01:00,\n")
    s = load_series(path)
    assert list(s.index) == [pd.Timestamp("2024-01-01 00:00"), pd.Timestamp("2024-01-01 00:01"),
                             pd.Timestamp("2024-01-01 00:02")]
    assert s.iloc[0] == 3.0 and np.isnan(s.iloc[1]) and s.iloc[2] == 5.0  # empty cell: missing
    assert s.name == "count"


def test_explicit_columns_and_timezones(tmp_path):
    path = _write(tmp_path, "a,when,b\n1,2024-01-01T01:00:00+01:00,7.5\n2,2024-01-01T02:00:00+01:00,8\n")
    s = load_series(path, time_col="when", value_col="b")
    assert list(s.index) == [pd.Timestamp("2024-01-01 00:00"), pd.Timestamp("2024-01-01 01:00")]
    assert s.tolist() == [7.5, 8.0]


def test_naive_and_aware_times_mixed_read_naive_ones_as_utc(tmp_path):
    # issue 22's fuzzing: a date-only row beside ISO times with Z failed with an AttributeError
    path = _write(tmp_path, "ts,value\n2024-05-01,100\n2024-05-01T00:01:00Z,108\n2024-05-01T02:01:00+02:00,110\n")
    s = load_series(path)
    assert list(s.index) == [pd.Timestamp("2024-05-01 00:00"), pd.Timestamp("2024-05-01 00:01"),
                             pd.Timestamp("2024-05-01 00:01")]
    assert list(s) == [100.0, 108.0, 110.0]


def test_trace_file_loads(traces_dir):
    s = load_series(traces_dir / "nab_elb_request_count_8c0756.csv")
    assert len(s) == 4032 and s.index.is_monotonic_increasing


@pytest.mark.parametrize("text, kwargs, match", [
    ("t,v\n2024-01-01,1\nyesterday,2\n", {}, r"field 't' = 'yesterday': unparseable timestamp \(row 3\)"),
    ("t,v\n2024-01-01,1\n2024-01-02,lots\n", {}, r"field 'v' = 'lots': not a number \(row 3\)"),
    ("t,v\n2024-01-01,1\n", {"value_col": "rate"}, r"field '--value-col' = 'rate': no such column"),
    ("t,v\n2024-01-01,1\n", {"time_col": "x"}, r"field '--time-col' = 'x': no such column"),
    ("t,a,b\n2024-01-01,1,2\n", {}, r"several value columns"),
    ("t,v\n", {}, r"no rows"),
])
def test_bad_input_is_a_typed_error_naming_file_field_value(tmp_path, text, kwargs, match):
    path = _write(tmp_path, text)
    with pytest.raises(AuguryError, match=match) as err:
        load_series(path, **kwargs)
    assert str(path) in str(err.value)
    assert err.value.exit_code == 2


def test_missing_file(tmp_path):
    with pytest.raises(AuguryError, match="no such file") as err:
        load_series(tmp_path / "nope.csv")
    assert "nope.csv" in str(err.value)
