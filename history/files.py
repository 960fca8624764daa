"""Output files written atomically: a reader (or a crash) sees the old file or the whole new one.

``atomic_path(path)`` yields a temporary path next to ``path`` (same directory, so the final
``os.replace`` is atomic); whatever writes it (pandas, pyarrow, matplotlib, ``Path.write_text``)
runs inside the ``with``; on success the file is flushed to disk and renamed over ``path``, on any
exception the temporary file is removed and ``path`` is untouched. ``write_text`` and
``write_bytes`` are the one-call forms. ``check_writable(path, flag)`` fails fast, before any
work, when the output cannot be created.

An output that cannot be written (read-only file system, no permission, a missing parent that
cannot be created, disk full) is an environment failure: ``OutputError``, exit code 3, one line
naming the path. The metric store commits the same way (``history.store``).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Iterator

from history.errors import OutputError
from modeler.errors import UsageError


def _fail(path: Path, err: OSError, flag: str | None) -> OutputError:
    why = err.strerror or type(err).__name__
    return OutputError(f"cannot write the output ({why})", file=str(path), field=flag)


def check_writable(path: str | Path, flag: str | None = None, *, create_parent: bool = True) -> Path:
    """Fail now (``OutputError``) when ``path`` could not be written later: ``path`` is a
    directory, or its directory (or, when that is missing and ``create_parent``, the nearest
    existing directory above it, where the writer will create it) is not a writable directory.

    Creates nothing that stays: a command that then fails on its input leaves no empty
    directories behind (the writer, ``atomic_path``, creates a missing directory when it writes)."""
    path = Path(path)
    try:
        if path.is_dir():
            raise OutputError("is a directory, expected a file", file=str(path), field=flag)
        parent = path.parent
        existing = parent
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
        if existing != parent and not create_parent:
            raise OutputError("the directory does not exist", file=str(path), field=flag)
        if not existing.is_dir():
            raise OutputError(f"cannot write the output ({existing} is not a directory)", file=str(path),
                              field=flag)
        probe = existing / f".{path.name[:64]}.{uuid.uuid4().hex[:8]}.probe"  # [:64]: within NAME_MAX
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise _fail(path, err, flag) from None
    except ValueError as err:  # an embedded NUL: no file can have this name (bad input)
        raise UsageError(f"not a valid file name ({err})", field=flag, value=str(path)) from None
    return path


@contextlib.contextmanager
def atomic_path(path: str | Path, flag: str | None = None) -> Iterator[Path]:
    """A temporary path to write instead of ``path``; renamed over ``path`` when the block ends
    without an exception (``path`` then holds the whole new file), removed otherwise."""
    path = Path(path)
    tmp = path.with_name(f".{path.name[:64]}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")  # any valid name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        if not tmp.exists():  # the writer wrote nothing: an empty file, like open(path, "w")
            tmp.touch()
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())
        os.replace(tmp, path)
    except OSError as err:
        raise _fail(path, err, flag) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_text(path: str | Path, text: str, flag: str | None = None, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path, flag) as tmp:
        tmp.write_text(text, encoding=encoding)
    return Path(path)


def write_bytes(path: str | Path, data: bytes, flag: str | None = None) -> Path:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path, flag) as tmp:
        tmp.write_bytes(data)
    return Path(path)
