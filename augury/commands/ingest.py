"""``augury ingest --format FMT PATH... --store DIR [--job NAME] [--json]``: metrics -> store."""

from __future__ import annotations

import argparse

from augury.commands._common import parse_duration_s, print_json

FORMATS = ("normalized", "flink-rest", "prometheus", "heron-tracker")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ingest", help="validate metric files and add them to a history store",
        description="Read metric files (normalized CSV/JSON lines/Parquet, Flink REST captures, "
                    "Prometheus text of Flink's reporter, Heron Tracker metricstimeline JSON), "
                    "quarantine invalid rows with a reason, and merge the rest into the store "
                    "(idempotent, atomic). See docs/history.md.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="metric files")
    parser.add_argument("--format", required=True, choices=FORMATS, help="input format")
    parser.add_argument("--store", required=True, metavar="DIR", help="store directory (created if absent)")
    parser.add_argument("--job", help="job name for every row (engine captures often lack it)")
    parser.add_argument("--window", metavar="DURATION",
                        help="window length of the capture (per-second gauges x window = counts); "
                             "default: the file's, else 10s (Heron: 60s)")
    parser.add_argument("--ts", metavar="TIME",
                        help="window start (ISO 8601, UTC) for samples without timestamps (Prometheus)")
    parser.add_argument("--edges", metavar="A->B,...",
                        help="downstream operators; an operator with one downstream gets its output "
                             "attributed to that edge")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any row was quarantined")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from history.adapters import AdapterOptions, parse_edges
    from history.ingest import ingest

    window = parse_duration_s(args.window, "--window") if args.window else None
    if window is not None and window <= 0:
        from augury.errors import UsageError

        raise UsageError("the window must be positive", field="--window", value=args.window)
    options = AdapterOptions(job=args.job, window_s=window, ts=args.ts, edges=parse_edges(args.edges))
    report = ingest(args.paths, args.format, args.store, options)
    if args.json:
        print_json(report.to_dict())
    else:
        print(format_report(report))
    return 1 if args.strict and report.quarantined_total else 0


def format_report(report) -> str:
    lines = [
        f"read {report.rows_read} rows from {len(report.files)} file(s) into {report.store} "
        f"(store version {report.version})",
        f"  accepted     {report.accepted}  (new {report.new}, already stored {report.already_stored})",
        f"  duplicates   {report.duplicates}  (identical rows merged)",
        f"  quarantined  {report.quarantined_total}"
        + ("  (" + ", ".join(f"{k} {v}" for k, v in report.quarantined.items()) + ")"
           if report.quarantined else ""),
    ]
    if report.ignored:
        total = sum(report.ignored.values())
        names = ", ".join(list(report.ignored)[:5]) + (", ..." if len(report.ignored) > 5 else "")
        lines.append(f"  ignored      {total} engine samples outside the vocabulary ({names})")
    return "\n".join(lines)
