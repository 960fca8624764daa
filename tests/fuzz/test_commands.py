"""Hostile inputs over the commands (issue 22): the command-line contract holds for every case.

The contract: the exit code is 0, 1, 2 or 3 as documented; nothing escapes as a traceback; an
error (2 or 3) is one line on stderr, ``augury <cmd>: error: ...``; no temporary or half-written
file is left next to an output; an ingest loses no row (rows_read = accepted + duplicates +
quarantined, and the quarantine is stored). Cases run in-process through ``augury.cli.main``.

Profiles (the whole ``tests/fuzz`` suite, 19 property tests: this file (ingest rows, model files,
proposals, whatif/duration/testbed flags), ``test_sources`` (engine captures, normalized CSV/JSON
lines/Parquet, any bytes), ``test_series_and_run`` (series files, ``augury run`` configurations),
``test_files_and_flags`` (predict/plan/validate and calibrate flags, topology files, state files,
testbed settings and fault files, whatif configuration lists)): the default, run in CI, is
``AUGURY_FUZZ_EXAMPLES`` = 40 cases per test, derandomized (760 generated cases plus the explicit
regression examples); ``AUGURY_FUZZ_EXAMPLES=400`` is the full profile (7,600 generated cases,
random), run on demand. A case that cannot be a test (a value JSON cannot encode, a legitimate but
long simulation) is rejected with ``assume``: Hypothesis counts it as invalid and draws another, so
"N passing" means N commands run.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from augury.cli import main
from tests.conftest import EXAMPLES

EXAMPLES_N = int(os.environ.get("AUGURY_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES_N, deadline=None, derandomize=EXAMPLES_N <= 40,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
PIPELINE = EXAMPLES / "pipeline.yaml"

# ------------------------------------------------------------------ hostile atoms

HUGE_INT = 10**400
NUMBERS = st.one_of(
    st.integers(-10, 10_000), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([HUGE_INT, -HUGE_INT, 1e300, -1e300, 1e11, 1e12, 2**63, 0, -0.0, 1e-300]),
)
TEXTS = st.one_of(
    st.text(max_size=20), st.sampled_from(["", " ", "NaN", "nan", "inf", "-inf", "1e400", "9" * 400, "x" * 300,
                                           "é" * 100, "null", "true", "0x10", "1_000", "--", "\x00", "\n"]),
)
VALUES = st.one_of(NUMBERS, TEXTS, st.booleans(), st.none(), st.lists(st.integers(), max_size=3),
                   st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


def run(argv: list[str]) -> tuple[int, str, str]:
    """``augury argv`` in-process: (exit code, stdout, stderr); any exception fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def check_contract(argv: list[str], code: int, out: str, err: str, allowed=(0, 1, 2, 3)) -> None:
    assert code in allowed, (argv, code, err)
    if code in (2, 3):
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) >= 1 and lines[-1].startswith(("augury", "usage")), (argv, err)
        errors = [line for line in lines if ": error: " in line]
        assert len(errors) == 1, (argv, err)
    assert "Traceback" not in err, (argv, err)


def no_debris(directory: Path) -> None:
    left = [p.name for p in directory.rglob("*") if p.name.endswith((".partial", ".tmp", ".probe"))]
    assert not left, left


# ------------------------------------------------------------------ ingest

COLUMNS = ("ts", "window_s", "job", "operator", "instance", "metric", "value", "target")
GOOD = {"ts": "2024-05-01T12:00:00Z", "window_s": "10", "job": "j", "operator": "a", "instance": "0",
        "metric": "records_in", "value": "100", "target": ""}


def _cell(value) -> str:
    text = str(value)
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n\r') else text


ROWS = st.lists(st.fixed_dictionaries({}, optional={c: VALUES for c in COLUMNS}), max_size=12)


@FUZZ
@given(rows=ROWS, job=st.one_of(st.none(), TEXTS))
def test_ingest_never_loses_a_row(rows, job):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        path = tmp / "m.csv"
        lines = [",".join(COLUMNS)] + [",".join(_cell({**GOOD, **r}[c]) for c in COLUMNS) for r in rows]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        argv = ["ingest", "--format", "normalized", str(path), "--store", str(tmp / "store"), "--json"]
        if job is not None:
            argv += ["--job", str(job)]
        code, out, err = run(argv)
        check_contract(argv, code, out, err, allowed=(0, 2))
        if code == 0:
            report = json.loads(out)
            assert report["rows_read"] == report["accepted"] + report["duplicates"] + report["quarantined_total"]
            from history.store import MetricStore

            store = MetricStore(tmp / "store")
            assert len(store.quarantine()) <= report["quarantined_total"]  # identical rows stored once
            assert (len(store.quarantine()) > 0) == (report["quarantined_total"] > 0)
        no_debris(tmp)


# ------------------------------------------------------------------ model files

PATHS = st.sampled_from(["augury", "job", "network_delay_ms", "buffer_timeout_ms", "buffer_records",
                         "operators.2.parallelism", "operators.2.service_time_ms", "operators.2.max_parallelism",
                         "operators.2.min_parallelism", "operators.2.service_scv", "operators.0.rate_share",
                         "operators.2.scaling", "operators.2.name", "operators.2.role", "edges.3.keys",
                         "edges.3.keys.count", "edges.3.keys.exponent", "edges.3.selectivity", "edges.0.grouping",
                         "edges.0.from", "operators", "edges", "operators.2", "operators.2.state_mb",
                         "restart_base_s", "restore_mb_per_s"])


def _set(data, path: str, value) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        data = data[int(part)] if part.isdigit() else data[part]
    key = parts[-1]
    if key.isdigit():
        data[int(key)] = value
    else:
        data[key] = value


@FUZZ
@given(changes=st.lists(st.tuples(PATHS, VALUES), min_size=1, max_size=3), as_json=st.booleans(),
       rate=st.one_of(st.sampled_from(["100", "0", "-1", "nan", "1e400", "x"]), st.floats().map(str)))
def test_model_file_corruptions(changes, as_json, rate):
    data = yaml.safe_load(PIPELINE.read_text())
    for path, value in changes:
        try:
            _set(data, path, value)
        except (KeyError, IndexError, TypeError):
            pass
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("m.json" if as_json else "m.yaml")
        try:
            path.write_text(json.dumps(data) if as_json else yaml.safe_dump(data))
        except (ValueError, OverflowError):
            assume(False)  # not encodable (NaN in JSON): not a case (counted as invalid, not as run)
        for argv in (["predict", str(path), "--rate", rate, "--json"],
                     ["plan", str(path), "--rate", rate, "--json"]):
            code, out, err = run(argv)
            check_contract(argv, code, out, err, allowed=(0, 1, 2))
            if code in (0, 1):
                json.loads(out)  # exactly one JSON object


# ------------------------------------------------------------------ proposals

@FUZZ
@given(proposal=st.one_of(
    st.dictionaries(st.sampled_from(["decode", "dedup", "sessionize", "score", "sink", "nope", ""]), VALUES,
                    max_size=4),
    VALUES))
def test_proposals(proposal):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.json"
        try:
            path.write_text(json.dumps(proposal))
        except (ValueError, TypeError):
            assume(False)  # not encodable as JSON: not a case
        argv = ["validate", str(PIPELINE), "--rate", "1000", "--proposal", str(path), "--json"]
        code, out, err = run(argv)
        check_contract(argv, code, out, err, allowed=(0, 1, 2))


# ------------------------------------------------------------------ flags

RATES = st.one_of(st.sampled_from(["1:2:1e12", "1:2:1000000000000", "nan:1:2", "-1", "", "1:2", "5:1:3", "1:2:0",
                                   "9" * 400, "inf", "1:1:2", "100:200:3", "100"]),
                  st.tuples(st.integers(-5, 1000), st.integers(-5, 2000), st.integers(-1, 20))
                  .map(lambda t: f"{t[0]}:{t[1]}:{t[2]}"), TEXTS)
SWEEPS = st.one_of(st.sampled_from(["decode=1..10000000000", "decode=1..4", "decode=0..2", "decode=3..1",
                                    "decode=1..4:0", "nope=1..2", "decode=", "=1", "decode=1,2,x", "decode=" + "9" * 400,
                                    "decode=1..4,dedup=2", "sink=1..2:1"]), TEXTS)


@FUZZ
@given(rates=RATES, sweeps=st.lists(SWEEPS, max_size=2), chunk=st.sampled_from(["1", "0", "-3", "7", "x"]),
       suffix=st.sampled_from([".csv", ".parquet", ".txt", ""]))
def test_whatif_flags(rates, sweeps, chunk, suffix):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out" / f"t{suffix}"
        argv = ["whatif", str(PIPELINE), "--rates", rates, "--out", str(out), "--chunk-rows", chunk, "--json",
                "--no-progress"]
        for sweep in sweeps:
            argv += ["--sweep", sweep]
        code, out_text, err = run(argv)
        check_contract(argv, code, out_text, err, allowed=(0, 1, 2))
        if code in (0, 1):
            assert out.is_file()
        no_debris(Path(tmp))


DURATIONS = st.one_of(st.sampled_from(["99999999d", "1ns", "0", "-1s", "1e3s", "10s", "0.0000001", "5m",
                                       "3650d", "3651d", "", "9" * 400]), TEXTS)


@FUZZ
@given(window=DURATIONS)
def test_duration_flags(window):
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["history", "summarize", "--store", str(Path(tmp) / "none"), "--window", window]
        code, out, err = run(argv)
        check_contract(argv, code, out, err, allowed=(2,))


@FUZZ
@given(duration=DURATIONS, window=DURATIONS,
       queue=st.one_of(st.none(), st.sampled_from(["1", "0", "1000000000000", "9" * 400, "x", "1e3"])))
def test_testbed_flags(duration, window, queue):
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["testbed", "run", str(PIPELINE), "--rate", "50", "--duration", duration, "--window", window,
                "--out", str(Path(tmp) / "tb"), "--no-progress", "--json"]
        if queue is not None:
            argv += ["--queue", queue]
        from modeler.units import parse_duration_s

        try:  # keep the legitimate runs small: this tests the contract, not the simulator's speed
            long_run = parse_duration_s(duration, "d") > 60
        except Exception:  # a bad duration: the command must say so (a case)
            long_run = False
        assume(not long_run)  # a long legitimate simulation: not a case (counted as invalid, not as run)
        code, out, err = run(argv)
        check_contract(argv, code, out, err, allowed=(0, 2))
        no_debris(Path(tmp))


def test_profile_sizes_are_as_documented():
    assert EXAMPLES_N >= 1 and math.isfinite(EXAMPLES_N)
