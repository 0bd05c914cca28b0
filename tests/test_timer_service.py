"""A keyed operator's timers fire by timestamp, then in the order they were registered; a deleted
timer never fires, a timer registered while firing fires in its place in that order, and a queue
rebuilt from the timer state (after a restore or a rollback) fires the same timers. The worker's
``TimerService`` on a real heap backend and a real RocksDB backend, against a list of its queue
entries."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from keyspan.runtime.worker.timers import TimerService
from keyspan.state.api import EVENT_TIME, PROCESSING_TIME, TIMER_STATE
from keyspan.datastream import EmbeddedRocksDBStateBackend
from keyspan.state.heap import HeapKeyedStateBackend

KEY_GROUPS = range(0, 4)
KEYS = ["a", "b", "c", "d"]


class Model:
    """The queue as a list of (domain, timestamp, key) entries in the order they were queued, and the
    timers still pending: an entry whose timer was deleted (or fired) is stale and skipped."""

    def __init__(self):
        self.pending: set[tuple[int, int, str]] = set()
        self.queue: list[tuple[int, int, str]] = []

    def register(self, domain, ts, key):
        if (domain, ts, key) not in self.pending:
            self.pending.add((domain, ts, key))
            self.queue.append((domain, ts, key))

    def delete(self, domain, ts, key):
        self.pending.discard((domain, ts, key))

    def pop_due(self, domain, limit):
        while True:
            due = [i for i, t in enumerate(self.queue) if t[0] == domain and t[1] <= limit]
            if not due:
                return None
            first = min(due, key=lambda i: (self.queue[i][1], i))
            entry = self.queue.pop(first)
            if entry in self.pending:
                self.pending.remove(entry)
                return entry[1], entry[2]

    def next_processing_time(self):
        times = [ts for domain, ts, _ in self.queue if domain == PROCESSING_TIME]
        return min(times) if times else None

    def rebuild(self, key_order):
        """The queue rebuilt from the pending timers, equal timestamps in the backend's key order."""
        self.queue = sorted(self.pending, key=lambda t: key_order[t[2]])


def _use_key(backend, key):
    backend.set_current_key(key, KEYS.index(key) % len(KEY_GROUPS))


def _register(timers, domain, ts):
    if domain == EVENT_TIME:
        timers.register_event_time_timer(ts)
    else:
        timers.register_processing_time_timer(ts)


def _delete(timers, domain, ts):
    if domain == EVENT_TIME:
        timers.delete_event_time_timer(ts)
    else:
        timers.delete_processing_time_timer(ts)


timestamps = st.integers(min_value=0, max_value=6)  # few timestamps: timers share them
domains = st.sampled_from([EVENT_TIME, PROCESSING_TIME])
keys = st.sampled_from(KEYS)
steps = st.one_of(
    st.tuples(st.just("register"), domains, timestamps, keys),
    st.tuples(st.just("delete"), domains, timestamps, keys),
    # fire what ``limit`` has passed; the first firing registers one more timer for its key, ``offset``
    # from the fired one (not positive: already due, so it fires in the same pass)
    st.tuples(st.just("fire"), domains, timestamps, st.integers(min_value=-3, max_value=3)),
    st.tuples(st.just("rebuild")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=40))
@example([("register", PROCESSING_TIME, 3, "a"), ("register", PROCESSING_TIME, 3, "b"),
          ("delete", PROCESSING_TIME, 3, "a"), ("register", PROCESSING_TIME, 3, "a"),
          ("fire", PROCESSING_TIME, 5, 1), ("fire", PROCESSING_TIME, 6, 0)])
@example([("register", PROCESSING_TIME, 3, "a"), ("register", PROCESSING_TIME, 3, "b"),
          ("fire", PROCESSING_TIME, 3, 1)])
@pytest.mark.parametrize("backend_kind", ["heap", "rocksdb"])
def test_timers_fire_in_timestamp_then_registration_order(backend_kind, script):
    if backend_kind == "heap":
        check_timers_against_the_model(HeapKeyedStateBackend("op", KEY_GROUPS), script)
        return
    local_dir = tempfile.mkdtemp(prefix="keyspan-timers-")
    backend = EmbeddedRocksDBStateBackend().create_keyed_backend("op", KEY_GROUPS, local_dir=local_dir)
    try:
        check_timers_against_the_model(backend, script)
    finally:
        backend.close()
        shutil.rmtree(local_dir, ignore_errors=True)


def check_timers_against_the_model(backend, script):
    timers = TimerService(backend)
    model = Model()
    for step in script:
        kind = step[0]
        if kind in ("register", "delete"):
            _, domain, ts, key = step
            _use_key(backend, key)
            (_register if kind == "register" else _delete)(timers, domain, ts)
            (model.register if kind == "register" else model.delete)(domain, ts, key)
        elif kind == "fire":
            _, domain, limit, offset = step
            follow_up = True
            while True:
                expected = model.pop_due(domain, limit)
                fired = timers.pop_due(domain, limit)
                assert (fired, backend.current_key if fired is not None else None) == (
                    (expected[0], expected[1]) if expected else (None, None))
                if fired is None:
                    break
                assert timers.next_processing_time() == model.next_processing_time()
                if follow_up:  # as on_timer would, for the fired key
                    _register(timers, domain, max(0, fired + offset))
                    model.register(domain, max(0, fired + offset), backend.current_key)
                    follow_up = False
        else:
            timers.invalidate()  # the state changed under the queues: they are rebuilt from it
            model.rebuild({key: i for i, (_, key) in enumerate(backend.keys_of(TIMER_STATE))})
        assert timers.next_processing_time() == model.next_processing_time()
