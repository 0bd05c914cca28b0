"""How long a job waits for its Python workers: PySpark's own daemon against keyspan's
(``keyspan.runtime.worker.daemon``, which local sessions use), each in a fresh process and session.

    python bench/worker_startup.py [--repeats 3]

Per variant and repeat, a new Python process creates the session as ``keyspan run`` does
(``get_or_create_spark``, local[2]) and runs a small keyspan job twice (200 records, a keyed
running sum, four epochs, run to its end): the first run starts the Python workers (the daemon
starts, forks a worker per task, each imports what a keyspan task imports), the second reuses them.
The variants alternate so machine load falls on both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DAEMONS = {"PySpark's daemon": "pyspark.daemon", "keyspan's daemon": "keyspan.runtime.worker.daemon"}


def one_run(daemon: str) -> dict:
    """In this (fresh) process: the two timings of the module docstring, in seconds."""
    from bench.running_sum import RunningSum
    from keyspan.common import Row
    from keyspan.datastream import StreamExecutionEnvironment
    from keyspan.datastream.connectors.file_system import DiscardingSink
    from keyspan.runtime import options
    from keyspan.runtime.session import get_or_create_spark

    spark = get_or_create_spark(2, conf={"spark.python.daemon.module": daemon}, ui=False)
    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == daemon
    timings = {}
    for name in ("first job, workers start", "same job, workers reused"):
        with tempfile.TemporaryDirectory() as work:
            options.install(options.RunOptions(workdir=work, fresh=True, rest_api=False))
            env = StreamExecutionEnvironment.get_execution_environment()
            env.set_parallelism(2)
            env.set_max_records_per_epoch(50)
            env.from_collection([Row(key=f"k{i % 8}", value=i) for i in range(200)]).key_by(lambda r: r.key) \
                .process(RunningSum()).add_sink(DiscardingSink())
            began = time.perf_counter()
            env.execute(name)
            timings[name] = time.perf_counter() - began
    spark.stop()
    return timings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one variant in this process
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one)))
        return
    results = {name: [] for name in DAEMONS}
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    for i in range(args.repeats):
        for name, module in (DAEMONS.items() if i % 2 == 0 else reversed(DAEMONS.items())):
            out = subprocess.run([sys.executable, __file__, "--one", module], env=env, capture_output=True,
                                 text=True, check=True).stdout
            results[name].append(json.loads(out.strip().splitlines()[-1]))
            print(f"run {i}, {name}: " + ", ".join(f"{k} {v:.2f} s" for k, v in results[name][-1].items()),
                  flush=True)
    print(f"\nseconds, median of {args.repeats} fresh processes (load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}):")
    phases = list(results[next(iter(DAEMONS))][0])
    print(f"{'':34}" + "".join(f"{p:>34}" for p in phases))
    medians = {name: [statistics.median(r[p] for r in runs) for p in phases] for name, runs in results.items()}
    for name, values in medians.items():
        print(f"{name:34}" + "".join(f"{v:>34.2f}" for v in values))
    old, new = medians.values()
    print(f"{'saved':34}" + "".join(f"{o - n:>34.2f}" for o, n in zip(old, new)))


if __name__ == "__main__":
    main()
