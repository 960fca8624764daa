import pytest

from modeler.keys import instance_of_key_group
from modeler.modelfile import parse_model_text, to_graph
from scheduler.observe import job_windows
from scheduler.reactive import (Detectors, Hysteresis, ReactiveConfig, diagnose, key_group_range, resolve)
from tests.scheduler.synth import FluidJob, model_text


def test_hysteresis_has_separate_enter_and_exit():
    h = Hysteresis(enter=0.1, exit=0.02, enter_n=2, exit_n=2)
    assert [h.update(v) for v in (0.2, 0.05, 0.2, 0.2, 0.05, 0.05, 0.01, 0.01)] == \
        [False, False, False, True, True, True, True, False]


def _run(job, seconds, model=None):
    model = model or parse_model_text(model_text(job.service_ms, job.config))
    det = Detectors(ReactiveConfig())
    history = []
    symptoms = ()
    job.advance(seconds)
    for w in job_windows(job.read(), sources=["source"]):
        history.append(w)
        symptoms = det.update(history)
    return model, history, diagnose(history[-1], symptoms, to_graph(model))


def _causes(diags):
    return {d.operator: d.causes for d in diags}


def test_under_provisioned_operators_are_sized_together_from_true_rates():
    # a saturates at 500/s; b (1.5 ms, p=1) could take 667/s: both need more at 1500/s offered
    job = FluidJob(service_ms={"a": 2.0, "b": 1.5}, config={"a": 1, "b": 1}, rate=1500.0)
    model, history, diags = _run(job, 60)
    assert "under_provisioned" in _causes(diags)["a"]
    props = resolve(history[-1], diags, model, [], ReactiveConfig(max_scale_factor=10))
    scale = [p for p in props if p.kind == "scale"]
    assert len(scale) == 1
    cfg = scale[0].config
    # DS2: (1500 + backlog/300) / (true rate * 0.7)
    backlog = history[-1].backlog
    need = (1500 + backlog / 300.0)
    assert cfg["a"] == -(-need // (500 * 0.7))
    assert cfg["b"] == -(-need // (1000 / 1.5 * 0.7))
    assert set(scale[0].operators) == {"a", "b"}


def test_per_step_cap():
    job = FluidJob(service_ms={"a": 10.0}, config={"a": 1}, rate=2000.0)
    model, history, diags = _run(job, 60)
    props = resolve(history[-1], diags, model, [], ReactiveConfig(max_scale_factor=4))
    assert [p.config["a"] for p in props if p.kind == "scale"] == [4]


def test_slow_instance_is_not_under_provisioning():
    job = FluidJob(service_ms={"a": 1.0}, config={"a": 4}, rate=1500.0, slow={("a", 2): 5.0})
    model, history, diags = _run(job, 60)
    d = {x.operator: x for x in diags}["a"]
    assert d.causes == ("slow_instance",) and d.instance == 2
    assert d.scores["slow_instance"] > d.scores["under_provisioned"]
    props = resolve(history[-1], diags, model, [])
    assert [(p.kind, p.instance) for p in props] == [("restart_instance", 2)]



def _feed(job, model, det, history):
    symptoms = ()
    for w in job_windows(job.read(), sources=["source"]):
        if history and w.end_s <= history[-1].end_s:
            continue
        history.append(w)
        symptoms = det.update(history)
    return diagnose(history[-1], symptoms, to_graph(model))


def test_the_only_instance_turning_slow_is_restarted_not_scaled():
    # a has one instance, so no peer to compare with: its host turns 3x slower after 60 s, at
    # 600/s it then falls behind (back pressure, growing backlog), which alone reads as under-
    # provisioning; its service time against its own earlier windows says slow instance.
    job = FluidJob(service_ms={"a": 1.0}, config={"a": 1}, rate=600.0)
    model = parse_model_text(model_text(job.service_ms, job.config))
    det, history = Detectors(ReactiveConfig()), []
    job.advance(60)
    _feed(job, model, det, history)
    job.slow[("a", 0)] = 3.0
    job.advance(30)
    diags = _feed(job, model, det, history)
    d = {x.operator: x for x in diags}["a"]
    assert "slow_instance" in d.causes and d.instance == 0
    assert any("its own in the earlier windows" in e for e in d.evidence)
    props = resolve(history[-1], diags, model, [])
    assert [(p.kind, p.instance) for p in props] == [("restart_instance", 0)]  # and no scale of a


def test_a_model_wrong_from_the_start_is_not_a_slow_instance():
    # the job's a takes 3 ms from the start; the model says 1 ms: no step in its own service time
    job = FluidJob(service_ms={"a": 3.0}, config={"a": 1}, rate=600.0)
    model = parse_model_text(model_text({"a": 1.0}, job.config))
    det, history = Detectors(ReactiveConfig()), []
    job.advance(90)
    diags = _feed(job, model, det, history)
    d = {x.operator: x for x in diags}["a"]
    assert "slow_instance" not in d.causes and "under_provisioned" in d.causes
    assert [p.kind for p in resolve(history[-1], diags, model, [])] == ["scale"]

def test_data_skew_is_reported_with_the_hot_instances_key_groups():
    job = FluidJob(service_ms={"a": 1.0}, config={"a": 4}, rate=1500.0, hot={"a": 0.6})
    model, history, diags = _run(job, 60)
    d = {x.operator: x for x in diags}["a"]
    assert "data_skew" in d.causes and "slow_instance" not in d.causes and d.instance == 0
    report = [p for p in resolve(history[-1], diags, model, []) if p.kind == "report_skew"][0]
    lo, hi = report.detail["key_groups"]
    assert report.detail["share"] == pytest.approx(0.6)
    assert (lo, hi) == (0, 15)



def test_skew_report_says_whether_the_hot_key_fits_one_instance():
    from scheduler.reactive import skew_report

    model = parse_model_text(model_text({"a": 1.0}, {"a": 4}))  # shuffle input: the rest spreads as 1/p
    # instance 0 has 55 % of 4,000/s at p = 4: hot key (0.55 - 0.25) / 0.75 = 40 % = 1,600/s;
    # one instance takes 1,000/s (700/s at the 0.7 target): scaling cannot fix it
    r = skew_report(model, "a", 0, 4, 0.55, demand_rate=4000.0, instance_rate=1000.0, utilization_target=0.7,
                    instance_busy=0.9)
    assert r["hot_key"]["rate"] == pytest.approx(1600.0) and r["hot_key"]["fits"] is False
    assert r["hot_key"]["rest"] == pytest.approx(2400.0)
    assert "alone carries ~1,600/s of a's 4,000/s, one instance takes 1,000/s (700/s at the 70% target): " \
           "scaling cannot fix it" in r["suggestion"]
    # a smaller hot key fits: then a parallelism that isolates it can help
    r = skew_report(model, "a", 0, 4, 0.34, demand_rate=2000.0, instance_rate=1000.0, instance_busy=0.6)
    assert r["hot_key"]["rate"] == pytest.approx(240.0) and r["hot_key"]["fits"] is True
    assert "it fits one instance" in r["suggestion"]
    # a saturated hot instance: its share is a lower bound; "fits" cannot be claimed, "too big" can
    r = skew_report(model, "a", 0, 4, 0.34, demand_rate=2000.0, instance_rate=1000.0, instance_busy=0.99)
    assert r["hot_key"]["fits"] is None and "at least ~240/s" in r["suggestion"]
    r = skew_report(model, "a", 0, 4, 0.55, demand_rate=4000.0, instance_rate=1000.0, instance_busy=0.99)
    assert r["hot_key"]["fits"] is False
    # without the rates: no verdict
    assert skew_report(model, "a", 0, 4, 0.55)["hot_key"] is None

def _keyed_model(max_parallelism=8):
    from modeler.modelfile import parse_model

    return parse_model({"augury": 1, "job": "k", "operators": [
        {"name": "source", "role": "source"},
        {"name": "a", "service_time_ms": 1.0, "parallelism": 2, "max_parallelism": max_parallelism}],
        "edges": [{"from": "source", "to": "a", "grouping": "key",
                   "keys": {"distribution": "uniform"}}]})


def test_hot_key_placement_isolates_a_fitting_hot_key_by_the_key_group_ranges():
    from scheduler.reactive import hot_key_placement

    model = _keyed_model()  # 8 key groups of 1/8 each; instance = group * p // 8
    # a hot key of 400/s in key group 5 and 1,400/s of other keys; one instance takes 1,000/s,
    # 700/s at the target: its instance may hold at most 300/s of others, under two groups (350/s)
    got = hot_key_placement(model, "a", [5], 400.0, 1400.0, 1000.0, 0.7)
    # p = 4..6 put group 5 with a neighbour; at p = 7 it is alone (groups 0 and 1 share instance 0)
    assert got["parallelism"] == 7 and got["fits"] and got["hot_instances"] == [4]
    assert got["hot_load"] == pytest.approx(400.0 + 175.0) and got["max_other_load"] == pytest.approx(350.0)
    # key group 0 shares instance 0 with group 1 at every p < 8: only p = 8 isolates it
    assert hot_key_placement(model, "a", [0], 400.0, 1400.0, 1000.0, 0.7)["parallelism"] == 8
    # unknown which of two groups: the worst of them is sized for
    assert hot_key_placement(model, "a", [0, 5], 400.0, 1400.0, 1000.0, 0.7)["parallelism"] == 8
    # sized for the total rate alone it would be ceil(1,800 / 700) = 3, which leaves group 5's
    # instance at 400 + 3 x 175 = 925/s


def test_hot_key_placement_sizes_the_rest_when_the_hot_key_does_not_fit():
    from scheduler.reactive import hot_key_placement

    model = _keyed_model()
    # 900/s on one key > 700/s: no parallelism fits it; the other 1,400/s need instances of at
    # most 700/s besides the hot one: at p = 2 instance 0 holds groups 0-3 (700/s)
    got = hot_key_placement(model, "a", [5], 900.0, 1400.0, 1000.0, 0.7)
    assert got["parallelism"] == 2 and got["fits"] is False and got["max_other_load"] == pytest.approx(700.0)
    got = hot_key_placement(model, "a", [5], 900.0, 2000.0, 1000.0, 0.7)
    assert got["parallelism"] == 4 and got["max_other_load"] == pytest.approx(500.0)
    assert hot_key_placement(model, "a", [], 900.0, 2000.0, 1000.0, 0.7) is None


def test_a_fitting_hot_key_gets_the_parallelism_that_isolates_it_not_a_total_rate_scale_up():
    from scheduler.reactive import hot_key_placement

    # a at p = 2 (64 key groups: instance 0 holds 0-31), 1,200/s, 70 % of it on instance 0: the
    # hot key ~480/s fits one instance (700/s at the target) but not with half the other keys
    job = FluidJob(service_ms={"a": 1.0}, config={"a": 2}, rate=1200.0, hot={"a": 0.7})
    model, history, diags = _run(job, 60)
    assert "data_skew" in _causes(diags)["a"]
    proposals = resolve(history[-1], diags, model, [])
    scale = [p for p in proposals if p.kind == "scale"]
    assert len(scale) == 1 and scale[0].diagnosis == "data_skew" and scale[0].operators == ("a",)
    report = [p for p in proposals if p.kind == "report_skew"][0].detail
    hk = report["hot_key"]
    assert hk["fits"] and hk["rate"] == pytest.approx(480.0, rel=0.02)
    groups = list(range(report["key_groups"][0], report["key_groups"][1] + 1))
    want = hot_key_placement(model, "a", groups, hk["rate"], hk["rest"], 1000.0, 0.7)["parallelism"]
    assert scale[0].config["a"] == want == 4  # 16 groups: 480 + 180 = 660/s; p = 3 leaves 22 (727/s)
    assert "fits one instance" in scale[0].reasons[0] and "parallelism 2 -> 4" in scale[0].reasons[0]


@pytest.mark.parametrize("p,maxp", [(3, 128), (4, 64), (7, 10)])
def test_key_group_ranges_match_flink(p, maxp):
    for i in range(p):
        lo, hi = key_group_range(i, p, maxp)
        assert all(int(instance_of_key_group(g, p, maxp)) == i for g in range(lo, hi + 1))
        if lo > 0:
            assert int(instance_of_key_group(lo - 1, p, maxp)) == i - 1


def test_over_provisioned_scale_down_by_peak_rate_not_percent():
    job = FluidJob(service_ms={"a": 1.0}, config={"a": 10}, rate=700.0)
    model, history, diags = _run(job, 60)
    assert "over_provisioned" in _causes(diags)["a"]
    rates = [{"source": 700.0}, {"source": 1400.0}, {"source": 700.0}]
    props = [p for p in resolve(history[-1], diags, model, rates) if p.kind == "scale"]
    assert props[0].config["a"] == 2  # ceil(1400 / (1000 * 0.7)), not a fixed fraction of 10


def test_several_causes_on_several_operators():
    job = FluidJob(service_ms={"a": 1.0, "b": 1.0}, config={"a": 4, "b": 4}, rate=1500.0,
                   slow={("a", 1): 6.0}, hot={"b": 0.7})
    model, history, diags = _run(job, 60)
    c = _causes(diags)
    assert "slow_instance" in c["a"] and "data_skew" in c["b"]
