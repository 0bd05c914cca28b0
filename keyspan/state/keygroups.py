"""Key groups: the unit in which keyed state is stored, checkpointed and rescaled.

The hash is XXH64 with seed 42 over a canonical encoding of the key — byte for byte what
Spark's ``xxhash64`` computes for a long, string, binary, double or boolean column — so the
JVM can route a record by a key column without running Python, and Python gets the same key
group for the same key in every process, machine and Python version (invariant 4).
"""

from __future__ import annotations

import datetime
import decimal
import struct

import xxhash

SEED = 42
DEFAULT_MAX_PARALLELISM = 128
UPPER_BOUND_MAX_PARALLELISM = 1 << 15

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_pack_long = struct.Struct("<q").pack
_pack_int = struct.Struct("<i").pack
_pack_double = struct.Struct("<d").pack
_xxh64 = xxhash.xxh64_intdigest
_CANONICAL_NAN = _pack_long(0x7FF8000000000000)


def _hash_atom(key, seed: int) -> int:
    """Unsigned XXH64 of one non-composite key, chained on ``seed`` as Spark chains columns."""
    if key is None:
        return seed
    if key is True or key is False:
        return _xxh64(_pack_int(1 if key else 0), seed)
    if isinstance(key, int):
        if _INT64_MIN <= key <= _INT64_MAX:
            return _xxh64(_pack_long(key), seed)
        return _xxh64(b"bigint:" + str(key).encode(), seed)
    if isinstance(key, str):
        return _xxh64(key.encode("utf-8"), seed)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return _xxh64(bytes(key), seed)
    if isinstance(key, float):
        if key != key:  # every NaN hashes as the canonical NaN, as Java's doubleToLongBits (Spark) does
            return _xxh64(_CANONICAL_NAN, seed)
        return _xxh64(_pack_double(0.0 if key == 0.0 else key), seed)
    if isinstance(key, (datetime.date, datetime.time, decimal.Decimal)):
        return _xxh64(f"{type(key).__name__}:{key.isoformat() if hasattr(key, 'isoformat') else key}".encode(), seed)
    if isinstance(key, (tuple, list)):
        for part in key:
            seed = _hash_atom(part, seed)
        return seed
    raise TypeError(
        f"key {key!r} of type {type(key).__name__} has no stable hash: keys must be None, bool, int, "
        "float, str, bytes, date/time, Decimal, or tuples of these (Python's own hash() is salted per process)"
    )


def stable_hash(key) -> int:
    """Signed 64-bit hash of a key, equal to Spark's ``xxhash64`` of the same value as a column."""
    h = _hash_atom(key, SEED)
    return h - (1 << 64) if h > _INT64_MAX else h


def assign_to_key_group(key, max_parallelism: int) -> int:
    """Flink's ``KeyGroupRangeAssignment.assignToKeyGroup``: hash mod max parallelism. Every record
    of a keyed exchange goes through here, so the signed hash is computed inline."""
    h = _hash_atom(key, SEED)
    return (h - (1 << 64) if h > _INT64_MAX else h) % max_parallelism


def compute_operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """The subtask that owns a key group: key_group × parallelism ÷ max_parallelism."""
    return key_group * parallelism // max_parallelism


def compute_key_group_range_for_operator_index(max_parallelism: int, parallelism: int, index: int) -> range:
    """The contiguous key groups a subtask owns (Flink's formula, consistent with the above)."""
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return range(start, end + 1)


def check_parallelism(parallelism: int, max_parallelism: int) -> None:
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(f"max parallelism must be in [1, {UPPER_BOUND_MAX_PARALLELISM}], got {max_parallelism}")
    if not 1 <= parallelism <= max_parallelism:
        raise ValueError(
            f"parallelism {parallelism} must be between 1 and the max parallelism {max_parallelism}: "
            "a subtask needs at least one key group"
        )
