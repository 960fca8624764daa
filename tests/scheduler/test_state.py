import pytest

from scheduler.state import (ActionRecord, BlacklistConfig, InMemoryStateStore, SQLiteStateStore, StateError,
                             StateStore, active_ban, find_entry, load_band, strike)


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    return InMemoryStateStore() if request.param == "memory" else SQLiteStateStore(tmp_path / "s.db")


def _rec(at, **kw):
    base = dict(at_s=at, kind="scale", operators=("a",), diagnosis="under_provisioned", load_band=3,
                from_config={"a": 2}, to_config={"a": 4}, reasons=("because",), expected={"busy_max": 0.7},
                applied=True)
    base.update(kw)
    return ActionRecord(**base)


def test_contract(store):
    """One contract for every StateStore implementation."""
    assert isinstance(store, StateStore)
    a = store.add_action(_rec(10.0))
    b = store.add_action(_rec(20.0, kind="restart_instance", detail="instance 1"))
    assert a.id != b.id
    assert [r.at_s for r in store.actions()] == [10.0, 20.0]
    assert [r.at_s for r in store.actions(limit=1)] == [20.0]
    store.update_action(ActionRecord.from_dict({**a.to_dict(), "outcome": "helped", "measured": {"busy_max": 0.6}}))
    got = store.actions()[0]
    assert got.outcome == "helped" and got.measured == {"busy_max": 0.6} and got.reasons == ("because",)
    with pytest.raises(StateError):
        store.update_action(_rec(1.0, id=999))
    e = strike(None, "scale", "a", "over_provisioned", 3, 100.0, "did not help", BlacklistConfig(base_s=60))
    store.put_blacklist(e)
    assert active_ban(store, e.key, 150.0) == e
    assert active_ban(store, e.key, 161.0) is None  # expired
    store.add_decision(5.0, {"kind": "none", "reasons": ["x"]})
    assert store.decisions()[-1]["kind"] == "none" and store.decisions()[-1]["at_s"] == 5.0
    store.put_meta("loop", {"trust": {"state": "trusted"}})
    assert store.get_meta("loop")["trust"]["state"] == "trusted"
    assert store.get_meta("missing", 7) == 7


def test_backoff_doubles_and_is_capped():
    cfg = BlacklistConfig(base_s=60, max_s=200)
    e1 = strike(None, "scale", "a", "d", 1, 0.0, "", cfg)
    e2 = strike(e1, "scale", "a", "d", 1, 100.0, "", cfg)
    e3 = strike(e2, "scale", "a", "d", 1, 1000.0, "", cfg)
    assert (e1.until_s, e2.until_s, e3.until_s) == (60.0, 220.0, 1200.0)
    assert e3.strikes == 3


def test_load_bands_are_geometric():
    assert load_band(1000) == load_band(1100)
    assert load_band(1000) != load_band(2000)
    assert load_band(0.0) == 0


def test_sqlite_survives_reopen(tmp_path):
    path = tmp_path / "state.db"
    s = SQLiteStateStore(path)
    s.add_action(_rec(1.0))
    s.put_blacklist(strike(None, "scale", "a", "d", 2, 0.0, "r", BlacklistConfig()))
    s.close()
    again = SQLiteStateStore(path)
    assert len(again.actions()) == 1 and find_entry(again, ("scale", "a", "d", 2)) is not None


def test_sqlite_rejects_a_foreign_file(tmp_path):
    bad = tmp_path / "x.db"
    bad.write_text("not sqlite" * 100)
    with pytest.raises(StateError):
        SQLiteStateStore(bad)
    with pytest.raises(StateError):
        SQLiteStateStore.open_existing(tmp_path / "missing.db")


def test_opening_for_reading_never_writes_a_schema(tmp_path):
    """Issue 22: ``augury log --state EMPTY`` gave the empty file augury's schema and exited 0."""
    import sqlite3

    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(StateError, match="not an augury state database"):
        SQLiteStateStore.open_existing(empty)
    assert empty.read_bytes() == b""
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    before = other.read_bytes()
    with pytest.raises(StateError, match="not an augury state database"):
        SQLiteStateStore.open_existing(other)
    assert other.read_bytes() == before
    SQLiteStateStore(tmp_path / "real.db").close()
    assert SQLiteStateStore.open_existing(tmp_path / "real.db").actions() == []


@pytest.mark.parametrize("content", [None, b"", b"not sqlite" * 100])
def test_augury_log_on_a_file_that_is_not_a_state_database_exits_2(tmp_path, capsys, content):
    """The wrong file named with --state (missing, empty, not SQLite) is a bad input: exit 2 with
    one line naming it, and the file as it was (issue 22)."""
    from augury.cli import main

    path = tmp_path / "state.db"
    if content is not None:
        path.write_bytes(content)
    assert main(["log", "--state", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("augury log: error: ") and str(path) in err
    assert (path.read_bytes() == content) if content is not None else not path.exists()
