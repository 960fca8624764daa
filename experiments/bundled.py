"""The data that ships inside augury: the real arrival-rate traces and the example files.

One loader for everything that is bundled, found through ``importlib.resources`` (so the same
calls work in a checkout, an editable install and an installed wheel; never a path relative to
the working directory or to the checkout's parent):

* **traces** (``experiments/data/traces/``): the four real public traces (NYC taxi, AMZN tweets,
  an AWS ELB, World Cup 1998 requests per minute) with their ``README.md`` (sources, commits,
  blob ids, licences) and ``NOTICE-WC98.txt`` (the ITA terms, which must travel with the WC98
  file). ``trace("nab_nyc_taxi.csv")``, ``traces_dir()``.
* **examples** (``experiments/data/examples/``, in a checkout a link to the top-level
  ``examples/``): the example model files (``*.yaml``) and run configurations (``*.toml``).
  ``example("wordcount.yaml")``, ``examples_dir()``, ``list_examples()``, ``copy_examples(dir)``.

User files never go through here: ``--trace FILE`` and every ``MODEL`` argument take any path.
This module imports nothing from augury's other packages, so any layer may use it.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
from importlib import resources
from pathlib import Path

DATA_PACKAGE = "experiments.data"
TRACES = "traces"
EXAMPLES = "examples"
EXAMPLE_SUFFIXES = (".yaml", ".yml", ".json", ".toml")
"""What counts as an example file (model files and run configurations)."""

_extracted = contextlib.ExitStack()
atexit.register(_extracted.close)


class BundledFileNotFound(FileNotFoundError):
    """A name that is not among the bundled files (the message lists the ones that are)."""


def _dir(kind: str) -> Path:
    """The bundled directory ``kind`` as a real filesystem path (extracted once, for the life of
    the process, when the package is not on the filesystem, e.g. inside a zip)."""
    root = resources.files(DATA_PACKAGE) / kind
    if isinstance(root, Path):
        return root
    return _extracted.enter_context(resources.as_file(root))  # pragma: no cover (zip installs)


def data_dir() -> Path:
    """The bundled data's root: ``traces/`` and ``examples/`` under it."""
    root = resources.files(DATA_PACKAGE)
    if isinstance(root, Path):
        return root
    return _extracted.enter_context(resources.as_file(root))  # pragma: no cover (zip installs)


def traces_dir() -> Path:
    """The directory of the bundled real traces (CSV files, ``README.md``, notices)."""
    return _dir(TRACES)


def examples_dir() -> Path:
    """The directory of the bundled example model files and run configurations."""
    return _dir(EXAMPLES)


def list_traces() -> list[str]:
    """File names of the bundled traces (``*.csv``), sorted."""
    return sorted(p.name for p in traces_dir().iterdir() if p.suffix == ".csv")


def list_examples() -> list[str]:
    """File names of the bundled examples (model files and run configurations), sorted."""
    return sorted(p.name for p in examples_dir().iterdir()
                  if p.is_file() and p.suffix in EXAMPLE_SUFFIXES)


def _named(directory: Path, name: str, known: list[str], what: str) -> Path:
    path = directory / name
    if name not in known or not path.is_file():
        raise BundledFileNotFound(f"no bundled {what} named {name!r} (bundled: {', '.join(known)})")
    return path


def trace(name: str) -> Path:
    """The bundled trace ``name`` (e.g. ``"nab_nyc_taxi.csv"``)."""
    return _named(traces_dir(), name, list_traces(), "trace")


def example(name: str) -> Path:
    """The bundled example ``name`` (e.g. ``"wordcount.yaml"``)."""
    return _named(examples_dir(), name, list_examples(), "example")


def copy_examples(dest: str | Path, names: list[str] | None = None, overwrite: bool = False) -> list[Path]:
    """Copy the bundled examples (all, or ``names``) into ``dest`` (created if missing).
    Refuses to replace an existing file unless ``overwrite``; returns the written paths."""
    dest = Path(dest)
    sources = [example(n) for n in (names if names is not None else list_examples())]
    clashes = [str(dest / s.name) for s in sources if (dest / s.name).exists()]
    if clashes and not overwrite:
        raise FileExistsError(f"would overwrite {', '.join(clashes)}")
    dest.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copyfile(s, dest / s.name)) for s in sources]
