"""Model file loading: round trips, and every validation error names the field and value."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from modeler.errors import ConfigError, ModelError
from modeler.modelfile import dump_model, load_model, parse_model, parse_model_text, to_graph
from tests.conftest import EXAMPLES

BASE = {
    "augury": 1,
    "job": "wordcount",
    "network_delay_ms": 0.1,
    "operators": [
        {"name": "source", "role": "source", "parallelism": 1},
        {"name": "split", "parallelism": 2, "service_time_ms": 0.5, "service_scv": 1.0,
         "min_parallelism": 1, "max_parallelism": 128},
        {"name": "count", "parallelism": 2, "service_time_ms": 0.2},
    ],
    "edges": [
        {"from": "source", "to": "split", "grouping": "shuffle", "selectivity": 1.0},
        {"from": "split", "to": "count", "grouping": "key", "selectivity": 7.0,
         "keys": {"distribution": "zipf", "exponent": 1.0, "count": 10000}},
    ],
}


def _mutated(path, value):
    data = copy.deepcopy(BASE)
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize("name", ["wordcount", "diamond", "pipeline"])
def test_examples_load_and_round_trip(name):
    model = load_model(EXAMPLES / f"{name}.yaml")
    for fmt in ("yaml", "json"):
        again = parse_model_text(dump_model(model, fmt))
        assert again.operators == model.operators and again.edges == model.edges
    graph = to_graph(model)
    assert set(graph.nodes) == set(model.operator_names)


def test_yaml_and_json_same_content(tmp_path):
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "m.json").write_text(json.dumps(BASE))
    a, b = load_model(tmp_path / "m.yaml"), load_model(tmp_path / "m.json")
    assert a.operators == b.operators and a.edges == b.edges


def test_defaults():
    model = parse_model(BASE)
    assert model.operator("split").service_scv == 1.0
    assert model.operator("count").min_parallelism == 1 and model.operator("count").max_parallelism == 128
    assert model.operator("source").role == "source" and model.operator("count").role == "operator"
    assert model.source_shares() == {"source": 1.0}


CASES = [
    # (path to mutate, new value, field the message must name, value it must show)
    (("edges",), BASE["edges"] + [{"from": "count", "to": "split"}], "edges", "split"),  # cycle
    (("edges", 0, "to"), "nowhere", "edges[0].to", "nowhere"),
    (("operators", 0), {"name": "source", "service_time_ms": 0.1}, "role", "no source"),
    (("operators", 1, "service_time_ms"), -0.5, "operators[1].service_time_ms", "-0.5"),
    (("operators", 1, "service_time_ms"), 0, "operators[1].service_time_ms", "0"),
    (("operators", 1, "parallelism"), 0, "operators[1].parallelism", "0"),
    (("operators", 1, "parallelism"), -3, "operators[1].parallelism", "-3"),
    (("edges", 1, "selectivity"), -1.0, "edges[1].selectivity", "-1.0"),
    (("operators", 1, "min_parallelism"), 200, "operators[1].min_parallelism", "200"),
    (("operators", 1, "parallelism"), 300, "operators[1].parallelism", "300"),
    (("edges", 1, "grouping"), "forward", "edges[1].grouping", "forward"),  # 2 != 2? see below
    (("edges", 0, "grouping"), "forward", "edges[0].grouping", "forward"),  # 1 -> 2 parallelism
    (("edges", 0, "grouping"), "round-robin", "edges[0].grouping", "round-robin"),
    (("operators", 1, "colour"), "red", "operators[1].colour", "colour"),
    (("edges", 1, "keys", "distribution"), "pareto", "edges[1].keys.distribution", "pareto"),
    (("edges", 1, "keys", "bogus"), 1, "edges[1].keys.bogus", "bogus"),
    (("operators", 2, "service_time_ms"), _DELETE, "operators[2].service_time_ms", None),
    (("augury",), 2, "augury", "2"),
    (("operators", 1, "service_scv"), "high", "operators[1].service_scv", "high"),
    # the restart model (modeler.restart)
    (("operators", 2, "state_mb"), -5, "operators[2].state_mb", "-5"),
    (("operators", 2, "state_mb"), "1 GB", "operators[2].state_mb", "1 GB"),
    (("operators", 2, "state_mb"), float("inf"), "operators[2].state_mb", "inf"),
    (("operators", 2, "state_mb"), 100.0, "restore_mb_per_s", "operators[2].state_mb = 100"),
    (("restart_base_s",), -1, "restart_base_s", "-1"),
    (("restart_base_s",), True, "restart_base_s", "True"),
    (("restore_mb_per_s",), 0, "restore_mb_per_s", "0"),
    (("restore_mb_per_s",), 1e13, "restore_mb_per_s", "10000000000000.0"),
    # bounded buffers (modeler.queueing, "Bounded buffers")
    (("buffer_tuples",), -1, "buffer_tuples", "-1"),
    (("buffer_tuples",), 2.5, "buffer_tuples", "2.5"),
    (("buffer_tuples",), "32KB", "buffer_tuples", "32KB"),
    (("edges", 1, "buffer_tuples"), -4, "edges[1].buffer_tuples", "-4"),
    (("edges", 1, "buffer_tuples"), 10**10, "edges[1].buffer_tuples", "10000000000"),
    # shared cores (modeler.queueing, "Shared cores")
    (("resources",), 2, "resources", "2"),
    (("resources",), {"cores": 0}, "resources.cores", "0"),
    (("resources",), {"cores": "2 cores"}, "resources.cores", "2 cores"),
    (("resources",), {"cpus": 2}, "resources.cpus", "cpus"),
    (("resources",), {}, "resources", "{}"),
    (("resources",), {"cores": 2, "taskmanagers": 1}, "resources.taskmanagers", "1"),
    (("resources",), {"taskmanagers": 2}, "resources.cores_per_taskmanager", None),
    (("resources",), {"taskmanagers": 1.5, "cores_per_taskmanager": 2}, "resources.taskmanagers", "1.5"),
    (("resources",), {"taskmanagers": 1000, "cores_per_taskmanager": 1000}, "resources.taskmanagers", "1000"),
    (("operators", 1, "cpu_share"), 1.5, "operators[1].cpu_share", "1.5"),
    # per-instance CPU overhead (modeler.queueing, "Shared cores")
    (("resources",), {"cores": 2, "cpu_overhead_per_instance": -0.01}, "resources.cpu_overhead_per_instance", "-0.01"),
    (("resources",), {"cores": 2, "cpu_overhead_per_instance": float("nan")}, "resources.cpu_overhead_per_instance",
     "nan"),
    (("resources",), {"cores": 2, "cpu_overhead_per_instance": float("inf")}, "resources.cpu_overhead_per_instance",
     "inf"),
    (("resources",), {"cores": 2, "cpu_overhead_per_instance": 1.5}, "resources.cpu_overhead_per_instance", "1.5"),
    (("resources",), {"cores": 2, "cpu_overhead_per_instance": "3%"}, "resources.cpu_overhead_per_instance", "3%"),
    (("resources",), {"cpu_overhead_per_instance": 0.03}, "resources", None),
    (("resources",), {"cores": 2, "engine_cpu_ms_per_tuple": -0.001}, "resources.engine_cpu_ms_per_tuple", "-0.001"),
    (("resources",), {"cores": 2, "engine_cpu_ms_per_tuple": "2us"}, "resources.engine_cpu_ms_per_tuple", "2us"),
    (("operators", 1, "cpu_share"), -0.1, "operators[1].cpu_share", "-0.1"),
]


@pytest.mark.parametrize("path,value,field,shown", CASES)
def test_validation_errors_name_the_field(path, value, field, shown, tmp_path):
    data = _mutated(path, value)
    if path == ("edges", 1, "grouping"):  # forward with keys present: keys only on key edges
        field, shown = "edges[1].keys", None
    file = tmp_path / "bad.yaml"
    file.write_text(yaml.safe_dump(data))
    with pytest.raises(ModelError) as err:
        load_model(file)
    message = str(err.value)
    assert str(file) in message
    assert field in message, message
    if shown is not None:
        assert shown in message, message


def test_malformed_yaml_names_the_file(tmp_path):
    file = tmp_path / "broken.yaml"
    file.write_text("augury: 1\noperators: [ {name: a\n")
    with pytest.raises(ModelError, match="malformed model file") as err:
        load_model(file)
    assert str(file) in str(err.value)
    # No field can be named in text that does not parse: the position stands in for it.
    assert "line 2, column 14" in str(err.value)


def test_malformed_json_names_the_file_and_position(tmp_path):
    file = tmp_path / "broken.json"
    file.write_text('{"augury": 1, "operators": [}')
    with pytest.raises(ModelError, match="malformed model file") as err:
        load_model(file)
    assert str(file) in str(err.value) and "line 1 column 29" in str(err.value)


def test_cycle_error_names_the_edges_and_the_cycle():
    data = _mutated(("edges",), BASE["edges"] + [{"from": "count", "to": "split"}])
    with pytest.raises(ModelError, match="cycle") as err:
        parse_model(data)
    assert err.value.field == "edges"
    assert "field 'edges' = 'split -> count -> split'" in str(err.value)


def test_missing_file():
    with pytest.raises(ModelError, match="cannot read"):
        load_model("/nonexistent/model.yaml")


def test_topology_without_profiles_is_allowed_when_asked():
    data = _mutated(("operators", 2, "service_time_ms"), _DELETE)
    model = parse_model(data, require_profiles=False)
    assert not model.has_profiles()


def test_config_overrides_are_validated():
    model = parse_model(BASE)
    assert model.resolve_config({"count": 5}) == {"source": 1, "split": 2, "count": 5}
    with pytest.raises(ConfigError, match="unknown operator") as err:
        model.resolve_config({"cnt": 5})
    assert "cnt" in str(err.value)
    with pytest.raises(ConfigError, match="outside") as err:
        model.resolve_config({"count": 129})
    assert "config.count" in str(err.value)


def test_rate_shares_must_sum_to_one():
    data = copy.deepcopy(BASE)
    data["operators"].insert(1, {"name": "s2", "role": "source", "rate_share": 0.7})
    data["operators"][0]["rate_share"] = 0.7
    data["edges"].append({"from": "s2", "to": "split"})
    with pytest.raises(ModelError, match="sum to 1") as err:
        parse_model(data)
    assert "rate_share" in str(err.value)


def test_restart_model_round_trips_and_defaults_to_none():
    plain = parse_model(BASE)
    assert plain.restart_base_s is None and plain.restore_mb_per_s is None
    assert plain.state_mb == 0.0 and all(op.state_mb == 0.0 for op in plain.operators)
    assert "restart_base_s" not in dump_model(plain) and "state_mb" not in dump_model(plain)
    data = copy.deepcopy(BASE)
    data.update(restart_base_s=12.5, restore_mb_per_s=80)
    data["operators"][2]["state_mb"] = 4000
    model = parse_model(data)
    assert model.operator("count").state_mb == 4000.0 and model.state_mb == 4000.0
    assert (model.restart_base_s, model.restore_mb_per_s) == (12.5, 80.0)
    for fmt in ("yaml", "json"):
        again = parse_model_text(dump_model(model, fmt))
        assert again.operators == model.operators
        assert (again.restart_base_s, again.restore_mb_per_s) == (12.5, 80.0)


def test_buffer_tuples_default_unbounded_edge_wins_and_round_trips():
    plain = parse_model(BASE)
    assert plain.buffer_tuples is None and all(e.buffer_tuples is None for e in plain.edges)
    assert "buffer_tuples" not in dump_model(plain)
    data = copy.deepcopy(BASE)
    data["buffer_tuples"] = 1000
    data["edges"][1]["buffer_tuples"] = 0
    model = parse_model(data)
    assert [model.edge_buffer(e) for e in model.edges] == [1000, 0]
    for fmt in ("yaml", "json"):
        again = parse_model_text(dump_model(model, fmt))
        assert again.edges == model.edges and again.buffer_tuples == 1000


def test_a_topology_file_may_give_state_without_a_restore_rate():
    data = _mutated(("operators", 2, "state_mb"), 100.0)
    assert parse_model(data, require_profiles=False).state_mb == 100.0


def test_a_file_name_no_file_can_have_is_a_model_error():
    # an embedded NUL (found by the run-config fuzz) is a ValueError from the OS layer: a typed
    # ModelError naming the path, not a traceback
    from modeler.errors import ModelError
    from modeler.modelfile import load_model

    with pytest.raises(ModelError) as info:
        load_model("model\0.yaml")
    assert "not a valid file name" in info.value.message


def test_resources_give_total_cores_default_unlimited_and_round_trip():
    plain = parse_model(BASE)
    assert plain.cores is None and all(op.cpu_share == 1.0 for op in plain.operators)
    assert "resources" not in dump_model(plain) and "cpu_share" not in dump_model(plain)
    per_tm = copy.deepcopy(BASE)
    per_tm["resources"] = {"taskmanagers": 2, "cores_per_taskmanager": 1.5}
    per_tm["operators"][1]["cpu_share"] = 0.25
    model = parse_model(per_tm)
    assert model.cores == 3.0 and model.operator("split").cpu_share == 0.25
    again = parse_model_text(dump_model(model))
    assert again.cores == 3.0 and again.operator("split").cpu_share == 0.25
    assert again.operator("count").cpu_share == 1.0


def test_cpu_overhead_per_instance_parses_round_trips_and_defaults_to_zero():
    plain = parse_model(BASE)
    assert plain.cpu_overhead_per_instance == 0.0
    data = copy.deepcopy(BASE)
    data["resources"] = {"cores": 2}
    cored = parse_model(data)
    assert cored.cpu_overhead_per_instance == 0.0
    assert "cpu_overhead_per_instance" not in dump_model(cored)  # files without it stay as they were
    data["resources"] = {"cores": 2, "cpu_overhead_per_instance": 0.03}
    model = parse_model(data)
    assert model.cpu_overhead_per_instance == 0.03 and model.cores == 2.0
    for fmt in ("yaml", "json"):
        again = parse_model_text(dump_model(model, fmt))
        assert again.cpu_overhead_per_instance == 0.03 and again == model
    data["resources"] = {"taskmanagers": 1, "cores_per_taskmanager": 2, "cpu_overhead_per_instance": 0}
    assert parse_model(data).cpu_overhead_per_instance == 0.0


def test_engine_cpu_parses_round_trips_and_defaults_to_zero():
    data = copy.deepcopy(BASE)
    data["resources"] = {"cores": 2}
    cored = parse_model(data)
    assert cored.engine_cpu_ms_per_tuple == 0.0 and parse_model(BASE).engine_cpu_ms_per_tuple == 0.0
    assert "engine_cpu_ms_per_tuple" not in dump_model(cored)  # files without it stay as they were
    data["resources"] = {"cores": 2, "engine_cpu_ms_per_tuple": 0.002, "cpu_overhead_per_instance": 0.03}
    model = parse_model(data)
    assert model.engine_cpu_ms_per_tuple == 0.002 and model.cpu_overhead_per_instance == 0.03
    for fmt in ("yaml", "json"):
        again = parse_model_text(dump_model(model, fmt))
        assert again.engine_cpu_ms_per_tuple == 0.002 and again == model


def test_source_cpu_cost_parses_round_trips_and_defaults_to_none():
    assert all(op.cpu_ms_per_tuple is None for op in parse_model(BASE).operators)
    assert "cpu_ms_per_tuple" not in dump_model(parse_model(BASE))
    data = copy.deepcopy(BASE)
    data["resources"] = {"cores": 2}
    data["operators"][0]["cpu_ms_per_tuple"] = 0.0025
    model = parse_model(data)
    assert model.operator("source").cpu_ms_per_tuple == 0.0025
    for fmt in ("yaml", "json"):
        again = parse_model_text(dump_model(model, fmt))
        assert again.operator("source").cpu_ms_per_tuple == 0.0025 and again == model


@pytest.mark.parametrize("where, value, field, message", [
    (0, -0.001, "operators[0].cpu_ms_per_tuple", "must be > 0"),
    (0, 0, "operators[0].cpu_ms_per_tuple", "must be > 0"),
    (0, "2us", "operators[0].cpu_ms_per_tuple", "must be a number"),
    (0, float("inf"), "operators[0].cpu_ms_per_tuple", "must be finite"),
    (0, 1e13, "operators[0].cpu_ms_per_tuple", "the documented limit"),
    (1, 0.002, "operators[1].cpu_ms_per_tuple", "only sources have a cpu_ms_per_tuple"),
])
def test_source_cpu_cost_errors_name_field_and_value(where, value, field, message):
    data = copy.deepcopy(BASE)
    data["operators"][where]["cpu_ms_per_tuple"] = value
    with pytest.raises(ModelError) as info:
        parse_model(data, source="m.yaml")
    err = info.value
    assert err.field == field and message in err.message and err.file == "m.yaml"
    assert err.value == value or message == "the documented limit"


def test_a_source_gives_a_cpu_cost_or_a_service_time_not_both():
    data = copy.deepcopy(BASE)
    data["operators"][0].update(service_time_ms=0.01, cpu_ms_per_tuple=0.002)
    with pytest.raises(ModelError) as info:
        parse_model(data)
    assert info.value.field == "operators[0].cpu_ms_per_tuple" and "one or the other" in info.value.message


def test_with_source_shares_sets_each_sources_share_and_names_a_bad_mix():
    two = parse_model({"augury": 1, "job": "q8", "operators": [
        {"name": "person", "role": "source", "parallelism": 1},
        {"name": "auction", "role": "source", "parallelism": 1},
        {"name": "join", "parallelism": 1, "service_time_ms": 0.01}],
        "edges": [{"from": "person", "to": "join"}, {"from": "auction", "to": "join"}]})
    mixed = two.with_source_shares({"person": 0.25, "auction": 0.75})
    assert mixed.source_shares() == {"person": 0.25, "auction": 0.75}
    assert two.source_shares() == {"person": 0.5, "auction": 0.5}  # a copy: the model is unchanged
    for bad in ({"person": 1.0}, {"person": 0.5, "auction": 0.6}, {"person": -0.5, "auction": 1.5},
                {"person": float("nan"), "auction": 1.0}):
        with pytest.raises(ModelError) as err:
            two.with_source_shares(bad)
        assert err.value.field == "rate_share"
    one = parse_model({"augury": 1, "job": "q1", "operators": [
        {"name": "bid", "role": "source", "parallelism": 1},
        {"name": "Calc", "parallelism": 1, "service_time_ms": 0.01}], "edges": [{"from": "bid", "to": "Calc"}]})
    assert one.with_source_shares({"anything": 3.0}) is one
