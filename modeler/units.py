"""Durations written as text: ``'90s'``, ``'5m'``, ``'2h'``, ``'1d'`` -> seconds.

Lives in ``modeler`` (the lowest layer, pure: no I/O, the standard library only) so that every
layer that reads a duration from a flag or a file can parse it the same way without importing the
command line: ``history`` (``--window``), ``scheduler`` (lead time, stabilization),
``experiments`` (``schedule_eval --replan``) and ``augury/commands`` (re-exported by
``augury.commands._common``). ``history`` may not import ``scheduler``, so ``scheduler`` would not
do.
"""

from __future__ import annotations

import re

from modeler.errors import UsageError
from modeler.limits import MAX_DURATION_S

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d|w)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration_s(text: str, flag: str) -> float:
    """'90s', '5m', '2h', '1d' -> seconds. A bare number is seconds. Raises ``UsageError``
    naming ``flag`` and the text when it is not a duration or exceeds ``MAX_DURATION_S``."""
    match = _DURATION.match(str(text))
    if not match:
        raise UsageError("expected a duration like 30s, 5m, 2h or 1d", field=flag, value=text)
    seconds = float(match.group(1)) * _UNIT_S[match.group(2) or "s"]
    if seconds > MAX_DURATION_S:
        raise UsageError(f"longer than {MAX_DURATION_S / 86_400:,.0f} days (the documented limit)",
                         field=flag, value=text)
    return seconds
