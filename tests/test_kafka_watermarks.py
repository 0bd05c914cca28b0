"""Per-partition event-time watermarks of the Kafka source, with idleness, against a real broker
(noida-db on loopback) and a real local Spark.

A KafkaSource's watermark is the minimum over its *partitions* (Flink's per-split watermarks), not
over the subtasks that read them: a lagging partition holds it back even when one subtask reads
every partition. Record timestamps are Kafka's; all of them lie in the current minute (``base``),
so the broker's retention never deletes them."""

from __future__ import annotations

import time

import pytest

from keyspan.runtime.event_time import LONG_MAX, LONG_MIN, advance

pytest.importorskip("confluent_kafka", reason="confluent-kafka (keyspan[kafka]) is not installed")

from kafka_util import add_partitions, new_topic, produce  # noqa: E402
from savepoint_helpers import BackgroundJob, stop_with_savepoint, store, use_options  # noqa: E402

from keyspan.checkpoint.savepoint import load_savepoint  # noqa: E402
from keyspan.common import Duration, SimpleStringSchema, WatermarkStrategy  # noqa: E402
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment  # noqa: E402
from keyspan.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource  # noqa: E402
from keyspan.datastream.functions import ProcessWindowFunction, SinkFunction  # noqa: E402
from keyspan.datastream.output_tag import OutputTag  # noqa: E402
from keyspan.datastream.window import TumblingEventTimeWindows  # noqa: E402

SECOND = 1000


def _base() -> int:
    return int(time.time()) // 60 * 60 * SECOND


def _source(bootstrap: str, topic: str, bounded: bool) -> KafkaSource:
    b = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(topic)
         .set_value_only_deserializer(SimpleStringSchema()))
    if bounded:
        b.set_bounded(KafkaOffsetsInitializer.latest())
    return b.build()


def _produce(bootstrap: str, topic: str, records) -> None:
    """``records``: (partition, timestamp ms); the value is "p<partition>"."""
    records = list(records)
    produce(bootstrap, topic, [(None, f"p{p}") for p, _ in records], partition_of=lambda i: records[i][0],
            timestamp_of=lambda i: records[i][1])


class Collect(SinkFunction):
    """Collects on the driver (a SinkFunction is delivered there after its checkpoint commits)."""

    def __init__(self):
        self.items = []

    def invoke(self, value, context):
        self.items.append(value)


class Counts(ProcessWindowFunction):
    def __init__(self, base: int):
        self.base = base

    def process(self, key, context, elements):
        yield key, context.window().start - self.base, len(list(elements))


class SeesWatermark(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield "seen", value, ctx.timestamp(), ctx.timer_service().current_watermark()


def _windows(stream, base: int, late: OutputTag | None = None):
    windowed = stream.key_by(lambda v: v).window(TumblingEventTimeWindows.of(SECOND))
    if late is not None:
        windowed = windowed.side_output_late_data(late)
    return windowed.process(Counts(base))


def _wait(predicate, job: BackgroundJob, what: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if not job.thread.is_alive():
            job.join()
            raise AssertionError(f"job ended before {what}")
        if time.time() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def _read_up_to(job_id: str, topic: str, ends: dict[int, int]):
    """True once a committed checkpoint of the job has read every partition up to ``ends``."""
    def done():
        cp = store().latest_checkpoint(job_id)
        offsets = ((cp or {}).get("source_offsets") or {}).get("0") or {}
        return all(offsets.get(f"{topic}:{p}", 0) >= end for p, end in ends.items())
    return done


# --- the watermark function: named splits ---------------------------------------------------------------

def test_named_splits_join_leave_and_restore_from_numeric_state():
    origins = {"k": {"bound_ms": 0, "idleness_ms": None, "splits": 1, "source": 0, "sources": [0]}}
    # an old checkpoint's state: the source as one split "0" (and no per-split names)
    old = {"k": {"wm": 499, "splits": {"0": [500, 0]}, "since": 0}}
    state = advance(origins, old, {"k": {"t:0": 900}}, now=10, finished=(), named={"k": ["t:0", "t:1"]})
    assert state["k"]["wm"] == 499  # t:1 never seen: it holds the watermark where it was, never back
    assert set(state["k"]["splits"]) == {"t:0", "t:1"}  # "0" is no split of this epoch any more
    state = advance(origins, state, {"k": {"t:1": 700}}, now=20, finished=(), named={"k": ["t:0", "t:1"]})
    assert state["k"]["wm"] == 699
    # a partition discovered now joins the minimum: unseen, it holds the watermark
    state = advance(origins, state, {"k": {"t:0": 2000, "t:1": 2000}}, now=30, finished=(),
                    named={"k": ["t:0", "t:1", "t:2"]})
    assert state["k"]["wm"] == 699 and state["k"]["splits"]["t:2"] == [LONG_MIN, 30]
    state = advance(origins, state, {"k": {"t:2": 1500}}, now=40, finished=(), named={"k": ["t:0", "t:1", "t:2"]})
    assert state["k"]["wm"] == 1499
    # a finished partition leaves the set and holds nothing back
    state = advance(origins, state, {}, now=50, finished=(), named={"k": ["t:0", "t:1"]})
    assert state["k"]["wm"] == 1999
    assert advance(origins, state, {}, now=60, finished=("k",), named={"k": []})["k"]["wm"] == LONG_MAX


def test_with_idleness_all_partitions_idle_keeps_the_watermark_and_a_new_one_is_idle_after_the_timeout():
    origins = {"k": {"bound_ms": 100, "idleness_ms": 1000, "splits": 1, "source": 0, "sources": [0]}}
    named = {"k": ["t:0", "t:1"]}
    state = advance(origins, {}, {"k": {"t:0": 5000}}, now=0, finished=(), named=named)
    assert state["k"]["wm"] == LONG_MIN  # t:1 assigned, never seen, not idle yet
    state = advance(origins, state, {"k": {"t:0": 6000}}, now=999, finished=(), named=named)
    assert state["k"]["wm"] == LONG_MIN
    state = advance(origins, state, {"k": {"t:0": 7000}}, now=1000, finished=(), named=named)
    assert state["k"]["wm"] == 7000 - 100 - 1  # t:1 idle for the timeout: excluded
    state = advance(origins, state, {}, now=5000, finished=(), named=named)
    assert state["k"]["wm"] == 6899  # every partition idle: the watermark stays
    state = advance(origins, state, {"k": {"t:1": 3000}}, now=5100, finished=(), named=named)
    assert state["k"]["wm"] == 6899  # t:1 active again below the watermark: it never goes back
    state = advance(origins, state, {"k": {"t:0": 9000, "t:1": 8000}}, now=5200, finished=(), named=named)
    assert state["k"]["wm"] == 7899  # both active: the minimum


# --- jobs on a real broker --------------------------------------------------------------------------------

def test_watermark_follows_the_slowest_partition_with_one_subtask_reading_all(env, kafka_broker):
    """Parallelism 1 reads 3 partitions; partition 2's timestamps lag 9 s behind. Epochs of 3 records
    take one record of each partition, so the watermark after epoch k is partition 2's k-th timestamp
    − 1. A per-subtask watermark would be partition 0's (9 s ahead) and make every record of
    partition 2 late, dropping its windows."""
    base = _base()
    topic = new_topic(kafka_broker, 3)
    lag = {0: 10 * SECOND, 1: 10 * SECOND, 2: SECOND}
    _produce(kafka_broker, topic, [(p, base + lag[p] + i * SECOND) for i in range(4) for p in range(3)])
    env.set_parallelism(1)
    env.set_max_records_per_epoch(3)
    late = OutputTag("late")
    events = env.from_source(_source(kafka_broker, topic, bounded=True),
                             WatermarkStrategy.for_monotonous_timestamps(), "events")
    seen = events.key_by(lambda v: v).process(SeesWatermark())
    windows = _windows(events, base, late)
    out = list(seen.union(windows, windows.get_side_output(late).map(lambda v: ("late", v)))
               .execute_and_collect("kafka-partition-watermarks", limit=1000))

    seen = sorted((ts - base, wm if wm == LONG_MIN else wm - base)
                  for _, _, ts, wm in (r for r in out if r[0] == "seen"))
    # record i of each partition is read in epoch i, against partition 2's timestamp of epoch i - 1, less 1 ms
    assert seen == sorted((lag[p] + i * SECOND, LONG_MIN if i == 0 else lag[2] + (i - 1) * SECOND - 1)
                          for i in range(4) for p in range(3))
    assert [r for r in out if r[0] == "late"] == []
    windows = sorted(r for r in out if r[0] != "seen" and r[0] != "late")
    assert windows == sorted((f"p{p}", lag[p] + i * SECOND, 1) for i in range(4) for p in range(3))


def _idle_job(bootstrap: str, topic: str, base: int, idleness: Duration | None, sink: Collect, name: str):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    strategy = WatermarkStrategy.for_monotonous_timestamps()
    if idleness is not None:
        strategy = strategy.with_idleness(idleness)
    events = env.from_source(_source(bootstrap, topic, bounded=False), strategy, "events").uid("events")
    _windows(events, base).uid("windows").add_sink(sink)
    return BackgroundJob(env, name)


def _feed(bootstrap: str, topic: str, base: int, done, job: BackgroundJob, timeout: float = 180) -> int:
    """Partition 0 goes on: one record every 0.3 s, 0.5 s of event time apart, from 4.5 s on, until
    ``done()``; returns the number of records sent."""
    deadline = time.time() + timeout
    sent = 0
    while not done():
        if not job.thread.is_alive():
            job.join()
            raise AssertionError("job ended early")
        if time.time() > deadline:
            raise TimeoutError("partition 0 fed for too long")
        _produce(bootstrap, topic, [(0, base + 4500 + 500 * sent)])
        sent += 1
        time.sleep(0.3)
    return sent


def test_silent_partition_holds_windows_back_unless_with_idleness(kafka_broker, workdir):
    """Partition 1 sends one record (at 0.2 s) and falls silent while partition 0 goes on. Without
    idleness no window fires, however far partition 0 gets; with ``with_idleness(1 s)`` the windows
    fire as partition 0 goes on, once partition 1 has been silent for a second."""
    base = _base()
    first = [(0, base + t) for t in range(0, 4001, 500)] + [(1, base + 200)]

    topic = new_topic(kafka_broker, 2)
    _produce(kafka_broker, topic, first)
    held = Collect()
    job = _idle_job(kafka_broker, topic, base, None, held, "kafka-no-idleness")
    _wait(_read_up_to("kafka-no-idleness", topic, {0: 9, 1: 1}), job, "the first records read")
    silent_since = time.time()
    sent = _feed(kafka_broker, topic, base, lambda: time.time() - silent_since > 3, job)
    _wait(_read_up_to("kafka-no-idleness", topic, {0: 9 + sent, 1: 1}), job, "the later records read")
    stop_with_savepoint("kafka-no-idleness")
    job.join()
    assert held.items == []  # partition 0 reached 4.5 s + 0.5 s × (sent − 1), partition 1 holds at 0.199 s

    topic = new_topic(kafka_broker, 2)
    _produce(kafka_broker, topic, first)
    fired = Collect()
    job = _idle_job(kafka_broker, topic, base, Duration.of_seconds(1), fired, "kafka-idleness")
    _wait(_read_up_to("kafka-idleness", topic, {0: 9, 1: 1}), job, "the first records read")
    _feed(kafka_broker, topic, base, lambda: len(fired.items) >= 6, job)
    stop_with_savepoint("kafka-idleness")
    job.join()
    # windows fire in time order; partition 0 has two records a second, partition 1 one at 0.2 s
    fired = sorted(fired.items, key=lambda r: (r[1], r[0]))
    assert fired[:6] == [("p0", 0, 2), ("p1", 0, 1)] + [("p0", s * SECOND, 2) for s in range(1, 5)]
    assert all(r[0] == "p0" and r[2] == 2 for r in fired[6:])


def test_partition_added_while_running_joins_the_minimum(kafka_broker, workdir):
    """After the watermark reached 4.999 s a third partition appears. Partitions 0 and 1 run on to
    20 s, the new one sends a record at 8 s: the watermark stops at 7.999 s, so windows up to
    [7 s, 8 s) fire and none after (they would, up to 19 s, without the new partition)."""
    base = _base()
    topic = new_topic(kafka_broker, 2)
    _produce(kafka_broker, topic, [(p, base + t * SECOND) for t in range(6) for p in range(2)])
    sink = Collect()
    job = _idle_job(kafka_broker, topic, base, None, sink, "kafka-new-partition")
    _wait(lambda: len(sink.items) >= 10, job, "the windows up to 5 s")
    assert sorted(sink.items) == sorted((f"p{p}", t * SECOND, 1) for t in range(5) for p in range(2))
    add_partitions(kafka_broker, topic, 3)
    _produce(kafka_broker, topic, [(2, base + 8 * SECOND)])
    _wait(_read_up_to("kafka-new-partition", topic, {2: 1}), job, "the new partition discovered and read")
    _produce(kafka_broker, topic, [(p, base + t * SECOND) for t in range(6, 21) for p in range(2)])
    _wait(_read_up_to("kafka-new-partition", topic, {0: 21, 1: 21, 2: 1}), job, "every partition read")
    time.sleep(1)
    stop_with_savepoint("kafka-new-partition")
    job.join()
    assert sorted(sink.items) == sorted([(f"p{p}", t * SECOND, 1) for t in range(8) for p in range(2)])


def test_restore_at_another_parallelism_keeps_each_partitions_watermark(kafka_broker, workdir):
    """Partition 2 is ahead (9 s) when the job stops with a savepoint at parallelism 1; after the
    restore at parallelism 3 it sends nothing, and partitions 0 and 1 run on to 8 s. The savepoint
    holds partition 2's maximum, so the watermark reaches 7.999 s: the same windows as one clean
    run over all the data. Had the restore lost it, partition 2 would hold the watermark at Long.MIN."""
    base = _base()
    first = [(p, base + t * SECOND) for t in range(4) for p in range(2)] + [(2, base + 9 * SECOND)]
    later = [(p, base + t * SECOND) for t in range(4, 9) for p in range(2)]

    def run(topic, parallelism, name, sink):
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
        env.enable_checkpointing(200)
        events = env.from_source(_source(kafka_broker, topic, bounded=False),
                                 WatermarkStrategy.for_monotonous_timestamps(), "events").uid("events")
        _windows(events, base).uid("windows").add_sink(sink)
        return BackgroundJob(env, name)

    topic = new_topic(kafka_broker, 3)
    _produce(kafka_broker, topic, first)
    before = Collect()
    job = run(topic, 1, "kafka-wm-restore", before)
    _wait(_read_up_to("kafka-wm-restore", topic, {0: 4, 1: 4, 2: 1}), job, "the first records read")
    path = stop_with_savepoint("kafka-wm-restore")
    job.join()
    marks = load_savepoint(path)["event_time"]["events"]
    assert marks["splits"][f"{topic}:2"][0] == base + 9 * SECOND and marks["wm"] == base + 3 * SECOND - 1
    _produce(kafka_broker, topic, later)
    use_options(savepoint_path=path)
    after = Collect()
    job = run(topic, 3, "kafka-wm-restore", after)
    _wait(_read_up_to("kafka-wm-restore", topic, {0: 9, 1: 9}), job, "the later records read")
    time.sleep(1)
    stop_with_savepoint("kafka-wm-restore")
    job.join()

    clean_topic = new_topic(kafka_broker, 3)
    _produce(kafka_broker, clean_topic, first + later)
    use_options()
    clean = Collect()
    job = run(clean_topic, 2, "kafka-wm-clean", clean)
    _wait(_read_up_to("kafka-wm-clean", clean_topic, {0: 9, 1: 9, 2: 1}), job, "the clean run's records read")
    time.sleep(1)
    stop_with_savepoint("kafka-wm-clean")
    job.join()
    assert sorted(clean.items) == sorted((f"p{p}", t * SECOND, 1) for t in range(8) for p in range(2))
    assert sorted(before.items + after.items) == sorted(clean.items)
