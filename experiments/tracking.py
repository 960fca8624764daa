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
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import urlparse

from modeler.errors import AuguryError

_PARAM_MAX = 500


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<cwd>/mlflow.db``; when the working
    directory cannot be written (an installed augury run from ``/``, say), a store in the user's
    data directory instead: ``$XDG_DATA_HOME/augury/mlflow.db`` (``~/.local/share`` when unset)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    cwd = Path.cwd()
    if os.access(cwd, os.W_OK):
        return f"sqlite:///{cwd / 'mlflow.db'}"
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "augury"
    data.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{data / 'mlflow.db'}"


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


HTTP_LIMITS: Mapping[str, str] = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
                                   "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                                   "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
"""mlflow's HTTP retry and timeout settings unless the environment sets them: an unreachable
tracking server fails in seconds (mlflow's defaults retry for ~4 minutes)."""

_TRACKING_MODULES = ("mlflow", "requests", "urllib3", "sqlalchemy", "alembic", "botocore", "google")


class TrackingUnavailable(AuguryError):
    """The mlflow tracking store cannot be reached or written: an environment failure."""

    exit_code = 3


def _is_tracking_failure(err: BaseException) -> bool:
    return isinstance(err, OSError) or (type(err).__module__ or "").startswith(_TRACKING_MODULES)


@contextmanager
def start_run(experiment: str, run_name: str | None = None,
              tags: Mapping[str, str] | None = None) -> Iterator[Any]:
    """An mlflow run in ``experiment`` (created when missing) on ``tracking_uri()``.

    A tracking store that cannot be reached or written (a server down, a read-only sqlite file)
    raises ``TrackingUnavailable`` (exit code 3) naming the URI, after bounded retries
    (``HTTP_LIMITS``); errors of the run's own body pass through unchanged.
    """
    for key, value in HTTP_LIMITS.items():
        os.environ.setdefault(key, value)
    import mlflow

    uri = tracking_uri()
    try:
        mlflow.set_tracking_uri(uri)
        client = mlflow.MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(experiment)
        if found is None:
            experiment_id = client.create_experiment(
                experiment, artifact_location=_artifact_location(uri, experiment))
        else:
            experiment_id = found.experiment_id
        run_cm = mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=dict(tags or {}))
        run = run_cm.__enter__()
    except Exception as err:
        if isinstance(err, AuguryError) or not _is_tracking_failure(err):
            raise
        raise _unavailable(uri, err) from None
    try:
        yield run
    except BaseException as err:
        with suppress(Exception):
            run_cm.__exit__(type(err), err, err.__traceback__)
        # Only errors raised inside the tracking libraries: the body's own errors keep their meaning.
        if isinstance(err, Exception) and (type(err).__module__ or "").startswith(_TRACKING_MODULES):
            raise _unavailable(uri, err) from None
        raise
    else:
        try:
            run_cm.__exit__(None, None, None)
        except Exception as err:
            if not _is_tracking_failure(err):
                raise
            raise _unavailable(uri, err) from None


def _unavailable(uri: str, err: BaseException) -> TrackingUnavailable:
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return TrackingUnavailable(f"the mlflow tracking store is unreachable or not writable ({first[:200]})",
                               field="MLFLOW_TRACKING_URI", value=uri)


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
