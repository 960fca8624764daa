"""The one reader of the documents a user hands augury: model files, proposals, ``augury run``
configurations, testbed settings and fault files, what-if configuration lists, admission mappings.

``read_document(path, fmt, what, error)`` reads a file; ``parse_document(text, fmt, what, error,
source)`` parses text. ``fmt`` is ``"json"``, ``"yaml"`` or ``"toml"``; ``what`` names the
document in messages ("settings file"); ``error`` is the caller's ``AuguryError`` type, raised as
``error(message, file=source)`` (exit code 2: the file is bad input).

Besides each parser's own syntax errors, well-formed but hostile text is refused here, once, for
every document: nesting deeper than the interpreter can recurse (``RecursionError`` from the
YAML, JSON and TOML parsers alike), an integer of more than 4,300 digits (Python's ``int``
conversion limit: a ``ValueError``), text that is not UTF-8, a file name with a NUL. A missing
file or a directory is bad input too; the operating system's other errors (no permission, I/O)
pass unchanged: ``augury.cli`` maps them to an environment failure (exit 3).

Standard library and PyYAML only; no values are checked here (each document's own parser does).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Callable

FORMATS = ("json", "yaml", "toml")


def parse_document(text: str, fmt: str, what: str, error: Callable[..., Exception],
                   source: str | None = None, field: str | None = None) -> Any:
    """The value of ``text`` as a ``fmt`` document; anything unreadable is ``error`` naming
    ``source`` (and ``field``, the flag that named the file, when given)."""
    import yaml

    where = {"file": source, **({"field": field} if field else {})}

    try:
        if fmt == "json":
            return json.loads(text)
        if fmt == "toml":
            return tomllib.loads(text)
        if fmt == "yaml":
            return yaml.safe_load(text)
    except RecursionError:  # thousands of nested [ or {: no document of ours is that deep
        raise error(f"malformed {what}: nested too deeply", **where) from None
    except (yaml.YAMLError, tomllib.TOMLDecodeError, ValueError) as err:  # JSONDecodeError is a ValueError
        detail = " ".join(str(err).split()) or type(err).__name__
        if "integer string conversion" in detail:  # int() beyond sys.get_int_max_str_digits()
            detail = "an integer of more than 4,300 digits"
        raise error(f"malformed {what}: {detail[:300]}", **where) from None
    raise ValueError(f"unknown document format {fmt!r} (one of {', '.join(FORMATS)})")


def read_document(path: str | Path, fmt: str, what: str, error: Callable[..., Exception],
                  field: str | None = None) -> Any:
    """``parse_document`` of the file at ``path`` (UTF-8)."""
    file = str(path)
    where = {"file": file, **({"field": field} if field else {})}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        raise error(f"cannot read {what}: no such file", **where) from None
    except IsADirectoryError:
        raise error(f"cannot read {what}: is a directory", **where) from None
    except UnicodeDecodeError:
        raise error(f"{what} is not UTF-8 text", **where) from None
    except ValueError as err:  # an embedded NUL: no file can have this name
        raise error(f"cannot read {what}: not a valid file name ({err})", **where) from None
    return parse_document(text, fmt, what, error, file, field)
