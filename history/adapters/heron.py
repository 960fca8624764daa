"""Heron Tracker ``/topologies/metricstimeline`` responses (one object, or a list of them).

The Tracker answers ``{"status", "executiontime", "message", "version", "result"}`` with
``result = {"component", "starttime", "endtime", "timeline": {metric: {instance_id:
{minute_start_s: value}}}}`` (values are strings; one value per minute, so window_s = 60).
Instance ids are ``container_<c>_<component>_<task>``; the instance index is the task id.

Mapping (Heron's BoltMetrics count each tuple twice: once under ``<stream>`` and once under
``<source component>/<stream>``; the single-segment form is used when present, else the
two-segment one, so nothing is double counted):

* ``__execute-count/<stream>`` -> records_in (summed over streams)
* ``__emit-count/<stream>`` -> records_out (summed over non-system streams; attributed to an edge
  only through ``--edges`` when the component has a single downstream component)
* ``__execute-time-ns/<stream>`` -> busy_ms (ns / 1e6); when absent, busy_ms is derived as
  ``__execute-latency`` (mean ns per tuple) x ``__execute-count`` / 1e6 (DS2's useful time)
* ``__time_spent_back_pressure_by_compid/<instance_id>`` (reported by ``__stmgr__``) ->
  backpressured_ms of the named instance. Note: Heron counts the time the stream manager spent
  in back pressure *initiated by* that instance (it was the slow one), not time it was throttled.

The Tracker does not name the topology in the response: ``--job`` is required.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from history.adapters._common import AdapterOptions, AdapterResult, candidates, load_json, single_target
from history.errors import AdapterError

_INSTANCE = re.compile(r"^container_(\d+)_(.+)_(\d+)$")
FAMILIES = {"__execute-count": "records_in", "__emit-count": "records_out",
            "__execute-time-ns": "exec_ns", "__execute-latency": "latency_ns"}
BACK_PRESSURE = "__time_spent_back_pressure_by_compid/"


def _num(raw: Any) -> float | None:
    try:
        return float(raw)
    except (TypeError, ValueError, OverflowError):
        return None


def read_heron_tracker(path: Path, options: AdapterOptions = AdapterOptions()) -> AdapterResult:
    path = Path(path)
    file = str(path)
    doc = load_json(path, file)
    responses = doc if isinstance(doc, list) else [doc]
    if not options.job:
        raise AdapterError("Heron Tracker responses do not name the topology; pass --job",
                           file=file, field="--job")
    window_s = float(options.window_s or 60.0)
    ignored: Counter[str] = Counter()
    # (component, task, minute) -> family -> {"single"|"double": {stream: raw}}
    cells: dict[tuple[str, int, str], dict[str, dict[str, dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(lambda: {"single": {}, "double": {}}))
    records: list[dict[str, Any]] = []
    for number, response in enumerate(responses, start=1):
        where = f"[{number - 1}]" if isinstance(doc, list) else ""
        if not isinstance(response, dict) or "result" not in response:
            raise AdapterError("expected a Tracker response object with 'result'", file=file,
                               field=f"{where}result")
        if response.get("status") not in (None, "success"):
            raise AdapterError(f"the Tracker reported failure: {response.get('message')}",
                               file=file, field=f"{where}status", value=response.get("status"))
        result = response["result"]
        timeline = result.get("timeline") if isinstance(result, dict) else None
        if not isinstance(timeline, dict):
            raise AdapterError("expected result.timeline {metric: {instance: {time: value}}} "
                               "(the /topologies/metricstimeline response)", file=file,
                               field=f"{where}result.timeline")
        for metric_name, by_instance in timeline.items():
            if not isinstance(by_instance, dict):
                raise AdapterError("expected {instance: {time: value}}", file=file,
                                   field=f"{where}result.timeline.{metric_name}")
            if metric_name.startswith(BACK_PRESSURE):
                named = metric_name[len(BACK_PRESSURE):]
                match = _INSTANCE.match(named)
                if not match:
                    records.append({"file": file, "line": number, "reason": "malformed_row",
                                    "detail": f"instance id not container_<c>_<component>_<task>: {named}"})
                    continue
                for stmgr, series in by_instance.items():  # one per stream manager; summed
                    for minute, raw in _series(series, file, metric_name):
                        cells[(match.group(2), int(match.group(3)), minute)]["bp"]["single"][
                            str(stmgr)] = raw
                continue
            family, _, stream = metric_name.partition("/")
            kind = FAMILIES.get(family)
            if kind is None or not stream or stream.split("/")[-1].startswith("__"):
                ignored[metric_name] += 1
                continue
            shape = "double" if "/" in stream else "single"
            for instance_id, series in by_instance.items():
                match = _INSTANCE.match(str(instance_id))
                if not match:
                    records.append({"file": file, "line": number, "reason": "malformed_row",
                                    "detail": f"instance id not container_<c>_<component>_<task>: {instance_id}"})
                    continue
                for minute, raw in _series(series, file, metric_name):
                    cells[(match.group(2), int(match.group(3)), minute)][kind][shape][stream] = raw
    for (component, task, minute), families in sorted(cells.items()):
        ts: Any = _minute_start(minute)
        base = {"ts": ts, "window_s": window_s, "job": options.job, "operator": component,
                "instance": task, "file": file, "line": None}

        def total(kind: str) -> tuple[Any, dict[str, Any]] | None:
            entry = families.get(kind)
            if entry is None:
                return None
            chosen = entry["single"] or entry["double"]
            values = [_num(v) for v in chosen.values()]
            if any(v is None for v in values):
                return next(v for v in chosen.values() if _num(v) is None), chosen
            return sum(values), chosen

        for kind, metric in (("records_in", "records_in"), ("records_out", "records_out"),
                             ("bp", "backpressured_ms")):
            got = total(kind)
            if got is not None:
                target = single_target(options, component) if metric == "records_out" else None
                records.append({**base, "metric": metric, "value": got[0], "target": target})
        busy = total("exec_ns")
        if busy is not None:
            value = busy[0] / 1e6 if isinstance(busy[0], float) else busy[0]
            records.append({**base, "metric": "busy_ms", "value": value})
        elif "latency_ns" in families and "records_in" in families:
            lat = families["latency_ns"]
            counts = families["records_in"]
            shape = "single" if lat["single"] and counts["single"] else "double"
            busy_ns = 0.0
            bad = None
            for stream, raw in lat[shape].items():
                mean_ns, count = _num(raw), _num(counts[shape].get(stream, 0))
                if mean_ns is None or count is None:
                    bad = raw if mean_ns is None else counts[shape].get(stream)
                    break
                busy_ns += mean_ns * count
            records.append({**base, "metric": "busy_ms", "value": bad if bad is not None else busy_ns / 1e6})
    return AdapterResult(candidates(records), dict(ignored))


def _minute_start(minute: Any) -> Any:
    """The minute's start (ISO 8601) from the Tracker's epoch-seconds key; the key as read when it
    is no representable time (validation quarantines the rows: ``bad_timestamp``)."""
    start = _num(minute)
    try:
        return datetime.fromtimestamp(start, tz=timezone.utc).isoformat()
    except (TypeError, OverflowError, OSError, ValueError):
        return minute


def _series(series: Any, file: str, metric: str):
    if not isinstance(series, dict):
        raise AdapterError("expected {minute_start_s: value}", file=file, field=metric, value=series)
    return series.items()
