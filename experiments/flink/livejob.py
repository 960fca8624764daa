"""A job running on a managed Flink cluster, as the live experiments drive it: its metrics source
(``scheduler.flink.FlinkMetricsSource``), its live actuator and the windows read so far.

Windows in s, rates tuples/s.
"""

from __future__ import annotations


class LiveJob:
    """A submitted job (``job_id``) with its metrics source and actuator; ``windows(n)`` reads the
    next n complete windows as ``scheduler.observe.JobWindow``s, ``rescale`` applies a
    configuration live, ``cancel`` stops the job (never raises: the cluster is stopped next).

    ``sources`` names the job's source operators for ``job_windows`` (a subclass may set it once
    it has read the job graph)."""

    def __init__(self, cluster, job_id: str, window_s: float, job_label: str, reason: str,
                 sources: list[str] | None = None):
        from scheduler.flink import FlinkMetricsConfig, FlinkMetricsSource, LiveActuatorConfig, LiveFlinkActuator

        self.cluster = cluster
        self.id = job_id
        self.reason = reason
        """Why the rescales are made (``Actuator.apply``'s reason)."""
        self.source = FlinkMetricsSource(cluster.rest_url, self.id, FlinkMetricsConfig(
            window_s=window_s, settle_s=1.0, job_label=job_label))
        self.actuator = LiveFlinkActuator(cluster.rest_url, self.id, LiveActuatorConfig(ready_timeout_s=120.0))
        self.sources = sources
        self.as_of: float | None = None

    def windows(self, n: int, skip: int | None = None) -> list:
        """The next ``n`` windows after ``skip`` warm-up ones (default: one after the submission;
        after a rescale none, which already waited ``settle_s``)."""
        from scheduler.observe import job_windows

        if skip is None:
            skip = 1 if self.as_of is None else 0
        out = []
        while len(out) < n + skip:
            batch = self.source.read(self.as_of)
            self.as_of = batch.as_of_s
            out.extend(job_windows(batch, sources=self.sources))
        return out[skip:skip + n]

    def rescale(self, config: dict) -> float:
        """Apply ``config`` live; the restart time (s)."""
        done = self.actuator.apply(config, reason=self.reason)
        return float(done.restart_s or 0.0)

    def cancel(self) -> None:
        try:
            self.cluster.cancel(self.id)
        except Exception:  # noqa: BLE001 - the cluster is stopped next anyway
            pass
