"""modeler.errors: the root of augury's errors, importable from every layer (issue 17, point 8)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from modeler.errors import AuguryError, ModelError, UsageError

ROOT = Path(__file__).resolve().parents[2]
LOWER_LAYERS = ("history", "modeler", "scheduler", "experiments")


def test_augury_errors_reexports_the_same_classes():
    import augury.errors

    assert augury.errors.AuguryError is AuguryError
    assert augury.errors.UsageError is UsageError
    assert issubclass(ModelError, AuguryError) and issubclass(UsageError, AuguryError)


def test_message_names_file_field_and_value():
    err = UsageError("expected a number", file="m.yaml", field="--rate", value="x")
    assert str(err) == "m.yaml: field '--rate' = 'x': expected a number"
    assert err.exit_code == 2


def test_huge_values_are_named_briefly_on_one_line():
    """Issue 22: a 400-digit integer or a 5,000-character value in an error is shown by its size."""
    assert "= <401-digit integer>:" in str(UsageError("too big", field="p", value=10**400))
    assert "= '<400-digit number>':" in str(UsageError("too big", field="p", value="9" * 400))
    long = str(UsageError("bad", field="job", value="x" * 5000))
    assert len(long) < 260 and "(5,002 characters)" in long
    assert str(UsageError("bad", field="p", value=12)) == "field 'p' = 12: bad"


def test_importing_the_root_is_cheap():
    code = ("import sys, modeler.errors; "
            "heavy = [m for m in ('numpy', 'pandas', 'pyspark', 'augury') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""


def _imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("package", LOWER_LAYERS)
def test_lower_layers_never_import_the_command_line(package):
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}"
           for path in sorted((ROOT / package).rglob("*.py"))
           for line, name in _imports_of(path)
           if name == "augury" or name.startswith("augury.")]
    assert bad == []


def test_a_field_or_file_with_a_line_break_stays_one_line():
    err = UsageError("bad", file="a\nb.json", field="op\r\nx", value="v\n")
    assert len(str(err).splitlines()) == 1 and "op\\r\\nx" in str(err)
