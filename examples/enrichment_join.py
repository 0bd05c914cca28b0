"""A stateful stream-stream join: transactions enriched with the latest profile of their customer.

Two ordinary streams are connected and keyed by customer, so a customer's profile (from the
profile stream) and its transactions land in the same key group and share keyed state:

* a profile update is kept in ``ValueState`` with a TTL of one day: a customer who stops sending
  updates is forgotten (the state expires instead of growing forever);
* a transaction whose customer has a profile is emitted enriched at once; one that arrives before
  the profile waits in ``ListState`` and is emitted when the profile arrives, so the output does
  not depend on how the two streams interleave.

This is the PyFlink job unchanged except for its imports (``pyflink`` -> ``keyspan``).

Run:  keyspan run examples/enrichment_join.py --fresh     (or: python examples/enrichment_join.py)
"""

from __future__ import annotations

import os

from keyspan.common import Encoder, Time
from keyspan.datastream import KeyedCoProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.state import ListStateDescriptor, StateTtlConfig, ValueStateDescriptor

OUTPUT_DIR = os.path.abspath(os.environ.get("KEYSPAN_DEMO_DIR", os.path.join(".keyspan", "demo")) + "/enriched")
CUSTOMERS = 50


def ttl(days: int) -> StateTtlConfig:
    return (StateTtlConfig.new_builder(Time.days(days))
            .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
            .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
            .build())


class EnrichTransactions(KeyedCoProcessFunction):
    def open(self, runtime_context):
        profile = ValueStateDescriptor("profile")
        profile.enable_time_to_live(ttl(1))
        waiting = ListStateDescriptor("waiting")
        waiting.enable_time_to_live(ttl(1))
        self.profile = runtime_context.get_state(profile)
        self.waiting = runtime_context.get_list_state(waiting)

    def process_element1(self, transaction, ctx):
        """A transaction: enrich it now, or wait for the customer's profile."""
        profile = self.profile.value()
        if profile is None:
            self.waiting.add(transaction)
        else:
            yield self._enriched(transaction, profile)

    def process_element2(self, profile, ctx):
        """A profile update: remember it and release the transactions that waited for it."""
        self.profile.update(profile)
        for transaction in self.waiting.get():
            yield self._enriched(transaction, profile)
        self.waiting.clear()

    @staticmethod
    def _enriched(transaction, profile):
        tx_id, customer, amount = transaction
        _, name, tier = profile
        return f"{tx_id},{customer},{name},{tier},{amount}"


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_max_records_per_epoch(400)
    transactions = env.from_collection(
        [(f"tx-{i:05d}", f"cust-{(i * 7) % CUSTOMERS:03d}", (i * 7919) % 1000) for i in range(4000)]
    ).uid("transactions")
    profiles = env.from_collection(
        [(f"cust-{c:03d}", f"Customer {c}", ("gold", "silver", "bronze")[c % 3]) for c in range(CUSTOMERS)]
    ).uid("profiles")
    (transactions.connect(profiles)
        .key_by(lambda tx: tx[1], lambda profile: profile[0])
        .process(EnrichTransactions()).uid("enrich")
        .sink_to(FileSink.for_row_format(OUTPUT_DIR, Encoder.simple_string_encoder()).build()).uid("enriched"))
    result = env.execute("enrichment-join")
    enriched = sum(1 for name in os.listdir(OUTPUT_DIR) if not name.startswith(".")
                   for _ in open(os.path.join(OUTPUT_DIR, name)))
    print(f"processed {result.records} records in {result.epochs} epochs; {enriched} transactions enriched; "
          f"output in {OUTPUT_DIR}")


if __name__ == "__main__":
    main()
