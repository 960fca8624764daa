"""Flink REST: ``GET /jobs/<id>/vertices/<vid>/subtasks/metrics?get=...&subtasks=<i>`` captures.

Flink's response (``AggregatedMetricsResponseBody``) is a JSON array of aggregated metrics,
``[{"id": "busyTimeMsPerSecond", "min": .., "max": .., "avg": .., "sum": .., "skew": ..}, ...]``,
aggregated over the subtasks selected by ``?subtasks=``. The response carries neither a time, the
vertex name nor the subtask, so a capture file wraps the verbatim responses::

    {"job": "wordcount", "window_s": 10,
     "captures": [{"ts": "2024-05-01T12:00:00Z", "vertex": "Tokenizer", "subtask": 0,
                   "outputs": ["Counter"], "response": [ ...Flink's array, verbatim... ]}]}

Fetch one subtask per request (``?subtasks=<i>``): then min = max = avg = sum is that subtask's
value (``sum`` is read, else ``avg``/``max``/``min``). Per-second gauges become window counts:
value x window_s (``numRecordsInPerSecond`` -> records_in, ``numRecordsOutPerSecond`` ->
records_out, ``busyTimeMsPerSecond`` -> busy_ms, ``backPressuredTimeMsPerSecond`` ->
backpressured_ms, ``idleTimeMsPerSecond`` -> idle_ms). ``pendingRecords`` (FLIP-33 source
backlog, any ``<operator>.pendingRecords``) -> source_lag and ``inputQueueLength`` -> queue_len
are levels and are not scaled. ``outputs`` (or ``--edges``) names the downstream vertices; with
exactly one, records_out is attributed to that edge, otherwise it is the vertex's total output.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from history.adapters._common import AdapterOptions, AdapterResult, candidates, load_json
from history.errors import AdapterError

RATE_METRICS = {
    "numRecordsInPerSecond": "records_in",
    "numRecordsOutPerSecond": "records_out",
    "busyTimeMsPerSecond": "busy_ms",
    "backPressuredTimeMsPerSecond": "backpressured_ms",
    "idleTimeMsPerSecond": "idle_ms",
}
LEVEL_SUFFIXES = {"pendingRecords": "source_lag", "inputQueueLength": "queue_len"}
AGGREGATES = ("sum", "avg", "max", "min")


def _level_metric(metric_id: str) -> str | None:
    last = metric_id.rsplit(".", 1)[-1]
    return LEVEL_SUFFIXES.get(last)


def read_flink_rest(path: Path, options: AdapterOptions = AdapterOptions()) -> AdapterResult:
    path = Path(path)
    file = str(path)
    doc = load_json(path, file)
    if isinstance(doc, list):
        raise AdapterError("a bare Flink response has no time, vertex or subtask; wrap it in a "
                           "capture {\"captures\": [{\"ts\", \"vertex\", \"subtask\", \"response\"}]}",
                           file=file, field="captures")
    if not isinstance(doc, dict) or not isinstance(doc.get("captures"), list):
        raise AdapterError("expected an object with a 'captures' list", file=file, field="captures")
    job = options.job or doc.get("job")
    if not job:
        raise AdapterError("the capture names no job; pass --job", file=file, field="job")
    records: list[dict[str, Any]] = []
    ignored: Counter[str] = Counter()
    for number, capture in enumerate(doc["captures"], start=1):
        where = f"captures[{number - 1}]"
        if not isinstance(capture, dict):
            raise AdapterError("expected an object", file=file, field=where, value=capture)
        for key in ("vertex", "response"):
            if key not in capture:
                raise AdapterError(f"capture lacks '{key}'", file=file, field=f"{where}.{key}")
        if "subtask" not in capture:
            raise AdapterError("capture lacks 'subtask': fetch one subtask per request "
                               "(?subtasks=<i>) so values are per instance",
                               file=file, field=f"{where}.subtask")
        if not isinstance(capture["response"], list):
            raise AdapterError("'response' must be Flink's JSON array of aggregated metrics",
                               file=file, field=f"{where}.response")
        vertex = str(capture["vertex"])
        window_s = options.window_s or capture.get("window_s") or doc.get("window_s") or 10.0
        outputs = capture.get("outputs")
        if outputs is not None and not isinstance(outputs, list):
            raise AdapterError("'outputs' must be a list of vertex names", file=file,
                               field=f"{where}.outputs", value=outputs)
        downstream = tuple(outputs) if outputs is not None else options.edges.get(vertex, ())
        base = {"ts": capture.get("ts", options.ts), "window_s": window_s, "job": job,
                "operator": vertex, "instance": capture["subtask"], "file": file, "line": number}
        for item in capture["response"]:
            if not isinstance(item, dict) or "id" not in item:
                records.append({**base, "reason": "malformed_row",
                                "detail": f"not an aggregated metric object: {str(item)[:80]}"})
                continue
            metric_id = str(item["id"])
            metric = RATE_METRICS.get(metric_id)
            scale = True
            if metric is None:
                metric = _level_metric(metric_id)
                scale = False
            if metric is None:
                ignored[metric_id] += 1
                continue
            raw = next((item[a] for a in AGGREGATES if a in item), None)
            value = _scaled(raw, window_s) if scale else raw
            target = downstream[0] if metric == "records_out" and len(downstream) == 1 else None
            records.append({**base, "metric": metric, "value": value, "target": target})
    return AdapterResult(candidates(records), dict(ignored))


def _scaled(raw: Any, window_s: Any) -> Any:
    """rate x window; anything non-numeric is passed on as read (validation quarantines it)."""
    try:
        rate = float(raw)
        window = float(window_s)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond float
        return raw
    if not math.isfinite(rate) or isinstance(raw, bool):
        return raw
    return rate * window
