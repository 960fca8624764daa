"""modeler.limits: every size a user can type is bounded, checked before any allocation (issue 22)."""

from __future__ import annotations

import json

import pytest
import yaml

from augury.cli import main
from modeler.errors import ModelError, UsageError
from modeler.limits import MAX_DURATION_S, MAX_PARALLELISM, check_number
from modeler.modelfile import parse_model, parse_model_text
from modeler.units import parse_duration_s
from tests.conftest import EXAMPLES

PIPELINE = str(EXAMPLES / "pipeline.yaml")
HUGE = 10**400


def _model(**top) -> dict:
    data = yaml.safe_load((EXAMPLES / "pipeline.yaml").read_text())
    data.update(top)
    return data


def test_check_number_never_overflows_and_names_the_field():
    assert check_number("12", "--n", minimum=1, maximum=20, integer=True) == 12
    for value in (HUGE, str(HUGE), 1e300, "1e300"):
        with pytest.raises(UsageError) as info:
            check_number(value, "--n", maximum=1e6)
        assert info.value.field == "--n" and "documented limit" in info.value.message
    for bad in ("x", float("nan"), True, None, "1.5"):
        with pytest.raises(UsageError):
            check_number(bad, "--n", integer=True)


@pytest.mark.parametrize("where, value", [
    ("network_delay_ms", HUGE), ("network_delay_ms", 1e300), ("buffer_records", HUGE),
    ("operators.2.parallelism", HUGE), ("operators.2.max_parallelism", MAX_PARALLELISM + 1),
    ("operators.2.service_time_ms", 1e300), ("edges.3.selectivity", 1e300),
])
def test_model_numbers_beyond_the_limits_are_model_errors(where, value):
    data = _model()
    target, *path = where.split(".")
    if path:
        data[target][int(path[0])][path[1]] = value
    else:
        data[target] = value
    with pytest.raises(ModelError) as info:
        parse_model(data, "m.yaml")
    assert "documented limit" in info.value.message and info.value.file == "m.yaml"
    assert len(str(info.value)) < 300  # the 400 digits are not printed


def test_zipf_key_count_and_scaling_factor_and_version_are_checked():
    data = _model()
    data["edges"][3]["keys"]["count"] = 10**12
    with pytest.raises(ModelError, match="documented limit"):
        parse_model(data)
    with pytest.raises(ModelError, match="version"):
        parse_model(_model(augury=True))
    data = _model()
    data["operators"][2]["scaling"] = {"form": "table", "parallelism": [1, 2], "factor": [1.0, float("inf")]}
    with pytest.raises(ModelError, match="finite"):
        parse_model(data)


def test_an_exponent_yaml_reads_as_text_is_named_so():
    """``network_delay_ms: 1e300`` (issue 22's example) is text to YAML 1.1: the error says so and
    how to write the number, which is then checked against its limit."""
    text = (EXAMPLES / "pipeline.yaml").read_text()
    assert "network_delay_ms: 0.1" in text
    with pytest.raises(ModelError, match=r"not text \(YAML reads an exponent without a '\.' as text: write 1\.0e\+300\)"):
        parse_model_text(text.replace("network_delay_ms: 0.1", "network_delay_ms: 1e300"), "m.yaml")
    with pytest.raises(ModelError, match="documented limit"):
        parse_model_text(text.replace("network_delay_ms: 0.1", "network_delay_ms: 1.0e+300"), "m.yaml")


def test_deep_nesting_is_a_model_error():
    with pytest.raises(ModelError, match="nested too deeply"):
        parse_model_text("[" * 100_000 + "]" * 100_000, "deep.json")
    with pytest.raises(ModelError, match="nested too deeply|malformed"):
        parse_model_text("a: " + "[" * 100_000, "deep.yaml")


def test_durations_are_bounded():
    assert parse_duration_s("3650d", "--lead-time") == pytest.approx(MAX_DURATION_S)
    with pytest.raises(UsageError, match="documented limit"):
        parse_duration_s("99999999d", "--lead-time")


@pytest.mark.parametrize("argv", [
    ["whatif", PIPELINE, "--rates", "1:2:1000000000000", "--out", "{tmp}/t.csv"],
    ["whatif", PIPELINE, "--rates", "100", "--sweep", "decode=1..10000000000", "--out", "{tmp}/t.csv"],
    ["testbed", "run", PIPELINE, "--rate", "100", "--duration", "10s", "--queue", "1000000000000",
     "--out", "{tmp}/tb"],
    ["testbed", "run", PIPELINE, "--rate", "100", "--duration", "10s", "--window", "0.0000001",
     "--out", "{tmp}/tb"],
    ["testbed", "run", PIPELINE, "--rate", "100", "--duration", "3000d", "--window", "0.001",
     "--out", "{tmp}/tb"],
])
def test_sizes_on_the_command_line_exit_2_before_any_work(tmp_path, capsys, argv):
    code = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "limit" in err
    assert not any(tmp_path.iterdir())  # nothing written


def test_forecast_folds_and_steps_are_bounded(tmp_path, capsys):
    series = tmp_path / "s.csv"
    series.write_text("ts,value\n" + "\n".join(f"2024-05-01T{h:02d}:00:00Z,{h}" for h in range(24)) + "\n")
    assert main(["forecast", str(series), "--horizon", "1h", "--backtest", "--folds", "1000000000",
                 "--no-track"]) == 2
    assert "--folds" in capsys.readouterr().err
    assert main(["forecast", str(series), "--horizon", "1h", "--step", "1ms", "--no-track"]) == 2
    assert "--step" in capsys.readouterr().err
    assert main(["forecast", str(series), "--horizon", "1h", "--plot", str(tmp_path / "x.txt"),
                 "--no-track"]) == 2
    assert "--plot" in capsys.readouterr().err


def test_json_model_with_a_huge_integer(tmp_path):
    from modeler.modelfile import load_model

    data = _model()
    data["operators"][2]["parallelism"] = HUGE
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ModelError, match="documented limit"):
        load_model(path)
