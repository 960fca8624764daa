"""history.files: outputs are replaced atomically or not at all."""

from __future__ import annotations

import pytest

from history.errors import OutputError
from history.files import atomic_path, check_writable, write_text


def test_write_text_replaces_the_whole_file(tmp_path):
    path = tmp_path / "sub" / "out.txt"
    write_text(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in path.parent.iterdir()] == ["out.txt"]


def test_a_failure_inside_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("the computation failed")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_an_unwritable_output_is_an_environment_failure(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError) as info:
        check_writable(tmp_path / "file" / "out.txt", "--out")
    assert info.value.exit_code == 3 and info.value.field == "--out"
    with pytest.raises(OutputError, match="is a directory"):
        check_writable(tmp_path, "--out")
    with pytest.raises(OutputError):
        write_text(tmp_path / "file" / "out.txt", "x", "--out")


def test_check_writable_creates_nothing_and_the_writer_makes_the_directory(tmp_path):
    path = tmp_path / "a" / "b" / "out.txt"
    check_writable(path, "--out")
    assert list(tmp_path.iterdir()) == []  # a command failing after the check leaves no empty directory
    write_text(path, "x")
    assert path.read_text() == "x"
    with pytest.raises(OutputError, match="does not exist"):
        check_writable(tmp_path / "c" / "out.txt", "--plot", create_parent=False)


def test_check_writable_names_a_bad_file_name_and_a_long_one_writes(tmp_path):
    from modeler.errors import UsageError

    with pytest.raises(UsageError) as info:
        check_writable(tmp_path / "a\0b.txt", "--out")
    assert info.value.exit_code == 2 and info.value.field == "--out"
    long_name = tmp_path / ("x" * 250 + ".csv")  # a valid name: its temporary and probe names stay valid too
    check_writable(long_name, "--out")
    write_text(long_name, "x")
    assert long_name.read_text() == "x" and [p.name for p in tmp_path.iterdir()] == [long_name.name]
