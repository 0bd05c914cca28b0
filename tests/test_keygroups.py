"""Key groups: Flink's assignment formulas, a hash that is stable across processes and equal to
Spark's ``xxhash64``, and records reaching the subtask that owns their key group — both when
Python routes them and when the JVM does (key columns of a typed Spark source)."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import threading
import time

import pytest

from keyspan.datastream import KeyedProcessFunction, SinkFunction
from keyspan.state.keygroups import (
    DEFAULT_MAX_PARALLELISM,
    UPPER_BOUND_MAX_PARALLELISM,
    assign_to_key_group,
    check_parallelism,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    stable_hash,
)

# (parallelism, max parallelism) pairs: divisible and not, p == maxp, p == 1, large maxp
PAIRS = [(p, maxp) for maxp in (1, 2, 3, 7, 10, 16, 100, 127, 128, 129, 1000)
         for p in range(1, min(maxp, 12) + 1)]
PAIRS += [(p, 1 << 15) for p in (1, 2, 3, 7, 100, 1000, 1 << 15)] + [(128, 128), (300, 4096)]

SAMPLE_KEYS = [
    None, True, False, 0, 1, -1, 42, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 2**63, -(2**64) - 5,
    0.0, -0.0, 1.5, -2.25, 1e300, float("inf"), "", "a", "key-1", "héllo", "日本語", "🎉",
    b"", b"\x00", b"abc", bytearray(b"xyz"), (1, "a"), ("a", 1), (None, 2), ((1, 2), "nested"), [3, "list"],
]


# --- Flink's formulas ----------------------------------------------------------------------------

@pytest.mark.parametrize("p,maxp", PAIRS)
def test_key_group_ranges_partition_all_key_groups(p, maxp):
    ranges = [compute_key_group_range_for_operator_index(maxp, p, i) for i in range(p)]
    # contiguous, non-empty, in order, and together exactly 0..maxp-1
    assert ranges[0].start == 0 and ranges[-1].stop == maxp
    for prev, nxt in zip(ranges, ranges[1:]):
        assert prev.stop == nxt.start
    assert all(len(r) >= 1 and r.step == 1 for r in ranges)
    flat = [kg for r in ranges for kg in r]
    assert flat == list(range(maxp))
    # ranges are balanced: sizes differ by at most one
    sizes = {len(r) for r in ranges}
    assert max(sizes) - min(sizes) <= 1
    # the owner of every key group (Flink: kg * p / maxp) is the subtask whose range holds it
    for i, r in enumerate(ranges):
        for kg in r:
            assert compute_operator_index_for_key_group(maxp, p, kg) == kg * p // maxp == i


def test_flink_reference_values():
    # values of Flink's KeyGroupRangeAssignment for the default max parallelism 128
    assert DEFAULT_MAX_PARALLELISM == 128
    assert compute_key_group_range_for_operator_index(128, 3, 0) == range(0, 43)
    assert compute_key_group_range_for_operator_index(128, 3, 1) == range(43, 86)
    assert compute_key_group_range_for_operator_index(128, 3, 2) == range(86, 128)
    assert compute_key_group_range_for_operator_index(10, 4, 1) == range(3, 5)
    assert [compute_operator_index_for_key_group(10, 4, kg) for kg in range(10)] == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]


def test_check_parallelism_bounds():
    check_parallelism(1, 1)
    check_parallelism(128, 128)
    check_parallelism(1, UPPER_BOUND_MAX_PARALLELISM)
    for p, maxp in [(0, 128), (129, 128), (2, 1), (1, 0), (1, UPPER_BOUND_MAX_PARALLELISM + 1)]:
        with pytest.raises(ValueError):
            check_parallelism(p, maxp)


@pytest.mark.parametrize("maxp", [1, 7, 16, 128, 1 << 15])
def test_assign_to_key_group_in_range_and_consistent_with_hash(maxp):
    for key in SAMPLE_KEYS:
        kg = assign_to_key_group(key, maxp)
        assert 0 <= kg < maxp
        assert kg == stable_hash(key) % maxp


def test_stable_hash_is_signed_64_bit_and_distinguishes_keys():
    hashes = [stable_hash(k) for k in SAMPLE_KEYS]
    assert all(-(2**63) <= h < 2**63 for h in hashes)
    # equal keys hash equal; -0.0 == 0.0 in Python, so they must land in the same key group
    assert stable_hash(-0.0) == stable_hash(0.0)
    assert stable_hash((1, "a")) == stable_hash([1, "a"])
    assert stable_hash(bytearray(b"xyz")) == stable_hash(b"xyz")
    # different keys of the common types do not collide here
    distinct = [stable_hash(k) for k in (1, 2, "1", 1.5, (1, 2), (2, 1), ("a", "b"), "ab", True, 0)]
    assert len(set(distinct)) == len(distinct)
    # by design (as Spark hashes columns) a str and its UTF-8 bytes, and a 1-tuple and its element, share
    # a hash: only the key group is shared, state still tells the keys apart
    assert stable_hash("1") == stable_hash(b"1") and stable_hash(("ab",)) == stable_hash("ab")
    assert len({assign_to_key_group(f"user-{i}", 128) for i in range(2000)}) == 128  # all groups used


def test_stable_hash_rejects_keys_without_a_stable_encoding():
    with pytest.raises(TypeError, match="stable hash"):
        stable_hash(object())
    with pytest.raises(TypeError):
        stable_hash({"a": 1})


_HASH_SCRIPT = """
import json, sys
from keyspan.state.keygroups import stable_hash
keys = [("s", "a"), ("s", "key-1"), ("s", "日本語"), ("i", 0), ("i", -1), ("i", 2**63 - 1), ("i", 2**70),
        ("f", 1.5), ("f", -0.0), ("b", "00ff"), ("t", None), ("t", True), ("tup", [1, "a"])]
def decode(kind, v):
    return bytes.fromhex(v) if kind == "b" else tuple(v) if kind == "tup" else v
print(json.dumps({"python_hash": hash("a-string-key"),
                  "stable": [stable_hash(decode(k, v)) for k, v in keys]}))
"""


def _hashes_in_subprocess(seed: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _HASH_SCRIPT], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONHASHSEED=seed), timeout=60)
    return json.loads(out.stdout)


def test_stable_hash_is_equal_across_processes_with_different_hash_seeds():
    a = _hashes_in_subprocess("1")
    b = _hashes_in_subprocess("2")
    # the processes really do salt str hashes differently, so Python's hash() would not do
    assert a["python_hash"] != b["python_hash"]
    assert a["stable"] == b["stable"]
    # ... and this process agrees too
    keys = ["a", "key-1", "日本語", 0, -1, 2**63 - 1, 2**70, 1.5, -0.0, b"\x00\xff", None, True, (1, "a")]
    assert [stable_hash(k) for k in keys] == a["stable"]


# --- equal to Spark's xxhash64 ------------------------------------------------------------------

def _spark_xxhash(spark, schema: str, rows: list, exprs: dict):
    """Evaluate ``xxhash64`` per row; ``exprs`` maps a result name to the hash's column list."""
    from pyspark.sql import functions as F

    df = spark.createDataFrame(rows, schema)
    cols = [F.col(c) for c in df.columns]
    selected = df.select(*cols, *[F.xxhash64(*cs).alias(name) for name, cs in exprs.items()])
    return selected.collect()


def test_stable_hash_equals_spark_xxhash64_for_every_pushdown_column_type(spark):
    from pyspark.sql import functions as F

    longs = [0, 1, -1, 42, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 123456789012345, None]
    ints = [0, 1, -1, 7, 2**31 - 1, -(2**31), 1000, -1000, 12345, None]
    smalls = [0, 1, -1, 127, -128, 100, -100, 5, 6, None]
    strings = ["", "a", "key-1", "héllo", "日本語", "🎉 party", "x" * 300, "\x00", "Z", None]
    binaries = [b"", b"\x00", b"abc", bytes(range(256)), b"\xff" * 9, b"k", b"key-1", b"\x80", b"0", None]
    doubles = [0.0, 1.5, -2.25, 1e300, float("inf"), float("-inf"), 5e-324, -1e-10, math.pi, None]
    floats = [0.0, 1.5, -2.25, 0.1, 3.4e38, float("inf"), 1e-40, -7.75, 1 / 3, None]
    bools = [True, False, True, False, None, True, False, True, False, None]
    rows = list(zip(longs, ints, smalls, smalls, strings, binaries, doubles, floats, bools))
    schema = ("l long, i int, s short, y byte, str string, bin binary, d double, f float, b boolean")
    exprs = {
        "h_l": [F.col("l")],
        "h_i": [F.col("i").cast("long")],
        "h_s": [F.col("s").cast("long")],
        "h_y": [F.col("y").cast("long")],
        "h_str": [F.col("str")],
        "h_bin": [F.col("bin")],
        "h_d": [F.col("d")],
        "h_f": [F.col("f").cast("double")],
        "h_b": [F.col("b")],
        "h_str_l": [F.col("str"), F.col("l")],
        "h_i_b": [F.col("i").cast("long"), F.col("b")],
        "h_d_bin_str": [F.col("d"), F.col("bin"), F.col("str")],
    }
    result = _spark_xxhash(spark, schema, rows, exprs)
    assert len(result) == len(rows)
    checked = 0
    for r in result:
        # Python values as a keyspan record would see them (a float column arrives as the float32 value)
        assert stable_hash(r["l"]) == r["h_l"], r
        assert stable_hash(r["i"]) == r["h_i"], r
        assert stable_hash(r["s"]) == r["h_s"], r
        assert stable_hash(r["y"]) == r["h_y"], r
        assert stable_hash(r["str"]) == r["h_str"], r
        assert stable_hash(bytes(r["bin"]) if r["bin"] is not None else None) == r["h_bin"], r
        assert stable_hash(r["d"]) == r["h_d"], r
        assert stable_hash(r["f"]) == r["h_f"], r
        assert stable_hash(r["b"]) == r["h_b"], r
        assert stable_hash((r["str"], r["l"])) == r["h_str_l"], r
        assert stable_hash((r["i"], r["b"])) == r["h_i_b"], r
        binv = bytes(r["bin"]) if r["bin"] is not None else None
        assert stable_hash((r["d"], binv, r["str"])) == r["h_d_bin_str"], r
        checked += 1
    assert checked == 10


def test_stable_hash_of_special_doubles_matches_spark(spark):
    """-0.0 and NaN: Spark and keyspan must agree, or the JVM and Python would route them apart."""
    from pyspark.sql import functions as F

    def double(bits):
        return struct.unpack("<d", struct.pack("<Q", bits))[0]

    # NaNs with other bit patterns than float("nan") — inf - inf gives 0xfff8... on x86 — are one NaN to Spark
    nans = [float("nan"), double(0x7FF8000000000001), double(0xFFF8000000000000), float("inf") - float("inf")]
    rows = [(0.0,), (-0.0,)] + [(n,) for n in nans]
    result = spark.createDataFrame(rows, "d double").select("d", F.xxhash64("d").alias("h")).collect()
    assert len(result) == len(rows)
    for r in result:
        assert stable_hash(r["d"]) == r["h"], (struct.pack("<d", r["d"]).hex(), r)
    assert len({stable_hash(n) for n in nans}) == 1
    assert stable_hash(-0.0) == stable_hash(0.0)


# --- routing through real jobs ---------------------------------------------------------------------

class Route(KeyedProcessFunction):
    """Appends where the record ran to its route: (key, [(tag, subtask, subtasks, max parallelism), ...])."""

    def __init__(self, tag):
        self.tag = tag

    def open(self, runtime_context):
        self.rc = runtime_context

    def process_element(self, value, ctx):
        hops = value[1] if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], list) else []
        hop = (self.tag, self.rc.get_index_of_this_subtask(), self.rc.get_number_of_parallel_subtasks(),
               self.rc.get_max_number_of_parallel_subtasks())
        yield ctx.get_current_key(), hops + [hop]


def _check_routing(results, keys: list, parallelism: dict, maxp: int):
    """Every key arrived once through every tagged operator, each time at its key group's owner."""
    assert sorted(map(repr, (k for k, _ in results))) == sorted(map(repr, keys))
    for key, hops in results:
        assert [h[0] for h in hops] == list(parallelism), (key, hops)
        for tag, subtask, n, m in hops:
            assert n == parallelism[tag] and m == maxp, (key, hops)
            owner = compute_operator_index_for_key_group(maxp, n, assign_to_key_group(key, maxp))
            assert subtask == owner, f"{tag}: key {key!r} ran on subtask {subtask}, its key group's owner is {owner}"
    # the keys spread over every subtask, so a routing that ignored the key would be caught
    for tag, p in parallelism.items():
        owners = {compute_operator_index_for_key_group(maxp, p, assign_to_key_group(k, maxp)) for k in keys}
        assert owners == set(range(p)), (tag, owners)


PY_KEYS = ([f"user-{i}" for i in range(20)] + list(range(-5, 10)) + [2**40, 2.5, -0.0, b"raw", None, True,
           ("tuple", 1), ("tuple", 2)])


@pytest.mark.parametrize("maxp", [128, 16])
def test_python_routing_sends_each_key_to_its_key_group_owner(env, maxp):
    """from_collection: Python computes the key group and routes (keyed p=2, then re-keyed p=3)."""
    env.set_max_parallelism(maxp)
    env.set_max_records_per_epoch(25)
    records = [(k, i) for i, k in enumerate(PY_KEYS)]
    results = (env.from_collection(records)
               .key_by(lambda r: r[0]).process(Route("p2")).set_parallelism(2)
               .key_by(lambda r: r[0]).process(Route("p3")).set_parallelism(3)
               .execute_and_collect(limit=1000))
    _check_routing(results, PY_KEYS, {"p2": 2, "p3": 3}, maxp)


def _run_unbounded(spark, env, job_name: str, sink_values: list, expected: int, timeout: float = 120):
    """Run a job over a Spark streaming source until ``expected`` records reached the sink, then stop it."""
    errors = []

    def run():
        try:
            env.execute(job_name)
        except BaseException as exc:  # noqa: BLE001 — reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.time() + timeout
    while len(sink_values) < expected and time.time() < deadline and thread.is_alive():
        time.sleep(0.2)
    for query in spark.streams.active:
        if query.name == f"keyspan-{job_name}":
            query.stop()
    thread.join(60)
    assert not thread.is_alive(), "the job did not stop"
    assert not errors, errors
    assert len(sink_values) == expected


class Collect(SinkFunction):
    def __init__(self, into: list):
        self.into = into

    def invoke(self, value, context):
        self.into.append(value)


JSON_KEYS = [f"k{i}" for i in range(24)] + ["", "ü-key", None]
PARQUET_ROWS = [(i * 7 - 20, f"n{i % 3}") for i in range(24)] + [(None, "n0"), (2**31 - 1, None)]


def _input_formats(env, maxp):
    from keyspan.runtime.planner import compile_graph

    plan = compile_graph(env._transformations, env.get_parallelism(), maxp)
    return [s.plan.input_format for s in plan.stages]


@pytest.mark.parametrize("maxp", [128, 16])
@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_jvm_pushdown_routing_matches_python_key_groups(spark, env, tmp_path, maxp, fmt):
    """Key columns of a typed Spark source are hashed by xxhash64 in the JVM; every record must reach the
    subtask that Python's key group assignment names (else state would move on rescale). The second,
    Python-routed keyed operator must agree on the same keys."""
    env.set_max_parallelism(maxp)
    src = tmp_path / "in"
    if fmt == "json":  # a string key column, keyed with lambda r: r.key; JVM p=2 then Python p=3
        src.mkdir()
        with open(src / "part-0.json", "w") as f:
            for i, k in enumerate(JSON_KEYS):
                f.write(json.dumps({"key": k, "n": i}) + "\n")
        df = spark.readStream.schema("key string, n long").json(str(src))
        selector, keys, first, second = (lambda r: r.key), JSON_KEYS, 2, 3
    else:  # an int column and a string column as a tuple key; JVM p=3 then Python p=2
        spark.createDataFrame(PARQUET_ROWS, "key int, name string").coalesce(1).write.parquet(str(src))
        df = spark.readStream.schema("key int, name string").parquet(str(src))
        selector, keys, first, second = (lambda r: (r.key, r.name)), PARQUET_ROWS, 3, 2
    got = []
    (env.from_spark(df).key_by(selector).process(Route("jvm")).set_parallelism(first)
     .key_by(lambda r: r[0]).process(Route("python")).set_parallelism(second)
     .add_sink(Collect(got)))
    # the first keyed operator reads its source through the JVM pushdown, without a Python stage
    assert _input_formats(env, maxp)[:2] == ["pushed_down", "typed_keyed"]
    _run_unbounded(spark, env, f"jvm-routing-{fmt}-{maxp}", got, len(keys))
    _check_routing(got, keys, {"jvm": first, "python": second}, maxp)
