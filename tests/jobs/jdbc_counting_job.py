"""A job for JDBC crash tests: per-key counts written to a database table with plain INSERTs.

Every row is (key, n): the n-th record of its key, so the expected table is known from the input
alone, whatever the epochs and the crashes; a row written twice shows as a duplicate."""

import os

from keyspan.common import Row, Types
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.jdbc import JdbcConnectionOptions, JdbcExecutionOptions, JdbcSink
from keyspan.datastream.state import ValueStateDescriptor

URL = os.environ["JDBC_JOB_URL"]
RECORDS = int(os.environ.get("JDBC_JOB_RECORDS", "1200"))
KEYS = int(os.environ.get("JDBC_JOB_KEYS", "30"))


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.n = runtime_context.get_state(ValueStateDescriptor("n", Types.INT()))

    def process_element(self, value, ctx):
        n = (self.n.value() or 0) + 1
        self.n.update(n)
        yield Row(ctx.get_current_key(), n)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.set_max_records_per_epoch(int(os.environ.get("JDBC_JOB_PER_EPOCH", "50")))
row = Types.ROW([Types.STRING(), Types.INT()])
(env.from_collection([f"key-{i % KEYS:02d}" for i in range(RECORDS)], Types.STRING()).uid("events")
    .key_by(lambda v: v).process(Count(), output_type=row).uid("count")
    .add_sink(JdbcSink.sink("insert into counts (k, n) values (?, ?)", row,
                            JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(URL)
                            .with_driver_name("org.postgresql.Driver").build(),
                            JdbcExecutionOptions.builder().with_batch_size(100).build())).uid("counts"))
env.execute("jdbc-counting")
