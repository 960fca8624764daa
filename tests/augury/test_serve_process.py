"""``augury serve`` as users start it: its own process, HTTPS with a self-signed certificate,
the token never in its output."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import socket
import ssl
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import EXAMPLES

TOKEN = "process-token-0123456789abcdef"


def _self_signed(tmp_path):
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    (tmp_path / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    return str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")


def test_the_command_serves_https_and_never_prints_the_token(tmp_path):
    cert, key = _self_signed(tmp_path)
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(EXAMPLES / "wordcount.yaml", models / "wordcount.yaml")
    (models / "broken.json").write_text("{not json")
    (tmp_path / "token").write_text(TOKEN + "\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "augury", "serve", "--models", str(models), "--port", str(port),
                             "--token-file", str(tmp_path / "token"), "--cert", cert, "--key", key],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"https://127.0.0.1:{port}"
    ca = ssl.create_default_context(cafile=cert)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/healthz", verify=ca, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        r = httpx.post(url + "/v1/predict", json={"model": "wordcount", "rate": 500}, headers=auth, verify=ca)
        assert r.status_code == 200 and r.json()["rate"] == 500
        assert httpx.post(url + "/v1/predict", json={"model": "wordcount", "rate": 500}, verify=ca).status_code == 401
        with pytest.raises(httpx.HTTPError):  # HTTPS only
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert TOKEN not in out + err
    assert "rejected model file broken.json" in err and "1 model(s) (wordcount)" in err
