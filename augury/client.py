"""A Python client of ``augury serve`` (httpx), and the ``--server`` flags of ``augury predict``,
``plan`` and ``validate``.

Units: rates in tuples/s, times in ms.

    from augury.client import Client

    with Client("http://127.0.0.1:8765", token) as augury:
        augury.predict("wordcount", 2000, {"count": 4})          # the augury predict --json object
        augury.plan("wordcount", 2000, latency_slo_ms=50)        # the augury plan --json object
        augury.validate("wordcount", 2000, {"count": 6})          # the augury validate --json object

Every method returns the server's JSON answer (the command's ``--json`` object). A 4xx answer
raises ``ServerError`` (an ``AuguryError`` naming the field and value the server named; exit
code 2); a 5xx answer or an unreachable server raises ``ServerUnavailable`` (exit code 3).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping

from modeler.errors import AuguryError, UsageError

TOKEN_ENV = "AUGURY_TOKEN"
"""Environment variable holding the bearer token (when no token file is given)."""


class ServerError(AuguryError):
    """The server refused the request (4xx): its error, field and value."""

    def __init__(self, message: str, *, status: int, field: str | None = None, value: Any = None,
                 url: str | None = None) -> None:
        self.status = status
        super().__init__(f"{message} (HTTP {status})", file=url, field=field, value=value)


class ServerUnavailable(AuguryError):
    """The server cannot be reached or failed (5xx): an environment failure."""

    exit_code = 3


class Client:
    """``Client(url, token)``: one connection pool to an ``augury serve``; use as a context manager
    or call ``close()``. ``verify``: TLS verification (True, False or a CA bundle path)."""

    def __init__(self, url: str, token: str, *, timeout_s: float = 30.0, verify: bool | str = True) -> None:
        import httpx

        self.url = url.rstrip("/")
        if isinstance(verify, str):  # a CA bundle
            import ssl

            verify = ssl.create_default_context(cafile=verify)
        self._http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"},
                                  timeout=timeout_s, verify=verify)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        import httpx

        try:
            r = self._http.request(method, path, json=body)
        except httpx.HTTPError as err:
            raise ServerUnavailable(f"cannot reach the augury server ({type(err).__name__}: {err})",
                                    file=self.url + path) from None
        if r.status_code >= 500:
            raise ServerUnavailable(f"the augury server failed (HTTP {r.status_code})", file=self.url + path)
        if r.status_code >= 400:
            try:
                err = r.json()
            except ValueError:
                err = {"error": r.text[:200]}
            raise ServerError(str(err.get("error") or "refused"), status=r.status_code, field=err.get("field"),
                              value=err.get("value"), url=self.url + path)
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.json()
        return r.text

    @staticmethod
    def _targets(latency_slo_ms, latency_stat, utilization_target) -> dict:
        out: dict[str, Any] = {"latency_stat": latency_stat}
        if latency_slo_ms is not None:
            out["latency_slo_ms"] = float(latency_slo_ms)
        if utilization_target is not None:
            out["utilization_target"] = float(utilization_target)
        return out

    def predict(self, model: str, rate: float, config: Mapping[str, int] | None = None) -> dict:
        """``augury predict --json``: the configuration (model's parallelism overridden by ``config``) at ``rate``."""
        return self._call("POST", "/v1/predict", {"model": model, "rate": float(rate), "config": dict(config or {})})

    def plan(self, model: str, rate: float, *, latency_slo_ms: float | None = None, latency_stat: str = "p99",
             utilization_target: float | None = None, align: bool = False) -> dict:
        """``augury plan --json``: the cheapest configuration meeting the targets at ``rate``."""
        return self._call("POST", "/v1/plan", {"model": model, "rate": float(rate), "align": bool(align),
                                               **self._targets(latency_slo_ms, latency_stat, utilization_target)})

    def validate(self, model: str, rate: float, config: Mapping[str, int] | None = None, *, proposal: Any = None,
                 latency_slo_ms: float | None = None, latency_stat: str = "p99",
                 utilization_target: float | None = None) -> dict:
        """``augury validate --json``: violations and headroom of ``config`` (over ``proposal``, any
        proposal-file shape)."""
        body: dict[str, Any] = {"model": model, "rate": float(rate),
                                **self._targets(latency_slo_ms, latency_stat, utilization_target)}
        if config is not None:
            body["config"] = dict(config)
        if proposal is not None:
            body["proposal"] = proposal
        return self._call("POST", "/v1/validate", body)

    def whatif(self, model: str, rates: str | list[float], *, sweep: list[str] | None = None,
               configs: list[Mapping[str, int]] | None = None, latency_slo_ms: float | None = None,
               latency_stat: str = "p99", utilization_target: float | None = None) -> dict:
        """``augury whatif --json`` without the file keys: a bounded sweep (``rates`` "A:B:N" or a list)."""
        body: dict[str, Any] = {"model": model, "rates": rates,
                                **self._targets(latency_slo_ms, latency_stat, utilization_target)}
        if sweep:
            body["sweep"] = list(sweep)
        if configs is not None:
            body["configs"] = [dict(c) for c in configs]
        return self._call("POST", "/v1/whatif", body)

    def admission(self, review: Mapping) -> dict:
        """The ``AdmissionReview`` answer to ``review``."""
        return self._call("POST", "/v1/admission", dict(review))

    def models(self) -> dict:
        return self._call("GET", "/v1/models")

    def reload(self) -> dict:
        return self._call("POST", "/v1/models/reload")

    def health(self) -> dict:
        return self._call("GET", "/healthz")

    def metrics(self) -> str:
        return self._call("GET", "/metrics")


# ----------------------------------------------------------------------------- the --server flags


def add_server_flags(parser) -> None:
    """``--server URL`` and ``--token-file F`` (shared by predict, plan, validate)."""
    parser.add_argument("--server", default=None, metavar="URL",
                        help="ask an augury serve at URL instead of computing here; MODEL is then the "
                             "model's name on the server")
    parser.add_argument("--token-file", default=None, metavar="F",
                        help=f"with --server: file whose first line is the bearer token (default: ${TOKEN_ENV})")


def client_from_args(args) -> Client:
    """The ``Client`` of ``--server`` / ``--token-file`` (or ``$AUGURY_TOKEN``); ``UsageError`` without a token."""
    if args.token_file:
        try:
            text = Path(args.token_file).read_text()
        except OSError as err:
            raise UsageError(f"cannot read the token file ({err.strerror or type(err).__name__})",
                             file=args.token_file, field="--token-file") from None
        token = text.splitlines()[0].strip() if text.strip() else ""
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise UsageError(f"--server needs a bearer token: give --token-file or set ${TOKEN_ENV}", field="--token-file")
    if not args.server.startswith(("http://", "https://")):
        raise UsageError("expected an http:// or https:// URL", field="--server", value=args.server)
    return Client(args.server, token)


# ----------------------------------------------------------------------------- answers as objects


def prediction_view(d: Mapping) -> SimpleNamespace:
    """A ``--json`` prediction as an object ``augury.commands.predict.format_prediction`` prints."""
    return SimpleNamespace(**{**d, "operators": {n: SimpleNamespace(**o) for n, o in d["operators"].items()}})


def restart_view(d: Mapping) -> SimpleNamespace:
    return SimpleNamespace(**d["restart"])


def plan_view(d: Mapping) -> SimpleNamespace:
    return SimpleNamespace(**{**d, "prediction": prediction_view(d["prediction"])})


def validation_view(d: Mapping) -> SimpleNamespace:
    return SimpleNamespace(ok=d["ok"], violations=[SimpleNamespace(**v) for v in d["violations"]],
                           headroom=SimpleNamespace(**d["headroom"]), prediction=prediction_view(d["prediction"]))
