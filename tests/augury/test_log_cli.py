"""``augury log``: the action log shows a move off a host (issue 26) like any other action."""

from __future__ import annotations

import augury.cli as cli
from scheduler.state import ActionRecord, SQLiteStateStore


def test_log_shows_a_move_off_host_with_its_host_and_diagnosis(tmp_path, capsys):
    store = SQLiteStateStore(tmp_path / "state.db")
    store.add_action(ActionRecord(
        at_s=100.0, kind="move_off_host", operators=("host-0",), diagnosis="slow_host", load_band=3,
        from_config={"a": 2}, to_config={"a": 2}, applied=True, outcome="helped",
        reasons=("host-0: every measured instance on it slow together (a[0], b[0])",),
        expected={"backpressure_max": 0.0}, detail="moved 2 instance(s) off host-0"))
    store.close()
    assert cli.main(["log", "--state", str(tmp_path / "state.db")]) == 0
    out = capsys.readouterr().out
    assert "move_off_host host-0 moved 2 instance(s) off host-0 (slow_host) -> helped" in out
    assert "every measured instance on it slow together" in out
