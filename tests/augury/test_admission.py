"""POST /v1/admission: recorded AdmissionReview payloads for FlinkDeployments (fixtures/admission)
against a real server on loopback; the mapping file's errors name the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from augury.admission import AdmissionError, load_mapping, parse_mapping
from augury.service import BackgroundServer, ServeConfig, create_app
from tests.conftest import EXAMPLES

FIXTURES = Path(__file__).parent / "fixtures" / "admission"
TOKEN = "admission-token-0123456789"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    models = tmp_path_factory.mktemp("models")
    for name in ("wordcount", "diamond"):
        shutil.copy(EXAMPLES / f"{name}.yaml", models / f"{name}.yaml")
    config = ServeConfig(models_dir=str(models), port=0, token_file="unused", log_level="warning",
                         admission_file=str(FIXTURES / "mapping.yaml"))
    with BackgroundServer(create_app(config, TOKEN), config) as server, \
            httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
        yield c


def _review(client, name: str) -> dict:
    payload = json.loads((FIXTURES / name).read_text())
    r = client.post("/v1/admission", json=payload)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    assert out["response"]["uid"] == payload["request"]["uid"]
    return out["response"]


def test_a_patch_that_would_saturate_the_job_is_denied_naming_each_violation(client):
    response = _review(client, "deny-saturating.json")
    assert response["allowed"] is False and response["status"]["code"] == 403
    message = response["status"]["message"]
    assert "streaming/wordcount" in message and "saturation at count" in message
    assert "utilization at count" in message and "latency p99: unbounded > SLO 50 ms" in message


def test_a_sufficient_patch_is_allowed(client):
    response = _review(client, "allow-sufficient.json")
    assert response == {"uid": response["uid"], "allowed": True}


def test_allowed_with_warnings(client):
    response = _review(client, "allow-with-warnings.json")
    assert response["allowed"] is True
    warnings = " | ".join(response["warnings"])
    assert "ffffffffffffffffffffffffffffffff is not an operator" in warnings and "headroom x1.08 (up to 2,160.3 tuples/s) is below x2" in warnings


def test_a_latency_slo_violation_is_denied(client):
    response = _review(client, "deny-latency.json")
    assert response["allowed"] is False and "latency p99" in response["status"]["message"]
    assert "saturation" not in response["status"]["message"]


def test_unmapped_and_malformed_deployments(client):
    response = _review(client, "unmapped.json")
    assert response["allowed"] is True and "sandbox/experiment" in response["warnings"][0]
    response = _review(client, "malformed-parallelism.json")
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert "spec.job.parallelism = 'two'" in response["status"]["message"]


def test_not_an_admission_review_is_a_400_naming_the_field(client):
    r = client.post("/v1/admission", json={"apiVersion": "v1", "kind": "Pod"})
    assert r.status_code == 400 and r.json()["field"] == "apiVersion"
    r = client.post("/v1/admission", json={"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})
    assert r.status_code == 400 and r.json()["field"] == "request.uid"


@pytest.mark.parametrize("data, field", [
    ({"deployments": [{"namespace": "a", "name": "b", "model": "m"}]}, "deployments[0].rate"),
    ({"deployments": [{"namespace": "a", "name": "b", "model": "m", "rate": -1}]}, "deployments[0].rate"),
    ({"deployments": [{"namespace": "a", "name": "b", "model": "m", "rate": 1, "latency_stat": "p50"}]},
     "deployments[0].latency_stat"),
    ({"deployments": [{"namespace": "a", "name": "b", "model": "m", "rate": 1, "utilization_target": 2}]},
     "deployments[0].utilization_target"),
    ({"unmapped": "maybe"}, "unmapped"),
    ({"deployments": [{"namespace": "a", "name": "b", "model": "m", "rate": 1, "colour": 1}]}, "deployments[0].colour"),
])
def test_mapping_errors_name_the_field(data, field):
    with pytest.raises(AdmissionError) as err:
        parse_mapping(data, "mapping.yaml")
    assert err.value.field == field and err.value.file == "mapping.yaml"


def test_the_fixture_mapping_loads():
    mapping = load_mapping(FIXTURES / "mapping.yaml")
    assert mapping.deployments[("streaming", "wordcount")].vertices


# ------------------------------------------------------------------ fuzz: mutated recorded payloads

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

HOSTILE = st.one_of(st.none(), st.booleans(), st.integers(-5, 20_000), st.just(10**40), st.floats(width=32),
                    st.text(max_size=10), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=4),
                                                                                               st.integers(), max_size=2),
                    st.sampled_from(["a:1", "a7c1d1f4e5b24d0f9b3c2e1d0f6a5b41:0", "count:99999", ":", "x:y,z"]))
PATHS = ["request.uid", "request.kind.kind", "request.operation", "request.object", "request.object.metadata",
         "request.object.metadata.name", "request.object.spec", "request.object.spec.job",
         "request.object.spec.job.parallelism", "request.object.spec.flinkConfiguration",
         "request.object.spec.flinkConfiguration.pipeline.jobvertex-parallelism-overrides", "request"]


def _set(data: dict, path: str, value) -> None:
    key = "pipeline.jobvertex-parallelism-overrides"
    parts = path.replace(key, "\0").split(".")
    for part in parts[:-1]:
        data = data.setdefault(part, {}) if isinstance(data, dict) else {}
    if isinstance(data, dict):
        data[parts[-1].replace("\0", key)] = value


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["deny-saturating.json", "allow-sufficient.json", "deny-latency.json"]),
       path=st.sampled_from(PATHS), value=HOSTILE)
def test_fuzz_mutated_reviews_never_a_5xx(client, name, path, value):
    payload = json.loads((FIXTURES / name).read_text())
    _set(payload, path, value)
    r = client.post("/v1/admission", json=payload)
    assert r.status_code in (200, 400), r.text
    if r.status_code == 200:
        assert isinstance(r.json()["response"]["allowed"], bool)
