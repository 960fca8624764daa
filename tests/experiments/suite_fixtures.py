"""A throw-away experiment suite package for harness and results tests (no simulation)."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

TINY = '''
"""A tiny test-only experiment."""
from pathlib import Path

import pandas as pd

from experiments.harness import ExperimentResult

NAME = "tiny"
DESCRIPTION = "test-only experiment"
HEADLINE = ("score", "missing_metric")
ROWS = {rows}


def run(ctx):
    ctx.progress("tiny: running")
    fig = Path(ctx.workdir) / "tiny_plot.png"
    fig.write_bytes(b"not really a png " + str(ctx.seed).encode())
    table = pd.DataFrame({{"case": [f"c{{i}}" for i in range(ROWS)],
                           "value": [ctx.seed + i / 8 for i in range(ROWS)]}})
    return ExperimentResult(
        params={{"cases": ROWS, "mode": "quick" if ctx.quick else "full"}},
        metrics={{"score": 0.125 + ctx.seed, "other": 2.5, "nan_metric": float("nan")}},
        tables={{"cases": table}},
        figures={{"plot": fig}},
        summary=f"tiny summary for seed {{ctx.seed}}",
    )
'''

NORUN = '''
NAME = "norun"
DESCRIPTION = "never run in the tests"


def run(ctx):
    raise RuntimeError("not meant to run")
'''

BAD_RESULT = '''
NAME = "badresult"
DESCRIPTION = "returns the wrong type"


def run(ctx):
    return {"metrics": {}}
'''

BROKEN = '''
import a_module_that_does_not_exist  # noqa: F401
NAME = "broken"
'''

MULTI = '''
"""A test-only experiment that takes several seeds and model files."""
import pandas as pd

from experiments.harness import ExperimentResult

NAME = "multi"
DESCRIPTION = "takes seeds and models"
INPUTS = ("seeds", "models")


def run(ctx):
    rows = pd.DataFrame({"seed": list(ctx.seeds or (ctx.seed,))})
    models = pd.DataFrame({"model": [p.name for p in ctx.models]})
    return ExperimentResult(params={"seeds": len(rows)}, metrics={"seeds": float(len(rows))},
                            tables={"runs": rows, "models": models}, summary="multi")
'''

_counter = itertools.count()


def make_suite(root: Path, rows: int = 3) -> str:
    """Write a suite package under ``root`` (put on sys.path by the caller); its name."""
    name = f"fake_suite_{root.name.replace('-', '_')}_{next(_counter)}"
    pkg = root / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""fake suite"""\n')
    (pkg / "tiny.py").write_text(textwrap.dedent(TINY.format(rows=rows)))
    (pkg / "norun.py").write_text(NORUN)
    (pkg / "badresult.py").write_text(BAD_RESULT)
    (pkg / "broken.py").write_text(BROKEN)
    (pkg / "multi.py").write_text(MULTI)
    (pkg / "helpers.py").write_text("X = 1\n")  # no NAME: not an experiment
    (pkg / "_private.py").write_text("NAME = 'private'\ndef run(ctx):\n    pass\n")
    return name
