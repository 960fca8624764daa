"""``experiments.randomdag``: seeded random model files are valid, deterministic and have the
promised shape (fan-in, fan-out, key groupings of the asked skew, contention)."""

from __future__ import annotations

import pytest

from experiments.randomdag import (SKEWS, RandomDagSpec, check_shape, random_model, random_model_dict, to_yaml,
                                   write_model)
from modeler.errors import UsageError
from modeler.modelfile import load_model, parse_model
from modeler.queueing import predict


@pytest.mark.parametrize("skew", SKEWS)
def test_every_seed_gives_a_valid_model_of_the_promised_shape(skew):
    for seed in range(60):
        model = random_model(seed, RandomDagSpec(skew=skew))  # parse_model validates
        shape = check_shape(model)
        assert shape["fan_out"] and shape["fan_in"] and shape["key_edge"] and shape["reachable"], (seed, shape)
        assert shape["contention"], seed
        assert shape["zipf"] == (skew != "none"), (seed, shape)
        assert shape["uniform_key"] == (skew != "zipf"), (seed, shape)
        n_ops = sum(not op.is_source for op in model.operators)
        assert 4 <= n_ops <= 6 and 1 <= len(model.sources) <= 2
        assert sum(model.source_shares().values()) == pytest.approx(1.0)
        assert predict(model, None, 0.0).max_rate > 0  # every operator has a capacity


def test_the_same_seed_gives_the_same_model_and_seeds_differ():
    spec = RandomDagSpec(skew="mixed", operators=(5, 8))
    assert random_model_dict(11, spec) == random_model_dict(11, spec)
    assert random_model_dict(11, spec) != random_model_dict(12, spec)
    assert random_model_dict(11, spec) != random_model_dict(11, RandomDagSpec(skew="none", operators=(5, 8)))


def test_the_yaml_file_round_trips(tmp_path):
    raw = random_model_dict(3, job="random-3")
    path = write_model(tmp_path / "r3.yaml", 3, job="random-3")
    assert path.read_text() == to_yaml(raw)
    assert load_model(path).operators == parse_model(raw).operators
    assert load_model(path).edges == parse_model(raw).edges


def test_bad_specs_are_usage_errors():
    for spec in (RandomDagSpec(operators=(2, 4)), RandomDagSpec(skew="lognormal"),
                 RandomDagSpec(sources=(0, 1)), RandomDagSpec(service_time_ms=(2.0, 1.0))):
        with pytest.raises(UsageError):
            random_model_dict(0, spec)
