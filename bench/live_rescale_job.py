"""The job ``bench/live_rescale.py`` rescales: ``LIVE_BENCH_KEYS`` keys of ~1 kB keyed state each,
written by the first epochs, then a steady stream of records on 100 hot keys (tiny deltas), so the
state stays put while epochs keep coming. Run with ``keyspan run bench/live_rescale_job.py -p 2``."""

import os

from keyspan.datastream.connectors.number_seq import NumberSequenceSource
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.common import Encoder
from keyspan.datastream.state import ValueStateDescriptor

KEYS = int(os.environ["LIVE_BENCH_KEYS"])
PER_EPOCH = int(os.environ.get("LIVE_BENCH_PER_EPOCH", "20000"))
PAD = "x" * 1000


class Hold(KeyedProcessFunction):
    def open(self, runtime_context):
        self.value = runtime_context.get_state(ValueStateDescriptor("value"))

    def process_element(self, n, ctx):
        if n < KEYS:
            self.value.update(f"{n}:{PAD}")  # the big state: written once per key
        else:
            self.value.update(n)  # hot keys: a small delta per epoch
        return iter(())


env = StreamExecutionEnvironment.get_execution_environment()
env.set_max_records_per_epoch(PER_EPOCH)
(env.from_source(NumberSequenceSource(0, 10**12), source_name="numbers").uid("numbers")
    .key_by(lambda n: n if n < KEYS else n % 100).process(Hold()).uid("hold")
    .sink_to(FileSink.for_row_format(os.environ["LIVE_BENCH_OUTPUT"], Encoder.simple_string_encoder()).build())
    .uid("out"))
env.execute("live-rescale-bench")
