"""augury.client.Client and --server on predict / plan / validate: the same answers as computing
locally (a real server on loopback)."""

from __future__ import annotations

import json
import shutil
import socket

import pytest

from augury.cli import main
from augury.client import Client, ServerError
from augury.service import BackgroundServer, ServeConfig, create_app
from tests.conftest import EXAMPLES

TOKEN = "client-token-0123456789abcdef"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    models = tmp_path_factory.mktemp("models")
    for name in ("wordcount", "diamond"):
        shutil.copy(EXAMPLES / f"{name}.yaml", models / f"{name}.yaml")
    config = ServeConfig(models_dir=str(models), port=0, token_file="unused", log_level="warning")
    with BackgroundServer(create_app(config, TOKEN), config) as running:
        yield running


@pytest.fixture()
def token_file(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return str(path)


def _out(capsys, argv) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("json_flag", [["--json"], []])
@pytest.mark.parametrize("name, argv", [
    ("predict", ["wordcount", "--rate", "900", "--config", "split=3,count=4"]),
    ("plan", ["diamond", "--rate", "12500", "--latency-slo-ms", "5"]),
    ("plan", ["diamond", "--rate", "1000", "--latency-slo-ms", "0.001", "--latency-stat", "mean"]),
    ("validate", ["diamond", "--rate", "12500", "--config", "parse=8,enrich=13", "--latency-slo-ms", "20"]),
])
def test_server_flag_prints_what_the_local_command_prints(server, capsys, token_file, json_flag, name, argv):
    model, rest = argv[0], argv[1:]
    local = _out(capsys, [name, str(EXAMPLES / f"{model}.yaml"), *rest, *json_flag])
    remote = _out(capsys, [name, model, *rest, *json_flag, "--server", server.url, "--token-file", token_file])
    assert remote == local


def test_client_methods(server):
    with Client(server.url, TOKEN) as client:
        assert client.health()["status"] == "ok"
        assert [m["name"] for m in client.models()["models"]] == ["diamond", "wordcount"]
        p = client.predict("wordcount", 900, {"split": 3})
        assert p["config"]["split"] == 3 and p["restart_s"] > 0
        assert client.plan("wordcount", 2000, latency_slo_ms=50)["config"]["count"] == 5
        v = client.validate("wordcount", 2000, proposal={"pipeline.jobvertex-parallelism-overrides": "count:6"},
                            latency_slo_ms=50, utilization_target=0.9)
        assert v["ok"] is True
        w = client.whatif("wordcount", [1000, 2000], sweep=["count=2..6"])
        assert w["rows"] == 10 and len(w["cheapest"]) == 2
        assert "augury_requests_total" in client.metrics()
        with pytest.raises(ServerError) as err:
            client.predict("wordcount", 10, {"ghost": 2})
        assert err.value.status == 400 and err.value.field == "config" and err.value.value == "ghost"


def test_server_errors_are_one_line_exit_2_and_an_unreachable_server_exit_3(server, capsys, token_file, monkeypatch):
    monkeypatch.delenv("AUGURY_TOKEN", raising=False)
    code, _, err = _out(capsys, ["predict", "nosuchmodel", "--rate", "1", "--server", server.url,
                                 "--token-file", token_file])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "unknown model" in err and "HTTP 404" in err
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = _out(capsys, ["plan", "wordcount", "--rate", "1", "--server", f"http://127.0.0.1:{port}",
                                 "--token-file", token_file])
    assert code == 3 and "cannot reach the augury server" in err
    code, _, err = _out(capsys, ["validate", "wordcount", "--rate", "1", "--config", "count=2", "--server", server.url])
    assert code == 2 and "--token-file" in err


def test_a_wrong_token_is_refused(server, tmp_path, capsys):
    (tmp_path / "t").write_text("not-the-token-at-all\n")
    code, _, err = _out(capsys, ["predict", "wordcount", "--rate", "1", "--server", server.url,
                                 "--token-file", str(tmp_path / "t")])
    assert code == 2 and "HTTP 401" in err and "not-the-token" not in err
