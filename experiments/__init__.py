"""experiments: the testbed simulator, baselines, mlflow-tracked experiments, the demo."""
