"""``augury log --state DB [--json] [--limit N]``: the control loop's action log and blacklist."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

from augury.commands._common import print_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("log", help="show the control loop's action log and blacklist",
                                   description="Read a state database written by `augury run`.")
    parser.add_argument("--state", required=True, metavar="DB", help="SQLite state file")
    parser.add_argument("--limit", type=int, help="only the newest N actions")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def run(args: argparse.Namespace) -> int:
    from scheduler.state import SQLiteStateStore

    store = SQLiteStateStore.open_existing(args.state)
    actions = store.actions(limit=args.limit)
    blacklist = store.blacklist()
    meta = store.get_meta("loop") or {}
    if args.json:
        print_json({"actions": [a.to_dict() for a in actions],
                    "blacklist": [e.__dict__ for e in blacklist],
                    "trust": (meta.get("trust") or {}).get("state"),
                    "last_action_s": meta.get("last_action_s")})
        return 0
    print(f"model trust: {(meta.get('trust') or {}).get('state', '-')}   actions: {len(actions)}")
    for a in actions:
        target = ", ".join(f"{k}={a.to_config.get(k)}" for k in a.operators) if a.kind == "scale" else \
            f"{','.join(a.operators)} {a.detail}"
        print(f"#{a.id} [{_when(a.at_s)}] {a.kind} {target} ({a.diagnosis}) -> {a.outcome}"
              + (" [advisor]" if a.advisor else ""))
        for r in a.reasons:
            print(f"    - {r}")
        if a.expected:
            print("    expected: " + ", ".join(f"{k} {v:.3g}" for k, v in a.expected.items()))
        if a.measured:
            print("    measured: " + ", ".join(f"{k} {v:.3g}" for k, v in a.measured.items()))
    if blacklist:
        print("blacklist:")
        for e in blacklist:
            print(f"  {e.action} {e.operator} for {e.diagnosis} in load band {e.load_band} until "
                  f"{_when(e.until_s)} (strike {e.strikes}: {e.reason})")
    return 0
