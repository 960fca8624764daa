"""``augury calibrate --store DIR --job NAME [--topology FILE] [--since T] [--at-max-rate] --out MODEL.yaml [--json]``.

Reads the summarized history tables (``augury history summarize`` writes them), fits the model
(``modeler.calibrate``), writes a normal model file with a ``calibration:`` section, and logs the
run to mlflow (parameters, per-parameter diagnostics as metrics, the model file as an artifact).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from augury.commands._common import print_json
from augury.errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("calibrate", help="fit a model file from metric history",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="metric store directory")
    parser.add_argument("--job", required=True, help="job name in the store")
    parser.add_argument("--topology", help="topology file (a model file without profiles); "
                        "default: inferred from edge_windows")
    parser.add_argument("--since", help="only windows starting at or after this time (ISO 8601, UTC)")
    parser.add_argument("--out", required=True, help="model file to write (.yaml or .json)")
    parser.add_argument("--min-busy", type=float, default=None,
                        help="windows must be at least this busy to measure service time (default 0.10)")
    parser.add_argument("--at-max-rate", action="store_true",
                        help="every window (from --since) ran at the job's max sustainable rate (a load test "
                        "whose input asked for more than the job carried): level the model to those rates "
                        "(capacity_scale in the calibration section)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-track", action="store_true", help="do not log to mlflow")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from history.store import MetricStore
    from modeler.calibrate import CalibrationConfig, Calibrator
    from modeler.errors import CalibrationError, ModelError
    from modeler.modelfile import dump_model, load_model, parse_model_text

    from history.files import atomic_path, check_writable

    out = Path(args.out)
    check_writable(out, "--out")  # fail before the work, not after it
    store = MetricStore(args.store)
    ops = store.table("operator_windows", args.job)
    edges = store.table("edge_windows", args.job)
    if ops.empty:
        raise CalibrationError("no operator_windows for this job (run `augury history summarize`)",
                               file=args.store, field="job", value=args.job)
    if args.since:
        try:
            since = pd.Timestamp(args.since)
        except ValueError:
            raise UsageError("expected an ISO 8601 time", field="--since", value=args.since) from None
        since = since.tz_localize("UTC") if since.tzinfo is None else since.tz_convert("UTC")
        ops = ops[ops["window_start"] >= since]
        edges = edges[edges["window_start"] >= since]
        if ops.empty:  # never write a model of nothing over --out
            raise CalibrationError("no operator_windows of this job start at or after --since",
                                   file=args.store, field="--since", value=args.since)
    topology = load_model(args.topology, require_profiles=False) if args.topology else None
    config = CalibrationConfig() if args.min_busy is None else CalibrationConfig(min_busy_fraction=args.min_busy)
    try:
        calibrator = Calibrator(config).fit(ops, edges, topology, job=args.job, at_max_rate=args.at_max_rate)
    except CalibrationError as err:
        raise err.with_file(args.store)
    model = calibrator.model_
    if not any(not op.is_source for op in model.operators):
        raise CalibrationError("no operator could be calibrated: nothing to write", file=args.store,
                               field="job", value=args.job)
    text = dump_model(model, "json" if out.suffix == ".json" else "yaml")
    try:  # the file written must be one augury reads back: every fitted number within modeler.limits
        parse_model_text(text, str(out))
    except ModelError as err:
        raise CalibrationError(f"the fitted model would not be a valid model file ({err.message}; "
                               f"{err.field} = {err.value!r}): the history's numbers are out of range",
                               file=args.store, field="job", value=args.job) from None

    # --out is replaced only when everything succeeded, mlflow included: written to a temporary
    # file first, renamed over --out at the end (an mlflow failure leaves --out as it was).
    run_id = None
    with atomic_path(out, "--out") as tmp:
        tmp.write_text(text)
        if not args.no_track:
            import tempfile

            from experiments import tracking

            with tracking.start_run("augury-calibrate", run_name=args.job) as mlrun:
                tracking.log_params({"job": args.job, "store": str(args.store), "since": args.since,
                                     "topology": args.topology, "min_busy_fraction": config.min_busy_fraction,
                                     "windows": len(ops), "at_max_rate": args.at_max_rate})
                tracking.log_metrics({"trust": calibrator.trust_, "calibration": _metrics(calibrator)})
                with tempfile.TemporaryDirectory() as staging:  # the artifact keeps --out's name
                    named = Path(staging) / out.name
                    named.write_text(text)
                    tracking.log_artifact(named)
                run_id = mlrun.info.run_id

    summary = {"out": str(out), "job": args.job, "windows": int(len(ops)), "trust": calibrator.trust_,
               "mlflow_run_id": run_id, "model": {op.name: {"parallelism": op.parallelism,
                                                            "service_time_ms": op.service_time_ms,
                                                            "service_scv": op.service_scv,
                                                            "scaling": op.scaling.form}
                                                  for op in model.operators if not op.is_source},
               "calibration": dict(model.calibration or {})}
    if args.json:
        print_json(summary)
    else:
        print(f"wrote {out} (trust {calibrator.trust_:.2f}, {len(ops)} operator windows)")
        for name, fit in calibrator.operators_.items():
            st = fit.service_time_ms
            print(f"  {name:<16} service {st.value:.4f} ms  (n={st.samples}, holdout err {st.holdout_error:.1%}, "
                  f"scaling {fit.scaling.form}) scv {fit.service_scv.value:.2f} ({fit.service_scv.source})")
        for (u, v), fit in calibrator.edges_.items():
            keys = f", keys zipf {fit.keys.exponent} x {fit.keys.count}" if fit.keys else ""
            print(f"  {u}->{v:<12} selectivity {fit.selectivity.value:.4f} ({fit.grouping}{keys})")
        if calibrator.capacity_scale_ is not None:
            cs = calibrator.capacity_scale_
            print(f"  capacity scale {cs.value:.3f} (n={cs.samples}, holdout err {cs.holdout_error:.1%}): "
                  f"every per-tuple time divided by it, to the max rates measured")
        if run_id:
            print(f"mlflow run {run_id}")
    return 0


def _metrics(calibrator) -> dict:
    out: dict = {}
    for name, fit in calibrator.operators_.items():
        out[f"{name}.service_time_ms"] = fit.service_time_ms.value
        out[f"{name}.service_time_holdout_error"] = fit.service_time_ms.holdout_error
        out[f"{name}.service_scv"] = fit.service_scv.value
    for (u, v), fit in calibrator.edges_.items():
        out[f"{u}-{v}.selectivity"] = fit.selectivity.value
    if calibrator.capacity_scale_ is not None:
        out["capacity_scale"] = calibrator.capacity_scale_.value
        out["capacity_scale_holdout_error"] = calibrator.capacity_scale_.holdout_error
    return out
