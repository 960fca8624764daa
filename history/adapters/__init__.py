"""Adapters: read engine metric files into candidate rows of the normalized schema.

``read(path, fmt, options) -> AdapterResult``; ``FORMATS`` names the formats the command line
accepts. Adapters only read and map; validation and quarantine happen in ``history.validate``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from history.adapters._common import (CANDIDATE_COLUMNS, AdapterOptions, AdapterResult,
                                      parse_edges)
from history.adapters.flink_rest import read_flink_rest
from history.adapters.heron import read_heron_tracker
from history.adapters.normalized import read_normalized
from history.adapters.prometheus import read_prometheus
from history.errors import AdapterError

FORMATS: dict[str, Callable[[Path, AdapterOptions], AdapterResult]] = {
    "normalized": read_normalized,
    "flink-rest": read_flink_rest,
    "prometheus": read_prometheus,
    "heron-tracker": read_heron_tracker,
}


def read(path: str | Path, fmt: str, options: AdapterOptions = AdapterOptions()) -> AdapterResult:
    """Read one file in format ``fmt`` (a key of ``FORMATS``)."""
    path = Path(path)
    if fmt not in FORMATS:
        raise AdapterError(f"unknown format; expected one of {', '.join(FORMATS)}",
                           field="--format", value=fmt)
    if not path.is_file():
        raise AdapterError("no such file", file=str(path))
    return FORMATS[fmt](path, options)


__all__ = ["CANDIDATE_COLUMNS", "FORMATS", "AdapterOptions", "AdapterResult", "read",
           "parse_edges"]
