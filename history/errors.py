"""The history package's exception types; every message names the file, field and value.

``HistoryError`` is the root (a bad input: exit code 2 on the command line). ``AdapterError``
is a file that cannot be read in its declared format at all (rows that are merely invalid are
quarantined, not raised). ``StoreError`` is a store directory that is missing or not a store (the
wrong directory named: bad input); ``CorruptStore`` a store whose own files are damaged (an
environment failure, exit code 3: restore the file or rebuild the store).
``SparkUnavailable`` is an environment failure (no Java, Spark cannot start): exit code 3, as is
``OutputError`` (an output file that cannot be written: read-only, no permission, disk full).
"""

from __future__ import annotations

from modeler.errors import AuguryError


class HistoryError(AuguryError):
    """A history input (file, row, field, flag) is invalid."""


class AdapterError(HistoryError):
    """A metrics file cannot be read in the format it was declared to be in."""


class StoreError(HistoryError):
    """The metric store directory is missing, not a store, or its manifest is corrupt."""


class CorruptStore(StoreError):
    """A file of the metric store cannot be read as the store's (a Parquet file overwritten,
    truncated or with a damaged page; a corrupt manifest): the store augury wrote is damaged, an
    environment failure like a failing disk, not a bad input."""

    exit_code = 3


class SparkUnavailable(HistoryError):
    """Spark could not be started (no Java, bad master URL...): an environment failure."""

    exit_code = 3


class OutputError(AuguryError):
    """An output file cannot be written (read-only, no permission, disk full): an environment
    failure."""

    exit_code = 3
