"""What metrics cost per epoch, measured piece by piece (no Spark): the driver's bookkeeping of a
committed epoch (job metrics + the checkpoint-stats row in a SQLite metadata store), a task's
user-metric snapshot, and one Prometheus scrape. Compare with an epoch's time in running_sum.py.

    python bench/observability_cost.py [--epochs 500] [--subtasks 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keyspan.checkpoint import stats  # noqa: E402
from keyspan.checkpoint.handles import TaskReport  # noqa: E402
from keyspan.checkpoint.metadata import MetadataStore, default_url  # noqa: E402
from keyspan.metrics import metricbase  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

from keyspan.metrics.prometheus import job_registry  # noqa: E402
from keyspan.metrics.registry import JobMetrics  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=500)
    ap.add_argument("--subtasks", type=int, default=2)
    args = ap.parse_args()
    store = MetadataStore(default_url(tempfile.mkdtemp(prefix="ks-obs-")))
    stages = [{"stage": s, "operator": f"op{s}", "name": f"op{s}", "uids": [f"op{s}"], "parallelism": args.subtasks,
               "source": s == 0} for s in range(2)]
    metrics = JobMetrics("bench", stages)
    group = metricbase.operator_group("op1", 0)
    counter, meter, dist = group.counter("c"), group.meter("m"), group.add_group("k", "v").distribution("d")
    manifest = {"op1": [{"bytes": 4096, "kg": [0, 64], "kind": "delta", "epoch": 0}] * 8}

    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        counter.inc(100)
        meter.mark_event(100)
        dist.update(epoch)
        snapshot = metricbase.take_epoch_snapshot(["op1"], 0)
    task_us = (time.perf_counter() - t0) / args.epochs * 1e6

    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        reports = {(s, i): TaskReport(stage=s, subtask=i, token="t", attempt=0, handles=[], tokens={}, sinks=[],
                                      records=50_000, records_out=50_000, restored_bytes=0, upstream=[],
                                      metrics=snapshot if s == 1 else [])
                   for s in range(2) for i in range(args.subtasks)}
        now = time.time()
        metrics.epoch_committed(epoch, reports, now - 0.5, now, 65536, manifest, {"op0": {"wm": int(now * 1000)}},
                                100_000)
        with store.engine.begin() as c:  # alone here; a real commit runs it in the checkpoint's transaction
            stats.checkpoint_recorder(store, "bench", epoch, now - 0.5, now, 65536, 32768)(c)
    driver_ms = (time.perf_counter() - t0) / args.epochs * 1e3

    registry = job_registry(metrics)
    t0 = time.perf_counter()
    for _ in range(50):
        body = generate_latest(registry)
    scrape_ms = (time.perf_counter() - t0) / 50 * 1e3
    print(f"task snapshot (3 user metrics)      {task_us:8.1f} µs per task and epoch")
    print(f"driver bookkeeping + stats row       {driver_ms:8.2f} ms per epoch")
    print(f"one /metrics scrape ({len(body):,} bytes)  {scrape_ms:8.2f} ms")


if __name__ == "__main__":
    main()
