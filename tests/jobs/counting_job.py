"""A job for crash tests: per-key counts and sums written to a FileSink, several epochs.

Every emitted line depends only on how many records of its key came before it, not on the order
records of one epoch arrive in, so a failure-free run's output is deterministic per epoch file.
"""

import json
import os

from keyspan.common import Encoder
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.state import ListStateDescriptor, ValueStateDescriptor

RECORDS = int(os.environ.get("COUNTING_JOB_RECORDS", "2400"))
KEYS = int(os.environ.get("COUNTING_JOB_KEYS", "40"))
PER_EPOCH = int(os.environ.get("COUNTING_JOB_PER_EPOCH", "150"))
OUTPUT = os.environ["COUNTING_JOB_OUTPUT"]


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.recent = runtime_context.get_list_state(ListStateDescriptor("recent"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.recent.add(n)
        if n % 5 == 0:
            self.recent.update(list(self.recent.get())[-2:])
        yield json.dumps({"key": ctx.get_current_key(), "count": n, "recent": len(list(self.recent.get()))})


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.set_max_records_per_epoch(PER_EPOCH)
env.set_small_epochs_in_driver(int(os.environ.get("COUNTING_JOB_IN_DRIVER", "0")))
env.get_checkpoint_config().set_max_delta_chain(4)
records = [(f"key-{i % KEYS:03d}", i) for i in range(RECORDS)]
(env.from_collection(records).uid("numbers")
    .key_by(lambda r: r[0])
    .process(Count()).uid("count").name("count per key")
    .sink_to(FileSink.for_row_format(OUTPUT, Encoder.simple_string_encoder()).build()).uid("out"))
env.execute("counting")
