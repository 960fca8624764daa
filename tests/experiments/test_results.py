"""The RESULTS.md generator: it quotes what the runs logged, picks the right run, and --check
catches a file that no longer matches."""

from __future__ import annotations

import warnings

import pytest

import experiments.harness as harness
from experiments import results
from experiments.harness import run_experiment
from tests.experiments.suite_fixtures import make_suite

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # the fake suite's broken module

README = "# project\n\nintro\n\n<!-- results:begin -->\nstale\n<!-- results:end -->\n\nmore\n"


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A fake suite with three runs of ``tiny`` (quick seed 1, full seed 2, quick seed 3, in
    that order) and none of ``norun``, in a temporary mlflow store."""
    root = tmp_path_factory.mktemp("suite")
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(root))
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        suite = make_suite(root, rows=results.MAX_TABLE_ROWS + 5)
        mp.setattr(harness, "SUITE_PACKAGE", suite)
        runs = {seed: run_experiment("tiny", quick=quick, seed=seed, package=suite)
                for quick, seed in ((True, 1), (False, 2), (True, 3))}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            records = results.collect(suite, download_dir=root / "dl")
        yield suite, runs, records


def test_full_run_is_preferred_over_a_newer_quick_run(logged):
    _, runs, records = logged
    tiny = records["tiny"]
    assert tiny.run_id == runs[2].mlflow_run_id and not tiny.quick and tiny.seed == "2"
    assert records["norun"] is None and records["badresult"] is None


def test_latest_quick_run_is_used_when_there_is_no_full_run(logged, tmp_path):
    import mlflow

    _, runs, _ = logged
    client = mlflow.MlflowClient(tracking_uri=results_uri())
    client.set_terminated(runs[2].mlflow_run_id, status="KILLED")  # no longer a finished run
    try:
        assert results.latest_run(client, "tiny").info.run_id == runs[3].mlflow_run_id
    finally:
        client.set_terminated(runs[2].mlflow_run_id, status="FINISHED")


def results_uri():
    from experiments.tracking import tracking_uri

    return tracking_uri()


def test_rendered_results_quote_the_logged_numbers(logged):
    _, runs, records = logged
    text, files = results.render(records)
    full = runs[2]
    assert f"Full run `{full.mlflow_run_id}`" in text
    assert "seed 2" in text and "wall time" in text
    assert "tiny summary for seed 2" in text
    assert "| score | 2.125 |" in text          # headline metric, the logged value
    assert "| missing_metric | — |" in text     # named but not logged: shown as missing
    assert "| c1 | 2.125 |" in text             # the logged table, as Markdown
    n = results.MAX_TABLE_ROWS + 5
    assert f"(first {results.MAX_TABLE_ROWS} of {n} rows" in text
    assert f"| c{results.MAX_TABLE_ROWS} |" not in text  # cut
    assert "## norun" in text and "Not run yet" in text
    assert files == {"results/tiny/tiny_plot.png": b"not really a png 2"}
    assert "![tiny: tiny_plot](results/tiny/tiny_plot.png)" in text


def test_write_then_check_and_check_detects_mismatches(logged, tmp_path):
    _, runs, records = logged
    docs = tmp_path / "docs"
    docs.mkdir()
    md, readme = docs / "RESULTS.md", tmp_path / "README.md"
    readme.write_text(README)
    (docs / "results" / "tiny").mkdir(parents=True)
    (docs / "results" / "tiny" / "old.png").write_bytes(b"stale")
    results.write(md, readme, records)
    assert (docs / "results" / "tiny" / "tiny_plot.png").read_bytes() == b"not really a png 2"
    assert not (docs / "results" / "tiny" / "old.png").exists()
    body = readme.read_text()
    assert "stale" not in body and body.startswith("# project") and body.endswith("more\n")
    assert "| tiny | full, " in body and "| score | 2.125 |" in body and "| norun | not run yet |" in body
    assert results.check(md, readme, records) == []

    text = md.read_text()
    md.write_text(text.replace("| score | 2.125 |", "| score | 2.2 |"))
    problems = results.check(md, readme, records)
    assert len(problems) == 1 and "differs from the runs" in problems[0] and "2.2" in problems[0]
    md.write_text(text)

    (docs / "results" / "tiny" / "tiny_plot.png").write_bytes(b"edited")
    assert any("tiny_plot.png" in p for p in results.check(md, readme, records))
    results.write(md, readme, records)

    readme.write_text(readme.read_text().replace("2.125", "9.9"))
    assert any("README.md" in p for p in results.check(md, readme, records))


def test_an_experiment_without_a_run_here_keeps_its_previous_section(logged, tmp_path):
    # mlflow stores are local: regenerating in a fresh checkout after re-running one experiment
    # keeps the others' sections, figures and README rows, marked as carried over
    _, _, records = logged
    docs = tmp_path / "docs"
    docs.mkdir()
    md, readme = docs / "RESULTS.md", tmp_path / "README.md"
    readme.write_text(README)
    results.write(md, readme, records)
    assert "## norun\n\nNot run yet" in md.read_text() and "| norun | not run yet |" in readme.read_text()
    # an earlier file had a run of norun: its section and README row are kept, the figure too
    earlier = md.read_text().replace(
        md.read_text().split("## norun\n\n", 1)[1].split("\n## ", 1)[0],
        "Full run `abc123`, started 2026-11-26.\n\n![norun: old_plot](results/norun/old_plot.png)\n")
    md.write_text(earlier)
    (docs / "results" / "norun").mkdir(parents=True, exist_ok=True)
    (docs / "results" / "norun" / "old_plot.png").write_bytes(b"from an earlier run")
    readme.write_text(readme.read_text().replace("| norun | not run yet | | |", "| norun | full, 2026-11-26 | x | 1 |"))
    results.write(md, readme, records)
    text = md.read_text()
    section = text.split("## norun\n\n", 1)[1].split("\n## ", 1)[0]
    assert section.startswith(results.CARRIED) and "Full run `abc123`" in section
    assert "- [norun](#norun) (carried over)" in text
    assert (docs / "results" / "norun" / "old_plot.png").read_bytes() == b"from an earlier run"
    assert "| norun | full, 2026-11-26 | x | 1 |" in readme.read_text()
    assert results.check(md, readme, records) == []
    results.write(md, readme, records)  # idempotent: the marker is not stacked
    assert md.read_text() == text


def test_main_write_and_check_exit_codes(logged, tmp_path, capsys):
    md, readme = tmp_path / "RESULTS.md", tmp_path / "README.md"
    readme.write_text(README)
    assert results.main(["--write", str(md), "--readme", str(readme)]) == 0
    assert results.main(["--check", str(md), "--readme", str(readme)]) == 0
    md.write_text(md.read_text() + "hand-typed line\n")
    assert results.main(["--check", str(md), "--readme", str(readme)]) == 1
    assert "differs from the runs" in capsys.readouterr().out
    readme.write_text("no markers\n")
    assert results.main(["--write", str(md), "--readme", str(readme)]) == 2
    assert "markers" in capsys.readouterr().err


def test_markdown_table_and_formatting():
    import pandas as pd

    assert results.fmt(float("nan")) == "—" and results.fmt(3.0) == "3" and results.fmt(0.0123456) == "0.01235"
    assert results.fmt("a|b") == "a\\|b"
    table = results.markdown_table(pd.DataFrame({"a": [1, 2], "b": ["x", None]}))
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | x |", "| 2 | — |"]


def test_every_experiment_states_what_its_evidence_rests_on():
    # RESULTS.md says, per experiment, the ground truth, what each policy is given, the sample
    # and what could still bias it (issue 19, point 6): one statement per registered experiment
    from experiments.evidence import ASPECTS, STATEMENTS, lines
    from experiments.harness import experiment_names

    assert set(STATEMENTS) == set(experiment_names("experiments.suite"))
    for name, found in STATEMENTS.items():
        assert set(found) == set(ASPECTS), name
        assert len(lines(name)) == len(ASPECTS) and all(len(v) > 40 for v in found.values())
    assert lines("no-such-experiment") == []
