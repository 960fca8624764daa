"""Hostile engine captures through ``augury ingest`` (issue 22): Flink REST captures, Prometheus text
of Flink's reporter and Heron Tracker responses, each a real capture (``tests/history/fixtures``)
with fields replaced, removed or garbled, plus hostile ``--window``/``--ts``/``--job``/``--edges``.

The contract (``tests.fuzz.test_commands``): exit 0 (1 with ``--strict`` when rows were
quarantined) or 2, no traceback, one ``augury ingest: error:`` line naming the file (and the field
when there is one); no row lost (rows_read = accepted + duplicates + quarantined, the quarantine
stored); on exit 2 the store is untouched (not even created); no temporary file left. Profiles as
in ``test_commands`` (``AUGURY_FUZZ_EXAMPLES``).
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

from hypothesis import assume, example, given
from hypothesis import strategies as st

from tests.fuzz.test_commands import FUZZ, NUMBERS, TEXTS, VALUES, check_contract, no_debris, run

FIXTURES = Path(__file__).resolve().parent.parent / "history" / "fixtures"
FLINK = json.loads((FIXTURES / "flink_rest_capture.json").read_text())
HERON = json.loads((FIXTURES / "heron_metricstimeline.json").read_text())
PROMETHEUS = (FIXTURES / "prometheus_flink.txt").read_text().splitlines()

WINDOWS = st.one_of(st.none(), st.sampled_from(["10s", "1m", "0", "-5s", "1ns", "1e300s", "9" * 400, "x", "",
                                                "99999999d", "0.5s"]))
STAMPS = st.one_of(st.none(), st.sampled_from(["2024-05-01T12:00:00Z", "2024-05-01", "1e11", "0", "-1", "nan",
                                               "9" * 400, "9999-12-31T23:59:59Z", "not a time", ""]), TEXTS)
JOBS = st.one_of(st.none(), st.sampled_from(["wordcount", "", " ", "x" * 300, "a/b", "..", "é" * 80, "\x00"]))
EDGES = st.one_of(st.none(), st.sampled_from(["Tokenizer->Counter", "a->b,b->c", "->", "a->", "a->b->c", "",
                                              "x" * 300 + "->y", "split->count"]))


def _paths(doc, prefix=()):
    """Every path into a JSON document (dict keys and list indices), the root excluded."""
    if isinstance(doc, dict):
        items = doc.items()
    elif isinstance(doc, list):
        items = enumerate(doc)
    else:
        return []
    out = []
    for key, value in items:
        out.append(prefix + (key,))
        out.extend(_paths(value, prefix + (key,)))
    return out


FLINK_PATHS = _paths(FLINK)
HERON_PATHS = _paths(HERON)
EDITS = st.sampled_from(["replace", "delete", "wrap", "duplicate"])


def _edit(doc, path, how: str, value):
    """Apply one edit at ``path``: replace the value, delete the key/item, wrap it in a list,
    or duplicate a list item."""
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    if how == "replace":
        parent[key] = value
    elif how == "delete":
        del parent[key]
    elif how == "wrap":
        parent[key] = [parent[key]]
    elif isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))


def _json_text(doc) -> str | None:
    try:
        return json.dumps(doc, allow_nan=True)
    except (ValueError, TypeError, OverflowError):
        return None


def check_ingest(tmp: Path, argv: list[str], strict: bool) -> None:
    store = tmp / "store"
    code, out, err = run(argv)
    check_contract(argv, code, out, err, allowed=(0, 1, 2) if strict else (0, 2))
    if code == 2:
        assert "augury ingest: error:" in err, (argv, err)
        assert not store.exists(), argv  # nothing written when the input cannot be read
    else:
        report = json.loads(out)
        assert report["rows_read"] == report["accepted"] + report["duplicates"] + report["quarantined_total"], report
        from history.store import MetricStore

        assert (len(MetricStore(store).quarantine()) > 0) == (report["quarantined_total"] > 0)
        assert code == (1 if strict and report["quarantined_total"] else 0)
    no_debris(tmp)


def _flags(window, ts, job, edges, strict) -> list[str]:
    argv = []
    for flag, value in (("--window", window), ("--ts", ts), ("--job", job), ("--edges", edges)):
        if value is not None:
            argv += [flag, value]
    return argv + (["--strict"] if strict else [])


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(FLINK_PATHS), EDITS, VALUES), min_size=1, max_size=4),
       window=WINDOWS, job=JOBS, edges=EDGES, strict=st.booleans())
def test_flink_rest_captures(edits, window, job, edges, strict):
    doc = copy.deepcopy(FLINK)
    for path, how, value in edits:
        try:
            _edit(doc, path, how, value)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier edit removed or replaced the way there
    text = _json_text(doc)
    assume(text is not None)  # not encodable as JSON: not a case
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "c.json").write_text(text, encoding="utf-8")
        argv = ["ingest", "--format", "flink-rest", str(tmp / "c.json"), "--store", str(tmp / "store"), "--json",
                *_flags(window, None, job, edges, strict)]
        check_ingest(tmp, argv, strict)


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(HERON_PATHS), EDITS, VALUES), min_size=1, max_size=4),
       window=WINDOWS, job=st.one_of(st.just("wordcount"), JOBS), edges=EDGES, strict=st.booleans())
def test_heron_tracker_responses(edits, window, job, edges, strict):
    doc = copy.deepcopy(HERON)
    for path, how, value in edits:
        try:
            _edit(doc, path, how, value)
        except (KeyError, IndexError, TypeError):
            pass
    text = _json_text(doc)
    assume(text is not None)  # not encodable as JSON: not a case
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "h.json").write_text(text, encoding="utf-8")
        argv = ["ingest", "--format", "heron-tracker", str(tmp / "h.json"), "--store", str(tmp / "store"), "--json",
                *_flags(window, None, job, edges, strict)]
        check_ingest(tmp, argv, strict)


SAMPLE_LINES = [i for i, line in enumerate(PROMETHEUS) if line.startswith("flink_taskmanager_job_task_")]
TOKENS = st.one_of(NUMBERS.map(str), TEXTS, st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "0x1p3", "1_0"]))
STAMP_TOKENS = st.sampled_from(["1714564800000", "99999999999999999999999", "9" * 400, "-1", "0", "-99999999999999",
                                "1714564800000.5", "abc", ""])
LINE_EDITS = st.one_of(
    st.tuples(st.just("value"), st.sampled_from(SAMPLE_LINES), TOKENS),
    st.tuples(st.just("stamp"), st.sampled_from(SAMPLE_LINES), STAMP_TOKENS),
    st.tuples(st.just("label"), st.sampled_from(SAMPLE_LINES),
              st.sampled_from(['subtask_index="-1"', 'subtask_index="x"', 'subtask_index="9999999999999"',
                               'task_name=""', 'job_name=""', 'task_name="' + "t" * 300 + '"', 'a="\\"',
                               'subtask_index="1e3"', '{', '"', 'x=y'])),
    st.tuples(st.just("garbage"), st.integers(0, len(PROMETHEUS)), TEXTS),
    st.tuples(st.just("truncate"), st.sampled_from(SAMPLE_LINES), st.integers(0, 200)),
)


def _edit_line(lines: list[str], edit) -> None:
    kind, at, what = edit
    if kind == "garbage":
        lines.insert(at, str(what).replace("\n", " "))
        return
    line = lines[at]
    if kind == "truncate":
        lines[at] = line[:what]
        return
    head, _, tail = line.rpartition("}")
    parts = tail.split()
    if kind == "value":
        lines[at] = f"{head}}} {what}" + (f" {parts[1]}" if len(parts) > 1 else "")
    elif kind == "stamp":
        lines[at] = f"{head}}} {parts[0] if parts else '1'} {what}"
    else:  # label
        lines[at] = head + "," + what + "}" + tail


@FUZZ
@example(edits=[("stamp", SAMPLE_LINES[0], "99999999999999999999999")], window=None, ts=None, job=None,
         edges=None, strict=False)  # found by this test: OverflowError, exit 1 with a traceback
@example(edits=[("stamp", SAMPLE_LINES[1], "-99999999999999")], window="1m", ts=None, job=None, edges=None,
         strict=True)  # year -1199: ValueError
@example(edits=[("stamp", SAMPLE_LINES[2], "9" * 400)], window=None, ts=None, job="wordcount", edges=None,
         strict=False)  # int too large to convert to float
@given(edits=st.lists(LINE_EDITS, min_size=1, max_size=5), window=WINDOWS,
       ts=st.one_of(st.just("2024-05-01T12:00:00Z"), STAMPS), job=JOBS, edges=EDGES, strict=st.booleans())
def test_prometheus_text(edits, window, ts, job, edges, strict):
    lines = list(PROMETHEUS)
    for edit in edits:
        _edit_line(lines, edit)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "p.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        argv = ["ingest", "--format", "prometheus", str(tmp / "p.txt"), "--store", str(tmp / "store"), "--json",
                *_flags(window, ts, job, edges, strict)]
        check_ingest(tmp, argv, strict)


@FUZZ
@given(data=st.binary(max_size=300), fmt=st.sampled_from(["flink-rest", "prometheus", "heron-tracker", "normalized"]),
       job=JOBS)
def test_any_bytes_in_any_format(data, fmt, job):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        path = tmp / ("m.csv" if fmt == "normalized" else "m.json")
        path.write_bytes(data)
        argv = ["ingest", "--format", fmt, str(path), "--store", str(tmp / "store"), "--json", *_flags(None, None, job,
                                                                                                     None, False)]
        check_ingest(tmp, argv, False)


# ------------------------------------------------------------------ normalized JSON lines and Parquet

NORMALIZED_COLUMNS = ("ts", "window_s", "job", "operator", "instance", "metric", "value", "target")
NORMALIZED_GOOD = {"ts": "2024-05-01T12:00:00Z", "window_s": 10, "job": "j", "operator": "a", "instance": 0,
                   "metric": "records_in", "value": 100.0, "target": None}
NORMALIZED_ROWS = st.lists(st.fixed_dictionaries({}, optional={c: VALUES for c in NORMALIZED_COLUMNS}), max_size=10)


def _parquet_frame(rows: list[dict], drop: list[str]):
    """The rows as a typed frame (pandas' inference: a column of one type keeps it; a mixed one
    becomes text, as another writer would store it), ``drop`` columns left out."""
    import pandas as pd

    frame = pd.DataFrame([{**NORMALIZED_GOOD, **r} for r in rows], columns=list(NORMALIZED_COLUMNS))
    for column in frame.columns:
        kinds = {type(v) for v in frame[column] if v is not None}
        if len(kinds) > 1 or kinds & {list, dict} or any(isinstance(v, int) and abs(v) >= 2**63
                                                          for v in frame[column]):
            frame[column] = frame[column].map(lambda v: None if v is None else str(v))
    return frame.drop(columns=[c for c in drop if c in frame.columns])


@FUZZ
@example(rows=[{"ts": 1e11}, {"value": float("nan")}], fmt="jsonl", drop=[], job=None, strict=False)
@example(rows=[{"value": "x"}], fmt="parquet", drop=["target"], job="wordcount", strict=True)
@given(rows=NORMALIZED_ROWS, fmt=st.sampled_from(["jsonl", "ndjson", "parquet"]),
       drop=st.lists(st.sampled_from(NORMALIZED_COLUMNS), max_size=2, unique=True), job=JOBS, strict=st.booleans())
def test_normalized_json_lines_and_parquet(rows, fmt, drop, job, strict):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        path = tmp / f"m.{fmt}"
        if fmt == "parquet":
            try:
                _parquet_frame(rows, drop).to_parquet(path, index=False)
            except Exception:  # a column pyarrow cannot store even as text: not a file anyone has
                assume(False)
        else:
            lines = []
            for r in rows:
                text = _json_text({k: v for k, v in {**NORMALIZED_GOOD, **r}.items() if k not in drop})
                lines.append(text if text is not None else "{")
            path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="replace")
        argv = ["ingest", "--format", "normalized", str(path), "--store", str(tmp / "store"), "--json",
                *_flags(None, None, job, None, strict)]
        check_ingest(tmp, argv, strict)
