"""RuntimeExecutionMode: BATCH runs a bounded job as one epoch with the same results as STREAMING
(event-time timers fire at the end of input); AUTOMATIC picks BATCH for bounded jobs; BATCH refuses
an unbounded source; a keyed reduction emits only each key's final result in BATCH; at the end of
input, BATCH fires every processing-time timer and STREAMING those already due. Expected outputs
follow Flink's documented semantics: per-key running sums, and each key's event-time timer at its
last timestamp + 1000 firing once the input ends; the processing-time cases were checked on PyFlink
2.3."""

from __future__ import annotations

import time

import pytest

from keyspan.common import Duration, Time, WatermarkStrategy
from keyspan.common.watermark_strategy import TimestampAssigner
from keyspan.datastream import KeyedProcessFunction, MapFunction, SinkFunction, StreamExecutionEnvironment
from keyspan.datastream.execution_mode import RuntimeExecutionMode
from keyspan.datastream.state import ListStateDescriptor, ValueStateDescriptor
from keyspan.datastream.window import TumblingProcessingTimeWindows
from keyspan.runtime.executor import JobExecutionError

RECORDS = [(f"k{i % 7}", i % 5, 1000 + i * 10) for i in range(300)]


class Ts(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[2]


class SessionEnd(KeyedProcessFunction):
    """Per key: a running sum, and a timer 1 s after the key's latest record reporting its total."""

    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))
        self.last = runtime_context.get_state(ValueStateDescriptor("last"))

    def process_element(self, value, ctx):
        self.total.update((self.total.value() or 0) + value[1])
        if self.last.value() is not None:
            ctx.timer_service().delete_event_time_timer(self.last.value() + 1000)
        self.last.update(value[2])
        ctx.timer_service().register_event_time_timer(value[2] + 1000)
        yield "sum", ctx.get_current_key(), self.total.value()

    def on_timer(self, timestamp, ctx):
        yield "end", ctx.get_current_key(), self.total.value(), timestamp


def _run(mode: RuntimeExecutionMode | None, name: str):
    records = []
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_max_records_per_epoch(40)
    if mode is not None:
        env.set_runtime_mode(mode)
    (env.from_collection(RECORDS)
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Ts()))
        .key_by(lambda r: r[0]).process(SessionEnd()).uid("session-end").add_sink(Collect(records)))
    result = env.execute(name)
    return sorted(records), result


class Collect(SinkFunction):
    """A sink function runs on the driver: records land in the test's list."""

    def __init__(self, into: list):
        self.into = into

    def invoke(self, value, context):
        self.into.append(value)


def _expected():
    totals, last, out = {}, {}, []
    for key, value, ts in RECORDS:
        totals[key] = totals.get(key, 0) + value
        last[key] = ts
        out.append(("sum", key, totals[key]))
    out += [("end", key, totals[key], last[key] + 1000) for key in totals]
    return sorted(out)


def test_batch_gives_streaming_results_in_one_epoch(workdir):
    streaming, s_result = _run(RuntimeExecutionMode.STREAMING, "streaming")
    batch, b_result = _run(RuntimeExecutionMode.BATCH, "batch")
    assert streaming == batch == _expected()
    assert s_result.epochs >= 8  # 300 records, 40 per epoch
    assert b_result.epochs == 1  # the whole bounded input at once; timers fire at its end


def test_automatic_is_batch_for_bounded_sources(workdir):
    auto, result = _run(RuntimeExecutionMode.AUTOMATIC, "automatic")
    assert auto == _expected() and result.epochs == 1


def _rolling(mode: RuntimeExecutionMode, name: str, vectorize: bool):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_max_records_per_epoch(40)
    env.set_runtime_mode(mode)
    env.set_vectorized_aggregation(vectorize)
    keyed = env.from_collection(RECORDS).key_by(lambda r: r[0])
    out = {}
    for kind, stream in [("sum", keyed.sum(1)), ("max_by", keyed.max_by(2)),
                         ("reduce", keyed.reduce(lambda a, b: (a[0], a[1] * 2 + b[1], b[2])))]:
        stream.add_sink(Collect(out.setdefault(kind, [])))
    env.execute(name)
    return {kind: sorted(records) for kind, records in out.items()}


@pytest.mark.parametrize("vectorize", [True, False])
def test_a_keyed_reduction_emits_each_key_s_final_result_in_batch_mode(workdir, vectorize):
    """Flink's BATCH mode runs ``KeyedStream.reduce``/``sum``/``max_by``... without rolling updates:
    one record per key, its final result, once the input ends. STREAMING emits one per record, the
    last of which per key is the same record."""
    streaming = _rolling(RuntimeExecutionMode.STREAMING, f"rolling-streaming-{vectorize}", vectorize)
    batch = _rolling(RuntimeExecutionMode.BATCH, f"rolling-batch-{vectorize}", vectorize)
    keys = {key for key, _, _ in RECORDS}
    for kind, records in streaming.items():
        assert len(records) == len(RECORDS) and len(batch[kind]) == len(keys), kind
    assert batch["sum"] == sorted((k, sum(v for key, v, _ in RECORDS if key == k), min(ts for key, _, ts in RECORDS if key == k))
                                  for k in keys)
    assert batch["max_by"] == sorted(max((r for r in RECORDS if r[0] == k), key=lambda r: r[2]) for k in keys)
    expected_reduce = {}
    for key, value, ts in RECORDS:
        acc = expected_reduce.get(key)
        expected_reduce[key] = (key, value, ts) if acc is None else (key, acc[1] * 2 + value, ts)
    assert batch["reduce"] == sorted(expected_reduce.values())


def test_batch_refuses_an_unbounded_source(workdir, spark, tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment().set_runtime_mode(RuntimeExecutionMode.BATCH)
    stream = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
    env.from_spark(stream, "rate").print()
    with pytest.raises(JobExecutionError, match="BATCH execution mode needs bounded sources.*rate"):
        env.execute("unbounded")


def test_set_runtime_mode_checks_its_argument():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(TypeError, match="RuntimeExecutionMode"):
        env.set_runtime_mode("BATCH")
    assert env.set_runtime_mode(RuntimeExecutionMode.BATCH) is env


HOUR = 3_600_000


class ProcessingTimers(KeyedProcessFunction):
    """Per record (one per key): processing-time timers 1 ms and 1 hour ahead. ``periodic``: a timer
    that fires registers the next one 1 ms after it."""

    def __init__(self, periodic: bool):
        self.periodic = periodic

    def process_element(self, value, ctx):
        now = ctx.timer_service().current_processing_time()
        ctx.timer_service().register_processing_time_timer(now + 1)
        ctx.timer_service().register_processing_time_timer(now + HOUR)
        return iter(())

    def on_timer(self, timestamp, ctx):
        if self.periodic:
            ctx.timer_service().register_processing_time_timer(timestamp + 1)
        yield ctx.get_current_key()


def test_streaming_fires_the_processing_time_timers_due_when_bounded_input_ends(workdir):
    """The last epoch's timers 1 ms ahead are due by the time the input ends, so they fire, as
    they do in a Flink job that is still running then; those an hour ahead are dropped."""
    keys = [f"k{i}" for i in range(20)]
    fired = []
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_max_records_per_epoch(5)
    env.from_collection(keys).key_by(lambda k: k).process(ProcessingTimers(periodic=False)).uid("timers") \
        .add_sink(Collect(fired))
    env.execute("due-processing-timers")
    assert sorted(fired) == sorted(keys)


def test_batch_fires_every_processing_time_timer_and_window_when_the_input_ends(workdir):
    """Flink's batch runtime ends processing time with the input: every processing-time timer fires,
    an hour ahead or not, and processing-time windows fire too. Timers registered while they fire are
    ignored, so a periodic timer cannot keep the job running."""
    keys = [f"k{i}" for i in range(20)]
    fired, sums = [], []
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    source = env.from_collection([(k, i) for i, k in enumerate(keys)])
    source.key_by(lambda r: r[0]).process(ProcessingTimers(periodic=True)).uid("timers").add_sink(Collect(fired))
    day = 86_400_000
    offset = (int(time.time() * 1000) + day // 2) % day  # the day-long window holding "now" ends in about 12 hours
    source.key_by(lambda r: len(r[0])).window(TumblingProcessingTimeWindows.of(Time.days(1), Time.milliseconds(offset))) \
        .reduce(lambda a, b: (a[0], a[1] + b[1])).uid("hourly").map(lambda r: (len(r[0]), r[1])).add_sink(Collect(sums))
    env.execute("batch-processing-timers")
    assert sorted(fired) == sorted(keys * 2)
    assert sorted(sums) == [(2, sum(range(10))), (3, sum(range(10, 20)))]


class Where(MapFunction):
    """Each record with the subtask that mapped it and how many subtasks its operator has."""

    def open(self, runtime_context):
        self.at = (runtime_context.get_index_of_this_subtask(), runtime_context.get_number_of_parallel_subtasks())

    def map(self, value):
        return value, self.at


def _subtasks(stream, job: str) -> set:
    """The (subtask, of how many) pairs that mapped the stream's records."""
    with stream.execute_and_collect(job) as records:
        return {at for _, at in records}


def test_batch_mode_sets_the_parallelism_flink_s_adaptive_batch_scheduler_sets(workdir, capfd):
    """Checked on PyFlink 2.3 with parallelism 2: in BATCH mode, operators that set no parallelism of
    their own run at 1 over a small collection, behind a keyed exchange too, and at the source's
    parallelism after a parallel source; print() then writes no subtask prefix."""
    from keyspan.common import Configuration
    from keyspan.datastream.connectors.number_seq import NumberSequenceSource

    def batch_env(**keys) -> StreamExecutionEnvironment:
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
        conf = Configuration()
        for key, value in keys.items():
            conf.set_string(f"execution.batch.adaptive.auto-parallelism.{key.replace('_', '-')}", value)
        return env.configure(conf)

    env = batch_env()
    numbers = env.from_collection(list(range(12)))
    assert _subtasks(numbers.map(Where()), "collection") == {(0, 1)}
    assert _subtasks(numbers.key_by(lambda v: v % 3).map(Where()), "keyed") == {(0, 1)}
    assert _subtasks(numbers.map(Where()).set_parallelism(2), "own parallelism") == {(0, 2), (1, 2)}
    sequence = env.from_source(NumberSequenceSource(1, 12), WatermarkStrategy.no_watermarks(), "sequence")
    assert _subtasks(sequence.map(Where()), "sequence") == {(0, 2), (1, 2)}
    assert _subtasks(sequence.key_by(lambda v: v % 3).map(Where()), "sequence keyed") == {(0, 1)}
    capfd.readouterr()
    numbers.map(lambda v: v * 10).print()
    env.execute("printed")
    assert sorted(capfd.readouterr().out.split()) == sorted(str(v * 10) for v in range(12))

    # more input than a task's share (here one byte): the keyed operator gets the job's parallelism
    env = batch_env(avg_data_volume_per_task="1 b")
    assert _subtasks(env.from_collection(list(range(12))).key_by(lambda v: v % 3).map(Where()), "volume") == \
        {(0, 2), (1, 2)}
    env = batch_env(enabled="false")  # Flink's switch: every operator at the job's parallelism
    assert _subtasks(env.from_collection(list(range(12))).map(Where()), "disabled") == {(0, 2), (1, 2)}
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)  # STREAMING: unchanged
    assert _subtasks(env.from_collection(list(range(12))).map(Where()), "streaming") == {(0, 2), (1, 2)}
    single = env.from_collection(list(range(12))).set_parallelism(1).map(Where()).set_parallelism(1)
    assert _subtasks(single, "a source of its own parallelism") == {(0, 1)}  # read by as many tasks


OUT_OF_ORDER = [(f"k{i % 3}", i, (i * 37) % 101 * 10) for i in range(90)]  # timestamps shuffled within each key


class SeenSoFar(KeyedProcessFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_list_state(ListStateDescriptor("seen"))

    def process_element(self, value, ctx):
        self.seen.add(value[1])
        yield ctx.get_current_key(), tuple(self.seen.get())


def _in_order_per_key(env, stream) -> dict:
    keyed = stream.key_by(lambda r: r[0])
    out = {}
    for kind, s in [("seen", keyed.process(SeenSoFar())), ("sum", keyed.sum(1)),
                    ("reduce", keyed.reduce(lambda a, b: (a[0], a[1] * 2 + b[1], b[2])))]:
        s.add_sink(Collect(out.setdefault(kind, [])))
    env.execute("in-timestamp-order")
    seen = {}
    for key, values in out["seen"]:
        seen[key] = max(seen.get(key, ()), values, key=len)
    return {"seen": seen, "sum": sorted(out["sum"]), "reduce": sorted(out["reduce"])}


@pytest.mark.parametrize("vectorize", [True, False])
def test_batch_mode_gives_each_key_its_records_in_timestamp_order(workdir, spark, vectorize):
    """Flink's BATCH runtime sorts a keyed operator's input by key and timestamp (checked on PyFlink
    2.3), so a key's state sees its records in timestamp order whatever order they came in: a
    non-commutative ``reduce`` folds them in that order and ``sum`` keeps the other fields of the
    key's earliest record. From a collection and from a Spark source keyed by its columns alike."""
    by_ts = sorted(OUT_OF_ORDER, key=lambda r: r[2])
    keys = sorted({r[0] for r in OUT_OF_ORDER})
    expected_reduce = {}
    for key, value, ts in by_ts:
        acc = expected_reduce.get(key)
        expected_reduce[key] = (key, value, ts) if acc is None else (key, acc[1] * 2 + value, ts)
    expected = {
        "seen": {k: tuple(v for key, v, _ in by_ts if key == k) for k in keys},
        "sum": [(k, sum(v for key, v, _ in by_ts if key == k), min(ts for key, _, ts in by_ts if key == k)) for k in keys],
        "reduce": sorted(expected_reduce.values()),
    }
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(10))

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_vectorized_aggregation(vectorize)
    stream = env.from_collection(OUT_OF_ORDER).assign_timestamps_and_watermarks(strategy.with_timestamp_assigner(Ts()))
    assert _in_order_per_key(env, stream) == expected

    folder = workdir / f"events-{vectorize}"
    spark.createDataFrame(OUT_OF_ORDER, "key string, value long, ts long").coalesce(1).write.parquet(str(folder))
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_vectorized_aggregation(vectorize)
    rows = env.from_spark(spark.readStream.schema("key string, value long, ts long").parquet(str(folder)), bounded=True)
    stream = rows.assign_timestamps_and_watermarks(strategy.with_timestamp_assigner(lambda r, _: r.ts))
    got = _in_order_per_key(env, stream)
    assert {k: v for k, v in got.items()} == {"seen": expected["seen"], "sum": [tuple(r) for r in expected["sum"]],
                                              "reduce": expected["reduce"]}

    # STREAMING keeps the order records came in
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    stream = env.from_collection(OUT_OF_ORDER).assign_timestamps_and_watermarks(strategy.with_timestamp_assigner(Ts()))
    assert _in_order_per_key(env, stream)["seen"] == {k: tuple(v for key, v, _ in OUT_OF_ORDER if key == k) for k in keys}


def test_batch_mode_gives_a_key_its_records_without_a_timestamp_first_then_the_others_in_timestamp_order(workdir):
    """Flink sorts a record without a timestamp as ``Long.MIN_VALUE``: in a union of a timestamped and
    an untimed stream, each key sees the untimed records first, in the order they came, then the
    timestamped ones by timestamp (the untimed ones are processed as they arrive, not held back)."""
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(10))
    untimed = [(f"k{i % 3}", 1000 + i, None) for i in range(30)]
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    timed = env.from_collection(OUT_OF_ORDER).assign_timestamps_and_watermarks(strategy.with_timestamp_assigner(Ts()))
    stream = timed.union(env.from_collection(untimed))
    seen = _in_order_per_key(env, stream)["seen"]
    by_ts = sorted(OUT_OF_ORDER, key=lambda r: r[2])
    assert seen == {k: tuple(v for key, v, _ in untimed if key == k) + tuple(v for key, v, _ in by_ts if key == k)
                    for k in ("k0", "k1", "k2")}
