"""A keyed operator's timers fire by timestamp, then in the order they were registered; a deleted
timer never fires, a timer registered while firing fires in the next round (after the timers that
were due when the pass began, as PyFlink's), and a queue
rebuilt from the timer state (after a restore or a rollback, or once deleted timers' stale entries
would outnumber the timers) fires the same timers. The worker's ``TimerService`` on a real heap
backend and a real RocksDB backend, against a list of its queue entries."""

from __future__ import annotations

import shutil
import tempfile
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from keyspan.runtime.worker import timers as timers_module
from keyspan.runtime.worker.timers import TimerService
from keyspan.state.api import EVENT_TIME, PROCESSING_TIME, TIMER_STATE
from keyspan.datastream import EmbeddedRocksDBStateBackend
from keyspan.state.heap import HeapKeyedStateBackend

KEY_GROUPS = range(0, 4)
KEYS = ["a", "b", "c", "d"]


class Model:
    """The queue as a list of (domain, timestamp, key) entries in the order they were queued, and the
    timers still pending: an entry whose timer was deleted (or fired) is stale and skipped. The queue
    is built at first use, and rebuilt at the next use after it was invalidated or after more entries
    are stale (their timers deleted, not yet popped) than it was built with, plus ``slack``."""

    def __init__(self, backend, slack: int):
        self.backend = backend
        self.slack = slack
        self.pending: set[tuple[int, int, str]] = set()
        self.queue: list[tuple[int, int, str]] | None = None
        self.active = False  # the service looks at its queues only once timers were used
        self.until_rebuild = 0
        self.next_round: dict[int, list] | None = None  # while firing: entries registered meanwhile, per domain

    def register(self, domain, ts, key):
        self.active = True
        if (domain, ts, key) not in self.pending:
            self.pending.add((domain, ts, key))
            if self.queue is not None:
                (self.queue if self.next_round is None else self.next_round[domain]).append((domain, ts, key))

    def start_firing(self):
        self.next_round = {EVENT_TIME: [], PROCESSING_TIME: []}

    def end_firing(self):
        for domain in self.next_round:
            self._next_round_begins(domain)
        self.next_round = None

    def _next_round_begins(self, domain):
        waiting = self.next_round[domain] if self.next_round is not None else []
        if not waiting:
            return False
        if self.queue is not None:
            self.queue.extend(waiting)
        waiting.clear()
        return True

    def delete(self, domain, ts, key):
        self.active = True
        if (domain, ts, key) in self.pending:
            self.pending.remove((domain, ts, key))
            self.until_rebuild -= 1
            if self.until_rebuild < 0:
                self.queue = None

    def pop_due(self, domain, limit):
        self.active = True
        queue = self._queue()
        while True:
            due = [i for i, t in enumerate(queue) if t[0] == domain and t[1] <= limit]
            if not due:
                if not self._next_round_begins(domain):
                    return None
                queue = self._queue()
                continue
            first = min(due, key=lambda i: (queue[i][1], i))
            entry = queue.pop(first)
            if entry in self.pending:
                self.pending.remove(entry)
                return entry[1], entry[2]
            self.until_rebuild += 1

    def next_processing_time(self):
        if not self.active:
            return None
        times = [ts for domain, ts, _ in self._queue() if domain == PROCESSING_TIME]
        return min(times) if times else None

    def invalidate(self):
        self.queue = None

    def _queue(self):
        """Rebuilt from the pending timers if needed, equal timestamps in the backend's key order."""
        if self.queue is None:
            key_order = {key: i for i, (_, key) in enumerate(self.backend.keys_of(TIMER_STATE))}
            self.queue = sorted(self.pending, key=lambda t: key_order[t[2]])
            self.until_rebuild = len(self.pending) + self.slack
            for waiting in (self.next_round or {}).values():  # in the rebuilt queue: they fire this round
                waiting.clear()
        return self.queue


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
    # from the fired one (not positive: already due, so it fires in the pass's next round)
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
@pytest.mark.parametrize("slack", [timers_module.QUEUE_SLACK, 1], ids=["default-slack", "rebuilt-often"])
@pytest.mark.parametrize("backend_kind", ["heap", "rocksdb"])
def test_timers_fire_in_timestamp_then_registration_order(backend_kind, slack, script):
    with mock.patch.object(timers_module, "QUEUE_SLACK", slack):
        if backend_kind == "heap":
            check_timers_against_the_model(HeapKeyedStateBackend("op", KEY_GROUPS), script, slack)
            return
        local_dir = tempfile.mkdtemp(prefix="keyspan-timers-")
        backend = EmbeddedRocksDBStateBackend().create_keyed_backend("op", KEY_GROUPS, local_dir=local_dir)
        try:
            check_timers_against_the_model(backend, script, slack)
        finally:
            backend.close()
            shutil.rmtree(local_dir, ignore_errors=True)


def test_a_timer_deleted_and_set_again_on_every_record_leaves_the_queue_at_most_twice_the_timers():
    """Flink's count-with-timeout pattern: each record moves its key's timeout timer, leaving a stale
    queue entry behind, until the queues are rebuilt from the timer state."""
    backend = HeapKeyedStateBackend("op", KEY_GROUPS)
    timers = TimerService(backend)
    deadlines = {}
    for record in range(3 * timers_module.QUEUE_SLACK):
        key = KEYS[record % len(KEYS)]
        _use_key(backend, key)
        if key in deadlines:
            timers.delete_processing_time_timer(deadlines[key])
        deadlines[key] = 1_000_000 + record
        timers.register_processing_time_timer(deadlines[key])
        assert timers.next_processing_time() <= min(deadlines.values())  # a stale entry may come first
        queued = sum(1 if type(e) is tuple else len(e) - e[0] for e in timers._queues[PROCESSING_TIME]._entries.values())
        assert queued <= 2 * len(KEYS) + timers_module.QUEUE_SLACK
    fired = []
    while (ts := timers.pop_due(PROCESSING_TIME, 10**9)) is not None:
        fired.append((ts, backend.current_key))
    assert sorted(fired) == sorted((ts, key) for key, ts in deadlines.items())


def test_timers_that_only_fire_never_rebuild_the_queues():
    """A window's end timer is registered once and fires once, leaving no stale entry: however many
    come and go, the queues are never rebuilt from the timer state (a walk over every timer)."""
    backend = HeapKeyedStateBackend("op", KEY_GROUPS)
    timers = TimerService(backend)
    _use_key(backend, KEYS[0])
    timers.register_event_time_timer(0)
    assert timers.pop_due(EVENT_TIME, 0) == 0
    queues = timers._queues
    fired = 0
    for window_end in range(1, 3 * timers_module.QUEUE_SLACK // len(KEYS)):
        for key in KEYS:
            _use_key(backend, key)
            timers.register_event_time_timer(window_end)
        while timers.pop_due(EVENT_TIME, window_end) is not None:
            fired += 1
    assert fired > timers_module.QUEUE_SLACK + 1
    assert timers._queues is queues


def check_timers_against_the_model(backend, script, slack):
    timers = TimerService(backend)
    model = Model(backend, slack)
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
            timers.start_firing()
            model.start_firing()
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
            timers.end_firing()
            model.end_firing()
        else:
            timers.invalidate()  # the state changed under the queues: they are rebuilt from it
            model.invalidate()
        assert timers.next_processing_time() == model.next_processing_time()


@pytest.mark.parametrize("backend_kind", ["heap", "rocksdb"])
def test_a_fired_timer_is_taken_from_state_in_one_step_and_a_rollback_restores_it(backend_kind, tmp_path):
    """``pop_due`` takes the fired timer's entry (``_entry_take``: its namespaces, then gone); the undo log
    still brings it back when the epoch rolls back."""
    if backend_kind == "heap":
        backend = HeapKeyedStateBackend("op", KEY_GROUPS)
    else:
        backend = EmbeddedRocksDBStateBackend().create_keyed_backend("op", KEY_GROUPS, local_dir=str(tmp_path))
    try:
        timers = TimerService(backend)
        for key in KEYS[:2]:
            _use_key(backend, key)
            timers.set_timer_namespaces(EVENT_TIME, 10, ("w1", "w2"), new=True)
            timers.register_event_time_timer(20)
        backend.confirm()
        assert timers.pop_due(EVENT_TIME, 10) == 10 and timers.fired_namespaces == ("w1", "w2")
        fired_key = backend.current_key
        assert timers.timer_namespaces(EVENT_TIME, 10) is None
        assert timers.timer_namespaces(EVENT_TIME, 20) is True  # the key's other timer stays
        backend.rollback()
        timers.invalidate()
        _use_key(backend, fired_key)
        assert timers.timer_namespaces(EVENT_TIME, 10) == ("w1", "w2")
        fired = []
        while timers.pop_due(EVENT_TIME, 20) is not None:
            fired.append((backend.current_key, timers.fired_namespaces))
        assert sorted(fired, key=repr) == [("a", ("w1", "w2")), ("a", True), ("b", ("w1", "w2")), ("b", True)]
    finally:
        backend.close()


@pytest.mark.parametrize("backend_kind", ["heap", "heap with a record hook", "rocksdb"])
def test_timers_registered_and_fired_many_at_once_equal_them_one_at_a_time_and_roll_back(backend_kind, tmp_path):
    """``add_timer_namespaces`` and ``pop_due_many`` (the window operator's chunk of new windows and its
    round of firing) leave the same timers, and fire the same ones in the same order, as
    ``set_timer_namespaces`` and ``pop_due`` one by one: a namespace joins a key's timer once, a timer
    holding True (saved before timers held namespaces) is left for the caller, a deleted timer's stale
    entry is skipped; and a rollback brings back the timers fired in bulk."""
    def backend_of(name):
        if backend_kind == "rocksdb":
            return EmbeddedRocksDBStateBackend().create_keyed_backend(name, KEY_GROUPS, local_dir=str(tmp_path / name))
        backend = HeapKeyedStateBackend(name, KEY_GROUPS)
        if backend_kind == "heap with a record hook":
            backend._add_record_hook(lambda: None)
        return backend

    bulk, one = backend_of("bulk"), backend_of("one")
    try:
        services = TimerService(bulk), TimerService(one)
        for backend, timers in zip((bulk, one), services):
            _use_key(backend, "d")
            timers.register_event_time_timer(30)  # a timer as saved before timers held their namespaces
            _use_key(backend, "a")
            timers.set_timer_namespaces(EVENT_TIME, 20, ("w0",), new=True)
            backend.confirm()
            timers.build_queues()
        rows = [("a", 0, 20, "w1"), ("b", 1, 10, "w1"), ("a", 0, 20, "w1"), ("c", 2, 20, "w2"), ("d", 3, 30, "w3"),
                ("b", 1, 40, "w4")]
        assert services[0].add_timer_namespaces(EVENT_TIME, rows) == [("w0",), None, ("w0", "w1"), None, True, None]
        for key, _, ts, namespace in rows:
            _use_key(one, key)
            held = services[1].timer_namespaces(EVENT_TIME, ts)
            if held is None:
                services[1].set_timer_namespaces(EVENT_TIME, ts, (namespace,), new=True)
            elif held is not True and namespace not in held:
                services[1].set_timer_namespaces(EVENT_TIME, ts, (*held, namespace))
        for backend, timers in zip((bulk, one), services):
            _use_key(backend, "c")
            timers.delete_event_time_timer(20)  # its queue entry goes stale
        fired_one = []
        while (ts := services[1].pop_due(EVENT_TIME, 35)) is not None:
            fired_one.append((ts, one.current_key, services[1].fired_namespaces))
        assert fired_one == [(10, "b", ("w1",)), (20, "a", ("w0", "w1")), (30, "d", True)]
        first = services[0].pop_due_many(EVENT_TIME, 35, 2)  # two entries of two timestamps
        fired_bulk = [(ts, key, namespaces) for ts, _, key, namespaces in first]
        while due := services[0].pop_due_many(EVENT_TIME, 35, 1):  # the next one meets the stale entry alone
            assert len(due) == 1
            fired_bulk += [(ts, key, namespaces) for ts, _, key, namespaces in due]
        assert fired_bulk == fired_one
        bulk.rollback()
        services[0].invalidate()
        everything = [(ts, key, namespaces) for ts, _, key, namespaces in services[0].pop_due_many(EVENT_TIME, 40, 10)]
        assert everything == [(20, "a", ("w0",)), (30, "d", True)]  # the committed epoch's timers, none fired
    finally:
        bulk.close()
        one.close()


def test_a_chunk_s_new_timers_share_their_entry_and_namespace_so_a_checkpoint_stores_each_once():
    """``add_timer_namespaces`` gives the new timers of one timestamp one entry object, and those of one
    namespace one tuple, which a checkpoint pickles once per key group: the delta holds the same timers
    as registering them one by one, in fewer bytes."""
    from keyspan.state.backend import encode_section
    from keyspan.io import serde

    window = ("window", 1_795_132_800_000, 1_795_132_860_000)  # the operator's one shared object per window
    rows = [(i, i % len(KEY_GROUPS), 1_795_132_859_999, window) for i in range(400)]
    bulk, one = HeapKeyedStateBackend("bulk", KEY_GROUPS), HeapKeyedStateBackend("one", KEY_GROUPS)
    TimerService(bulk).add_timer_namespaces(EVENT_TIME, rows)
    by_one = TimerService(one)
    for key, kg, ts, namespace in rows:
        one.set_current_key(key, kg)
        by_one.set_timer_namespaces(EVENT_TIME, ts, (namespace,), new=True)
    bulk_sections, one_sections = bulk.changed_sections(), one.changed_sections()
    assert bulk_sections == one_sections
    for kg, section in bulk_sections.items():
        timers = section[TIMER_STATE][0]
        assert len({id(entry) for held in timers.values() for entry in held}) == 1
        assert len({id(namespaces) for held in timers.values() for namespaces in held.values()}) == 1
        bulk_bytes = encode_section(section, "windows", kg)
        assert serde.loads(bulk_bytes) == one_sections[kg]
        assert len(bulk_bytes) < 0.6 * len(encode_section(one_sections[kg], "windows", kg))
