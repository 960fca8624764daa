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
