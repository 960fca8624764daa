"""Flink helpers that need no cluster: configuration, socket decoding, metric windows."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from experiments.flink.cluster import (ClusterConfig, _decode_addr, _listening, flink_config,
                                       is_loopback)
from experiments.flink.jobs import SleepPipelineSpec
from scheduler.flink import (COUNTERS, Edge, FlinkMetricsConfig, FlinkMetricsSource,
                             JobGraph, Vertex, operator_name)
from scheduler.interfaces import MetricsUnavailable


def test_config_binds_every_address_to_loopback_and_keeps_the_wheel_jvm_options():
    original = {"env": {"java": {"opts": {"all": "--add-opens=java.base/java.lang=ALL-UNNAMED"}}},
                "jobmanager": {"bind-host": "localhost", "rpc": {"address": "localhost"}},
                "rest": {"address": "localhost"}}
    flat = flink_config(ClusterConfig(rest_port=18123, prometheus_port=19300), original)
    assert flat["env.java.opts.all"] == "--add-opens=java.base/java.lang=ALL-UNNAMED"
    for key in ("jobmanager.bind-host", "jobmanager.rpc.address", "taskmanager.bind-host",
                "taskmanager.host", "rest.address", "rest.bind-address", "metrics.reporter.prom.host"):
        assert flat[key] == "127.0.0.1", key
    assert flat["rest.port"] == 18123
    assert flat["metrics.reporter.prom.port"] == "19300-19303"
    assert flat["jobmanager.scheduler"] == "adaptive"


def test_listening_sockets_are_decoded_from_proc():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        found = [(a, p) for a, p, _ in _listening() if p == port]
    assert found == [("127.0.0.1", port)]
    assert _decode_addr("00000000000000000000000000000000", 16) == "::"
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and is_loopback("::ffff:127.0.0.1")


def test_operator_names_from_chained_vertex_names():
    assert operator_name("Source: Source") == "Source"
    assert operator_name("Sink -> Discard: Writer") == "Sink"
    assert operator_name("Enrich") == "Enrich"


def test_spec_args_round_trip_the_configuration():
    spec = SleepPipelineSpec(rate_per_s=250, p_enrich=3)
    args = spec.args()
    assert args[args.index("--rate") + 1] == "250.0" and args[args.index("--p-enrich") + 1] == "3"
    assert spec.capacity_per_s()["Enrich"] == pytest.approx(600.0)


def _graph(p_agg=1, start=1000):
    vertices = (Vertex("v1", "Source: Source", "Source", 1, "RUNNING", start),
                Vertex("v2", "Aggregate", "Aggregate", p_agg, "RUNNING", start))
    return JobGraph("j", "job", "RUNNING", vertices, (Edge("Source", "Aggregate", "HASH"),))


def _values(graph, n_in, busy, idle):
    out = {}
    for v in graph.vertices:
        for i in range(v.parallelism):
            out[(v.operator, i)] = {"numRecordsIn": n_in, "numRecordsOut": n_in,
                                    "accumulateBusyTimeMs": busy, "accumulateIdleTimeMs": idle,
                                    "accumulateBackPressuredTimeMs": 0.0}
    return out


class FakeSource(FlinkMetricsSource):
    """The real windowing over scripted samples (no HTTP)."""

    def __init__(self, samples, window_s=10.0, mode="counters"):
        self.now = 100.0
        super().__init__("http://x", "j", FlinkMetricsConfig(window_s=window_s, max_wait_windows=2, mode=mode),
                         clock=lambda: self.now, sleep=self._advance)
        self.samples = list(samples)

    def _advance(self, s):
        self.now += s

    def sample(self):
        graph, values = self.samples.pop(0)
        return {"t": self.now, "graph": graph, "values": values, "running": True}


def test_windows_are_counter_differences_rescaled_to_the_window():
    g = _graph()
    # 11 s of subtask time covered (the REST cache is 1 s stale): rates are kept, times sum to 10 s
    src = FakeSource([(g, _values(g, 100, 500, 500)), (g, _values(g, 1200, 6000, 6000))])
    batch = src.read()
    frame = batch.to_frame()
    agg = frame[frame["operator"] == "Aggregate"].set_index("metric")["value"]
    assert agg["records_in"] == pytest.approx(1100 * 10 / 11)
    assert agg["busy_ms"] + agg["idle_ms"] + agg["backpressured_ms"] == pytest.approx(10_000)
    out = frame[(frame["operator"] == "Source") & (frame["metric"] == "records_out")]
    assert list(out["target"]) == ["Aggregate"]
    assert batch.as_of_s == 120.0 and batch.config == {"Source": 1, "Aggregate": 1}
    assert set(frame["ts"]) == {"1970-01-01T00:01:50+00:00"}


def test_a_rescale_inside_a_window_drops_it_and_reports_the_new_parallelism():
    g1, g2 = _graph(1), _graph(2, start=5000)
    src = FakeSource([(g1, _values(g1, 100, 500, 500)), (g2, _values(g2, 10, 50, 50)),
                      (g2, _values(g2, 110, 5050, 5050))])
    batch = src.read()
    assert src.dropped_windows == 1
    frame = batch.to_frame()
    assert set(frame[frame["operator"] == "Aggregate"]["instance"]) == {0, 1}
    assert batch.config["Aggregate"] == 2


def test_counters_going_backwards_drop_the_window_and_a_source_that_never_settles_fails():
    g = _graph()
    samples = [(g, _values(g, 500, 500, 500)), (g, _values(g, 10, 600, 600))] + \
              [(g, _values(g, 10 - k, 600, 600)) for k in range(1, 8)]
    src = FakeSource(samples)
    with pytest.raises(MetricsUnavailable):
        src.read()
    assert src.dropped_windows >= 2


def test_busy_time_stepping_back_is_jitter_not_a_restart():
    g = _graph()
    first = _values(g, 100, 500, 500)
    second = _values(g, 200, 5500, 5500)
    second[("Aggregate", 0)]["accumulateBusyTimeMs"] = 480.0  # idle subtask: busy stepped back
    second[("Aggregate", 0)]["accumulateIdleTimeMs"] = 10520.0
    batch = FakeSource([(g, first), (g, second)]).read()
    frame = batch.to_frame()
    agg = frame[frame["operator"] == "Aggregate"].set_index("metric")["value"]
    assert agg["busy_ms"] == 0.0 and agg["idle_ms"] == pytest.approx(10_000)


def test_missing_counters_are_never_returned_as_partial_windows():
    g = _graph()
    broken = _values(g, 200, 5500, 5500)
    del broken[("Aggregate", 0)]["accumulateBusyTimeMs"]
    src = FakeSource([(g, _values(g, 100, 500, 500)), (g, broken)] + [(g, broken)] * 6)
    with pytest.raises(MetricsUnavailable):
        src.read()
    assert set(COUNTERS) >= {"numRecordsIn", "accumulateBusyTimeMs"}


def test_a_source_that_counts_no_records_in_accepted_what_it_sent():
    g = _graph()
    first, second = _values(g, 100, 500, 500), _values(g, 1100, 5500, 5500)
    for values in (first, second):
        values[("Source", 0)]["numRecordsIn"] = 0.0  # FLIP-27 sources count no records in
    frame = FakeSource([(g, first), (g, second)]).read().to_frame()
    src = frame[frame["operator"] == "Source"].set_index("metric")["value"]
    assert src["records_in"] == src["records_out"] == pytest.approx(1000)
    agg = frame[frame["operator"] == "Aggregate"].set_index("metric")["value"]
    assert agg["records_in"] == pytest.approx(1000)


def _gauges(graph, per_s, busy_ms_per_s):
    return {(v.operator, i): {"numRecordsInPerSecond": per_s / v.parallelism,
                              "numRecordsOutPerSecond": per_s / v.parallelism,
                              "busyTimeMsPerSecond": busy_ms_per_s, "backPressuredTimeMsPerSecond": 0.0,
                              "idleTimeMsPerSecond": 1000.0 - busy_ms_per_s}
            for v in graph.vertices for i in range(v.parallelism)}


def test_rates_mode_reads_the_60s_gauges_only_once_they_cover_one_configuration():
    # Flink's *PerSecond gauges average the last 60 s (refreshed every 5 s): a sample at t is the
    # window [t - 60, t], emitted only once every subtask has run 60 + 5 + fetch interval seconds.
    old, new = _graph(1, start=1_000), _graph(2, start=150_000)  # rescaled at t = 150 s
    src = FakeSource([(old, _gauges(old, 200.0, 400.0)), (new, _gauges(new, 300.0, 300.0)),
                      (new, _gauges(new, 300.0, 300.0))], mode="rates")
    first = src.read()  # sampled at t = 120: the old configuration has run 119 s
    assert first.window_s == 60.0 and first.as_of_s == 120.0 and first.config["Aggregate"] == 1
    frame = first.to_frame()
    agg = frame[frame["operator"] == "Aggregate"].set_index("metric")["value"]
    assert agg["records_in"] == pytest.approx(200.0 * 60) and agg["busy_ms"] == pytest.approx(400.0 * 60)
    assert set(frame["ts"]) == {"1970-01-01T00:01:00+00:00"}
    # t = 180: the new configuration has run 30 s, its gauges still average the old one: skipped;
    # t = 240: 90 s >= 66 s, the window [180, 240] is the new configuration's alone
    second = src.read(first.as_of_s)
    assert second.as_of_s == 240.0 and second.config["Aggregate"] == 2
    frame = second.to_frame()
    assert set(frame["ts"]) == {"1970-01-01T00:03:00+00:00"}
    agg = frame[frame["operator"] == "Aggregate"]
    assert set(agg["instance"]) == {0, 1}
    assert agg[agg["metric"] == "records_in"]["value"].sum() == pytest.approx(300.0 * 60)
    assert set(agg[agg["metric"] == "parallelism"]["value"]) == {2.0}


# ------------------------------------------------------- checkpoint sizes (modeler.restart's input)

CHECKPOINTS = {  # the shape of Flink 2.x's GET /jobs/<id>/checkpoints, trimmed
    "counts": {"restored": 0, "total": 3, "in_progress": 0, "completed": 3, "failed": 0},
    "latest": {"completed": {"className": "completed", "id": 3, "status": "COMPLETED",
                             "state_size": 3 * (1 << 30), "checkpointed_size": 40 * (1 << 20)},
               "savepoint": None, "failed": None, "restored": None},
    "history": [],
}


def test_checkpoint_state_mb_reads_the_full_state_of_the_latest_completed_checkpoint():
    from scheduler.flink import checkpoint_state_mb

    assert checkpoint_state_mb(CHECKPOINTS) == 3072.0  # state_size, not the incremental size
    assert checkpoint_state_mb({"latest": {"completed": None}}) is None
    for bad in ({}, {"latest": {"completed": {"state_size": -1}}}, {"latest": {"completed": {}}}):
        with pytest.raises(MetricsUnavailable):
            checkpoint_state_mb(bad)


def test_checkpoint_state_mb_over_http_and_checkpointing_off():
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers = {  # what Flink answers (404 bodies as Flink's RestHandlerException writes them)
        "/jobs/on/checkpoints": (200, CHECKPOINTS),
        "/jobs/off/checkpoints": (404, {"errors": ["Checkpointing has not been enabled."]}),
        "/jobs/gone/checkpoints": (404, {"errors": ["Job gone could not be found."]}),
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            code, body = answers[self.path]
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        cfg = FlinkMetricsConfig(retries=1, timeout_s=5.0)
        assert FlinkMetricsSource(url, "on", cfg).checkpoint_state_mb() == 3072.0
        assert FlinkMetricsSource(url, "off", cfg).checkpoint_state_mb() is None
        with pytest.raises(MetricsUnavailable, match="gone"):
            FlinkMetricsSource(url, "gone", cfg).checkpoint_state_mb()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_a_source_without_busy_time_is_scaled_by_the_sample_interval_and_has_no_time_rows():
    # the SQL datagen source answers accumulateBusyTimeMs NaN (its work runs outside the task's
    # mailbox thread) and idle 0: every window used to be dropped (no clock: 0 ms covered)
    g = _graph()
    first, second = _values(g, 100, 500, 500), _values(g, 1200, 5500, 5500)
    for values, out in ((first, 1000.0), (second, 6000.0)):
        values[("Source", 0)].update(numRecordsIn=0.0, numRecordsOut=out, accumulateBusyTimeMs=float("nan"),
                                     accumulateIdleTimeMs=0.0, accumulateBackPressuredTimeMs=3.0)
    src = FakeSource([(g, first), (g, second)])
    frame = src.read().to_frame()
    assert src.dropped_windows == 0
    source = frame[frame["operator"] == "Source"].set_index("metric")["value"]
    # 5000 records over the 10 s between the two samples (the fake clock's window)
    assert source["records_out"] == pytest.approx(5000) and source["records_in"] == pytest.approx(5000)
    assert not {"busy_ms", "idle_ms", "backpressured_ms"} & set(source.index)
    agg = frame[frame["operator"] == "Aggregate"].set_index("metric")["value"]
    assert agg["busy_ms"] + agg["idle_ms"] == pytest.approx(10_000)


def test_nexmark_sql_spec_args_and_checks():
    from experiments.flink.sql import NexmarkSqlSpec
    from modeler.errors import ConfigError

    spec = NexmarkSqlSpec(query="q8", rate_per_s=5000, parallelism=3)
    args = spec.args()
    assert args[args.index("--query") + 1] == "q8" and args[args.index("--rate") + 1] == "5000"
    assert args[args.index("--source-parallelism") + 1] == "1" and args[args.index("--chaining") + 1] == "true"
    assert spec.job_name == "augury-nexmark-q8"
    assert "--source-parallelism" not in NexmarkSqlSpec(source_parallelism=None).args()
    assert "--person-rate" not in args
    mixed = NexmarkSqlSpec(query="q8", rate_per_s=7500, person_rate_per_s=2500).args()
    assert mixed[mixed.index("--person-rate") + 1] == "2500" and mixed[mixed.index("--rate") + 1] == "7500"
    for bad in (dict(query="q3"), dict(rate_per_s=0), dict(parallelism=True), dict(source_parallelism=0),
                dict(parallelism=200), dict(person_rate_per_s=0)):
        with pytest.raises(ConfigError):
            NexmarkSqlSpec(**bad)


def test_the_sql_job_is_compiled_with_the_test_jobs():
    from experiments.flink.cluster import JOB_SOURCES

    assert {p.name for p in JOB_SOURCES} == {"SleepPipeline.java", "NexmarkSql.java"}
    assert all(p.is_file() for p in JOB_SOURCES)


def test_a_thread_cpu_time_is_read_after_the_name_whatever_it_holds():
    from experiments.flink.cluster import thread_cpu_s

    # comm may hold spaces and ')': fields are counted after the last ')' (utime 250, stime 50)
    line = "4242 (Legacy Source T) ) S 1 2 3 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 1 0 100 0 0"
    assert thread_cpu_s(line, 100) == pytest.approx(3.0)


def test_source_threads_cpu_sums_the_named_threads_of_the_clusters_processes(monkeypatch):
    import os
    import time as _time
    from pathlib import Path

    from experiments.flink import cluster as C

    # this process stands in for the TaskManager; its main thread for the source thread
    me = Path(f"/proc/{os.getpid()}/task/{os.getpid()}")
    monkeypatch.setattr(C, "SOURCE_THREAD", (me / "comm").read_text().strip())
    fake = C.FlinkCluster.__new__(C.FlinkCluster)
    monkeypatch.setattr(C.FlinkCluster, "processes", lambda self: [os.getpid()])
    before = fake.source_threads_cpu_s()
    end = _time.process_time() + 0.2
    while _time.process_time() < end:
        pass
    after = fake.source_threads_cpu_s()
    assert 0.15 <= after - before <= 0.5
    # every thread of this process named like the main one counts (pytest-xdist's too)
    named = [t for t in Path(f"/proc/{os.getpid()}/task").glob("*")
             if (t / "comm").read_text().startswith(C.SOURCE_THREAD)]
    expected = sum(C.thread_cpu_s((t / "stat").read_text(), os.sysconf("SC_CLK_TCK")) for t in named)
    assert after == pytest.approx(expected, abs=0.05)
