"""The back-pressure probe's argument checks (its live part runs by hand: docs/flink.md)."""

import pytest

from experiments.flink.bp_probe import main, parse_config
from modeler.errors import ConfigError


def test_a_configuration_is_one_parallelism_per_group():
    assert parse_config("1,2,1", 3) == (1, 2, 1)
    assert parse_config("4", 1) == (4,)
    for bad, groups in (("1,2", 3), ("1,0,1", 3), ("a,b,c", 3), ("", 1), ("1,-1", 2)):
        with pytest.raises(ConfigError) as err:
            parse_config(bad, groups)
        assert err.value.field == "--config" and err.value.value == bad


def test_a_bad_configuration_exits_2_naming_it_before_any_cluster_starts(capsys):
    assert main(["--query", "q8", "--rate", "300000", "--config", "1,1"]) == 2
    err = capsys.readouterr().err
    assert "--config" in err and "1,1" in err
