"""Writing a testbed run: metrics (Parquet + CSV, the normalized raw schema), events, summary.

``OUT/metrics.parquet`` (``history.schema.RAW_SCHEMA``) and ``OUT/metrics.csv`` (same columns;
``ts`` ISO 8601 UTC, empty ``target`` = none, empty ``host`` = no hosts configured), ``OUT/events.csv`` (t_s, ts, event, operator,
detail as JSON), ``OUT/summary.json`` (run parameters and totals).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from experiments.testbed.errors import TestbedError
from history.files import atomic_path, write_text
from history.schema import RAW_SCHEMA


def summary(testbed, wall_s: float | None = None) -> dict:
    lat = testbed.latencies_ms()
    cons = testbed.conservation()
    out = {
        "job": testbed.job,
        "simulated_s": testbed.now_s,
        "windows": len(testbed._windows),
        "window_s": testbed.cfg.window_s,
        "seed": testbed.cfg.seed,
        "load": testbed.load.describe(),
        "config": testbed.current(),
        "hops": testbed.hops,
        "operators": testbed.operator_stats(),
        "latency_ms": {
            "count": int(len(lat)),
            "mean": float(lat.mean()) if len(lat) else None,
            "p50": float(np.percentile(lat, 50)) if len(lat) else None,
            "p95": float(np.percentile(lat, 95)) if len(lat) else None,
            "p99": float(np.percentile(lat, 99)) if len(lat) else None,
        },
        "conservation": {"balanced": cons.balanced(), "entered": cons.entered,
                         "processed": cons.processed, "in_service": cons.in_service,
                         "queued": cons.queued, "in_flight": cons.in_flight},
        "events": len(testbed.events),
    }
    if wall_s is not None:
        out["wall_s"] = wall_s
        out["hops_per_s"] = testbed.hops / wall_s if wall_s > 0 else None
    return out


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return _clean(value.item())
    return value


def write_outputs(testbed, out_dir: str | Path, wall_s: float | None = None) -> dict[str, str]:
    """Write every output file into ``out_dir`` (created); returns {kind: path}."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TestbedError(f"cannot create the output directory: {err.strerror}", file=str(out)) from None
    frame = testbed.frame()
    if "host" not in frame:  # no hosts configured: the optional column stays null
        frame["host"] = None
    paths = {"metrics_parquet": out / "metrics.parquet", "metrics_csv": out / "metrics.csv",
             "events": out / "events.csv", "summary": out / "summary.json"}
    # Each file is written to a temporary name and renamed (history.files): a run that fails
    # (or is killed) midway never leaves a half-written file under a final name.
    table = pa.Table.from_pandas(frame, schema=RAW_SCHEMA, preserve_index=False)
    with atomic_path(paths["metrics_parquet"], "--out") as tmp:
        pq.write_table(table, tmp)
    csv = frame.copy()
    csv["ts"] = csv["ts"].dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with atomic_path(paths["metrics_csv"], "--out") as tmp:
        csv.to_csv(tmp, index=False)
    with atomic_path(paths["events"], "--out") as tmp:
        testbed.events_frame().to_csv(tmp, index=False)
    write_text(paths["summary"], json.dumps(_clean(summary(testbed, wall_s)), indent=2) + "\n", "--out")
    return {k: str(v) for k, v in paths.items()}
