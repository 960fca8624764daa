"""Key grouping as Flink does it: key -> key group -> instance.

Flink (``KeyGroupRangeAssignment``): ``key_group = murmurHash(key.hashCode()) % maxParallelism``
and ``instance = key_group * parallelism // maxParallelism`` (contiguous key-group ranges).
Keys here are integer ids 0..n-1 (the rank in the key distribution, rank 0 hottest); Java's
``Integer.hashCode()`` is the value itself, so the mapping is exactly Flink's for integer keys.

Assumption: each tuple's key is drawn independently from the key distribution, so an instance's
share of an edge's tuples is the total weight of the keys its key groups hold.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from modeler.modelfile import KeySpec

_M32 = np.uint64(0xFFFFFFFF)


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & _M32


def flink_murmur_hash(codes: np.ndarray | int) -> np.ndarray:
    """Flink's ``MathUtils.murmurHash(int)`` for an array of Java int hash codes; non-negative."""
    x = np.asarray(codes, dtype=np.int64).astype(np.uint64) & _M32
    x = (x * np.uint64(0xCC9E2D51)) & _M32
    x = _rotl32(x, 15)
    x = (x * np.uint64(0x1B873593)) & _M32
    x = _rotl32(x, 13)
    x = (x * np.uint64(5) + np.uint64(0xE6546B64)) & _M32
    x = x ^ np.uint64(4)
    # bitMix (fmix32)
    x = x ^ (x >> np.uint64(16))
    x = (x * np.uint64(0x85EBCA6B)) & _M32
    x = x ^ (x >> np.uint64(13))
    x = (x * np.uint64(0xC2B2AE35)) & _M32
    x = x ^ (x >> np.uint64(16))
    signed = x.astype(np.int64)
    signed = np.where(signed >= 2**31, signed - 2**32, signed)
    # Java: code >= 0 ? code : (code != MIN_VALUE ? -code : 0)
    return np.where(signed >= 0, signed, np.where(signed == -(2**31), 0, -signed))


def key_group_of(keys: np.ndarray | int, max_parallelism: int) -> np.ndarray:
    """Key group (0..max_parallelism-1) of integer keys."""
    return flink_murmur_hash(keys) % int(max_parallelism)


def instance_of_key_group(key_groups: np.ndarray | int, parallelism: int, max_parallelism: int) -> np.ndarray:
    """Instance index (0..parallelism-1) owning each key group (Flink's contiguous ranges)."""
    return np.asarray(key_groups, dtype=np.int64) * int(parallelism) // int(max_parallelism)


def key_weights(spec: KeySpec) -> np.ndarray | None:
    """Normalized weight per key id, or None for 'many uniform keys'."""
    if spec.weights is not None:
        w = np.asarray(spec.weights, dtype=float)
    elif spec.count is None:
        return None
    elif spec.distribution == "zipf":
        w = np.arange(1, spec.count + 1, dtype=float) ** -spec.exponent
    else:
        w = np.ones(spec.count, dtype=float)
    return w / w.sum()


@lru_cache(maxsize=256)
def key_group_weights(spec: KeySpec, max_parallelism: int) -> np.ndarray:
    """Share of tuples per key group (length max_parallelism, sums to 1)."""
    weights = key_weights(spec)
    if weights is None:
        return np.full(max_parallelism, 1.0 / max_parallelism)
    groups = key_group_of(np.arange(len(weights)), max_parallelism)
    out = np.bincount(groups, weights=weights, minlength=max_parallelism).astype(float)
    out.flags.writeable = False
    return out


def instance_shares(group_weights: np.ndarray, parallelism: int) -> np.ndarray:
    """Share of tuples per instance (length parallelism) given key-group weights."""
    max_parallelism = len(group_weights)
    owner = instance_of_key_group(np.arange(max_parallelism), parallelism, max_parallelism)
    return np.bincount(owner, weights=group_weights, minlength=parallelism)


@lru_cache(maxsize=256)
def share_table(spec: KeySpec, max_parallelism: int) -> np.ndarray:
    """``table[p, i]`` = share of instance i at parallelism p (p = 1..max_parallelism; row 0 unused).

    Zero-padded to ``max_parallelism`` columns so a batch of parallelisms can be gathered at once.
    """
    g = key_group_weights(spec, max_parallelism)
    table = np.zeros((max_parallelism + 1, max_parallelism))
    for p in range(1, max_parallelism + 1):
        table[p, :p] = instance_shares(g, p)
    table.flags.writeable = False
    return table


def hot_key_groups(spec: KeySpec, max_parallelism: int, top: int = 5) -> list[tuple[int, float]]:
    """The heaviest key groups with their shares, hottest first (for skew reports)."""
    g = key_group_weights(spec, max_parallelism)
    order = np.argsort(-g, kind="stable")[:top]
    return [(int(k), float(g[k])) for k in order]
