"""``augury whatif``'s output checks through ``augury.cli.main`` (issue 22)."""

from __future__ import annotations

from augury.cli import main
from tests.conftest import EXAMPLES


def test_an_unwritable_out_exits_3_naming_it_before_the_work(tmp_path, capsys):
    (tmp_path / "file").write_text("x")  # a file where the table's directory should be
    out = tmp_path / "file" / "w.parquet"
    code = main(["whatif", str(EXAMPLES / "pipeline.yaml"), "--rates", "100:200:3", "--sweep", "score=1..4",
                 "--out", str(out), "--no-progress"])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 3 and captured.out == ""
    assert len(err.splitlines()) == 1 and err.startswith("augury whatif: error: ")
    assert "field '--out'" in err and str(out) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_missing_directories_of_out_are_created(tmp_path, capsys):
    out = tmp_path / "a" / "b" / "w.csv"
    assert main(["whatif", str(EXAMPLES / "pipeline.yaml"), "--rates", "100", "--out", str(out),
                 "--no-progress"]) == 0
    assert out.is_file()
    assert not [p for p in out.parent.iterdir() if p.name.endswith((".probe", ".partial"))]


def test_an_unwritable_plots_directory_exits_3_before_the_work(tmp_path, capsys):
    (tmp_path / "file").write_text("x")  # a file where the plots' directory should be
    out = tmp_path / "t" / "w.csv"
    code = main(["whatif", str(EXAMPLES / "pipeline.yaml"), "--rates", "100:200:3", "--out", str(out),
                 "--plots", str(tmp_path / "file" / "plots"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 3 and len(err.splitlines()) == 1 and "field '--plots'" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no table, not even its directory


def test_bad_input_leaves_no_directory_behind(tmp_path, capsys):
    out = tmp_path / "a" / "b" / "w.csv"
    code = main(["whatif", str(EXAMPLES / "pipeline.yaml"), "--rates", "100:200:3", "--sweep", "nope=1..3",
                 "--out", str(out), "--no-progress"])
    assert code == 2 and not (tmp_path / "a").exists()
