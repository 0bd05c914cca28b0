"""A two-input job for savepoint and crash tests: orders and payments keyed by account into one
KeyedCoProcessFunction whose state both inputs share; an event-time timer emits each account's
totals at the end of input.

Every line depends only on how many records of its account and side came before it, not on the
order the two inputs' records of one epoch interleave, so a failure-free run is deterministic."""

import json
import os

from keyspan.common import Encoder
from keyspan.datastream import KeyedCoProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.state import ValueStateDescriptor

END_OF_TIME = 2**62  # an event-time timer that only the end of input (watermark Long.MAX) fires


class Tally(KeyedCoProcessFunction):
    """Counts orders and payments per account in one shared state value."""

    def open(self, runtime_context):
        self.tally = runtime_context.get_state(ValueStateDescriptor("tally"))

    def _add(self, side, amount, ctx):
        tally = self.tally.value() or {"orders": 0, "payments": 0, "balance": 0}
        if tally["orders"] + tally["payments"] == 0:
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        tally[side] += 1
        tally["balance"] += amount if side == "orders" else -amount
        self.tally.update(tally)
        return json.dumps([ctx.get_current_key(), side, tally[side]])

    def process_element1(self, value, ctx):
        yield self._add("orders", value[1], ctx)

    def process_element2(self, value, ctx):
        yield self._add("payments", value[1], ctx)

    def on_timer(self, timestamp, ctx):
        tally = self.tally.value()
        yield json.dumps([ctx.get_current_key(), "total", tally["orders"], tally["payments"], tally["balance"]])


def build(env, output: str, records: int = 600, accounts: int = 12, per_epoch: int = 30):
    env.set_max_records_per_epoch(per_epoch)
    orders = env.from_collection([(f"acct-{i % accounts:02d}", i % 7 + 1) for i in range(records)]).uid("orders")
    payments = env.from_collection([(f"acct-{(i * 5) % accounts:02d}", i % 3 + 1)
                                    for i in range(records // 2)]).uid("payments")
    (orders.connect(payments).key_by(lambda o: o[0], lambda p: p[0])
        .process(Tally()).uid("tally")
        .sink_to(FileSink.for_row_format(output, Encoder.simple_string_encoder()).build()).uid("out"))


if __name__ == "__main__":
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(int(os.environ.get("CONNECTED_JOB_PARALLELISM", "2")))
    build(env, os.environ["CONNECTED_JOB_OUTPUT"], records=int(os.environ.get("CONNECTED_JOB_RECORDS", "240")))
    env.execute("connected")
