"""Moved to ``scheduler.flink`` (``augury run`` uses it against any Flink cluster); re-exported here."""

from scheduler.flink import LiveActuatorConfig, LiveFlinkActuator  # noqa: F401
