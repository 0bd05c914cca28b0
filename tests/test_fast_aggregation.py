"""The columnar fast path of known aggregations (issue 16, docs/aggregations.md) gives exactly the
per-record path's results: rolling ``KeyedStream.sum/min/max/min_by/max_by`` and windowed
``aggregate`` with keyspan's aggregate functions, with out-of-order and late data, across epochs,
across a savepoint taken on one path and restored on the other at another parallelism. Every job
runs twice on the same input — ``set_vectorized_aggregation(True)`` and ``(False)`` — and the
operator metric ``numRecordsVectorized`` shows which path ran.
"""

from __future__ import annotations

import json
import random

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keyspan.common import Duration, Row, Time, Types, WatermarkStrategy
from keyspan.common.serialization import Encoder
from keyspan.connectors.driver_sinks import CollectSink
from keyspan.datastream import StreamExecutionEnvironment
from keyspan.datastream.aggregates import Avg, BatchAggregateFunction, Count, First, Last, Max, Min, Sum
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.formats.parquet import ParquetBulkWriters
from keyspan.datastream.functions import AggregateFunction, ProcessWindowFunction, WindowFunction
from keyspan.datastream.output_tag import OutputTag
from keyspan.datastream.window import SlidingEventTimeWindows, TumblingEventTimeWindows
from keyspan.runtime.executor import JobExecutionError
from savepoint_helpers import BackgroundJob, stop_with_savepoint, use_options, wait_for_checkpoints
from test_windows import _RuntimeContext

BOUND = 30       # ms, watermark bound
LATENESS = 40    # ms, allowed lateness
WINDOW = 100     # ms


def disordered(n: int, seed: int, keys: str = "abcdefg", late_every: int = 23):
    """(key, event time, value) out of order within BOUND + LATENESS, with a record every
    ``late_every`` far behind the watermark (for the late-data side output)."""
    rng = random.Random(seed)
    out, clock = [], 1000
    for i in range(n):
        clock += rng.randint(0, 12)
        ts = clock - rng.randint(0, BOUND + LATENESS)
        if late_every and i % late_every == late_every - 1:
            ts = clock - 5 * WINDOW  # behind every window's cleanup time
        out.append((rng.choice(keys), ts, rng.randint(-50, 100)))
    return out


def strategy():
    return WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND)) \
        .with_timestamp_assigner(lambda value, _: value[1])


class KeyedResult(ProcessWindowFunction):
    """Tags a window's aggregate with its key and window."""

    def __init__(self, name: str):
        self.name = name

    def process(self, key, context, elements):
        (result,) = elements
        yield self.name, key, context.window().start, result


class SpreadOf(BatchAggregateFunction):
    """A user's Arrow-batch aggregate: max - min of field ``f2``, from pyarrow compute."""

    def create_accumulator(self):
        return None

    def add_batch(self, accumulator, batch):
        lo, hi = pc.min_max(batch.column("f2")).values()
        lo, hi = lo.as_py(), hi.as_py()
        return (lo, hi) if accumulator is None else (min(accumulator[0], lo), max(accumulator[1], hi))

    def merge(self, acc_a, acc_b):
        if acc_a is None or acc_b is None:
            return acc_b if acc_a is None else acc_a
        return min(acc_a[0], acc_b[0]), max(acc_a[1], acc_b[1])

    def get_result(self, accumulator):
        return accumulator[1] - accumulator[0]


ROLLING = ("sum", "min", "max", "min_by", "max_by")
WINDOWS = (("tumbling", "avg", Avg(2)), ("tumbling", "min", Min(2)), ("tumbling", "last", Last(2)),
           ("tumbling", "spread", SpreadOf()), ("sliding", "count", Count()), ("sliding", "max", Max(2)))


def source(env, data, vectorize: bool, cut: int):
    env.set_vectorized_aggregation(vectorize)
    env.set_parallelism(1)  # one source partition: a key's records keep their order (rolling aggregates)
    env.set_max_records_per_epoch(cut)
    return env.from_collection(data).assign_timestamps_and_watermarks(strategy()).key_by(lambda r: r[0])


def build_rolling(env, data, vectorize: bool, cut: int = 60):
    keyed = source(env, data, vectorize, cut)
    branches = [getattr(keyed, kind)(2).set_parallelism(2).map(lambda r, k=kind: ("rolling", k, r))
                for kind in ROLLING]
    return branches[0].union(*branches[1:])


def build_windows(env, data, vectorize: bool, cut: int = 60):
    """Windowed aggregates with allowed lateness, each with its late-data side output."""
    keyed = source(env, data, vectorize, cut)
    late = OutputTag("late")
    branches = []
    for kind, agg_name, agg in WINDOWS:
        assigner = TumblingEventTimeWindows.of(Time.milliseconds(WINDOW)) if kind == "tumbling" else \
            SlidingEventTimeWindows.of(Time.milliseconds(WINDOW), Time.milliseconds(40))
        name = f"{kind}-{agg_name}"
        windowed = keyed.window(assigner).allowed_lateness(LATENESS).side_output_late_data(late) \
            .aggregate(agg, KeyedResult(name)).set_parallelism(2)
        branches.append(windowed)
        branches.append(windowed.get_side_output(late).map(lambda r, n=name: ("late", n, r)))
    return branches[0].union(*branches[1:])


def run(env, stream, name: str, metric: str = "numRecordsVectorized"):
    """The job's results, and the records its operators' ``metric`` counted (the fast path's, by default)."""
    sink = CollectSink()
    stream.sink_to(sink)
    result = env.execute(name)
    return sink.results(), sum(m["value"] for m in result.metrics.user_metrics() if m["name"] == metric)


def by_operator(results) -> dict:
    """Results per aggregation and key, each key's results in arrival order (late records sorted)."""
    out: dict = {}
    for r in results:
        if r[0] == "rolling":
            out.setdefault((r[1], r[2][0]), []).append(r[2])
        elif r[0] == "late":
            out.setdefault(("late", r[1]), []).append(r[2])
        else:  # a window result: (name, key, window start, result), a key's firings in order
            out.setdefault((r[0], r[1]), []).append(r)
    return {k: sorted(v) if k[0] == "late" else v for k, v in out.items()}


def both_paths(build, data, name, metric: str = "numRecordsVectorized"):
    results = {}
    for vectorize in (True, False):
        env = StreamExecutionEnvironment.get_execution_environment()
        results[vectorize] = run(env, build(env, data, vectorize), f"{name}-{vectorize}", metric)
    (fast, fast_count), (slow, slow_count) = results[True], results[False]
    assert slow_count == 0
    return by_operator(fast), by_operator(slow), fast_count


def reference_rolling(kind, data, pos=2):
    state, out = {}, []
    for r in data:
        acc = state.get(r[0])
        if acc is None:
            new = r
        elif kind in ("sum", "min", "max"):
            v = {"sum": acc[pos] + r[pos], "min": min(acc[pos], r[pos]), "max": max(acc[pos], r[pos])}[kind]
            new = acc[:pos] + (v,) + acc[pos + 1:]
        elif kind == "min_by":
            new = r if r[pos] < acc[pos] else acc
        else:
            new = r if r[pos] > acc[pos] else acc
        state[r[0]] = new
        out.append(new)
    return out


def test_rolling_aggregations_are_identical_on_both_paths_and_flinks(workdir):
    data = disordered(240, seed=7)
    fast, slow, vectorized = both_paths(lambda e, d, v: build_rolling(e, d, v, cut=120), data, "rolling")
    # a chunk with fewer than 4 records per key runs per record (nothing to batch): most go columnar here
    assert vectorized >= 0.75 * len(ROLLING) * len(data)
    assert fast == slow
    for kind in ROLLING:
        expected = reference_rolling(kind, data)
        for key in "abcdefg":
            assert fast[(kind, key)] == [r for r in expected if r[0] == key], (kind, key)


def test_window_aggregations_with_late_data_are_identical_on_both_paths(workdir):
    data = disordered(240, seed=8)
    fast, slow, vectorized = both_paths(build_windows, data, "windows")
    assert vectorized > 0
    assert fast == slow
    assert fast[("late", "tumbling-avg")], "the input has late records: they reach the side output"
    late = set(fast[("late", "tumbling-min")])
    expected: dict = {}
    for r in data:
        if r not in late:
            expected.setdefault((r[0], r[1] - r[1] % WINDOW), []).append(r[2])
    mins = {(r[1], r[2]): r[3] for k, v in fast.items() if k[0] == "tumbling-min" for r in v}  # last firings
    assert mins == {w: min(vs) for w, vs in expected.items()}


class FirstAndValues(AggregateFunction):
    """Your own aggregate whose order matters and whose accumulator changes in place: a list of the
    values added, in order."""

    def create_accumulator(self):
        return []

    def add(self, value, accumulator):
        accumulator.append(value[2])
        return accumulator

    def get_result(self, accumulator):
        return tuple(accumulator)

    def merge(self, acc_a, acc_b):
        return acc_a + acc_b


def weigh_in(a, b):
    """Your own reduce that neither commutes nor associates, and changes its first argument in place."""
    a[2] = 2 * a[2] + b[2]
    a[1] = b[1]
    return a


class EveryValue(ProcessWindowFunction):
    """A window function that sees every record of its window, in the order the pane kept them."""

    def __init__(self, name: str):
        self.name = name

    def process(self, key, context, elements):
        yield self.name, key, context.window().start, [e[2] for e in elements]


class EveryValueApplied(WindowFunction):
    def __init__(self, name: str):
        self.name = name

    def apply(self, key, window, inputs):
        yield self.name, key, window.start, [e[2] for e in inputs]


def build_user_windows(env, data, vectorize: bool, cut: int = 60):
    """``reduce`` and ``aggregate`` with your own functions, and ``process``/``apply`` keeping every
    record, tumbling and sliding, with allowed lateness and late data; records are lists, so a reduce
    that changes its argument would corrupt the other windows of a record if it were handed the
    record instead of a copy."""
    keyed = source(env, data, vectorize, cut).map(lambda r: [r[0], r[1], r[2]]).key_by(lambda r: r[0])
    late = OutputTag("late")
    tumbling = TumblingEventTimeWindows.of(Time.milliseconds(WINDOW))
    sliding = SlidingEventTimeWindows.of(Time.milliseconds(WINDOW), Time.milliseconds(40))
    branches = []
    for name, assigner, how in (("tumbling-reduce", tumbling, "reduce"), ("sliding-reduce", sliding, "reduce"),
                                ("tumbling-values", tumbling, "aggregate"), ("sliding-values", sliding, "aggregate"),
                                ("tumbling-kept", tumbling, "process"), ("sliding-kept", sliding, "apply")):
        windowed = keyed.window(assigner).allowed_lateness(LATENESS).side_output_late_data(late)
        windowed = {"reduce": lambda: windowed.reduce(weigh_in, KeyedResult(name)),
                    "aggregate": lambda: windowed.aggregate(FirstAndValues(), KeyedResult(name)),
                    "process": lambda: windowed.process(EveryValue(name)),
                    "apply": lambda: windowed.apply(EveryValueApplied(name))}[how]()
        windowed = windowed.set_parallelism(2)
        branches.append(windowed.map(lambda r: (r[0], r[1], r[2], tuple(r[3]))))
        branches.append(windowed.get_side_output(late).map(lambda r, n=name: ("late", n, tuple(r))))
    return branches[0].union(*branches[1:])


def test_your_own_reduce_and_aggregate_fold_a_chunk_per_window_with_the_per_record_results(workdir):
    """The folding window path: your function is called once per record as on the per-record path,
    in each window's arrival order, so even an order-sensitive reduce that changes its argument in
    place and an accumulator changed in place give the per-record path's firings, late data included;
    so do window functions that keep every record, on the heap and on RocksDB."""
    from keyspan.datastream import EmbeddedRocksDBStateBackend

    data = disordered(240, seed=9)
    fast, slow, folded = both_paths(build_user_windows, data, "user-windows", "numRecordsFolded")
    assert folded > 0.5 * 6 * len(data), "most records take the folding path"
    assert fast == slow
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_state_backend(EmbeddedRocksDBStateBackend())
    on_rocksdb, folded = run(env, build_user_windows(env, data, True), "user-windows-rocksdb", "numRecordsFolded")
    assert folded > 0 and by_operator(on_rocksdb) == slow, "RocksDB folds as the heap does"
    _, columnar = run(env, build_user_windows(env, data, True), "user-windows-columnar")
    assert columnar == 0, "your own functions never count as columnar"
    late = set(fast[("late", "tumbling-values")])
    expected: dict = {}
    for r in data:
        if (r[0], r[1], r[2]) not in late:
            expected.setdefault((r[0], r[1] - r[1] % WINDOW), []).append(r[2])
    for name in ("tumbling-values", "tumbling-kept"):
        last = {(r[1], r[2]): r[3] for k, v in fast.items() if k[0] == name for r in v}
        assert last == {w: tuple(vs) for w, vs in expected.items()}, name


class FailsOnSeventeen(FirstAndValues):
    def add(self, value, accumulator):
        if value[2] == 17:
            raise ValueError("seventeen")
        return super().add(value, accumulator)


def test_a_failing_function_on_the_folding_path_names_its_record(env):
    data = [("k", 1000 + i, i) for i in range(40)]
    env.set_parallelism(1).set_max_records_per_epoch(100)
    env.from_collection(data).assign_timestamps_and_watermarks(strategy()).key_by(lambda r: r[0]) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW))).aggregate(FailsOnSeventeen()) \
        .name("counting").print()
    with pytest.raises(JobExecutionError) as info:
        env.execute("fails-on-seventeen")
    message = str(info.value)
    assert "operator 'counting'" in message and "('k', 1017, 17)" in message and "ValueError: seventeen" in message


def test_rolling_sum_on_named_row_fields_and_floats(env):
    """Fields by name on Rows, float values and plain numbers go columnar too, with the same results."""
    rows = [Row(key=f"k{i % 5}", amount=float(i % 7) / 4, n=i) for i in range(200)]
    plain = [i % 9 for i in range(200)]
    results = {}
    for vectorize in (True, False):
        e = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
        e.set_vectorized_aggregation(vectorize).set_max_records_per_epoch(64)
        a = e.from_collection(rows).key_by(lambda r: r.key).sum("amount").set_parallelism(2).map(lambda r: ("row", r))
        b = e.from_collection(plain).key_by(lambda v: v % 3).max_by().set_parallelism(2).map(lambda v: ("plain", v))
        out, count = run(e, a.union(b), f"named-{vectorize}")
        results[vectorize] = (sorted(map(repr, out)), count)
    assert results[True][0] == results[False][0]
    assert results[True][1] > 0 and results[False][1] == 0


def test_untyped_fields_fall_back_to_the_per_record_path(env):
    """Mixed int/float values are not one numeric column: the chunk runs record by record, unchanged."""
    data = [("a", 1), ("a", 2.5), ("b", 2), ("a", 2)]
    env.set_parallelism(1)
    out, count = run(env, env.from_collection(data).key_by(lambda r: r[0]).max_by(1).set_parallelism(2),
                     "untyped")
    assert count == 0 and sorted(out) == sorted([("a", 1), ("a", 2.5), ("b", 2), ("a", 2.5)])


def _build_restorable(env, out, data, parallelism, vectorize):
    env.set_vectorized_aggregation(vectorize)
    env.set_parallelism(1).set_max_records_per_epoch(30)
    keyed = env.from_collection(data).uid("src").assign_timestamps_and_watermarks(strategy()).uid("ts") \
        .key_by(lambda r: r[0])
    rolling = keyed.sum(2).uid("sum").set_parallelism(parallelism).map(lambda r: ["sum", *r]).uid("sum-json")
    windows = keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW))).allowed_lateness(LATENESS) \
        .aggregate(Avg(2), KeyedResult("avg")).uid("avg").set_parallelism(parallelism).map(list).uid("avg-json")
    rolling.union(windows).map(json.dumps).uid("json") \
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()).uid("sink")


def _lines(out):
    return sorted(line for p in out.iterdir() if p.is_file() for line in p.read_text().splitlines())


def test_a_savepoint_of_the_per_record_path_restores_on_the_fast_path_at_another_parallelism(workdir):
    data = disordered(240, seed=3, late_every=0)
    reference_out = workdir / "reference"
    env = StreamExecutionEnvironment.get_execution_environment()
    _build_restorable(env, reference_out, data, 2, vectorize=True)
    env.execute("restorable-reference")
    reference = _lines(reference_out)
    assert len([line for line in reference if line.startswith('["sum"')]) == len(data)

    out = workdir / "out"
    env = StreamExecutionEnvironment.get_execution_environment()
    _build_restorable(env, out, data, 2, vectorize=False)
    job = BackgroundJob(env, "restorable")
    wait_for_checkpoints("restorable", 3, job=job)
    path = stop_with_savepoint("restorable")
    job.join()
    read = json.loads(open(path.removeprefix("file://") + "/_metadata.json").read())["source_offsets"]["0"]["index"]
    assert 0 < read < len(data), "the savepoint must cut the input"

    use_options(savepoint_path=path)
    env = StreamExecutionEnvironment.get_execution_environment()
    _build_restorable(env, out, data, 3, vectorize=True)
    env.execute("restorable")
    assert _lines(out) == reference


@settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), cut=st.integers(3, 40))
def test_window_sums_do_not_depend_on_epoch_cuts_or_the_path(workdir, seed, cut):
    """Interval independence (tests/test_interval_independence.py) on both paths: the last firing of
    every window equals the reference, whatever the epoch cut."""
    data = disordered(60, seed=seed, keys="abc", late_every=0)
    expected: dict = {}
    for key, ts, value in data:
        expected[(key, ts - ts % WINDOW)] = expected.get((key, ts - ts % WINDOW), 0) + value
    for vectorize in (True, False):
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
        env.set_vectorized_aggregation(vectorize).set_max_records_per_epoch(cut)
        stream = env.from_collection(data).assign_timestamps_and_watermarks(strategy()).key_by(lambda r: r[0]) \
            .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW))).allowed_lateness(LATENESS) \
            .aggregate(Sum(2), KeyedResult("sum"))
        out, count = run(env, stream, f"cuts-{vectorize}")
        assert (count > 0) == vectorize
        last = {}
        for _, key, start, total in out:
            last[(key, start)] = total
        assert last == expected


class DoubledSum(Sum):
    """A subclass that changes how records add up: the built-in's NumPy sum is not its accumulator."""

    def add_value(self, value, accumulator):
        return accumulator + 2 * value


class CountOfEven(Count):
    def add_value(self, value, accumulator):
        return accumulator + (value % 2 == 0)


class MeanAsPair(Avg):
    """Only the result differs from the built-in's: its NumPy form still applies."""

    def get_result(self, accumulator):
        return accumulator


@pytest.mark.parametrize("agg,records,expected", [
    (Sum(1), [("a", 1), ("a", 2)], 3), (Count(), [("a", 1), ("a", 2)], 2), (Avg(1), [("a", 1), ("a", 2)], 1.5),
    (Min(1), [("a", 4), ("a", 2)], 2), (Max(1), [("a", 4), ("a", 2)], 4), (First(1), [("a", 4), ("a", 2)], 4),
    (Last(1), [("a", 4), ("a", 2)], 2), (First(), [("a", 4), ("a", 2)], ("a", 4)),
    (DoubledSum(1), [("a", 1), ("a", 2)], 6), (CountOfEven(1), [("a", 4), ("a", 3), ("a", 2)], 2),
    (MeanAsPair(1), [("a", 1), ("a", 2)], (3, 2)),
])
def test_aggregate_functions_agree_record_by_record_and_columnar(agg, records, expected):
    """Also for subclasses: one that changes how records add up has them added by its own method."""
    import numpy as np
    import pyarrow as pa

    acc = agg.create_accumulator()
    for r in records:
        acc = agg.add(r, acc)
    assert agg.get_result(acc) == expected
    (columnar,) = agg.accumulate_groups(records, np.zeros(len(records), dtype=np.int64), 1)
    assert agg.get_result(columnar) == expected
    half = agg.accumulate_groups(records[1:], np.zeros(len(records) - 1, dtype=np.int64), 1)[0]
    assert agg.get_result(agg.merge(agg.add(records[0], agg.create_accumulator()), half)) == expected
    batch = pa.RecordBatch.from_pydict({"key": [r[0] for r in records], "value": [r[1] for r in records]})
    (from_columns,) = type(agg)(None if agg.field is None else "value").accumulate_columns(
        batch, np.zeros(len(records), dtype=np.int64), 1)
    assert agg.get_result(from_columns) == expected


_NUMBERS = st.one_of(st.lists(st.integers(-2 ** 40, 2 ** 40), min_size=1, max_size=60),
                     st.lists(st.sampled_from([1e16, 1.0, -1e16, 0.1, -0.0, 3.5, 2.0 ** -30]), min_size=1, max_size=60))


@settings(max_examples=60, deadline=None)
@given(values=_NUMBERS, groups=st.lists(st.integers(0, 4), min_size=60, max_size=60))
def test_many_groups_reduce_exactly_as_record_by_record(values, groups):
    """Interleaved groups, in one chunk: each group's sum, min, max and mean equal the per-record path's
    to the bit (float sums added in arrival order), from Python records and from an Arrow column."""
    import numpy as np
    import pyarrow as pa

    _, group_ids = np.unique(groups[:len(values)], return_inverse=True)
    group_ids = group_ids.astype(np.int64)
    n_groups = int(group_ids.max()) + 1
    records = [("k", v) for v in values]
    batch = pa.RecordBatch.from_pydict({"key": ["k"] * len(values), "value": values})
    for agg in (Sum(1), Min(1), Max(1), Avg(1), Count()):
        expected = [agg.create_accumulator() for _ in range(n_groups)]
        for r, g in zip(records, group_ids.tolist()):
            expected[g] = agg.add(r, expected[g])
        for got in (agg.accumulate_groups(records, group_ids, n_groups),
                    type(agg)("value").accumulate_columns(batch, group_ids, n_groups)):
            assert [agg.get_result(a) for a in got] == [agg.get_result(a) for a in expected], agg
            assert [repr(agg.get_result(a)) for a in got] == [repr(agg.get_result(a)) for a in expected], agg


def test_the_fast_path_is_on_by_default_and_a_configuration_key_turns_it_off():
    from keyspan.common import Configuration
    from keyspan.datastream.data_stream import _KeyedReduce
    from keyspan.runtime.operators import runtime_function
    from keyspan.runtime.operators.vectorized import RollingAggregateOperator

    assert StreamExecutionEnvironment.get_execution_environment().is_vectorized_aggregation_enabled()
    config = Configuration()
    config.set_string("keyspan.vectorized-aggregation", "false")
    assert not StreamExecutionEnvironment.get_execution_environment(config).is_vectorized_aggregation_enabled()
    from keyspan.datastream.aggregates import RollingAggregation

    reduce = _KeyedReduce(RollingAggregation("sum", 1))
    assert isinstance(runtime_function(reduce), RollingAggregateOperator)
    assert runtime_function(reduce, vectorize=False) is reduce
    assert not isinstance(runtime_function(_KeyedReduce(lambda a, b: a)), RollingAggregateOperator)


SPARK_EVENTS = "key long, value long, label string, weight double"


def _spark_event_files(spark, path, files=3, rows=400, keys=300, seed=11):
    """One small Parquet file per epoch; more keys than a list chunk batches (under 4 records per key)."""
    rng = random.Random(seed)
    data = []
    for f in range(files):
        part = [(rng.randrange(keys), rng.randint(-50, 100), f"f{f}-{i}", rng.randint(0, 400) / 8) for i in range(rows)]
        spark.createDataFrame(part, SPARK_EVENTS).coalesce(1).write.mode("append").parquet(str(path))
        data += part
    return data


def _rolling_from_spark(spark, path, kind, field, vectorize, sink, job, backend=None):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_vectorized_aggregation(vectorize)
    if backend is not None:
        env.set_state_backend(backend)
    events = spark.readStream.schema(SPARK_EVENTS).option("maxFilesPerTrigger", 1).parquet(str(path))
    getattr(env.from_spark(events, bounded=True).key_by(lambda r: r.key), kind)(field).uid("agg").sink_to(sink)
    result = env.execute(job)
    return sum(m["value"] for m in result.metrics.user_metrics() if m["name"] == "numRecordsVectorized")


def test_a_spark_source_keyed_by_a_column_aggregates_as_arrow_columns(spark, workdir):
    """``from_spark(...).key_by(column).sum/max/min_by/max_by(field)`` runs on the Arrow columns Spark
    hands over, across epochs (stored running values, first records' other fields, winning records):
    Flink's outputs, as the per-record path gives them, and the same final state when the sink takes
    whole columns (on RocksDB)."""
    from keyspan.checkpoint.reader import latest_keyed_state
    from keyspan.datastream import EmbeddedRocksDBStateBackend
    from keyspan.datastream.connectors.file_system import DiscardingSink
    from keyspan.runtime import options

    data = _spark_event_files(spark, workdir / "events")
    for kind, pos, field in (("sum", 1, "value"), ("max", 3, "weight"), ("min_by", 1, "value"),
                             ("max_by", 3, "weight")):
        expected = {}
        for r in reference_rolling(kind, data, pos):
            expected.setdefault(r[0], []).append(r)
        paths = (True, False) if kind == "sum" else (True,)
        for vectorize in paths:
            sink = CollectSink()
            count = _rolling_from_spark(spark, workdir / "events", kind, field, vectorize, sink, f"{kind}-{vectorize}")
            assert count == (len(data) if vectorize else 0), (kind, vectorize, count)
            per_key: dict = {}
            for r in sink.results():
                per_key.setdefault(r.key, []).append(tuple(r))
            assert per_key == expected, (kind, vectorize)
        if kind in ("max", "max_by"):
            # a sink that takes columns gets the outputs without a Row per record; the state is the same
            job = f"{kind}-columns"
            count = _rolling_from_spark(spark, workdir / "events", kind, field, True, DiscardingSink(), job,
                                        EmbeddedRocksDBStateBackend())
            assert count == len(data)
            state = latest_keyed_state(options.current().metadata(), options.current().checkpoint_root(), job,
                                       "agg")["_reduce_state"]
            assert {k: tuple(v) for k, v in state.items()} == {k: v[-1] for k, v in expected.items()}
    # Parquet part files take the columns too, mixed with records where a chunk went record by record
    out = workdir / "parquet"
    row_type = Types.ROW_NAMED(["key", "value", "label", "weight"],
                               [Types.LONG(), Types.LONG(), Types.STRING(), Types.DOUBLE()])
    sink = FileSink.for_bulk_format(str(out), ParquetBulkWriters.for_row_type(row_type)).build()
    assert hasattr(sink.create_writer(0, 1, "t"), "write_columns")
    assert _rolling_from_spark(spark, workdir / "events", "sum", "value", True, sink, "sum-parquet") == len(data)
    written = pq.read_table(out).to_pylist()
    assert sorted(tuple(r.values()) for r in written) == sorted(reference_rolling("sum", data, 1))


def test_a_key_of_several_columns_takes_the_arrow_path(spark, workdir):
    """``key_by(lambda r: (r.label, r.key))``: tuple keys from two columns, each once per epoch (too few
    for the list path), summed across two epochs on the Arrow columns."""
    path = workdir / "tuple-keys"
    rows = []
    for epoch in range(2):
        part = [(i % 50, i + 1000 * epoch, f"r{i // 50}", float(i)) for i in range(150)]
        spark.createDataFrame(part, SPARK_EVENTS).coalesce(1).write.mode("append").parquet(str(path))
        rows += part
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    events = spark.readStream.schema(SPARK_EVENTS).option("maxFilesPerTrigger", 1).parquet(str(path))
    sink = CollectSink()
    env.from_spark(events, bounded=True).key_by(lambda r: (r.label, r.key)).sum("value").sink_to(sink)
    result = env.execute("tuple-keys")
    assert sum(m["value"] for m in result.metrics.user_metrics() if m["name"] == "numRecordsVectorized") == len(rows)
    expected: dict = {}
    for r in rows:
        runs = expected.setdefault((r[2], r[0]), [])
        runs.append(r if not runs else (r[0], runs[-1][1] + r[1], *runs[0][2:]))
    got: dict = {}
    for r in sink.results():
        got.setdefault((r.label, r.key), []).append(tuple(r))
    assert got == expected


def test_a_bulk_part_file_keeps_records_and_columns_in_their_order(tmp_path):
    """A part file written partly as records and partly as Arrow batches holds them in write order."""
    import pyarrow as pa

    row_type = Types.ROW_NAMED(["k", "v"], [Types.STRING(), Types.INT()])
    sink = FileSink.for_bulk_format(str(tmp_path), ParquetBulkWriters.for_row_type(row_type)).build()
    writer = sink.create_writer(0, 1, "t")
    writer.write(Row(k="a", v=1))
    writer.write_columns(pa.RecordBatch.from_pydict({"k": ["b", "c"], "v": pa.array([2, 3], pa.int64())}))
    writer.write(Row(k="d", v=4))
    writer.write_columns(pa.RecordBatch.from_pydict({"v": [5], "k": ["e"]}))
    (handle,) = writer.finish()
    table = pq.read_table(pa.BufferReader(sink.storage().read(handle["staged"])))
    assert table.schema.field("v").type == pa.int32()
    assert table.to_pylist() == [{"k": k, "v": v} for k, v in zip("abcde", range(1, 6))]


def _timed_windows(spark, path, vectorize, column_timestamps, assigner, agg, job):
    """``from_spark`` → event timestamps from column ``ts`` → ``key_by(key)`` → one window aggregate
    with allowed lateness and a late-data side output. ``column_timestamps=False`` computes the same
    timestamp in Python, which keeps the source stage (the reference)."""
    from keyspan.runtime.planner import compile_graph

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_vectorized_aggregation(vectorize)
    stamp = (lambda r, _: r.ts) if column_timestamps else (lambda r, _: int(r.ts))
    timed = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND)).with_timestamp_assigner(stamp)
    events = spark.readStream.schema("key string, ts long, value long").option("maxFilesPerTrigger", 1) \
        .parquet(str(path))
    late = OutputTag("late")
    windowed = env.from_spark(events, bounded=True).assign_timestamps_and_watermarks(timed) \
        .key_by(lambda r: r.key).window(assigner).allowed_lateness(LATENESS).side_output_late_data(late) \
        .aggregate(agg, KeyedResult(job.split("/")[0]))
    fired, late_records = CollectSink(), CollectSink()
    windowed.sink_to(fired)  # chained to the window operator: each key's firings in their order
    windowed.get_side_output(late).map(lambda r: ("late", "w", tuple(r))).sink_to(late_records)
    formats = [s.plan.input_format for s in compile_graph(env._transformations, 2, 128).stages]
    result = env.execute(job)
    vectorized = sum(m["value"] for m in result.metrics.user_metrics() if m["name"] == "numRecordsVectorized")
    return by_operator(fired.results() + late_records.results()), vectorized, formats


def test_a_spark_source_with_a_timestamp_column_windows_without_a_python_source_stage(spark, workdir):
    """A timestamp assigner that returns a column moves into the keyed stage with the key columns:
    no Python source stage, timestamps and the watermark's maxima read from the column, and windows
    pre-aggregated on Spark's Arrow columns. Window results, firing order per key and late records
    equal the job that assigns the same timestamps in Python, on both paths."""
    from keyspan.runtime.planner import InputFormat

    path = workdir / "timed"
    data = disordered(900, seed=12, keys="abcdefghijklmnop")
    for lo in range(0, len(data), 150):  # one Parquet file per epoch
        spark.createDataFrame(data[lo:lo + 150], "key string, ts long, value long").coalesce(1) \
            .write.mode("append").parquet(str(path))
    tumbling = TumblingEventTimeWindows.of(Time.milliseconds(WINDOW))
    sliding = SlidingEventTimeWindows.of(Time.milliseconds(WINDOW), Time.milliseconds(40))
    for name, assigner, agg in (("avg", tumbling, Avg("value")), ("spread", tumbling, SpreadOfValue()),
                                ("last", tumbling, Last("value")), ("count", sliding, Count()),
                                ("doubled", tumbling, DoubledSum("value"))):
        reference, _, formats = _timed_windows(spark, path, True, False, assigner, agg, f"{name}/python-stamps")
        assert formats[:2] == [InputFormat.TYPED, InputFormat.EXCHANGE]
        assert reference[("late", "w")], "the input has late records: they reach the side output"
        for vectorize in (False, True):
            got, vectorized, formats = _timed_windows(spark, path, vectorize, True, assigner, agg,
                                                      f"{name}/column-{vectorize}")
            assert formats[:2] == [InputFormat.PUSHED_DOWN, InputFormat.TYPED_KEYED]
            assert (vectorized > 0) == vectorize, (name, vectorized)
            assert got == reference, (name, vectorize)


class SpreadOfValue(SpreadOf):
    """``SpreadOf`` over a Row's ``value`` column."""

    def add_batch(self, accumulator, batch):
        lo, hi = pc.min_max(batch.column("value")).values()
        lo, hi = lo.as_py(), hi.as_py()
        return (lo, hi) if accumulator is None else (min(accumulator[0], lo), max(accumulator[1], hi))


def test_a_window_the_other_subtask_s_timestamps_close_fires_before_the_next_epoch_s_records(spark, workdir):
    """With timestamps read in the keyed stage, a subtask sees only its own records' largest timestamp.
    Key A's records are all early; key B, on the other subtask, moves the job's watermark past A's
    window. A's window must still fire after that epoch and before the next epoch's late record for it
    (allowed lateness), as when a source stage reports every timestamp: two firings, 2 then 3 records."""
    from keyspan.state.keygroups import assign_to_key_group, compute_operator_index_for_key_group

    def subtask(key):
        return compute_operator_index_for_key_group(128, 2, assign_to_key_group(key, 128))

    a = next(k for k in "abcdefgh" if subtask(k) == 0)
    b = next(k for k in "abcdefgh" if subtask(k) == 1)
    path = workdir / "skewed"
    # epoch 1: the watermark becomes 150 - 30 - 1 = 119, past A's window [0, 100) but not its cleanup (139)
    for epoch in ([(a, 10, 1), (a, 20, 2), (b, 150, 4)], [(a, 60, 8), (b, 160, 16)], [(b, 400, 32)]):
        spark.createDataFrame(epoch, "key string, ts long, value long").coalesce(1).write.mode("append") \
            .parquet(str(path))
    tumbling = TumblingEventTimeWindows.of(Time.milliseconds(WINDOW))
    reference, _, _ = _timed_windows(spark, path, True, False, tumbling, Count(), "count/python-stamps")
    assert reference[("count", a)] == [("count", a, 0, 2), ("count", a, 0, 3)]
    for vectorize in (True, False):
        got, _, _ = _timed_windows(spark, path, vectorize, True, tumbling, Count(), f"count/column-{vectorize}")
        assert got == reference, vectorize


def test_a_rolling_sum_fed_by_a_timestamp_column_passes_the_timestamps_on(spark, workdir):
    """``sum`` after timestamps read from a column: the outputs carry each input record's timestamp
    (the Arrow path, whose output batches carry none, leaves such chunks to the list path) and the
    watermark moves as with the timestamps assigned in Python."""
    from keyspan.datastream import KeyedProcessFunction
    from keyspan.runtime.planner import compile_graph

    class Stamped(KeyedProcessFunction):
        def process_element(self, value, ctx):
            yield value.key, value.value, ctx.timestamp(), ctx.timer_service().current_watermark()

    path = workdir / "stamped"
    data = disordered(300, seed=13, keys="abcdefghij", late_every=0)
    for lo in range(0, len(data), 100):
        spark.createDataFrame(data[lo:lo + 100], "key string, ts long, value long").coalesce(1) \
            .write.mode("append").parquet(str(path))
    outputs = {}
    for column in (True, False):
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
        stamp = (lambda r, _: r.ts) if column else (lambda r, _: int(r.ts))
        events = spark.readStream.schema("key string, ts long, value long").option("maxFilesPerTrigger", 1) \
            .parquet(str(path))
        sink = CollectSink()
        env.from_spark(events, bounded=True).assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND)).with_timestamp_assigner(stamp)) \
            .key_by(lambda r: r.key).sum("value").key_by(lambda r: r.key).process(Stamped()).sink_to(sink)
        formats = [s.plan.input_format for s in compile_graph(env._transformations, 2, 128).stages]
        assert (formats[0] == "pushed_down") == column
        env.execute(f"stamped-{column}")
        outputs[column] = sorted(sink.results())
    assert outputs[True] == outputs[False]
    assert {r[2] for r in outputs[True]} == {r[1] for r in data}  # every record's own timestamp


def test_the_end_of_a_bounded_spark_input_fires_every_subtask_s_windows_beside_another_source(spark, workdir):
    """A JVM-routed keyed stage's input has no heartbeat rows: each subtask's task runs with or without
    records. The epoch after a bounded input ends reads nothing (a second source's batch filters it
    out of the job's one stream); every subtask still runs it and fires its remaining windows: the
    results equal the sums of the input, window by window."""
    path, other = workdir / "two-sources", workdir / "other-source"
    data = [(f"k{i % 8}", epoch * 1000 + i * 7, i) for epoch in range(3) for i in range(40)]
    for lo in range(0, len(data), 40):
        spark.createDataFrame(data[lo:lo + 40], "key string, ts long, value long").coalesce(1) \
            .write.mode("append").parquet(str(path))
    spark.createDataFrame([(i,) for i in range(5)], "n long").coalesce(1).write.parquet(str(other))
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    events = spark.readStream.schema("key string, ts long, value long").option("maxFilesPerTrigger", 1) \
        .parquet(str(path))
    timed = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0)).with_timestamp_assigner(
        lambda r, _: r.ts)
    sums, numbers = CollectSink(), CollectSink()
    env.from_spark(events, bounded=True).assign_timestamps_and_watermarks(timed).key_by(lambda r: r.key) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(1000))).aggregate(Sum("value"), KeyedResult("sum")) \
        .sink_to(sums)
    env.from_spark(spark.readStream.schema("n long").parquet(str(other)), bounded=True).map(lambda r: r.n) \
        .sink_to(numbers)
    env.execute("two-sources")
    expected = {}
    for key, ts, value in data:
        expected[(key, ts // 1000 * 1000)] = expected.get((key, ts // 1000 * 1000), 0) + value
    assert {(key, start): total for _, key, start, total in sums.results()} == expected
    assert len({key for key, _ in expected}) == 8 and sorted(numbers.results()) == list(range(5))


def test_a_spark_keyed_stage_unioned_after_another_stage_keeps_its_subtasks(spark, workdir):
    """When a JVM-routed keyed stage's output is unioned with another stage's before the next exchange,
    Spark numbers the union's partitions on, so a task's partition id is not its subtask; such a stage
    keeps its heartbeat rows. Here every key is on subtask 0, so subtask 1 never has a record of its
    own, and the union puts the other source's stage first: the running sums are still exact."""
    from keyspan.state.keygroups import assign_to_key_group, compute_operator_index_for_key_group

    keys = [k for k in (f"k{i}" for i in range(40))
            if compute_operator_index_for_key_group(128, 2, assign_to_key_group(k, 128)) == 0][:3]
    sums_path, tags_path = workdir / "keyed", workdir / "tags"
    data = [(keys[i % 3], i) for i in range(30)]
    for lo in range(0, 30, 10):
        spark.createDataFrame(data[lo:lo + 10], "key string, value long").coalesce(1).write.mode("append") \
            .parquet(str(sums_path))
        spark.createDataFrame([(f"t{lo}",)], "tag string").coalesce(1).write.mode("append").parquet(str(tags_path))
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    tags = env.from_spark(spark.readStream.schema("tag string").option("maxFilesPerTrigger", 1)
                          .parquet(str(tags_path)), bounded=True).map(lambda r: ("tag", r.tag, 0))
    sums = env.from_spark(spark.readStream.schema("key string, value long").option("maxFilesPerTrigger", 1)
                          .parquet(str(sums_path)), bounded=True).key_by(lambda r: r.key).sum("value") \
        .map(lambda r: ("sum", r.key, r.value))
    sink = CollectSink()
    tags.union(sums).key_by(lambda r: r[1]).map(lambda r: r).sink_to(sink)
    env.execute("unioned-keyed")
    running, expected = {}, []
    for key, value in data:
        running[key] = running.get(key, 0) + value
        expected.append(("sum", key, running[key]))
    got = sink.results()
    assert sorted(r for r in got if r[0] == "sum") == sorted(expected)
    assert sorted(r[1] for r in got if r[0] == "tag") == ["t0", "t10", "t20"]


# --- both paths side by side in one process, as a task drives them ----------------------------------

class _OperatorTask:
    """One keyed operator driven as a stage task drives it, without Spark: per epoch its chunks of
    records (``process_batch`` on a chunk path, with the records it leaves over run one by one;
    ``process_element`` per record otherwise) at the watermark the epoch began with, then its timers
    fired up to the watermark after the epoch; then the epoch is confirmed or rolled back."""

    KEY_GROUPS = 16

    def __init__(self, operator, rocksdb_path: str | None = None):
        from keyspan.runtime.worker.contexts import KeyedContext, OnTimerContext
        from keyspan.runtime.worker.timers import TimerService
        from keyspan.state.heap import HeapKeyedStateBackend

        if rocksdb_path is None:
            self.backend = HeapKeyedStateBackend("windows", range(self.KEY_GROUPS))
        else:
            from keyspan.state.rocksdb import RocksDBKeyedStateBackend

            self.backend = RocksDBKeyedStateBackend("windows", range(self.KEY_GROUPS), rocksdb_path)
        self.timers = TimerService(self.backend)
        self.cell = [None]
        self.ctx = KeyedContext(self.backend, self.cell, self.timers)
        self.timer_ctx = OnTimerContext(self.backend, self.cell, self.timers)
        self.op = operator
        self.op.open(_RuntimeContext(self.backend))
        self.output = []  # (value, its timestamp)
        self.chunked = 0  # records that took the chunk path

    def _emit(self, value):
        self.output.append((value, self.cell[0]))

    def _record(self, record, key, kg, ts):
        self.backend.current_key, self.backend.current_key_group, self.cell[0] = key, kg, ts
        for out in self.op.process_element(record, self.ctx) or ():
            self._emit(out)

    def epoch(self, chunks, watermark: int, watermark_after: int, columns: bool = False, timed: bool = True) -> None:
        """``columns``: chunks of Rows (key, ts, value) go to ``process_columns`` as Arrow columns, as
        a stage keyed by the columns of a Spark source hands them over (where the operator's output
        keeps the timestamps, for ``timed`` records); ``timed``: field ts is each record's timestamp."""
        from keyspan.state.keygroups import assign_to_key_group

        self.timers.watermark = self.backend.current_watermark = watermark
        for chunk in chunks:
            keys = [r[0] for r in chunk]
            kgs = [assign_to_key_group(k, self.KEY_GROUPS) for k in keys]
            stamps = [r[1] for r in chunk] if timed else None
            if columns and hasattr(self.op, "process_columns") and (
                    not timed or self.op.columns_take_timestamps):
                self._columns(chunk, keys, kgs, stamps)
                continue
            batch = getattr(self.op, "process_batch", None)
            result = batch(self.backend, self.ctx, kgs, keys, chunk, stamps) if batch else None
            if result is None:
                leftover = range(len(chunk))
            else:
                outputs, out_stamps, leftover = result
                self.chunked += len(chunk) - len(leftover)
                for i, out in enumerate(outputs):
                    self.cell[0] = None if out_stamps is None else out_stamps[i]
                    self._emit(out)
            for i in leftover:
                self._record(chunk[i], keys[i], kgs[i], stamps and stamps[i])
        self._fire(watermark_after)

    def _columns(self, chunk, keys, kgs, stamps) -> None:
        import numpy as np
        import pyarrow as pa

        from keyspan.common.types import named_row_class, rows_of_arrow

        batch = pa.RecordBatch.from_pylist([r.as_dict() for r in chunk])
        result = self.op.process_columns(self.backend, self.ctx, np.array(kgs, dtype=np.int32), [batch.column(0)],
                                         batch, named_row_class(tuple(batch.column_names)),
                                         None if stamps is None else np.array(stamps, dtype=np.int64))
        if result is None:
            leftover = range(len(chunk))
        else:
            outputs, leftover = result
            self.chunked += len(chunk) - len(leftover)
            self.cell[0] = None
            for out in rows_of_arrow(outputs) if outputs is not None else ():
                self._emit(out)
        for i in leftover:
            self._record(chunk[i], keys[i], kgs[i], stamps and stamps[i])

    def _fire(self, watermark: int) -> None:
        from keyspan.datastream.functions import TimeDomain
        from keyspan.runtime.worker.task import FIRING_BATCH
        from keyspan.state.api import EVENT_TIME

        timers, ctx = self.timers, self.timer_ctx
        timers.watermark = self.backend.current_watermark = watermark
        fire_window_ends = getattr(self.op, "event_time_firing", None)
        timers.start_firing()
        try:
            while True:
                if fire_window_ends is not None:
                    ctx.domain = TimeDomain.EVENT_TIME
                    if fire_window_ends(timers, watermark, ctx, self._emit, FIRING_BATCH):
                        continue
                    break
                ts = timers.pop_due(EVENT_TIME, watermark)
                if ts is None:
                    break
                ctx.domain, ctx.firing, self.cell[0] = TimeDomain.EVENT_TIME, ts, ts
                for out in self.op.on_timer(ts, ctx) or ():
                    self._emit(out)
        finally:
            timers.end_firing()

    def state(self) -> dict:
        """Every state's entries, as a checkpoint would hold them (namespaces and timers included). The
        windows one timer holds are a set: a record the chunk path leaves to the per-record path (one
        of its sliding windows is late) adds its windows to a timer after the chunk's other records,
        and the order they fire in within that timer never changes a result (at most one of them is
        a window's end; the others are cleanups)."""
        import pickle

        from keyspan.state.api import TIMER_STATE

        sections = pickle.loads(pickle.dumps(self.backend.all_sections()))
        for section in sections.values():
            if TIMER_STATE in section:
                puts, deletes = section[TIMER_STATE]
                for timers in puts.values():
                    for entry, windows in timers.items():
                        timers[entry] = windows if windows is True else frozenset(windows)
        return sections

    def end_epoch(self, commit: bool) -> list:
        """The epoch's output once it commits; none if it is rolled back (to run again)."""
        out, self.output = self.output, []
        if commit:
            self.backend.confirm()
            return out
        self.backend.rollback()
        self.timers.invalidate()
        return []


def _by_key(output, key_at: int) -> dict:
    """Each key's outputs (its key at ``key_at``) in the order they came, and its late records ((tag,
    record)), with their timestamps."""
    grouped: dict = {}
    for value, ts in output:
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], OutputTag):
            grouped.setdefault(("late", value[1][0]), []).append((value[1], ts))
        else:
            grouped.setdefault(value[key_at], []).append((value, ts))
    return grouped


def _window_operation(kind: str, assigner: str, lateness: int):
    """The WindowOperationDescriptor the API builds for window operation ``kind``."""
    env = StreamExecutionEnvironment.get_execution_environment()
    windows = TumblingEventTimeWindows.of(Time.milliseconds(WINDOW)) if assigner == "tumbling" else \
        SlidingEventTimeWindows.of(Time.milliseconds(WINDOW), Time.milliseconds(40))
    windowed = env.from_collection([("a", 0, 0)]).key_by(lambda r: r[0]).window(windows) \
        .allowed_lateness(lateness).side_output_late_data(OutputTag("late"))
    built = {"sum": lambda: windowed.aggregate(Sum(2), KeyedResult("sum")),
             "avg": lambda: windowed.aggregate(Avg(2), KeyedResult("avg")),
             "min": lambda: windowed.aggregate(Min(2), KeyedResult("min")),
             "first": lambda: windowed.aggregate(First(2), KeyedResult("first")),
             "last": lambda: windowed.aggregate(Last(2), KeyedResult("last")),
             "count": lambda: windowed.aggregate(Count(), KeyedResult("count")),
             "reduce": lambda: windowed.reduce(lambda a, b: (a[0], b[1], 2 * a[2] + b[2]), KeyedResult("reduce")),
             "values": lambda: windowed.aggregate(FirstAndValues(), KeyedResult("values")),
             "kept": lambda: windowed.process(EveryValue("kept")),
             "applied": lambda: windowed.apply(EveryValueApplied("applied"))}[kind]()
    return built._t.function


_COLUMNAR = ("sum", "avg", "min", "first", "last", "count")  # the window operations with a columnar path


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rocksdb=st.booleans(), columns=st.booleans(),
       kind=st.sampled_from([*_COLUMNAR, "reduce", "values", "kept", "applied"]),
       assigner=st.sampled_from(["tumbling", "sliding"]), lateness=st.sampled_from([0, LATENESS]),
       seed=st.integers(0, 10 ** 6), n=st.integers(1, 160), keys=st.sampled_from(["a", "abc", "abcdefgh"]),
       epoch_cut=st.integers(1, 50), chunk_cut=st.integers(1, 50), failures=st.sets(st.integers(0, 20), max_size=4))
def test_each_window_chunk_path_keeps_the_per_record_path_s_state_and_output_epoch_by_epoch(
        rocksdb, columns, kind, assigner, lateness, seed, n, keys, epoch_cut, chunk_cut, failures):
    """Out-of-order and late records, epochs cut anywhere, several chunks an epoch, epochs that fail and
    run again: after every epoch both paths hold the same state (panes, timers and their windows) and
    have emitted the same results, with the same timestamps, in each key's order; the chunk path on
    the heap and on RocksDB, the per-record path on the heap."""
    import copy

    from keyspan.runtime.operators.vectorized import FoldingWindowOperator, VectorizedWindowOperator, vectorized
    from keyspan.runtime.operators.window import WindowOperator

    data = disordered(n, seed, keys=keys, late_every=11)
    descriptor = _window_operation(kind, assigner, lateness)
    chunked = vectorized(copy.deepcopy(descriptor))
    assert isinstance(chunked, VectorizedWindowOperator if kind in _COLUMNAR else FoldingWindowOperator)
    took, on_time = _both_paths_epoch_by_epoch(chunked, WindowOperator(copy.deepcopy(descriptor)), data, epoch_cut,
                                               chunk_cut, failures, rocksdb, key_at=1, columns=columns)
    assert took > 0 or not on_time, "records that were not late took the chunk path"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rocksdb=st.booleans(), columns=st.booleans(), kind=st.sampled_from(ROLLING), floats=st.booleans(),
       seed=st.integers(0, 10 ** 6),
       n=st.integers(1, 120), keys=st.sampled_from(["a", "abc", "abcdefgh"]), epoch_cut=st.integers(1, 50),
       chunk_cut=st.integers(1, 50), failures=st.sets(st.integers(0, 20), max_size=4))
def test_the_rolling_chunk_path_keeps_the_per_record_path_s_state_and_output_epoch_by_epoch(
        rocksdb, columns, kind, floats, seed, n, keys, epoch_cut, chunk_cut, failures):
    """``KeyedStream.sum/min/max/min_by/max_by`` a chunk at a time: after every epoch, failed ones
    included, the same state and the same outputs in each key's order as record by record."""
    import copy

    from keyspan.datastream.aggregates import RollingAggregation
    from keyspan.datastream.data_stream import _KeyedReduce
    from keyspan.runtime.operators.vectorized import RollingAggregateOperator, vectorized

    data = [(k, ts, v / 10 if floats else v) for k, ts, v in disordered(n, seed, keys=keys, late_every=0)]
    per_record = _KeyedReduce(RollingAggregation(kind, 2))
    chunked = vectorized(copy.deepcopy(per_record))
    assert isinstance(chunked, RollingAggregateOperator)
    # a rolling aggregate's output batch carries no timestamps: Arrow columns reach it untimed
    took, _ = _both_paths_epoch_by_epoch(chunked, per_record, data, epoch_cut, chunk_cut, failures, rocksdb, key_at=0,
                                         columns=columns, timed=not columns)
    chunks = [chunk for epoch in _epochs(data, epoch_cut, chunk_cut) for chunk in epoch]
    if any(4 * len({r[0] for r in chunk}) <= len(chunk) for chunk in chunks):  # else batching costs more
        assert took > 0, "a chunk of at least 4 records a key took the chunk path"


def _epochs(data, epoch_cut: int, chunk_cut: int) -> list[list[list]]:
    """``data`` cut into epochs of ``epoch_cut`` records, each cut into chunks of ``chunk_cut``."""
    epochs = [data[i:i + epoch_cut] for i in range(0, len(data), epoch_cut)]
    return [[epoch[i:i + chunk_cut] for i in range(0, len(epoch), chunk_cut)] for epoch in epochs]


def _both_paths_epoch_by_epoch(chunked, per_record, data, epoch_cut, chunk_cut, failures, rocksdb: bool,
                               key_at: int, columns: bool, timed: bool = True) -> tuple[int, int]:
    """Both operators fed the same epochs and compared after each: the chunk path's on RocksDB if
    ``rocksdb``, else on the heap, as Arrow columns if ``columns``; the per-record path's on the heap.
    ``timed``: the records carry timestamps; ``key_at``: where an output holds its key. Returns how many
    records took the chunk path, and how many results the per-record path gave that were not late records."""
    import shutil
    import tempfile

    if columns:
        data = [Row(key=k, ts=ts, value=v) for k, ts, v in data]
    folder = tempfile.mkdtemp(prefix="keyspan-chunk-paths-") if rocksdb else None
    fast, slow = _OperatorTask(chunked, folder), _OperatorTask(per_record)
    try:
        fast_out, slow_out = [], []
        watermark, largest, attempt = -(2 ** 63), None, 0
        for number, chunks in enumerate(_epochs(data, epoch_cut, chunk_cut)):
            stamps = [r[1] for chunk in chunks for r in chunk]
            largest = max(stamps if largest is None else [largest, *stamps])
            after = max(watermark, largest - BOUND - 1)
            while True:
                fast.epoch(chunks, watermark, after, columns, timed)
                slow.epoch(chunks, watermark, after, timed=timed)
                assert fast.state() == slow.state(), f"epoch {number}: the paths' states differ"
                assert _by_key(fast.output, key_at) == _by_key(slow.output, key_at), \
                    f"epoch {number}: the paths' outputs differ"
                commit = attempt not in failures
                attempt += 1
                fast_out += fast.end_epoch(commit)
                slow_out += slow.end_epoch(commit)
                if commit:
                    break
                assert fast.state() == slow.state(), f"epoch {number} rolled back: the paths' states differ"
            watermark = after
        for task in (fast, slow):  # the end of the input
            task.epoch([], watermark, 2 ** 63 - 1)
        assert fast.state() == slow.state()
        assert _by_key(fast.output + fast_out, key_at) == _by_key(slow.output + slow_out, key_at)
        return fast.chunked, sum(1 for value, _ in slow_out if not isinstance(value[0], OutputTag))
    finally:
        if folder is not None:
            fast.backend.close()
            shutil.rmtree(folder, ignore_errors=True)
