"""augury.cli: environment failures become exit 3 and one line; bugs keep their traceback."""

from __future__ import annotations

import types

import pytest

import augury.cli as cli


def _command(monkeypatch, error: BaseException) -> None:
    """Make ``augury log`` raise ``error``."""
    def boom(args):
        raise error

    real = cli.build_parser

    def parser():
        p = real()
        p._subparsers._group_actions[0].choices["log"].set_defaults(func=boom)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)


@pytest.mark.parametrize("error, words", [
    (PermissionError(13, "Permission denied", "/data/store/_manifest.json"), ["/data/store/_manifest.json",
                                                                              "Permission denied"]),
    (OSError(30, "Read-only file system", "out.csv"), ["out.csv", "Read-only file system"]),
    (OSError(28, "No space left on device"), ["No space left on device"]),
])
def test_os_errors_exit_3_with_one_line(monkeypatch, capsys, error, words):
    _command(monkeypatch, error)
    assert cli.main(["log", "--state", "x"]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("augury log: error: ")
    assert all(w in err for w in words)


def test_errors_from_the_jvm_exit_3_with_their_first_line(monkeypatch, capsys):
    JavaError = type("Py4JJavaError", (Exception,), {"__module__": "py4j.protocol"})
    java = types.SimpleNamespace(toString=lambda: "org.apache.spark.SparkException: corrupt file x.parquet\n\tat ...")
    error = JavaError("An error occurred while calling o56.parquet.\n: trace")
    error.java_exception = java
    _command(monkeypatch, error)
    assert cli.main(["log", "--state", "x"]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "corrupt file x.parquet" in err


def test_a_bug_keeps_its_traceback(monkeypatch):
    _command(monkeypatch, ZeroDivisionError("bug"))
    with pytest.raises(ZeroDivisionError):
        cli.main(["log", "--state", "x"])
