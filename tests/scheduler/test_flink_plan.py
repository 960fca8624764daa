"""The job graph reader and the topology of Flink SQL jobs, on payloads recorded from the live cluster.

``fixtures/flink_sql/<query>_job.json`` / ``<query>_plan.json`` are the verbatim answers of
``GET /jobs/<id>`` and ``GET /jobs/<id>/plan`` for the Nexmark-style SQL jobs of
``experiments/flink/sql.py`` (Flink 2.2.1, the managed local cluster, 20 000 rows/s per datagen
table, parallelism 2, source parallelism 1, operator chaining on); ``q5_rescaled_*`` were recorded
after ``LiveFlinkActuator.apply({"GlobalWindowAggregate": 3})`` on the running q5 job.
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from modeler.modelfile import parse_model
from scheduler.flink import (FlinkMetricsConfig, FlinkMetricsSource, job_graph, operator_name,
                             operator_names, topology)
from scheduler.interfaces import MetricsUnavailable

FIXTURES = Path(__file__).parent / "fixtures" / "flink_sql"


def _load(query: str) -> tuple[dict, dict]:
    return (json.loads((FIXTURES / f"{query}_job.json").read_text()),
            json.loads((FIXTURES / f"{query}_plan.json").read_text()))


# (operator, parallelism, max parallelism, role), in the payload's order; edges with grouping
EXPECTED = {
    "q1": ([("bid", 1, 128, "source"), ("Calc", 2, 128, "operator")],
           [("bid", "Calc", "shuffle")]),
    "q2": ([("bid", 1, 128, "source"), ("Calc", 2, 128, "operator")],
           [("bid", "Calc", "shuffle")]),
    "q5": ([("bid", 1, 128, "source"), ("Calc", 2, 128, "operator"),
            ("GlobalWindowAggregate", 2, 128, "operator"), ("GlobalWindowAggregate-2", 1, 1, "operator")],
           [("bid", "Calc", "shuffle"), ("Calc", "GlobalWindowAggregate", "key"),
            ("GlobalWindowAggregate", "GlobalWindowAggregate-2", "shuffle")]),
    "q5_rescaled": ([("bid", 1, 128, "source"), ("Calc", 2, 128, "operator"),
                     ("GlobalWindowAggregate", 3, 128, "operator"),
                     ("GlobalWindowAggregate-2", 1, 1, "operator")],
                    [("bid", "Calc", "shuffle"), ("Calc", "GlobalWindowAggregate", "key"),
                     ("GlobalWindowAggregate", "GlobalWindowAggregate-2", "shuffle")]),
    "q8": ([("person", 1, 128, "source"), ("auction", 1, 128, "source"), ("Calc", 2, 128, "operator"),
            ("GlobalWindowAggregate", 2, 128, "operator"), ("Calc-2", 2, 128, "operator"),
            ("GlobalWindowAggregate-2", 2, 128, "operator"), ("WindowJoin", 2, 128, "operator")],
           [("person", "Calc", "shuffle"), ("Calc", "GlobalWindowAggregate", "key"),
            ("auction", "Calc-2", "shuffle"), ("Calc-2", "GlobalWindowAggregate-2", "key"),
            ("GlobalWindowAggregate", "WindowJoin", "key"), ("GlobalWindowAggregate-2", "WindowJoin", "key")]),
}


@pytest.mark.parametrize("query", sorted(EXPECTED))
def test_every_recorded_sql_job_becomes_a_topology_the_model_file_accepts(query):
    job, plan = _load(query)
    topo = topology(job, plan)
    assert topo["augury"] == 1 and topo["job"] == f"augury-nexmark-{query.split('_')[0]}"
    operators, edges = EXPECTED[query]
    assert [(o["name"], o["parallelism"], o["max_parallelism"], o.get("role", "operator"))
            for o in topo["operators"]] == operators
    assert [(e["from"], e["to"], e["grouping"]) for e in topo["edges"]] == edges
    model = parse_model(topo, require_profiles=False)
    assert model.operator_names == tuple(o[0] for o in operators)
    assert {op.name for op in model.operators if op.is_source} == {o[0] for o in operators if o[3] == "source"}
    assert all(op.service_time_ms is None for op in model.operators)


def test_the_ship_strategies_are_flinks_own_names():
    graph = job_graph(*_load("q8"))
    assert sorted({e.ship_strategy for e in graph.edges}) == ["HASH", "REBALANCE"]
    assert graph.edges[0].field == "plan.nodes[2].inputs[0].ship_strategy"  # bid -> Calc
    q5 = job_graph(*_load("q5"))
    assert [e.ship_strategy for e in q5.edges] == ["REBALANCE", "HASH", "GLOBAL"]
    # the vertex names behind the operator names (chains; the planner's node ids vary per submission)
    assert [v.name.split(" -> ")[0] for v in q5.vertices][1:] == ["Calc[105]", "GlobalWindowAggregate[109]",
                                                                 "GlobalWindowAggregate[113]"]


def test_operator_names_drop_the_planner_ids_and_number_repeats():
    assert operator_name("Source: bid[104]") == "bid"
    assert operator_name("Calc[105] -> WatermarkAssigner[106] -> LocalWindowAggregate[107]") == "Calc"
    assert operator_name("q8_sink[93]: Writer") == "q8_sink: Writer"
    assert operator_name("Sink: Sink") == "Sink" and operator_name("Enrich") == "Enrich"
    assert operator_name("Source:  a  b ") == "a b"
    assert operator_names(["Calc[1]", "Calc[2]", "Calc-2", "Calc[9]"]) == ["Calc", "Calc-2", "Calc-2-2", "Calc-3"]
    long = operator_names(["x" * 300, "x" * 300])
    assert [len(n) for n in long] == [200, 200] and long[1].endswith("-2") and long[0] != long[1]


class _Payloads(BaseHTTPRequestHandler):
    routes: dict[str, object] = {}

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = self.routes.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body if body is not None else {"errors": ["Not found"]}).encode())

    def log_message(self, *args):
        pass


def test_the_live_source_names_operators_as_the_topology_does():
    # the recorded payloads served over real HTTP on loopback: FlinkMetricsSource.graph() reads them
    routes = {}
    for query in ("q1", "q5", "q8"):
        job, plan = _load(query)
        routes[f"/jobs/{job['jid']}"] = job
        routes[f"/jobs/{job['jid']}/plan"] = plan
    handler = type("Payloads", (_Payloads,), {"routes": routes})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        for query in ("q1", "q5", "q8"):
            job, plan = _load(query)
            graph = FlinkMetricsSource(url, job["jid"], FlinkMetricsConfig(retries=1)).graph()
            topo = topology(job, plan)
            assert list(graph.config()) == [o["name"] for o in topo["operators"]]
            assert graph.config() == {o["name"]: o["parallelism"] for o in topo["operators"]}
            assert graph.sources() == [o["name"] for o in topo["operators"] if o.get("role") == "source"]
    finally:
        server.shutdown()
        server.server_close()


def _broken(query, change):
    job, plan = copy.deepcopy(_load(query))
    change(job, plan)
    return job, plan


@pytest.mark.parametrize("change, field, value", [
    (lambda j, p: j.pop("vertices"), "vertices", None),
    (lambda j, p: j.pop("jid"), "jid", None),
    (lambda j, p: j["vertices"][1].update(parallelism="2"), "vertices[1].parallelism", "2"),
    (lambda j, p: j["vertices"][1].update(parallelism=0), "vertices[1].parallelism", 0),
    (lambda j, p: j["vertices"][3].update(maxParallelism=True), "vertices[3].maxParallelism", True),
    (lambda j, p: j["vertices"][0].update(name=""), "vertices[0].name", ""),
    (lambda j, p: j["vertices"][2].update({"start-time": "soon"}), "vertices[2].start-time", "soon"),
    (lambda j, p: j["vertices"].append(dict(j["vertices"][0])), "vertices[].id", None),
    (lambda j, p: p.pop("plan"), "plan", None),
    (lambda j, p: p["plan"].update(nodes={}), "plan.nodes", {}),
    (lambda j, p: p["plan"]["nodes"][2]["inputs"][0].update(ship_strategy=None),
     "plan.nodes[2].inputs[0].ship_strategy", None),
    (lambda j, p: p["plan"]["nodes"][2]["inputs"][0].update(id="feed"), "plan.nodes[2].inputs[0].id", "feed"),
    (lambda j, p: p["plan"]["nodes"][1].update(inputs="all"), "plan.nodes[1].inputs", "all"),
    (lambda j, p: p["plan"]["nodes"][0].update(id="ghost"), "plan.nodes[0].id", "ghost"),
])
def test_malformed_payloads_raise_typed_errors_naming_the_field(change, field, value):
    job, plan = _broken("q5", change)
    with pytest.raises(MetricsUnavailable) as err:
        job_graph(job, plan)
    assert err.value.field == field
    if value is not None:
        assert err.value.value == value
    assert field in str(err.value)


def test_an_unknown_ship_strategy_is_an_error_not_a_guess():
    job, plan = _broken("q5", lambda j, p: p["plan"]["nodes"][2]["inputs"][0].update(ship_strategy="CUSTOM"))
    graph = job_graph(job, plan)  # the live source still reads the job: metrics need no grouping
    with pytest.raises(MetricsUnavailable) as err:
        graph.topology()
    assert err.value.field == "plan.nodes[2].inputs[0].ship_strategy" and err.value.value == "CUSTOM"
    with pytest.raises(MetricsUnavailable):
        graph.to_networkx()


def test_a_forward_edge_between_different_parallelisms_is_refused():
    def forward(j, p):
        p["plan"]["nodes"][1]["inputs"][0]["ship_strategy"] = "FORWARD"  # bid (1) -> Calc (2)
    with pytest.raises(MetricsUnavailable) as err:
        topology(*_broken("q5", forward))
    assert err.value.field == "plan.nodes[1].inputs[0].ship_strategy" and err.value.value == "FORWARD"

    def equal(j, p):
        forward(j, p)
        j["vertices"][0]["parallelism"] = 2
    topo = topology(*_broken("q5", equal))
    assert topo["edges"][0]["grouping"] == "forward"
    parse_model(topo, require_profiles=False)


def test_the_max_parallelism_falls_back_to_the_jobs_and_may_be_absent():
    def strip(j, p):
        for v in j["vertices"]:
            v.pop("maxParallelism")
    topo = topology(*_broken("q1", strip))
    assert [o["max_parallelism"] for o in topo["operators"]] == [128, 128]

    def strip_all(j, p):
        strip(j, p)
        j.pop("maxParallelism")
    topo = topology(*_broken("q1", strip_all))
    assert all("max_parallelism" not in o for o in topo["operators"])
    assert parse_model(topo, require_profiles=False).operator("Calc").max_parallelism == 128


def test_a_source_without_busy_time_is_observed_with_its_records_and_no_service_time():
    # what FlinkMetricsSource writes for the SQL datagen source (busy time NaN): no time rows
    from scheduler.interfaces import MetricsBatch
    from scheduler.observe import job_windows

    stamp = "2026-11-29T15:00:00+00:00"
    rows = [(stamp, 5.0, "q1", "bid", 0, "records_in", 100_000.0, None),
            (stamp, 5.0, "q1", "bid", 0, "records_out", 100_000.0, "Calc"),
            (stamp, 5.0, "q1", "bid", 0, "parallelism", 1.0, None)]
    for i in range(2):
        rows += [(stamp, 5.0, "q1", "Calc", i, "records_in", 50_000.0, None),
                 (stamp, 5.0, "q1", "Calc", i, "busy_ms", 250.0, None),
                 (stamp, 5.0, "q1", "Calc", i, "idle_ms", 4750.0, None),
                 (stamp, 5.0, "q1", "Calc", i, "backpressured_ms", 0.0, None)]
    batch = MetricsBatch(as_of_s=0.0, rows=tuple(rows), config={"bid": 1, "Calc": 2}, window_s=5.0)
    (window,) = job_windows(batch, sources=["bid"])
    assert window.operators["bid"].processed_rate == 20_000.0
    assert window.operators["bid"].service_time_ms is None and window.operators["bid"].busy_max == 0.0
    assert window.operators["Calc"].service_time_ms == pytest.approx(0.005)
    assert not window.restarting
    # an operator that is not a source still needs its busy time
    from scheduler.observe import MalformedMetrics
    with pytest.raises(MalformedMetrics) as err:
        job_windows(MetricsBatch(as_of_s=0.0, rows=tuple(r for r in rows if not (r[3] == "Calc" and r[4] == 1
                                                                                  and r[5] == "busy_ms")),
                                 config={"bid": 1, "Calc": 2}, window_s=5.0), sources=["bid"])
    assert err.value.field == "Calc[1].busy_ms"


def test_flinks_largest_max_parallelism_is_cut_to_the_model_files_limit():
    def huge(j, p):
        j["vertices"][1]["maxParallelism"] = 32768
    topo = topology(*_broken("q1", huge))
    assert topo["operators"][1]["max_parallelism"] == 10_000
    parse_model(topo, require_profiles=False)
