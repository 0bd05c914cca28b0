"""A keyed job for the cluster tests: lines ``key,value`` from a folder (bounded, or monitored with
CLUSTER_JOB_CONTINUOUS=1) → running count per key → a FileSink. Input and output are URIs (s3://)."""

import os

from cluster_job_lib import RunningCount, parse

from keyspan.common import Encoder
from keyspan.datastream import StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSink, FileSource, StreamFormat

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(int(os.environ.get("CLUSTER_JOB_PARALLELISM", "2")))
env.get_checkpoint_config().set_checkpoint_interval(500)
source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), os.environ["CLUSTER_JOB_INPUT"])
if os.environ.get("CLUSTER_JOB_CONTINUOUS") == "1":
    source = source.monitor_continuously()
(env.from_source(source.build(), source_name="lines").uid("lines")
    .map(parse).key_by(lambda r: r[0])
    .process(RunningCount()).uid("count")
    .sink_to(FileSink.for_row_format(os.environ["CLUSTER_JOB_OUTPUT"], Encoder.simple_string_encoder()).build())
    .uid("out"))
env.execute("cluster-count")
