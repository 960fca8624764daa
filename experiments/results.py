"""Regenerate ``docs/RESULTS.md`` (and the README's headline block) from the mlflow runs.

    python -m experiments.results --write docs/RESULTS.md [--readme README.md]
    python -m experiments.results --check docs/RESULTS.md [--readme README.md]

For every experiment of the suite (``experiments.harness.experiment_names``) it takes the
latest *finished* run in the mlflow experiment ``augury-<name>`` on
``experiments.tracking.tracking_uri()``, preferring a full run over a ``--quick`` one, and
writes: which run it is (full or quick, run id, start date, seed, wall time, commit), the run's
``summary.md``, a table of its headline metrics (the module's ``HEADLINE``, else its first
metrics) with the values mlflow holds, every ``tables/*.csv`` as Markdown (long tables cut, and
said so), and its figures, copied into ``docs/results/<name>/`` and linked. An experiment
without a finished run in this store keeps its section (and figures, and README rows) from the
file being regenerated, marked as carried over with the run id it names: mlflow stores are
local, so a fresh checkout that re-runs one experiment must not erase the others' evidence. An
experiment with neither gets "not run yet". Nothing in the file is typed by hand.

``--write`` also replaces the block between ``<!-- results:begin -->`` and
``<!-- results:end -->`` in the README with the headline numbers. ``--check`` regenerates
everything in memory and exits 1 when the file, the figures or the README block differ from
what the runs logged (0 when they match, 2 on bad input, 3 when mlflow cannot be read).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

import pandas as pd

from experiments.harness import experiment_names, headline, load_experiment, mlflow_experiment_name
from modeler.errors import AuguryError

REPO = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
MAX_TABLE_ROWS = 40
"""Longer tables are cut to this many rows in RESULTS.md (the run keeps the whole CSV)."""
HEADLINE_FALLBACK = 8
"""Metrics quoted when an experiment names no ``HEADLINE``."""


class ResultsError(AuguryError):
    """RESULTS.md or the README cannot be written or checked (missing markers, bad path)."""


@dataclass(frozen=True)
class RunRecord:
    """One experiment's chosen run, with its artifacts downloaded."""

    name: str
    description: str
    run_id: str
    quick: bool
    seed: str
    started: str
    """Start time, UTC, ``YYYY-MM-DD HH:MM``."""
    wall_seconds: float
    commit: str
    metrics: Mapping[str, float]
    params: Mapping[str, str]
    headline: tuple[str, ...]
    summary: str
    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    figures: Mapping[str, Path] = field(default_factory=dict)
    """figure file name -> downloaded file."""


# ------------------------------------------------------------------------- reading mlflow


def latest_run(client, name: str):
    """The latest finished run of experiment ``name``: the newest full run, else the newest
    quick run, else None."""
    found = client.get_experiment_by_name(mlflow_experiment_name(name))
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id],
                              filter_string=f"attributes.status = 'FINISHED' and tags.`augury.experiment` = '{name}'",
                              order_by=["attributes.start_time DESC"], max_results=1000)
    full = [r for r in runs if r.data.tags.get("augury.quick") == "false"]
    if full:
        return full[0]
    return runs[0] if runs else None


def collect(package: str | None = None, download_dir: Path | None = None) -> dict[str, RunRecord | None]:
    """name -> the chosen run (artifacts downloaded under ``download_dir``) or None, for every
    experiment of ``package`` (default: the suite)."""
    import os

    import mlflow

    from experiments.tracking import tracking_uri

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    client = mlflow.MlflowClient(tracking_uri=tracking_uri())
    download_dir = Path(download_dir or tempfile.mkdtemp(prefix="augury-results-"))
    out: dict[str, RunRecord | None] = {}
    for name in experiment_names(package):
        module = load_experiment(name, package)
        run = latest_run(client, name)
        if run is None:
            out[name] = None
            continue
        dst = download_dir / name
        dst.mkdir(parents=True, exist_ok=True)
        local = Path(client.download_artifacts(run.info.run_id, "", str(dst)))
        result = json.loads((local / "result.json").read_text()) if (local / "result.json").is_file() else {}
        tables = {}
        # in the order the experiment returned them (result.json), then any others by name
        order = {key: i for i, key in enumerate(result.get("tables", []))}
        paths = sorted((local / "tables").glob("*.csv")) if (local / "tables").is_dir() else []
        for path in sorted(paths, key=lambda p: (order.get(p.stem, len(order)), p.stem)):
            try:
                tables[path.stem] = pd.read_csv(path)
            except pd.errors.EmptyDataError:
                tables[path.stem] = pd.DataFrame()
        figures = {p.name: p for p in sorted((local / "figures").iterdir())} if (local / "figures").is_dir() else {}
        metrics = {k: float(v) for k, v in run.data.metrics.items()}
        chosen = headline(module) or tuple(k for k in result.get("metrics", metrics) if k in metrics)[:HEADLINE_FALLBACK]
        out[name] = RunRecord(
            name=name, description=str(getattr(module, "DESCRIPTION", "")), run_id=run.info.run_id,
            quick=run.data.tags.get("augury.quick") == "true", seed=run.data.tags.get("augury.seed", "?"),
            started=datetime.fromtimestamp(run.info.start_time / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M"),
            wall_seconds=metrics.get("wall_seconds", math.nan),
            commit=run.data.tags.get("augury.git_commit", "unknown"),
            metrics=metrics, params=dict(run.data.params), headline=tuple(chosen),
            summary=(local / "summary.md").read_text(encoding="utf-8").strip() if (local / "summary.md").is_file() else "",
            tables=tables, figures=figures)
    return out


# ------------------------------------------------------------------------------ rendering


def fmt(value) -> str:
    """Numbers to 4 significant digits; NaN and missing as an em dash."""
    if value is None:
        return "—"
    if isinstance(value, (bool,)):
        return str(value)
    if isinstance(value, (int,)) and not isinstance(value, bool):
        return str(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value).replace("|", "\\|").replace("\n", " ")
    if math.isnan(number):
        return "—"
    if number.is_integer() and abs(number) < 1e15:
        return str(int(number))
    return f"{number:.4g}"


def markdown_table(frame: pd.DataFrame, max_rows: int = MAX_TABLE_ROWS) -> str:
    if frame.empty:
        return "(empty table)"
    shown = frame.head(max_rows)
    lines = ["| " + " | ".join(str(c) for c in frame.columns) + " |",
             "|" + "---|" * len(frame.columns)]
    for row in shown.itertuples(index=False):
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    if len(frame) > max_rows:
        lines.append("")
        lines.append(f"(first {max_rows} of {len(frame)} rows; the whole table is the run's artifact)")
    return "\n".join(lines)


def _run_line(r: RunRecord) -> str:
    return (f"{'Full' if not r.quick else 'Quick (`--quick`)'} run `{r.run_id}`, started {r.started} UTC, "
            f"seed {r.seed}, wall time {fmt(r.wall_seconds)} s, commit `{r.commit[:12]}`.")


def _headline_rows(r: RunRecord) -> list[tuple[str, str]]:
    return [(k, fmt(r.metrics.get(k))) for k in r.headline]


def evidence_lines(name: str) -> list[str]:
    from experiments.evidence import lines

    return lines(name)


CARRIED = ("*Carried over from the previous RESULTS.md: this run is not in the mlflow store the file "
           "was regenerated from.*")


def previous_sections(text: str) -> dict[str, str]:
    """The experiment sections of an existing RESULTS.md: name -> its body (the lines after its
    ``## name`` heading, up to the next ``## `` heading; the Peers section is not one)."""
    out: dict[str, str] = {}
    name, body = None, []
    for line in text.splitlines():
        if line.startswith("## "):
            if name is not None:
                out[name] = "\n".join(body).strip("\n")
            name, body = line[3:].strip(), []
            if name == "Peers":
                name = None
        elif name is not None:
            body.append(line)
    if name is not None:
        out[name] = "\n".join(body).strip("\n")
    return {k: v for k, v in out.items() if not v.startswith("Not run yet")}


def previous_readme_rows(text: str) -> dict[str, list[str]]:
    """The README block's table rows by experiment name (the first column)."""
    if BEGIN not in text or END not in text:
        return {}
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    out: dict[str, list[str]] = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) >= 2 and cells[0] not in ("experiment", "---"):
            out.setdefault(cells[0], []).append(line)
    return out


def render(records: Mapping[str, RunRecord | None], figures_rel: str = "results",
           previous: Mapping[str, str] | None = None) -> tuple[str, dict[str, bytes]]:
    """RESULTS.md text and the figure files it links (relative path -> bytes). ``previous``: the
    sections of the file being regenerated (``previous_sections``), kept for experiments without
    a run (their figures stay as they are on disk)."""
    previous = previous or {}
    files: dict[str, bytes] = {}
    out = ["# Results", "",
           "Generated by `python -m experiments.results --write docs/RESULTS.md` from the mlflow runs "
           "of `augury experiment run NAME` (the latest finished run per experiment, a full run "
           "preferred over a `--quick` one). Do not edit by hand: rerun the experiments and the "
           "generator. Ground truth is the testbed simulator unless an experiment says otherwise.", ""]
    for name, r in records.items():
        state = (" (carried over)" if name in previous else " (not run yet)") if r is None else \
            (" (quick run)" if r.quick else "")
        out.append(f"- [{name}](#{name})" + state)
    out.append("")
    for name, r in records.items():
        out.append(f"## {name}")
        out.append("")
        if r is None and name in previous:
            body = previous[name]
            out.append(body if body.startswith(CARRIED) else f"{CARRIED}\n\n{body}")
            out.append("")
            continue
        if r is None:
            out.append("Not run yet (no finished run in the mlflow experiment "
                       f"`{mlflow_experiment_name(name)}`). Run `augury experiment run {name}`.")
            out.append("")
            continue
        if r.description:
            out.append(f"*{r.description}*")
            out.append("")
        evidence = evidence_lines(name)
        if evidence:
            out.append("What the evidence rests on (`experiments.evidence`):")
            out.append("")
            out.extend(evidence)
            out.append("")
        out.append(_run_line(r))
        out.append("")
        if r.summary:
            out.append(r.summary)
            out.append("")
        rows = _headline_rows(r)
        if rows:
            out.append("| headline metric | value |")
            out.append("|---|---|")
            out.extend(f"| {k} | {v} |" for k, v in rows)
            out.append("")
        for key, table in r.tables.items():
            out.append(f"### {name}: {key}")
            out.append("")
            out.append(markdown_table(table))
            out.append("")
        for fname, path in r.figures.items():
            rel = f"{figures_rel}/{name}/{fname}"
            files[rel] = Path(path).read_bytes()
            out.append(f"![{name}: {Path(fname).stem}]({rel})")
            out.append("")
    out.extend(render_peers())
    return "\n".join(out).rstrip() + "\n", files


def render_peers() -> list[str]:
    """The "Peers" section: per re-implemented peer, what is reproduced, its assumptions and every
    known difference from the original (``experiments.baselines.PEERS``)."""
    from experiments.baselines import PEERS

    out = ["## Peers", "",
           "The baselines are re-implementations (`experiments/baselines.py`); every duration is in "
           "policy (trace) seconds with its published value, whatever the replay's compression.", ""]
    for p in PEERS:
        out += [f"### {p['name']}", "", f"*{p['source']}*", "",
                f"- **Reproduced:** {p['reproduced']}", f"- **Assumptions:** {p['assumptions']}",
                f"- **Differences from the original:** {p['differences']}", ""]
    return out


def render_readme_block(records: Mapping[str, RunRecord | None], results_link: str = "docs/RESULTS.md",
                        previous: Mapping[str, list[str]] | None = None) -> str:
    """The README's headline table; ``previous``: its rows by experiment (``previous_readme_rows``),
    kept for experiments without a run."""
    previous = previous or {}
    lines = [f"Headline numbers, generated from the latest experiment runs (details and plots in "
             f"[{results_link}]({results_link}); error metrics are fractions, 0.05 = 5 %):", "",
             "| experiment | run | metric | value |", "|---|---|---|---|"]
    for name, r in records.items():
        if r is None and previous.get(name) and "not run yet" not in previous[name][0]:
            lines.extend(previous[name])
            continue
        if r is None:
            lines.append(f"| {name} | not run yet | | |")
            continue
        run = f"{'quick' if r.quick else 'full'}, {r.started[:10]}"
        for k, v in _headline_rows(r):
            lines.append(f"| {name} | {run} | {k} | {v} |")
    return "\n".join(lines)


def replace_block(text: str, block: str, where: str) -> str:
    if BEGIN not in text or END not in text:
        raise ResultsError(f"no {BEGIN} ... {END} markers", file=where)
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{block}\n{END}{tail}"


# ---------------------------------------------------------------------------- write, check


def _previous(results_md: Path, readme: Path | None) -> tuple[dict[str, str], dict[str, list[str]]]:
    sections = previous_sections(results_md.read_text(encoding="utf-8")) if results_md.is_file() else {}
    rows = previous_readme_rows(readme.read_text(encoding="utf-8")) if readme is not None and readme.is_file() else {}
    return sections, rows


def write(results_md: Path, readme: Path | None, records: Mapping[str, RunRecord | None]) -> None:
    sections, rows = _previous(results_md, readme)
    text, files = render(records, previous=sections)
    figures_root = results_md.parent / "results"
    for name, r in records.items():
        if r is not None or name not in sections:  # a carried-over section keeps its figures
            shutil.rmtree(figures_root / name, ignore_errors=True)
    for rel, data in files.items():
        path = results_md.parent / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    results_md.write_text(text, encoding="utf-8")
    if readme is not None:
        readme.write_text(replace_block(readme.read_text(encoding="utf-8"),
                                        render_readme_block(records, previous=rows), str(readme)), encoding="utf-8")


def check(results_md: Path, readme: Path | None, records: Mapping[str, RunRecord | None]) -> list[str]:
    """Differences between the files and what the runs logged (empty when they match)."""
    problems = []
    if not results_md.is_file():
        return [f"{results_md}: missing"]
    sections, rows = _previous(results_md, readme)
    text, files = render(records, previous=sections)
    current = results_md.read_text(encoding="utf-8")
    if current != text:
        old, new = current.splitlines(), text.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        problems.append(f"{results_md}: differs from the runs from line {first + 1} "
                        f"(file: {old[first] if first < len(old) else '<end>'!r}; "
                        f"runs: {new[first] if first < len(new) else '<end>'!r})")
    for rel, data in files.items():
        path = results_md.parent / rel
        if not path.is_file() or path.read_bytes() != data:
            problems.append(f"{path}: missing or differs from the run's figure")
    figures_root = results_md.parent / "results"
    for name, r in records.items():
        if r is None and name in sections:  # carried over: its figures are what the section links
            continue
        for path in sorted((figures_root / name).glob("*")) if (figures_root / name).is_dir() else []:
            if f"results/{name}/{path.name}" not in files:
                problems.append(f"{path}: stale figure (not in the chosen run)")
    if readme is not None:
        have = readme.read_text(encoding="utf-8")
        want = replace_block(have, render_readme_block(records, previous=rows), str(readme))
        if have != want:
            problems.append(f"{readme}: the {BEGIN} block differs from the runs")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, metavar="RESULTS_MD", help="regenerate this file (docs/RESULTS.md)")
    mode.add_argument("--check", type=Path, metavar="RESULTS_MD", help="exit 1 if this file differs from the runs")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md",
                        help="README with the results markers (default: the repository's)")
    parser.add_argument("--no-readme", action="store_true", help="leave the README alone")
    args = parser.parse_args(argv)
    readme = None if args.no_readme else args.readme
    try:
        with tempfile.TemporaryDirectory(prefix="augury-results-") as tmp:
            try:
                records = collect(download_dir=Path(tmp))
            except AuguryError:
                raise
            except Exception as err:  # noqa: BLE001 - mlflow store unreadable
                print(f"experiments.results: error: cannot read the mlflow runs ({err})", file=sys.stderr)
                return 3
            if args.write:
                write(args.write, readme, records)
                print(f"wrote {args.write} ({sum(r is not None for r in records.values())} of "
                      f"{len(records)} experiments with a run in this store; the others carried over "
                      "from the file when it had them)")
                return 0
            problems = check(args.check, readme, records)
    except AuguryError as err:
        print(f"experiments.results: error: {err}", file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"{args.check} matches the runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
