"""A job for crash tests of the bucketing, rolling FileSink: per-key counts of a NumberSequenceSource,
written to one bucket per key class, part files rolled by size, several epochs.

Every line depends only on how many records of its key came before it, so the lines of one
(bucket, epoch, subtask) are the same in every failure-free run. With BUCKETED_JOB_COMPACT=N the
sink joins each bucket's part files every N checkpoints (enable_compact). With
BUCKETED_JOB_KILL_BEFORE_COMPACTING=E the driver SIGKILLs itself once (a marker file next to the
output remembers it) after epoch E committed and published, before its compaction: the moment a
randomly timed kill rarely hits."""

import json
import os
import signal
from pathlib import Path

from keyspan.common import Encoder, WatermarkStrategy
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors import BucketAssigner, FileSink, OutputFileConfig, RollingPolicy
from keyspan.datastream.connectors.file_system import FileCompactor, FileCompactStrategy
from keyspan.datastream.connectors.number_seq import NumberSequenceSource
from keyspan.datastream.state import ValueStateDescriptor

OUTPUT = os.environ["BUCKETED_JOB_OUTPUT"]


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield json.dumps({"key": ctx.get_current_key(), "count": n})


class ByKeyClass(BucketAssigner):
    def get_bucket_id(self, element, context):
        return f"class={json.loads(element)['key'] % 3}"


if os.environ.get("BUCKETED_JOB_KILL_BEFORE_COMPACTING"):
    kill_epoch, marker = int(os.environ["BUCKETED_JOB_KILL_BEFORE_COMPACTING"]), Path(OUTPUT + ".killed")
    compact = FileSink.checkpoint_committed

    def kill_before_compacting(sink, epoch):
        if epoch == kill_epoch and not marker.exists():
            marker.touch()
            os.killpg(os.getpgrp(), signal.SIGKILL)  # the driver with its JVM, as a crash takes both
        compact(sink, epoch)

    FileSink.checkpoint_committed = kill_before_compacting

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.set_max_records_per_epoch(150)
builder = FileSink.for_row_format(OUTPUT, Encoder.simple_string_encoder()) \
    .with_bucket_assigner(ByKeyClass()) \
    .with_rolling_policy(RollingPolicy.default_rolling_policy(part_size=400)) \
    .with_output_file_config(OutputFileConfig.builder().with_part_prefix("counts").with_part_suffix(".jsonl").build())
if os.environ.get("BUCKETED_JOB_COMPACT"):
    builder.enable_compact(
        FileCompactStrategy.builder().enable_compaction_on_checkpoint(int(os.environ["BUCKETED_JOB_COMPACT"])).build(),
        FileCompactor.concat_file_compactor())
sink = builder.build()
(env.from_source(NumberSequenceSource(0, 2399), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
    .key_by(lambda n: n % 40)
    .process(Count()).uid("count")
    .sink_to(sink).uid("out"))
env.execute("bucketed")
