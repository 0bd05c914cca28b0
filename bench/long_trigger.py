"""Epochs more than a minute apart: what an epoch costs when Spark would have stopped its Python workers.

    python bench/long_trigger.py [--intervals 20 70] [--epochs 3] [--keys 300000]

For each trigger interval a fresh unbounded job: ``FileSource.monitor_continuously()`` over JSON lines
→ ``key_by`` → a ``KeyedProcessFunction`` counting per key (heap state) → DiscardingSink, parallelism 2.
The first file holds one record per key (the state); then each epoch reads a file of 100 records,
written as soon as the previous epoch committed, so epochs run one trigger interval apart. Printed: each
epoch's tasks (ms, from the driver's start of the epoch to every task's report) and the slowest task's
state loading. Spark stops an executor's idle Python workers after a minute without a task; at 70 s
the workers sit idle longer than that between epochs, at 20 s they do not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keyspan.checkpoint.metadata import MetadataStore  # noqa: E402
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment  # noqa: E402
from keyspan.datastream.connectors.file_system import DiscardingSink, FileSource, StreamFormat  # noqa: E402
from keyspan.datastream.state import ValueStateDescriptor  # noqa: E402
from keyspan.runtime import options  # noqa: E402


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)


def write(folder: str, name: str, records: int, keys: int) -> None:
    tmp = os.path.join(folder, f".{name}")
    with open(tmp, "w") as f:
        f.writelines(json.dumps({"key": i % keys}) + "\n" for i in range(records))
    os.rename(tmp, os.path.join(folder, f"{name}.json"))


def run(interval_s: int, epochs: int, keys: int, work: str) -> list[dict]:
    folder = os.path.join(work, f"in-{interval_s}")
    os.makedirs(folder)
    write(folder, "0-state", keys, keys)
    options.install(options.RunOptions(workdir=os.path.join(work, f"ks-{interval_s}"), fresh=True, rest_api=False))
    job = f"long-trigger-{interval_s}"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(interval_s * 1000)
    source = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), folder).monitor_continuously().build()
    (env.from_source(source, None, "events").uid("events").key_by(lambda r: r["key"])
        .process(Count()).uid("count").sink_to(DiscardingSink()))
    client = env.execute_async(job)
    store = MetadataStore(options.current().metadata())
    for i in range(1, epochs + 2):
        while len(store.list_checkpoints(job)) < i:
            time.sleep(0.2)
        if i <= epochs:
            write(folder, f"1-more-{i:04d}", 100, keys)
    client.cancel()
    return client.get_job_execution_result().result().epoch_phases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--intervals", type=int, nargs="+", default=[20, 70], help="trigger intervals, seconds")
    ap.add_argument("--epochs", type=int, default=3, help="epochs of 100 records after the first one")
    ap.add_argument("--keys", type=int, default=300_000)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="keyspan-long-trigger-")
    for interval in args.intervals:
        phases = run(interval, args.epochs, args.keys, work)
        later = phases[1:]
        print(f"trigger {interval} s, {args.keys:,} keys: " + ", ".join(
            f"epoch {p['epoch']} {p['tasks'] * 1000:.0f} ms (state loading {p['tasks.restore'] * 1000:.0f})"
            for p in phases), flush=True)
        print(f"  epochs after the first: median {statistics.median(p['tasks'] for p in later) * 1000:.0f} ms "
              f"of tasks", flush=True)


if __name__ == "__main__":
    main()
