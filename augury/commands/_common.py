"""Helpers shared by subcommands: parsing flags into values, printing JSON."""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from augury.errors import UsageError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d|w)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration_s(text: str, flag: str) -> float:
    """'90s', '5m', '2h', '1d' -> seconds. A bare number is seconds."""
    match = _DURATION.match(str(text))
    if not match:
        raise UsageError("expected a duration like 30s, 5m, 2h or 1d", field=flag, value=text)
    return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]


def parse_config(text: str | None, flag: str = "--config") -> dict[str, int]:
    """'op=4,other=2' -> {'op': 4, 'other': 2}."""
    if not text:
        return {}
    config: dict[str, int] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise UsageError("expected op=parallelism[,op=parallelism...]", field=flag, value=part)
        try:
            config[name.strip()] = int(value)
        except ValueError:
            raise UsageError("parallelism must be an integer", field=flag, value=part) from None
    return config


def parse_positive_float(text: str, flag: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UsageError("expected a number", field=flag, value=text) from None
    if not math.isfinite(value) or value < 0:
        raise UsageError("expected a finite, non-negative number", field=flag, value=text)
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _jsonable(value.item())
    return value


def print_json(payload: Any) -> None:
    """Exactly one JSON object on stdout; non-finite floats become null."""
    json.dump(_jsonable(payload), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")
