"""``augury history summarize --store DIR [--window 60s] [--full] [--spark-master URL] [--json] [--verbose]``."""

from __future__ import annotations

import argparse
import sys

from augury.commands._common import parse_duration_s, print_json
from augury.commands._logs import add_verbose_flag, library_output_to_log


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "history", help="work with a metric history store (summarize)",
        description="Operations on a history store built by `augury ingest`.",
    )
    sub = parser.add_subparsers(dest="history_command", metavar="SUBCOMMAND")
    summarize = sub.add_parser(
        "summarize", help="run the Spark pipeline: raw rows -> operator_windows, edge_windows, source_rates",
        description="Summarize every job's raw rows into the operator_windows, edge_windows and "
                    "source_rates tables of the store (replaced atomically). After the first run only "
                    "the windows touched by raw rows added since are recomputed (--full: everything). "
                    "See docs/history.md.",
    )
    summarize.add_argument("--store", required=True, metavar="DIR", help="store directory")
    summarize.add_argument("--window", metavar="DURATION",
                           help="output window, a multiple of the raw windows (default: the raw window)")
    summarize.add_argument("--full", action="store_true",
                           help="recompute every window (default: only those touched since the last summarize)")
    summarize.add_argument("--spark-master", default="local[2]", metavar="URL",
                           help="Spark master (default local[2])")
    summarize.add_argument("--driver-memory", metavar="SIZE", help="Spark driver memory, e.g. 2g")
    summarize.add_argument("--json", action="store_true", help="print one JSON object")
    add_verbose_flag(summarize)
    summarize.set_defaults(func=run_summarize)
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_summarize(args: argparse.Namespace) -> int:
    from history.summarize import summarize_store

    window = parse_duration_s(args.window, "--window") if args.window else None
    # Spark's own output (start-up lines, a failed task's Java stack) goes to a log file, named
    # after a success (an error stays one line; a JVM that cannot start names it in its error);
    # --verbose: everything on the terminal.
    with library_output_to_log(args, "history-summarize", lambda msg: None) as log:
        report = summarize_store(args.store, window_s=window, master=args.spark_master,
                                 driver_memory=args.driver_memory, full=args.full)
    if args.json:
        print_json({**report.to_dict(), "log_file": str(log) if log else None})
    elif report.mode == "unchanged":
        print(f"nothing to summarize: no raw rows added since the last summarize ({report.raw_rows} raw rows, "
              f"{report.window_s:g} s windows; --full recomputes them)")
    else:
        rows = ", ".join(f"{name} {n}" for name, n in report.rows.items())
        how = (f"full rebuild: {report.full_reason}" if report.mode == "full" else
               f"incremental: read {report.raw_rows_read} raw rows, recomputed {report.windows_recomputed} window(s)")
        print(f"summarized {report.raw_rows} raw rows of {len(report.jobs)} job(s) "
              f"({', '.join(report.jobs)}) into {report.window_s:g} s windows in "
              f"{report.seconds:.1f} s ({how}): {rows}" + (f"\n(Spark's own output: {log}; --verbose shows it here)"
                                                    if log else ""))
    return 0
