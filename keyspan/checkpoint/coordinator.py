"""The checkpoint coordinator on the driver: turns the reports of an epoch's tasks into one committed
checkpoint, or refuses the epoch when they do not describe one consistent cut.

Its steps, in order, for every epoch (Flink's ``CheckpointCoordinator`` with its failure manager;
Quix Streams' ``Checkpoint.commit``): collect the task reports (following forwarded upstream
reports) → verify they form one cut (one attempt per subtask, every expected subtask present) →
commit the manifest, offsets, tokens and sink handles in one metadata transaction → publish sink
output → delete files no retained checkpoint lists. A checkpoint whose files could not be written
fails without touching the previous one and the epoch runs again, up to the tolerable number.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from typing import Callable

from keyspan.checkpoint.handles import Manifest, TaskReport
from keyspan.checkpoint.manifest import manifest_paths, next_manifest
from keyspan.checkpoint.metadata import Lease, MetadataStore
from keyspan.checkpoint.savepoint import METADATA, checkpoint_dir, write_checkpoint_metadata
from keyspan.io import serde
from keyspan.io.storage import Storage

EPOCH_ATTEMPTS = 3  # runs of one epoch whose reports did not form one cut, before the job fails


class InconsistentEpoch(RuntimeError):
    """The epoch's reports are not one cut (two attempts of a subtask both reached the driver, or
    Spark's results never did): the epoch must run again."""


class CheckpointFailed(RuntimeError):
    """Checkpoints failed more often in a row than the job tolerates."""


class PublishFailed(RuntimeError):
    """A sink could not publish the output of a checkpoint that committed: the output stays staged and
    is published when the job runs again (``publish_pending``)."""


def collect_reports(rows: list[bytes]) -> dict[tuple[int, int], TaskReport]:
    """(stage, subtask) → that task's report, following forwarded upstream reports."""
    reports: dict[tuple[int, int], TaskReport] = {}
    stack = list(rows)
    seen = set()
    while stack:
        raw = stack.pop()
        if raw in seen:
            continue
        seen.add(raw)
        report: TaskReport = serde.loads(raw)
        key = (report.stage, report.subtask)
        known = reports.get(key)
        if known is not None and known.token != report.token:
            raise InconsistentEpoch(
                f"stage {key[0]} subtask {key[1]}: attempts {known.token} and {report.token} both "
                "fed this epoch's output")
        reports[key] = report
        stack.extend(report.upstream)
    return reports


def storage_failure(exc: BaseException) -> str | None:
    """The storage error inside a failed epoch (raised in a task or on the driver), if that is what it was."""
    text = f"{exc}\n" + "\n".join(getattr(exc, "__notes__", ()))
    for marker in ("StorageError: ", "keyspan storage: "):
        if marker in text:
            line = next(line for line in text.splitlines() if marker in line)
            if marker == "keyspan storage: ":  # the note names the file; the error is the line before it
                lines = text.splitlines()
                i = lines.index(line)
                return f"{lines[i - 1].strip()} ({line.strip()})" if i else line.strip()
            return line.strip()
    return None


class Retention:
    """Keeps the last N checkpoints' files; deletes a file once no retained checkpoint lists it."""

    def __init__(self, store: MetadataStore, storage: Storage, job_id: str, retained: int):
        self.store = store
        self.storage = storage
        self.retained = retained
        self.window: deque[tuple[int, set[str]]] = deque(
            (c["epoch"], manifest_paths(c["manifest"])) for c in store.list_checkpoints(job_id, include_discarded=False))

    def expiring(self, epoch: int, manifest: Manifest) -> tuple[list[int], set[str]]:
        """Checkpoints that drop out of the window once ``epoch`` commits, and the files only they
        list; the caller marks them discarded in the commit and deletes the files after it."""
        window = list(self.window) + [(epoch, manifest_paths(manifest))]
        dropped = window[: max(0, len(window) - self.retained)]
        kept = window[len(dropped):]
        live = set().union(*(paths for _, paths in kept))
        doomed = set().union(*(paths for _, paths in dropped)) - live if dropped else set()
        return [e for e, _ in dropped], {p for p in doomed if "://" not in p}  # savepoint files stay

    def committed(self, epoch: int, manifest: Manifest, doomed: set[str]) -> None:
        """Files go only after the commit that stopped listing them: a retained checkpoint never
        references a deleted file, whenever the driver dies."""
        self.window.append((epoch, manifest_paths(manifest)))
        expired = []
        while len(self.window) > self.retained:
            expired.append(checkpoint_dir(self.window.popleft()[0]))
        if self.storage.is_object_store:  # a folder is a key prefix: its _metadata.json goes in the same request
            self.storage.delete_files(doomed | {f"{folder}/{METADATA}" for folder in expired})
            return
        self.storage.delete_files(doomed)
        for folder in expired:
            self.storage.delete(folder, recursive=True)


class CheckpointCoordinator:
    """One job run's checkpoints. ``expected``: (stage, parallelism) of every stage whose subtasks
    must all report; ``counted``: stages whose records are the job's input records; ``sinks``:
    uid → task sink (``publish(handles)`` after the commit, idempotent); ``lease``: this driver's claim
    on the job, checked in every commit and before publishing; ``signing_key``: signs each retained
    checkpoint's ``_metadata.json``."""

    def __init__(self, store: MetadataStore, storage: Storage, job_id: str, *, retained: int, tolerable_failures: int,
                 expected: list[tuple[int, int]], counted: set[int], sinks: dict, operators: list[dict],
                 committed: dict | None, lease: Lease | None = None, job_name: str | None = None,
                 signing_key: bytes | None = None):
        self.store = store
        self.storage = storage
        self.job_id = job_id
        self.tolerable_failures = tolerable_failures
        self.expected = expected
        self.counted = counted
        self.sinks = sinks
        for uid, sink in sinks.items():
            if hasattr(sink, "use_checkpoint_storage"):  # a sink that stages its output with the checkpoint
                sink.use_checkpoint_storage(storage, uid)
        self.operators = operators
        self.committed = committed  # the latest committed checkpoint (a metadata row)
        self.retention = Retention(store, storage, job_id, retained)
        self.lease = lease
        self.job_name = job_name or job_id
        self.signing_key = signing_key
        self.consecutive_failures = 0
        self.files_lock = threading.Lock()  # savepoint copies hold it, so retention deletes no file they read
        self.commit_seconds: dict[str, float] = {}  # the last commit's steps (metadata, _metadata.json, ...)

    # -- one epoch -------------------------------------------------------------------------------
    def run_epoch(self, epoch: int, execute: Callable[[], list[bytes]], is_storage_failure=storage_failure,
                  on_failure: Callable[[int, str], None] | None = None) -> dict[tuple[int, int], TaskReport]:
        """Run the epoch's tasks (``execute`` returns their control rows) until their reports form
        one cut; a failed checkpoint write runs the epoch again within the failure budget."""
        inconsistent = 0
        while True:
            try:
                reports = collect_reports(execute())
                self.verify_cut(reports)
                return reports
            except InconsistentEpoch as exc:
                inconsistent += 1
                if inconsistent == EPOCH_ATTEMPTS:
                    raise
                print(f"keyspan: epoch {epoch} runs again: {exc}", file=sys.stderr)
            except Exception as exc:  # noqa: BLE001 — only checkpoint storage failures are tolerated
                cause = is_storage_failure(exc)
                if cause is None:
                    raise
                if on_failure is not None:
                    on_failure(epoch, cause)
                self._failed(epoch, cause)

    def verify_cut(self, reports: dict) -> None:
        for stage, parallelism in self.expected:
            missing = [i for i in range(parallelism) if (stage, i) not in reports]
            if missing:
                raise InconsistentEpoch(f"stage {stage}: no report from subtasks {missing}")

    def _failed(self, epoch: int, cause: str) -> None:
        self.consecutive_failures += 1
        if self.consecutive_failures > self.tolerable_failures:
            raise CheckpointFailed(
                f"job '{self.job_id}': checkpoint of epoch {epoch} failed {self.consecutive_failures} time(s) in a "
                f"row (tolerable_checkpoint_failure_number = {self.tolerable_failures}): {cause}\nNo state or output "
                "of that epoch was committed. Once the checkpoint storage takes writes again, running the job again "
                "resumes from its last checkpoint; to ride out short outages, raise "
                "get_checkpoint_config().set_tolerable_checkpoint_failure_number(n).")
        print(f"keyspan: checkpoint of epoch {epoch} failed ({cause}); failure {self.consecutive_failures} of "
              f"{self.tolerable_failures} tolerated, running the epoch again", file=sys.stderr)

    def commit(self, epoch: int, reports: dict[tuple[int, int], TaskReport], with_commit=None, **row) -> dict:
        """Commit the epoch in one metadata transaction, publish its sink output, then retention.
        ``with_commit(epoch, bytes_written, manifest)`` returns statements (a function of the
        connection) for the commit's transaction: statistics whoever sees the checkpoint must see
        too; ``row``: the rest of the checkpoint row."""
        handles, tokens, sinks = [], {}, {}
        records = bytes_written = 0
        for (stage, _), report in reports.items():
            handles.extend(report.handles)
            tokens.update(report.tokens)
            for h in report.sinks:
                sinks.setdefault(h["sink"], []).append(h)
            if stage in self.counted:
                records += report.records
            bytes_written += sum(h["bytes"] for h in report.handles)
        manifest = next_manifest(self.committed["manifest"] if self.committed else {}, handles)
        steps = [time.perf_counter()]
        # the tasks did not wait for the disk (state_io.snapshot, the sinks' staging): a commit's files are durable
        self.storage.sync_files([h["path"] for h in handles])
        for uid, staged in sinks.items():
            if uid in self.sinks:  # else publishing says the sink is gone
                self.sinks[uid].sync_staged(staged)
        steps.append(time.perf_counter())
        also = with_commit(epoch, bytes_written, manifest) if with_commit is not None else None
        with self.files_lock:
            discard, doomed = self.retention.expiring(epoch, manifest)
            self.committed = self.store.commit_checkpoint(
                discard=discard, fence=self.lease, also=also, job_id=self.job_id, epoch=epoch, manifest=manifest,
                tokens=tokens, sinks=sinks, operators=self._describe_operators(reports), bytes_written=bytes_written,
                records=records, **row)
        self.consecutive_failures = 0
        steps.append(time.perf_counter())
        write_checkpoint_metadata(self.storage, self.committed, job_name=self.job_name, key=self.signing_key)
        steps.append(time.perf_counter())
        if sinks:
            self.publish(self.committed)
        self._compact(lambda sink: sink.checkpoint_committed(epoch))
        steps.append(time.perf_counter())
        with self.files_lock:
            self.retention.committed(epoch, manifest, doomed)
        steps.append(time.perf_counter())
        self.commit_seconds = dict(zip(
            ("commit.sync_files", "commit.metadata", "commit.checkpoint_file", "commit.publish", "commit.retention"),
            (b - a for a, b in zip(steps, steps[1:]))))
        return self.committed

    def _describe_operators(self, reports: dict[tuple[int, int], TaskReport]) -> list[dict]:
        """Operators with the names and descriptors of their keyed states, as a savepoint records them."""
        known = {o["uid"]: o.get("states", []) for o in (self.committed or {}).get("operators", [])}
        for report in reports.values():
            for uid, states in report.states.items():
                merged = {d["name"]: d for d in known.get(uid, [])}
                merged.update({d["name"]: d for d in states})
                known[uid] = sorted(merged.values(), key=lambda d: d["name"])
        return [{**o, "states": known.get(o["uid"], [])} for o in self.operators]

    # -- sink output --------------------------------------------------------------------------------
    def publish(self, checkpoint: dict) -> None:
        if self.lease is not None:
            self.lease.check()  # a driver that lost the job publishes nothing
        for uid, handles in checkpoint["sinks"].items():
            sink = self.sinks.get(uid)
            if sink is None:
                raise CheckpointFailed(f"checkpoint {checkpoint['epoch']} has output of sink '{uid}', which is no "
                                       "longer in the job; it cannot be published")
            try:
                sink.publish(handles)
            except Exception as exc:
                raise PublishFailed(str(exc)) from exc
        self.store.mark_published(self.job_id, checkpoint["epoch"])

    def end_of_input(self) -> None:
        """A bounded job ended: output that compacting sinks hold back becomes visible."""
        self._compact(lambda sink: sink.end_of_input())

    def _compact(self, step) -> None:
        compacting = [s for s in self.sinks.values() if getattr(s, "compacts", False)]
        if compacting and self.lease is not None:
            self.lease.check()  # a driver that lost the job publishes nothing
        for sink in compacting:
            step(sink)

    def publish_pending(self) -> None:
        """Output of checkpoints that committed just before a crash is published on restart, and
        compacted as their commit would have compacted it. The newest checkpoint's compaction runs
        again too: a crash may have come between its publication and its compaction, and a later
        commit would otherwise join files of more epochs than a run without the crash (running it
        twice changes nothing: its buckets either fired and are empty, or do not fire)."""
        compacted = None
        for checkpoint in self.store.unpublished_checkpoints(self.job_id):
            self.publish(checkpoint)
            compacted = checkpoint["epoch"]
            self._compact(lambda sink: sink.checkpoint_committed(compacted))
        if self.committed is not None and self.committed["epoch"] != compacted:
            self._compact(lambda sink: sink.checkpoint_committed(self.committed["epoch"]))
