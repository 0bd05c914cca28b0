"""Per-epoch cost vs total state size: an epoch must cost what it touches (invariant 3).

Two runs of the same job in one process: the state is first grown to S keys (S = 100k, then
10 × S = 1M), then every epoch reads the same amount of input (20k events on 20k random keys of
that state). The per-epoch time (commit to commit) and bytes written must stay flat. With
``--timers`` every key also keeps a pending timer, moved on each of its records (Flink's
count-with-timeout pattern), so the timers to fire grow with the state as well.

    python bench/epoch_cost.py [--small 100000] [--factor 10] [--per-epoch 20000] [--epochs 12] [--timers]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.baselines import make_spark  # noqa: E402
from bench.running_sum import RunningSum  # noqa: E402
from keyspan.checkpoint.metadata import MetadataStore  # noqa: E402
from keyspan.datastream import StreamExecutionEnvironment  # noqa: E402
from keyspan.datastream.connectors.file_system import DiscardingSink  # noqa: E402
from keyspan.datastream.state import ValueStateDescriptor  # noqa: E402
from keyspan.runtime import options  # noqa: E402

LOAD_FILE = 100_000
WARM_EPOCHS = 4
TIMEOUT_MS = 24 * 3600 * 1000  # far enough that no timer fires during the run


class RunningSumWithTimeout(RunningSum):
    """The running sum, and a timeout timer per key a day after its last record."""

    def open(self, runtime_context):
        super().open(runtime_context)
        self.deadline = runtime_context.get_state(ValueStateDescriptor("deadline"))

    def process_element(self, value, ctx):
        timers = ctx.timer_service()
        previous = self.deadline.value()
        if previous is not None:
            timers.delete_processing_time_timer(previous)
        deadline = timers.current_processing_time() + TIMEOUT_MS
        timers.register_processing_time_timer(deadline)
        self.deadline.update(deadline)
        yield from super().process_element(value, ctx)

    def on_timer(self, timestamp, ctx):
        self.deadline.clear()
        self.total.clear()


def write_inputs(directory: str, state_keys: int, per_epoch: int, epochs: int, seed: int = 11) -> None:
    """Files in name order: load (every key once), then warm-up and measured epochs on random keys."""
    rng = np.random.default_rng(seed)
    os.makedirs(directory)
    names = []
    for i, lo in enumerate(range(0, state_keys, LOAD_FILE)):
        keys = np.arange(lo, min(lo + LOAD_FILE, state_keys), dtype=np.int64)
        names.append((f"a-load-{i:05d}.parquet", keys))
    for i in range(WARM_EPOCHS + epochs):
        keys = rng.choice(state_keys, size=per_epoch, replace=False).astype(np.int64)
        names.append((f"b-epoch-{i:05d}.parquet", keys))
    for name, keys in names:
        pq.write_table(pa.table({"key": keys, "value": np.ones(len(keys), dtype=np.int64)}),
                       os.path.join(directory, name))


def run(spark, directory: str, workdir: str, job: str, epochs: int, timers: bool = False) -> dict:
    options.install(options.RunOptions(workdir=workdir, fresh=True))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    events = spark.readStream.schema("key long, value long").option("maxFilesPerTrigger", 1).parquet(directory)
    function = RunningSumWithTimeout() if timers else RunningSum()
    env.from_spark(events, bounded=True).key_by(lambda r: r.key).process(function).uid("sum") \
        .sink_to(DiscardingSink())
    env.execute(job)
    checkpoints = MetadataStore(options.current().metadata()).list_checkpoints(job)
    measured = checkpoints[-epochs:]
    before = checkpoints[-epochs - 1]
    times = [b["created_at"] - a["created_at"] for a, b in zip([before] + measured[:-1], measured)]
    return {"epoch_s": times, "bytes": [c["bytes_written"] for c in measured],
            "records": [c["records"] for c in measured]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=100_000)
    ap.add_argument("--factor", type=int, default=10)
    ap.add_argument("--per-epoch", type=int, default=20_000)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--timers", action="store_true", help="every key keeps a pending timer, moved on each record")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="keyspan-epoch-cost-")
    try:
        spark = make_spark(cores=2)
        warm = os.path.join(work, "warm")
        write_inputs(warm, 20_000, 2_000, 3)  # start Python workers and JIT before measuring
        run(spark, warm, os.path.join(work, "wd-warm"), "epoch-cost-warm-up", 3, args.timers)
        results = {}
        for size in (args.small, args.small * args.factor):
            data = os.path.join(work, f"in-{size}")
            write_inputs(data, size, args.per_epoch, args.epochs)
            start = time.perf_counter()
            results[size] = run(spark, data, os.path.join(work, f"wd-{size}"), f"epoch-cost-{size}", args.epochs,
                                args.timers)
            r = results[size]
            print(f"state {size:>10,} keys: per-epoch mean {statistics.mean(r['epoch_s']) * 1000:7.1f} ms, "
                  f"median {statistics.median(r['epoch_s']) * 1000:7.1f} ms, max {max(r['epoch_s']) * 1000:7.1f} ms, "
                  f"bytes/epoch mean {statistics.mean(r['bytes']):>10,.0f} "
                  f"(run took {time.perf_counter() - start:.1f} s)", flush=True)
        small, large = results[args.small], results[args.small * args.factor]
        ratio = statistics.mean(large["epoch_s"]) / statistics.mean(small["epoch_s"])
        bytes_ratio = statistics.mean(large["bytes"]) / statistics.mean(small["bytes"])
        print(f"\n{args.factor}x the state, same input per epoch ({args.per_epoch:,} events): epoch time x{ratio:.2f}, "
              f"bytes written x{bytes_ratio:.2f} (target <= 1.2)")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
