"""scheduler.loopstate: what the loop keeps across restarts round-trips through a state store."""

import math

from modeler.modelfile import load_model, model_to_dict
from scheduler.guard import GuardState
from scheduler.loopstate import META_KEY, LoopMemory, load_memory, save_memory
from scheduler.state import InMemoryStateStore
from tests.conftest import EXAMPLES


def test_the_budget_and_the_last_action_survive_a_restart():
    store = InMemoryStateStore()
    assert load_memory(store) is None
    state = GuardState(last_action_s=500.0, changes_s=(100.0, 200.0), down_since_s=450.0, down_max={"a": 3})
    save_memory(store, LoopMemory(trust=None, guard_state=state, measured_restart_s=3.5))
    got = load_memory(store)
    assert got.guard_state.changes_s == (100.0, 200.0) and got.guard_state.last_action_s == 500.0
    assert got.measured_restart_s == 3.5 and got.settled_after_s == -math.inf
    # a pending scale-down starts over after a restart
    assert got.guard_state.down_since_s is None and dict(got.guard_state.down_max) == {}


def test_a_model_saved_once_stays_until_another_is_saved():
    store = InMemoryStateStore()
    model = load_model(EXAMPLES / "diamond.yaml")
    save_memory(store, LoopMemory(trust=None, guard_state=GuardState(), model=model))
    save_memory(store, LoopMemory(trust={"x": 1}, guard_state=GuardState(changes_s=(1.0, 2.0))))
    got = load_memory(store)
    assert got.trust == {"x": 1} and got.guard_state.changes_s == (1.0, 2.0)
    assert got.model is not None and model_to_dict(got.model) == model_to_dict(model)
    # a stored model the code cannot read is left out: the configured one is used
    store.put_meta(META_KEY, {**store.get_meta(META_KEY), "model": {"version": 99}})
    assert load_memory(store).model is None
