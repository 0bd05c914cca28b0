"""A job for the live-rescale tests: keyed state of every kind, event- and processing-time timers,
operator list state and broadcast state, over a bounded input cut into many epochs.

Every output line depends only on the records read so far and on where epochs end (fixed by the
per-epoch limits), never on the parallelism or the order records of one epoch arrive in; so a run
rescaled while it runs must write exactly the lines of a run that never was.
Run as a script (``keyspan run``) it writes to ``LIVE_RESCALE_OUTPUT``.
"""

from __future__ import annotations

import json
import os
import time

from keyspan.common import Encoder, Types, WatermarkStrategy
from keyspan.connectors.sources import CollectionSource
from keyspan.datastream import (
    AggregateFunction,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
)
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.functions import CheckpointedFunction
from keyspan.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)

RULES = MapStateDescriptor("rules")
KEYS = 12
RECORDS = int(os.environ.get("LIVE_RESCALE_RECORDS", "480"))
PER_EPOCH = 40
PAUSE_AT = "LIVE_RESCALE_PAUSE_AT"  # parallelism at which the first task sleeps (a window to kill the driver in)


def records(n: int = RECORDS) -> list[tuple[str, int, int]]:
    return [(f"k{i % KEYS:02d}", (i * 7) % 23, i * 10) for i in range(n)]


class Average(AggregateFunction):
    def create_accumulator(self):
        return 0, 0

    def add(self, value, accumulator):
        return accumulator[0] + value, accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1] if accumulator[1] else None

    def merge(self, a, b):
        return a[0] + b[0], a[1] + b[1]


class ApplyFactor(KeyedBroadcastProcessFunction):
    """Keyed value state next to broadcast state: the factor arrives once, before any record."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.LONG()))

    def process_element(self, value, ctx):
        key, amount, ts = value
        self.seen.update((self.seen.value() or 0) + 1)
        yield key, amount * ctx.get_broadcast_state(RULES).get("factor"), ts

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(*value)


class Books(KeyedProcessFunction):
    """List, map, reducing and aggregating state; event-time and processing-time timers."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.amounts = runtime_context.get_list_state(ListStateDescriptor("amounts", Types.LONG()))
        self.buckets = runtime_context.get_map_state(MapStateDescriptor("buckets", Types.INT(), Types.LONG()))
        self.total = runtime_context.get_reducing_state(
            ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG()))
        self.avg = runtime_context.get_aggregating_state(AggregatingStateDescriptor("avg", Average()))
        pause = int(os.environ.get(PAUSE_AT, "0"))
        marker = os.environ.get("LIVE_RESCALE_MARKER")
        if pause and runtime_context.get_number_of_parallel_subtasks() == pause and marker:
            with open(marker, "a") as f:  # the switch happened: the first epoch at the new parallelism runs
                f.write(f"{os.getpid()}\n")
            time.sleep(3)

    def process_element(self, value, ctx):
        key, amount, ts = value
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.amounts.add(amount)
        bucket = amount % 3
        self.buckets.put(bucket, (self.buckets.get(bucket) or 0) + 1)
        self.total.add(amount)
        self.avg.add(amount)
        ctx.timer_service().register_event_time_timer(ts + 55)
        if n % 4 == 0:  # in the past: fires at the end of this epoch, once per registration
            ctx.timer_service().register_processing_time_timer(n)
        yield json.dumps(["rec", key, n])

    def on_timer(self, timestamp, ctx):
        key = ctx.get_current_key()
        if ctx.time_domain().name == "EVENT_TIME":
            yield json.dumps(["et", key, timestamp, self.count.value()])
        else:
            yield json.dumps(["pt", key, timestamp, self.count.value(), sum(self.amounts.get()),
                              sorted(self.buckets.items()), self.total.get(), round(self.avg.get(), 6)])


class Tally(MapFunction, CheckpointedFunction):
    """Operator list state: how many lines this subtask passed on (split and redistributed on rescale)."""

    def initialize_state(self, context):
        self.state = context.get_operator_state_store().get_list_state(ListStateDescriptor("passed"))
        self.passed = sum(self.state.get())

    def snapshot_state(self, context):
        self.state.update([self.passed])

    def map(self, value):
        self.passed += 1
        return value


def build(env: StreamExecutionEnvironment, output: str, data=None) -> None:
    env.set_max_records_per_epoch(PER_EPOCH)
    rules = CollectionSource([("factor", 3)])
    rules.max_per_epoch = 1
    broadcast = env.from_source(rules, source_name="rules").uid("rules").broadcast(RULES)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, _: r[2])
    (env.from_collection(data or records()).uid("amounts")
        .assign_timestamps_and_watermarks(strategy).uid("stamps")
        .key_by(lambda r: r[0]).connect(broadcast).process(ApplyFactor()).uid("factor")
        .key_by(lambda r: r[0]).process(Books()).uid("books")
        .map(Tally()).uid("tally")
        .sink_to(FileSink.for_row_format(output, Encoder.simple_string_encoder()).build()).uid("out"))


if __name__ == "__main__":
    environment = StreamExecutionEnvironment.get_execution_environment()
    environment.set_parallelism(2)
    build(environment, os.environ["LIVE_RESCALE_OUTPUT"])
    environment.execute("live-rescale")
