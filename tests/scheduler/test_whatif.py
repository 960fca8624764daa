"""scheduler.whatif and augury whatif: sweep parsing, the table agrees with predict, cheapest per
rate equals a brute-force minimum, chunking and Spark give the local table, the CLI contract."""

from __future__ import annotations

import io
import json
import sys

import numpy as np
import pandas as pd
import pytest

from augury.cli import main
from modeler.modelfile import load_model, parse_model
from modeler.queueing import compile_model, predict
from scheduler.errors import SchedulerError
from scheduler.whatif import (
    CheapestPerRate, Targets, cheapest_per_rate, config_table, configs_space, iter_predictions,
    iter_spark_predictions, parse_rates, parse_sweep, predict_rows, predict_sweep, read_configs, sweep_space, table_columns,
)
from tests.conftest import EXAMPLES

PIPELINE = str(EXAMPLES / "pipeline.yaml")
DIAMOND = str(EXAMPLES / "diamond.yaml")


@pytest.fixture(scope="module")
def pipeline():
    return compile_model(load_model(PIPELINE))


@pytest.fixture(scope="module")
def diamond():
    return compile_model(load_model(DIAMOND))


def _sweep(compiled, *flags):
    return sweep_space(compiled, [parse_sweep(f) for f in flags])


# ------------------------------------------------------------------------ parsing


@pytest.mark.parametrize("text,values", [
    ("op=1..16", tuple(range(1, 17))),
    ("op=1,2,4,8", (1, 2, 4, 8)),
    ("op=1..16:2", (1, 3, 5, 7, 9, 11, 13, 15)),
    ("op=4", (4,)),
    (" op = 1..4 , 8,4 ", (1, 2, 3, 4, 8)),
    ("op=2..2", (2,)),
])
def test_parse_sweep(text, values):
    sweep = parse_sweep(text)
    assert sweep.operator == "op" and sweep.values == values and sweep.text == text


@pytest.mark.parametrize("text", ["op", "=1..4", "op=", "op=a", "op=4..1", "op=1..8:0", "op=0..3",
                                  "op=1..", "op=1.5", "op=1,,2", "op=-1", "op=1..4:x"])
def test_parse_sweep_rejects(text):
    with pytest.raises(SchedulerError) as err:
        parse_sweep(text)
    assert err.value.field == "--sweep" and err.value.value == text
    assert "field '--sweep'" in str(err.value) and repr(text) in str(err.value)


@pytest.mark.parametrize("text,rates", [
    ("1000:5000:5", [1000, 2000, 3000, 4000, 5000]),
    ("0:1:3", [0, 0.5, 1]),
    ("250", [250]),
    ("7:7:1", [7]),
])
def test_parse_rates(text, rates):
    assert np.allclose(parse_rates(text), rates)


@pytest.mark.parametrize("text", ["", "1:2", "a:2:3", "1:2:0", "1:2:2.5", "5:1:3", "-1:2:3", "1:inf:3",
                                  "nan", "1:2:1", "3:3:4", "1:2:3:4"])
def test_parse_rates_rejects(text):
    with pytest.raises(SchedulerError) as err:
        parse_rates(text)
    assert err.value.field == "--rates" and err.value.value == text


def test_sweep_space_is_the_cartesian_product(pipeline):
    space = _sweep(pipeline, "sessionize=1..3", "score=1,2")
    assert space.size == 6 and space.varying == ("sessionize", "score")
    P = space.block(np.arange(6))
    s, c = pipeline.index["sessionize"], pipeline.index["score"]
    assert [(r[s], r[c]) for r in P] == [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)]
    base = pipeline.config_array([{}])[0]
    others = [j for j in range(len(pipeline.names)) if j not in (s, c)]
    assert (P[:, others] == base[others]).all()
    assert space.label(P[3]) == "sessionize=2,score=2"
    # No sweep: the model's own configuration.
    assert sweep_space(pipeline, []).size == 1
    assert (sweep_space(pipeline, []).block(np.array([0]))[0] == base).all()


@pytest.mark.parametrize("flags,needle", [
    (["nope=1..3"], "unknown operator 'nope'"),
    (["score=1..3", "score=2"], "swept twice"),
    (["sink=1..40"], "outside [1, 32]"),
    (["decode=0..2"], None),  # rejected by the parser already
])
def test_sweep_space_rejects(pipeline, flags, needle):
    with pytest.raises(SchedulerError) as err:
        _sweep(pipeline, *flags)
    assert err.value.field == "--sweep"
    if needle:
        assert needle in str(err.value)


def test_sweep_space_caps_the_configurations(pipeline):
    with pytest.raises(SchedulerError, match="configurations"):
        sweep_space(pipeline, [parse_sweep("decode=1..100"), parse_sweep("score=1..100")], max_configurations=9_999)


FORWARD = {
    "augury": 1, "job": "fwd",
    "operators": [
        {"name": "src", "role": "source", "parallelism": 2},
        {"name": "map", "parallelism": 2, "service_time_ms": 0.5},
        {"name": "enrich", "parallelism": 2, "service_time_ms": 0.7},
        {"name": "sink", "parallelism": 1, "service_time_ms": 0.1},
    ],
    "edges": [{"from": "src", "to": "map"}, {"from": "map", "to": "enrich", "grouping": "forward"},
              {"from": "enrich", "to": "sink"}],
}


def test_sweeping_a_forward_group_sets_every_member():
    compiled = compile_model(parse_model(FORWARD))
    space = _sweep(compiled, "map=1..4")
    P = space.block(np.arange(space.size))
    assert (P[:, compiled.index["map"]] == P[:, compiled.index["enrich"]]).all()
    table = predict_sweep(compiled, space, np.array([100.0]))  # would raise on unequal parallelism
    assert len(table) == 4
    with pytest.raises(SchedulerError, match="tied to map"):
        _sweep(compiled, "map=1..4", "enrich=2")


# ------------------------------------------------------------------------ the table


def test_table_agrees_with_predict(pipeline):
    space = _sweep(pipeline, "sessionize=1..8", "score=1,3")
    rates = parse_rates("500:6000:12")
    table = predict_sweep(pipeline, space, rates)
    assert list(table.columns) == table_columns(pipeline.names)
    assert len(table) == space.size * len(rates)
    assert (table["config_id"].to_numpy() == np.repeat(np.arange(space.size), len(rates))).all()
    assert (table["rate"].to_numpy() == np.tile(rates, space.size)).all()
    assert table["saturated"].any() and not table["saturated"].all()
    rng = np.random.default_rng(1)
    for i in rng.choice(len(table), 25, replace=False):
        row = table.iloc[i]
        config = {n: int(row[f"p_{n}"]) for n in pipeline.names}
        pred = predict(pipeline, config, float(row["rate"]))
        assert row["instances"] == sum(config.values())
        assert row["throughput"] == pytest.approx(pred.throughput, rel=1e-12)
        assert row["max_rate"] == pytest.approx(pred.max_rate, rel=1e-12)
        assert row["bottleneck"] == pred.bottleneck
        assert row["saturated"] == pred.saturated
        assert row["max_utilization"] == pytest.approx(max(o.max_utilization for o in pred.operators.values()), rel=1e-12)
        for stat in ("mean", "p95", "p99"):
            expected = pred.latency_ms[stat]
            if expected is None:
                assert np.isnan(row[f"latency_{stat}_ms"])
            else:
                assert row[f"latency_{stat}_ms"] == pytest.approx(expected, rel=1e-12)


def test_chunks_give_the_whole_table(pipeline):
    space = _sweep(pipeline, "sessionize=1..6", "dedup=1,2")
    rates = parse_rates("1000:4000:7")
    whole = predict_sweep(pipeline, space, rates)
    chunks = list(iter_predictions(pipeline, space, rates, chunk_rows=5))  # chunks cut configurations
    assert max(len(c) for c in chunks) <= 5 and len(chunks) == int(np.ceil(len(whole) / 5))
    pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), whole, rtol=1e-12)
    empty = predict_rows(pipeline, space, rates, 0, 0)
    assert len(empty) == 0 and list(empty.columns) == list(whole.columns)


def test_config_table_is_the_max_rate_per_configuration(diamond):
    space = _sweep(diamond, "parse=1..4", "enrich=2..5")
    table = predict_sweep(diamond, space, parse_rates("1000:9000:3"))
    configs = config_table(table)
    assert list(configs["config_id"]) == list(range(space.size))
    for row in configs.itertuples(index=False):
        config = {n: int(getattr(row, f"p_{n}")) for n in diamond.names}
        pred = predict(diamond, config, 1.0)
        assert row.max_rate == pytest.approx(pred.max_rate, rel=1e-12) and row.bottleneck == pred.bottleneck


# ------------------------------------------------------------------ cheapest per rate


def _brute_force(table: pd.DataFrame, targets: Targets) -> dict[float, tuple | None]:
    """Per rate, min over every row meeting the targets of (instances, statistic, config_id)."""
    best: dict[float, tuple | None] = {}
    stat = f"latency_{targets.latency_stat}_ms"
    for row in table.to_dict("records"):
        best.setdefault(row["rate"], None)
        ok = (not row["saturated"]) and row["max_utilization"] <= targets.utilization_target
        if targets.latency_slo_ms is not None:
            ok = ok and not np.isnan(row[stat]) and row[stat] <= targets.latency_slo_ms
        if ok:
            key = (row["instances"], row[stat], row["config_id"])
            if best[row["rate"]] is None or key < best[row["rate"]]:
                best[row["rate"]] = key
    return best


@pytest.mark.parametrize("targets", [
    Targets(),
    Targets(utilization_target=0.5, latency_slo_ms=15.0, latency_stat="p99"),
    Targets(utilization_target=0.9, latency_slo_ms=8.0, latency_stat="mean"),
    Targets(utilization_target=1.0, latency_slo_ms=12.0, latency_stat="p95"),
])
def test_cheapest_per_rate_equals_brute_force(pipeline, targets):
    space = _sweep(pipeline, "decode=1..3", "sessionize=1..8", "score=1..4")
    rates = parse_rates("500:7000:14")
    table = predict_sweep(pipeline, space, rates)
    expected = _brute_force(table, targets)
    got = cheapest_per_rate(table, targets, rates)
    assert list(got["rate"]) == list(rates)
    assert got["feasible"].any()
    for row in got.to_dict("records"):
        want = expected[row["rate"]]
        assert row["feasible"] == (want is not None)
        if want is not None:
            assert (row["instances"], row["config_id"]) == (want[0], want[2])
            assert row[f"latency_{targets.latency_stat}_ms"] == want[1]
    # Streaming over chunks (that cut configurations) gives the same answer.
    acc = CheapestPerRate(targets)
    for chunk in iter_predictions(pipeline, space, rates, chunk_rows=37):
        acc.update(chunk)
    pd.testing.assert_frame_equal(acc.result(rates), got)


def test_cheapest_per_rate_without_any_feasible_row(diamond):
    table = predict_sweep(diamond, _sweep(diamond, "parse=1,2"), parse_rates("50000:60000:2"))
    got = cheapest_per_rate(table)
    assert not got["feasible"].any() and got["config_id"].isna().all()


def test_targets_are_validated():
    for kwargs, field in [({"utilization_target": 0.0}, "utilization_target"),
                          ({"latency_slo_ms": -1.0}, "latency_slo_ms"), ({"latency_stat": "p50"}, "latency_stat")]:
        with pytest.raises(SchedulerError) as err:
            Targets(**kwargs)
        assert err.value.field == field


# --------------------------------------------------------------------- config files


def test_read_configs_csv_json_parquet(pipeline, tmp_path):
    csv = tmp_path / "c.csv"
    csv.write_text("config_id,sessionize,p_score\n0,4,2\n1,8,\n2,,3\n")
    space = read_configs(csv, pipeline)
    base = pipeline.config_array([{}])[0]
    P = space.block(np.arange(3))
    s, c = pipeline.index["sessionize"], pipeline.index["score"]
    assert [(r[s], r[c]) for r in P] == [(4, 2), (8, base[c]), (base[s], 3)]
    js = tmp_path / "c.json"
    js.write_text(json.dumps([{"sessionize": 4, "score": 2}, {"sessionize": 8}]))
    assert (read_configs(js, pipeline).block(np.arange(2)) == P[:2]).all()
    pq = tmp_path / "c.parquet"
    pd.DataFrame({"sessionize": [4, 8], "score": [2, base[c]]}).to_parquet(pq)
    assert (read_configs(pq, pipeline).block(np.arange(2)) == P[:2]).all()


@pytest.mark.parametrize("name,text,field", [
    ("a.csv", "sessionize,bogus\n1,2\n", "columns"),
    ("b.csv", "sessionize\n1.5\n", "row 0.sessionize"),
    ("c.csv", "sessionize\n4\n500\n", "config.sessionize"),
    ("d.json", '{"sessionize": 4}', "--configs"),
    ("e.json", '[{"sessionize": "x"}]', "[0].sessionize"),
    ("f.json", '[{"nope": 1}]', "config"),
    ("g.json", "[", "--configs"),
    ("h.txt", "sessionize\n1\n", "--configs"),
    ("i.csv", "", "--configs"),
])
def test_read_configs_rejects(pipeline, tmp_path, name, text, field):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SchedulerError) as err:
        read_configs(path, pipeline)
    assert err.value.field == field
    assert name in str(err.value)


def test_configs_space_names_the_row(pipeline):
    with pytest.raises(SchedulerError, match="configuration 1"):
        configs_space(pipeline, [{"score": 2}, {"score": 0}], file="x.json")
    with pytest.raises(SchedulerError):
        configs_space(pipeline, [])


# ------------------------------------------------------------------------- Spark


@pytest.mark.spark
def test_spark_path_equals_local_path(spark, pipeline):
    model = load_model(PIPELINE)
    rates = parse_rates("500:7000:9")
    spaces = [_sweep(pipeline, "decode=1..3", "sessionize=1..5", "score=1,2,4"),
              configs_space(pipeline, [{"score": 2}, {"sessionize": 7, "score": 5}, {"dedup": 3}, {}])]
    for space in spaces:
        local = predict_sweep(pipeline, space, rates)
        # Several blocks (one Spark job each), 3 partitions per block, chunks inside partitions.
        remote = pd.concat(iter_spark_predictions(spark, model, space, rates, block_rows=200, partitions=3,
                                                  chunk_rows=20), ignore_index=True)
        assert list(remote.columns) == list(local.columns)
        # p95/p99 come from an iterative numerical inversion whose last bits depend on the
        # batch's composition (numpy's vectorized exp/log round differently in SIMD lanes and
        # loop tails): equal to 1e-9 (the inversion itself is accurate to ~1e-7).
        tails = ["latency_p95_ms", "latency_p99_ms"]
        pd.testing.assert_frame_equal(remote.drop(columns=tails), local.drop(columns=tails), rtol=1e-12)
        pd.testing.assert_frame_equal(remote[tails], local[tails], rtol=1e-9)
        targets = Targets(latency_slo_ms=20.0)
        pd.testing.assert_frame_equal(cheapest_per_rate(remote, targets, rates), cheapest_per_rate(local, targets, rates))


# --------------------------------------------------------------------------- CLI


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


JSON_KEYS = {"rows", "configurations", "rates", "out", "tables", "plots", "targets", "engine",
             "best_max_rate", "cheapest"}
CHEAPEST_KEYS = {"rate", "feasible", "config_id", "config", "label", "instances", "max_rate", "bottleneck",
                 "max_utilization", "latency_ms"}


def test_cli_json_table_and_plots(capsys, tmp_path, pipeline):
    out = tmp_path / "sweep.parquet"
    code, stdout, _ = _run(capsys, ["whatif", PIPELINE, "--rates", "500:3000:6", "--sweep", "sessionize=1..8",
                                    "--sweep", "score=1,2,4", "--out", str(out), "--plots", str(tmp_path / "plots"),
                                    "--latency-slo-ms", "25", "--chunk-rows", "7", "--json"])
    assert code == 0
    data = json.loads(stdout)
    assert set(data) == JSON_KEYS
    assert (data["rows"], data["configurations"], data["rates"]) == (144, 24, 6)
    assert data["engine"] == "local" and data["out"] == str(out)
    # no --utilization-target under an SLO: 0.9 is only a ceiling, the SLO sizes (scheduler.targets)
    assert data["targets"] == {"utilization_target": 0.9, "latency_slo_ms": 25.0, "latency_stat": "p99"}
    assert len(data["cheapest"]) == 6 and all(set(e) == CHEAPEST_KEYS for e in data["cheapest"])
    assert all(e["feasible"] and e["latency_ms"]["p99"] <= 25 for e in data["cheapest"])
    for path in data["plots"]:
        assert path.endswith(".png") and (tmp_path / "plots" / path.split("/")[-1]).stat().st_size > 10_000
    assert len(data["plots"]) == 3
    table = pd.read_parquet(out)
    space = _sweep(pipeline, "sessionize=1..8", "score=1,2,4")
    expected = predict_sweep(pipeline, space, parse_rates("500:3000:6"))
    pd.testing.assert_frame_equal(table, expected, rtol=1e-12)
    configs = pd.read_parquet(data["tables"]["max_rate"])
    pd.testing.assert_frame_equal(configs, config_table(expected), rtol=1e-12)
    best = pd.read_parquet(data["tables"]["cheapest"])
    want = cheapest_per_rate(expected, Targets(latency_slo_ms=25.0), parse_rates("500:3000:6"))
    assert list(best["config_id"]) == list(want["config_id"]) == [e["config_id"] for e in data["cheapest"]]
    assert data["best_max_rate"]["max_rate"] == pytest.approx(configs["max_rate"].max())
    assert not list(tmp_path.glob("*.partial"))


def test_cli_csv_text_summary_and_exit_1_when_a_rate_is_infeasible(capsys, tmp_path):
    out = tmp_path / "t.csv"
    code, stdout, _ = _run(capsys, ["whatif", DIAMOND, "--rates", "1000:60000:4", "--sweep", "parse=1..4",
                                    "--out", str(out)])
    assert code == 1  # 60,000 tuples/s is beyond every swept configuration
    assert "no configuration meets the targets" in stdout and "16 rows (4 configurations x 4 rates)" in stdout
    table = pd.read_csv(out)
    assert len(table) == 16 and table["saturated"].iloc[-1]
    assert len(pd.read_csv(tmp_path / "t.max_rate.csv")) == 4
    assert len(pd.read_csv(tmp_path / "t.cheapest.csv")) == 4


def test_cli_configs_file(capsys, tmp_path):
    configs = tmp_path / "c.json"
    configs.write_text(json.dumps([{"parse": 2, "enrich": 3}, {"parse": 4, "enrich": 6}]))
    code, stdout, _ = _run(capsys, ["whatif", DIAMOND, "--rates", "2000", "--configs", str(configs),
                                    "--out", str(tmp_path / "t.csv"), "--json"])
    data = json.loads(stdout)
    assert code == 0 and (data["rows"], data["configurations"], data["rates"]) == (2, 2, 1)
    assert data["cheapest"][0]["config"]["parse"] == 2


@pytest.mark.parametrize("extra,field", [
    (["--rates", "1:2"], "--rates"),
    (["--rates", "100:200:3", "--sweep", "parse"], "--sweep"),
    (["--rates", "100:200:3", "--sweep", "nope=1..3"], "--sweep"),
    (["--rates", "100:200:3", "--sweep", "parse=1..500"], "--sweep"),
    (["--rates", "100:200:3", "--utilization-target", "2"], "--utilization-target"),
    (["--rates", "100:200:3", "--configs", "/nonexistent/c.csv"], "--configs"),
    (["--rates", "100:200:3", "--sweep", "parse=1..2", "--configs", "c.csv"], "--configs"),
    (["--rates", "100:200:3", "--chunk-rows", "0"], "--chunk-rows"),
])
def test_cli_bad_input_exits_2_with_one_line(capsys, tmp_path, extra, field):
    code, stdout, err = _run(capsys, ["whatif", DIAMOND, "--out", str(tmp_path / "t.csv"), *extra])
    assert code == 2 and not stdout
    assert err.count("\n") == 1 and f"field '{field}'" in err and err.startswith("augury whatif: error:")
    assert not (tmp_path / "t.csv").exists()


def test_cli_usage_errors_exit_2(capsys, tmp_path):
    for argv in (["whatif", DIAMOND, "--rates", "100"], ["whatif", DIAMOND, "--rates", "100", "--out", "t.csv", "--x"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    assert not capsys.readouterr().out


def test_cli_rejects_unknown_table_format(capsys, tmp_path):
    code, stdout, err = _run(capsys, ["whatif", DIAMOND, "--rates", "100", "--out", str(tmp_path / "t.txt")])
    assert code == 2 and "field '--out'" in err and not stdout


@pytest.mark.spark
def test_cli_spark_master_writes_the_local_table(spark, capsys, tmp_path):
    argv = ["whatif", PIPELINE, "--rates", "500:3000:4", "--sweep", "sessionize=1..6", "--json"]
    code_l, out_l, _ = _run(capsys, [*argv, "--out", str(tmp_path / "local.parquet")])
    code_s, out_s, _ = _run(capsys, [*argv, "--out", str(tmp_path / "spark.parquet"), "--spark-master", "local[2]"])
    local, remote = json.loads(out_l), json.loads(out_s)
    assert code_l == code_s and remote["engine"] == "spark"
    assert remote["cheapest"] == local["cheapest"] and remote["best_max_rate"] == local["best_max_rate"]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "spark.parquet"),
                                  pd.read_parquet(tmp_path / "local.parquet"), rtol=1e-12)
    assert spark.sparkContext._jsc is not None  # the shared session was not stopped


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_cli_progress_bar_goes_to_stderr_only(capsys, tmp_path, monkeypatch):
    import augury.commands.whatif as cmd

    monkeypatch.setattr(cmd, "PROGRESS_MIN_ROWS", 1)
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    code = main(["whatif", DIAMOND, "--rates", "500:2500:5", "--sweep", "parse=1..4", "--chunk-rows", "3",
                 "--out", str(tmp_path / "t.csv"), "--json"])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["rows"] == 20  # stdout is exactly the JSON object
    assert "whatif" in term.getvalue() and "rows" in term.getvalue()  # the bar was drawn on stderr
    term.truncate(0)
    main(["whatif", DIAMOND, "--rates", "500:2500:5", "--sweep", "parse=1..4", "--out", str(tmp_path / "t.csv"),
          "--json", "--no-progress"])
    assert term.getvalue().strip("\x00") == ""


def test_cli_spark_unavailable_exits_3(capsys, tmp_path, monkeypatch):
    import history.spark
    from history.errors import SparkUnavailable

    def unavailable(master="local[2]", app_name="augury", **_):
        raise SparkUnavailable("cannot start Spark (no Java)", field="--spark-master", value=master)

    monkeypatch.setattr(history.spark, "spark_session", unavailable)
    code, out, err = _run(capsys, ["whatif", DIAMOND, "--rates", "100", "--out", str(tmp_path / "t.csv"),
                                   "--spark-master", "spark://nowhere:7077"])
    assert code == 3 and not out and "field '--spark-master'" in err and err.count("\n") == 1
    assert not (tmp_path / "t.csv").exists()


def test_one_schema_for_table_writer_and_spark():
    from scheduler.whatif import VALUE_COLUMNS, config_schema, spark_schema, table_schema

    names = ("source", "parse")
    schema = table_schema(names)
    assert list(schema) == table_columns(names) == ["config_id", "p_source", "p_parse", *VALUE_COLUMNS]
    spark = spark_schema(names)
    assert spark.fieldNames() == list(schema)
    assert [f.name for f in spark.fields if not f.nullable] == ["config_id", "p_source", "p_parse", "instances",
                                                                "rate"]
    assert list(config_schema(names)) == ["config_id", "p_source", "p_parse", "instances", "max_rate",
                                          "bottleneck"]


def test_cli_refuses_a_table_beyond_the_row_limit(capsys, tmp_path):
    # 16 configurations x 1,000 rates = 16,000 rows; the limit is lowered to 10,000 to show the check
    import modeler.limits as limits

    out = tmp_path / "t" / "big.parquet"
    old = limits.MAX_WHATIF_ROWS
    limits.MAX_WHATIF_ROWS = 10_000
    try:
        code, _, err = _run(capsys, ["whatif", PIPELINE, "--rates", "100:5000:1000", "--sweep", "sessionize=1..4",
                                     "--sweep", "score=1..4", "--out", str(out)])
    finally:
        limits.MAX_WHATIF_ROWS = old
    assert code == 2 and "--rates" in err and "16,000 rows" in err
    assert not out.parent.exists()  # nothing created
