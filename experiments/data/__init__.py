"""Package data only: the bundled real traces (``traces/``) and examples (``examples/``).

Read them through ``experiments.bundled``, never by path.
"""
