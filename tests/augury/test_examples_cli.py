"""``augury examples list|copy DIR``: the bundled model files and run configurations."""

from __future__ import annotations

import json

from augury.cli import main
from experiments import bundled
from modeler.modelfile import load_model


def test_list(capsys):
    assert main(["examples", "list"]) == 0
    assert capsys.readouterr().out.split() == bundled.list_examples()
    assert main(["examples", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["examples"] == bundled.list_examples()


def test_copy_all_then_one_and_the_copies_load(tmp_path, capsys):
    assert main(["examples", "copy", str(tmp_path / "mine")]) == 0
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == bundled.list_examples()
    assert load_model(tmp_path / "mine" / "wordcount.yaml").job == "wordcount"
    capsys.readouterr()
    assert main(["examples", "copy", str(tmp_path / "one"), "diamond.yaml", "--json"]) == 0
    assert [p.rsplit("/", 1)[1] for p in json.loads(capsys.readouterr().out)["copied"]] == ["diamond.yaml"]


def test_bad_input_is_exit_2_on_one_line(tmp_path, capsys):
    assert main(["examples", "copy", str(tmp_path), "nope.yaml"]) == 2
    assert "nope.yaml" in capsys.readouterr().err
    assert main(["examples", "copy", str(tmp_path), "wordcount.yaml"]) == 0
    assert main(["examples", "copy", str(tmp_path), "wordcount.yaml"]) == 2
    err = capsys.readouterr().err
    assert "--force" in err and len(err.strip().splitlines()) == 1
    assert main(["examples", "copy", str(tmp_path), "wordcount.yaml", "--force"]) == 0
