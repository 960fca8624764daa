"""``augury serve --models DIR [--host 127.0.0.1] [--port 8765] --token-file F [--cert C --key K]
[--admission MAPPING]``: predict, plan, validate, what-if and a Kubernetes admission webhook over
authenticated HTTP (``augury.service``; docs/serve.md)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve predict/plan/validate/whatif and an admission webhook over authenticated HTTP",
        description="Serve the models of a directory over HTTP: POST /v1/predict, /v1/plan, /v1/validate, "
                    "/v1/whatif, /v1/admission; GET /v1/models, POST /v1/models/reload, GET /healthz, "
                    "GET /metrics. Every path but /healthz needs 'Authorization: Bearer <token>'.")
    parser.add_argument("--models", required=True, metavar="DIR", help="directory of model files (name = file stem)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1; any other needs --token-file, --cert and --key)")
    parser.add_argument("--port", default="8765", help="TCP port (default 8765)")
    parser.add_argument("--token-file", required=True, metavar="F", help="file whose first line is the bearer token")
    parser.add_argument("--cert", default=None, metavar="C", help="TLS certificate (PEM)")
    parser.add_argument("--key", default=None, metavar="K", help="TLS private key (PEM)")
    parser.add_argument("--admission", default=None, metavar="MAPPING",
                        help="mapping file for /v1/admission: FlinkDeployment -> model, rate, targets")
    parser.add_argument("--workers", default="2",
                        help="threads computing what-if sweeps, admission reviews and reloads (default 2)")
    parser.add_argument("--processes", default="2",
                        help="worker processes computing predictions, validations and plans (default 2; 0: in the "
                             "server process: predict and validate on its event loop, plans on --workers threads)")
    parser.add_argument("--max-body-bytes", default="1048576", help="largest request body (default 1 MiB)")
    parser.add_argument("--max-connections", default="64", help="connections at once; 503 beyond (default 64)")
    parser.add_argument("--time-budget", default="10s", help="time budget of plan/whatif/admission (default 10s)")
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    parser.set_defaults(func=run)


def _int(text: str, flag: str) -> int:
    from augury.errors import UsageError

    try:
        return int(text)
    except (TypeError, ValueError):
        raise UsageError("expected an integer", field=flag, value=text) from None


def config_from_args(args: argparse.Namespace):
    from augury.commands._common import parse_duration_s
    from augury.service import ServeConfig

    config = ServeConfig(models_dir=args.models, host=args.host, port=_int(args.port, "--port"),
                         token_file=args.token_file, cert_file=args.cert, key_file=args.key,
                         admission_file=args.admission, workers=_int(args.workers, "--workers"),
                         processes=_int(args.processes, "--processes"),
                         max_body_bytes=_int(args.max_body_bytes, "--max-body-bytes"),
                         max_connections=_int(args.max_connections, "--max-connections"),
                         time_budget_s=parse_duration_s(args.time_budget, "--time-budget"), log_level=args.log_level)
    config.check()
    return config


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from augury.service import ModelRegistry, create_app, read_token, uvicorn_config

    config = config_from_args(args)
    token = read_token(config.token_file)
    for path, flag in ((config.cert_file, "--cert"), (config.key_file, "--key")):
        if path is not None:
            from pathlib import Path

            from augury.errors import UsageError

            if not Path(path).is_file():
                raise UsageError("no such file", file=path, field=flag)
    registry = ModelRegistry(config.models_dir)
    report = registry.reload()
    for bad in report["rejected"]:
        print(f"augury serve: rejected model file {bad['file']}: {bad['error']}"
              + (f" (field {bad['field']!r} = {bad['value']!r})" if bad.get("field") else ""), file=sys.stderr)
    app = create_app(config, token, registry)
    scheme = "https" if config.cert_file else "http"
    print(f"augury serve: {len(registry)} model(s) ({', '.join(report['models']) or 'none'}) on "
          f"{scheme}://{config.host}:{config.port}", file=sys.stderr)
    uvicorn.Server(uvicorn_config(app, config)).run()
    return 0
