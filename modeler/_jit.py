"""numba's ``njit`` when numba is installed (a declared dependency), else a no-op decorator with
the same call forms (``@njit`` and ``@njit(...)``), so the compiled kernels still run, slowly,
as plain Python. ``HAVE_NUMBA`` says which. Shared by the modeler's and the testbed's kernels."""

from __future__ import annotations

try:  # pragma: no cover - depends on the environment
    from numba import njit

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover
    HAVE_NUMBA = False

    def njit(*args, **kwargs):
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

__all__ = ["HAVE_NUMBA", "njit"]
