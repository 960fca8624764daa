"""``augury predict MODEL --rate R [--config op=p,...] [--json]``."""

from __future__ import annotations

import argparse

from augury.commands._common import parse_config, parse_positive_float, print_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "predict", help="predict throughput, max rate, bottleneck and latency of a configuration",
        description="Predict what the job does at input rate R with the model's (or a given) parallelism.",
    )
    parser.add_argument("model", metavar="MODEL", help="model file (YAML or JSON)")
    parser.add_argument("--rate", required=True, help="input rate, tuples/s")
    parser.add_argument("--config", help="parallelism overrides: op=p[,op=p...] (others keep the model's)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    from augury.client import add_server_flags

    add_server_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from modeler.modelfile import load_model

    rate = parse_positive_float(args.rate, "--rate")
    config = parse_config(args.config)
    if getattr(args, "server", None):
        from augury.client import client_from_args, prediction_view, restart_view

        with client_from_args(args) as client:
            data = client.predict(args.model, rate, config)
        if args.json:
            print_json(data)
        else:
            print(format_prediction(prediction_view(data)))
            print(format_restart(restart_view(data)))
        return 0
    model = load_model(args.model)
    prediction, restart = answer(model, config, rate)
    if args.json:
        print_json(to_json(prediction, restart))
    else:
        print(format_prediction(prediction))
        print(format_restart(restart))
    return 0


def answer(model, config, rate, compiled=None):
    """(the ``Prediction`` of ``config`` at ``rate``, the restart estimate of changing to it): what
    ``augury predict`` and ``augury serve``'s ``/v1/predict`` compute. ``compiled``: the model
    already compiled (``modeler.queueing.compile_model``), to skip compiling per call."""
    from modeler.queueing import predict

    prediction = predict(compiled if compiled is not None else model, config, rate)
    return prediction, restart_of_change(model, prediction.config)


def to_json(prediction, restart) -> dict:
    """The ``augury predict --json`` object (the ``/v1/predict`` answer)."""
    return {**prediction.to_dict(), **restart_fields(restart)}


def restart_of_change(model, config):
    """``modeler.restart.restart_estimate`` of changing the model file's configuration (the one
    running) into ``config``."""
    from modeler.restart import restart_estimate

    return restart_estimate(model, model.config, config)


def restart_fields(estimate) -> dict:
    """The JSON keys ``predict`` and ``plan`` add: ``restart_s`` (predicted restart time of the
    change, s; 0 when the configuration does not change) and ``restart`` (its parts)."""
    return {"restart_s": estimate.restart_s, "restart": estimate.to_dict()}


def format_restart(e) -> str:
    """One line: the predicted restart time of the change and where it comes from."""
    if not e.changed:
        return "restart: none (the configuration does not change)"
    parts = f"base {e.base_s:g} s" + (" (assumed: the model gives no restart_base_s)" if e.base_assumed else "")
    if e.state_mb > 0:
        parts += f" + {e.state_mb:,.0f} MB state / {e.restore_mb_per_s:g} MB/s"
    return f"restart: {e.restart_s:,.1f} s predicted for changing {', '.join(e.changed)} ({parts})"


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def format_prediction(p) -> str:
    """A readable table of a ``Prediction``."""
    lines = [
        f"rate {_fmt(p.rate, 1)} tuples/s   throughput {_fmt(p.throughput, 1)}   "
        f"max_rate {_fmt(p.max_rate, 1)}   bottleneck {p.bottleneck or '-'}"
        + ("   SATURATED (back pressure)" if p.saturated else ""),
        "latency ms: mean {}  p95 {}  p99 {}".format(
            _fmt(p.latency_ms["mean"], 3), _fmt(p.latency_ms["p95"], 3), _fmt(p.latency_ms["p99"], 3)),
        "",
        f"{'operator':<16}{'p':>4}{'arrival/s':>12}{'processed/s':>13}{'util':>7}{'max util':>9}"
        f"{'sojourn ms':>12}  flags",
    ]
    for name, op in p.operators.items():
        flags = ",".join(f for f, on in (("bottleneck", op.bottleneck), ("backpressured", op.backpressured)) if on)
        lines.append(
            f"{name:<16}{op.parallelism:>4}{op.arrival_rate:>12,.1f}{op.processed_rate:>13,.1f}"
            f"{op.utilization:>7.2f}{op.max_utilization:>9.2f}{_fmt(op.sojourn_ms, 3):>12}  {flags}"
        )
    return "\n".join(lines)
