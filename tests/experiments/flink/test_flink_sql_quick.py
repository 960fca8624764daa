"""``flink-sql --quick`` in CI: one query (q5) end to end on the session cluster of conftest.py:
calibrate from two live configurations (topology from the live job, shared cores), predict the max
sustainable rate of three unseen configurations and measure them by live rescaling, then apply the
planner's one-step configuration.

The experiment's own ``run`` starts a cluster of its own; this test runs the same body and
bookkeeping (``_body``, ``_result``) on the cluster the live tests share (start-up charged to this
test when it starts it). Bounded by ``BUDGET_S`` (a hang guard; issue 23's 3 minutes are measured).

Assertions are the structure (the accuracy goal is the experiment's to report, docs/RESULTS.md):
a broken calibration, predictor or actuator fails here; the max-rate measurements rescale the live
job twice, the one step once more when the plan differs from the start.
"""

from __future__ import annotations

import numpy as np
import pytest

from experiments.harness import ExperimentContext
from experiments.suite import flink_sql as fs

BUDGET_S = 300.0
"""Seconds, cluster start-up included when this test starts the cluster: a hang guard, not the
speed target. Issue 23's "under 3 minutes" is measured and reported (timed assertions do not
belong in tests; a 2-core box varies ~20 % run to run): 147 s and 166 s with the start-up (13 s,
15 s), 158 s and 176 s for the file with the teardown; the first version (4 s windows, three
configurations) took longer than 180 s in its one step. Since the step starts from the largest
test configuration, (4, 4), and rescales to the plan (2026-12-06): 152 s, 170 s for the file
alone (cluster start-up 7 s, teardown 11 s)."""


@pytest.mark.flink
@pytest.mark.slow
def test_quick_flink_sql_on_the_live_cluster(flink_cluster, live_deadline, tmp_path):
    deadline = live_deadline(BUDGET_S)
    ctx = ExperimentContext(quick=True, workdir=tmp_path, progress=print)
    settings = fs._settings(quick=True)
    outcome = fs._body(ctx, flink_cluster, settings)
    result = fs._result(settings, outcome, deadline.spent())
    print(f"flink-sql quick: {deadline.spent():.0f} s; {result.summary}")
    table = result.tables["configurations"]
    assert list(table["query"].unique()) == ["q5"] and len(table) == 2
    assert (table["measured_max_rate"] > 0).all() and (table["predicted_max_rate"] > 0).all()
    assert table["above_cores"].all()  # q5 runs >= 4 instances on this box's cores
    fits = outcome["queries"]["q5"]["fits"]
    assert {"Calc", "GlobalWindowAggregate"} <= set(fits) and fits["Calc"]["service_ms"] > 0
    # the datagen's CPU per tuple, from the TaskManager's CPU time (it reports no busy time)
    assert fits["bid"]["cpu_ms_per_tuple"] > 0, fits
    calibration = result.tables["calibration"]
    assert (calibration["taskmanager_cpu_cores"] > 0).all(), calibration.to_string()
    assert (calibration["source_threads_cpu_cores"] > 0).all(), calibration.to_string()
    assert outcome["queries"]["q5"]["topology"]["resources"]["cores"] >= 1
    # No accuracy bound here: CI runs this beside two other test workers on the same 2 cores, and
    # the operators are CPU-bound (measured in CI at 2d8c155: 139k and 102k tuples/s where the
    # machine alone gives ~360k and ~395k). The accuracy is the experiment's to report (RESULTS.md).
    assert np.isfinite(table["max_rate_error"]).all(), table.to_string()
    step = outcome["queries"]["q5"]["step"]
    assert step["after"] is not None and step["after"]["rate"] > 0, step
    assert step["planned"] is not None and set(step["planned"]) == set(step["start"]), step
