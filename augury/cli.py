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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return int(args.func(args) or 0)
    except AuguryError as err:
        print(f"augury {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:  # output piped into `head` & co.
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"augury {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
