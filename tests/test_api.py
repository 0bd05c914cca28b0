"""PyFlink-compatible operators, sinks and errors, through real jobs on local Spark."""

from __future__ import annotations

import datetime
from collections import Counter

import pytest

from keyspan.common import Instant, Row, RowKind, Types
from keyspan.common.serialization import Encoder
from keyspan.datastream import (
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    MapFunction,
    OutputTag,
    ProcessFunction,
    ReduceFunction,
)
from keyspan.datastream.connectors import FileSink
from keyspan.datastream.state import ValueStateDescriptor
from keyspan.runtime.executor import JobExecutionError
from keyspan.state.keygroups import assign_to_key_group, compute_operator_index_for_key_group


# --- stateless operators -----------------------------------------------------------------------------

class Scale(MapFunction):
    def open(self, runtime_context):
        self.factor = 3  # map() fails with AttributeError unless open() ran first
        self.subtasks = runtime_context.get_number_of_parallel_subtasks()

    def map(self, value):
        return value * self.factor


class EvenThenNext(FlatMapFunction):
    def open(self, runtime_context):
        self.width = 2

    def flat_map(self, value):
        if value % 2 == 0:
            yield from (value + i for i in range(self.width))


class NotMultipleOfFour(FilterFunction):
    def open(self, runtime_context):
        self.divisor = 4

    def filter(self, value):
        return value % self.divisor != 0


class Tag(MapFunction):
    def __init__(self, tag):
        self.tag = tag

    def map(self, value):
        return self.tag, value


class Explode(ProcessFunction):
    """Several outputs per input; keyed state is refused on a non-keyed stream."""

    def open(self, runtime_context):
        try:
            runtime_context.get_state(ValueStateDescriptor("nope"))
            self.keyed_state = "allowed"
        except RuntimeError as exc:
            self.keyed_state = "refused" if "key_by" in str(exc) else str(exc)

    def process_element(self, value, ctx):
        assert ctx.timestamp() == -2 ** 63  # PyFlink: Long.MIN_VALUE for a record without a timestamp
        for i in range(value % 3):
            yield "process", value, i, self.keyed_state


def test_map_flat_map_filter_process_and_union(env):
    numbers = list(range(12))
    others = [100, 101, 102]
    src = env.from_collection(numbers)
    with_lambdas = (src.map(lambda x: x * 3)
                    .flat_map(lambda x: [x + i for i in range(2)] if x % 2 == 0 else [])
                    .filter(lambda x: x % 4 != 0)
                    .map(lambda x: ("lambda", x)))
    with_classes = src.map(Scale()).flat_map(EvenThenNext()).filter(NotMultipleOfFour()).map(Tag("class"))
    processed = env.from_collection(others).process(Explode())

    with with_lambdas.union(with_classes, processed).execute_and_collect() as results:
        got = list(results)
    assert list(results) == []  # closed

    piped = [y for x in numbers for y in ((3 * x, 3 * x + 1) if (3 * x) % 2 == 0 else ()) if y % 4 != 0]
    expected = [("lambda", y) for y in piped] + [("class", y) for y in piped]
    expected += [("process", v, i, "refused") for v in others for i in range(v % 3)]
    assert sorted(got) == sorted(expected)
    assert len(piped) >= 6


def test_operators_check_their_arguments(env):
    ds = env.from_collection([1, 2])
    with pytest.raises(TypeError):
        ds.map(42)
    with pytest.raises(TypeError):
        ds.process(lambda v, ctx: v)  # a ProcessFunction is required
    keyed = ds.key_by(lambda x: x)
    with pytest.raises(TypeError):
        keyed.process(Explode())  # a KeyedProcessFunction is required
    with pytest.raises(TypeError):
        ds.process(KeyedCount("x"))  # a KeyedProcessFunction needs key_by first
    with pytest.raises(Exception, match="not supported"):
        keyed.name("x")
    with pytest.raises(ValueError):
        ds.set_parallelism(0)


class Subtasks(MapFunction):
    def open(self, runtime_context):
        self.subtasks = runtime_context.get_number_of_parallel_subtasks()

    def map(self, value):
        return self.subtasks


def test_parallelism_default_goes_back_to_the_default_and_unknown_changes_nothing(env):
    """Flink's ``ExecutionConfig.PARALLELISM_DEFAULT`` (-1) on the environment resets it (PyFlink then
    reads back -1) and on an operator runs it at the job's parallelism; ``PARALLELISM_UNKNOWN`` is
    ignored, anything else below 1 refused."""
    from keyspan.common import ExecutionConfig

    env.set_parallelism(3)
    env.set_parallelism(ExecutionConfig.PARALLELISM_UNKNOWN)
    assert env.get_parallelism() == 3
    env.get_config().set_parallelism(ExecutionConfig.PARALLELISM_DEFAULT)
    assert env.get_parallelism() == -1 and env.get_config().get_parallelism() == -1
    assert env.get_default_local_parallelism() == 1
    with pytest.raises(ValueError, match="PARALLELISM_DEFAULT"):
        env.set_parallelism(0)
    env.set_parallelism(2)
    numbers = env.from_collection([1, 2, 3, 4])
    own = numbers.map(Subtasks()).set_parallelism(1)
    job_s = own.map(Subtasks()).set_parallelism(ExecutionConfig.PARALLELISM_DEFAULT)
    with pytest.raises(ValueError, match="PARALLELISM_DEFAULT"):
        job_s.set_parallelism(-2)
    assert sorted(job_s.execute_and_collect()) == [2, 2, 2, 2]


class RecordTo(MapFunction):
    """Writes each value it sees to its own file in ``folder``: proof that the function ran."""

    def __init__(self, folder, tag):
        self.folder, self.tag = str(folder), tag

    def map(self, value):
        with open(f"{self.folder}/{self.tag}-{value}", "w"):
            pass
        return value


def test_job_without_a_sink_runs_its_functions_and_sources_alone_raise(env, tmp_path):
    """As in PyFlink: an operator whose output no sink reads still runs, with or without a sink elsewhere
    in the job, but execute_and_collect runs only the stream it collects; a job of sources only is
    refused with Flink's message."""
    seen = tmp_path / "seen"
    seen.mkdir()
    env.from_collection([1, 2, 3]).map(RecordTo(seen, "alone"))
    env.execute("no-sink")
    assert sorted(p.name for p in seen.iterdir()) == ["alone-1", "alone-2", "alone-3"]

    numbers = env.from_collection([4, 5])
    numbers.map(RecordTo(seen, "beside")).rebalance()
    numbers.map(RecordTo(seen, "printed")).print()
    assert sorted(numbers.map(lambda x: x * 10).execute_and_collect()) == [40, 50]
    # PyFlink 2.3 (checked) runs the collected stream alone and drops the other operators unrun
    assert sorted(p.name for p in seen.iterdir()) == ["alone-1", "alone-2", "alone-3"]

    env.from_collection([1, 2, 3])
    with pytest.raises(ValueError, match="No operators defined in streaming topology"):
        env.execute("sources-only")


def test_records_cross_an_exchange_as_their_declared_type_gives_them_back(env):
    """PyFlink serializes records by their declared type between operators it does not fuse: a row
    arrives named by the type (``Row(f0=...)`` for ``Types.ROW``) and a ``FLOAT`` in single precision,
    across an exchange and also to a chained operator when the sender has a second consumer (outputs
    checked on PyFlink 2.3; the fused case is the next test's)."""
    env.set_parallelism(2)
    pairs = env.from_collection([("a", 1), ("b", 2)])
    named = Types.ROW_NAMED(["word", "n"], [Types.STRING(), Types.INT()])
    unnamed_float = Types.ROW([Types.STRING(), Types.FLOAT()])

    keyed = (pairs.map(lambda t: Row(t[0], t[1] + 1), output_type=named)
             .key_by(lambda r: r[0]).map(lambda r: f"{r.word} {r['n']} {r!r}", output_type=Types.STRING()))
    rows = pairs.map(lambda t: Row(t[0], t[1] + 0.1), output_type=unnamed_float)
    crossed = rows.rebalance().map(lambda r: f"crossed {r!r}", output_type=Types.STRING())
    chained = rows.map(lambda r: f"chained {r!r}", output_type=Types.STRING())
    side = OutputTag("side", named)
    split = pairs.process(SideRows(side), output_type=Types.STRING())
    sided = split.get_side_output(side).key_by(lambda r: r[0]).map(lambda r: f"side {r!r}", output_type=Types.STRING())

    assert sorted(keyed.union(crossed, chained, sided).execute_and_collect()) == [
        "a 2 Row(word='a', n=2)", "b 3 Row(word='b', n=3)",
        "chained Row(f0='a', f1=1.100000023841858)", "chained Row(f0='b', f1=2.0999999046325684)",
        "crossed Row(f0='a', f1=1.100000023841858)", "crossed Row(f0='b', f1=2.0999999046325684)",
        "side Row(word='a', n=1)", "side Row(word='b', n=2)"]


class SideRows(ProcessFunction):
    def __init__(self, tag):
        self.tag = tag

    def process_element(self, value, ctx):
        yield self.tag, Row(*value)


# --- keyed aggregations ---------------------------------------------------------------------------

class KeepFirstSumSecond(ReduceFunction):
    def reduce(self, value1, value2):
        return value1[0], value1[1] + value2[1], value2[2]


def _reference_aggregation(kind, records, pos):
    """Flink's streaming aggregations: one output per input, the running aggregate of its key."""
    state, out = {}, []
    for r in records:
        acc = state.get(r[0])
        if acc is None:
            new = r
        elif kind == "reduce":
            new = (acc[0], acc[1] + r[1], r[2])
        elif kind in ("sum", "min", "max"):  # the aggregated field changes; the rest stays the first record's
            v = {"sum": acc[pos] + r[pos], "min": min(acc[pos], r[pos]), "max": max(acc[pos], r[pos])}[kind]
            new = acc[:pos] + (v,) + acc[pos + 1:]
        elif kind == "min_by":  # the whole record holding the minimum; the first one on ties
            new = r if r[pos] < acc[pos] else acc
        else:  # max_by
            new = r if r[pos] > acc[pos] else acc
        state[r[0]] = new
        out.append(new)
    return out


AGG_RECORDS = [("a", 5, "r0"), ("b", 2, "r1"), ("a", 3, "r2"), ("c", 9, "r3"), ("a", 3, "r4"), ("b", 7, "r5"),
               ("a", 8, "r6"), ("b", 7, "r7"), ("c", -1, "r8"), ("a", 1, "r9"), ("b", 0, "r10"), ("c", 9, "r11"),
               ("a", 8, "r12"), ("c", 4, "r13")]


@pytest.mark.parametrize("kind", ["reduce", "sum", "min", "max", "min_by", "max_by"])
def test_keyed_aggregations_have_flink_semantics(env, kind):
    # one source partition keeps each key's records in input order; the aggregation itself runs on 2 subtasks
    env.set_parallelism(1)
    env.set_max_records_per_epoch(4)
    keyed = env.from_collection(AGG_RECORDS).key_by(lambda r: r[0])
    if kind == "reduce":
        stream = keyed.reduce(KeepFirstSumSecond())
    else:
        stream = getattr(keyed, kind)(1)
    results = stream.set_parallelism(2).execute_and_collect(limit=1000)
    expected = _reference_aggregation(kind, AGG_RECORDS, 1)
    by_key = {}
    for r in results:
        assert isinstance(r, tuple) and len(r) == 3
        by_key.setdefault(r[0], []).append(r)
    for key in "abc":
        assert by_key[key] == [r for r in expected if r[0] == key], key  # in order, per key


# --- keyed map / filter / flat_map, with state in a keyed MapFunction ------------------------------------

class KeyCounter(MapFunction):
    """A MapFunction on a KeyedStream may use keyed state (as in PyFlink)."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.LONG()))

    def map(self, value):
        n = (self.seen.value() or 0) + 1
        self.seen.update(n)
        return value[0], value[1], n


def test_keyed_map_filter_flat_map(env):
    # one source partition keeps each key's records in input order; the keyed operators run on 2 subtasks
    env.set_parallelism(1)
    env.set_max_records_per_epoch(5)
    records = [(f"k{i % 3}", i + 1) for i in range(15)]
    results = (env.from_collection(records)
               .key_by(lambda r: r[0]).map(KeyCounter()).set_parallelism(2)
               .key_by(lambda r: r[0]).filter(lambda r: r[2] % 2 == 1).set_parallelism(2)
               .key_by(lambda r: r[0]).flat_map(lambda r: [r, (r[0], -r[1], r[2])]).set_parallelism(2)
               .execute_and_collect(limit=1000))
    expected, seen = [], {}
    for key, v in records:
        seen[key] = seen.get(key, 0) + 1
        if seen[key] % 2 == 1:
            expected += [(key, v, seen[key]), (key, -v, seen[key])]
    assert sorted(results) == sorted(expected)
    assert max(r[2] for r in results) == 5  # the count lived across the three epochs


# --- Row records, sum by field name, print without a prefix at parallelism 1 ------------------------------

def test_row_named_records_and_print_at_parallelism_one(env, capsys):
    env.set_parallelism(1)
    rows = [("ann", 3), ("bob", 10), ("ann", 4), ("bob", -2), ("cid", 0)]
    ds = env.from_collection(rows, type_info=Types.ROW_NAMED(["name", "amount"], [Types.STRING(), Types.LONG()]))
    summed = ds.key_by(lambda r: r.name).sum("amount")
    described = summed.map(lambda r: (type(r).__name__, isinstance(r, Row), r.name, r["amount"], r[1],
                                      r.as_dict()))
    described.print()
    env.execute("print-rows")
    printed = capsys.readouterr().out.splitlines()
    results = described.execute_and_collect(limit=100)  # runs the stream again, from its source
    running, expected = {}, []
    for name, amount in rows:
        running[name] = running.get(name, 0) + amount
        expected.append(("Row", True, name, running[name], running[name], {"name": name, "amount": running[name]}))
    assert sorted(map(repr, results)) == sorted(map(repr, expected))
    # parallelism 1: Flink prints records without a "N> " prefix
    assert sorted(printed) == sorted(str(e) for e in expected)



def test_project_keeps_the_fields_given_and_prints_a_tuple_stream_as_pyflink_s_java_projection(env, capsys):
    """PyFlink projects in Java: a stream of ``Types.TUPLE`` gives Java tuples, which ``print()`` shows as
    ``(0.5,a)`` (checked on PyFlink 2.3) and ``execute_and_collect`` returns as Python tuples. keyspan
    also projects Rows and tuples without a declared type, which PyFlink refuses."""
    env.set_parallelism(1)
    records = [("a", 3, 0.5), ("b", 1, 2.5)]
    typed = env.from_collection(records, Types.TUPLE([Types.STRING(), Types.INT(), Types.DOUBLE()]))
    typed.project(2, 0).print()
    env.execute("project-print")
    assert sorted(capsys.readouterr().out.splitlines()) == ["(0.5,a)", "(2.5,b)"]
    both = typed.project(2, 0).union(env.from_collection([Row("c", 7, 1.0)]).project(1),
                                     env.from_collection(records).key_by(lambda r: r[0]).project(0, 1))
    assert sorted(map(repr, both.execute_and_collect())) == sorted(map(repr, [
        (0.5, "a"), (2.5, "b"), Row(7), ("a", 3), ("b", 1)]))

def _with_kind(record):
    row = Row(key=record[0], n=record[1])
    row.set_row_kind([RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE][record[1] % 4])
    return row


def test_a_row_kind_travels_with_the_row_through_an_exchange_to_the_driver(env):
    """PyFlink's ``Row.get_row_kind``/``set_row_kind``: a kind set in one operator is the row's kind in the
    next ones, across an exchange (where Rows of one class otherwise travel as columns) and to the driver."""
    records = [(f"k{i % 3}", i) for i in range(20)]
    out = (env.from_collection(records).map(_with_kind).key_by(lambda r: r.key)
           .map(lambda r: (r.key, r.n, r.get_row_kind().name, r)).execute_and_collect(limit=100))
    kinds = ["INSERT", "UPDATE_BEFORE", "UPDATE_AFTER", "DELETE"]
    assert sorted(o[:3] for o in out) == sorted((k, n, kinds[n % 4]) for k, n in records)
    assert all(o[3].get_row_kind().name == o[2] and o[3].n == o[1] for o in out)
    assert Row(1).get_row_kind() is RowKind.INSERT and Row(a=1) == Row(a=1)
    with pytest.raises(TypeError, match="RowKind"):
        Row(1).set_row_kind("DELETE")

# --- print() at parallelism > 1 ----------------------------------------------------------------------------

class Describe(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield ctx.get_current_key(), value[1] * 10


def test_print_prefixes_records_with_the_subtask(env, capsys):
    env.set_max_records_per_epoch(6)
    records = [(f"key-{i % 5}", i) for i in range(12)]
    out = env.from_collection(records).key_by(lambda r: r[0]).process(Describe())
    out.print()
    out.print("audit")
    result = env.execute("print-job")
    assert result.get_job_name() == "print-job"
    assert result.epochs == 2 and result.records == len(records)
    lines = capsys.readouterr().out.splitlines()
    expected = []
    for key, v in records:
        subtask = compute_operator_index_for_key_group(128, 2, assign_to_key_group(key, 128)) + 1
        expected += [f"{subtask}> {(key, v * 10)}", f"audit:{subtask}> {(key, v * 10)}"]
    assert sorted(lines) == sorted(expected)
    assert {line.split(">")[0] for line in lines} == {"1", "2", "audit:1", "audit:2"}


# --- execute_and_collect ------------------------------------------------------------------------------------

def test_execute_and_collect_with_limit(env):
    results = env.from_collection(list(range(30))).map(lambda x: x * x).execute_and_collect(limit=7)
    assert isinstance(results, list) and len(results) == 7
    assert set(results) <= {x * x for x in range(30)}


def _positional(r):
    return Row(r.name, r.amount * 10)


def test_collect_returns_records_of_a_declared_type_as_pyflink_reads_them_back(env):
    """PyFlink collects a stream of a declared type as Java objects and converts them back by that type
    (``pyflink.datastream.utils.pickled_bytes_to_python_obj``): rows named by the type, tuples, floats
    of single precision; a stream without a declared type comes back as the Python objects."""
    env.set_parallelism(1)
    named = Types.ROW_NAMED(["name", "amount"], [Types.STRING(), Types.INT()])
    rows = env.from_collection([Row(name="ann", amount=3), Row(name="bob", amount=4)], type_info=named)
    unnamed = list(rows.map(_positional, output_type=Types.ROW([Types.STRING(), Types.INT()])).execute_and_collect())
    assert [repr(r) for r in unnamed] == ["Row(f0='ann', f1=30)", "Row(f0='bob', f1=40)"]
    assert [(r.f0, r.f1) for r in unnamed] == [("ann", 30), ("bob", 40)]
    # a named row is written by its type's field names, in the type's order
    reordered = env.from_collection([("ann", 3)]).map(lambda t: Row(amount=t[1], name=t[0]), output_type=named)
    assert [repr(r) for r in reordered.execute_and_collect(limit=5)] == ["Row(name='ann', amount=3)"]
    tuples = env.from_collection([1, 2]).map(lambda v: (v, [v, v + 1]), output_type=Types.TUPLE(
        [Types.INT(), Types.LIST(Types.INT())]))
    assert list(tuples.execute_and_collect()) == [(1, [1, 2]), (2, [2, 3])]
    floats = env.from_collection([0.1, 1 / 3, 1e10], type_info=Types.FLOAT()).execute_and_collect()
    assert list(floats) == [0.1, 0.33333334, 1e10]
    assert list(env.from_collection([[1, 2]]).map(lambda v: v).execute_and_collect()) == [[1, 2]]
    # Java's bytes are signed: PyFlink collects a byte array as a list of them
    raw = env.from_collection([b"\x00\x01\xff"], type_info=Types.PRIMITIVE_ARRAY(Types.BYTE()))
    assert list(raw.execute_and_collect()) == [[0, 1, -1]]


# --- failures -------------------------------------------------------------------------------------------

class FailOn13(MapFunction):
    def map(self, value):
        if value[0] == 13:
            raise ValueError(f"unlucky {value[0]}")
        return value


def test_failing_user_function_names_operator_and_record(env):
    records = [(i, f"payload-{i}") for i in range(20)]
    env.from_collection(records).map(FailOn13()).name("unlucky-mapper").map(lambda r: r[0]).print()
    with pytest.raises(JobExecutionError) as info:
        env.execute("failing-job")
    message = str(info.value)
    assert "operator 'unlucky-mapper'" in message
    assert "(13, 'payload-13')" in message
    assert "ValueError: unlucky 13" in message


# --- regressions: union of stage outputs, records copied on emit, print prefix per sink parallelism ---

class KeyedCount(KeyedProcessFunction):
    def __init__(self, tag):
        self.tag = tag

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield self.tag, ctx.get_current_key(), n


def test_union_of_two_keyed_streams(env):
    records = [(f"k{i % 4}", i) for i in range(12)]
    src = env.from_collection(records)
    first = src.key_by(lambda r: r[0]).process(KeyedCount("first"))
    second = src.key_by(lambda r: r[0]).process(KeyedCount("second"))
    results = first.union(second).execute_and_collect(limit=1000)
    expected = [(tag, f"k{k}", n) for tag in ("first", "second") for k in range(4) for n in range(1, 4)]
    assert sorted(results) == sorted(expected)


def test_sinks_on_two_different_stages(env, capsys):
    records = [(f"k{i % 4}", i) for i in range(8)]
    src = env.from_collection(records)
    src.print()
    counted = src.key_by(lambda r: r[0]).process(KeyedCount("c")).execute_and_collect(limit=100)
    assert sorted(counted) == sorted(("c", f"k{k}", n) for k in range(4) for n in (1, 2))


class EmitThenMutate(KeyedProcessFunction):
    def process_element(self, value, ctx):
        out = [value[1]]
        yield ctx.get_current_key(), out
        out.append("mutated after emit")


def test_emitted_records_are_snapshots(env):
    results = env.from_collection([("a", 1), ("b", 2)]).key_by(lambda r: r[0]).process(
        EmitThenMutate()).execute_and_collect(limit=10)
    assert sorted(results) == [("a", [1]), ("b", [2])]


def test_print_sink_with_parallelism_one_has_no_prefix(env, capsys):
    env.from_collection([1, 2, 3, 4]).map(lambda x: x * 10).print().set_parallelism(1)
    env.execute("print-p1")
    assert sorted(capsys.readouterr().out.splitlines()) == ["10", "20", "30", "40"]


def test_a_sink_runs_at_the_job_s_parallelism_not_its_input_s(env, capsys, tmp_path):
    """As Flink's ``sinkTo``/``addSink``: a sink left at the default runs at the job's parallelism
    whatever its input's, reading it round-robin; so does a sink that writes from the tasks."""
    env.set_parallelism(1)
    env.from_collection([1, 2, 3, 4]).map(lambda x: x * 10).set_parallelism(2).print()
    env.execute("print-after-p2")
    assert sorted(capsys.readouterr().out.splitlines()) == ["10", "20", "30", "40"]

    env.set_parallelism(2)
    narrowed = env.from_collection(list(range(8))).map(lambda x: x + 100).set_parallelism(1)
    narrowed.print("m")
    narrowed.sink_to(FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build())
    env.execute("print-after-p1")
    printed = [line.split("> ") for line in capsys.readouterr().out.splitlines()]
    assert sorted(int(v) for _, v in printed) == list(range(100, 108))
    assert Counter(prefix for prefix, _ in printed) == {"m:1": 4, "m:2": 4}
    written = {}
    for part in (tmp_path / "out").rglob("part-*"):
        subtask = int(part.name.split("-")[2])  # part-<uuid>-<subtask>-<counter>
        written.setdefault(subtask, []).extend(part.read_text().splitlines())
    assert sorted(written) == [0, 1] and sorted(v for vs in written.values() for v in vs) == [str(v) for v in range(100, 108)]




def test_row_as_pyflink_s_row_class_fields_and_membership():
    person = Row("name", "age")
    alice = person("Alice", 11)
    assert (alice.name, alice["age"], alice.as_dict()) == ("Alice", 11, {"name": "Alice", "age": 11})
    assert "name" in person and "name" in alice and "Alice" not in alice and "Alice" in Row("Alice", 11)
    assert repr(alice) == "Row(name='Alice', age=11)" and repr(Row(1, "a")) == "<Row(1, 'a')>"
    with pytest.raises(ValueError):
        person("Alice", 11, "extra")
    unnamed = Row("Bob", 12)
    unnamed.set_field_names(["name", "age"])
    assert unnamed.age == 12 and unnamed.get_fields_by_names(["age", "name"]) == [12, "Bob"]
    changed = Row.of_kind(RowKind.UPDATE_BEFORE, name="Cid", age=3)
    assert changed.get_row_kind() is RowKind.UPDATE_BEFORE and str(changed.get_row_kind()) == "-U"
    assert [str(k) for k in RowKind] == ["+I", "-U", "+U", "-D"]

def _deleted(record):
    return Row.of_kind(RowKind.DELETE, record[0], record[1] * 2)


def test_print_shows_rows_as_pyflink_s_python_text_other_declared_types_as_java_and_the_rest_as_str(env, capsys):
    """PyFlink prints a stream of rows in Python (``+I[ann,3,True]``: each field's ``str`` as a Python
    function receives it), a stream of another declared type through Flink's Java sink (the Java
    object's ``toString``) and any other stream as ``str`` of the Python record. Every expected line
    is what PyFlink 2.3 printed for the same job."""
    env.set_parallelism(1)
    row = Types.ROW([Types.STRING(), Types.INT(), Types.BOOLEAN(), Types.DOUBLE(), Types.STRING()])
    env.from_collection([Row("ann", 3, True, 1.5, None)], type_info=row).print()
    env.from_collection([("ann", 3)], type_info=Types.TUPLE([Types.STRING(), Types.INT()])).print()
    env.from_collection([True, False], type_info=Types.BOOLEAN()).print()
    env.from_collection([1e7, 0.0001, 2.5, -1.25e-5, 3], type_info=Types.DOUBLE()).print()
    env.from_collection([("bob", 4)]).map(_deleted, output_type=Types.ROW([Types.STRING(), Types.LONG()])).print()
    env.from_collection([Row(1, "a"), ("x", True)]).print()
    env.from_collection([Row(datetime.datetime(2024, 1, 2, 3, 4, 5), datetime.time(6, 7, 8), Instant(0, 120_000_000))],
                        type_info=Types.ROW([Types.SQL_TIMESTAMP(), Types.SQL_TIME(), Types.INSTANT()])).print()
    nested = Types.ROW_NAMED(["f", "d", "r", "l", "m", "dt"], [
        Types.FLOAT(), Types.DOUBLE(), Types.ROW_NAMED(["x", "y"], [Types.INT(), Types.STRING()]),
        Types.LIST(Types.INT()), Types.MAP(Types.STRING(), Types.DOUBLE()), Types.SQL_DATE()])
    env.from_collection([Row(1 / 3, 1e20, Row(x=1, y="q"), [1, 2], {"k": 1.5}, datetime.date(2020, 1, 2))],
                        type_info=nested).print()
    env.from_collection([(1, Row(2, 3))], type_info=Types.TUPLE([Types.INT(), Types.ROW([Types.INT(), Types.INT()])])) \
        .print()
    env.from_collection([Row(b"\x00\x01\xff", "x")],
                        type_info=Types.ROW([Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.STRING()])).print()
    env.execute("print-types")
    assert sorted(capsys.readouterr().out.splitlines()) == sorted([
        "+I[ann,3,True,1.5,None]", "(ann,3)", "true", "false", "1.0E7", "1.0E-4", "2.5", "-1.25E-5", "3.0",
        "-D[bob,8]", "<Row(1, 'a')>", "('x', True)", "+I[2024-01-02 03:04:05,06:07:08,Instant<0, 120000000>]",
        "+I[0.3333333432674408,1e+20,Row(x=1, y='q'),[1, 2],{'k': 1.5},2020-01-02]", "(1,+I[2, 3])",
        "+I[b'\\x00\\x01\\xff',x]"])


def test_a_collection_s_named_rows_take_their_declared_type_s_fields_by_name(env):
    """PyFlink writes a named row by its type's field names, whatever the row's own order."""
    named = Types.ROW_NAMED(["b", "a"], [Types.STRING(), Types.INT()])
    deleted = Row.of_kind(RowKind.DELETE, a=2, b="y")
    got = env.from_collection([Row(a=1, b="z"), deleted, ("x", 3)], type_info=named) \
        .map(lambda r: (repr(r), str(r.get_row_kind()))).execute_and_collect()
    assert sorted(got) == [("Row(b='x', a=3)", "+I"), ("Row(b='y', a=2)", "-D"), ("Row(b='z', a=1)", "+I")]
    with pytest.raises(ValueError, match=r"no field 'a' of its declared type"):
        env.from_collection([Row(c=1, b="z")], type_info=named)


class StoresAFunction(KeyedProcessFunction):
    def open(self, runtime_context):
        self.handler = runtime_context.get_state(ValueStateDescriptor("handler"))

    def process_element(self, value, ctx):
        self.handler.update(lambda x: x)  # plain pickle cannot serialize a lambda
        yield value


def test_unserializable_state_fails_naming_operator_state_and_key(env):
    env.from_collection([("only-key", 1)]).key_by(lambda r: r[0]).process(StoresAFunction()).name("keeps-lambdas") \
        .print()
    with pytest.raises(JobExecutionError, match=r"keeps-lambdas.*state 'handler'.*'only-key'"):
        env.execute("unserializable")


def test_chunks_of_rows_cross_an_exchange_as_columns_and_come_back_as_the_same_rows():
    import pickle

    from keyspan.common.types import _Unpickled, packed_rows

    rows = [Row(key=f"k{i}", n=i, x=None if i % 2 else [i]) for i in range(5)]
    packed = packed_rows(rows)
    assert isinstance(packed, _Unpickled) and packed.args[1][1] == [0, 1, 2, 3, 4]
    back = pickle.loads(pickle.dumps(packed))
    assert back == rows and {type(r) for r in back} == {type(rows[0])}
    assert back[3].key == "k3" and back[4].x == [4]
    # anything else travels as it is: mixed classes, a Row missing a field, Rows without names
    short = tuple.__new__(type(rows[0]), ("k9", 9))
    deleted = Row(key="k5", n=5, x=None)
    deleted.set_row_kind(RowKind.DELETE)
    for chunk in ([Row(a=1), Row(b=1)], rows + [short], [Row(1, 2), Row(3, 4)], [(1, 2)], [], rows + [deleted]):
        assert packed_rows(chunk) is chunk
    assert pickle.loads(pickle.dumps(rows + [deleted]))[-1].get_row_kind() is RowKind.DELETE


def test_what_a_function_and_print_get_from_the_operator_before_follows_pyflink_s_fusion(env, capsys):
    """PyFlink fuses a map, filter, flat_map or process (and print()'s row formatting) into the Python
    operator before it when it is that operator's only consumer: it then gets the values as returned.
    Otherwise the values pass the declared type's serializer first: a FLOAT rounded to single precision,
    an unnamed nested row named f0, f1, ... Outputs as PyFlink 2.3 gives them (checked side by side)."""
    env.set_parallelism(1)
    row = Types.ROW([Types.STRING(), Types.FLOAT(), Types.ROW([Types.INT(), Types.STRING()])])
    source = env.from_collection([1], Types.INT())
    source.map(lambda x: Row("alone", 1.1, Row(x, "in")), row).print()  # fused: as returned
    shared = source.map(lambda x: Row("shared", 1.1, Row(x, "in")), row)  # two consumers: serialized
    shared.print()
    shared.map(lambda r: f"received {r!r}", Types.STRING()).print()
    one = source.map(lambda x: Row("one", 1.1, Row(x, "in")), row)
    one.map(lambda r: f"fused {r!r}", Types.STRING()).print()
    tag = OutputTag("side", Types.ROW_NAMED(["word", "f"], [Types.STRING(), Types.FLOAT()]))
    split = source.process(SideAndMain(tag), Types.STRING())  # a side output is read by its tag's type
    split.get_side_output(tag).map(lambda r: f"side {r!r}", Types.STRING()).print()
    env.execute("fusion")
    assert sorted(capsys.readouterr().out.splitlines()) == [
        "+I[alone,1.1,<Row(1, 'in')>]",
        "+I[shared,1.100000023841858,Row(f0=1, f1='in')]",
        "fused <Row('one', 1.1, <Row(1, 'in')>)>",
        "received Row(f0='shared', f1=1.100000023841858, f2=Row(f0=1, f1='in'))",
        "side Row(word='a', f=1.100000023841858)",
    ]


class SideAndMain(ProcessFunction):
    def __init__(self, tag):
        self.tag = tag

    def process_element(self, value, ctx):
        yield self.tag, Row("a", 1.1)
        yield "main"
