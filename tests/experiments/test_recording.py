"""Calibration recovers a known truth from testbed history (issue 5 acceptance).

testbed -> augury ingest -> Spark summarize -> calibrate, on example models with several loads
and two parallelisms (the summarized hottest-instance shares are checked against the
truth too); then `predict` with the calibrated model on configurations *not* in the
history is checked against the testbed's measured max sustainable rate.
"""

from __future__ import annotations

import pytest

from experiments.recording import (calibrate_store, ingest_and_summarize, load_plan, measure_max_rate,
                                   record, truth_errors)
from history.store import MetricStore
from modeler.modelfile import load_model
from modeler.queueing import predict
from tests.conftest import EXAMPLES

CASES = {
    # example: (configurations recorded, configurations never seen by calibration)
    "wordcount": ([{"split": 2, "count": 2}, {"split": 3, "count": 4}],
                  [{"split": 2, "count": 6}, {"split": 4, "count": 3}, {"split": 1, "count": 8}]),
    "pipeline": ([{}, {"decode": 3, "dedup": 3, "sessionize": 6, "score": 5, "sink": 2}],
                 [{"sessionize": 8, "score": 6}, {"decode": 1, "sessionize": 3}, {"score": 2}]),
}


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("example", sorted(CASES))
def test_calibration_recovers_truth_and_predicts_unseen_configurations(example, spark, tmp_path):
    truth = load_model(EXAMPLES / f"{example}.yaml")
    seen, unseen = CASES[example]
    raw = record(truth, load_plan(truth, seen, utilizations=(0.35, 0.6, 0.85), seconds=30))
    report, _ = ingest_and_summarize(raw, tmp_path / "store", spark=spark)
    assert sum(report.quarantined.values()) == 0, report.quarantined
    # The hottest instance's share of each operator's input (history's max_instance_share)
    # matches the truth (the model's hot_share for the configuration in force): within 5 %.
    ow = MetricStore(tmp_path / "store").operator_windows(truth.job)
    configs = ow.pivot_table(index="window_start", columns="operator", values="parallelism")
    for (op, ts), share in ow.set_index(["operator", "window_start"])["max_instance_share"].groupby(
            lambda k: (k[0], tuple(configs.loc[k[1]].astype(int)))).mean().items():
        config = dict(zip(configs.columns, ts))
        want = predict(truth, config, 1.0).operators[op].hot_share
        assert share == pytest.approx(want, rel=0.05), (op, config, share, want)
    fitted = calibrate_store(tmp_path / "store", truth.job).model_
    # Service times and selectivities within 5 % of the truth.
    for name, error in truth_errors(truth, fitted).items():
        assert abs(error) <= 0.05, (name, error)
    # Max sustainable rate on configurations the calibration never saw: within 10 %.
    for config in unseen:
        full = truth.resolve_config(config)
        measured = measure_max_rate(truth, full, seconds=20, warmup_s=10)
        predicted = predict(fitted, full, 0.0).max_rate
        assert predicted == pytest.approx(measured, rel=0.10), (config, predicted, measured)
