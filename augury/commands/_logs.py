"""A quiet terminal for the commands that start Spark or mlflow (``augury demo``,
``augury experiment run``, ``augury history summarize``, ``augury calibrate``, ``augury forecast``):
their libraries' own output goes to a log file whose path is printed once, and ``--verbose``
brings it back to the terminal.

What goes to the log: the output of Spark's JVM on stderr (its start-up lines, "Setting default
log level...", later warnings; ``history.spark.JVM_LOG_ENV``), the Python loggers of mlflow,
alembic, SQLAlchemy, py4j and pyspark, and Python warnings. augury's own progress, results and
errors stay on the terminal. The file is ``DIR/augury-<command>.log`` when the command writes its
outputs into a directory DIR (``--out DIR`` of ``demo`` and ``experiment run``), else
``$AUGURY_LOG_DIR/<command>-<time>.log``, by default ``$XDG_CACHE_HOME/augury/logs`` (``~/.cache``
when unset; the tests point ``AUGURY_LOG_DIR`` at a temporary directory).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

CHATTY_LOGGERS = ("mlflow", "alembic", "sqlalchemy", "huey", "py4j", "pyspark", "py.warnings")
"""Python loggers whose records go to the log file (``py.warnings``: Python warnings)."""


def add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbose", action="store_true",
                        help="show Spark's and mlflow's own output here instead of in a log file")


def log_path(command: str, out_dir: str | None = None) -> Path:
    """Where ``command``'s library output goes (see the module docstring)."""
    if out_dir:
        return Path(out_dir) / f"augury-{command}.log"
    logs = os.environ.get("AUGURY_LOG_DIR")
    if not logs:
        logs = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "augury" / "logs"
    return Path(logs) / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


@contextmanager
def library_output_to_log(args: argparse.Namespace, command: str, say: Callable[[str], None],
                          out_dir: str | None = None) -> Iterator[Path | None]:
    """Inside the block, Spark's JVM (when started here), mlflow & co. and Python warnings write to
    the log file (in ``out_dir`` when given), whose path is told once through ``say``; with
    ``args.verbose`` nothing changes (yields None)."""
    if getattr(args, "verbose", False):
        yield None
        return
    path = log_path(command, out_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    import mlflow  # noqa: F401  (mlflow sets its loggers' handlers on import: import it first)

    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = {}
    for name in CHATTY_LOGGERS:
        logger = logging.getLogger(name)
        saved[name] = (logger.handlers[:], logger.propagate)
        logger.handlers = [handler]
        logger.propagate = False
    logging.captureWarnings(True)
    from history.spark import JVM_LOG_ENV

    before = os.environ.get(JVM_LOG_ENV)
    os.environ[JVM_LOG_ENV] = str(path)
    say(f"(Spark's and mlflow's own output: {path}; --verbose shows it here)")
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop(JVM_LOG_ENV, None)
        else:
            os.environ[JVM_LOG_ENV] = before
        logging.captureWarnings(False)
        for name, (handlers, propagate) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers = handlers
            logger.propagate = propagate
        handler.close()
