"""augury plan / augury validate: JSON contract, exit codes, one-line errors."""

from __future__ import annotations

import json

import pytest

from augury.cli import main
from scheduler.errors import InfeasiblePlan
from scheduler.plan import PlanConfig, plan
from modeler.modelfile import load_model
from tests.conftest import EXAMPLES

DIAMOND = str(EXAMPLES / "diamond.yaml")


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_contract(capsys):
    code, out, err = _run(capsys, ["plan", DIAMOND, "--rate", "12500", "--latency-slo-ms", "5", "--json"])
    assert code == 0 and not err
    data = json.loads(out)
    assert set(data) == {"feasible", "rate", "config", "instances", "total_instances", "latency_stat",
                         "optimal", "evaluations", "variable", "reasons", "prediction",
                         "restart_s", "restart"}
    # the predicted restart of changing the model file's configuration into the plan
    from modeler.restart import restart_time_s
    assert data["restart_s"] == restart_time_s(load_model(DIAMOND), None, data["config"])
    assert data["restart_s"] == (10.0 if data["restart"]["changed"] else 0.0)
    assert data["restart"]["base_assumed"] is True
    expected = plan(load_model(DIAMOND), 12500.0).to_dict()
    assert data["feasible"] and data["instances"] >= expected["instances"]
    assert data["prediction"]["latency_ms"]["p99"] <= 5.0
    assert data["prediction"]["config"] == data["config"]


def test_plan_infeasible_exits_1_with_reasons(capsys):
    code, out, _ = _run(capsys, ["plan", DIAMOND, "--rate", "1000", "--latency-slo-ms", "1", "--json"])
    assert code == 1
    data = json.loads(out)
    assert not data["feasible"] and data["reasons"][0].startswith("latency SLO 1 ms")
    with pytest.raises(InfeasiblePlan) as err:
        plan(load_model(DIAMOND), 1000.0, PlanConfig(latency_slo_ms=1.0)).raise_if_infeasible()
    assert err.value.exit_code == 1 and err.value.reasons


@pytest.mark.parametrize("argv,field", [
    (["plan", DIAMOND, "--rate", "x"], "--rate"),
    (["plan", DIAMOND, "--rate", "10", "--utilization-target", "1.5"], "--utilization-target"),
    (["plan", DIAMOND, "--rate", "10", "--latency-slo-ms", "0"], "--latency-slo-ms"),
    (["validate", DIAMOND, "--rate", "10"], "--config"),
    (["validate", DIAMOND, "--rate", "10", "--config", "nope=3"], "config"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, field):
    code, out, err = _run(capsys, argv)
    assert code == 2 and not out
    assert err.count("\n") == 1 and f"field '{field}'" in err and err.startswith(f"augury {argv[0]}: error:")


def test_validate_json_and_exit_codes(capsys, tmp_path):
    code, out, _ = _run(capsys, ["validate", DIAMOND, "--rate", "12500", "--config", "parse=8,enrich=13", "--json"])
    assert code == 1
    data = json.loads(out)
    assert set(data) == {"ok", "violations", "headroom", "prediction"}
    assert {"operator": "filter", "kind": "saturation", "value": 12500.0,
            "limit": data["prediction"]["max_rate"]} in data["violations"]
    proposal = tmp_path / "proposal.json"
    proposal.write_text(json.dumps({"parse": {"parallelism": {"lowerBound": 1, "upperBound": 13}},
                                    "enrich": 20, "filter": 3, "merge": 7}))
    code, out, _ = _run(capsys, ["validate", DIAMOND, "--rate", "12500", "--proposal", str(proposal), "--json"])
    assert code == 0
    data = json.loads(out)
    assert data["ok"] and data["violations"] == [] and data["headroom"]["ratio"] > 1
    code, out, _ = _run(capsys, ["validate", DIAMOND, "--rate", "12500", "--proposal", str(proposal)])
    assert code == 0 and out.startswith("OK")
