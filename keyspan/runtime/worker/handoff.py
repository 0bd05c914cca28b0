"""Catching up while a worker waits, instead of when its next task starts.

Spark gives a subtask's next task to whichever Python worker is idle, so the worker that gets it
often holds that subtask's state one epoch behind: with two workers, the tumbling-window benchmark
swapped them every epoch, and each task first read and applied the delta the other worker had just
written (about a tenth of the task's time). Here a worker that finished a task leaves a note on the
executor's local disk naming the delta files it wrote; another worker holding that subtask one
epoch behind reads the note and applies them while it waits for its next task. The changes count
only once the driver says it committed that attempt, which the next task checks as it checks its
own (``OperatorInstance.settle``); otherwise the instance is rebuilt from the checkpoint.

The same wait settles the worker's own epoch: confirming it writes the epoch's changes into RocksDB
(a fifth of a RocksDB job's time at 1 M keys, when the next task did it). The driver writes each
committed checkpoint's ``_metadata.json`` before the next epoch starts; once it lists the files this
attempt wrote, the attempt is committed and the worker confirms it while it waits."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time

from keyspan.checkpoint.handles import DELTA, is_keyed
from keyspan.checkpoint.savepoint import METADATA, checkpoint_dir
from keyspan.common.logs import get_logger
from keyspan.runtime.worker import instances

# A worker looks for notes every 5 ms for a second after its task (the first look after 5 ms, so the
# task's own ending goes first), then every 100 ms up to 30 s, unless its next task comes first.
NOTE_POLL_SECONDS = (0.005, 0.1)
NOTE_FAST_POLL_SECONDS = 1.0
NOTE_WAIT_SECONDS = 30.0

_log = get_logger("keyspan.runtime")
_pending: tuple[threading.Thread, threading.Event] | None = None


def notes_directory() -> str | None:
    """Where this executor's Python workers leave notes: inside the application's Spark files directory
    (a temporary folder Spark deletes at the end in local mode, the executor's working directory on a
    cluster). None outside a Spark worker: the driver runs every subtask of its small epochs itself, so
    nothing there is ever an epoch behind another process."""
    from pyspark import SparkFiles

    if not SparkFiles._is_running_on_worker:
        return None
    return os.path.join(SparkFiles.getRootDirectory(), "keyspan-handoff")


def _note_path(directory: str, cache_key: tuple) -> str:
    return os.path.join(directory, hashlib.sha1(repr(cache_key).encode()).hexdigest() + ".json")


def leave_notes(directory: str, ctx, parked: list, handles: list, token: str) -> None:
    """For each keyed instance a task just parked: the deltas it wrote for ``ctx.epoch`` under ``token``
    (none when it changed nothing). A note replaces the last one at once (write, then rename). None
    after a rescale: that epoch's changes are only in full snapshots, which no cache catches up from.
    A note that cannot be written is left out: the other workers then catch up when their task starts."""
    if ctx.full_all:
        return
    epoch = ctx.epoch
    try:
        os.makedirs(directory, exist_ok=True)
        for inst in parked:
            if not inst.catches_up:
                continue
            deltas = [h for h in handles if h["uid"] == inst.op.uid and h["kind"] == DELTA]  # all of this epoch
            path = _note_path(directory, inst.cache_key)
            with open(f"{path}.{os.getpid()}", "w") as f:
                json.dump({"epoch": epoch, "token": token, "deltas": deltas}, f)
            os.replace(f"{path}.{os.getpid()}", path)
    except OSError:
        _log.debug("could not leave a note of epoch %s in %s", epoch, directory, exc_info=True)


def _read_note(path: str, epoch: int) -> dict | None:
    try:
        with open(path) as f:
            note = json.load(f)
    except (OSError, ValueError):
        return None
    return note if isinstance(note, dict) and note.get("epoch") == epoch else None


def start(directory: str, ctx, parked: list, handles: list) -> None:
    """After a task of epoch ``ctx.epoch`` that parked ``parked`` having written ``handles``: in the
    background, bring this worker's other cached keyed subtasks of the run to that epoch, each as soon
    as its note for the epoch appears, and confirm the parked ones once the epoch's checkpoint lists
    their files: on a local or mounted file system only, where a look every few milliseconds is a
    ``stat``; on an object store or HDFS each look would be a request to a server."""
    wait()
    epoch = ctx.epoch
    behind = {key: _note_path(directory, key) for key, inst in instances._INSTANCES.items()
              if key[0] == ctx.run_id and inst.catches_up and (inst.pending is None or inst.pending[0] != epoch)}
    own = {}  # cache key → the paths of the files this attempt wrote for it
    if ctx.storage.is_local:
        for inst in parked:
            paths = {h["path"] for h in handles if h["uid"] == inst.op.uid and is_keyed(h)}
            if paths and inst.backend is not None:
                own[inst.cache_key] = paths
    if not behind and not own:
        return
    global _pending
    stop = threading.Event()
    thread = threading.Thread(target=_catch_up_when_noted, args=(ctx, behind, own, stop),
                              name="keyspan-catch-up", daemon=True)
    thread.start()
    _pending = (thread, stop)


def wait() -> None:
    """Before a task uses the cache: the background catch-up looks at the notes one last time (the
    notes of the epoch just committed are all written by now), applies what they name and stops."""
    global _pending
    if _pending is not None:
        thread, stop = _pending
        _pending = None
        stop.set()
        thread.join()


def _catch_up_when_noted(ctx, behind: dict, own: dict, stop: threading.Event) -> None:
    """``behind``: cache key → the path of its note; ``own``: see ``start``."""
    began = time.monotonic()
    while behind or own:
        waited = time.monotonic() - began
        stopped = stop.wait(NOTE_POLL_SECONDS[waited > NOTE_FAST_POLL_SECONDS])
        if stopped:  # the next task has come: it settles what is left, knowing what the driver committed
            own = {}
        if own and _confirm_committed(ctx, own):
            own = {}
        for key, path in list(behind.items()):
            note = _read_note(path, ctx.epoch)
            if note is not None:
                del behind[key]
                apply_note(key, note, ctx)
        if stopped or waited > NOTE_WAIT_SECONDS:
            return


def _confirm_committed(ctx, own: dict) -> bool:
    """Confirm the instances of ``own`` whose files the committed checkpoint of ``ctx.epoch`` lists;
    False while that checkpoint's ``_metadata.json`` is not there yet. An instance it does not list is
    left for its next task, which rolls it back."""
    rel = f"{checkpoint_dir(ctx.epoch)}/{METADATA}"
    try:
        if not ctx.storage.exists(rel):
            return False
        committed = {h["path"] for handles in json.loads(ctx.storage.read(rel))["state"].values() for h in handles}
    except (OSError, ValueError, KeyError, TypeError):  # half-written, or removed by retention already
        _log.debug("could not read the checkpoint of epoch %s", ctx.epoch, exc_info=True)
        return True
    for key, paths in own.items():
        inst = instances._INSTANCES.get(key)
        if inst is not None and inst.pending is not None and inst.pending[0] == ctx.epoch and paths <= committed:
            try:
                inst.confirm_committed()
            except Exception:  # the next task rebuilds the instance from the checkpoint
                _log.debug("could not confirm epoch %s of %s", ctx.epoch, key, exc_info=True)
                del instances._INSTANCES[key]
                instances.close(inst)
    return True


def apply_note(cache_key: tuple, note: dict, ctx) -> None:
    """Settle the cached instance by ``ctx`` (the epoch its worker just ran), catch it up to the last
    committed epoch, then apply the noted epoch's deltas and mark them as ahead of the checkpoint. An
    instance that cannot catch up is left for its next task; one that fails halfway is dropped."""
    inst = instances._INSTANCES.pop(cache_key, None)
    if inst is None:
        return
    try:
        inst.settle(ctx)
        if instances.catch_up(inst, ctx) is None:
            instances._INSTANCES[cache_key] = inst
            return
        instances.apply_deltas(inst, note["deltas"], ctx.storage)
        inst.ahead = (note["epoch"], note["token"])
        inst.timers.build_queues()
    except Exception:  # the next task rebuilds the instance from the checkpoint, and reports any error there
        _log.debug("could not apply epoch %s of %s ahead of time", note.get("epoch"), cache_key, exc_info=True)
        instances.close(inst)
        return
    instances._INSTANCES[cache_key] = inst
