"""The quiet terminal (``augury/commands/_logs.py``): library output to a log file unless
--verbose, and the JVM's stderr redirection in ``history.spark``."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import warnings

from augury.commands._logs import CHATTY_LOGGERS, library_output_to_log, log_path
from history.spark import JVM_LOG_ENV, _stderr_to


def test_library_output_goes_to_the_log_and_everything_is_restored(tmp_path):
    import mlflow  # noqa: F401  (configures its loggers on import, as the block does first)
    import py4j.java_gateway  # noqa: F401

    said: list[str] = []
    before = {n: (logging.getLogger(n).handlers[:], logging.getLogger(n).propagate) for n in CHATTY_LOGGERS}
    args = argparse.Namespace(verbose=False)
    with library_output_to_log(args, "demo", said.append, out_dir=str(tmp_path)) as path:
        assert path == tmp_path / "augury-demo.log" and os.environ[JVM_LOG_ENV] == str(path)
        logging.getLogger("mlflow.store.db.utils").warning("Creating initial MLflow database tables...")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("a library's FutureWarning", FutureWarning)
    assert len(said) == 1 and str(path) in said[0] and "--verbose" in said[0]
    text = path.read_text()
    assert "Creating initial MLflow database tables" in text and "FutureWarning" in text
    assert JVM_LOG_ENV not in os.environ
    assert {n: (logging.getLogger(n).handlers, logging.getLogger(n).propagate) for n in CHATTY_LOGGERS} == before


def test_verbose_changes_nothing(tmp_path):
    said: list[str] = []
    with library_output_to_log(argparse.Namespace(verbose=True), "demo", said.append, out_dir=str(tmp_path)) as path:
        assert path is None and JVM_LOG_ENV not in os.environ
    assert said == [] and not list(tmp_path.iterdir())


def test_default_log_path_is_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("AUGURY_LOG_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = log_path("demo")
    assert path.parent == tmp_path / "augury" / "logs" and path.name.startswith("demo-")
    monkeypatch.setenv("AUGURY_LOG_DIR", str(tmp_path / "logs"))
    assert log_path("demo").parent == tmp_path / "logs"


def test_a_child_started_inside_writes_its_stderr_to_the_file(tmp_path, capfd):
    log = tmp_path / "jvm.log"
    with _stderr_to(str(log)):
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('Setting default log level\\n')"],
                       check=True)
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('after\\n')"], check=True)
    assert log.read_text() == "Setting default log level\n"
    assert capfd.readouterr().err == "after\n"
