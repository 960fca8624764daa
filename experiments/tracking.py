"""mlflow tracking, kept small: where runs go, and a few helpers to log a run.

``tracking_uri()`` is ``$MLFLOW_TRACKING_URI`` when set, else a sqlite store in the working
directory (``sqlite:///<cwd>/mlflow.db``). New experiments on a local sqlite store keep their
artifacts next to the database (``<db dir>/mlartifacts/<experiment>``), not in the cwd.

    with start_run("forecast", run_name="taxi", tags={"command": "forecast"}):
        log_params({"method": "auto", "horizon_s": 7200})
        log_metrics({"mase": 0.6, "coverage": {"0.9": 0.91}})   # -> coverage.0.9
        log_figure(fig, "forecast.png")

Nested dicts are flattened with dots; ``None`` and non-finite metrics are skipped (mlflow
rejects them); parameter values are stringified and cut to mlflow's length limit.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import urlparse

_PARAM_MAX = 500


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<cwd>/mlflow.db``."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def _artifact_location(uri: str, experiment: str) -> str | None:
    parsed = urlparse(uri)
    if parsed.scheme != "sqlite":
        return None
    db = uri[len("sqlite:///"):]
    if not db or db == ":memory:":
        return None
    return (Path(db).resolve().parent / "mlartifacts" / experiment).as_uri()


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, prefix=f"{name}."))
        else:
            out[name] = value
    return out


@contextmanager
def start_run(experiment: str, run_name: str | None = None,
              tags: Mapping[str, str] | None = None) -> Iterator[Any]:
    """An mlflow run in ``experiment`` (created when missing) on ``tracking_uri()``."""
    import mlflow

    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        experiment_id = client.create_experiment(
            experiment, artifact_location=_artifact_location(uri, experiment))
    else:
        experiment_id = found.experiment_id
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_name,
                          tags=dict(tags or {})) as run:
        yield run


def log_params(params: Mapping[str, Any]) -> None:
    import mlflow

    flat = {k: ("None" if v is None else str(v))[:_PARAM_MAX] for k, v in flatten(params).items()}
    if flat:
        mlflow.log_params(flat)


def log_metrics(metrics: Mapping[str, Any], step: int | None = None) -> None:
    import mlflow

    clean = {}
    for key, value in flatten(metrics).items():
        if isinstance(value, bool) or value is None:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            clean[key] = number
    if clean:
        mlflow.log_metrics(clean, step=step)


def log_artifact(path: str | Path, artifact_path: str | None = None) -> None:
    import mlflow

    mlflow.log_artifact(str(path), artifact_path=artifact_path)


def log_figure(figure: Any, name: str) -> None:
    """A matplotlib figure as an image artifact ``name`` (e.g. ``forecast.png``)."""
    import mlflow

    mlflow.log_figure(figure, name)


def log_dict(values: Mapping[str, Any], name: str) -> None:
    """A JSON/YAML artifact ``name`` (``.json`` or ``.yaml``) holding ``values``."""
    import mlflow

    mlflow.log_dict(dict(values), name)
