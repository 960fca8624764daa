"""The experiments of ``augury experiment run NAME``: one module per experiment (see
``experiments/harness.py`` for the contract: ``NAME``, ``DESCRIPTION``, ``run(ctx)``)."""
