"""A long-enough running job for the observability tests: per-key counts with PyFlink user metrics
(counter, meter, distribution, gauge, a key/value group) and event time from a watermark strategy."""

import os
import time

from keyspan.common import Duration, WatermarkStrategy
from keyspan.common.watermark_strategy import TimestampAssigner
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import DiscardingSink
from keyspan.datastream.state import ValueStateDescriptor

RECORDS = int(os.environ.get("METRICS_JOB_RECORDS", "30000"))
PER_EPOCH = int(os.environ.get("METRICS_JOB_PER_EPOCH", "100"))


class Stamp(TimestampAssigner):
    """Events that happened about a second and a half ago: the watermark lag stays near that."""

    def extract_timestamp(self, value, record_timestamp):
        return int(time.time() * 1000) - 1500 + value[1] % 100


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        group = runtime_context.get_metrics_group()
        self.seen = group.counter("seen")
        self.events = group.meter("events")
        self.sizes = group.add_group("shape", "values").distribution("value")
        group.gauge("last_value", lambda: self.last)
        self.last = 0

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        self.seen.inc()
        self.events.mark_event()
        self.sizes.update(value[1] % 100)
        self.last = value[1]
        yield value[0], self.count.value()


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.set_max_records_per_epoch(PER_EPOCH)
strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(50)).with_timestamp_assigner(Stamp())
(env.from_collection([(f"k{i % 7}", i) for i in range(RECORDS)]).uid("numbers")
    .assign_timestamps_and_watermarks(strategy)
    .key_by(lambda r: r[0])
    .process(Count()).uid("count").name("count per key")
    .sink_to(DiscardingSink()).uid("out"))
env.execute("metrics-job")
