"""The modeler's exception types; all name the file, field and value at fault."""

from __future__ import annotations

from augury.errors import AuguryError


class ModelError(AuguryError):
    """The model file or a model value is invalid (a cycle, a bad field, ...)."""


class ConfigError(ModelError):
    """A parallelism configuration does not fit the model (unknown operator, out of bounds)."""


class ForecastError(AuguryError):
    """A forecast cannot be made (too little history, bad series, ...)."""


class CalibrationError(AuguryError):
    """History does not hold enough data to calibrate a parameter."""
