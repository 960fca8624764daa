"""modeler.documents: the one reader of user documents refuses hostile but well-formed text with
the caller's typed error naming the file (issue 22: deep nesting was a RecursionError, a 5,000-digit
integer a ValueError traceback in run configs, proposals, testbed settings, what-if configuration
lists)."""

from __future__ import annotations

import pytest

from modeler.documents import parse_document, read_document
from modeler.errors import ModelError, UsageError

HOSTILE = {
    "json": {"deep": "[" * 100_000 + "]" * 100_000, "digits": '{"a": ' + "9" * 5000 + "}", "syntax": "{"},
    "yaml": {"deep": "a: " + "[" * 100_000, "digits": "a: " + "9" * 5000, "syntax": "a: [\n"},
    "toml": {"deep": "a = " + "[" * 100_000 + "]" * 100_000, "digits": "a = " + "9" * 5000, "syntax": "a = "},
}


@pytest.mark.parametrize("fmt", sorted(HOSTILE))
@pytest.mark.parametrize("case,expected", [("deep", "nested too deeply"), ("digits", "more than 4,300 digits"),
                                           ("syntax", "malformed settings file")])
def test_hostile_text_is_the_callers_error(fmt, case, expected):
    with pytest.raises(ModelError, match=expected) as info:
        parse_document(HOSTILE[fmt][case], fmt, "settings file", ModelError, "s.x", field="--settings")
    assert info.value.file == "s.x" and info.value.field == "--settings" and len(str(info.value)) < 400


def test_valid_documents_parse():
    assert parse_document('{"a": [1, 2]}', "json", "x", ModelError) == {"a": [1, 2]}
    assert parse_document("a: 1.0e+3\nb: [x]\n", "yaml", "x", ModelError) == {"a": 1000.0, "b": ["x"]}
    assert parse_document("[s]\nk = 2\n", "toml", "x", ModelError) == {"s": {"k": 2}}


def test_files_that_cannot_be_read_are_bad_input(tmp_path):
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe")
    for path, expected in [(tmp_path / "missing.toml", "no such file"), (tmp_path, "is a directory"),
                           (tmp_path / "bin.toml", "not UTF-8"), (tmp_path / "a\0b", "not a valid file name")]:
        with pytest.raises(UsageError, match=expected) as info:
            read_document(path, "toml", "run configuration", UsageError)
        assert info.value.exit_code == 2 and info.value.file == str(path)
