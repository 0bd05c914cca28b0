"""Python's cyclic garbage collector while a worker streams records.

A task creates and drops millions of short-lived containers: records, chunks, their pickles. Reference
counting frees them; the cyclic collector only has to find reference cycles, which records do not form.
With Python's default settings it still runs every 700 allocations, each time walking whatever is alive
at that moment (the chunk in hand, the exits' buffers), and every so often a full collection walks the
worker's whole cached state again. In the tumbling-window benchmark that was a quarter of the Python
workers' CPU time (docs/benchmarks.md, "Python's garbage collector in the workers")."""

from __future__ import annotations

import contextlib
import gc
import sys

YOUNG_COLLECTION_EVERY = 100_000  # container allocations between young collections (Python's default: 700)
# Unfreezing hands every frozen object back to the collector, and Python's next full collection then
# walks the worker's whole state (170–350 ms with the window benchmark's state, in the worker between
# two tasks). So objects stay frozen across tasks, and what a task leaves alive (the state it added) is
# frozen at its end too. They go back to the collector by Python's own rule for full collections: once
# the worker has grown by a quarter from its smallest size at the end of a task since they last went back.
# Only reference cycles among them wait that long to be freed (about 180 small objects per task in that
# benchmark), as reference counting frees everything else at once; like Python's rule, this bounds
# them to about a quarter of the worker, and keeps the cost of full collections in proportion to what
# the tasks made. The worker's size is counted twice, and either growing by a quarter is enough: its
# objects, as its allocator's blocks (``sys.getallocatedblocks``, a sum over arenas; the frozen count,
# ``gc.get_freeze_count``, walks every frozen object: 20–50 ms per task there), and its resident
# memory, for cycles that hold large buffers (Arrow batches, NumPy arrays) the allocator does not count.
GROWTH_BEFORE_UNFREEZE = 0.25

_depth = 0
_smallest: tuple[int, int] | None = None  # the worker's size at a task's end since frozen objects went back
_saved_thresholds: tuple[int, ...] = ()


@contextlib.contextmanager
def streaming_records():
    """While it lasts, objects that existed before are left out of collections (``gc.freeze``), and
    young collections run every ``YOUNG_COLLECTION_EVERY`` allocations, so most records are freed before
    any collection sees them. Cycles are still found, a little later (those a task leaves behind after its
    last young collection once its objects go back to the collector); nested or interleaved uses (two
    tasks' generators in one process) restore Python's thresholds when the last one ends, and hand the
    frozen objects back once the worker grew by ``GROWTH_BEFORE_UNFREEZE``."""
    global _depth, _saved_thresholds, _smallest
    if _depth == 0:
        _saved_thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(YOUNG_COLLECTION_EVERY, *_saved_thresholds[1:])
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            gc.freeze()
            gc.set_threshold(*_saved_thresholds)
            size = worker_size()
            if _smallest is None:
                _smallest = size
            elif any(now > least * (1 + GROWTH_BEFORE_UNFREEZE) for now, least in zip(size, _smallest)):
                _smallest = None
                gc.unfreeze()
            else:
                _smallest = tuple(map(min, size, _smallest))


def worker_size() -> tuple[int, int]:
    """This process's Python objects (its allocator's blocks) and resident memory (pages; 0 where
    ``/proc/self/statm`` does not exist)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            resident = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        resident = 0
    return sys.getallocatedblocks(), resident
