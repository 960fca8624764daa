"""Config, load, trace and fault inputs: valid ones load, invalid ones raise a clear TestbedError."""

from __future__ import annotations

import math

import pytest

from experiments.testbed import (OperatorOverride, PiecewiseRate, Testbed, TestbedConfig, TestbedError,
                                 load_faults, load_trace, parse_faults)
from modeler.errors import AuguryError
from modeler.modelfile import load_model
from tests.conftest import EXAMPLES


@pytest.fixture
def wordcount():
    return load_model(EXAMPLES / "wordcount.yaml")


def test_testbed_error_is_an_augury_error():
    assert issubclass(TestbedError, AuguryError) and TestbedError("x").exit_code == 2


@pytest.mark.parametrize("kwargs, field", [
    ({"service_distribution": "weibull"}, "service_distribution"),
    ({"restart_s": -1.0}, "restart_s"),
    ({"window_s": 0}, "window_s"),
    ({"queue_capacity": 0}, "queue_capacity"),
    ({"network_delay_ms": -0.5}, "network_delay_ms"),
    ({"network_delay_distribution": "pareto"}, "network_delay_distribution"),
    ({"shuffle": "hash"}, "shuffle"),
    ({"start_time": "yesterday-ish"}, "start_time"),
    ({"operators": {"split": OperatorOverride(service_distribution="cauchy")}}, "operators.split.service_distribution"),
    ({"operators": {"nope": OperatorOverride()}}, "operators"),
])
def test_invalid_config_names_the_field(wordcount, kwargs, field):
    with pytest.raises(TestbedError) as err:
        Testbed(wordcount, 100.0, TestbedConfig(**kwargs))
    assert err.value.field == field


def test_bimodal_beyond_its_reach_is_an_error(wordcount):
    cfg = TestbedConfig(operators={"split": OperatorOverride(service_distribution="bimodal", service_scv=20.0)})
    with pytest.raises(TestbedError, match="bimodal"):
        Testbed(wordcount, 100.0, cfg)


@pytest.mark.parametrize("family", ["exponential", "gamma", "lognormal", "deterministic", "bimodal"])
def test_service_families_keep_the_mean(wordcount, family):
    cfg = TestbedConfig(seed=1, operators={"split": OperatorOverride(service_distribution=family, service_scv=2.0)})
    tb = Testbed(wordcount, 300.0, cfg)
    tb.advance(40)
    f = tb.frame()
    f = f[f.operator == "split"]
    per_tuple = f[f.metric == "busy_ms"].value.sum() / f[f.metric == "records_in"].value.sum()
    assert per_tuple == pytest.approx(0.5, rel=0.05)


def test_negative_rates_and_durations_are_errors(wordcount):
    with pytest.raises(TestbedError):
        Testbed(wordcount, -5.0)
    with pytest.raises(TestbedError):
        PiecewiseRate(times_s=(0.0, 10.0), rates=(1.0, -2.0))
    tb = Testbed(wordcount, 10.0)
    with pytest.raises(TestbedError):
        tb.advance(-1)


def test_faults_parse_and_validate(wordcount, tmp_path):
    path = tmp_path / "faults.yaml"
    path.write_text("faults:\n"
                    "  - {type: slow_instance, operator: split, instance: 1, factor: 3, start_s: 5, end_s: 9}\n"
                    "  - {type: hot_key, edge: split->count, share: 0.2, start_s: 4}\n"
                    "  - {type: rescale, at_s: 6, config: {count: 3}}\n")
    faults = load_faults(path)
    assert len(faults) == 3 and math.isinf(faults[1].end_s)
    tb = Testbed(wordcount, 200.0, TestbedConfig(seed=1), faults=faults)
    tb.advance(12)
    assert tb.current()["count"] == 3
    assert [e["event"] for e in tb.events][:4] == ["run_start", "fault_start", "fault_start", "reconfigure"]


@pytest.mark.parametrize("text, field", [
    ("faults: [{type: meteor, start_s: 1}]", "faults[0].type"),
    ("faults: [{type: slow_instance, operator: split, instance: 0, factor: 2, start_s: -3}]", "faults[0].start_s"),
    ("faults: [{type: slow_instance, operator: split, instance: 0, factor: 0, start_s: 1}]", "faults[0].factor"),
    ("faults: [{type: slow_instance, operator: split, instance: 0, factor: 2, start_s: 5, end_s: 2}]",
     "faults[0].end_s"),
    ("faults: [{type: hot_key, edge: split, share: 0.2, start_s: 1}]", "faults[0].edge"),
    ("faults: [{type: hot_key, edge: split->count, share: 1.5, start_s: 1}]", "faults[0].share"),
    ("faults: [{type: rescale, at_s: 1, config: {split: 0}}]", "faults[0].config.split"),
    ("faults: [{type: rescale, at_s: 1, config: {split: 2}, when: now}]", "faults[0].when"),
    ("faults: 3", "faults"),
])
def test_invalid_fault_files_name_the_field(tmp_path, text, field):
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(TestbedError) as err:
        load_faults(path)
    assert err.value.field == field and err.value.file == str(path)


@pytest.mark.parametrize("fault, field, match", [
    ({"type": "slow_instance", "operator": "split", "instance": 2, "factor": 2, "start_s": 1},
     "faults[0].instance", "no such instance"),
    ({"type": "slow_instance", "operator": "nope", "instance": 0, "factor": 2, "start_s": 1},
     "faults[0].operator", "unknown operator"),
    ({"type": "hot_key", "edge": "source->split", "share": 0.1, "start_s": 1}, "faults[0].edge", "key-grouped"),
    ({"type": "hot_key", "edge": "count->split", "share": 0.1, "start_s": 1}, "faults[0].edge", "no such edge"),
])
def test_faults_naming_missing_things_are_errors(wordcount, fault, field, match):
    with pytest.raises(TestbedError, match=match) as err:
        Testbed(wordcount, 10.0, faults=parse_faults([fault]))
    assert err.value.field == field


def test_unreadable_fault_file(tmp_path):
    with pytest.raises(TestbedError, match="cannot read"):
        load_faults(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("faults: [unclosed")
    with pytest.raises(TestbedError, match="malformed"):
        load_faults(bad)


def test_trace_gaps_are_interpolated_and_counted(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("timestamp,value\n2020-01-01 00:00:00,60\n2020-01-01 00:01:00,120\n"
                    "2020-01-01 00:03:00,240\n2020-01-01 00:04:00,\n2020-01-01 00:05:00,60\n")
    tr = load_trace(path, speedup=6.0)
    assert tr.interval_s == 60 and tr.filled == 2  # 00:02 has no row, 00:04 is empty
    assert tr.rates == pytest.approx((1.0, 2.0, 3.0, 4.0, 2.5, 1.0))
    assert tr.times_s == pytest.approx((0.0, 10.0, 20.0, 30.0, 40.0, 50.0))  # 60 s / 6
    assert tr.end_s == pytest.approx(60.0)
    peak = load_trace(path, peak_rate=400.0)
    assert max(peak.rates) == pytest.approx(400.0) and peak.factor == pytest.approx(100.0)
    later = load_trace(path, start="2020-01-01 00:03:30", speedup=2.0)
    assert later.rates[0] == pytest.approx(4.0) and later.times_s[1] == pytest.approx(15.0)
    with pytest.raises(TestbedError, match="holds"):
        load_trace(path, duration_s=400.0)


def test_trace_drives_the_arrivals(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("time,count\n" + "".join(f"2020-01-01 00:{m:02d}:00,{c}\n"
                                             for m, c in enumerate([6000, 30000, 6000, 30000])))
    tr = load_trace(path, speedup=6.0)  # 100/s and 500/s alternating every 10 s
    tb = Testbed(load_model(EXAMPLES / "wordcount.yaml"), tr, TestbedConfig(seed=2))
    tb.advance(40)
    arrivals = tb.frame().query("metric == 'records_in' and operator == 'source'").value.to_numpy()
    assert arrivals == pytest.approx([1000, 5000, 1000, 5000], rel=0.1)


def test_real_trace_with_missing_rows(traces_dir):
    tr = load_trace(traces_dir / "nab_elb_request_count_8c0756.csv", speedup=300.0, peak_rate=1000.0)
    assert tr.filled == 8 and tr.interval_s == 300
    assert all(math.isfinite(r) for r in tr.rates) and max(tr.rates) == pytest.approx(1000.0)


@pytest.mark.parametrize("content", [None, "", "timestamp,value\nnot-a-time,3\n", "timestamp,value\n2020-01-01,abc\n"])
def test_unreadable_traces_are_errors(tmp_path, content):
    path = tmp_path / "trace.csv"
    if content is not None:
        path.write_text(content)
    with pytest.raises(TestbedError) as err:
        load_trace(path)
    assert err.value.file == str(path)
