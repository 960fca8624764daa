"""``augury validate MODEL --rate R (--config op=p,... | --proposal FILE) [--latency-slo-ms L]
[--latency-stat mean|p95|p99] [--utilization-target U] [--json]``: check a proposed configuration."""

from __future__ import annotations

import argparse

from augury.commands._common import parse_config, parse_positive_float, print_json
from augury.commands.plan import add_target_flags, targets


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate", help="predict whether a proposed configuration meets the targets, and its headroom",
        description="Check another scheduler's (or a person's) proposal before deploying it: violations "
                    "of the utilization target, saturation, the latency SLO, and how far the rate may rise.")
    parser.add_argument("model", metavar="MODEL", help="model file (YAML or JSON)")
    parser.add_argument("--rate", required=True, help="input rate, tuples/s")
    parser.add_argument("--config", help="proposal: op=p[,op=p...] (others keep the model's parallelism)")
    parser.add_argument("--proposal", metavar="FILE",
                        help="proposal as a JSON file of vertex -> parallelism (see docs/scheduler.md)")
    add_target_flags(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    from augury.client import add_server_flags

    add_server_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from augury.errors import UsageError
    from modeler.modelfile import load_model
    from scheduler.validate import read_proposal

    rate = parse_positive_float(args.rate, "--rate")
    u, slo, stat = targets(args)
    if getattr(args, "server", None):
        return _run_remote(args, rate, u, slo, stat)
    model = load_model(args.model)
    config = parse_config(args.config)
    if args.proposal:
        config = {**read_proposal(args.proposal, model), **config}
    if not args.config and not args.proposal:
        raise UsageError("give the proposal with --config op=p,... or --proposal FILE", field="--config")
    result = answer(model, rate, config, u, slo, stat)
    if args.json:
        print_json(result.to_dict())
    else:
        print(format_validation(result))
    return 0 if result.ok else 1


def _run_remote(args, rate, u, slo, stat) -> int:
    """``--server``: the same check asked of an ``augury serve`` (MODEL is the model's name there)."""
    from augury.client import client_from_args, validation_view
    from augury.errors import UsageError
    from scheduler.validate import read_proposal

    config = parse_config(args.config)
    if args.proposal:
        config = {**read_proposal(args.proposal), **config}
    if not args.config and not args.proposal:
        raise UsageError("give the proposal with --config op=p,... or --proposal FILE", field="--config")
    with client_from_args(args) as client:
        data = client.validate(args.model, rate, config, latency_slo_ms=slo, latency_stat=stat,
                               utilization_target=u)
    if args.json:
        print_json(data)
    else:
        print(format_validation(validation_view(data)))
    return 0 if data["ok"] else 1


def answer(model, rate, config, utilization_target, latency_slo_ms, latency_stat, *, compiled=None):
    """The ``scheduler.validate.Validation`` of ``config`` at ``rate``: what ``augury validate`` and
    ``augury serve``'s ``/v1/validate`` compute (its ``to_dict()`` is the ``--json`` object)."""
    from scheduler.validate import ValidateConfig, validate

    return validate(compiled if compiled is not None else model, rate, config,
                    ValidateConfig(utilization_target, latency_slo_ms, latency_stat))


def format_validation(result) -> str:
    from augury.commands.predict import format_prediction

    h = result.headroom
    ratio = "-" if h.ratio is None else f"x{h.ratio:.3g}"
    lines = ["OK" if result.ok else f"{len(result.violations)} VIOLATION(S)"]
    for v in result.violations:
        value = "unbounded" if v.value is None else f"{v.value:.4g}"
        lines.append(f"  - {v.kind}{' at ' + v.operator if v.operator else ''}: {value} > {v.limit:.4g}")
    lines.append(f"headroom: up to {h.max_rate:,.1f} tuples/s ({ratio}), then "
                 f"{h.limited_by.get('kind') or '-'}"
                 + (f" at {h.limited_by['operator']}" if h.limited_by.get("operator") else ""))
    lines += ["", format_prediction(result.prediction)]
    return "\n".join(lines)
