"""scheduler.schedule: lead time, stabilization before scale-down, the reconfiguration budget,
the reactive floor; replay against the actual load."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from modeler.modelfile import load_model
from modeler.queueing import compile_model, predict
from scheduler.errors import SchedulerError
from scheduler.plan import plan
from scheduler.schedule import ScheduleConfig, replay, schedule
from tests.conftest import EXAMPLES

MODEL = compile_model(load_model(EXAMPLES / "diamond.yaml"))
LOW, HIGH = 2000.0, 12000.0
IDX = pd.date_range("2026-01-01", periods=48, freq="30min")


def _peak_series(start=20, end=26):
    values = np.full(len(IDX), LOW)
    values[start:end] = HIGH
    return pd.Series(values, index=IDX)


def test_scale_up_is_issued_lead_time_early_and_down_after_stabilization():
    cfg = ScheduleConfig(lead_time_s=600, stabilization_s=3600, rate_resolution=0, lookahead_s=0)
    s = schedule(MODEL, _peak_series(), LOW, cfg)
    ups = [r for r in s.reconfigurations if r.direction == "up"]
    downs = [r for r in s.reconfigurations if r.direction == "down"]
    assert len(ups) == 1 and len(downs) == 1
    assert ups[0].segment_start == IDX[20]
    assert ups[0].issue_at == IDX[20] - pd.Timedelta(minutes=10)
    assert ups[0].effective_at == IDX[20]
    assert dict(ups[0].config) == dict(plan(MODEL, HIGH).config)
    # The load falls at step 26; one hour (2 steps) later the level may fall.
    assert downs[0].segment_start == IDX[28]
    assert dict(downs[0].config) == dict(plan(MODEL, LOW).config)
    # Replayed against the forecast itself: no interval violates the target.
    assert not replay(MODEL, s, _peak_series()).violation.any()


def test_reactive_floor_keeps_the_measured_load_for_the_stabilization_period():
    cfg = ScheduleConfig(stabilization_s=3600, rate_resolution=0)
    s = schedule(MODEL, _peak_series(), HIGH, cfg)  # measured load is high now, forecast low
    assert dict(s.reconfigurations[0].config) == dict(plan(MODEL, HIGH).config)
    assert s.steps["level"].iloc[0] == HIGH
    assert s.steps["level"].iloc[5] == LOW


def test_reconfiguration_budget_merges_the_cheapest_changes():
    values = np.where(np.arange(len(IDX)) % 6 < 3, HIGH, LOW)  # a peak every 3 h
    forecast = pd.Series(values, index=IDX)
    free = schedule(MODEL, forecast, LOW, ScheduleConfig(stabilization_s=0, max_reconfigurations_per_day=100))
    capped = schedule(MODEL, forecast, LOW, ScheduleConfig(stabilization_s=0, max_reconfigurations_per_day=5))
    assert free.per_day() > 5
    assert capped.per_day() <= 5
    # Never below demand: every step's capacity covers the forecast.
    assert (capped.steps["capacity"] >= capped.steps["forecast"] * (1 - 1e-9)).all()
    assert capped.steps["instances"].sum() >= free.steps["instances"].sum()


def test_capacity_column_is_target_times_max_rate():
    s = schedule(MODEL, _peak_series(), LOW)
    for ts in (IDX[0], IDX[22]):
        cfg = s.config_at(ts)
        assert s.steps.loc[ts, "capacity"] == pytest.approx(0.7 * predict(MODEL, cfg, 1.0).max_rate)


@pytest.mark.parametrize("kwargs", [{"lead_time_s": -1}, {"max_reconfigurations_per_day": 0},
                                    {"rate_resolution": float("nan")}])
def test_bad_config_raises(kwargs):
    with pytest.raises(SchedulerError):
        schedule(MODEL, _peak_series(), LOW, ScheduleConfig(**kwargs))


def test_bad_forecast_raises():
    with pytest.raises(SchedulerError):
        schedule(MODEL, pd.Series([1.0, -1.0], index=IDX[:2]), LOW)
    with pytest.raises(SchedulerError):
        schedule(MODEL, pd.Series([1.0, 2.0]), LOW)


def test_lookahead_covers_a_load_arriving_one_step_early():
    # Default lookahead = the lead time (10 min) -> one 30-min step: the high level starts at 19.
    cfg = ScheduleConfig(lead_time_s=600, stabilization_s=3600, rate_resolution=0)
    s = schedule(MODEL, _peak_series(), LOW, cfg)
    ups = [r for r in s.reconfigurations if r.direction == "up"]
    assert ups[0].segment_start == IDX[19]
    early = _peak_series(start=19, end=26)  # the actual peak comes one step early
    assert not replay(MODEL, s, early).violation.any()
    no_ahead = schedule(MODEL, _peak_series(), LOW, ScheduleConfig(lead_time_s=600, rate_resolution=0,
                                                                   lookahead_s=0))
    assert replay(MODEL, no_ahead, early).violation.sum() == 1


def test_budget_counts_issue_times_recent_issues_and_the_change_at_now():
    values = np.where(np.arange(len(IDX)) % 6 < 3, HIGH, LOW)
    forecast = pd.Series(values, index=IDX)
    now = IDX[0]
    cfg = ScheduleConfig(stabilization_s=0, max_reconfigurations_per_day=6, lookahead_s=0)
    recent = [now - pd.Timedelta(hours=h) for h in (1, 2, 3)]
    s = schedule(MODEL, forecast, HIGH, cfg, now=now, recent_issues=recent)
    issued = recent + [r.issue_at for r in s.changes()]
    from scheduler.schedule import max_per_day

    assert s.reconfigurations[0].direction == "initial"  # unknown running config: a change
    assert max_per_day(issued) <= 6
    assert s.per_day() <= 6 - 0  # within the schedule alone, too
    # Merged segments keep the higher level: capacity never below the forecast.
    assert (s.steps["capacity"] >= s.steps["forecast"] * (1 - 1e-9)).all()


def test_running_config_that_covers_the_first_segment_is_kept():
    big = dict(plan(MODEL, HIGH).config)
    s = schedule(MODEL, _peak_series(), LOW, ScheduleConfig(rate_resolution=0), current_config=big)
    assert s.reconfigurations[0].direction == "keep"
    assert s.reconfigurations[0].config == big
    assert len(s.changes()) == len(s.reconfigurations) - 1
    # A running config too small for the load now: changed at now, in force after the lead time.
    small = dict(plan(MODEL, LOW).config)
    s2 = schedule(MODEL, _peak_series(), HIGH, ScheduleConfig(rate_resolution=0, lead_time_s=300),
                  current_config=small)
    first = s2.reconfigurations[0]
    assert first.direction == "initial" and first.effective_at == s2.now + pd.Timedelta(seconds=300)
    assert s2.config_at(s2.now) == small
    assert s2.config_at(first.effective_at) == dict(plan(MODEL, HIGH).config)


def test_keep_until_bounds_how_long_the_running_configuration_is_kept():
    # A flat forecast is one run of equal levels: a larger running configuration that covers it
    # is kept through all of it (no change). A committed scale-down (keep_until) ends the kept run
    # then; once that time has come the change is made now; it never makes a change that does
    # not shed instances.
    flat = pd.Series(np.full(len(IDX), LOW), index=IDX)
    big, small = dict(plan(MODEL, HIGH).config), dict(plan(MODEL, LOW).config)
    cfg = ScheduleConfig(rate_resolution=0, lead_time_s=300)
    now = IDX[0] - pd.Timedelta(minutes=30)
    kept = schedule(MODEL, flat, LOW, cfg, now=now, current_config=big)
    assert [r.direction for r in kept.reconfigurations] == ["keep"]
    bounded = schedule(MODEL, flat, LOW, cfg, now=now, current_config=big, keep_until=IDX[4])
    assert [r.direction for r in bounded.reconfigurations] == ["keep", "down"]
    assert bounded.reconfigurations[1].issue_at == IDX[4]
    assert dict(bounded.reconfigurations[1].config) == small
    assert bounded.config_at(IDX[3]) == big
    due = schedule(MODEL, flat, LOW, cfg, now=now, current_config=big, keep_until=now)
    assert due.reconfigurations[0].direction == "initial" and dict(due.reconfigurations[0].config) == small
    assert due.config_at(now + pd.Timedelta(seconds=300)) == small
    same = schedule(MODEL, flat, LOW, cfg, now=now, current_config=small, keep_until=now)
    assert [r.direction for r in same.reconfigurations] == ["keep"]
    # a bound past the kept run changes nothing
    peak = schedule(MODEL, _peak_series(), LOW, cfg, now=now, current_config=big)
    late = schedule(MODEL, _peak_series(), LOW, cfg, now=now, current_config=big, keep_until=IDX[-1])
    assert [r.to_dict() for r in peak.reconfigurations] == [r.to_dict() for r in late.reconfigurations]


def test_calendar_days_free_the_budget_at_midnight():
    # Two changes yesterday afternoon and a budget of 3: in any 24 h window the peak's scale-up
    # (09:50 today) joins them and the change at now, so one change is merged away; per calendar
    # day today has only the peak's two.
    now = IDX[0] - pd.Timedelta(minutes=30)
    yesterday = [IDX[0] - pd.Timedelta(hours=12), IDX[0] - pd.Timedelta(hours=11)]
    base = dict(rate_resolution=0, lead_time_s=600, stabilization_s=3600, lookahead_s=0,
                max_reconfigurations_per_day=3)
    sliding = schedule(MODEL, _peak_series(), LOW, ScheduleConfig(**base), now=now, recent_issues=yesterday)
    calendar = schedule(MODEL, _peak_series(), LOW, ScheduleConfig(**base, budget_per_calendar_day=True), now=now,
                        recent_issues=yesterday)
    assert [r.direction for r in calendar.reconfigurations] == ["initial", "up", "down"]
    assert len(sliding.changes()) < len(calendar.changes())
    # with the budget free, both count the same
    free = dict(base, max_reconfigurations_per_day=12)
    assert [r.to_dict() for r in schedule(MODEL, _peak_series(), LOW, ScheduleConfig(**free), now=now,
                                          recent_issues=yesterday).reconfigurations] == \
        [r.to_dict() for r in schedule(MODEL, _peak_series(), LOW, ScheduleConfig(**free, budget_per_calendar_day=True),
                                       now=now, recent_issues=yesterday).reconfigurations]


def test_measured_load_holds_one_stabilization_period_not_two():
    # Re-planning while the load falls: the floor (the load measured now) holds for one
    # stabilization period from now and then the level follows the forecast down, so a re-plan
    # every two hours does scale down.
    forecast = pd.Series(np.full(len(IDX), LOW), index=IDX)
    s = schedule(MODEL, forecast, HIGH, ScheduleConfig(stabilization_s=3600, rate_resolution=0, lookahead_s=0),
                 now=IDX[0])
    downs = [r for r in s.reconfigurations if r.direction == "down"]
    assert len(downs) == 1
    assert downs[0].issue_at - s.now <= pd.Timedelta(hours=1, minutes=30)
    assert (s.steps["level"][s.steps.index - s.now <= pd.Timedelta(hours=1)] == HIGH).all()


def test_a_load_measured_before_now_holds_from_when_it_was_measured():
    # The peak was measured 50 min before now and the load now is low: the floor holds until an
    # hour after the peak (10 min from now), not an hour from now, so a re-plan made later does
    # not push the scale-down out again.
    forecast = pd.Series(np.full(len(IDX), LOW), index=IDX)
    now = IDX[0]
    cfg = ScheduleConfig(stabilization_s=3600, rate_resolution=0, lookahead_s=0)
    seen = pd.Series([HIGH, LOW], index=[now - pd.Timedelta(minutes=50), now - pd.Timedelta(minutes=20)])
    s = schedule(MODEL, forecast, LOW, cfg, now=now, measured=seen)
    level = s.steps["level"]
    assert (level[level.index <= now + pd.Timedelta(minutes=10)] == HIGH).all()
    assert (level[level.index > now + pd.Timedelta(minutes=10)] == LOW).all()
    # without the earlier windows the peak is forgotten; without the anchor (the peak measured
    # now) it would hold an hour from now
    assert (schedule(MODEL, forecast, LOW, cfg, now=now).steps["level"] == LOW).all()
    late = schedule(MODEL, forecast, HIGH, cfg, now=now).steps["level"]
    assert (late[late.index <= now + pd.Timedelta(minutes=60)] == HIGH).all()
    # measurements older than a stabilization period, or after now, floor nothing
    old = pd.Series([HIGH, HIGH], index=[now - pd.Timedelta(minutes=61), now + pd.Timedelta(minutes=5)])
    assert (schedule(MODEL, forecast, LOW, cfg, now=now, measured=old).steps["level"] == LOW).all()


def test_measured_none_is_the_current_load_measured_now():
    cfg = ScheduleConfig(stabilization_s=3600, rate_resolution=0)
    now = IDX[0] - pd.Timedelta(minutes=30)
    a = schedule(MODEL, _peak_series(), HIGH, cfg, now=now)
    b = schedule(MODEL, _peak_series(), HIGH, cfg, now=now, measured=pd.Series([HIGH], index=[now]))
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert [r.to_dict() for r in a.reconfigurations] == [r.to_dict() for r in b.reconfigurations]


def test_non_finite_measured_load_is_a_typed_error():
    with pytest.raises(SchedulerError, match="measured"):
        schedule(MODEL, _peak_series(), LOW, now=IDX[0],
                 measured=pd.Series([float("nan")], index=[IDX[0] - pd.Timedelta(minutes=5)]))
    with pytest.raises(SchedulerError, match="measured"):
        schedule(MODEL, _peak_series(), LOW, now=IDX[0],
                 measured=pd.Series([-1.0], index=[IDX[0] - pd.Timedelta(minutes=5)]))


def test_reserved_reconfigurations_stay_free_in_every_window():
    values = np.where(np.arange(len(IDX)) % 6 < 3, HIGH, LOW)
    forecast = pd.Series(values, index=IDX)
    cfg = ScheduleConfig(stabilization_s=0, max_reconfigurations_per_day=6, reserved_reconfigurations=2,
                         lookahead_s=0)
    s = schedule(MODEL, forecast, LOW, cfg)
    assert s.per_day() <= 4  # 6 - 2 planned, the change at now included
    assert (s.steps["capacity"] >= s.steps["forecast"] * (1 - 1e-9)).all()
    with pytest.raises(SchedulerError):
        ScheduleConfig(max_reconfigurations_per_day=3, reserved_reconfigurations=3).check()


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(st.floats(min_value=0, max_value=HIGH), min_size=4, max_size=48),
       budget=st.integers(min_value=1, max_value=8), reserved=st.integers(min_value=0, max_value=3),
       n_recent=st.integers(min_value=0, max_value=4), solver=st.sampled_from(["rules", "priced"]))
def test_invariants_budget_and_capacity(values, budget, reserved, n_recent, solver):
    reserved = min(reserved, budget - 1)
    forecast = pd.Series(values, index=IDX[:len(values)])
    now = IDX[0] - pd.Timedelta(minutes=30)
    recent = [now - pd.Timedelta(hours=2 * (k + 1)) for k in range(n_recent)]
    cfg = ScheduleConfig(max_reconfigurations_per_day=budget, reserved_reconfigurations=reserved, solver=solver,
                         restart_s=30.0 if solver == "priced" else 0.0)
    s = schedule(MODEL, forecast, float(values[0]), cfg, now=now, recent_issues=recent)
    from scheduler.schedule import max_per_day

    issued = recent + [r.issue_at for r in s.changes()]
    over_budget = any("exceed the budget" in r for r in s.reasons)
    # The budget holds unless the changes before now plus the one at now already break it.
    assert over_budget or max_per_day(issued) <= budget
    assert over_budget == (max_per_day(issued) > budget)
    # Capacity covers the forecast at every step (scale-ups are in place when needed).
    assert (s.steps["capacity"] >= s.steps["forecast"] * (1 - 1e-9)).all()
    # Issue times never decrease and every change takes effect a lead time after it is issued.
    times = [r.issue_at for r in s.reconfigurations]
    assert times == sorted(times)
    for r in s.changes()[1:]:
        assert r.effective_at - r.issue_at == pd.Timedelta(seconds=cfg.lead_time_s)


# ----------------------------------------------------------------------------- priced scale-downs


def test_restart_violation_is_restart_plus_drain():
    from scheduler.schedule import restart_violation_s

    assert restart_violation_s(30.0, 1000.0, 500.0) == pytest.approx(60.0)  # 30 x 1000 / 500
    assert restart_violation_s(30.0, 1000.0, 0.0) == pytest.approx(30.0)
    assert restart_violation_s(0.5, 1000.0, 900.0) == 0.0  # within the 1 s backlog SLO
    assert restart_violation_s(30.0, 1000.0, 1000.0) == float("inf")


def _dip(hours: int) -> pd.Series:
    """HIGH, a dip to LOW for ``hours`` (30-minute steps), HIGH again."""
    values = np.full(len(IDX), HIGH)
    values[10:10 + 2 * hours] = LOW
    return pd.Series(values, index=IDX)


def _directions(s) -> list[str]:
    return [r.direction for r in s.reconfigurations if r.direction in ("up", "down")]


def test_a_short_dip_is_not_worth_two_restarts():
    base = dict(stabilization_s=0, rate_resolution=0, lookahead_s=0, lead_time_s=600)
    free = schedule(MODEL, _dip(2), HIGH, ScheduleConfig(**base))
    assert _directions(free) == ["down", "up"]
    # 30 s restarts: the dip's saving (a few instances for 2 h) at 1 s per instance-hour is worth
    # less than the scale-down's and the way back up's restarts: the large configuration stays
    cheap = schedule(MODEL, _dip(2), HIGH, ScheduleConfig(**base, restart_s=30.0, violation_s_per_instance_hour=1.0))
    assert _directions(cheap) == []
    assert any("no scale-down" in r and "less than its restarts cost" in r for r in cheap.reasons)
    # the same dip priced at 1,000 s per instance-hour is worth both restarts
    dear = schedule(MODEL, _dip(2), HIGH, ScheduleConfig(**base, restart_s=30.0,
                                                          violation_s_per_instance_hour=1000.0))
    assert _directions(dear) == ["down", "up"]
    # never below demand: the kept configuration covers the dip (it was planned for more)
    assert not replay(MODEL, cheap, _dip(2)).violation.any()


def test_the_price_weighs_the_instance_hours_saved():
    # a 1-hour dip: the scale-down saves (HIGH plan - LOW plan) instance-hours; it costs its own
    # restart (the LOW plan's capacity at the LOW load) plus the way back up (HIGH's, issued in
    # the dip). The scale-down is made exactly when the saving, priced, pays for both.
    from scheduler.schedule import restart_violation_s

    high, low = plan(MODEL, HIGH), plan(MODEL, LOW)
    saved_ih = (high.instances - low.instances) * 1.0
    cost = (restart_violation_s(30.0, predict(MODEL, dict(low.config), 1.0).max_rate, LOW)
            + restart_violation_s(30.0, predict(MODEL, dict(high.config), 1.0).max_rate, LOW))
    breakeven = cost / saved_ih
    base = dict(stabilization_s=0, rate_resolution=0, lookahead_s=0, lead_time_s=600, restart_s=30.0)
    below = schedule(MODEL, _dip(1), HIGH, ScheduleConfig(**base, violation_s_per_instance_hour=0.95 * breakeven))
    above = schedule(MODEL, _dip(1), HIGH, ScheduleConfig(**base, violation_s_per_instance_hour=1.05 * breakeven))
    assert _directions(below) == [] and _directions(above) == ["down", "up"]
    # the default (60 s per instance-hour) is well above this break-even: the dip is taken
    assert breakeven < 60.0 and _directions(schedule(MODEL, _dip(1), HIGH, ScheduleConfig(**base))) == ["down", "up"]


def test_restart_aware_issue_times_move_a_scale_down_to_lower_load():
    # after the peak the load falls first to a level the small configuration carries only just
    # (its restart there drains slowly), two steps later to LOW. With shift_s the scale-down
    # waits for LOW when the restart violation saved beats the instance-hours held longer.
    from scheduler.schedule import restart_violation_s

    low = plan(MODEL, LOW)
    mu = predict(MODEL, dict(low.config), 1.0).max_rate
    mid = 0.9 * 0.7 * mu
    assert dict(plan(MODEL, mid).config) == dict(low.config)  # one segment, one scale-down
    values = np.full(len(IDX), LOW)
    values[20:26] = HIGH
    values[26:28] = mid
    forecast = pd.Series(values, index=IDX)
    base = dict(stabilization_s=0, rate_resolution=0, lookahead_s=0, lead_time_s=600, restart_s=300.0,
                violation_s_per_instance_hour=10.0)
    at_default = schedule(MODEL, forecast, LOW, ScheduleConfig(**base))
    shifted = schedule(MODEL, forecast, LOW, ScheduleConfig(**base, shift_s=3 * 3600.0))
    down0 = next(r for r in at_default.reconfigurations if r.direction == "down")
    down1 = next(r for r in shifted.reconfigurations if r.direction == "down")
    assert down0.issue_at == IDX[26] and down1.issue_at == IDX[28]
    assert "later than" in down1.reason
    saved = restart_violation_s(300.0, mu, mid) - restart_violation_s(300.0, mu, LOW)
    held = (plan(MODEL, HIGH).instances - low.instances) * 1.0 * 10.0  # two 30-min steps
    assert saved > held
    # the scale-up is not moved: the load before it is LOW throughout (no cheaper time)
    up0 = next(r for r in at_default.reconfigurations if r.direction == "up")
    up1 = next(r for r in shifted.reconfigurations if r.direction == "up")
    assert up0.issue_at == up1.issue_at
    # at a dear exchange rate holding the large configuration longer does not pay: no move
    dear = schedule(MODEL, forecast, LOW, ScheduleConfig(**{**base, "violation_s_per_instance_hour": 1e4},
                                                         shift_s=3 * 3600.0))
    assert next(r for r in dear.reconfigurations if r.direction == "down").issue_at == IDX[26]
    # never below demand
    assert not replay(MODEL, shifted, forecast).violation.any()


def test_restart_aware_issue_times_move_a_scale_up_before_a_rising_load():
    # the load creeps up inside the small configuration's capacity before the peak: issuing the
    # scale-up earlier, at LOW, costs a cheaper restart than at the creep
    low = plan(MODEL, LOW)
    mu_low = predict(MODEL, dict(low.config), 1.0).max_rate
    creep = 0.95 * 0.7 * mu_low
    assert dict(plan(MODEL, creep).config) == dict(low.config)
    values = np.full(len(IDX), LOW)
    values[16:20] = creep
    values[20:26] = HIGH
    forecast = pd.Series(values, index=IDX)
    base = dict(stabilization_s=0, rate_resolution=0, lookahead_s=0, lead_time_s=600, restart_s=600.0,
                violation_s_per_instance_hour=0.5)
    up_default = next(r for r in schedule(MODEL, forecast, LOW, ScheduleConfig(**base)).reconfigurations
                      if r.direction == "up")
    up_shift = next(r for r in schedule(MODEL, forecast, LOW, ScheduleConfig(**base, shift_s=4 * 3600.0)).reconfigurations
                    if r.direction == "up")
    assert up_default.issue_at == IDX[20] - pd.Timedelta(minutes=10)
    assert up_shift.issue_at < IDX[16] and "earlier than" in up_shift.reason


def test_price_running_scales_an_oversized_running_configuration_down_when_it_pays():
    # The HIGH configuration runs; the forecast is LOW for the whole horizon. Without
    # price_running it is kept (it covers the first segment); with it the scale-down to LOW's
    # plan is issued now when the instance-hours saved (priced) beat the restart at the load now.
    from scheduler.schedule import restart_violation_s

    high, low = dict(plan(MODEL, HIGH).config), dict(plan(MODEL, LOW).config)
    flat = pd.Series(np.full(len(IDX), LOW), index=IDX)
    base = dict(stabilization_s=0, rate_resolution=0, lookahead_s=0, lead_time_s=600, restart_s=30.0)
    kept = schedule(MODEL, flat, LOW, ScheduleConfig(**base), current_config=high)
    assert [r.direction for r in kept.reconfigurations] == ["keep"]
    priced = schedule(MODEL, flat, LOW, ScheduleConfig(**base, price_running=True), current_config=high)
    first = priced.reconfigurations[0]
    assert first.direction == "initial" and dict(first.config) == low and first.issue_at == priced.now
    assert any("scale-down now priced" in r for r in priced.reasons)
    # the same at a price below break-even: the restart costs more than the hours saved are worth
    saved_ih = (plan(MODEL, HIGH).instances - plan(MODEL, LOW).instances) * (
        (IDX[-1] - priced.now).total_seconds() - 600) / 3600.0
    cost = restart_violation_s(30.0, predict(MODEL, low, 1.0).max_rate, LOW)
    cheap = schedule(MODEL, flat, LOW, ScheduleConfig(**base, price_running=True,
                                                      violation_s_per_instance_hour=0.5 * cost / saved_ih),
                     current_config=high)
    assert [r.direction for r in cheap.reconfigurations] == ["keep"]


def test_price_running_counts_the_way_back_up():
    # LOW for 4 steps (2 h), then HIGH: scaling down now needs a scale-up back at step 4 that
    # keeping the HIGH configuration would not. At a price that pays for the scale-down's restart
    # alone but not for both, the running configuration is kept.
    from scheduler.schedule import restart_violation_s

    high, low = dict(plan(MODEL, HIGH).config), dict(plan(MODEL, LOW).config)
    values = np.full(len(IDX), HIGH)
    values[:4] = LOW
    dip = pd.Series(values, index=IDX)
    base = dict(stabilization_s=0, rate_resolution=0, lookahead_s=0, lead_time_s=600, restart_s=30.0,
                price_running=True)
    probe = schedule(MODEL, dip, LOW, ScheduleConfig(**base), current_config=high)
    hours = ((IDX[3] - probe.now).total_seconds() - 600) / 3600.0
    saved_ih = (plan(MODEL, HIGH).instances - plan(MODEL, LOW).instances) * hours
    down = restart_violation_s(30.0, predict(MODEL, low, 1.0).max_rate, LOW)
    back = restart_violation_s(30.0, predict(MODEL, high, 1.0).max_rate, HIGH)
    between = (down + 0.5 * back) / saved_ih  # pays for one restart, not for two
    kept = schedule(MODEL, dip, LOW, ScheduleConfig(**base, violation_s_per_instance_hour=between),
                    current_config=high)
    assert kept.reconfigurations[0].direction == "keep"
    taken = schedule(MODEL, dip, LOW, ScheduleConfig(**base, violation_s_per_instance_hour=1.5 * (down + back) / saved_ih),
                     current_config=high)
    assert taken.reconfigurations[0].direction == "initial" and dict(taken.reconfigurations[0].config) == low


# ----------------------------------------------------------------------------- the priced solver


def _priced(**kw) -> ScheduleConfig:
    base = dict(stabilization_s=0, rate_resolution=0, lookahead_s=0, lead_time_s=600, restart_s=30.0,
                solver="priced")
    return ScheduleConfig(**{**base, **kw})


def test_priced_solver_weighs_a_dip_like_the_rules():
    # a scale-down and the way back up are made exactly when the instance-hours saved, priced,
    # pay for both restarts. Either configuration may run from a change's issue on, so the
    # scale-down is issued once the load is LOW (in force 30 min into the 1 h dip) and the
    # scale-up lead_time_s before the load returns: both restarts at the LOW load.
    from scheduler.schedule import restart_violation_s

    high, low = plan(MODEL, HIGH), plan(MODEL, LOW)
    saved_ih = (high.instances - low.instances) * 0.5
    cost = (restart_violation_s(30.0, predict(MODEL, dict(low.config), 1.0).max_rate, LOW)
            + restart_violation_s(30.0, predict(MODEL, dict(high.config), 1.0).max_rate, LOW))
    breakeven = cost / saved_ih
    below = schedule(MODEL, _dip(1), HIGH, _priced(violation_s_per_instance_hour=0.95 * breakeven))
    above = schedule(MODEL, _dip(1), HIGH, _priced(violation_s_per_instance_hour=1.05 * breakeven))
    assert _directions(below) == [] and _directions(above) == ["down", "up"]
    down = [r for r in above.reconfigurations if r.direction == "down"][0]
    assert "priced schedule" in down.reason
    assert f"{high.instances - low.instances:g} instance(s) fewer for 0.5 h" in down.reason
    for s in (below, above):
        assert not replay(MODEL, s, _dip(1)).violation.any()


def _path_cost(cfgs, forecast, step_s, cfg, start_cfg):
    """Brute-force cost of a path of configurations in force per step (test oracle)."""
    from scheduler.schedule import restart_violation_s

    total, prev = 0.0, start_cfg
    for i, c in enumerate(cfgs):
        n = sum(v for k, v in c.items() if not MODEL.model.operator(k).is_source)
        total += n * step_s / 3600.0 * cfg.violation_s_per_instance_hour
        if prev is not None and c != prev:
            load = forecast.iloc[i - 1] if i >= 1 else LOW  # issued lead_time_s (one step) earlier
            total += restart_violation_s(cfg.restart_s, predict(MODEL, c, 1.0).max_rate, load)
        prev = c
    return total


def test_priced_solver_is_the_cheapest_timeline_by_exhaustive_search():
    import itertools

    idx = pd.date_range("2026-01-01", periods=7, freq="15min")
    rates = [LOW, 0.6 * HIGH, HIGH, 0.5 * HIGH, LOW, 0.8 * HIGH, LOW]
    forecast = pd.Series(rates, index=idx)
    cfg = _priced(lead_time_s=900, restart_s=120.0, violation_s_per_instance_hour=400.0)
    start = dict(plan(MODEL, LOW).config)
    s = schedule(MODEL, forecast, LOW, cfg, now=idx[0] - pd.Timedelta(minutes=15), current_config=start)
    got = [s.config_at(ts) for ts in idx]
    options = [dict(plan(MODEL, r).config) for r in sorted(set(rates))]
    from scheduler.schedule import meets_targets

    best = math_inf = float("inf")
    for path in itertools.product(range(len(options)), repeat=len(idx) - 1):
        cfgs = [start] + [options[k] for k in path]  # step 0 is before now + lead: the running one
        if not all(meets_targets(MODEL, c, r, cfg.plan) for c, r in zip(cfgs[1:], rates[1:])):
            continue
        best = min(best, _path_cost(cfgs, forecast, 900.0, cfg, start))
    assert best < math_inf
    assert _path_cost(got, forecast, 900.0, cfg, start) == pytest.approx(best, rel=1e-9)


def test_priced_solver_keeps_the_daily_budget_and_covers_the_forecast():
    values = np.where(np.arange(len(IDX)) % 6 < 3, HIGH, LOW)  # a peak every 3 h
    forecast = pd.Series(values, index=IDX)
    free = schedule(MODEL, forecast, LOW, _priced(max_reconfigurations_per_day=100, violation_s_per_instance_hour=1e4))
    capped = schedule(MODEL, forecast, LOW, _priced(max_reconfigurations_per_day=5, violation_s_per_instance_hour=1e4))
    assert free.per_day() > 5
    assert capped.per_day() <= 5
    assert any("to keep within 5 changes" in r for r in capped.reasons)
    for s in (free, capped):
        assert (s.steps["capacity"] >= s.steps["forecast"] * (1 - 1e-9)).all()


def test_priced_solver_issues_a_scale_up_at_the_lowest_load_when_holding_is_cheap():
    # LOW, then a shoulder, then HIGH. The scale-up's restart drains at mu - load, so it is
    # cheapest at LOW; at a near-zero price per instance-hour it goes in before the shoulder,
    # at 60 s per instance-hour holding 20 more instances for 2 h costs more than it saves and it
    # goes in lead_time_s before HIGH.
    low = plan(MODEL, LOW)
    mu = predict(MODEL, dict(low.config), 1.0).max_rate
    values = np.full(len(IDX), LOW)
    values[10:14] = 0.95 * 0.7 * mu
    values[14:20] = HIGH
    forecast = pd.Series(values, index=IDX)
    ups = {}
    for price in (0.01, 60.0):
        s = schedule(MODEL, forecast, LOW, _priced(restart_s=300.0, violation_s_per_instance_hour=price),
                     current_config=dict(low.config))
        ups[price] = [r for r in s.reconfigurations if r.direction == "up"]
        assert len(ups[price]) == 1
    assert ups[0.01][0].segment_start <= IDX[10] and "forecast load of 2,000.0" in ups[0.01][0].reason
    assert ups[60.0][0].segment_start == IDX[14]


def test_unknown_solver_is_a_typed_error():
    with pytest.raises(SchedulerError, match="solver"):
        ScheduleConfig(solver="greedy").check()
