"""Helpers shared by subcommands: parsing flags into values, printing JSON.

``parse_duration_s`` lives in ``modeler.units`` (every layer parses durations); it is re-exported
here for the subcommands."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from modeler.errors import UsageError
from modeler.units import parse_duration_s

__all__ = ["parse_duration_s", "parse_config", "parse_positive_float", "print_json"]


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
    """``value`` with non-finite floats as None, dict keys as strings, tuples as lists and numpy
    scalars as Python numbers (``json.dumps(..., allow_nan=False)`` then accepts it)."""
    kind = type(value)  # the plain JSON types first, by exact type: a predict answer is ~60 of them
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is dict:
        return {k if type(k) is str else str(k): _jsonable(v) for k, v in value.items()}
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
