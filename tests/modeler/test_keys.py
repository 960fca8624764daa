"""Flink's key -> key group -> instance mapping."""

import numpy as np
import pytest

from modeler.keys import (flink_murmur_hash, hot_key_groups, instance_of_key_group, instance_shares,
                          key_group_of, key_group_weights, share_table)
from modeler.modelfile import KeySpec

# Printed by Flink's MathUtils.murmurHash compiled and run on JDK 17 (see the commit that added this).
JAVA = {0: 593689054, 1: 68075478, 2: 1085422463, 3: 847579505, 42: 1134849565, 1000: 3506311,
        -7: 206585249, 123456789: 1088346449, 2147483647: 1653689534}


def test_murmur_hash_matches_java():
    keys = np.array(list(JAVA))
    assert flink_murmur_hash(keys).tolist() == list(JAVA.values())


def test_key_group_ranges_are_contiguous():
    owner = instance_of_key_group(np.arange(128), 3, 128)
    assert owner.tolist() == sorted(owner.tolist())
    assert np.bincount(owner).tolist() == [43, 43, 42]


def test_key_groups_and_shares():
    assert key_group_of(np.array(list(JAVA)), 128).tolist() == [v % 128 for v in JAVA.values()]
    spec = KeySpec(distribution="zipf", exponent=1.0, count=1000)
    g = key_group_weights(spec, 128)
    assert g.sum() == pytest.approx(1.0) and len(g) == 128
    for p in (1, 2, 7, 128):
        shares = instance_shares(g, p)
        assert shares.sum() == pytest.approx(1.0)
        assert share_table(spec, 128)[p, :p] == pytest.approx(shares)
    assert hot_key_groups(spec, 128, top=1)[0][0] == key_group_of(0, 128)  # rank-0 key is hottest


def test_uniform_many_keys_is_even():
    g = key_group_weights(KeySpec(), 64)
    assert instance_shares(g, 4) == pytest.approx([0.25] * 4)
    assert instance_shares(g, 3).max() == pytest.approx(22 / 64)  # key-group rounding, as Flink
