"""Compaction of a ``FileSink``'s part files (PyFlink's ``enable_compact(FileCompactStrategy,
FileCompactor)``): many small part files of a bucket become one ``compacted-<first part file>``.

A compacting sink's committed part files do not become visible at once. Publishing moves them into
the hidden folder ``<base>/.compaction/`` and records them in ``.compaction/state.json``; when a
bucket's strategy fires, its files are joined into one visible file and the hidden ones deleted. As in
Flink's ``CompactCoordinator``, a bucket fires once ``num_checkpoints`` checkpoints have passed since
its oldest waiting file was written, or once its waiting files reach ``size_threshold`` bytes; a
bounded job's end fires every bucket.

Crash safety: the state file is replaced whole (``Storage.write``). A compaction first records its
plan (target → input files) in the state; carrying a plan out writes the target unless it exists,
then deletes the inputs and the plan. A driver that dies anywhere in between leaves a plan that the
next compaction completes, so no file is lost or visible twice."""

from __future__ import annotations

import json
import posixpath

from keyspan.io.storage import Storage

COMPACTION = ".compaction"
STATE = posixpath.join(COMPACTION, "state.json")
COMPACTED_PREFIX = "compacted-"


class FileCompactStrategy:
    """When a bucket's waiting part files are compacted."""

    def __init__(self, size_threshold: int = -1, num_checkpoints_before_compaction: int = -1,
                 num_compact_threads: int = -1):
        self.size_threshold = size_threshold
        self.num_checkpoints_before_compaction = num_checkpoints_before_compaction
        self.num_compact_threads = num_compact_threads

    @staticmethod
    def builder() -> "FileCompactStrategy.Builder":
        return FileCompactStrategy.Builder()

    class Builder:
        def __init__(self):
            self._size_threshold = -1
            self._checkpoints = -1
            self._threads = -1

        def enable_compaction_on_checkpoint(self, num_checkpoints_before_compaction: int) -> "FileCompactStrategy.Builder":
            """Compact a bucket once this many checkpoints have passed since its oldest waiting file."""
            if num_checkpoints_before_compaction <= 0:
                raise ValueError("Number of checkpoints before compaction should be more than 0.")
            self._checkpoints = num_checkpoints_before_compaction
            return self

        def set_size_threshold(self, size_threshold: int) -> "FileCompactStrategy.Builder":
            """Compact a bucket once its waiting files hold this many bytes (-1: no size limit)."""
            self._size_threshold = size_threshold
            return self

        def set_num_compact_threads(self, num_compact_threads: int) -> "FileCompactStrategy.Builder":
            """Accepted: the driver compacts after each checkpoint, one bucket after another."""
            if num_compact_threads <= 0:
                raise ValueError("Compact threads should be more than 0.")
            self._threads = num_compact_threads
            return self

        def build(self) -> "FileCompactStrategy":
            if self._size_threshold < 0 and self._checkpoints <= 0:
                raise ValueError("At least one trigger condition must be configured.")
            return FileCompactStrategy(self._size_threshold, self._checkpoints, self._threads)


class FileCompactor:
    """How a bucket's waiting files become one: their bytes joined (``concat_file_compactor``), or
    each copied on its own (``identical_file_compactor``)."""

    def __init__(self, joins: bool, file_delimiter: bytes = b""):
        self.joins = joins
        self.file_delimiter = file_delimiter

    @staticmethod
    def concat_file_compactor(file_delimiter: bytes = None) -> "FileCompactor":
        """The files' bytes one after another, ``file_delimiter`` between neighbours."""
        return FileCompactor(True, file_delimiter or b"")

    @staticmethod
    def identical_file_compactor() -> "FileCompactor":
        """Each file copied to its own compacted file (Flink's copies a single file)."""
        return FileCompactor(False)


class Compaction:
    """A compacting sink's waiting files under ``storage`` (the sink's base path)."""

    def __init__(self, storage: Storage, strategy: FileCompactStrategy, compactor: FileCompactor):
        self.storage = storage
        self.strategy = strategy
        self.compactor = compactor

    def add(self, epoch_handles: list[dict]) -> None:
        """A committed epoch's staged part files join the waiting ones (again after a crash: a file
        already moved is skipped; one already compacted is gone from the staging folder too)."""
        state = self._load()
        known = {e["final"] for e in state["waiting"]}
        fresh = [h for h in epoch_handles if h["final"] not in known and self.storage.exists(h["staged"])]
        if fresh:
            state["waiting"] += [{"final": h["final"], "staged": h["staged"], "epoch": h.get("epoch", 0),
                                  "bytes": self.storage.size(h["staged"]),
                                  "file": posixpath.join(COMPACTION, posixpath.basename(h["staged"]))}
                                 for h in fresh]
            self._save(state)
        epoch_finals = {h["final"] for h in epoch_handles}
        for entry in state["waiting"]:
            if entry["final"] in epoch_finals and self.storage.exists(entry["staged"]):
                self.storage.rename(entry["staged"], entry["file"])

    def compact_due(self, epoch: int) -> None:
        """Compacts the buckets whose strategy fires at the commit of ``epoch``."""
        self._compact(lambda files: self._fires(files, epoch))

    def compact_all(self) -> None:
        self._compact(lambda files: True)

    def _fires(self, files: list[dict], epoch: int) -> bool:
        s = self.strategy
        if 0 <= s.size_threshold <= sum(f["bytes"] for f in files):
            return True
        if s.num_checkpoints_before_compaction > 0:
            oldest = min(f["epoch"] for f in files)
            # an epoch after this one: the files of an earlier run of the job (started over); compact them now
            return oldest > epoch or epoch - oldest + 1 >= s.num_checkpoints_before_compaction
        return False

    def _compact(self, fires) -> None:
        state = self._load()
        if state["plan"]:
            self._carry_out(state)
        buckets: dict[str, list[dict]] = {}
        for entry in state["waiting"]:
            buckets.setdefault(posixpath.dirname(entry["final"]), []).append(entry)
        plan = []
        for files in buckets.values():
            if fires(files):
                files.sort(key=lambda f: (f["epoch"], f["final"]))
                groups = [files] if self.compactor.joins else [[f] for f in files]
                plan += [{"target": _compacted_name(group[0]["final"]), "inputs": [f["file"] for f in group]}
                         for group in groups]
        if plan:
            state["plan"] = plan
            self._save(state)
            self._carry_out(state)

    def _carry_out(self, state: dict) -> None:
        for step in state["plan"]:
            if not self.storage.exists(step["target"]):
                self.storage.write_with(step["target"], lambda f, inputs=step["inputs"]: self._join(inputs, f))
        done = {name for step in state["plan"] for name in step["inputs"]}
        self.storage.delete_files(sorted(done))
        state["waiting"] = [e for e in state["waiting"] if e["file"] not in done]
        state["plan"] = []
        self._save(state)

    def _join(self, inputs: list[str], out) -> None:
        for i, name in enumerate(inputs):
            if i and self.compactor.file_delimiter:
                out.write(self.compactor.file_delimiter)
            out.write(self.storage.read(name))

    def _load(self) -> dict:
        try:
            return json.loads(self.storage.read(STATE))
        except FileNotFoundError:
            return {"waiting": [], "plan": []}

    def _save(self, state: dict) -> None:
        self.storage.write(STATE, json.dumps(state, sort_keys=True).encode())


def _compacted_name(final: str) -> str:
    return posixpath.join(posixpath.dirname(final), COMPACTED_PREFIX + posixpath.basename(final))
