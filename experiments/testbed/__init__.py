"""The testbed: a tuple-level discrete-event simulator of a stream-processing job (ground truth).

``Testbed(model, load, TestbedConfig(...), faults=...)`` runs a job described by a model file
tuple by tuple, with bounded per-instance queues, credit-based back pressure, Flink's key-group
routing, network delay, output batching, faults (hosts and racks too) and reconfiguration downtime. It produces the
normalized raw metrics of ``history`` and implements ``scheduler.interfaces``' ``MetricsSource``
and ``Actuator``. See ``docs/testbed.md``.
"""

from experiments.testbed.config import OperatorOverride, TestbedConfig
from experiments.testbed.errors import TestbedError
from experiments.testbed.faults import (HotKey, LostHost, LostRack, Rescale, SlowHost, SlowInstance, SlowLink,
                                        load_faults, parse_faults)
from experiments.testbed.load import ConstantRate, PiecewiseRate, TraceLoad, load_trace
from experiments.testbed.sim import Conservation, Testbed

__all__ = [
    "Conservation", "ConstantRate", "HotKey", "LostHost", "LostRack", "OperatorOverride", "PiecewiseRate",
    "Rescale", "SlowHost", "SlowInstance", "SlowLink", "Testbed", "TestbedConfig", "TestbedError", "TraceLoad", "load_faults",
    "load_trace", "parse_faults",
]
