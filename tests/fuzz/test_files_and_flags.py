"""The rest of the command-line inputs (issue 22): ``predict``/``plan``/``validate`` flags,
``calibrate`` flags and topology files over a small store, ``augury log`` state files,
``testbed run --settings`` and ``--faults`` files, ``whatif --configs`` files. The contract as in
``tests.fuzz.test_commands``: a documented exit code, no traceback, one ``augury <cmd>: error:``
line, no half-written output, an output only replaced on success. Profiles: ``AUGURY_FUZZ_EXAMPLES``.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import assume, example, given
from hypothesis import strategies as st

from tests.conftest import EXAMPLES
from tests.fuzz.test_commands import FUZZ, NUMBERS, TEXTS, VALUES, check_contract, no_debris, run

PIPELINE = str(EXAMPLES / "pipeline.yaml")
OPERATORS = ["clicks", "views", "decode", "dedup", "sessionize", "score", "sink"]
NUMBER_TEXTS = st.one_of(NUMBERS.map(str), TEXTS, st.sampled_from(["1e400", "-0", "0.7", "1", "50", "1e-300"]))


def _text(value) -> str:
    """A generated value as one command-line argument (argparse takes any str)."""
    return str(value).replace("\x00", "")  # the OS cannot pass a NUL in an argument


# ------------------------------------------------------------------ predict / plan / validate flags

CONFIGS = st.one_of(
    st.lists(st.tuples(st.sampled_from(OPERATORS + ["nope", "", "decode "]), NUMBER_TEXTS), max_size=3)
    .map(lambda kv: ",".join(f"{k}={v}" for k, v in kv)),
    st.sampled_from(["decode=0", "decode=10001", "decode=" + "9" * 400, "decode", "=", ",", "decode=2,decode=3",
                     "clicks=2", "score=1e3", "score=3.0", "score=-1"]),
    TEXTS)


@FUZZ
@example(command="plan", rate="1000", config=None, slo="1e-300", util="1", stat="p99")
@example(command="validate", rate="1e400", config="decode=" + "9" * 400, slo=None, util=None, stat=None)
@given(command=st.sampled_from(["predict", "plan", "validate"]), rate=NUMBER_TEXTS,
       config=st.one_of(st.none(), CONFIGS), slo=st.one_of(st.none(), NUMBER_TEXTS),
       util=st.one_of(st.none(), NUMBER_TEXTS), stat=st.one_of(st.none(), st.sampled_from(["mean", "p50", "", "P99"])))
def test_predict_plan_validate_flags(command, rate, config, slo, util, stat):
    argv = [command, PIPELINE, "--rate", _text(rate), "--json"]
    if config is not None and command != "plan":
        argv += ["--config", _text(config)]
    elif command == "validate":
        argv += ["--config", "decode=2"]
    if command != "predict":
        for flag, value in (("--latency-slo-ms", slo), ("--utilization-target", util), ("--latency-stat", stat)):
            if value is not None:
                argv += [flag, _text(value)]
    code, out, err = run(argv)
    check_contract(argv, code, out, err, allowed=(0, 1, 2))
    if code in (0, 1):
        json.loads(out)  # exactly one JSON object


# ------------------------------------------------------------------ calibrate over a small store

OP_NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -1.0, 1e300, 1e-300]),
                       st.integers(-3, 10**6).map(float))
COLUMNS = ["parallelism", "processed_rate", "busy_fraction_mean", "service_time_ms"]  # operator_windows
TOPOLOGIES = st.one_of(st.none(), st.sampled_from([
    "augury: 1\njob: j\noperators:\n  - {name: src, role: source, parallelism: 1}\n  - {name: a, parallelism: 2}\n"
    "  - {name: b, parallelism: 2}\nedges:\n  - {from: src, to: a}\n  - {from: a, to: b}\n",   # the store's DAG
    "augury: 1\njob: j\noperators:\n  - {name: src, role: source, parallelism: 1}\n  - {name: z, parallelism: 2}\n"
    "edges:\n  - {from: src, to: z}\n",                                                         # other operators
    "", "[", "augury: 1\n", "{}", "x: " + "[" * 5000, "augury: 1\njob: j\noperators: 1e12\n"]))


@FUZZ
@example(edits=[], since="2099-01-01", min_busy=None, job="j", topology=None)
@example(edits=[(0, "service_time_ms", float("inf"))], since=None, min_busy="0", job="j", topology=None)
@example(edits=[(0, "parallelism", 166)], since=None, min_busy=None, job="j", topology=None)  # found: the
# contention fit's solver failing to converge (HuberRegressor ValueError, exit 1 with a traceback)
@example(edits=[(0, "service_time_ms", 5000000001493.0)], since=None, min_busy=None, job="j", topology=None)
# found: a fitted service time beyond the model file's limit was written (exit 0), unreadable by load_model
@given(edits=st.lists(st.one_of(  # the tables' types: parallelism an integer, the rest floats
           st.tuples(st.integers(0, 4), st.just("parallelism"), st.sampled_from([0, -1, 1, 3, 166, 10**6, 2**62])),
           st.tuples(st.integers(0, 4), st.sampled_from(COLUMNS[1:]), OP_NUMBERS)), max_size=6),
       since=st.one_of(st.none(), st.sampled_from(["2024-05-01", "2099-01-01", "1e11", "x", "", "9999-12-31",
                                                   "2024-05-01T12:00:20Z", "-1"]), TEXTS),
       min_busy=st.one_of(st.none(), NUMBER_TEXTS), job=st.sampled_from(["j", "nope", "", "x" * 300, "\n"]),
       topology=TOPOLOGIES)
def test_calibrate_flags_and_history(edits, since, min_busy, job, topology):
    from tests.augury.test_calibrate_cli import ROWS, _store_with
    from tests.modeler.test_calibrate import _chain_history

    rows = [dict(r) for r in ROWS]
    for i, column, value in edits:
        rows[i][column] = value
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ops, edges = _chain_history(rows, selectivity=2.0)
        store = _store_with(tmp, ops, edges)
        out = tmp / "model.yaml"
        out.write_text("the old model\n")
        argv = ["calibrate", "--store", str(store), "--job", _text(job), "--out", str(out), "--no-track", "--json"]
        if since is not None:
            argv += ["--since", _text(since)]
        if min_busy is not None:
            argv += ["--min-busy", _text(min_busy)]
        if topology is not None:
            (tmp / "topo.yaml").write_text(topology)
            argv += ["--topology", str(tmp / "topo.yaml")]
        code, stdout, err = run(argv)
        check_contract(argv, code, stdout, err, allowed=(0, 2))
        if code == 0:
            from modeler.modelfile import load_model

            json.loads(stdout)
            load_model(out)  # a whole, valid model file
        else:
            assert out.read_text() == "the old model\n"  # a failure leaves the previous file as it was
        no_debris(tmp)


# ------------------------------------------------------------------ augury log state files

@FUZZ
@given(kind=st.sampled_from(["bytes", "foreign", "augury", "augury-damaged", "missing"]), data=st.binary(max_size=200),
       limit=st.one_of(st.none(), st.sampled_from(["1", "0", "-1", "x", "9" * 400])))
def test_log_state_files(kind, data, limit):
    from scheduler.state import SQLiteStateStore

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.db"
        if kind == "bytes":
            path.write_bytes(data)
        elif kind == "foreign":
            with sqlite3.connect(path) as db:
                db.execute("CREATE TABLE t (x)")
            db.close()
        elif kind.startswith("augury"):
            SQLiteStateStore(path).close()
            if kind == "augury-damaged":  # the header kept, pages overwritten
                raw = bytearray(path.read_bytes())
                raw[100:100 + len(data)] = data
                path.write_bytes(bytes(raw))
        before = path.read_bytes() if path.exists() else None
        argv = ["log", "--state", str(path), "--json"] + (["--limit", limit] if limit is not None else [])
        code, out, err = run(argv)
        check_contract(argv, code, out, err, allowed=(0, 2, 3))
        if code == 0:
            json.loads(out)
        assert (path.read_bytes() if path.exists() else None) == before  # reading never writes


# ------------------------------------------------------------------ testbed settings and fault files

SETTING_KEYS = ["seed", "window_s", "start_time", "queue_capacity", "service_distribution", "bimodal_slow_fraction",
                "selectivity_distribution", "shuffle", "network_delay_ms", "network_delay_distribution",
                "network_delay_scv", "buffer_timeout_ms", "buffer_records", "contention_overhead", "restart_s",
                "restart_scope", "many_keys", "max_backlog", "operators", "nope"]
SETTING_VALUES = st.one_of(VALUES, st.sampled_from([
    "exponential", "deterministic", "bimodal", "lognormal", "nope", "key", "round_robin", "job", 10**12, 1e-9, 0.001,
    {"decode": {"service_time_ms": 1e12}}, {"decode": {"queue_capacity": 10**400}}, {"nope": {}},
    {"decode": {"nope": 1}}, {"decode": 1}]))
FAULT_FIELDS = {
    "type": st.sampled_from(["slow_instance", "hot_key", "rescale", "nope", ""]),
    "operator": st.sampled_from(OPERATORS + ["nope", ""]), "instance": VALUES, "factor": VALUES,
    "start_s": VALUES, "end_s": VALUES, "at_s": VALUES, "share": VALUES, "key": VALUES,
    "edge": st.sampled_from(["dedup->sessionize", "sessionize->score", "decode->dedup", "a->b", "", "->"]),
    "config": st.one_of(VALUES, st.dictionaries(st.sampled_from(OPERATORS + ["nope"]), VALUES, max_size=2)),
    "nope": VALUES}
FAULT_DOCS = st.one_of(
    st.fixed_dictionaries({"faults": st.lists(st.fixed_dictionaries({}, optional=FAULT_FIELDS), max_size=3)}),
    st.lists(st.fixed_dictionaries({}, optional=FAULT_FIELDS), max_size=2), VALUES)


def _document(value, as_json: bool) -> str | None:
    try:
        return json.dumps(value) if as_json else yaml.safe_dump(value)
    except (ValueError, TypeError, OverflowError):
        return None


@FUZZ
@example(settings={"window_s": 1e-9}, faults=None, as_json=False, damage=None)
@example(settings={"many_keys": 10**12}, faults=None, as_json=True, damage=None)
@example(settings={}, faults=None, as_json=False, damage="x: " + "[" * 100_000)
@example(settings={"seed": 10**5000}, faults=None, as_json=True, damage=None)
@example(settings={"window_s": 10**400}, faults=None, as_json=False, damage=None)  # found: OverflowError
@given(settings=st.dictionaries(st.sampled_from(SETTING_KEYS), SETTING_VALUES, max_size=3),
       faults=st.one_of(st.none(), FAULT_DOCS), as_json=st.booleans(),
       damage=st.one_of(st.none(), st.sampled_from(["", "[", "{", "x: " + "[" * 100_000, "\x00", "- 1\n- 2\n"])))
def test_testbed_settings_and_fault_files(settings, faults, as_json, damage):
    text = _document(settings, as_json) if damage is None else damage
    if text is None:  # not encodable as a document (NaN in JSON, ...): nothing to test
        assume(False)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        suffix = ".json" if as_json else ".yaml"
        try:
            (tmp / f"settings{suffix}").write_text(text, encoding="utf-8")
        except UnicodeEncodeError:  # a lone surrogate from the generated text
            assume(False)
        argv = ["testbed", "run", PIPELINE, "--rate", "50", "--duration", "5s", "--out", str(tmp / "tb"),
                "--settings", str(tmp / f"settings{suffix}"), "--no-progress", "--json"]
        if faults is not None:
            fault_text = _document(faults, as_json)
            if fault_text is None:
                assume(False)
            (tmp / f"faults{suffix}").write_text(fault_text, encoding="utf-8", errors="replace")
            argv += ["--faults", str(tmp / f"faults{suffix}")]
        code, out, err = run(argv)
        check_contract(argv, code, out, err, allowed=(0, 2))
        if code == 0:
            json.loads(out)
            assert (tmp / "tb" / "summary.json").is_file()
        else:
            assert not (tmp / "tb").exists()  # bad input: nothing written, not even the directory
        no_debris(tmp)


# ------------------------------------------------------------------ whatif --configs files

@FUZZ
@example(rows=[{"clicks": 10**400}], fmt="json")  # found: OverflowError in the parallelism check
@given(rows=st.lists(st.dictionaries(st.sampled_from(OPERATORS + ["p_decode", "config_id", "nope", ""]),
                                     st.one_of(NUMBERS, TEXTS, st.none()), max_size=3), max_size=5),
       fmt=st.sampled_from(["json", "csv", "parquet", "txt"]))
def test_whatif_configs_files(rows, fmt):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        path = tmp / f"configs.{fmt}"
        if fmt == "json" or fmt == "txt":
            text = _document(rows, True)
            if text is None:
                assume(False)
            path.write_text(text)
        else:
            frame = pd.DataFrame([{k: _text(v) if isinstance(v, str) or (isinstance(v, int) and abs(v) >= 2**63)
                                   else v for k, v in r.items()} for r in rows])  # a file stores a huge int as text
            try:
                if fmt == "csv":
                    frame.to_csv(path, index=False)
                else:
                    frame.to_parquet(path, index=False)
            except Exception:  # a column pyarrow cannot type (mixed numbers and text, huge ints)
                frame.astype(str).to_parquet(path, index=False) if fmt == "parquet" else None
            if not path.exists():
                path.write_text("")
        out = tmp / "out" / "t.csv"
        argv = ["whatif", PIPELINE, "--rates", "100:1000:3", "--configs", str(path), "--out", str(out), "--json",
                "--no-progress"]
        code, out_text, err = run(argv)
        check_contract(argv, code, out_text, err, allowed=(0, 1, 2))
        if code in (0, 1):
            assert out.is_file()
        else:
            assert not (tmp / "out").exists()
        no_debris(tmp)

