"""The bundled data (``experiments.bundled``): traces with their notices, every example file,
found through importlib.resources whatever the working directory."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import bundled

REPO = Path(__file__).resolve().parents[2]

# git blob ids of the traces as published at their source commits (experiments/data/traces/README.md)
BLOBS = {
    "nab_nyc_taxi.csv": "f44fb7f69e088df2a836b840aebcbde89a883ffe",
    "nab_Twitter_volume_AMZN.csv": "8f9d8a5d54d4f52571a403970928b66eeda92a43",
    "nab_elb_request_count_8c0756.csv": "c2c83f9f470653d5db71f8aa6a038a98e075c7ae",
    "wc98_requests_per_minute.csv": "7d2c498aca795fcf2bc762a22c2a8ac01e586ecb",
}


def _git_blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_traces_are_the_published_files_with_their_notices():
    assert bundled.list_traces() == sorted(BLOBS)
    for name, blob in BLOBS.items():
        assert _git_blob_id(bundled.trace(name)) == blob, name
    readme = (bundled.traces_dir() / "README.md").read_text()
    assert "MIT" in readme and "numenta/NAB" in readme and "worldcup98-dataset" in readme
    assert "Copyright and Disclaimer" in readme
    assert "distributed unmodified" in (bundled.traces_dir() / "NOTICE-WC98.txt").read_text()
    # the MIT licences require their notice to travel with every copy
    for name, holder in (("LICENSE-NAB.txt", "Numenta"), ("LICENSE-worldcup98-dataset.txt", "Nima Mahmoudi")):
        text = (bundled.traces_dir() / name).read_text()
        assert "Copyright" in text and holder in text and "Permission is hereby granted" in text, name


def test_every_file_in_examples_is_bundled():
    """The repository's examples/ directory is the bundled set (model files and run configs)."""
    on_disk = sorted(p.name for p in (REPO / "examples").iterdir() if p.suffix in bundled.EXAMPLE_SUFFIXES)
    assert bundled.list_examples() == on_disk
    assert {"wordcount.yaml", "diamond.yaml", "pipeline.yaml"} <= set(on_disk)
    for name in on_disk:
        assert bundled.example(name).read_bytes() == (REPO / "examples" / name).read_bytes()


def test_unknown_names_list_the_bundled_ones():
    with pytest.raises(bundled.BundledFileNotFound, match="wordcount.yaml"):
        bundled.example("nope.yaml")
    with pytest.raises(FileNotFoundError, match="nab_nyc_taxi.csv"):
        bundled.trace("../examples/wordcount.yaml")


def test_copy_examples_refuses_to_overwrite(tmp_path):
    written = bundled.copy_examples(tmp_path / "ex")
    assert [p.name for p in written] == bundled.list_examples()
    with pytest.raises(FileExistsError):
        bundled.copy_examples(tmp_path / "ex", ["wordcount.yaml"])
    (tmp_path / "ex" / "wordcount.yaml").write_text("changed")
    bundled.copy_examples(tmp_path / "ex", ["wordcount.yaml"], overwrite=True)
    assert (tmp_path / "ex" / "wordcount.yaml").read_bytes() == bundled.example("wordcount.yaml").read_bytes()


def test_found_from_any_working_directory(tmp_path):
    code = "from experiments import bundled; print(bundled.example('wordcount.yaml'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO), "PATH": ""}, check=True)
    assert Path(out.stdout.strip()).is_file()
