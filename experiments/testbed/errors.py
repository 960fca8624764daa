"""Errors of the testbed: every user-caused problem is a ``TestbedError`` (exit code 2)."""

from __future__ import annotations

from modeler.errors import AuguryError


class TestbedError(AuguryError):
    """A testbed input (configuration, fault file, trace, load) is invalid."""

    __test__ = False  # not a pytest test class despite the name
