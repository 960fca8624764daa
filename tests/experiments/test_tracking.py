"""Where mlflow runs go by default (``experiments.tracking.tracking_uri``)."""

from __future__ import annotations

import os

from experiments import tracking


def test_env_then_cwd_then_user_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    assert tracking.tracking_uri() == "sqlite:///elsewhere.db"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.chdir(tmp_path)
    assert tracking.tracking_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"
    # a working directory that cannot be written (e.g. `augury demo` run from /): the user's data dir
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(tracking.os, "access", lambda path, mode: False if mode == os.W_OK else True)
    assert tracking.tracking_uri() == f"sqlite:///{tmp_path / 'data' / 'augury' / 'mlflow.db'}"
    assert (tmp_path / "data" / "augury").is_dir()
