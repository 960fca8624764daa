"""The root of augury's exception types, and the modeler's own.

Every error a user can cause (bad file, bad flag, bad metric row) is an ``AuguryError`` naming
where it happened: the file, the field and the value. The command line turns it into a one-line
message on stderr and exit code 2. The root lives here, in the lowest layer, so that every layer
(``history``, ``modeler``, ``scheduler``, ``experiments`` and the ``augury`` command line) can
import it without importing upwards; ``augury.errors`` re-exports it. Each package derives its
own types (``ModelError`` below, ``history.errors.HistoryError``,
``scheduler.errors.InfeasiblePlan``...).

Importing this module is cheap: the standard library only (``modeler/__init__.py`` imports
nothing).
"""

from __future__ import annotations

from typing import Any


class AuguryError(Exception):
    """A typed, user-facing error that names the file, field and value at fault."""

    exit_code: int = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        field: str | None = None,
        value: Any = None,
    ) -> None:
        self.message = message
        self.file = file
        self.field = field
        self.value = value
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = []
        if self.file:
            where.append(_printable(str(self.file)))
        if self.field:
            where.append(f"field '{_printable(str(self.field))}'"
                         + (f" = {_shown(self.value)}" if self.value is not None else ""))
        elif self.value is not None:
            where.append(f"value {_shown(self.value)}")
        prefix = ": ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message

    def with_file(self, file: str) -> "AuguryError":
        """Return the same error, attributed to ``file`` (when it had none)."""
        if self.file is None:
            self.file = str(file)
            self.args = (self.__str__(),)
        return self


def _shown(value: Any) -> str:
    """``repr(value)`` for a one-line message: an integer of more than 18 digits by its size, any
    other value cut at 200 characters (a 400-digit or 5,000-character value names itself briefly)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        digits = len(str(abs(value))) if abs(value) < 10**4000 else "4,000+"
        return f"<{digits}-digit integer>"
    text = repr(value)
    if isinstance(value, str) and text.strip("'\"").isdigit() and len(text) > 42:
        return f"'<{len(text) - 2}-digit number>'"
    return text if len(text) <= 200 else text[:160] + f"... ({len(text):,} characters)"


def _printable(text: str) -> str:
    """``text`` with line breaks and other control characters escaped (a field named by a user's
    file may hold a newline; the message must stay one line)."""
    return text if text.isprintable() else repr(text)[1:-1]


class UsageError(AuguryError):
    """A bad command-line argument."""


class ModelError(AuguryError):
    """The model file or a model value is invalid (a cycle, a bad field, ...)."""


class ConfigError(ModelError):
    """A parallelism configuration does not fit the model (unknown operator, out of bounds)."""


class ForecastError(AuguryError):
    """A forecast cannot be made (too little history, bad series, ...)."""


class CalibrationError(AuguryError):
    """History does not hold enough data to calibrate a parameter."""
