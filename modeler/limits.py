"""The limits of every size and number a user can type, and the one check that enforces them.

Every count that sizes an allocation or a loop (operators, parallelism, key counts, rates in a
grid, sweep values, forecast folds and steps, simulated windows, queue capacities) and every
number in a model file has an upper bound here, checked when the input is parsed, before anything
is allocated; a value beyond it is a bad input (exit 2) naming the field and the value. The
figures are documented in the README's contract section.

Pure (no I/O, the standard library only), so every layer can use it.
"""

from __future__ import annotations

import math
from typing import Any

from modeler.errors import AuguryError, UsageError

MAX_OPERATORS = 1_000
"""Operators in one model file."""
MAX_PARALLELISM = 10_000
"""Parallelism (and min/max parallelism) of one operator."""
MAX_KEYS = 10_000_000
"""Key count of a key distribution (zipf/uniform ``count``, ``weights`` entries)."""
MAX_BUFFER_TUPLES = 1_000_000_000
"""Input buffer of one operator instance, tuples (``buffer_tuples``)."""
MAX_CPU_OVERHEAD_PER_INSTANCE = 1.0
"""A model file's ``resources.cpu_overhead_per_instance`` (fraction of CPU work per instance beyond
the cores): each such instance doubling every operator's CPU work is far beyond anything measured
(flink-sql's q8: a few per cent)."""
MAX_MODEL_NUMBER = 1e12
"""Any other number in a model file (times in ms, selectivities, scvs, rate shares, exponents)."""
MAX_RATES = 1_000_000
"""Rates in a what-if grid (``--rates A:B:N``)."""
MAX_WHATIF_ROWS = 1_000_000_000
"""Rows of one what-if table (configurations x rates): a billion rows is tens of GB of Parquet."""
MAX_SWEEP_VALUES = 100_000
"""Values of one ``--sweep op=...`` flag (before the configurations' own cap)."""
MAX_FOLDS = 10_000
"""Backtest folds (``forecast --folds``)."""
MAX_STEPS = 1_000_000
"""Steps of a forecast or of a series grid (horizon / step, history / step)."""
MAX_DURATION_S = 10 * 365 * 86_400.0
"""Any duration flag (``--window``, ``--lead-time``, ``--horizon``, ``--duration``...): 10 years."""
MIN_WINDOW_S = 0.001
"""Shortest metrics window of the testbed (1 ms)."""
MAX_WINDOWS = 10_000_000
"""Metric windows of one testbed run (duration / window)."""
MAX_QUEUE = 100_000_000
"""Input queue capacity per instance in the testbed, tuples."""


def check_number(value: Any, field: str, *, minimum: float | None = None, maximum: float | None = None,
                 integer: bool = False, file: str | None = None,
                 error: type[AuguryError] = UsageError) -> int | float:
    """``value`` (a number, or text of one) as an int (``integer``) or float, checked: finite,
    an integer when asked, within [``minimum``, ``maximum``]. Never overflows (a 400-digit integer
    is compared as an integer, not converted to a float). Raises ``error`` naming ``field``."""
    raw = value
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text) if integer or text.lstrip("+-").isdigit() else float(text)
        except ValueError:
            kind = "an integer" if integer else "a number"
            raise error(f"expected {kind}", file=file, field=field, value=raw) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error("expected a number", file=file, field=field, value=raw)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise error("must be finite", file=file, field=field, value=raw)
        if integer:
            if not value.is_integer():
                raise error("must be an integer", file=file, field=field, value=raw)
    if minimum is not None and value < minimum:
        raise error(f"must be >= {_fmt(minimum)}", file=file, field=field, value=_short(raw))
    if maximum is not None and value > maximum:
        raise error(f"must be <= {_fmt(maximum)} (the documented limit)", file=file, field=field,
                    value=_short(raw))
    return int(value) if integer else float(value)


def _fmt(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _short(value: Any) -> Any:
    """Huge integers shown by their size, not their 400 digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        return f"<{len(str(abs(value)))}-digit integer>"
    if isinstance(value, str) and len(value) > 60:
        return value[:40] + "..."
    return value
