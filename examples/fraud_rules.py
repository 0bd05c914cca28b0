"""Seed 001's broadcast-state scenario: a low-rate stream of rules broadcast to a high-rate stream
of transactions. Every subtask holds the same rules (broadcast state, checkpointed and copied to
new subtasks on rescale); each account's transaction count is keyed state.

Run:  keyspan run examples/fraud_rules.py --fresh
"""

from __future__ import annotations

import os

from keyspan.common import Encoder
from keyspan.datastream import KeyedBroadcastProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.state import MapStateDescriptor, ValueStateDescriptor

OUTPUT_DIR = os.path.abspath(os.environ.get("KEYSPAN_DEMO_DIR", os.path.join(".keyspan", "demo")) + "/flagged")
RULES = MapStateDescriptor("rules")


class FlagOverLimit(KeyedBroadcastProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("transactions"))

    def process_element(self, value, ctx):
        account, amount = value
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        limit = ctx.get_broadcast_state(RULES).get("max_amount")
        if limit is not None and amount > limit:
            yield f"{account} transaction #{n}: {amount} over limit {limit}"

    def process_broadcast_element(self, value, ctx):
        name, limit = value
        ctx.get_broadcast_state(RULES).put(name, limit)


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_max_records_per_epoch(500)
    rules = env.from_collection([("max_amount", 900), ("max_amount", 700), ("max_amount", 950)]).uid("rules")
    transactions = env.from_collection(
        [(f"acct-{i % 97:03d}", (i * 7919) % 1000) for i in range(5000)]).uid("transactions")
    (transactions.key_by(lambda t: t[0])
        .connect(rules.broadcast(RULES))
        .process(FlagOverLimit()).uid("flag-over-limit")
        .sink_to(FileSink.for_row_format(OUTPUT_DIR, Encoder.simple_string_encoder()).build()).uid("flagged"))
    result = env.execute("fraud-rules")
    flagged = sum(1 for name in os.listdir(OUTPUT_DIR) if not name.startswith(".")
                  for _ in open(os.path.join(OUTPUT_DIR, name)))
    print(f"processed {result.records} records in {result.epochs} epochs; flagged {flagged} transactions; "
          f"output in {OUTPUT_DIR}")


if __name__ == "__main__":
    main()
