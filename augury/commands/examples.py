"""``augury examples list|copy DIR``: the bundled example model files and run configurations.

``list`` prints one bundled file per line (``--json``: ``{"examples": [...], "dir": ...}``);
``copy DIR [NAME...]`` copies them (all, or the named ones) into DIR to start from, refusing to
overwrite an existing file unless ``--force``. The files come from ``experiments.bundled``.
"""

from __future__ import annotations

import argparse

from augury.commands._common import print_json
from augury.errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("examples", help="list or copy the bundled example files",
                                   description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="list the bundled example model files and run configurations")
    ls.add_argument("--json", action="store_true", help="print one JSON object")
    ls.set_defaults(func=run_list)
    cp = sub.add_parser("copy", help="copy the bundled examples into DIR")
    cp.add_argument("dir", metavar="DIR", help="destination directory (created if missing)")
    cp.add_argument("names", metavar="NAME", nargs="*", help="only these files (default: all)")
    cp.add_argument("--force", action="store_true", help="overwrite existing files")
    cp.add_argument("--json", action="store_true", help="print one JSON object")
    cp.set_defaults(func=run_copy)


def run_list(args: argparse.Namespace) -> int:
    from experiments import bundled

    names = bundled.list_examples()
    if args.json:
        print_json({"examples": names, "dir": str(bundled.examples_dir())})
    else:
        print("\n".join(names))
    return 0


def run_copy(args: argparse.Namespace) -> int:
    from experiments import bundled

    known = bundled.list_examples()
    for name in args.names:
        if name not in known:
            raise UsageError(f"no such bundled example (bundled: {', '.join(known)})", field="NAME", value=name)
    try:
        written = bundled.copy_examples(args.dir, args.names or None, overwrite=args.force)
    except FileExistsError as err:
        raise UsageError(f"{err} (--force overwrites)", field="DIR", value=args.dir) from None
    except OSError as err:
        raise UsageError(f"cannot write there: {err.strerror or err}", field="DIR", value=args.dir) from None
    if args.json:
        print_json({"copied": [str(p) for p in written]})
    else:
        for p in written:
            print(p)
    return 0
