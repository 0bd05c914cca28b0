"""The job bench/chaos.py kills: a file-sourced keyed count whose every output line depends only on
how many records of its key came before it, so any run without loss or duplication prints the same
multiset of lines."""

import os

from keyspan.common import Encoder
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSink, FileSource, StreamFormat
from keyspan.datastream.state import ValueStateDescriptor


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield f"{ctx.get_current_key()} {n}"


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.get_checkpoint_config().set_max_delta_chain(3)
source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), os.environ["CHAOS_INPUT"]) \
    .set_max_files_per_epoch(1).build()
(env.from_source(source, None, "lines").uid("lines")
    .map(lambda line: line.split(",")[0]).uid("key-of")
    .key_by(lambda k: k)
    .process(Count()).uid("count")
    .sink_to(FileSink.for_row_format(os.environ["CHAOS_OUTPUT"], Encoder.simple_string_encoder()).build()).uid("out"))
env.execute("chaos")
