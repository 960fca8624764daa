"""The root of augury's exception types: re-exported from ``modeler.errors``.

``AuguryError`` and ``UsageError`` live in ``modeler.errors`` (the lowest layer, importable by
``history``, ``modeler``, ``scheduler`` and ``experiments`` without importing the command line);
this module keeps ``from augury.errors import AuguryError`` working.
"""

from __future__ import annotations

from modeler.errors import AuguryError, UsageError

__all__ = ["AuguryError", "UsageError"]
