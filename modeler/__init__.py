"""modeler: the job's performance model.

Topology (networkx), the queueing-network model (``predict``), calibration
(scikit-learn) and load forecasting (statsmodels). Pure: functions take values
and return values; no files, clocks, Spark or network in here (loading a model
file lives in ``modeler.modelfile``'s ``load_model``, the single documented
exception, which reads text and hands it to the pure parser).
"""
