"""The runner's observability hooks in one place: job metrics fed from committed epochs, checkpoint
statistics recorded in the metadata store, and the Prometheus registry the API exposes."""

from __future__ import annotations

import time
from collections import deque

from keyspan.checkpoint import stats as checkpoint_stats
from keyspan.metrics.prometheus import job_registry
from keyspan.metrics.registry import JobMetrics
from keyspan.runtime import autoscaler


def _stages(plan) -> list[dict]:
    stages = []
    for s in plan.stages:
        ops = s.plan.ops
        stages.append({"stage": s.plan.stage_id, "operator": ops[0].uid if ops else f"stage-{s.plan.stage_id}",
                       "name": " -> ".join(op.name for op in ops), "uids": [op.uid for op in ops],
                       "parallelism": s.plan.parallelism, "source": s.source is not None})
    return stages


class JobObserver:
    def __init__(self, runner):
        self.runner = runner
        self.metrics = JobMetrics(runner.job_id, _stages(runner.plan))
        self.metrics.restarts = max(0, len(runner.store.list_runs(runner.job_id)) - 1)
        self.registry = job_registry(self.metrics)
        self.sources = {}  # source index → (operator uid, reader) of the sources that can tell their backlog
        self.epoch_start = None
        self.epoch_end = None
        self.restoring = runner.committed is not None
        runner.progress.metrics = self.metrics
        self.autoscaler = (autoscaler.JobAutoscaler(runner, runner.autoscale, self.metrics)
                           if runner.autoscale else None)
        self.timeline: deque[dict] = deque(maxlen=1000)  # recent epochs' phases, for bench/latency.py
        self.phases: dict = {}
        self._mark = None

    def epoch_started(self, commit_wait: float = 0.0) -> None:
        """``commit_wait``: how long the epoch waited for the previous epoch's commit to end (it runs
        while Spark logs the previous batch): the part of a commit an epoch pays for."""
        self.epoch_start = time.time()
        self.phases = {"start": self.epoch_start, "commit.wait": commit_wait}
        self._mark = time.perf_counter()

    def phase(self, name: str, **parts: float) -> None:
        """The epoch's phase ``name`` just ended (seconds since the previous mark); ``parts``: its own
        breakdown. Where an epoch's fixed cost goes is what bounds the end-to-end latency."""
        now = time.perf_counter()
        self.phases[name] = now - self._mark
        self.phases.update(parts)
        self._mark = now

    def epoch_done(self, epoch: int) -> None:
        self.phases["epoch"] = epoch
        self.timeline.append(self.phases)

    def committing(self, epoch: int, bytes_written: int, manifest: dict):
        """Just before the commit point: the checkpoint's statistics, written in the commit's own
        transaction, so whoever sees the committed checkpoint also sees its duration and size."""
        self.epoch_end = time.time()
        return checkpoint_stats.checkpoint_recorder(self.runner.store, self.runner.job_id, epoch, self.epoch_start or
                                                    self.epoch_end, self.epoch_end, bytes_written,
                                                    checkpoint_stats.full_state_size(manifest))

    def committed(self, epoch: int, reports: dict) -> None:
        checkpoint = self.runner.committed
        bytes_written, manifest, records = checkpoint["bytes_written"], checkpoint["manifest"], checkpoint["records"]
        started, ended = self.epoch_start or self.epoch_end, self.epoch_end
        if self.restoring:  # the run's first epoch reads the restored state
            self.metrics.restored(ended - started)
            self.restoring = False
        self.metrics.epoch_committed(epoch, reports, started, ended, bytes_written, manifest,
                                     self.runner.committed.get("event_time"), records,
                                     in_driver=bool(self.phases.get("tasks.in_driver")))
        self._record_backlog()
        if self.autoscaler is not None:
            self.autoscaler.epoch_committed(autoscaler.sample_of(self.runner, reports, started, ended))

    def replanned(self, plan) -> None:
        """A live rescale: the tasks shown per operator follow the new parallelism."""
        self.metrics.set_stages(_stages(plan))

    def rescaled(self, request: dict) -> None:
        """A live rescale's first epoch committed: count it, and keep a row of it in the metadata store."""
        self.metrics.rescaled(request["pause_ms"])
        checkpoint_stats.record_rescale(self.runner.store, self.runner.job_id, request)

    def checkpoint_failed(self, epoch: int, cause: str) -> None:
        self.metrics.checkpoint_failed(epoch, cause)
        checkpoint_stats.record_failure(self.runner.store, self.runner.job_id, epoch, cause)

    def _record_backlog(self) -> None:
        runner = self.runner
        if not self.sources:
            for i, reader in runner.stages.readers.items():
                self.sources[i] = (runner.stages.source_uids[i], reader)
        offsets = runner.committed.get("source_offsets") or {}
        for i, (uid, reader) in self.sources.items():
            self.metrics.set_backlog(uid, reader.backlog(offsets.get(str(i))), reader.unit)
