"""augury: a model-driven, predictive autoscaler for stream-processing jobs.

This package is the thin command line (``augury ...``). The work happens in
``history`` (metrics), ``modeler`` (model, calibration, forecasting),
``scheduler`` (decisions, actuators) and ``experiments`` (testbed, baselines).
"""

__version__ = "0.1.0"
