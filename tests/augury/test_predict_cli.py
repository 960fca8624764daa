"""``augury predict``: output contract, exit codes, one-line errors."""

from __future__ import annotations

import json

import pytest

from augury.cli import main
from tests.conftest import EXAMPLES

WORDCOUNT = str(EXAMPLES / "wordcount.yaml")


def test_json_contract(capsys):
    assert main(["predict", WORDCOUNT, "--rate", "500", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("rate", "throughput", "max_rate", "bottleneck", "saturated", "config", "latency_ms", "operators"):
        assert key in out
    assert out["config"] == {"source": 1, "split": 2, "count": 2}
    assert set(out["latency_ms"]) == {"mean", "p95", "p99"}
    assert set(out["operators"]["count"]) >= {
        "parallelism", "arrival_rate", "utilization", "max_utilization", "processed_rate",
        "sojourn_ms", "backpressured", "bottleneck"}
    assert out["operators"]["count"]["arrival_rate"] == pytest.approx(3500.0)


def test_json_reports_the_predicted_restart_of_the_change(capsys, tmp_path):
    # no restart model, no change: no restart; a change: the default fixed base
    assert main(["predict", WORDCOUNT, "--rate", "500", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["restart_s"] == 0.0 and out["restart"]["changed"] == []
    assert main(["predict", WORDCOUNT, "--rate", "500", "--config", "count=3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["restart_s"] == 10.0
    assert out["restart"] == {"restart_s": 10.0, "base_s": 10.0, "state_mb": 0.0, "restore_mb_per_s": None,
                              "base_assumed": True, "changed": ["count"]}
    # a stateful model: base + the job's state / restore rate
    text = (EXAMPLES / "wordcount.yaml").read_text().replace(
        "network_delay_ms: 0.1", "network_delay_ms: 0.1\nrestart_base_s: 5\nrestore_mb_per_s: 100").replace(
        "service_time_ms: 0.2,", "service_time_ms: 0.2, state_mb: 3000,")
    model = tmp_path / "stateful.yaml"
    model.write_text(text)
    assert main(["predict", str(model), "--rate", "500", "--config", "split=3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["restart_s"] == pytest.approx(35.0)
    assert out["restart"]["state_mb"] == 3000.0 and out["restart"]["base_assumed"] is False
    assert main(["predict", str(model), "--rate", "500", "--config", "split=3"]) == 0
    assert "restart: 35.0 s predicted for changing split (base 5 s + 3,000 MB state / 100 MB/s)" \
        in capsys.readouterr().out


def test_partial_config_and_saturation(capsys):
    assert main(["predict", WORDCOUNT, "--rate", "100000", "--config", "count=4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["count"] == 4 and out["config"]["split"] == 2
    assert out["saturated"] is True and out["latency_ms"]["p99"] is None
    assert out["throughput"] == pytest.approx(out["max_rate"])


def test_table_output(capsys):
    assert main(["predict", WORDCOUNT, "--rate", "500"]) == 0
    out = capsys.readouterr().out
    assert "max_rate" in out and "count" in out and "bottleneck" in out


@pytest.mark.parametrize("argv,needle", [
    (["predict", WORDCOUNT, "--rate", "fast"], "--rate"),
    (["predict", WORDCOUNT, "--rate", "-5"], "--rate"),
    (["predict", WORDCOUNT, "--rate", "5", "--config", "count=two"], "count=two"),
    (["predict", WORDCOUNT, "--rate", "5", "--config", "nope=2"], "nope"),
    (["predict", WORDCOUNT, "--rate", "5", "--config", "count=500"], "config.count"),
    (["predict", "/no/such/model.yaml", "--rate", "5"], "/no/such/model.yaml"),
])
def test_bad_input_exits_2_with_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv,needle", [
    (["predict", WORDCOUNT], "--rate"),
    (["predict", WORDCOUNT, "--rate", "5", "--bogus"], "--bogus"),
])
def test_usage_errors_exit_2_with_one_line(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    # argparse reports unknown flags from the top-level parser ("augury: error: ...").
    assert err.startswith("augury") and "error:" in err and needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
