"""The guard rails as a pure function: table-driven cases over (decision, state) -> (decision, state)."""

import math

import pytest

from scheduler.decision import Decision, DecisionKind
from scheduler.guard import DAY_S, GuardRails, GuardState, GuardView, guard
from scheduler.loop import LoopConfig

CUR = {"src": 1, "a": 4, "b": 2}
NOW = 1_000_000.0  # 13:46 UTC on day 12


def scale(**config):
    return Decision(kind=DecisionKind.SCALE, path="model", config={**CUR, **config},
                    operators=tuple(config), diagnosis="planned", reasons=("why",))


RESTART = Decision(kind=DecisionKind.RESTART_INSTANCE, path="reactive", config=None, operators=("a",),
                   instance=1, diagnosis="slow_instance", reasons=("slow",))

MOVE = Decision(kind=DecisionKind.MOVE_OFF_HOST, path="reactive", config=None, operators=("host-1",),
                host="host-1", diagnosis="slow_host", reasons=("slow host",))

CASES = [
    # (name, decision, state, rails, view kwargs, expected kind, expected config or None, note in blocked)
    ("passes", scale(a=6), GuardState(), GuardRails(), {}, "scale", {"a": 6}, None),
    ("stabilizing", scale(a=6), GuardState(last_action_s=NOW - 30), GuardRails(stabilization_s=60), {},
     "hold", None, "stabilizing"),
    ("blackout", scale(a=6), GuardState(), GuardRails(blackout=(("13:00", "14:00"),)), {}, "hold", None,
     "blackout"),
    ("max parallelism", scale(a=200), GuardState(), GuardRails(max_parallelism=10), {}, "scale", {"a": 10}, None),
    ("model bound", scale(a=200), GuardState(), GuardRails(), {"bounds": {"a": (1, 8)}}, "scale", {"a": 8}, None),
    ("step cap", scale(a=20), GuardState(), GuardRails(max_change_per_step=3), {}, "scale", {"a": 7}, None),
    ("min parallelism", scale(a=1), GuardState(down_since_s=NOW - 400, down_max={**CUR, "a": 1}),
     GuardRails(min_parallelism=2), {}, "scale", {"a": 2}, None),
    ("scale-down waits", scale(a=2), GuardState(), GuardRails(scale_down_delay_s=300), {}, "none", None,
     "waits"),
    ("scale-down after the delay takes the highest recommendation", scale(a=2),
     GuardState(down_since_s=NOW - 301, down_max={**CUR, "a": 3}), GuardRails(scale_down_delay_s=300), {},
     "scale", {"a": 3}, None),
    ("daily budget", scale(a=6), GuardState(changes_s=(NOW - 100, NOW - 200)),
     GuardRails(max_reconfigurations_per_day=2, stabilization_s=0), {}, "none", None, "daily budget"),
    ("a spent budget spares a scale-up", scale(a=6), GuardState(changes_s=(NOW - 100, NOW - 200)),
     GuardRails(max_reconfigurations_per_day=2, stabilization_s=0, budget_spares_scale_ups=True), {},
     "scale", {"a": 6}, "scale-up passes"),
    ("... but not a scale-down", scale(a=2), GuardState(changes_s=(NOW - 100, NOW - 200)),
     GuardRails(max_reconfigurations_per_day=2, stabilization_s=0, scale_down_delay_s=0,
                budget_spares_scale_ups=True), {}, "none", None, "daily budget"),
    ("... and only the scale-up part of a mixed change", scale(a=6, b=1), GuardState(changes_s=(NOW - 100, NOW - 200)),
     GuardRails(max_reconfigurations_per_day=2, stabilization_s=0, budget_spares_scale_ups=True), {},
     "scale", {"a": 6, "b": 2}, "scale-up passes"),
    ("a calendar day's budget is free at midnight", scale(a=6),
     GuardState(changes_s=(NOW - 100_000 + 86_400 - 200, NOW - 100_000 + 86_400 - 100)),
     GuardRails(max_reconfigurations_per_day=2, stabilization_s=0, budget_per_calendar_day=True,
                budget_day_origin_s=NOW - 100_000), {}, "scale", {"a": 6}, None),
    ("... and spent within the day", scale(a=6),
     GuardState(changes_s=(NOW - 100_000 + 86_400 + 100, NOW - 200)),
     GuardRails(max_reconfigurations_per_day=2, stabilization_s=0, budget_per_calendar_day=True,
                budget_day_origin_s=NOW - 100_000), {}, "none", None, "since the day began"),
    ("budget counts only 24 h", scale(a=6), GuardState(changes_s=(NOW - 90_000, NOW - 200)),
     GuardRails(max_reconfigurations_per_day=2, stabilization_s=0), {}, "scale", {"a": 6}, None),
    ("blacklisted operator keeps its parallelism", scale(a=6, b=3), GuardState(), GuardRails(),
     {"bans": {("scale", "a", "planned", 7): "test"}, "band": 7}, "scale", {"a": 4, "b": 3}, "blacklisted"),
    ("blacklisted restart", RESTART, GuardState(), GuardRails(),
     {"bans": {("restart_instance", "a", "slow_instance", 0): "test"}}, "none", None, "blacklisted"),
    ("restart passes", RESTART, GuardState(), GuardRails(), {}, "restart_instance", None, None),
    ("move off a host passes", MOVE, GuardState(), GuardRails(), {}, "move_off_host", None, None),
    ("move off a host waits for stabilization", MOVE, GuardState(last_action_s=NOW - 30),
     GuardRails(stabilization_s=60), {}, "hold", None, "stabilizing"),
    ("blacklisted move off a host", MOVE, GuardState(), GuardRails(),
     {"bans": {("move_off_host", "host-1", "slow_host", 0): "test"}}, "none", None, "blacklisted: move off host-1"),
]


@pytest.mark.parametrize("name,decision,state,rails,view,kind,config,note", CASES, ids=[c[0] for c in CASES])
def test_guard_table(name, decision, state, rails, view, kind, config, note):
    out, new_state = guard(decision, state, rails, GuardView(now_s=NOW, current=CUR, **view))
    assert out.kind == kind
    if config is not None:
        assert {k: out.config[k] for k in config} == config
    if note is not None:
        assert any(note in b for b in out.blocked), out.blocked
    assert isinstance(new_state, GuardState)


def test_a_blocked_scale_falls_back_to_a_restart():
    d = Decision(kind=DecisionKind.SCALE, path="model", config={**CUR, "a": 2}, operators=("a",), diagnosis="planned",
                 reasons=("down",), fallbacks=(RESTART,))
    out, state = guard(d, GuardState(), GuardRails(scale_down_delay_s=300), GuardView(now_s=NOW, current=CUR))
    assert out.kind == DecisionKind.RESTART_INSTANCE and any("waits" in b for b in out.blocked)
    assert state.down_since_s == NOW  # the scale-down keeps being timed


def test_advisor_marks_every_decision():
    out, _ = guard(scale(a=6), GuardState(), GuardRails(advisor=True), GuardView(now_s=NOW, current=CUR))
    assert out.kind == "scale" and out.advisor


def test_undo_bypasses_stabilization_but_not_bounds():
    d = Decision(kind=DecisionKind.UNDO, path="guard", config={**CUR, "a": 50}, reasons=("undo",))
    out, _ = guard(d, GuardState(last_action_s=NOW - 1), GuardRails(max_parallelism=16),
                   GuardView(now_s=NOW, current=CUR))
    assert out.kind == "undo" and out.config["a"] == 16


def test_after_action_records_the_change_and_resets_the_delay():
    s = GuardState(down_since_s=5.0, down_max={"a": 1}, changes_s=(NOW - 90_000,))
    s2 = s.after_action(NOW, reconfiguration=True, budget_window_s=DAY_S)
    assert s2.last_action_s == NOW and s2.down_since_s is None and s2.changes_s == (NOW,)
    assert s.after_action(NOW, reconfiguration=False, budget_window_s=DAY_S).changes_s == ()
    assert GuardState().last_action_s == -math.inf


COMPRESSED = LoopConfig(guard=GuardRails(max_reconfigurations_per_day=2, stabilization_s=0)).scaled(1 / 48).guard

PRUNE = [
    # (name, changes before, rails, reconfiguration, changes after)
    ("a day", (NOW - 90_000, NOW - 200), GuardRails(max_reconfigurations_per_day=2, stabilization_s=0), True,
     (NOW - 200, NOW)),
    ("compressed 48x: the scaled day (1800 s)", (NOW - 2_000, NOW - 1_000), COMPRESSED, True, (NOW - 1_000, NOW)),
    ("compressed, a restart is not a reconfiguration", (NOW - 2_000, NOW - 1_000), COMPRESSED, False,
     (NOW - 1_000,)),
    ("a window longer than a day keeps what a day would drop", (NOW - 90_000,),
     GuardRails(max_reconfigurations_per_day=2, stabilization_s=0, budget_window_s=2 * DAY_S), True,
     (NOW - 90_000, NOW)),
]


@pytest.mark.parametrize("name,before,rails,reconf,after", PRUNE, ids=[c[0] for c in PRUNE])
def test_after_action_prunes_with_the_budget_window(name, before, rails, reconf, after):
    state = GuardState(changes_s=before).after_action(NOW, reconf, rails.budget_window_s)
    assert state.changes_s == after
    # forgetting never changes what the budget counts: the next decision is judged the same as
    # with every change kept
    kept = GuardState(changes_s=before + ((NOW,) if reconf else ()))
    later = GuardView(now_s=NOW + 1, current=CUR)
    assert guard(scale(a=6), state, rails, later)[0] == guard(scale(a=6), kept, rails, later)[0]
