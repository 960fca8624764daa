"""The experiment harness: named, seeded, parameterized runs logged to mlflow.

An experiment is a module ``experiments/suite/<name>.py`` (``-`` in the name becomes ``_``) with

    NAME = "convergence"                 # the name on the command line
    DESCRIPTION = "one line"             # shown by ``augury experiment list`` and in RESULTS.md
    def run(ctx: ExperimentContext) -> ExperimentResult
    HEADLINE = ("metric", ...)           # optional: metrics quoted first in RESULTS.md / README
    INPUTS = ("seeds", "models")         # optional: what the command line may hand it (below)

``run`` is deterministic for a given ``ctx.seed`` and ``ctx.quick``; it writes any files it
needs under ``ctx.workdir`` and returns its parameters, headline metrics, result tables
(pandas DataFrames) and figure files. ``run_experiment`` calls it inside an mlflow run in the
mlflow experiment ``augury-<name>`` (tags ``augury.experiment``, ``augury.quick``,
``augury.seed``, ``augury.git_commit``) and logs: parameters, metrics, every table as
``tables/<key>.csv``, every figure under ``figures/``, the summary as ``summary.md`` and ``result.json`` (params, metrics,
table and figure names). ``experiments/results.py`` regenerates ``docs/RESULTS.md`` from those
runs; nothing in it is typed by hand.

**Inputs from the command line** (``augury experiment run NAME [--seed N ...] [--model FILE ...]
[--trace FILE ...] [--out DIR]``): an experiment lists in ``INPUTS`` what it takes besides one
seed: ``"seeds"`` (several ``--seed``: ``ctx.seeds``), ``"models"`` (user model files:
``ctx.models``), ``"traces"`` (user trace files: ``ctx.traces``). Handing an experiment an input
it does not take is a ``UsageError`` naming the flag (``check_inputs``; exit 2 on the command
line), raised before anything runs. ``ctx.seed`` is always the first seed. With ``out`` (``--out
DIR``) the run's files stay in DIR, and every result table is also written there as
``DIR/<key>.csv`` (``runs.csv``, ``summary.csv``, ...) with ``summary.md`` and ``result.json``
beside them, so the headline can be recomputed from the raw rows without mlflow.

**Progress.** ``ctx.progress(message)`` says what a run is doing (one line on stderr from the
command line); a loop over a known number of units (runs, cases, backtests) goes through
``with ctx.steps(total, "what") as steps: ... steps.advance("unit")`` (or ``steps.done("unit")``
when a unit is known only once it has finished): a ``tqdm`` progress bar on
stderr (count, rate, time left; the unit after it) when ``ctx.bars`` is on, which
``run_experiment`` sets when stderr is a terminal; otherwise one plain ``[k/N] unit`` line per
unit through ``ctx.progress``, so CI logs and files stay readable (no carriage returns).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from experiments import bundled
from modeler.errors import AuguryError, UsageError

SUITE_PACKAGE = "experiments.suite"


class ExperimentError(AuguryError):
    """An experiment could not run (bad parameters, missing data, failed environment)."""


class Steps:
    """Progress over ``total`` units of work (``ExperimentContext.steps``). ``advance(unit)`` says
    the next unit starts (the one before it is then counted done); ``done(unit)`` says a unit
    finished, for loops that learn of a unit when it ends (work handed to a pool). With a bar,
    ``unit`` is shown after it; without one, ``[k/total] unit`` goes to ``progress``. Leaving the
    ``with`` block (or ``close()``) counts a started unit done and closes the bar."""

    def __init__(self, total: int, what: str, progress: Callable[[str], None], bar: bool) -> None:
        self.total = int(total)
        self.what = what
        self.progress = progress
        self.started = 0
        self._open = False
        self._bar = None
        if bar:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=what, unit="", file=sys.stderr, dynamic_ncols=True,
                             leave=True, mininterval=0.5)

    def _finish_open(self) -> None:
        if self._open and self._bar is not None:
            self._bar.update(1)
        self._open = False

    def advance(self, unit: str) -> None:
        self._finish_open()
        self.started += 1
        self._open = True
        if self._bar is None:
            self.progress(f"[{self.started}/{self.total}] {unit}")
        else:
            self._bar.set_postfix_str(unit, refresh=True)

    def done(self, unit: str) -> None:
        self._open = False
        self.started += 1
        if self._bar is None:
            self.progress(f"[{self.started}/{self.total}] {unit}")
        else:
            self._bar.set_postfix_str(unit, refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        self._finish_open()
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Steps":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class ExperimentContext:
    """What every experiment is given."""

    quick: bool = False
    """The short variant (run in CI): fewer cases, shorter replays."""
    seed: int = 0
    """Seed for every random choice of the run."""
    workdir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()))
    """Directory for files the run writes (figures, stores, models)."""
    repo: Path = field(default_factory=lambda: bundled.data_dir())
    """The directory experiments resolve their relative file names against (``examples/<name>.yaml``):
    the bundled data (``experiments.bundled.data_dir()``, with ``examples/`` and ``traces/``), the
    same in a checkout and in an installed wheel. (Named for the checkout root it used to be.)"""
    spark_master: str = "local[2]"
    """Spark master URL for experiments that ingest through the pipeline."""
    progress: Callable[[str], None] = lambda message: None
    """Where progress lines go (stderr on the command line)."""
    seeds: tuple[int, ...] = ()
    """Every seed given (``--seed`` repeated), ``seed`` first; empty = only ``seed``, the
    experiment's default set (only experiments with ``"seeds"`` in ``INPUTS`` get more than one)."""
    models: tuple[Path, ...] = ()
    """User model files (``--model``; only experiments with ``"models"`` in ``INPUTS``)."""
    traces: tuple[Path, ...] = ()
    """User trace files (``--trace``; only experiments with ``"traces"`` in ``INPUTS``)."""
    bars: bool = False
    """Draw ``steps`` as progress bars on stderr (``run_experiment``: when stderr is a terminal);
    off: one ``[k/N]`` line per unit through ``progress``."""

    def steps(self, total: int, what: str) -> Steps:
        """Progress over ``total`` units (module docstring): ``with ctx.steps(n, "runs") as s:
        ... s.advance("the unit")``."""
        return Steps(total, what, self.progress, self.bars)

    @property
    def traces_dir(self) -> Path:
        """The bundled real traces (``experiments.bundled.traces_dir()``)."""
        return bundled.traces_dir()


@dataclass(frozen=True)
class ExperimentResult:
    """What an experiment returns."""

    params: Mapping[str, Any]
    """Parameters of the run (logged as mlflow params)."""
    metrics: Mapping[str, float]
    """Headline numbers (logged as mlflow metrics; quoted in RESULTS.md)."""
    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    """Result tables by key (logged as ``tables/<key>.csv``; rendered in RESULTS.md)."""
    figures: Mapping[str, Path] = field(default_factory=dict)
    """Figure files by key (logged under ``figures/``; linked from RESULTS.md)."""
    summary: str = ""
    """A few lines of Markdown saying what the numbers mean (goals met or missed)."""


@dataclass(frozen=True)
class ExperimentRun:
    """A finished, logged run."""

    name: str
    result: ExperimentResult
    mlflow_run_id: str
    seconds: float


def experiment_names(package: str | None = None) -> dict[str, str]:
    """name -> module name of every experiment in ``package`` (default ``SUITE_PACKAGE``).

    A module that fails to import (say, one being written) is skipped with a warning rather than
    hiding every other experiment; ``broken_modules`` says which and why.
    """
    return dict(_discover(package)[0])


def broken_modules(package: str | None = None) -> dict[str, str]:
    """module name -> import error of suite modules that could not be imported."""
    return dict(_discover(package)[1])


def _discover(package: str | None) -> tuple[dict[str, str], dict[str, str]]:
    package = package or SUITE_PACKAGE  # looked up at call time (tests point it elsewhere)
    suite = importlib.import_module(package)
    names, broken = {}, {}
    for info in pkgutil.iter_modules(suite.__path__):
        if info.name.startswith("_"):
            continue
        qualified = f"{package}.{info.name}"
        try:
            module = importlib.import_module(qualified)
        except Exception as err:  # noqa: BLE001 - a broken module must not hide the others
            broken[qualified] = f"{type(err).__name__}: {err}"
            warnings.warn(f"experiment module {qualified} failed to import ({err})", stacklevel=2)
            continue
        if hasattr(module, "NAME") and hasattr(module, "run"):
            names[module.NAME] = module.__name__
    return dict(sorted(names.items())), broken


def load_experiment(name: str, package: str | None = None):
    modules, broken = _discover(package)
    if name not in modules:
        hint = f"; modules that failed to import: {', '.join(broken)}" if broken else ""
        raise UsageError(f"unknown experiment (known: {', '.join(modules) or 'none'}{hint})",
                         field="NAME", value=name)
    return importlib.import_module(modules[name])


INPUT_FLAGS = {"seeds": "--seed", "models": "--model", "traces": "--trace"}
"""Each input an experiment may take (``INPUTS``) and the command-line flag that gives it."""


def inputs(module) -> tuple[str, ...]:
    """What the experiment takes besides one seed (module attribute ``INPUTS``)."""
    return tuple(getattr(module, "INPUTS", ()))


def check_inputs(module, seeds: tuple[int, ...] = (), models: tuple = (), traces: tuple = ()) -> None:
    """``UsageError`` naming the flag when the experiment does not take what it is given."""
    takes = inputs(module)
    given = {"seeds": len(seeds) > 1, "models": bool(models), "traces": bool(traces)}
    for key, present in given.items():
        if present and key not in takes:
            what = "more than one --seed" if key == "seeds" else INPUT_FLAGS[key]
            accepted = ", ".join(INPUT_FLAGS[k] + (" (repeated)" if k == "seeds" else "") for k in takes) or "none"
            raise UsageError(f"experiment {module.NAME} takes no {what} (it takes: {accepted})",
                             field=INPUT_FLAGS[key], value=module.NAME)
    for key, paths in (("models", models), ("traces", traces)):
        for path in paths:
            if not Path(path).is_file():
                raise UsageError("no such file", field=INPUT_FLAGS[key], value=str(path))


def headline(module) -> tuple[str, ...] | None:
    """The metric names an experiment quotes first (optional module attribute ``HEADLINE``)."""
    value = getattr(module, "HEADLINE", None)
    return tuple(value) if value else None


def git_commit(repo: Path | None = None) -> str:
    """The repository's HEAD commit ('unknown' outside git). Runs are often made from a working
    tree with uncommitted changes, so this is a pointer, not a guarantee."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo or Path(__file__).resolve().parents[1],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def mlflow_experiment_name(name: str) -> str:
    return f"augury-{name}"


def run_experiment(name: str, quick: bool = False, seed: int = 0, workdir: Path | None = None,
                   spark_master: str = "local[2]",
                   progress: Callable[[str], None] = lambda message: None,
                   package: str | None = None, seeds: tuple[int, ...] | None = None,
                   models: tuple = (), traces: tuple = (), out: Path | None = None,
                   bars: bool | None = None) -> ExperimentRun:
    """Run experiment ``name`` (from ``package``, the suite by default) and log it to mlflow
    (``experiments.tracking.tracking_uri()``). ``seeds`` (several seeds; ``seed`` is then its
    first), ``models`` and ``traces`` (user files) go to experiments that take them (``INPUTS``,
    else ``UsageError``); ``out``: a directory that keeps the run's files and gets every table as
    ``<key>.csv`` (it is the working directory unless ``workdir`` says otherwise). ``bars``:
    progress bars on stderr (``ExperimentContext.bars``); None = when stderr is a terminal (then
    ``progress`` lines are written around the bars, not through them)."""
    from experiments import tracking

    module = load_experiment(name, package)
    seeds = tuple(int(s) for s in seeds) if seeds else ()
    if seeds:
        seed = seeds[0]
    models = tuple(Path(m) for m in models)
    traces = tuple(Path(t) for t in traces)
    check_inputs(module, seeds, models, traces)
    if workdir is None and out is not None:
        workdir = out
    own_dir = workdir is None
    work = Path(tempfile.mkdtemp(prefix=f"augury-{name}-")) if own_dir else Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    if bars is None:
        bars = bool(getattr(sys.stderr, "isatty", lambda: False)())
    if bars:
        progress = _around_bars(progress)
    ctx = ExperimentContext(quick=quick, seed=seed, workdir=work, spark_master=spark_master,
                            progress=progress, seeds=seeds, models=models, traces=traces, bars=bars)
    tags = {"augury.experiment": name, "augury.quick": str(bool(quick)).lower(),
            "augury.seed": str(seed), "augury.git_commit": git_commit(ctx.repo)}
    if len(seeds) > 1:
        tags["augury.seeds"] = ",".join(str(s) for s in seeds)
    started = time.perf_counter()
    try:
        with tracking.start_run(mlflow_experiment_name(name), run_name=f"{name}{'-quick' if quick else ''}",
                                tags=tags) as active:
            result = module.run(ctx)
            if not isinstance(result, ExperimentResult):
                raise ExperimentError("the experiment returned no ExperimentResult", field="run", value=name)
            seconds = time.perf_counter() - started
            tracking.log_params({"quick": quick, "seed": seed, **dict(result.params)})
            tracking.log_metrics({**dict(result.metrics), "wall_seconds": seconds})
            _log_outputs(result, work)
            if out is not None:
                write_tables(result, Path(out))
    finally:
        if own_dir:
            shutil.rmtree(work, ignore_errors=True)
    return ExperimentRun(name=name, result=result, mlflow_run_id=active.info.run_id, seconds=seconds)


def _around_bars(progress: Callable[[str], None]) -> Callable[[str], None]:
    """``progress`` with any open bar cleared first and redrawn after (no line through a bar)."""
    from tqdm import tqdm

    def say(message: str) -> None:
        with tqdm.external_write_mode(file=sys.stderr):
            progress(message)
    return say


def _log_outputs(result: ExperimentResult, work: Path) -> None:
    import mlflow

    out = work / "_logged"
    (out / "tables").mkdir(parents=True, exist_ok=True)
    for key, table in result.tables.items():
        path = out / "tables" / f"{key}.csv"
        table.to_csv(path, index=False)
        mlflow.log_artifact(str(path), artifact_path="tables")
    for key, path in result.figures.items():
        if not Path(path).is_file():
            raise ExperimentError("figure file missing", field=f"figures.{key}", value=str(path))
        mlflow.log_artifact(str(path), artifact_path="figures")
    (out / "summary.md").write_text(result.summary or "", encoding="utf-8")
    mlflow.log_artifact(str(out / "summary.md"))
    manifest = {"params": {k: _plain(v) for k, v in result.params.items()},
                "metrics": {k: _plain(v) for k, v in result.metrics.items()},
                "tables": list(result.tables), "figures": {k: Path(p).name for k, p in result.figures.items()}}
    (out / "result.json").write_text(json.dumps(manifest, indent=2, default=str), encoding="utf-8")
    mlflow.log_artifact(str(out / "result.json"))


def write_tables(result: ExperimentResult, out: Path) -> list[Path]:
    """Every table of ``result`` as ``out/<key>.csv``, its summary as ``out/summary.md`` and the
    manifest as ``out/result.json`` (the files ``--out DIR`` promises); the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for key, table in result.tables.items():
        if not key or "/" in key or "\\" in key or key.startswith("."):
            raise ExperimentError("a table key must be a plain file name", field="tables", value=key)
        path = out / f"{key}.csv"
        table.to_csv(path, index=False)
        written.append(path)
    (out / "summary.md").write_text(result.summary or "", encoding="utf-8")
    manifest = {"params": {k: _plain(v) for k, v in result.params.items()},
                "metrics": {k: _plain(v) for k, v in result.metrics.items()},
                "tables": list(result.tables), "figures": {k: Path(p).name for k, p in result.figures.items()}}
    (out / "result.json").write_text(json.dumps(manifest, indent=2, default=str), encoding="utf-8")
    return written + [out / "summary.md", out / "result.json"]


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    return value
