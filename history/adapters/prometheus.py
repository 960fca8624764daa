"""Prometheus text exposition of Flink's PrometheusReporter (``flink_taskmanager_job_task_*``).

Task-scope samples carry the labels ``job_name``, ``task_name`` (the vertex) and
``subtask_index`` (the instance). Per-second gauges become window counts (value x window_s):
``numRecordsInPerSecond`` -> records_in, ``numRecordsOutPerSecond`` -> records_out,
``busyTimeMsPerSecond`` -> busy_ms, ``backPressuredTimeMsPerSecond`` -> backpressured_ms,
``idleTimeMsPerSecond`` -> idle_ms; levels are kept: ``..._operator_pendingRecords`` ->
source_lag, ``..._buffers_inputQueueLength`` -> queue_len. Other samples are counted as ignored.

The window: a sample timestamp (ms since epoch, optional in the format) is the scrape time, the
end of the window: window start = floor(t / window_s) * window_s - window_s. Flink's reporter
writes no timestamps: then ``--ts`` gives the window start. Flink reports output per vertex,
not per edge: ``--edges`` attributes it to the single downstream vertex when there is one.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from history.adapters._common import AdapterOptions, AdapterResult, candidates, single_target
from history.errors import AdapterError

PREFIX = "flink_taskmanager_job_task_"
RATE_METRICS = {
    "numRecordsInPerSecond": "records_in",
    "numRecordsOutPerSecond": "records_out",
    "busyTimeMsPerSecond": "busy_ms",
    "backPressuredTimeMsPerSecond": "backpressured_ms",
    "idleTimeMsPerSecond": "idle_ms",
}
LEVEL_METRICS = {
    "operator_pendingRecords": "source_lag",
    "buffers_inputQueueLength": "queue_len",
    "Shuffle_Netty_Input_Buffers_inputQueueLength": "queue_len",
}
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def parse_labels(text: str | None) -> dict[str, str] | None:
    """'a="x",b="y",' -> {'a': 'x', 'b': 'y'}; None when the text is not a label set."""
    labels: dict[str, str] = {}
    pos = 0
    text = text or ""
    while pos < len(text):
        match = _LABEL.match(text, pos)
        if not match:
            return None if text[pos:].strip() else labels
        value = match.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        labels[match.group(1)] = value
        pos = match.end()
    return labels


def _window_start(stamp: str, window_s: float) -> str:
    """The start (ISO 8601) of the window that ends at the sample's ``stamp`` (ms since epoch);
    the stamp as read when it is no representable time (a 23-digit number, year -1199):
    validation quarantines that sample (``bad_timestamp``), the others are kept."""
    try:
        start_s = math.floor(int(stamp) / 1000.0 / window_s) * window_s - window_s
        return datetime.fromtimestamp(start_s, tz=timezone.utc).isoformat()
    except (OverflowError, OSError, ValueError):
        return stamp


def read_prometheus(path: Path, options: AdapterOptions = AdapterOptions()) -> AdapterResult:
    path = Path(path)
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise AdapterError(f"not UTF-8 text ({err.reason})", file=file) from None
    window_s = float(options.window_s or 10.0)
    records: list[dict[str, Any]] = []
    ignored: Counter[str] = Counter()
    samples = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _SAMPLE.match(line.strip())
        labels = parse_labels(match.group(2)) if match else None
        if match is None or labels is None:
            records.append({"file": file, "line": number, "reason": "malformed_row",
                            "detail": f"not a Prometheus sample: {line[:80]}"})
            continue
        samples += 1
        name, raw, stamp = match.group(1), match.group(3), match.group(4)
        suffix = name[len(PREFIX):] if name.startswith(PREFIX) else None
        metric = RATE_METRICS.get(suffix) if suffix else None
        scale = metric is not None
        if metric is None and suffix:
            metric = LEVEL_METRICS.get(suffix)
        if metric is None:
            ignored[name] += 1
            continue
        if stamp is not None:
            ts: Any = _window_start(stamp, window_s)
        elif options.ts is not None:
            ts = options.ts
        else:
            raise AdapterError("samples carry no timestamp; pass --ts (the window start)",
                               file=file, field="timestamp")
        operator = labels.get("task_name")
        value: Any = raw
        if scale:
            try:
                rate = float(raw)
                if math.isfinite(rate):
                    value = rate * window_s
            except ValueError:
                pass
        records.append({
            "ts": ts, "window_s": window_s, "job": options.job or labels.get("job_name"),
            "operator": operator, "instance": labels.get("subtask_index"), "metric": metric,
            "value": value,
            "target": single_target(options, operator) if metric == "records_out" and operator else None,
            "file": file, "line": number,
        })
    if samples == 0 and not records:
        raise AdapterError("no samples: not Prometheus text exposition", file=file)
    return AdapterResult(candidates(records), dict(ignored))
