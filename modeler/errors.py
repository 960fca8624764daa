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
                         + (f" = {self.value!r}" if self.value is not None else ""))
        elif self.value is not None:
            where.append(f"value {self.value!r}")
        prefix = ": ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message

    def with_file(self, file: str) -> "AuguryError":
        """Return the same error, attributed to ``file`` (when it had none)."""
        if self.file is None:
            self.file = str(file)
            self.args = (self.__str__(),)
        return self


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
