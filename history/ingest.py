"""Ingest: read files with an adapter, validate, quarantine, merge into the store (atomically).

``ingest(paths, fmt, store, options) -> IngestReport``. Every file is read before anything is
written, so a file that cannot be read at all (``AdapterError``) leaves the store untouched.
Counts satisfy ``rows_read = accepted + duplicates + sum(quarantined.values())`` and
``accepted = new + already_stored``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from history.adapters import AdapterOptions, read
from history.adapters._common import CANDIDATE_COLUMNS
from history.schema import Reason
from history.store import MetricStore
from history.validate import validate


@dataclass(frozen=True)
class IngestReport:
    """What one ``augury ingest`` did."""

    store: str
    format: str
    files: tuple[str, ...]
    rows_read: int
    """Candidate rows the adapters produced (one per metric sample)."""
    accepted: int
    """Valid rows: new + already_stored."""
    new: int
    already_stored: int
    duplicates: int
    """Exact duplicate rows within the input, merged into one."""
    quarantined: Mapping[str, int] = field(default_factory=dict)
    """Reason -> rows quarantined by this ingest."""
    ignored: Mapping[str, int] = field(default_factory=dict)
    """Engine metric name -> samples not in the vocabulary (not rows; never stored)."""
    partitions: tuple[str, ...] = ()
    version: int = 0

    @property
    def quarantined_total(self) -> int:
        return int(sum(self.quarantined.values()))

    def to_dict(self) -> dict:
        return {
            "store": self.store, "format": self.format, "files": list(self.files),
            "rows_read": self.rows_read, "accepted": self.accepted, "new": self.new,
            "already_stored": self.already_stored, "duplicates": self.duplicates,
            "quarantined": dict(self.quarantined), "quarantined_total": self.quarantined_total,
            "ignored": dict(self.ignored), "partitions": list(self.partitions),
            "store_version": self.version,
        }


def ingest(paths: Sequence[str | Path], fmt: str, store: str | Path,
           options: AdapterOptions = AdapterOptions()) -> IngestReport:
    """Ingest ``paths`` (format ``fmt``) into the store at ``store`` (created if absent)."""
    frames = []
    ignored: dict[str, int] = {}
    for path in paths:
        result = read(path, fmt, options)
        frames.append(result.rows)
        for name, count in result.ignored.items():
            ignored[name] = ignored.get(name, 0) + int(count)
    cands = (pd.concat(frames, ignore_index=True) if frames
             else pd.DataFrame(columns=list(CANDIDATE_COLUMNS)))
    checked = validate(cands)
    metric_store = MetricStore(store, create=True)
    written = metric_store.write(checked.accepted, checked.quarantined)
    reasons = pd.concat([checked.quarantined["reason"], written.quarantined["reason"]])
    counts = {r.value: int((reasons == r.value).sum()) for r in Reason}
    return IngestReport(
        store=str(store), format=fmt, files=tuple(str(p) for p in paths), rows_read=len(cands),
        accepted=len(checked.accepted) - len(written.quarantined), new=written.new,
        already_stored=written.already_stored, duplicates=checked.duplicates,
        quarantined={k: v for k, v in counts.items() if v}, ignored=dict(sorted(ignored.items())),
        partitions=written.partitions, version=written.version,
    )
