"""augury/commands/_run_schema.py: the run config's one schema table, its docs page and its checks.
Cheap tests only (no Spark, no loop)."""

import re
import tomllib
import typing
from dataclasses import fields
from pathlib import Path

import pytest

from augury.commands import _run_schema as rs
from augury.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("run-*.toml"))

UNDOCUMENTED = {"ReactiveConfig.queue_growth_exit", "ReactiveConfig.rate_skew_exit",
                "ReactiveConfig.queue_skew_exit", "ReactiveConfig.load_skew_exit"}
"""Fields without an attribute docstring today (their meaning is the ``..._enter`` field's exit
threshold). A new field without one fails ``test_fields_have_docstrings``."""


def _numeric_fields():
    for part in rs.SCHEMA:
        hints = typing.get_type_hints(part.cls)
        for key in part.toml_keys():
            name = part.field_name(key)
            if rs._is_numeric(hints[name]):
                yield part, name


def _defaults_as_toml(part):
    """Every key of ``part`` at its default, written as TOML would hand it over (lists)."""
    def toml(v):
        return [toml(x) for x in v] if isinstance(v, tuple) else v

    by_name = {f.name: f for f in fields(part.cls)}
    return {key: toml(rs._default(by_name[part.field_name(key)])) for key in part.toml_keys()
            if rs._default(by_name[part.field_name(key)]) is not None}


def _check_file(raw: dict, path: str) -> None:
    """Every section of a parsed run config through split_section + build (as run.py would)."""
    context = rs.context_of(raw)
    for section, body in raw.items():
        split, _hand = rs.split_section(section, body, path, context)
        for part, sub in split:
            rs.build(part.cls, sub, path, section, part.renames, keys=part.keys)


# ------------------------------------------------------------------ the docs page


def test_docs_page_is_current():
    committed = (ROOT / "docs" / "run-config.md").read_text()
    assert committed == rs.render_markdown(), \
        "docs/run-config.md is stale: python -m augury.commands._run_schema --write docs/run-config.md"


def test_check_and_write(tmp_path, capsys):
    page = tmp_path / "page.md"
    assert rs.main(["--check", str(page)]) == 1  # missing
    assert rs.main(["--write", str(page)]) == 0
    assert page.read_text() == rs.render_markdown()
    assert rs.main(["--check", str(page)]) == 0
    page.write_text(page.read_text() + "edited\n")
    assert rs.main(["--check", str(page)]) == 1
    assert "out of date" in capsys.readouterr().err


def test_rows_cover_every_key():
    rows = rs.field_rows()
    assert all(len(r[:6]) == 6 for r in rows)
    keys = {(r.section, r.key, r.source) for r in rows}
    for part in rs.SCHEMA:
        cls = part.cls
        for key in part.toml_keys():
            assert (part.section, key, f"{cls.__module__}.{cls.__qualname__}") in keys
    for h in rs.HAND_READ:
        assert (h.section, h.key, "run.py") in keys
    slo = {r.key: r for r in rows if r.section == "slo"}
    assert slo["latency_ms"].unit == "ms" and slo["latency_ms"].type == "float (optional)"
    assert slo["utilization_target"].default.startswith("`0.9` with `latency_ms`") \
        and slo["utilization_target"].range == "(0, 1]"
    assert slo["utilization_band"].default == "`[0.3, 0.85]`" and slo["utilization_band"].type == "[float, float]"


def test_fields_have_docstrings():
    missing = set()
    for part in rs.SCHEMA:
        docs = rs.attribute_docs(part.cls)
        missing |= {f"{part.class_name}.{part.field_name(k)}" for k in part.toml_keys()
                    if part.field_name(k) not in docs}
    assert missing <= UNDOCUMENTED, f"fields without a docstring under them: {sorted(missing - UNDOCUMENTED)}"


# ------------------------------------------------------------------ the table itself


def test_every_numeric_field_has_a_range():
    missing = [f"{part.class_name}.{name}" for part, name in _numeric_fields() if rs.range_of(part.cls, name) is None]
    assert not missing, f"add these to RANGES in augury/commands/_run_schema.py: {missing}"


def test_ranges_and_choices_name_real_fields():
    known = {f"{part.class_name}.{f.name}" for part in rs.SCHEMA for f in fields(part.cls)}
    assert not set(rs.RANGES) - known, "stale RANGES entries"
    assert not set(rs.CHOICES) - known, "stale CHOICES entries"
    for text in rs.RANGES.values():
        rs.Range.parse(text)
    # one class name per dataclass (RANGES is keyed by Class.field)
    targets = {part.target for part in rs.SCHEMA}
    assert len({t.rpartition(".")[2] for t in targets}) == len(targets)


def test_parts_name_real_keys():
    for part in rs.SCHEMA:
        names = {f.name for f in fields(part.cls)}
        assert {f for _, f in part.rename} <= names
        if part.keys is not None:
            assert set(part.keys) == set(part.toml_keys()), part


def test_choices_follow_the_code():
    from modeler.forecast.methods import METHODS
    from modeler.forecast.model import AUTO
    from scheduler.targets import LATENCY_STATS

    assert rs.CHOICES["Targets.latency_stat"] == LATENCY_STATS
    assert rs.CHOICES["PreemptiveConfig.method"] == (AUTO,) + METHODS
    from scheduler.schedule import SOLVERS

    assert rs.CHOICES["PreemptiveConfig.solver"] == SOLVERS


def test_hand_read_keys_are_read_by_run_py():
    source = (ROOT / "augury" / "commands" / "run.py").read_text()
    for h in rs.HAND_READ:
        assert f'"{h.key}"' in source, f"run.py no longer reads {h.section}.{h.key}: update HAND_READ"


def test_range_parse_and_text():
    r = rs.Range.parse("(0, 1]")
    assert 1 in r and 0.5 in r and 0 not in r and 1.01 not in r and str(r) == "(0, 1]"
    assert str(rs.Range.parse("[1, inf)")) == ">= 1" and str(rs.Range.parse("(0, inf)")) == "> 0"
    with pytest.raises(ValueError):
        rs.Range.parse("0..1")


# ------------------------------------------------------------------ coerce / build


@pytest.mark.parametrize("part", rs.SCHEMA, ids=lambda p: f"{p.section}-{p.class_name}")
def test_accepts_every_default(part):
    raw = _defaults_as_toml(part)
    kwargs = rs.coerce(part.cls, raw, "f.toml", part.section, part.renames, keys=part.keys)
    built = rs.build(part.cls, raw, "f.toml", part.section, part.renames, keys=part.keys)
    assert built == part.cls(**kwargs)
    assert all(getattr(built, k) == getattr(part.cls(), k) for k in kwargs)


def _error(cls, raw, section="slo", rename=None, **kw) -> UsageError:
    with pytest.raises(UsageError) as info:
        rs.build(cls, raw, "run.toml", section, rename, **kw)
    assert info.value.exit_code == 2 and info.value.file == "run.toml"
    return info.value


def test_unknown_key_lists_the_known_ones():
    from scheduler.guard import GuardRails

    err = _error(GuardRails, {"wobble": 3}, "guard")
    assert err.field == "guard.wobble" and err.value == 3
    assert "wobble" in str(err) and "max_parallelism" in err.message and "advisor" in err.message


def test_keys_restrict_a_shared_section():
    from scheduler.targets import Targets

    err = _error(Targets, {"catch_up_s": 10.0}, "slo", keys=("utilization_target",))
    assert err.field == "slo.catch_up_s" and "utilization_target" in err.message


@pytest.mark.parametrize("raw, field, words", [
    ({"stabilization_s": True}, "guard.stabilization_s", "not a boolean"),
    ({"stabilization_s": "60"}, "guard.stabilization_s", "not a string"),
    ({"max_parallelism": 8.0}, "guard.max_parallelism", "integer"),
    ({"max_parallelism": "8"}, "guard.max_parallelism", "integer"),
    ({"advisor": 1}, "guard.advisor", "true or false"),
    ({"blackout": "02:00-03:00"}, "guard.blackout", "array"),
    ({"blackout": [["02:00", 3]]}, "guard.blackout", "[0][1] must be a string"),
    ({"max_reconfigurations_per_day": 2.5}, "guard.max_reconfigurations_per_day", "integer"),
])
def test_wrong_type(raw, field, words):
    from scheduler.guard import GuardRails

    err = _error(GuardRails, raw, "guard")
    assert err.field == field and err.value == next(iter(raw.values())) and words in err.message
    assert field in str(err) and repr(err.value) in str(err)


def test_wrong_type_in_other_sections():
    from scheduler.deciders import ModelDeciderConfig
    from scheduler.flink import FlinkMetricsConfig
    from scheduler.targets import Targets

    assert "not a string" in _error(ModelDeciderConfig, {"utilization_band": [0.3, "0.8"]}).message
    assert "2 elements" in _error(ModelDeciderConfig, {"utilization_band": [0.3]}).message
    err = _error(Targets, {"latency_stat": 99})
    assert err.field == "slo.latency_stat" and "not an integer" in err.message
    err = _error(FlinkMetricsConfig, {"job_label": 7}, "metrics")
    assert err.field == "metrics.job_label" and err.value == 7


@pytest.mark.parametrize("cls_path, section, raw, rename", [
    ("scheduler.targets.Targets", "slo", {"utilization_target": 1.5}, None),
    ("scheduler.targets.Targets", "slo", {"utilization_target": 0}, None),
    ("scheduler.targets.Targets", "slo", {"latency_ms": -5.0}, {"latency_ms": "latency_slo_ms"}),
    ("scheduler.targets.Targets", "slo", {"latency_ms": float("inf")}, {"latency_ms": "latency_slo_ms"}),
    ("scheduler.targets.Targets", "slo", {"headroom": -0.1}, None),
    ("scheduler.targets.Targets", "intervals", {"catch_up_s": 0}, None),
    ("scheduler.loop.LoopConfig", "intervals", {"interval_s": 0}, None),
    ("scheduler.deciders.ModelDeciderConfig", "intervals", {"confirm_windows": 0}, None),
    ("scheduler.deciders.ModelDeciderConfig", "slo", {"utilization_band": [0.3, 1.2]}, None),
    ("scheduler.guard.GuardRails", "guard", {"min_parallelism": 0}, None),
    ("scheduler.guard.GuardRails", "guard", {"stabilization_s": -1}, None),
    ("scheduler.trust.TrustConfig", "trust", {"bad_windows": 0}, None),
    ("scheduler.reactive.ReactiveConfig", "reactive", {"trend_windows": 2}, None),
    ("scheduler.reactive.ReactiveConfig", "reactive", {"max_scale_factor": 0.5}, None),
    ("scheduler.state.BlacklistConfig", "blacklist", {"band_ratio": 1.0}, None),
    ("scheduler.deciders.PreemptiveConfig", "forecast", {"quantile": 1.0}, None),
    ("scheduler.deciders.PreemptiveConfig", "forecast", {"max_reconfigurations_per_day": 0}, None),
    ("scheduler.forecasting.LoadForecastConfig", "forecast", {"lookahead_s": -60}, None),
    ("scheduler.flink.FlinkMetricsConfig", "metrics", {"window_s": 0}, None),
    ("scheduler.flink.LiveActuatorConfig", "actuator", {"poll_s": 0}, None),
])
def test_out_of_range(cls_path, section, raw, rename):
    cls = rs.Part(section, cls_path).cls
    err = _error(cls, raw, section, rename)
    key, value = next(iter(raw.items()))
    assert err.field == f"{section}.{key}" and err.value == value and "must be" in err.message
    assert f"{section}.{key}" in str(err)


def test_choices():
    from scheduler.flink import FlinkMetricsConfig
    from scheduler.forecasting import LoadForecastConfig
    from scheduler.trust import TrustConfig

    assert "counters, rates" in _error(FlinkMetricsConfig, {"mode": "gauges"}, "metrics").message
    assert _error(TrustConfig, {"latency_stat": "p50"}, "trust").field == "trust.latency_stat"
    assert "holt-winters" in _error(LoadForecastConfig, {"method": "prophet"}, "forecast").message


def test_cross_field_rules():
    from scheduler.deciders import ModelDeciderConfig
    from scheduler.guard import GuardRails
    from scheduler.reactive import ReactiveConfig
    from scheduler.state import BlacklistConfig

    err = _error(GuardRails, {"min_parallelism": 200}, "guard")
    assert err.field == "guard.min_parallelism" and err.value == 200 and "max_parallelism (128)" in err.message
    assert _error(GuardRails, {"min_parallelism": 4, "max_parallelism": 2}, "guard").field == "guard.max_parallelism"
    err = _error(GuardRails, {"blackout": [["2:00", "03:00"]]}, "guard")
    assert err.field == "guard.blackout" and "HH:MM" in err.message
    assert _error(GuardRails, {"blackout": [["02:00", "24:00"]]}, "guard").field == "guard.blackout"
    assert _error(ModelDeciderConfig, {"utilization_band": [0.8, 0.3]}).field == "slo.utilization_band"
    assert _error(BlacklistConfig, {"max_s": 60.0}, "blacklist").field == "blacklist.max_s"
    assert _error(ReactiveConfig, {"backpressure_exit": 0.5}, "reactive").field == "reactive.backpressure_exit"
    # the defaults alone never trip a rule (a window that wraps midnight is fine)
    assert rs.build(GuardRails, {"blackout": [["23:00", "01:00"]]}, "f", "guard").blackout == (("23:00", "01:00"),)


def test_conversions_and_renames():
    from scheduler.deciders import ModelDeciderConfig
    from scheduler.targets import Targets

    t = rs.build(Targets, {"latency_ms": 50, "catch_up_s": 60}, "f", "slo", {"latency_ms": "latency_slo_ms"})
    assert t.latency_slo_ms == 50.0 and isinstance(t.latency_slo_ms, float) and isinstance(t.catch_up_s, float)
    # run.py hands over pre-renamed keys and tuples today: still accepted (drop-in for _dataclass_from)
    assert rs.build(Targets, {"latency_slo_ms": 5.0}, "f", "slo").latency_slo_ms == 5.0
    assert rs.build(ModelDeciderConfig, {"utilization_band": (0.2, 0.9)}, "f", "slo").utilization_band == (0.2, 0.9)
    err = _error(Targets, {"latency_ms": 5.0, "latency_slo_ms": 6.0}, "slo", {"latency_ms": "latency_slo_ms"})
    assert "given twice" in err.message


def test_own_validation_errors_get_the_section(monkeypatch):
    """Without a range here, the dataclass's own check still answers, named section.key."""
    from scheduler.forecasting import LoadForecastConfig
    from scheduler.targets import Targets

    monkeypatch.delitem(rs.RANGES, "Targets.latency_slo_ms")
    err = _error(Targets, {"latency_ms": -5.0}, "slo", {"latency_ms": "latency_slo_ms"})
    assert err.field == "slo.latency_ms" and err.value == -5.0
    monkeypatch.delitem(rs.RANGES, "LoadForecastConfig.quantile")
    err = _error(LoadForecastConfig, {"quantile": 1.5}, "forecast")  # check() names "forecast.quantile"
    assert err.field == "forecast.quantile" and err.value == 1.5


# ------------------------------------------------------------------ whole files


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_configs_round_trip(path):
    raw = tomllib.loads(path.read_text())
    _check_file(raw, str(path))


def test_control_loop_doc_snippets_round_trip():
    text = (ROOT / "docs" / "control-loop.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        _check_file(tomllib.loads(block), "docs/control-loop.md")


def test_split_section():
    ctx = {"decider": "model", "source": "testbed", "actuator": "testbed"}
    split, hand = rs.split_section("slo", {"latency_ms": 5.0, "utilization_band": [0.2, 0.9]}, "f", ctx)
    assert {p.class_name: sub for p, sub in split} == {"Targets": {"latency_ms": 5.0},
                                                      "ModelDeciderConfig": {"utilization_band": [0.2, 0.9]}}
    assert hand == {}
    with pytest.raises(UsageError) as info:
        rs.split_section("slo", {"latency_slo_ms": 5.0}, "f", ctx)
    assert info.value.field == "slo.latency_slo_ms" and "latency_ms" in info.value.message \
        and "utilization_band" in info.value.message
    # the testbed's keys are not Flink's, and the other way round
    _, hand = rs.split_section("metrics", {"source": "testbed", "rate": 10.0}, "f", ctx)
    assert hand == {"source": "testbed", "rate": 10.0}
    with pytest.raises(UsageError):
        rs.split_section("metrics", {"window_s": 10.0}, "f", ctx)
    flink = {"decider": "preemptive", "source": "flink", "actuator": "flink-rest"}
    with pytest.raises(UsageError):
        rs.split_section("metrics", {"seed": 1}, "f", flink)
    split, hand = rs.split_section("forecast", {"store": "s", "replan_s": 60.0}, "f", flink)
    assert [(p.class_name, sub) for p, sub in split] == [("PreemptiveConfig", {"replan_s": 60.0})]
    assert hand == {"store": "s"}
    with pytest.raises(UsageError) as info:
        rs.split_section("sloo", {}, "f", ctx)
    assert info.value.field == "sloo" and "unknown section" in info.value.message
