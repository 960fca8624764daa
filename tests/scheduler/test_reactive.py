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


# ---------------------------------------------------------------- hosts (issue 26), constructed windows

def _host_window(start_s, ops, graph_sources=("src",)):
    """A JobWindow from ``{operator: [(host, busy, backpressure, idle, service_ms), ...]}``."""
    from scheduler.observe import InstanceWindow, JobWindow, OperatorWindow

    operators = {}
    for name, insts in ops.items():
        iws = tuple(InstanceWindow(instance=k, processed_rate=(busy * 1000.0 / svc) if svc else 100.0,
                                   busy_fraction=busy, backpressure_fraction=bp, idle_fraction=idle,
                                   queue_len=0.0, service_time_ms=svc, host=host)
                    for k, (host, busy, bp, idle, svc) in enumerate(insts))
        operators[name] = OperatorWindow(
            operator=name, parallelism=len(iws), is_source=name in graph_sources,
            processed_rate=sum(i.processed_rate for i in iws), arrival_rate=sum(i.processed_rate for i in iws),
            busy_mean=sum(i.busy_fraction for i in iws) / len(iws), busy_max=max(i.busy_fraction for i in iws),
            backpressure_max=max(i.backpressure_fraction for i in iws),
            backpressure_mean=sum(i.backpressure_fraction for i in iws) / len(iws), queue_len_total=0.0,
            source_lag=0.0, output_rates={}, instances=iws)
    return JobWindow(start_s=start_s, window_s=10.0, job="j", config={k: len(v) for k, v in ops.items()},
                     operators=operators)


def _host_graph():
    import networkx as nx

    return nx.DiGraph([("src", "a"), ("a", "b")])


def _normal(a0=1.0, b0=0.5, a_bp=0.0, b_idle=0.5, b_busy=0.4, hosts=("host-0", "host-1")):
    """src[0] and a[0], b[0] on hosts[0]; a[1], b[1] on hosts[1]; a[0]'s service a0 ms, b[0]'s b0."""
    h0, h1 = hosts
    return {"src": [(h0, 0.0, 0.0, 1.0, None)],
            "a": [(h0, 0.5 * a0, a_bp, 0.5 - a_bp / 2, a0), (h1, 0.5, 0.0, 0.5, 1.0)],
            "b": [(h0, b_busy * b0 / 0.5, 0.0, b_idle, b0), (h1, b_busy, 0.0, b_idle, 0.5)]}


def _feed_hosts(windows, config=ReactiveConfig()):
    from scheduler.reactive import HostDetectors, diagnose_hosts

    det, history, out = HostDetectors(config), [], []
    for w in windows:
        history.append(w)
        syms = det.update(history, _host_graph())
        out.append({d.host: d for d in diagnose_hosts(w, syms, config)})
    return out


def test_a_slow_host_is_every_instance_on_it_slow_while_its_operators_peers_are_normal():
    from scheduler.reactive import resolve_hosts

    before = [_host_window(10.0 * k, _normal()) for k in range(4)]
    slow = [_host_window(40.0 + 10.0 * k, _normal(a0=5.0, b0=2.5)) for k in range(2)]
    diags = _feed_hosts(before + slow)
    assert not any(d.causes for d in diags[4].values())  # one window is not enough (hysteresis)
    host0 = diags[-1]["host-0"]
    assert host0.causes == ("slow_host",) and set(host0.instances) == {"a[0]", "b[0]"}
    assert not diags[-1]["host-1"].causes
    (move,) = resolve_hosts(tuple(diags[-1].values()))
    assert (move.kind, move.operators, move.diagnosis) == ("move_off_host", ("host-0",), "slow_host")
    assert any("5.00x" in r for r in move.reasons)


def test_one_slow_instance_is_not_a_slow_host():
    # a[0] slow, b[0] on the same host normal: the least slowed instance there is normal
    windows = [_host_window(10.0 * k, _normal(a0=1.0 if k < 4 else 5.0)) for k in range(7)]
    assert not any(d.causes for d in _feed_hosts(windows)[-1].values())


def test_a_host_needs_host_min_instances_measured_instances_to_be_called_slow():
    windows = [_host_window(10.0 * k, _normal(a0=1.0 if k < 4 else 5.0, b0=0.5 if k < 4 else 2.5))
               for k in range(7)]
    one = ReactiveConfig(host_min_instances=3)  # host-0 has two measured instances
    assert not any(d.causes for d in _feed_hosts(windows, one)[-1].values())


def test_a_slow_link_is_a_blocked_sender_with_idle_receivers():
    windows = [_host_window(10.0 * k, _normal(a_bp=0.0 if k < 3 else 0.9, b_idle=0.9, b_busy=0.05))
               for k in range(6)]
    d = _feed_hosts(windows)[-1]
    assert d["host-0"].causes == ("slow_link",) and d["host-0"].instances == ("a[0]",)
    assert not d["host-1"].causes


def test_back_pressure_from_a_busy_receiver_is_not_a_slow_link():
    # the same blocked sender, but its receivers are saturated: ordinary back pressure
    windows = [_host_window(10.0 * k, _normal(a_bp=0.0 if k < 3 else 0.9, b_idle=0.0, b_busy=0.95))
               for k in range(6)]
    assert not any(d.causes for d in _feed_hosts(windows)[-1].values())


def test_a_lost_host_is_all_its_instances_vanishing_while_others_report():
    from scheduler.reactive import HostDetectors, diagnose_hosts, lost_share, placement, resolve_hosts

    where = placement(_host_window(0.0, _normal()))
    assert where[("a", 1)] == "host-1"
    gone = (("a", 1), ("b", 1))
    det = HostDetectors()
    first = {d.host: d for d in diagnose_hosts(None, det.update_vanished(gone, where))}
    assert not first["host-1"].causes  # one partial read is not enough
    second = {d.host: d for d in diagnose_hosts(None, det.update_vanished(gone, where))}
    assert second["host-1"].causes == ("lost_host",) and not second["host-0"].causes
    assert resolve_hosts(tuple(second.values()))[0].operators == ("host-1",)
    # one of a host's instances gone is not the host; everything gone is not one host either
    assert lost_share((("a", 1),), where)["host-1"][0] == 0.5
    assert all(v == 0.0 for v, _ in lost_share(tuple(where), where).values())


def test_windows_without_hosts_have_no_host_symptoms():
    from scheduler.reactive import HostDetectors

    windows = [_host_window(10.0 * k, _normal(hosts=(None, None))) for k in range(4)]
    det = HostDetectors()
    assert all(det.update(windows[:k + 1], _host_graph()) == () for k in range(4))


# ---------------------------------------------------------------- the hot instance's received share

def _queue_window(start_s, rates, queues):
    """One keyed operator ``b`` with instances processing ``rates`` (tuples/s) at mean queue lengths
    ``queues`` over a 10 s window."""
    from scheduler.observe import InstanceWindow, JobWindow, OperatorWindow

    iws = tuple(InstanceWindow(instance=k, processed_rate=r, busy_fraction=0.99 if k == 0 else 0.3,
                               backpressure_fraction=0.0, idle_fraction=0.01 if k == 0 else 0.7,
                               queue_len=q, service_time_ms=1.0)
                for k, (r, q) in enumerate(zip(rates, queues)))
    b = OperatorWindow(operator="b", parallelism=len(iws), is_source=False, processed_rate=sum(rates),
                       arrival_rate=sum(rates), busy_mean=0.5, busy_max=0.99, backpressure_max=0.0,
                       backpressure_mean=0.0, queue_len_total=sum(queues), source_lag=0.0, output_rates={},
                       instances=iws)
    return JobWindow(start_s=start_s, window_s=10.0, job="j", config={"b": len(iws)}, operators={"b": b})


def test_a_saturated_instance_receives_what_it_processes_plus_its_queue_growth():
    from scheduler.reactive import arrival_share

    # instance 0 processes 1,000/s (saturated) while its queue grows by 5,000 in 10 s: it receives
    # 1,500/s; the other two receive what they process (flat queues): 1,500 / (1,500 + 1,000) = 0.6
    prev = _queue_window(0.0, [1000.0, 500.0, 500.0], [1000.0, 2.0, 2.0])
    now = _queue_window(10.0, [1000.0, 500.0, 500.0], [6000.0, 2.0, 2.0])
    share, measured = arrival_share(now, [prev], "b", 0)
    assert measured and share == pytest.approx(0.6)
    # the processed share (0.5) is all there is without an earlier window of the same configuration
    assert arrival_share(now, [], "b", 0) == (pytest.approx(0.5), False)
    other = _queue_window(0.0, [1000.0, 500.0], [1000.0, 2.0])
    assert arrival_share(now, [other], "b", 0) == (pytest.approx(0.5), False)
    # under credit-based flow control the queue is full and flat: the processed share is the received one
    flat = _queue_window(0.0, [1000.0, 500.0, 500.0], [6000.0, 2.0, 2.0])
    assert arrival_share(now, [flat], "b", 0) == (pytest.approx(0.5), True)
