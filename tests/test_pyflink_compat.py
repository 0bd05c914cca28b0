"""PyFlink names a ported job uses beyond state: partitioning (each strategy decides the exchange),
chaining controls, ``configure(Configuration)``, ``execute_async`` with its ``JobClient``,
``execute_and_collect(limit)`` on an unbounded job, Python files shipped to Spark's workers,
``get_execution_plan()``, and clear errors for what keyspan does not support."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from keyspan.common import Configuration, JobStatus, Row, Time, Types, WatermarkStrategy
from keyspan.common.watermark_strategy import TimestampAssigner
from keyspan.datastream import (
    EmbeddedRocksDBStateBackend,
    FsStateBackend,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    MapFunction,
    Partitioner,
    ProcessWindowFunction,
    StreamExecutionEnvironment,
)
from keyspan.datastream.execution_mode import RuntimeExecutionMode
from keyspan.datastream.state import ValueStateDescriptor
from keyspan.datastream.window import TumblingEventTimeWindows
from keyspan.runtime.planner import compile_graph


class WhereAmI(MapFunction):
    def open(self, runtime_context):
        self.subtask = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return self.subtask, value


class Modulo(Partitioner):
    def partition(self, key, num_partitions):
        return key % num_partitions


def _placed(env, stream):
    return list(stream.map(WhereAmI()).set_parallelism(3).execute_and_collect())


def test_partitioning_decides_which_subtask_gets_each_record(env):
    values = list(range(30))
    custom = _placed(env, env.from_collection(values).partition_custom(Modulo(), lambda v: v))
    assert sorted(custom, key=lambda p: p[1]) == [(v % 3, v) for v in values]

    env2 = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    broadcast = _placed(env2, env2.from_collection(values).broadcast())
    assert Counter(broadcast) == Counter((s, v) for s in range(3) for v in values)

    for strategy in ("rebalance", "rescale", "shuffle"):
        e = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
        placed = _placed(e, getattr(e.from_collection(values), strategy)())
        assert sorted(v for _, v in placed) == values, strategy
        if strategy != "shuffle":  # round robin: an even spread
            assert sorted(Counter(s for s, _ in placed).values()) == [10, 10, 10], strategy
        else:
            assert {s for s, _ in placed} <= {0, 1, 2}


class TaskName(MapFunction):
    def open(self, runtime_context):
        self.names = runtime_context.get_task_name(), runtime_context.get_task_name_with_subtasks()

    def map(self, value):
        return self.names


def test_a_function_reads_its_task_name_with_subtask_and_attempt_as_flink_writes_it(env):
    env.set_parallelism(2)
    names = set(env.from_collection(list(range(8))).map(TaskName()).name("label").execute_and_collect())
    assert names == {("label", "label (1/2)#0"), ("label", "label (2/2)#0")}


def test_a_partitioner_out_of_range_is_reported_with_the_operator(env):
    stream = env.from_collection([1, 2]).name("numbers").partition_custom(lambda k, n: n + 5, lambda v: v)
    with pytest.raises(Exception, match="partition_custom's partitioner returned 8"):
        stream.map(lambda v: v).set_parallelism(3).execute_and_collect()


def test_forward_refuses_a_parallelism_change_and_chaining_controls_cut_stages():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.from_collection([1]).forward().map(lambda v: v).set_parallelism(3).print()
    with pytest.raises(ValueError, match="Forward partitioning does not allow change of parallelism"):
        compile_graph(env.get_transformations(), 2, 128)

    def stages(build, chaining=True):
        e = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
        build(e)
        return len(compile_graph(e.get_transformations(), 2, 128, chaining=chaining).stages)

    chain = lambda e: e.from_collection([1]).map(lambda v: v).filter(bool).print()  # noqa: E731
    assert stages(chain) == 1
    assert stages(chain, chaining=False) == 4
    assert stages(lambda e: e.from_collection([1]).map(lambda v: v).start_new_chain().filter(bool).print()) == 2
    assert stages(lambda e: e.from_collection([1]).map(lambda v: v).disable_chaining().filter(bool).print()) == 3
    assert stages(lambda e: e.from_collection([1]).forward().map(lambda v: v).print()) == 1


def test_execute_runs_what_was_built_since_the_previous_execute(env):
    """PyFlink's execute() takes the job graph it runs out of the environment: the same environment
    then builds the next job from nothing, and has nothing to run until it does."""
    with env.from_collection([1, 2, 3]).map(lambda v: v * 10).execute_and_collect("first") as first:
        assert sorted(first) == [10, 20, 30]
    assert env.get_transformations() == []
    with env.from_collection(["a", "b"]).map(str.upper).execute_and_collect("second") as second:
        assert sorted(second) == ["A", "B"]  # the first job's operators did not run again
    with pytest.raises(ValueError, match="No operators defined in streaming topology"):
        env.execute("nothing")


class Logged(MapFunction):
    """Appends each record to a file: how often a job's operator ran, seen from the test."""

    def __init__(self, path):
        self.path = str(path)

    def map(self, value):
        with open(self.path, "a") as f:
            f.write(f"{value}\n")
        return value


def test_a_later_execute_runs_again_the_streams_its_operators_read(env, tmp_path):
    """As Flink's examples/datastream/basic_operations.py does: streams built before one execute() feed
    operators built after it. The next job runs those streams again from their source; the earlier job's
    other operators do not run again."""
    read = tmp_path / "read"
    numbers = env.from_collection([1, 2, 3, 4]).map(Logged(read))
    with numbers.map(lambda v: v * 10).execute_and_collect("first") as first:
        assert sorted(first) == [10, 20, 30, 40]
    tens = tmp_path / "tens"
    with numbers.filter(lambda v: v % 2 == 0).map(Logged(tens)).execute_and_collect("second") as second:
        assert sorted(second) == [2, 4]
    assert sorted(read.read_text().split()) == ["1", "1", "2", "2", "3", "3", "4", "4"]  # once per job
    assert sorted(tens.read_text().split()) == ["2", "4"]
    numbers.map(str)
    plan = [n["contents"] for n in json.loads(env.get_execution_plan())["nodes"]]
    assert plan == ["Collection Source", "Map", "Map"]  # the plan shows the stream the new map reads


def test_a_cached_stream_gives_each_job_its_records_and_refuses_what_pyflink_refuses(env, tmp_path):
    """PyFlink's ``cache()`` in BATCH mode, as its local execution runs it (checked on PyFlink 2.3):
    every job that reads the cached stream gets all its records, also after ``invalidate()``."""
    from keyspan.datastream import CachedDataStream

    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    cached = env.from_collection([1, 2, 3]).map(lambda v: v * 10).cache()
    assert isinstance(cached, CachedDataStream)
    with cached.execute_and_collect("first") as first:
        assert sorted(first) == [10, 20, 30]
    with cached.map(lambda v: v + 1).execute_and_collect("second") as second:
        assert sorted(second) == [11, 21, 31]
    cached.invalidate()
    with cached.execute_and_collect("third") as third:
        assert sorted(third) == [10, 20, 30]
    for refused, call in (("Set parallelism for", lambda: cached.set_parallelism(2)),
                          ("Set name for", lambda: cached.name("x")), ("Set uid for", lambda: cached.uid("x")),
                          ("Get name of", cached.get_name)):
        with pytest.raises(Exception, match=f"{refused} CachedDataStream is not supported"):
            call()
    with pytest.raises(Exception, match="Cache for KeyedStream is not supported"):
        cached.key_by(lambda v: v).cache()


class Millis(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


class KeyAndCount(KeyedProcessFunction):
    """Emits the key as user code gets it (in process_element and on_timer) and a per-key count."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(10_000)
        yield "element", ctx.get_current_key(), self.count.value()

    def on_timer(self, timestamp, ctx):
        yield "timer", ctx.get_current_key(), self.count.value()


class KeyOfBothInputs(KeyedCoProcessFunction):
    def process_element1(self, value, ctx):
        yield "first", ctx.get_current_key(), 0

    def process_element2(self, value, ctx):
        yield "second", ctx.get_current_key(), 0


class KeyOfWindow(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield "window", key, len(list(elements))


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_typed_key_reaches_user_code_as_pyflink_decodes_it_and_a_list_key_works(env, backend):
    """Checked side by side on PyFlink 2.3: a key of ``Types.ROW`` comes back a row named ``f0, f1``,
    of ``ROW_NAMED`` a row of those names, of ``Types.LIST`` a list, in process_element, on_timer
    and a window function's key. A list key, typed or not, keys state (a Python list is unhashable)."""
    if backend == "rocksdb":
        env.set_state_backend(EmbeddedRocksDBStateBackend())
    records = [("a", 1), ("b", 2), ("a", 3)]
    ds = env.from_collection(records, Types.TUPLE([Types.STRING(), Types.INT()])).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Millis()))
    row = ds.key_by(lambda r: Row(r[0], r[0] * 2), Types.ROW([Types.STRING(), Types.STRING()]))
    named = ds.key_by(lambda r: Row(r[0]), Types.ROW_NAMED(["name"], [Types.STRING()]))
    typed_list = ds.key_by(lambda r: [r[0]], Types.LIST(Types.STRING()))
    untyped_list = ds.key_by(lambda r: (r[0], [r[0]]))
    tagged = [stream.process(KeyAndCount()).map(lambda out, tag=tag: (tag,) + out)
              for tag, stream in (("row", row), ("named", named), ("list", typed_list), ("untyped", untyped_list))]
    tagged.append(named.window(TumblingEventTimeWindows.of(Time.seconds(10))).process(KeyOfWindow())
                  .map(lambda out: ("named",) + out))
    tagged.append(ds.connect(ds).key_by(lambda r: Row(r[0]), lambda r: Row(r[0]), Types.ROW([Types.STRING()]))
                  .process(KeyOfBothInputs()).map(lambda out: ("co",) + out))
    got = list(tagged[0].union(*tagged[1:]).execute_and_collect("typed-keys"))
    shown = Counter((tag, kind, repr(key), type(key).__name__, n) for tag, kind, key, n in got)
    expected = Counter()
    for tag, a, b, type_name in (("row", "Row(f0='a', f1='aa')", "Row(f0='b', f1='bb')", "Row"),
                                 ("named", "Row(name='a')", "Row(name='b')", "Row"),
                                 ("list", "['a']", "['b']", "list"),
                                 ("untyped", "('a', ('a',))", "('b', ('b',))", "tuple")):
        # a's two records count 1 and 2, b's one 1; each key's timer fires once, after its records
        expected.update([(tag, "element", a, type_name, 1), (tag, "element", a, type_name, 2),
                         (tag, "element", b, type_name, 1), (tag, "timer", a, type_name, 2),
                         (tag, "timer", b, type_name, 1)])
    expected.update([("named", "window", "Row(name='a')", "Row", 2), ("named", "window", "Row(name='b')", "Row", 1)])
    expected.update([(tag, side, key, "Row", 0) for side in ("first", "second") for tag, key in
                     (("co", "Row(f0='a')"), ("co", "Row(f0='a')"), ("co", "Row(f0='b')"))])
    assert shown == expected
    assert {key.f1 for tag, _, key, _ in got if tag == "row"} == {"aa", "bb"}  # fields by name, as in PyFlink
    assert {key.name for tag, _, key, _ in got if tag == "named"} == {"a", "b"}


BASIC_OPERATIONS = textwrap.dedent("""
    import logging, sys
    from keyspan.common import Types
    from keyspan.datastream import StreamExecutionEnvironment

    def show(ds, env):
        ds.print()
        env.execute()

    if __name__ == "__main__":
        logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        ds = env.from_collection([(1, "a"), (2, "bb"), (3, "ccc")],
                                 type_info=Types.ROW_NAMED(["id", "info"], [Types.INT(), Types.STRING()]))
        show(ds.map(lambda r: (r.id, len(r.info))), env)
        show(ds.filter(lambda r: r.id == 1).map(lambda r: r.info), env)
""")


def test_a_typed_collection_reaches_functions_as_pyflink_s_java_source_hands_it_over(env):
    """Checked side by side on PyFlink 2.3: ``from_collection`` with a declared type serializes each
    record by that type, so a function gets nested rows named ``f0, f1, …`` and ``FLOAT``s in single
    precision, even with no exchange before it."""
    nested = env.from_collection([Row(1, Row(2, "x"), None)],
                                 Types.ROW([Types.INT(), Types.ROW([Types.INT(), Types.STRING()]), Types.STRING()]))
    floats = env.from_collection([0.1, 16777217.0], Types.FLOAT())
    got = sorted(nested.map(repr).union(floats.map(repr)).execute_and_collect("typed-collection"))
    assert got == ["0.10000000149011612", "16777216.0", "Row(f0=1, f1=Row(f0=2, f1='x'), f2=None)"]


def test_sql_times_keep_the_precision_of_pyflink_s_serializers(env):
    """Checked side by side on PyFlink 2.3: functions receive a ``SQL_TIME`` or ``SQL_TIMESTAMP`` in
    whole milliseconds, and ``execute_and_collect`` gives a ``SQL_TIME`` back in whole seconds."""
    at = datetime.datetime(2024, 2, 29, 12, 30, 15, 123456)
    times = env.from_collection([at.time()], Types.SQL_TIME())
    stamps = env.from_collection([at], Types.SQL_TIMESTAMP())
    received = sorted(times.map(repr).union(stamps.map(repr)).execute_and_collect("sql-times-received"))
    assert received == ["datetime.datetime(2024, 2, 29, 12, 30, 15, 123000)", "datetime.time(12, 30, 15, 123000)"]
    collected = list(env.from_collection([at.time()], Types.SQL_TIME()).execute_and_collect("sql-time-collected"))
    assert collected == [datetime.time(12, 30, 15)]


def test_flink_s_basic_operations_example_prints_each_job_s_results_and_no_java_bridge_lines(tmp_path):
    """The shape of Flink's examples/datastream/basic_operations.py, run as ``python job.py``: INFO logs
    to stdout, one environment, an ``execute()`` per pipeline over one source. PyFlink prints both jobs'
    results and mutes its Java gateway's INFO lines; so does keyspan (the dashboard's link is keyspan's
    own INFO line, which the script's logging setup sends to stdout)."""
    script = tmp_path / "basic_operations.py"
    script.write_text(BASIC_OPERATIONS)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, KEYSPAN_HOME=str(tmp_path / "home")))
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [line for line in done.stdout.splitlines() if not line.startswith("dashboard: ")]
    assert printed == ["(1, 1)", "(2, 2)", "(3, 3)", "a"], done.stdout


def test_the_java_bridge_keeps_its_warnings_but_not_the_trace_of_an_error_keyspan_reports(caplog):
    """A failed epoch raises through py4j, which logs the whole trace; keyspan reports the failure itself
    (a few lines, the trace in its log file), so that trace must not reach the user's log handlers."""
    import logging

    from keyspan.common import logs

    logs.quiet_java_bridge()
    bridge = logging.getLogger("py4j.clientserver")
    with caplog.at_level(logging.INFO):
        bridge.info("Received command c on object id p0")
        bridge.error("There was an exception while executing the Python Proxy on the Python Side.")
        bridge.error("Could not authenticate connection.")
    assert [r.getMessage() for r in caplog.records if r.name.startswith("py4j")] == [
        "Could not authenticate connection."]


def test_execution_config_is_the_environment_s_and_keeps_flink_s_jvm_settings():
    env = StreamExecutionEnvironment.get_execution_environment()
    config = env.get_config()
    assert config.set_parallelism(3) is config and env.get_parallelism() == 3
    env.set_max_parallelism(64)
    assert config.get_max_parallelism() == 64
    with pytest.raises(ValueError, match="max parallelism"):
        config.set_max_parallelism(0)
    assert not config.is_object_reuse_enabled() and config.enable_object_reuse().is_object_reuse_enabled()
    assert config.disable_closure_cleaner().is_closure_cleaner_enabled() is False
    assert config.disable_generic_types().has_generic_types_disabled()
    assert config.enable_force_kryo().is_force_kryo_enabled() and config.enable_force_avro().is_force_avro_enabled()
    assert config.set_latency_tracking_interval(500).get_latency_tracking_interval() == 500
    assert config.set_task_cancellation_timeout(0).get_task_cancellation_timeout() == 0
    assert not config.is_use_snapshot_compression() and config.set_use_snapshot_compression(True).is_use_snapshot_compression()
    assert config.get_registered_kryo_types() == [] and config.get_default_kryo_serializer_classes() == {}
    configured = StreamExecutionEnvironment.get_execution_environment(Configuration.from_dict(
        {"pipeline.auto-generate-uids": "false", "pipeline.object-reuse": "true",
         "pipeline.auto-watermark-interval": "1 s", "parallelism.default": "4"}))
    assert not configured.get_config().has_auto_generated_uids_enabled()
    assert configured.get_config().is_object_reuse_enabled()
    assert configured.get_config().get_auto_watermark_interval() == 1000
    assert configured.get_config().get_parallelism() == 4
    with pytest.raises(ValueError, match="pipeline.object-reuse"):
        StreamExecutionEnvironment.get_execution_environment(Configuration.from_dict({"pipeline.object-reuse": "yes"}))


def test_disabled_auto_generated_uids_refuse_an_operator_without_one(workdir):
    """As in Flink: with auto-generated uids disabled, a job with an operator that has no uid does not
    start (its message names the operator) and stays in the environment; with every uid given it runs,
    the collect sink that execute_and_collect adds needing none."""
    refused = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    refused.get_config().disable_auto_generated_uids()
    refused.from_collection([1, 2, 3]).uid("numbers").map(lambda v: v + 1).name("plus one").print().uid("printed")
    with pytest.raises(ValueError, match="no UID or hash has been assigned to operator plus one"):
        refused.execute("refused")
    assert len(refused.get_transformations()) == 3  # kept, to be given its uid
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.get_config().disable_auto_generated_uids()
    doubled = env.from_collection([1, 2, 3]).uid("numbers").map(lambda v: v * 2).uid("double")
    with doubled.execute_and_collect("all uids") as results:
        assert sorted(results) == [2, 4, 6]


def test_smaller_pyflink_names_behave_as_pyflink_s():
    from keyspan.common import Duration, JobExecutionResult, Types, WatermarkStrategy
    from keyspan.common.typeinfo import RowTypeInfo
    from keyspan.datastream import PredefinedOptions
    from keyspan.datastream.data_stream import CloseableIterator
    from keyspan.datastream.state import AggregatingStateDescriptor, ReducingStateDescriptor

    assert Duration.of_nanos(2_999_999).to_milliseconds() == 2
    from keyspan.common import Time
    from keyspan.common.typeinfo import MapTypeInfo
    assert Time(milliseconds=5) == Time.milliseconds(5)  # PyFlink's parameter names, as keywords too
    assert MapTypeInfo(key_type_info=Types.STRING(), value_type_info=Types.INT()) == Types.MAP(Types.STRING(), Types.INT())
    add = lambda a, b: a + b  # noqa: E731
    assert ReducingStateDescriptor("total", add).get_reduce_function() is add
    assert AggregatingStateDescriptor("avg", add).get_agg_function() is add
    row = RowTypeInfo([Types.INT(), Types.STRING()], ["id", "name"])
    assert row.get_field_index("name") == 1
    with pytest.raises(ValueError):
        row.get_field_index("missing")
    it = CloseableIterator([7])
    assert it.next() == 7
    with pytest.raises(StopIteration):
        it.next()
    result = JobExecutionResult("job", "name", 1, 1, 1, None)
    assert result.get_accumulator_result("x") is None and result.get_all_accumulator_results() == {}
    conf = Configuration().set_float("ratio", 0.25).set_bytearray("secret", bytearray(b"\x00\xff"))
    assert conf.get_float("ratio", 0.0) == 0.25 and conf.get_bytearray("secret", None) == bytearray(b"\x00\xff")
    assert conf.key_set() == {"ratio", "secret"} and conf.remove_config("ratio") and not conf.remove_config("ratio")
    merged = Configuration().add_all(conf, "prefix.")
    assert merged.key_set() == {"prefix.secret"}
    target = {}
    merged.add_all_to_dict(target)
    assert target == merged.to_dict()
    assert Configuration.parse_list_value("[a, 'b']") == ["a", "b"] and Configuration.parse_list_value("a;b") == ["a", "b"]
    backend = EmbeddedRocksDBStateBackend()
    assert backend.get_predefined_options() == PredefinedOptions.DEFAULT and backend.get_options() is None
    backend.set_predefined_options(PredefinedOptions.FLASH_SSD_OPTIMIZED)
    assert backend.get_predefined_options() == PredefinedOptions.FLASH_SSD_OPTIMIZED
    with pytest.raises(NotImplementedError, match="get_memory_configuration"):
        backend.set_options("org.example.MyOptionsFactory")
    with pytest.raises(NotImplementedError, match="watermark alignment.*set_max_records_per_epoch"):
        WatermarkStrategy.for_monotonous_timestamps().with_watermark_alignment("group", Duration.of_seconds(1))
    with pytest.raises(NotImplementedError, match="register_cached_file.*add_python_file"):
        StreamExecutionEnvironment.get_execution_environment().register_cached_file("/tmp/x", "x")


def test_with_timestamp_assigner_sets_the_assigner_on_the_strategy_as_pyflink_does():
    """PyFlink's ``with_timestamp_assigner`` changes the strategy and returns it, so a job may call it
    without using the result; a stream built before keeps the assigner it was built with."""
    from keyspan.common import Duration
    from keyspan.connectors.driver_sinks import CollectSink
    from keyspan.datastream.functions import ProcessFunction

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0))
    assert strategy.with_timestamp_assigner(lambda r, _: r[1]) is strategy
    by_second = env.from_collection([("a", 5), ("b", 20)]).assign_timestamps_and_watermarks(strategy)
    strategy.with_timestamp_assigner(lambda r, _: 100 - r[1])  # changes the strategy, not the stream built above
    by_reversed = env.from_collection([("c", 5), ("d", 20)]).assign_timestamps_and_watermarks(strategy)

    class Stamp(ProcessFunction):
        def process_element(self, value, ctx):
            yield value[0], ctx.timestamp()

    sink = CollectSink()
    by_second.union(by_reversed).process(Stamp()).sink_to(sink)
    env.execute("assigners")
    assert sorted(sink.results()) == [("a", 5), ("b", 20), ("c", 95), ("d", 80)]


def test_one_source_object_feeds_two_streams_each_with_its_own_strategy():
    """``from_source`` twice on one source object, each time with another timestamp assigner: each
    stream gets its own timestamps (the second call once replaced the first stream's strategy)."""
    from keyspan.common import Duration
    from keyspan.connectors.driver_sinks import CollectSink
    from keyspan.datastream.connectors.number_seq import NumberSequenceSource
    from keyspan.datastream.functions import ProcessFunction

    class Stamp(ProcessFunction):
        def __init__(self, tag):
            self.tag = tag

        def process_element(self, value, ctx):
            yield self.tag, value, ctx.timestamp()

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    source = NumberSequenceSource(1, 3)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0))
    tens = env.from_source(source, strategy.with_timestamp_assigner(lambda v, _: v * 10), "tens")
    thousands = env.from_source(source, strategy.with_timestamp_assigner(lambda v, _: v * 1000), "thousands")
    sink = CollectSink()
    tens.process(Stamp("tens")).union(thousands.process(Stamp("thousands"))).sink_to(sink)
    env.execute("one source, two strategies")
    assert sorted(sink.results()) == [("tens", 1, 10), ("tens", 2, 20), ("tens", 3, 30),
                                      ("thousands", 1, 1000), ("thousands", 2, 2000), ("thousands", 3, 3000)]


def test_one_function_object_in_two_operators_keeps_two_sets_of_attributes():
    """PyFlink serializes each operator's function on its own: a ``MapFunction`` object given to two
    chained operators counts each operator's records separately (keyspan once counted both together)."""
    from keyspan.connectors.driver_sinks import CollectSink

    class Counter(MapFunction):
        def open(self, runtime_context):
            self.n = 100

        def map(self, value):
            self.n += 1
            return value, self.n

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    counter, first, second = Counter(), CollectSink(), CollectSink()
    words = env.from_collection(["a", "b", "c"])
    words.map(counter).sink_to(first)
    words.map(counter).sink_to(second)
    env.execute("one function, two operators")
    assert first.results() == second.results() == [("a", 101), ("b", 102), ("c", 103)]


def test_pyflink_s_enums_are_enums_with_its_members():
    """``CheckpointingMode`` and ``PredefinedOptions`` are ``Enum``s with PyFlink's members and values
    (``.name``, iteration and ``CheckpointingMode(0)`` work as on PyFlink); the configuration key
    reads a mode's name; anything else is refused with the members to use."""
    from enum import Enum

    from keyspan.datastream import CheckpointingMode, PredefinedOptions

    assert issubclass(CheckpointingMode, Enum) and issubclass(PredefinedOptions, Enum)
    assert {m.name: m.value for m in CheckpointingMode} == {"EXACTLY_ONCE": 0, "AT_LEAST_ONCE": 1}
    assert {m.name: m.value for m in PredefinedOptions} == {
        "DEFAULT": 0, "SPINNING_DISK_OPTIMIZED": 1, "SPINNING_DISK_OPTIMIZED_HIGH_MEM": 2, "FLASH_SSD_OPTIMIZED": 3}
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.get_checkpoint_config().get_checkpointing_mode() is CheckpointingMode.EXACTLY_ONCE
    env.enable_checkpointing(1000, CheckpointingMode.AT_LEAST_ONCE)
    assert env.get_checkpointing_mode() is CheckpointingMode.AT_LEAST_ONCE
    env.configure(Configuration().set_string("execution.checkpointing.mode", "exactly_once"))
    assert env.get_checkpointing_mode() is CheckpointingMode(0)
    with pytest.raises(TypeError, match="CheckpointingMode.EXACTLY_ONCE"):
        env.get_checkpoint_config().set_checkpointing_mode("twice")
    with pytest.raises(TypeError, match="PredefinedOptions.DEFAULT"):
        EmbeddedRocksDBStateBackend().set_predefined_options("FLASH_SSD_OPTIMIZED")


def test_configure_reads_supported_keys(tmp_path):
    config = Configuration()
    config.set_string("parallelism.default", "3")
    config.set_string("pipeline.max-parallelism", "64")
    config.set_string("execution.checkpointing.interval", "10 s")
    config.set_string("execution.checkpointing.min-pause", "500 ms")
    config.set_string("state.backend.type", "rocksdb")
    config.set_string("state.checkpoints.dir", f"file://{tmp_path}/cp")
    config.set_string("execution.runtime-mode", "batch")
    config.set_string("pipeline.jars", "file:///a.jar;file:///b.jar")
    config.set_string("some.other.key", "ignored")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    assert env.get_parallelism() == 3 and env.get_max_parallelism() == 64
    cp = env.get_checkpoint_config()
    assert cp.get_checkpoint_interval() == 10_000 and cp.get_min_pause_between_checkpoints() == 500
    assert isinstance(env.get_state_backend(), EmbeddedRocksDBStateBackend)
    assert cp.get_checkpoint_storage_dir() == f"file://{tmp_path}/cp"
    assert env.get_runtime_mode() == RuntimeExecutionMode.BATCH
    assert env.get_python_dependencies().jars == ["file:///a.jar", "file:///b.jar"]
    bad = Configuration().set_string("execution.checkpointing.interval", "soon")
    with pytest.raises(ValueError, match="execution.checkpointing.interval"):
        env.configure(bad)
    env.set_state_backend(FsStateBackend(f"file://{tmp_path}/legacy"))
    assert cp.get_checkpoint_storage_dir() == f"file://{tmp_path}/legacy"


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.n = runtime_context.get_state(ValueStateDescriptor("n"))

    def process_element(self, value, ctx):
        self.n.update((self.n.value() or 0) + 1)
        yield ctx.get_current_key(), self.n.value()


def _rate_job(spark, env):
    env.enable_checkpointing(200)
    rows = spark.readStream.format("rate").option("rowsPerSecond", 50).load()
    return env.from_spark(rows, "rate").key_by(lambda r: r.value % 4).process(Count()).uid("count")


def test_execute_async_job_client_savepoints_and_stop(workdir, spark):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    _rate_job(spark, env).print()
    client = env.execute_async("async-job")
    assert str(client.get_job_id()) == client.get_job_id().to_hex_string()
    savepoint = client.trigger_savepoint().result(timeout=180)
    assert Path(savepoint.removeprefix("file://"), "_metadata.json").exists()
    assert client.get_job_status().result() == JobStatus.RUNNING
    stopped_at = client.stop_with_savepoint(False).result(timeout=180)
    assert Path(stopped_at.removeprefix("file://"), "_metadata.json").exists() and stopped_at != savepoint
    client.get_job_execution_result().result(timeout=60)
    assert client.get_job_status().result() == JobStatus.FINISHED
    assert client.get_accumulators().result() == {}  # PyFlink's Python functions have no accumulators


def test_execute_and_collect_with_limit_returns_on_an_unbounded_job(workdir, spark):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    started = time.time()
    first = _rate_job(spark, env).execute_and_collect("collect-some", limit=7)
    assert len(first) == 7 and all(isinstance(k, int) and n >= 1 for k, n in first)
    assert time.time() - started < 120


def test_add_python_file_ships_a_module_to_the_workers(env, tmp_path):
    module = tmp_path / "deps" / "ks_shipped_helper.py"
    module.parent.mkdir()
    module.write_text("OFFSET = 1000\n")
    env.add_python_file(str(module))
    # the driver cannot import the module (not on its path): only the workers can, through Spark
    with pytest.raises(ImportError):
        __import__("ks_shipped_helper")
    out = env.from_collection([1, 2, 3]).map(lambda v: __import__("ks_shipped_helper").OFFSET + v).execute_and_collect()
    assert sorted(out) == [1001, 1002, 1003]


def test_execution_plan_is_flink_shaped_json():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    a = env.from_collection([1]).rebalance().map(lambda v: v).uid("m")
    a.key_by(lambda v: v).process(Count()).print()
    plan = json.loads(env.get_execution_plan())
    nodes = {n["contents"]: n for n in plan["nodes"]}
    assert nodes["Collection Source"]["pact"] == "Data Source"
    assert nodes["Map"]["predecessors"][0]["ship_strategy"] == "REBALANCE" and nodes["Map"]["uid"] == "m"
    assert nodes["KeyedProcess"]["predecessors"][0]["ship_strategy"] == "HASH"


def test_checkpoint_storage_and_slot_sharing_group_read_back_what_they_were_given():
    from keyspan.datastream import (
        CheckpointConfig, FileSystemCheckpointStorage, JobManagerCheckpointStorage, MemorySize, SlotSharingGroup,
    )

    memory = JobManagerCheckpointStorage()
    assert memory.get_max_state_size() == 5 * 1024 * 1024 and memory.get_savepoint_path() is None
    files = FileSystemCheckpointStorage("file:///tmp/ks-checkpoints", 1024)
    assert (files.get_min_file_size_threshold(), files.get_write_buffer_size()) == (1024, 4096)
    assert FileSystemCheckpointStorage("file:///tmp/x").get_min_file_size_threshold() == 20 * 1024
    limit = FileSystemCheckpointStorage.MAX_FILE_STATE_THRESHOLD
    assert FileSystemCheckpointStorage("file:///tmp/x", limit).get_min_file_size_threshold() == limit == 1 << 20
    with pytest.raises(ValueError, match="maximal file state size threshold is 1048576"):
        FileSystemCheckpointStorage("file:///tmp/x", limit + 1)
    config = CheckpointConfig()
    assert config.set_checkpoint_storage(files).get_checkpoint_storage() is files
    assert config.get_checkpoint_storage_dir() == "file:///tmp/ks-checkpoints"
    group = (SlotSharingGroup.builder("heavy").set_cpu_cores(1.5).set_task_heap_memory_mb(512)
             .set_managed_memory(MemorySize(3 << 30)).set_external_resource("gpu", 1.0).build())
    assert (group.get_name(), group.get_cpu_cores(), group.get_external_resources()) == ("heavy", 1.5, {"gpu": 1.0})
    assert group.get_task_heap_memory().get_kibi_bytes() == 512 * 1024 and group.get_managed_memory().get_gibi_bytes() == 3
    assert group.get_task_off_heap_memory() is None and MemorySize(5 << 40).get_tebi_bytes() == 5


def test_pyflink_common_names_import_from_keyspan_common():
    """``pyflink.common``'s names that keyspan has are importable from ``keyspan.common`` too, not only
    from their own modules."""
    import keyspan.common as common
    from keyspan.common.completable_future import CompletableFuture
    from keyspan.common.job_id import JobID
    from keyspan.common.serialization import DeserializationSchema, SerializationSchema
    from keyspan.common.time import Instant
    from keyspan.common.typeinfo import TypeInformation
    from keyspan.common.types import RowKind

    assert (common.SerializationSchema, common.DeserializationSchema, common.Instant, common.TypeInformation,
            common.RowKind, common.JobID, common.CompletableFuture) == (
        SerializationSchema, DeserializationSchema, Instant, TypeInformation, RowKind, JobID, CompletableFuture)
    assert [k.name for k in RowKind] == ["INSERT", "UPDATE_BEFORE", "UPDATE_AFTER", "DELETE"]
    assert (common.Types.SQL_TIME().name, common.Types.INSTANT().name) == ("SQL_TIME", "INSTANT")
    assert set(common.__all__) <= set(dir(common))
    # PyFlink's older home of the row formats, still importable there
    from keyspan.datastream.formats import avro, csv, json

    formats = {name: getattr(module, name) for module in (avro, csv, json) for name in dir(module)
               if name.endswith(("RowSerializationSchema", "RowDeserializationSchema"))}
    assert len(formats) == 6 and all(getattr(common, name) is cls for name, cls in formats.items())


def test_the_functions_module_has_the_state_names_pyflink_s_has():
    """PyFlink's ``pyflink.datastream.functions`` imports the state classes, and jobs import them from there."""
    from keyspan.datastream import functions, state

    for name in ("ValueState", "ValueStateDescriptor", "ListState", "ListStateDescriptor", "MapState",
                 "MapStateDescriptor", "ReducingState", "ReducingStateDescriptor", "AggregatingState",
                 "AggregatingStateDescriptor", "BroadcastState", "ReadOnlyBroadcastState"):
        assert getattr(functions, name) is getattr(state, name)


def test_unsupported_pyflink_names_say_what_to_use_instead():
    with pytest.raises(ImportError, match="not supported by keyspan: the Table API.*env.from_spark"):
        from keyspan.table import StreamTableEnvironment  # noqa: F401
    with pytest.raises(ImportError, match="SourceFunction.*from_source"):
        from keyspan.datastream import SourceFunction  # noqa: F401
    with pytest.raises(ImportError, match="keyspan.common.ExecutionMode.*set_runtime_mode"):
        from keyspan.common import ExecutionMode  # noqa: F401
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(NotImplementedError, match="not supported by keyspan: add_source"):
        env.add_source(object())


def test_the_connectors_package_has_pyflink_s_names_and_names_the_connectors_keyspan_lacks():
    import importlib

    from keyspan.datastream import connectors
    from keyspan.datastream.connectors.kafka import FlinkKafkaConsumer, KafkaSink, KafkaSource

    assert (connectors.KafkaSource, connectors.FlinkKafkaConsumer) == (KafkaSource, FlinkKafkaConsumer)
    assert all(issubclass(c, connectors.Sink) for c in (connectors.FileSink, connectors.StreamingFileSink, KafkaSink,
                                                        connectors.JdbcSink))
    assert issubclass(KafkaSource, connectors.Source)
    assert set(connectors.__all__) <= set(dir(connectors))
    with pytest.raises(ImportError, match="not supported by keyspan: keyspan.datastream.connectors.RMQSink; write with "
                                          "add_sink"):
        from keyspan.datastream.connectors import RMQSink  # noqa: F401
    for module, instead in [("kinesis", "env.from_spark"), ("pulsar", "env.from_spark"),
                            ("rabbitmq", "add_sink"), ("elasticsearch", "add_sink"), ("cassandra", "add_sink"),
                            ("dynamic_kafka", "set_topic_pattern"), ("hybrid_source", "union")]:
        with pytest.raises(ImportError, match=rf"not supported by keyspan: keyspan.datastream.connectors.{module};.*{instead}"):
            importlib.import_module(f"keyspan.datastream.connectors.{module}")


def test_type_information_classes_are_those_types_builds():
    from keyspan.common import Types
    from keyspan.common.typeinfo import (
        BasicArrayTypeInfo, BasicTypeInfo, InstantTypeInfo, ListTypeInfo, ObjectArrayTypeInfo, PickledBytesTypeInfo,
        DateTypeInfo, LocalTimeTypeInfo, PrimitiveArrayTypeInfo, SqlTimeTypeInfo, TimestampTypeInfo, TimeTypeInfo,
    )

    assert BasicTypeInfo.STRING_TYPE_INFO() == Types.STRING() and isinstance(Types.LONG(), BasicTypeInfo)
    assert isinstance(Types.INSTANT(), InstantTypeInfo) and BasicTypeInfo.INSTANT_TYPE_INFO() == Types.INSTANT()
    assert (SqlTimeTypeInfo.DATE(), SqlTimeTypeInfo.TIME(), SqlTimeTypeInfo.TIMESTAMP()) == (
        Types.SQL_DATE(), Types.SQL_TIME(), Types.SQL_TIMESTAMP())
    assert [type(t) for t in (Types.SQL_DATE(), Types.SQL_TIME(), Types.SQL_TIMESTAMP())] == [
        DateTypeInfo, TimeTypeInfo, TimestampTypeInfo]
    local = LocalTimeTypeInfo(LocalTimeTypeInfo.TimeType.LOCAL_DATE_TIME)
    assert local == LocalTimeTypeInfo(LocalTimeTypeInfo.TimeType.LOCAL_DATE_TIME) != Types.SQL_TIMESTAMP()
    assert local.arrow_type == Types.SQL_TIMESTAMP().arrow_type  # a datetime without a time zone, as a column
    assert PickledBytesTypeInfo.PICKLED_BYTE_ARRAY_TYPE_INFO() == Types.PICKLED_BYTE_ARRAY()
    for cls, build in [(PrimitiveArrayTypeInfo, Types.PRIMITIVE_ARRAY), (BasicArrayTypeInfo, Types.BASIC_ARRAY),
                       (ObjectArrayTypeInfo, Types.OBJECT_ARRAY)]:
        array = build(Types.INT())
        assert type(array) is cls and isinstance(array, ListTypeInfo) and array.element_type == Types.INT()


def test_types_print_and_compare_as_pyflink_s_while_savepoints_keep_keyspan_s_names():
    """The reprs are PyFlink 2.3's (read from its ``typeinfo.py``); a savepoint keeps recording ``LONG``."""
    from keyspan.datastream.state import ListStateDescriptor

    printed = [(Types.STRING(), "String"), (Types.INT(), "Integer"), (Types.LONG(), "Long"),
               (Types.BIG_INT(), "BigInteger"), (Types.BIG_DEC(), "BigDecimal"), (Types.INSTANT(), "Instant"),
               (Types.SQL_DATE(), "DateTypeInfo"), (Types.SQL_TIMESTAMP(), "TimestampTypeInfo"),
               (Types.PICKLED_BYTE_ARRAY(), "PickledByteArrayTypeInfo"),
               (Types.ROW([Types.INT(), Types.STRING()]), "RowTypeInfo(Integer, String)"),
               (Types.ROW_NAMED(["a", "b"], [Types.INT(), Types.STRING()]), "RowTypeInfo(a: Integer, b: String)"),
               (Types.TUPLE([Types.INT(), Types.STRING()]), "TupleTypeInfo(Integer, String)"),
               (Types.PRIMITIVE_ARRAY(Types.INT()), "PrimitiveArrayTypeInfo<Integer>"),
               (Types.OBJECT_ARRAY(Types.STRING()), "ObjectArrayTypeInfo<String>"),
               (Types.LIST(Types.LONG()), "ListTypeInfo<Long>"),
               (Types.MAP(Types.STRING(), Types.INT()), "MapTypeInfo<String, Integer>")]
    assert [(repr(t), str(t)) for t, _ in printed] == [(text, text) for _, text in printed]
    assert Types.ROW_NAMED(["a", "b"], [Types.INT(), Types.STRING()]) == Types.ROW([Types.INT(), Types.STRING()])
    assert Types.ROW([Types.INT()]) != Types.ROW([Types.LONG()])
    assert Types.PRIMITIVE_ARRAY(Types.INT()) != Types.LIST(Types.INT()) != Types.BASIC_ARRAY(Types.INT())
    assert ListStateDescriptor("seen", Types.LONG()).describe()["type"] == "LONG"
    assert ValueStateDescriptor("last", Types.ROW_NAMED(["a"], [Types.INT()])).describe()["type"] == "ROW<a: INT>"

def test_methods_take_pyflink_s_keyword_argument_names():
    """A PyFlink job may pass arguments by name: keyspan's methods take PyFlink's parameter names."""
    from keyspan.common import Time, Types
    from keyspan.common.serialization import Encoder
    from keyspan.datastream import CheckpointConfig, EmbeddedRocksDBStateBackend, SlotSharingGroup
    from keyspan.datastream.connectors import RollingPolicy, StreamingFileSink

    assert Types.MAP(key_type_info=Types.STRING(), value_type_info=Types.LONG()) == Types.MAP(Types.STRING(), Types.LONG())
    assert Types.LIST(element_type_info=Types.INT()) == Types.LIST(Types.INT())
    assert Time.milliseconds(milliseconds=250).to_milliseconds() == 250
    config = CheckpointConfig().set_tolerable_checkpoint_failure_number(tolerable_checkpoint_failure_number=3)
    assert config.get_tolerable_checkpoint_failure_number() == 3
    group = SlotSharingGroup.builder("g").set_task_heap_memory_mb(task_heap_memory_mb=64) \
        .set_task_off_heap_memory_mb(task_off_heap_memory_mb=32).set_cpu_cores(1.0).build()
    assert group.get_task_heap_memory().get_mebi_bytes() == 64
    backend = EmbeddedRocksDBStateBackend()
    backend.set_number_of_transfer_threads(number_of_transfering_threads=4)
    assert backend.get_number_of_transfer_threads() == 4
    sink = StreamingFileSink.for_row_format("/tmp/unused", Encoder.simple_string_encoder()) \
        .with_rolling_policy(policy=RollingPolicy.on_checkpoint_rolling_policy()).build()
    assert type(sink.rolling_policy).__name__ == "OnCheckpointRollingPolicy"


def test_max_concurrent_checkpoints_is_a_limit_keyspan_s_one_at_a_time_meets():
    """Flink's ``set_max_concurrent_checkpoints(n)`` caps concurrent checkpoints; keyspan takes them one at
    a time, within any cap of at least one, so a PyFlink job setting 2 runs unchanged."""
    from keyspan.datastream import CheckpointConfig

    config = CheckpointConfig()
    assert config.get_max_concurrent_checkpoints() == 1
    assert config.set_max_concurrent_checkpoints(2) is config
    assert config.get_max_concurrent_checkpoints() == 2
    with pytest.raises(ValueError, match=">= 1"):
        config.set_max_concurrent_checkpoints(0)
    from keyspan.common import Configuration
    from keyspan.datastream import StreamExecutionEnvironment

    configured = Configuration()
    configured.set_string("execution.checkpointing.max-concurrent-checkpoints", "3")
    env = StreamExecutionEnvironment.get_execution_environment(configured)
    assert env.get_checkpoint_config().get_max_concurrent_checkpoints() == 3


JOB_FILE_CLASSES = '''
from collections import namedtuple
from dataclasses import dataclass

from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.state import ValueStateDescriptor


@dataclass
class Event:
    key: str
    n: int


@dataclass
class Tally:
    count: int = 0
    total: int = 0


Pair = namedtuple("Pair", "key total")


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.tally = runtime_context.get_state(ValueStateDescriptor("tally"))

    def process_element(self, event, ctx):
        tally = self.tally.value() or Tally()
        tally.count += 1
        tally.total += event.n
        self.tally.update(tally)
        yield Pair(event.key, tally.total)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
events = env.from_collection([Event(*t) for t in EVENTS]).uid("events")
events.key_by(lambda e: e.key).process(Count()).uid("count").rebalance().map(repr).print()
env.execute("job-classes")
'''


def test_classes_of_the_job_file_travel_as_records_and_in_state(tmp_path):
    """Checked side by side on PyFlink 2.3, which pickles records and state with cloudpickle: objects of
    classes the job file defines cross exchanges and live in state. A restore whose job no longer
    defines a class its state holds names the class and what to do, and loses nothing."""
    def run(events: list, *flags: str, rename: bool = False) -> subprocess.CompletedProcess:
        source = JOB_FILE_CLASSES.replace("EVENTS", repr(events))
        if rename:
            source = source.replace("class Tally:", "class Totals:").replace("Tally()", "Totals()")
        job = tmp_path / "job.py"
        job.write_text(source)
        return subprocess.run([sys.executable, "-m", "keyspan", "run", str(job), "--workdir", str(tmp_path / "w"),
                               "--no-progress", *flags], capture_output=True, text=True, timeout=300, cwd=tmp_path)

    def printed(done) -> list[str]:
        return sorted(line.split("> ", 1)[-1] for line in done.stdout.splitlines() if "Pair(" in line)

    first = run([("a", 1), ("b", 2), ("a", 3)], "--fresh")
    assert first.returncode == 0, first.stderr[-3000:]
    assert printed(first) == ["Pair(key='a', total=1)", "Pair(key='a', total=4)", "Pair(key='b', total=2)"]
    checkpoint = sorted((tmp_path / "w" / "checkpoints" / "job-classes").glob("chk-*"))[-1].as_uri()

    renamed = run([("a", 1), ("b", 2), ("a", 3), ("a", 10)], "-s", checkpoint, rename=True)
    assert renamed.returncode == 1
    assert ("holds objects of class Tally of the job file, which is not defined here: define it again"
            in renamed.stderr), renamed.stderr[-3000:]
    assert "Traceback" not in renamed.stderr

    # restoring moved the job's earlier checkpoints aside, the first run's among them
    (kept,) = (tmp_path / "w" / "checkpoints").glob("job-classes.before-*/chk-*")
    again = run([("a", 1), ("b", 2), ("a", 3), ("a", 10)], "-s", kept.as_uri())
    assert again.returncode == 0, again.stderr[-3000:]
    assert printed(again) == ["Pair(key='a', total=14)"]

    # a program that defines the class reads the state with the State Processor API (in Spark tasks)
    store, checkpoints = f"sqlite:///{tmp_path / 'w' / 'keyspan.db'}", (tmp_path / "w" / "checkpoints").as_uri()
    reader = tmp_path / "read.py"
    reader.write_text(textwrap.dedent(f"""
        from dataclasses import dataclass
        from keyspan.runtime.session import get_or_create_spark
        from keyspan.state_processor import SavepointReader, decode

        @dataclass
        class Tally:
            count: int = 0
            total: int = 0

        reader = SavepointReader.read_checkpoint(get_or_create_spark(2, None), {store!r}, {checkpoints!r},
                                                 "job-classes")
        print(sorted((r["key"], decode(r["value"])) for r in reader.read_keyed_state("count", state="tally").collect()))
    """))
    read = subprocess.run([sys.executable, str(reader)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert read.returncode == 0, read.stderr[-3000:]
    assert read.stdout.strip().splitlines()[-1] == "[('a', Tally(count=3, total=14)), ('b', Tally(count=1, total=2))]"
