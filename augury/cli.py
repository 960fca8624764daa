"""The ``augury`` command line: parses, calls, prints.

Each subcommand lives in its own module under ``augury/commands/`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` (a callable
taking the parsed ``argparse.Namespace`` and returning an exit code). Modules are
discovered at start-up, so adding a command never touches this file.

Exit codes (public contract): 0 success; 1 a negative answer that is not an
error (infeasible plan, violated validation); 2 bad input (one line on stderr,
no traceback); 3 an internal or environment failure.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from typing import Sequence

from augury import __version__
from augury.errors import AuguryError

EXIT_OK = 0
EXIT_NEGATIVE = 1
EXIT_BAD_INPUT = 2
EXIT_FAILURE = 3


class _Parser(argparse.ArgumentParser):
    """argparse exits with 2 on bad usage already; keep its message one line (no usage block)."""

    def error(self, message: str) -> None:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="augury", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"augury {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    import augury.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"augury.commands.{info.name}")
        module.register(subparsers)
    return parser


_ENVIRONMENT_MODULES = ("py4j", "pyspark", "mlflow", "requests", "urllib3", "sqlalchemy")
"""Errors raised from these libraries are environment failures (Spark's JVM, the tracking
store): exit 3 with one line."""


def _one_line(text: str) -> str:
    """An error message is one line on stderr, whatever text it quotes."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip()) or text.strip()


def environment_failure(err: BaseException) -> str | None:
    """The one-line message of an environment failure (exit 3), or None when ``err`` is not one.

    The one mapping for errors augury did not raise itself: an ``OSError`` (a read-only or full
    disk, no permission, a missing file system) names the file; an error from Spark's JVM or the
    tracking libraries gives its first line (a Java stack trace is cut to its message).
    """
    if isinstance(err, OSError):
        why = err.strerror or str(err) or type(err).__name__
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        return f"{where}{why} (environment failure)"
    if (type(err).__module__ or "").startswith(_ENVIRONMENT_MODULES):
        text = str(err).strip()
        java = getattr(err, "java_exception", None)  # py4j: "An error occurred while calling o56..."
        if java is not None:
            try:
                text = str(java.toString()).strip() or text
            except Exception:  # the JVM may be gone
                pass
        first = text.splitlines()[0] if text else type(err).__name__
        return f"{type(err).__name__}: {first[:300]} (environment failure)"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return int(args.func(args) or 0)
    except AuguryError as err:
        print(f"augury {args.command}: error: {_one_line(str(err))}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:  # output piped into `head` & co.
        sys.stderr.close()
        return EXIT_OK
    except Exception as err:
        what = environment_failure(err)
        if what is None:
            raise  # a bug: keep the traceback
        print(f"augury {args.command}: error: {_one_line(what)}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"augury {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
