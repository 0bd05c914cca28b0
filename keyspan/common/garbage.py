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

YOUNG_COLLECTION_EVERY = 100_000  # container allocations between young collections (Python's default: 700)
# Unfreezing hands every frozen object back to the collector, and Python's next full collection then
# walks the worker's whole state before the task can end (10–25 ms per task with the window benchmark's
# state). Objects stay frozen across this many tasks; only reference cycles among them wait that long
# to be freed, as reference counting frees everything else at once. What a task leaves alive (the state
# it added) is frozen at its end too: back at Python's default thresholds, the first collection would
# otherwise walk all of it before the task could report.
UNFREEZE_EVERY_TASKS = 16

_depth = 0
_tasks_since_unfreeze = 0
_saved_thresholds: tuple[int, ...] = ()


@contextlib.contextmanager
def streaming_records():
    """While it lasts, objects that existed before are left out of collections (``gc.freeze``), and
    young collections run every ``YOUNG_COLLECTION_EVERY`` allocations, so most records are freed before
    any collection sees them. Cycles are still found, a little later (those a task leaves behind after its
    last young collection once its objects go back to the collector); nested or interleaved uses (two
    tasks' generators in one process) restore Python's thresholds when the last one ends, and every
    ``UNFREEZE_EVERY_TASKS`` tasks its frozen objects too."""
    global _depth, _saved_thresholds, _tasks_since_unfreeze
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
            _tasks_since_unfreeze += 1
            if _tasks_since_unfreeze >= UNFREEZE_EVERY_TASKS:
                _tasks_since_unfreeze = 0
                gc.unfreeze()
