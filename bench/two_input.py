"""Two-input keyed operator cost: a KeyedCoProcessFunction join (transactions + customer
profiles) against the same work done by one KeyedProcessFunction over the union of the two
streams, in STREAMING mode (epochs of --per-epoch records per source) and in BATCH mode (one epoch).

    python bench/two_input.py [--transactions 40000] [--customers 2000] [--per-epoch 10000] [--repeats 2]

Every variant emits one line per transaction and checks the count; the numbers are wall-clock
seconds of env.execute (SparkSession already warm) and transactions per second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keyspan.common import Configuration  # noqa: E402
from keyspan.datastream import (  # noqa: E402
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    SinkFunction,
    StreamExecutionEnvironment,
)
from keyspan.datastream.execution_mode import RuntimeExecutionMode  # noqa: E402
from keyspan.datastream.state import ListStateDescriptor, ValueStateDescriptor  # noqa: E402
from keyspan.runtime import options  # noqa: E402
from keyspan.runtime.session import get_or_create_spark  # noqa: E402


class Join(KeyedCoProcessFunction):
    def open(self, runtime_context):
        self.profile = runtime_context.get_state(ValueStateDescriptor("profile"))
        self.waiting = runtime_context.get_list_state(ListStateDescriptor("waiting"))

    def process_element1(self, tx, ctx):
        profile = self.profile.value()
        if profile is None:
            self.waiting.add(tx)
        else:
            yield tx[0], profile

    def process_element2(self, profile, ctx):
        self.profile.update(profile[1])
        for tx in self.waiting.get():
            yield tx[0], profile[1]
        self.waiting.clear()


class UnionJoin(KeyedProcessFunction):
    """The same join over one tagged input (what a job without two-input operators writes)."""

    def open(self, runtime_context):
        self.join = Join()
        self.join.open(runtime_context)

    def process_element(self, value, ctx):
        side, record = value
        return (self.join.process_element1 if side == 0 else self.join.process_element2)(record, ctx)


class Count(SinkFunction):
    def __init__(self):
        self.n = 0

    def invoke(self, value, context):
        self.n += 1


def run(variant: str, mode: RuntimeExecutionMode, args) -> float:
    options.install(options.RunOptions(workdir=tempfile.mkdtemp(prefix="ks-two-input-"), fresh=True))
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_max_records_per_epoch(args.per_epoch).set_runtime_mode(mode)
    # both modes at parallelism 2: BATCH would otherwise run this small input at 1, as Flink's does
    env.configure(Configuration().set_string("execution.batch.adaptive.auto-parallelism.enabled", "false"))
    txs = env.from_collection([(i, i % args.customers) for i in range(args.transactions)])
    profiles = env.from_collection([(c, f"profile-{c}") for c in range(args.customers)])
    if variant == "connect":
        joined = txs.connect(profiles).key_by(lambda t: t[1], lambda p: p[0]).process(Join())
    else:
        joined = (txs.map(lambda t: (0, t)).union(profiles.map(lambda p: (1, p)))
                  .key_by(lambda v: v[1][1] if v[0] == 0 else v[1][0]).process(UnionJoin()))
    sink = Count()
    joined.uid("join").add_sink(sink)
    start = time.perf_counter()
    env.execute(f"two-input-{variant}")
    elapsed = time.perf_counter() - start
    assert sink.n == args.transactions, (variant, sink.n)
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--transactions", type=int, default=40_000)
    parser.add_argument("--customers", type=int, default=2_000)
    parser.add_argument("--per-epoch", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    get_or_create_spark(2)
    run("connect", RuntimeExecutionMode.BATCH, args)  # warm the workers
    for variant in ("connect", "union"):
        for mode in (RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH):
            times = [run(variant, mode, args) for _ in range(args.repeats)]
            best = min(times)
            print(f"{variant:8s} {mode.name:9s} best {best:6.2f} s  median {statistics.median(times):6.2f} s  "
                  f"{args.transactions / best:8.0f} tx/s")


if __name__ == "__main__":
    main()
