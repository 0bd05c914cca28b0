"""Watermarks, record timestamps, timers and side outputs, on real Spark.

Records are (key, event time ms, tag). Jobs cut their input into many epochs with
``set_max_records_per_epoch`` so watermarks advance between epochs, and their results are
compared with what Flink's semantics give, computed here from the input.
"""

from __future__ import annotations

import pytest

from keyspan.common import Duration, Time, Types, WatermarkStrategy
from keyspan.common.watermark_strategy import TimestampAssigner
from keyspan.datastream import KeyedProcessFunction, ProcessFunction, TimeDomain
from keyspan.datastream.output_tag import OutputTag
from keyspan.datastream.functions import ProcessWindowFunction
from keyspan.datastream.state import ValueStateDescriptor
from keyspan.datastream.window import ContinuousEventTimeTrigger, TumblingEventTimeWindows

LONG_MIN = -(1 << 63)
LONG_MAX = (1 << 63) - 1


class SecondField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


def bounded(ms: int) -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(ms)).with_timestamp_assigner(
        SecondField())


class SeesTime(ProcessFunction):
    """Emits (record, its timestamp, the watermark the operator had when it arrived)."""

    def process_element(self, value, ctx):
        yield value, ctx.timestamp(), ctx.timer_service().current_watermark()


class SecondFieldOrRecordTimestamp(TimestampAssigner):
    """The record's own timestamp when it has one (PyFlink passes Long.MIN_VALUE when not), else its
    second field."""

    def extract_timestamp(self, value, record_timestamp):
        return value[1] if record_timestamp == -2 ** 63 else record_timestamp


def test_a_source_record_reaches_its_timestamp_assigner_without_a_timestamp(env):
    """Every record of a collection comes without a timestamp, whatever the assigner gave the record
    before it in the same chunk."""
    data = [("a", t, i) for i, t in enumerate([1000, 3000, 2500, 7000])]
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondFieldOrRecordTimestamp())
    out = env.from_collection(data).assign_timestamps_and_watermarks(strategy).process(SeesTime()).execute_and_collect()
    assert sorted((value, ts) for value, ts, _ in out) == sorted((r, r[1]) for r in data)


def test_a_timestamp_assigner_of_a_module_the_workers_cannot_import_ships_with_the_job(env, tmp_path, monkeypatch):
    """A job's timestamp assigner may be the only class of its module in the job: the module ships
    by value all the same (the workers cannot import it from the driver's path)."""
    import importlib
    import uuid

    name = f"stamps_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from keyspan.common.watermark_strategy import TimestampAssigner\n\n\n"
        "class SecondField(TimestampAssigner):\n"
        "    def extract_timestamp(self, value, record_timestamp):\n"
        "        return value[1]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assigner = importlib.import_module(name).SecondField()
    data = [("a", t) for t in (1000, 3000, 2500)]
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(assigner)
    out = env.from_collection(data).assign_timestamps_and_watermarks(strategy).process(SeesTime()).execute_and_collect()
    assert sorted((value, ts) for value, ts, _ in out) == sorted((r, r[1]) for r in data)


class SecondFieldOfFirst(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[0][1]


class KeyedSeesTime(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timestamp()


def test_a_timestamp_assigned_downstream_does_not_reach_the_next_record_upstream(env):
    """A keyed function reads its records without timestamps, and the timestamp assigner after it,
    in the same stage, stamps what it emits: that stamp belongs to that output only."""
    data = [("a", t, i) for i, t in enumerate([1000, 3000, 2500, 7000])]
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondFieldOfFirst())
    out = (env.from_collection(data).key_by(lambda r: r[0]).process(KeyedSeesTime())
           .assign_timestamps_and_watermarks(strategy).process(SeesTime()).execute_and_collect())
    assert sorted((pair, ts) for pair, ts, _ in out) == sorted(((r, -2 ** 63), r[1]) for r in data)


def test_watermark_is_max_timestamp_minus_bound_at_the_previous_epoch_end(env):
    data = [("a", t, i) for i, t in enumerate([1000, 3000, 2500, 7000, 6000, 9000, 8000, 12000])]
    env.set_max_records_per_epoch(2)
    out = env.from_collection(data).assign_timestamps_and_watermarks(bounded(1000)).process(
        SeesTime()).execute_and_collect()
    rows = sorted(list(out), key=lambda r: r[0][2])
    epochs = [data[i:i + 2] for i in range(0, len(data), 2)]
    expected_wm = LONG_MIN
    i = 0
    for epoch in epochs:
        for record in epoch:
            assert rows[i] == (record, record[1], expected_wm)
            i += 1
        expected_wm = max(expected_wm, max(r[1] for r in data[: i]) - 1000 - 1)


class TimerAtTimestamp(KeyedProcessFunction):
    """Registers an event-time timer at record time + 10 and a duplicate of it; one deleted timer."""

    def process_element(self, value, ctx):
        ts = ctx.timestamp()
        ctx.timer_service().register_event_time_timer(ts + 10)
        ctx.timer_service().register_event_time_timer(ts + 10)  # de-duplicated
        ctx.timer_service().register_event_time_timer(ts + 5)
        if value[2] == "cancel":
            ctx.timer_service().delete_event_time_timer(ts + 5)

    def on_timer(self, timestamp, ctx):
        yield (ctx.get_current_key(), timestamp, ctx.time_domain(), ctx.timer_service().current_watermark(),
               ctx.timestamp())


@pytest.mark.parametrize("per_epoch", [1, 3, 100])
def test_event_time_timers_fire_once_in_timestamp_order(env, per_epoch):
    data = [("a", 100, ""), ("b", 130, "cancel"), ("a", 120, ""), ("a", 100, "dup"), ("b", 400, ""),
            ("a", 390, "")]
    env.set_max_records_per_epoch(per_epoch)
    out = list(env.from_collection(data).assign_timestamps_and_watermarks(bounded(50)).key_by(
        lambda r: r[0]).process(TimerAtTimestamp()).execute_and_collect())
    expected = set()
    for key, ts, tag in data:
        expected.add((key, ts + 10))
        if tag != "cancel":
            expected.add((key, ts + 5))
    fired = [(k, t) for k, t, _, _, _ in out]
    assert sorted(fired) == sorted(expected) and len(fired) == len(set(fired))
    assert all(d == TimeDomain.EVENT_TIME and ts == t and wm >= t for _, t, d, wm, ts in out)
    # per key, in timestamp order
    for key in ("a", "b"):
        times = [t for k, t, *_ in out if k == key]
        assert times == sorted(times)


class Late(ProcessFunction):
    def __init__(self, tag):
        self.tag = tag

    def process_element(self, value, ctx):
        if ctx.timestamp() <= ctx.timer_service().current_watermark():
            yield self.tag, value
        else:
            yield value


def test_side_output_routes_tagged_records(env):
    tag = OutputTag("late")
    data = [("a", 1000, 0), ("a", 5000, 1), ("a", 100, 2), ("a", 6000, 3), ("a", 3000, 4)]
    env.set_max_records_per_epoch(1)
    main = env.from_collection(data).assign_timestamps_and_watermarks(bounded(500)).process(Late(tag))
    main.get_side_output(tag).map(lambda r: ("late", r[2])).print()
    got = list(main.map(lambda r: ("on time", r[2])).execute_and_collect())
    # watermark before record i: max(ts of records < i) - 501
    assert sorted(got) == [("on time", 0), ("on time", 1), ("on time", 3)]


# --- strategies ------------------------------------------------------------------------------------

class FireAll(KeyedProcessFunction):
    """One event-time timer per record, at its timestamp; a firing reports the watermark."""

    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp())

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), timestamp, ctx.timer_service().current_watermark()


def _fired(env, strategy, data, per_epoch=2):
    env.set_max_records_per_epoch(per_epoch)
    ds = env.from_collection(data).assign_timestamps_and_watermarks(strategy)
    return list(ds.key_by(lambda r: r[0]).process(FireAll()).execute_and_collect())


def test_monotonous_timestamps_fire_each_timer_after_the_next_epoch_passes_it(env):
    data = [("k", t, "") for t in (10, 20, 30, 40, 50, 60)]
    out = _fired(env, WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondField()), data)
    # watermark after epoch e = max ts so far - 1 (epochs: 10 20 | 30 40 | 50 60)
    by_ts = {t: wm for _, t, wm in out}
    assert sorted(by_ts) == [10, 20, 30, 40, 50, 60]
    assert by_ts[10] == 19 and by_ts[20] == by_ts[30] == 39
    assert by_ts[40] == by_ts[50] == by_ts[60] == LONG_MAX  # the last epoch ends the input


def test_no_watermarks_fire_event_timers_only_at_the_end_of_input(env):
    data = [("k", t, "") for t in (10, 20, 30, 40, 50, 60)]
    out = _fired(env, WatermarkStrategy.no_watermarks().with_timestamp_assigner(SecondField()), data)
    assert sorted(t for _, t, _ in out) == [10, 20, 30, 40, 50, 60]
    assert {wm for _, _, wm in out} == {LONG_MAX}


class ChainsTimers(KeyedProcessFunction):
    """Each firing counts itself; the first three register a timer 5 ms later, the second also one
    already 100 ms past: PyFlink fires both in the next round, after the timers due before them."""

    def open(self, runtime_context):
        self.fired = runtime_context.get_state(ValueStateDescriptor("fired", Types.INT()))

    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(value[1] + 10)

    def on_timer(self, timestamp, ctx):
        n = (self.fired.value() or 0) + 1
        self.fired.update(n)
        if n < 4:
            ctx.timer_service().register_event_time_timer(timestamp + 5)
        if n == 2:
            ctx.timer_service().register_event_time_timer(timestamp - 100)
        yield "timer", ctx.get_current_key(), timestamp, n


class Fires(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield "window", key, context.window().start, len(list(elements))


def test_a_timer_registered_while_timers_fire_fires_in_the_next_round_as_in_pyflink(env):
    """Checked side by side on PyFlink 2.3: the timers due when the watermark passes them fire in
    timestamp order, and one registered meanwhile fires after them, even if it is due earlier (Java's
    timer service would fire it at once). So ``ContinuousEventTimeTrigger`` at the end of the input
    fires a window once for its first interval and once at its end, not once per interval."""
    strategy = WatermarkStrategy.no_watermarks().with_timestamp_assigner(SecondField())
    keyed = env.from_collection([("a", 1, ""), ("b", 2, ""), ("a", 3, "")]) \
        .assign_timestamps_and_watermarks(strategy).key_by(lambda r: r[0])
    timers = keyed.process(ChainsTimers())
    windows = env.from_collection([("a", t, "") for t in (0, 3, 9, 15, 30)] + [("b", 4, "")]) \
        .assign_timestamps_and_watermarks(strategy).key_by(lambda r: r[0]) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(10))) \
        .trigger(ContinuousEventTimeTrigger.of(Time.milliseconds(3))).process(Fires())
    out = list(timers.union(windows).execute_and_collect())
    fired = {key: [(ts, n) for kind, k, ts, n in sorted(out, key=lambda r: r[3]) if kind == "timer" and k == key]
             for key in ("a", "b")}
    # a: 11 and 13 are due; 13 registers 18 and -87, 11 had registered 16: the next round fires
    # -87 (registering -82), 16, 18; the round after, -82
    assert fired["a"] == [(11, 1), (13, 2), (-87, 3), (16, 4), (18, 5), (-82, 6)]
    assert fired["b"] == [(12, 1), (17, 2), (-83, 3), (22, 4), (-78, 5)]
    assert sorted(r[1:] for r in out if r[0] == "window") == [
        ("a", 0, 3), ("a", 0, 3), ("a", 10, 1), ("a", 10, 1), ("a", 30, 1), ("a", 30, 1), ("b", 0, 1), ("b", 0, 1)]


def test_from_source_with_a_strategy_assigns_timestamps_at_the_source(env, workdir):
    from keyspan.datastream.connectors.file_system import FileSource, StreamFormat

    folder = workdir / "events"
    folder.mkdir()
    for i in range(3):  # one file per epoch
        (folder / f"part-{i}.jsonl").write_text("".join(
            f'{{"key": "k{j % 2}", "ts": {1000 * i + j}}}\n' for j in range(4)))

    class TsField(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp):
            return value.ts

    source = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), str(folder)) \
        .set_max_files_per_epoch(1).build()
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(100)).with_timestamp_assigner(
        TsField())
    out = list(env.from_source(source, strategy, "events").key_by(lambda r: r.key).process(FireAll())
               .execute_and_collect())
    fired = {(k, t): wm for k, t, wm in out}
    assert sorted(fired) == sorted((f"k{j % 2}", 1000 * i + j) for i in range(3) for j in range(4))
    assert all(fired[("k0", j)] == 1003 - 101 for j in (0, 2))  # after epoch 1: max 1003 - bound - 1
    assert all(fired[(k, 2000 + j)] == LONG_MAX for k, j in (("k0", 0), ("k1", 1), ("k0", 2), ("k1", 3)))


def test_idle_split_does_not_hold_back_the_watermark():
    from keyspan.runtime.event_time import advance

    origins = {"s": {"bound_ms": 0, "idleness_ms": 1000, "splits": 2, "sources": [0]},
               "t": {"bound_ms": 0, "idleness_ms": None, "splits": 2, "sources": [0]}}
    state = advance(origins, {}, {"s": {"0": 500}, "t": {"0": 500}}, now=0, finished=())
    assert state["s"]["wm"] == LONG_MIN and state["t"]["wm"] == LONG_MIN  # split 1 has not been idle long
    state = advance(origins, state, {"s": {"0": 900}, "t": {"0": 900}}, now=1500, finished=())
    assert state["s"]["wm"] == 899  # split 1 idle for 1.5 s: excluded
    assert state["t"]["wm"] == LONG_MIN  # without idleness it holds the watermark back
    state = advance(origins, state, {"s": {"1": 100}}, now=1600, finished=())
    assert state["s"]["wm"] == 899  # split 0 is not idle yet and split 1 woke up: never backwards
    state = advance(origins, state, {}, now=1600, finished=("t",))
    assert state["t"]["wm"] == LONG_MAX


# --- timers in unbounded jobs: idle streams, restore at another parallelism -------------------------

class Collect:
    def __init__(self):
        from keyspan.datastream import SinkFunction

        outer = self

        class Sink(SinkFunction):
            def invoke(self, value, context):
                outer.items.append(value)

        self.items = []
        self.sink = Sink()


class ProcessingTimer(KeyedProcessFunction):
    def process_element(self, value, ctx):
        now = ctx.timer_service().current_processing_time()
        ctx.timer_service().register_processing_time_timer(now + 1500)
        ctx.timer_service().register_processing_time_timer(now + 60_000)
        ctx.timer_service().delete_processing_time_timer(now + 60_000)
        yield "registered", ctx.get_current_key(), now + 1500

    def on_timer(self, timestamp, ctx):
        yield "fired", ctx.get_current_key(), timestamp, ctx.time_domain(), ctx.timer_service().current_processing_time()


def _unbounded_file_source(folder, per_epoch=None):
    from keyspan.datastream.connectors.file_system import FileSource, StreamFormat

    builder = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), str(folder)).monitor_continuously()
    if per_epoch:
        builder = builder.set_max_files_per_epoch(per_epoch)
    return builder.build()


def test_processing_time_timers_fire_on_an_idle_stream(workdir):
    import time

    from keyspan.datastream import StreamExecutionEnvironment
    from savepoint_helpers import BackgroundJob, stop_with_savepoint, wait_for_checkpoints

    folder = workdir / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"key": "x"}\n{"key": "y"}\n')
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    sink = Collect()
    env.from_source(_unbounded_file_source(folder), WatermarkStrategy.no_watermarks(), "in") \
        .key_by(lambda r: r.key).process(ProcessingTimer()).uid("timers").add_sink(sink.sink)
    job = BackgroundJob(env, "idle-timers")
    wait_for_checkpoints("idle-timers", 1, job=job)
    deadline = time.time() + 60
    while sum(1 for i in sink.items if i[0] == "fired") < 2 and time.time() < deadline:
        time.sleep(0.2)
    stop_with_savepoint("idle-timers")
    job.join()
    registered = {(k, t) for tag, k, t in (i for i in sink.items if i[0] == "registered")}
    fired = [i for i in sink.items if i[0] == "fired"]
    assert {(k, t) for _, k, t, _, _ in fired} == registered and len(fired) == 2
    assert all(d == TimeDomain.PROCESSING_TIME and now >= t for _, _, t, d, now in fired)


class LongTimers(KeyedProcessFunction):
    """Event-time timers at ts + 10 s; a state value proves the timer sees its key's state."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))

    def process_element(self, value, ctx):
        self.seen.update((self.seen.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(value.ts + 10_000)

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), timestamp, self.seen.value()


def test_timers_survive_a_savepoint_and_fire_at_another_parallelism(workdir):
    from keyspan.datastream import StreamExecutionEnvironment
    from savepoint_helpers import BackgroundJob, stop_with_savepoint, use_options, wait_for_checkpoints
    import time

    folder = workdir / "in"
    folder.mkdir()
    keys = [f"k{i}" for i in range(12)]
    (folder / "part-0.jsonl").write_text("".join(f'{{"key": "{k}", "ts": {1000 + i}}}\n' for i, k in enumerate(keys)))

    def run(parallelism, sink):
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
        env.enable_checkpointing(200)
        strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
            lambda value, _: value.ts)
        env.from_source(_unbounded_file_source(folder, 1), strategy, "in").uid("in") \
            .key_by(lambda r: r.key).process(LongTimers()).uid("timers").add_sink(sink.sink)
        return BackgroundJob(env, "timers-rescale")

    first = Collect()
    job = run(2, first)
    wait_for_checkpoints("timers-rescale", 1, job=job)
    path = stop_with_savepoint("timers-rescale")
    job.join()
    assert first.items == []  # watermark 1010: no timer (>= 11000) due yet
    (folder / "part-1.jsonl").write_text('{"key": "k0", "ts": 50000}\n')  # moves the watermark past all
    use_options(savepoint_path=path)
    second = Collect()
    job = run(3, second)
    deadline = time.time() + 90
    while len(second.items) < len(keys) and time.time() < deadline and job.thread.is_alive():
        time.sleep(0.2)
    stop_with_savepoint("timers-rescale")
    job.join()
    expected = sorted([(k, 11_000 + i, 2 if k == "k0" else 1) for i, k in enumerate(keys)])
    assert sorted(i for i in second.items if i[1] < 50_000) == expected
    assert [i for i in second.items if i[1] >= 50_000] == []  # watermark 49999: ts 60000 not due


# --- the lateness rule --------------------------------------------------------------------------------

def test_lateness_is_judged_against_the_watermark_at_the_start_of_the_records_epoch(env):
    """Epochs of two records. Watermark after epoch 0 = 250 - 1; in epoch 1 the record at 150 is late
    (its window ended at 199 <= 249) but 260 is not; in epoch 2 the record at 270 arrives after one at
    1000 in the same epoch: it is judged against the watermark at the start of epoch 2 (259), so it
    is on time, whereas Flink with a watermark between the two records would call it late."""
    from keyspan.datastream.functions import ProcessWindowFunction
    from keyspan.datastream.window import TumblingEventTimeWindows

    class Contents(ProcessWindowFunction):
        def process(self, key, context, elements):
            yield context.window().start, sorted(e[1] for e in elements)

    tag = OutputTag("late")
    data = [("k", 100, ""), ("k", 250, ""), ("k", 150, ""), ("k", 260, ""), ("k", 1000, ""), ("k", 270, "")]
    env.set_max_records_per_epoch(2)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondField())
    windows = env.from_collection(data).assign_timestamps_and_watermarks(strategy).key_by(lambda r: r[0]) \
        .window(TumblingEventTimeWindows.of(100)).side_output_late_data(tag).process(Contents())
    late, on_time = Collect(), Collect()
    windows.get_side_output(tag).add_sink(late.sink)
    windows.add_sink(on_time.sink)
    env.execute("lateness")
    assert sorted(on_time.items) == [(100, [100]), (200, [250, 260, 270]), (1000, [1000])]
    assert late.items == [("k", 150, "")]


def test_window_all_and_count_window_all_see_the_whole_stream(env):
    from keyspan.datastream.functions import ProcessAllWindowFunction
    from keyspan.datastream.window import TumblingEventTimeWindows

    class Total(ProcessAllWindowFunction):
        def process(self, context, elements):
            yield context.window().start, sum(e[1] for e in elements)

    data = [(k, t, "") for k, t in [("a", 5), ("b", 15), ("c", 7), ("a", 12), ("b", 30)]]
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondField())
    ds = env.from_collection(data).assign_timestamps_and_watermarks(strategy)
    counts, totals = Collect(), Collect()
    ds.count_window_all(2).reduce(lambda a, b: (a[0] + b[0], a[1] + b[1], "")).add_sink(counts.sink)
    ds.window_all(TumblingEventTimeWindows.of(10)).process(Total()).add_sink(totals.sink)
    env.execute("all-windows")
    assert sorted(totals.items) == [(0, 12), (10, 27), (30, 30)]
    assert len(counts.items) == 2 and sorted(len(c[0]) for c in counts.items) == [2, 2]


def test_event_time_ttl_expires_state_as_the_job_watermark_advances(env):
    """Issue 4's event-time TTL, driven by the job's watermark: a value written at watermark W
    expires once the watermark passes W + TTL."""
    from keyspan.common import Time
    from keyspan.datastream.state import StateTtlConfig

    class LastSeen(KeyedProcessFunction):
        def open(self, runtime_context):
            descriptor = ValueStateDescriptor("last")
            descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(500)).set_ttl_time_characteristic(
                StateTtlConfig.TtlTimeCharacteristic.EventTime).build())
            self.last = runtime_context.get_state(descriptor)

        def process_element(self, value, ctx):
            yield value[2], self.last.value(), ctx.timer_service().current_watermark()
            self.last.update(value[1])

    # one record per epoch; key "a" at 1000, then "b" moves the watermark, then "a" again
    data = [("a", 1000, "a1"), ("b", 1400, "b1"), ("a", 1450, "a2"), ("b", 2100, "b2"), ("a", 2200, "a3")]
    env.set_max_records_per_epoch(1)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondField())
    out = {tag: (seen, wm) for tag, seen, wm in env.from_collection(data).assign_timestamps_and_watermarks(
        strategy).key_by(lambda r: r[0]).process(LastSeen()).execute_and_collect()}
    # the TTL clock is the watermark at the start of the record's epoch:
    # a1 stamped at Long.MIN (no watermark yet): expired for a2; b1 stamped at 999 lives until 1499,
    # so b2 (watermark 1449) sees it; a2 stamped at 1399 has expired by a3 (watermark 2099)
    assert out["a1"] == (None, LONG_MIN) and out["a2"] == (None, 1399)
    assert out["b2"] == (1400, 1449) and out["a3"] == (None, 2099)


def test_bounded_from_spark_input_ends_with_a_final_watermark(env, spark, workdir):
    """A from_spark source's offsets cannot say that its input ended: after Spark's available-now run,
    one more epoch without records moves every watermark to Long.MAX, so the last windows fire."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from keyspan.common import Time
    from keyspan.datastream.window import TumblingEventTimeWindows

    folder = workdir / "parquet"
    folder.mkdir()
    pq.write_table(pa.table({"key": [1, 1, 2], "ts": [1000, 2000, 65000], "value": [1, 2, 4]}),
                   str(folder / "part-0.parquet"))
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, _: r.ts)
    stream = env.from_spark(spark.readStream.schema("key long, ts long, value long").parquet(str(folder)),
                            bounded=True)
    out = stream.assign_timestamps_and_watermarks(strategy).map(lambda r: (r.key, r.value)) \
        .key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(Time.minutes(1))) \
        .reduce(lambda a, b: (a[0], a[1] + b[1])).execute_and_collect()
    assert sorted(out) == [(1, 3), (2, 4)]


def test_pyflink_time_settings_are_accepted_and_job_parameters_reach_functions(env):
    from keyspan.datastream import MapFunction, TimeCharacteristic

    env.set_stream_time_characteristic(TimeCharacteristic.EventTime)
    assert env.get_stream_time_characteristic() is TimeCharacteristic.EventTime
    env.get_config().set_auto_watermark_interval(100).set_global_job_parameters({"factor": 3})

    class Scale(MapFunction):
        def open(self, runtime_context):
            self.factor = int(runtime_context.get_job_parameter("factor", "1"))

        def map(self, value):
            return value * self.factor

    assert sorted(env.from_collection([1, 2]).map(Scale()).execute_and_collect()) == [3, 6]
