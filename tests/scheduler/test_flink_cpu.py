"""The TaskManagers' JVM CPU time over Flink REST (``scheduler.flink``): payload readers and the
sampler that waits for the REST cache to refresh (what calibration's ``engine_cpu`` rests on)."""

from __future__ import annotations

import pytest

from scheduler.flink import (JVM_CPU_TIME, FlinkMetricsConfig, FlinkMetricsSource, jvm_cpu_time_ns,
                             taskmanager_ids)
from scheduler.interfaces import MetricsUnavailable


def test_taskmanager_ids_and_cpu_time_are_read_from_the_payloads():
    assert taskmanager_ids({"taskmanagers": [{"id": "tm-1", "slotsNumber": 8}, {"id": "tm-2"}]}) == ["tm-1", "tm-2"]
    assert jvm_cpu_time_ns([{"id": "Status.JVM.CPU.Load", "value": "0.5"},
                            {"id": JVM_CPU_TIME, "value": "123456789012"}]) == 123456789012


@pytest.mark.parametrize("payload, field", [
    ({"taskmanagers": []}, "taskmanagers"),
    ({"taskmanagers": [{"slots": 8}]}, "taskmanagers[0].id"),
    ([], "taskmanagers"),
])
def test_a_bad_taskmanager_list_names_the_field(payload, field):
    with pytest.raises(MetricsUnavailable) as info:
        taskmanager_ids(payload, "http://x/taskmanagers")
    assert info.value.field == field


@pytest.mark.parametrize("payload", [[], [{"id": JVM_CPU_TIME, "value": "n/a"}], [{"id": JVM_CPU_TIME, "value": "-5"}],
                                     {"id": JVM_CPU_TIME, "value": "5"}])
def test_a_missing_or_bad_cpu_time_names_the_metric(payload):
    with pytest.raises(MetricsUnavailable) as info:
        jvm_cpu_time_ns(payload)
    assert info.value.field == JVM_CPU_TIME


class _Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _source(values_ns: dict[str, list[int]], clock: _Clock, fetch_interval_s: float = 1.0) -> FlinkMetricsSource:
    """A source whose REST answers come from ``values_ns`` (per TaskManager, one value per read)."""
    src = FlinkMetricsSource("http://flink", "job", FlinkMetricsConfig(fetch_interval_s=fetch_interval_s),
                             clock=clock, sleep=clock.sleep)
    reads = {tm: iter(v) for tm, v in values_ns.items()}
    last = {}

    def get(path, none_if_404_says=None):
        if path == "/taskmanagers":
            return {"taskmanagers": [{"id": tm} for tm in values_ns]}
        tm = path.split("/")[2]
        last[tm] = next(reads[tm], last.get(tm))
        return [{"id": JVM_CPU_TIME, "value": str(last[tm])}]

    src._get = get
    return src


def test_cpu_sample_waits_for_the_cache_to_refresh_and_sums_the_taskmanagers():
    clock = _Clock()
    # the cached value changes at the fourth read (0.3 s after the first)
    src = _source({"a": [2_000_000_000, 2_000_000_000, 2_000_000_000, 2_500_000_000],
                   "b": [1_000_000_000, 1_000_000_000, 1_000_000_000, 1_200_000_000]}, clock)
    t, cpu = src.cpu_sample(poll_s=0.1)
    assert t == pytest.approx(1000.3) and cpu == pytest.approx(3.7)


def test_cpu_sample_of_an_idle_cluster_returns_after_the_fetch_interval():
    clock = _Clock()
    src = _source({"a": [5_000_000_000]}, clock, fetch_interval_s=1.0)
    t, cpu = src.cpu_sample(poll_s=0.25)
    assert cpu == pytest.approx(5.0) and 1002.0 <= t <= 1002.25
