"""Validation and quarantine: one test per reason, and nothing is silently dropped."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from history.adapters._common import candidates
from history.ingest import ingest
from history.schema import Reason
from history.store import MetricStore
from history.validate import parse_timestamps, validate

GOOD = {"ts": "2024-05-01T12:00:00Z", "window_s": "10", "job": "j", "operator": "a",
        "instance": "0", "metric": "records_in", "value": "100", "target": None,
        "file": "f.csv", "line": 2}


def one(**change) -> pd.DataFrame:
    return candidates([GOOD, {**GOOD, "line": 3, **change}])


@pytest.mark.parametrize("change, reason", [
    ({"metric": "records_seen"}, Reason.UNKNOWN_METRIC),
    ({"ts": "yesterday noon"}, Reason.BAD_TIMESTAMP),
    ({"ts": None}, Reason.BAD_TIMESTAMP),
    ({"value": "12abc"}, Reason.NON_NUMERIC_VALUE),
    ({"value": "NaN"}, Reason.NON_NUMERIC_VALUE),
    ({"value": float("nan")}, Reason.NON_NUMERIC_VALUE),
    ({"value": "inf"}, Reason.NON_NUMERIC_VALUE),
    ({"value": None}, Reason.NON_NUMERIC_VALUE),
    ({"value": "-1", "metric": "records_in"}, Reason.NEGATIVE_VALUE),
    ({"value": "-0.5", "metric": "busy_ms"}, Reason.NEGATIVE_VALUE),
    ({"operator": ""}, Reason.MISSING_FIELD),
    ({"job": None}, Reason.MISSING_FIELD),
    ({"window_s": "0"}, Reason.BAD_WINDOW),
    ({"window_s": "ten"}, Reason.BAD_WINDOW),
    ({"instance": "-1"}, Reason.BAD_INSTANCE),
    ({"instance": "1.5"}, Reason.BAD_INSTANCE),
    ({"metric": "busy_ms", "target": "b"}, Reason.UNEXPECTED_TARGET),
    ({"reason": "malformed_row", "detail": "not JSON"}, Reason.MALFORMED_ROW),
])
def test_each_reason_quarantines_the_row_with_its_location(change, reason):
    checked = validate(one(**change))
    assert len(checked.accepted) == 1
    q = checked.quarantined
    assert q["reason"].tolist() == [reason.value]
    assert q["line"].tolist() == [3] and q["file"].tolist() == ["f.csv"]
    assert q["detail"].iloc[0]


def test_duplicate_key_with_different_values_quarantines_every_copy():
    frame = candidates([GOOD, {**GOOD, "line": 3, "value": "101"}, {**GOOD, "line": 4, "operator": "b"}])
    checked = validate(frame)
    assert checked.accepted["operator"].tolist() == ["b"]
    assert checked.quarantined["reason"].tolist() == [Reason.DUPLICATE_CONFLICT.value] * 2
    assert sorted(checked.quarantined["line"]) == [2, 3]
    assert "100.0@10.0" in checked.quarantined["detail"].iloc[0]


def test_exact_duplicates_are_merged_and_counted():
    checked = validate(candidates([GOOD, {**GOOD, "line": 3}, {**GOOD, "line": 4}]))
    assert len(checked.accepted) == 1 and checked.duplicates == 2 and checked.quarantined.empty


def test_records_out_target_is_part_of_the_key():
    frame = candidates([{**GOOD, "metric": "records_out", "target": "b"},
                        {**GOOD, "metric": "records_out", "target": "c", "value": "7"},
                        {**GOOD, "metric": "records_out", "target": None, "value": "107"}])
    checked = validate(frame)
    assert len(checked.accepted) == 3 and checked.quarantined.empty


def test_host_is_optional_trimmed_and_not_part_of_the_key():
    checked = validate(candidates([{**GOOD, "host": " host-1 "}, {**GOOD, "line": 3, "operator": "b"},
                                   {**GOOD, "line": 4, "operator": "c", "host": " "},
                                   {**GOOD, "line": 5, "host": "host-2"}]))
    assert checked.quarantined.empty and checked.duplicates == 1  # line 5: same key, same value
    hosts = dict(zip(checked.accepted["operator"], checked.accepted["host"]))
    assert hosts == {"a": "host-1", "b": None, "c": None}
    long = validate(one(host="h" * 201)).quarantined
    assert long["reason"].tolist() == [Reason.BAD_NAME.value] and "host" in long["detail"].iloc[0]


def test_timestamps_iso_offsets_epoch_and_datetimes():
    values = pd.Series(["2024-05-01T14:00:00+02:00", "2024-05-01 12:00:00", 1714564800, "1714564800",
                        pd.Timestamp("2024-05-01T12:00:00Z"), "2024-13-01T00:00:00Z"], dtype=object)
    parsed = parse_timestamps(values)
    expected = pd.Timestamp("2024-05-01T12:00:00Z")
    assert (parsed.iloc[:5] == expected).all()
    assert parsed.isna().tolist() == [False] * 5 + [True]


def write_csv(path, lines):
    path.write_text("ts,window_s,job,operator,instance,metric,value,target\n" + "\n".join(lines) + "\n")
    return path


def test_time_above_the_window_is_quarantined(tmp_path):
    path = write_csv(tmp_path / "t.csv", [
        "2024-05-01T12:00:00Z,10,j,a,0,busy_ms,6000,",
        "2024-05-01T12:00:00Z,10,j,a,0,idle_ms,4050,",      # 10050 <= 10100: tolerated
        "2024-05-01T12:00:00Z,10,j,a,1,busy_ms,6000,",
        "2024-05-01T12:00:00Z,10,j,a,1,backpressured_ms,4500,",  # 10500 > 10100
        "2024-05-01T12:00:00Z,10,j,a,1,records_in,10,",
    ])
    report = ingest([path], "normalized", tmp_path / "store")
    assert report.quarantined == {"time_exceeds_window": 2}
    q = MetricStore(tmp_path / "store").quarantine()
    assert sorted(q["line"]) == [4, 5] and set(q["reason"]) == {"time_exceeds_window"}
    assert "10500 ms > window 10000 ms" in q["detail"].iloc[0]
    raw = MetricStore(tmp_path / "store").raw()
    assert len(raw) == 3 and set(raw[raw["instance"] == 1]["metric"]) == {"records_in"}


def test_time_budget_counts_rows_already_stored(tmp_path):
    store = tmp_path / "store"
    ingest([write_csv(tmp_path / "a.csv", ["2024-05-01T12:00:00Z,10,j,a,0,busy_ms,7000,"])],
           "normalized", store)
    report = ingest([write_csv(tmp_path / "b.csv", ["2024-05-01T12:00:00Z,10,j,a,0,idle_ms,7000,"])],
                    "normalized", store)
    assert report.quarantined == {"time_exceeds_window": 1} and report.new == 0
    assert MetricStore(store).raw()["metric"].tolist() == ["busy_ms"]


def test_conflict_with_a_stored_row_keeps_the_stored_value(tmp_path):
    store = tmp_path / "store"
    ingest([write_csv(tmp_path / "a.csv", ["2024-05-01T12:00:00Z,10,j,a,0,records_in,5,"])], "normalized", store)
    report = ingest([write_csv(tmp_path / "b.csv", ["2024-05-01T12:00:00Z,10,j,a,0,records_in,6,"])],
                    "normalized", store)
    assert report.quarantined == {"duplicate_conflict": 1}
    assert MetricStore(store).raw()["value"].tolist() == [5.0]
    q = MetricStore(store).quarantine()
    assert q["file"].tolist() == [str(tmp_path / "b.csv")] and "stored value 5.0" in q["detail"].iloc[0]


def test_nothing_is_silently_dropped(tmp_path):
    path = write_csv(tmp_path / "mix.csv", [
        "2024-05-01T12:00:00Z,10,j,a,0,records_in,100,",
        "2024-05-01T12:00:00Z,10,j,a,0,records_in,100,",     # exact duplicate
        "2024-05-01T12:00:00Z,10,j,a,1,records_in,abc,",
        "2024-05-01T12:00:00Z,10,j,a,2,bogus,1,",
        "noon,10,j,a,3,records_in,1,",
        "2024-05-01T12:00:00Z,10,j,a,4,records_in,-3,",
        "2024-05-01T12:00:00Z,10,j,a,5,records_in,1,",
        "2024-05-01T12:00:00Z,10,j,a,5,records_in,2,",
        "2024-05-01T12:00:10Z,10,j,a,0,records_out,90,b",
    ])
    report = ingest([path], "normalized", tmp_path / "store")
    assert report.rows_read == 9
    assert report.rows_read == report.accepted + report.duplicates + report.quarantined_total
    assert report.accepted == report.new + report.already_stored == 2
    assert report.quarantined == {"non_numeric_value": 1, "unknown_metric": 1, "bad_timestamp": 1,
                                  "negative_value": 1, "duplicate_conflict": 2}
    assert len(MetricStore(tmp_path / "store").quarantine()) == report.quarantined_total
    assert not math.isnan(MetricStore(tmp_path / "store").raw()["value"].sum())


# ----------------------------------------------------------- issue 22: ingest never loses data


def test_a_batch_whose_rows_are_all_bad_is_quarantined_not_raised(tmp_path):
    checked = validate(candidates([{**GOOD, "value": "NaN"}, {**GOOD, "line": 3, "job": ""}]))
    assert checked.accepted.empty and list(checked.accepted.columns)[:8] == list(
        ("ts", "window_s", "job", "operator", "instance", "metric", "value", "target"))
    assert checked.quarantined["reason"].tolist() == [Reason.NON_NUMERIC_VALUE.value, Reason.MISSING_FIELD.value]
    report = ingest([write_csv(tmp_path / "bad.csv", ["2024-05-01T12:00:00Z,10,j,a,0,records_in,NaN,"])],
                    "normalized", tmp_path / "store")
    assert report.quarantined == {"non_numeric_value": 1} and report.accepted == 0
    assert len(MetricStore(tmp_path / "store").quarantine()) == 1  # the quarantine is stored


def test_a_header_only_file_ingests_nothing_and_succeeds(tmp_path):
    report = ingest([write_csv(tmp_path / "h.csv", [])], "normalized", tmp_path / "store")
    assert report.rows_read == 0 and report.quarantined_total == 0


@pytest.mark.parametrize("ts", ["1e11", "100000000000", "-1e12", "9999-01-01T00:00:00Z", "1e400"])
def test_an_out_of_range_timestamp_quarantines_that_row_only(tmp_path, ts):
    report = ingest([write_csv(tmp_path / "t.csv", [f"{ts},10,j,a,0,records_in,1,",
                                                    "2024-05-01T12:00:00Z,10,j,a,0,records_in,1,"])],
                    "normalized", tmp_path / "store")
    assert report.accepted == 1 and report.quarantined == {"bad_timestamp": 1}
    assert "epoch seconds in [" in MetricStore(tmp_path / "store").quarantine()["detail"].iloc[0]


def test_out_of_range_datetimes_become_nat():
    from datetime import datetime

    parsed = parse_timestamps(pd.Series([datetime(3000, 1, 1), datetime(2024, 5, 1, 12)], dtype=object))
    assert parsed.isna().tolist() == [True, False]


@pytest.mark.parametrize("column, value", [("job", "j" * 300), ("job", "é" * 60), ("operator", "o" * 201),
                                           ("target", "t" * 201)])
def test_an_over_long_name_is_quarantined_and_stored(tmp_path, column, value):
    row = {"ts": "2024-05-01T12:00:00Z", "window_s": "10", "job": "j", "operator": "a", "instance": "0",
           "metric": "records_out", "value": "1", "target": "b", column: value}
    lines = [",".join(str(row[c]) for c in ("ts", "window_s", "job", "operator", "instance", "metric", "value",
                                            "target")), "2024-05-01T12:00:00Z,10,j,a,1,records_in,1,"]
    report = ingest([write_csv(tmp_path / "n.csv", lines)], "normalized", tmp_path / "store")
    assert report.accepted == 1 and report.quarantined == {"bad_name": 1}
    assert len(MetricStore(tmp_path / "store").quarantine()) == 1


@pytest.mark.parametrize("job", ["", "   ", "j" * 201, "é" * 60])
def test_a_bad_job_flag_is_refused_before_reading(job):
    from history.adapters import AdapterOptions
    from history.errors import HistoryError

    with pytest.raises(HistoryError) as info:
        AdapterOptions(job=job)
    assert info.value.field == "--job"
