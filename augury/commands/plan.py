"""``augury plan MODEL --rate R [--latency-slo-ms L] [--latency-stat mean|p95|p99]
[--utilization-target U] [--align] [--json]``: the cheapest configuration meeting the targets."""

from __future__ import annotations

import argparse

from augury.commands._common import parse_positive_float, print_json


def add_target_flags(parser: argparse.ArgumentParser) -> None:
    """--latency-slo-ms, --latency-stat, --utilization-target (shared with validate/schedule)."""
    parser.add_argument("--latency-slo-ms", default=None, help="end-to-end latency bound, ms (default: none)")
    parser.add_argument("--latency-stat", default="p99", choices=("mean", "p95", "p99"),
                        help="latency statistic the SLO applies to (default p99)")
    parser.add_argument("--utilization-target", default=None,
                        help="highest utilization of any instance, in (0, 1] (default 0.9 with "
                             "--latency-slo-ms: a ceiling, the SLO sizes; 0.7 without)")


def targets(args: argparse.Namespace) -> tuple[float, float | None, str]:
    from augury.errors import UsageError

    slo = None
    if args.latency_slo_ms is not None:
        slo = parse_positive_float(args.latency_slo_ms, "--latency-slo-ms")
        if slo <= 0:
            raise UsageError("expected a number > 0", field="--latency-slo-ms", value=args.latency_slo_ms)
    if args.utilization_target is None:  # scheduler.targets' rule: a ceiling of 0.9 under an SLO, else 0.7
        from scheduler.targets import Targets

        return Targets(latency_slo_ms=slo).utilization_target, slo, args.latency_stat
    u = parse_positive_float(args.utilization_target, "--utilization-target")
    if not 0 < u <= 1:
        raise UsageError("expected a number in (0, 1]", field="--utilization-target", value=args.utilization_target)
    return u, slo, args.latency_stat


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="the configuration with the fewest instances that meets the targets at a rate",
        description="Choose every operator's parallelism in one step: fewest instances such that every "
                    "instance stays under the utilization target and the latency SLO holds.")
    parser.add_argument("model", metavar="MODEL", help="model file (YAML or JSON)")
    parser.add_argument("--rate", required=True, help="input rate, tuples/s")
    add_target_flags(parser)
    parser.add_argument("--align", action="store_true",
                        help="key-grouped operators only at divisors of their max_parallelism")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    from augury.client import add_server_flags

    add_server_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from modeler.modelfile import load_model

    rate = parse_positive_float(args.rate, "--rate")
    u, slo, stat = targets(args)
    if getattr(args, "server", None):
        from augury.client import client_from_args, plan_view, restart_view
        from augury.commands.predict import format_restart

        with client_from_args(args) as client:
            data = client.plan(args.model, rate, latency_slo_ms=slo, latency_stat=stat, utilization_target=u,
                               align=args.align)
        if args.json:
            print_json(data)
        else:
            print(format_plan(plan_view(data)))
            print(format_restart(restart_view(data)))
        return 0 if data["feasible"] else 1
    model = load_model(args.model)
    result, restart = answer(model, rate, u, slo, stat, args.align)
    from augury.commands.predict import format_restart

    if args.json:
        print_json(to_json(result, restart))
    else:
        print(format_plan(result))
        print(format_restart(restart))
    return 0 if result.feasible else 1


def answer(model, rate, utilization_target, latency_slo_ms, latency_stat, align=False, *, compiled=None,
           max_evaluations: int | None = None):
    """(the ``Plan`` at ``rate`` for the targets, the restart estimate of changing to it): what
    ``augury plan`` and ``augury serve``'s ``/v1/plan`` compute. ``compiled``: the model already
    compiled; ``max_evaluations``: the search budget (default ``PlanConfig``'s)."""
    from augury.commands.predict import restart_of_change
    from scheduler.plan import PlanConfig, plan

    extra = {} if max_evaluations is None else {"max_evaluations": max_evaluations}
    result = plan(compiled if compiled is not None else model, rate,
                  PlanConfig(utilization_target=utilization_target, latency_slo_ms=latency_slo_ms,
                             latency_stat=latency_stat, align=align, **extra))
    return result, restart_of_change(model, result.config)


def to_json(result, restart) -> dict:
    """The ``augury plan --json`` object (the ``/v1/plan`` answer)."""
    from augury.commands.predict import restart_fields

    return {**result.to_dict(), **restart_fields(restart)}


def format_plan(result) -> str:
    from augury.commands.predict import format_prediction

    head = "FEASIBLE" if result.feasible else "INFEASIBLE"
    if not result.optimal:
        head += " (not proven optimal: search budget exhausted)"
    lines = [f"{head}: {result.instances} instances over {', '.join(result.variable) or 'no operator'} "
             f"(total {result.total_instances}) at {result.rate:,.1f} tuples/s",
             "config: " + ",".join(f"{n}={p}" for n, p in result.config.items())]
    lines += [f"  - {r}" for r in result.reasons]
    lines += ["", format_prediction(result.prediction)]
    return "\n".join(lines)
