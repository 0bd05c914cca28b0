"""Timers of a keyed operator: keyed state, so they are checkpointed, restored and rescaled with their
key group like any other state.

Each key's pending timers live in the internal map state ``__ks_timers`` ({(domain, timestamp): True,
or the timer's namespaces}), which de-duplicates per (key, domain, timestamp). A queue per domain
orders them for firing; it lives only in the worker and is rebuilt from the state whenever the state
was restored or rolled back, so it can never disagree with what a checkpoint holds.

Timers fire in rounds, as PyFlink's do: a firing pass fires the timers due when it starts, in
timestamp order, and a timer registered meanwhile waits for the next round, even one due earlier
than timers left in this round (``ContinuousEventTimeTrigger`` at the end of the input fires a
window twice, not once per interval the watermark jumped). Java's timer service would fire it at once.

A user's timers carry no namespace (``True``). The window operator's do, as in Flink's internal timer
service: one timer per (key, domain, timestamp) holds the windows that registered it, so a window's
timer costs one state entry, not a second map from timestamp to windows beside it.
"""

from __future__ import annotations

import heapq

from keyspan.datastream import timerservice
from keyspan.common.clock import LONG_MIN, wall_clock_ms
from keyspan.state.api import EVENT_TIME, PROCESSING_TIME, TIMER_STATE, MapStateDescriptor  # noqa: F401

# A deleted or re-queued timer leaves its old queue entry behind until its time comes. Once the stale
# entries in the queues outnumber the timers they were built with (plus this many), the queues are
# rebuilt from the timer state; each rebuild's cost is paid for by the entries that went stale since
# the last one. Timers that are registered and fire (a window's end) leave nothing stale.
QUEUE_SLACK = 10_000


class TimerService(timerservice.TimerService):
    """PyFlink's ``TimerService`` for one keyed operator instance (``ctx.timer_service()``)."""

    def __init__(self, backend):
        self._backend = backend
        self._state = None
        self._queues: tuple[DueQueue, DueQueue] | None = None
        self._stale_until_rebuild = 0
        self._next_round: tuple[list, list] | None = None  # per domain, while firing: timers registered meanwhile
        self.watermark = LONG_MIN
        self.fired_namespaces = None  # the namespaces of the timer ``pop_due`` returned last
        self.processing_ended = False  # BATCH mode's end of input: no processing-time timer is registered

    # -- the user's view --------------------------------------------------------------------------
    def current_processing_time(self) -> int:
        return wall_clock_ms()

    def current_watermark(self) -> int:
        return self.watermark

    def register_event_time_timer(self, timestamp: int) -> None:
        self._register(EVENT_TIME, timestamp)

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._register(PROCESSING_TIME, timestamp)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._delete(EVENT_TIME, timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._delete(PROCESSING_TIME, timestamp)

    # -- the runtime's view -------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """Whether this instance has used timers (or restored some), so firing must look at them."""
        return self._state is not None or TIMER_STATE in self._backend.restored_state_names()

    def invalidate(self) -> None:
        """The state changed under the queues (restore, rollback): rebuild them before next use."""
        self._queues = None

    def build_queues(self) -> None:
        """Build the queues now, while the worker waits for its next task, rather than at first use."""
        if self.active:
            self._ensure_queues()

    def requeue(self, key_group: int, puts: dict, deletes, before) -> None:
        """A restored delta sets the timers of some keys of ``key_group`` (``puts``: key → its timers) and
        deletes those of others, which held ``before`` (key → timers; None when unknown). Queue the new
        timers instead of rebuilding the queues from every timer: every timer in state is queued already.
        The timers it removed leave stale entries. Where the timers before are unknown, a timer queued
        already is queued twice; ``pop_due`` fires the first entry and skips the other, as any stale one."""
        if self._queues is None:
            return
        queues = self._queues
        if before is None:
            for key, timers in puts.items():
                for entry in timers:
                    queues[entry[0]].push(entry[1], key_group, key)
            self._staled(sum(map(len, puts.values())) + len(deletes))
            return
        stale = 0
        for key, timers in puts.items():
            old = before.get(key, ())
            kept = 0
            for entry in timers:
                if entry in old:
                    kept += 1
                else:
                    queues[entry[0]].push(entry[1], key_group, key)
            stale += len(old) - kept
        for key in deletes:
            stale += len(before.get(key, ()))
        self._staled(stale)

    def timer_namespaces(self, domain: int, timestamp: int):
        """The namespaces of the current key's timer at (``domain``, ``timestamp``): a tuple, True for a
        timer registered without any, or None when there is no such timer."""
        return self._timer_state().get((domain, timestamp))

    def set_timer_namespaces(self, domain: int, timestamp: int, namespaces: tuple, new: bool = False) -> None:
        """Make the current key's timer at (``domain``, ``timestamp``) hold ``namespaces``, deleted if they
        are empty. ``new``: there is no such timer (``timer_namespaces`` gave None), so it is registered."""
        timestamp = _check_timestamp(timestamp)
        if new and domain == PROCESSING_TIME and self.processing_ended:
            return
        state = self._timer_state()
        entry = (domain, timestamp)
        if not namespaces:
            if not new:
                state.remove(entry)
                self._staled(1)
            return
        state.put(entry, namespaces)
        if new:
            self._enqueue(domain, timestamp)

    def start_firing(self) -> None:
        """A firing pass begins: timers registered from now on wait for the round after the current one."""
        self._next_round = ([], [])

    def end_firing(self) -> None:
        for domain in (EVENT_TIME, PROCESSING_TIME):
            self._next_round_begins(domain)
        self._next_round = None

    def _next_round_begins(self, domain: int) -> bool:
        """Queue the timers of ``domain`` registered during this round; whether there were any."""
        waiting = self._next_round[domain] if self._next_round is not None else None
        if not waiting:
            return False
        if self._queues is not None:  # else the rebuild from state finds them
            push = self._queues[domain].push
            for timestamp, kg, key in waiting:
                push(timestamp, kg, key)
        waiting.clear()
        return True

    def pop_due(self, domain: int, limit: int):
        """The next timer of ``domain`` with timestamp <= ``limit``, removed from state, with the
        backend's current key set to its key and its namespaces in ``fired_namespaces``; or None."""
        queue = self._ensure_queues()[domain]
        b = self._backend
        state = self._timer_state()
        while True:
            due = queue.pop(limit)
            if due is None:
                if not self._next_round_begins(domain):
                    return None
                queue = self._ensure_queues()[domain]
                continue
            timestamp, kg, key = due
            b.current_key_group = kg
            b.current_key = key
            entry = (domain, timestamp)
            namespaces = state._entry_take(entry)
            if namespaces is None:  # deleted, or fired already: a stale entry, gone now
                self._stale_until_rebuild += 1
                continue
            self.fired_namespaces = namespaces
            return timestamp

    def pop_due_many(self, domain: int, limit: int, count: int) -> list:
        """``pop_due`` for up to ``count`` timers at once: (timestamp, key group, key, namespaces) of each,
        in firing order, every one removed from state in one pass over it. The backend's current key is
        left as it was: the caller sets each timer's key as it fires it. Empty when none is due."""
        state = self._timer_state()
        while True:
            due = self._ensure_queues()[domain].pop_many(limit, count)
            if not due:
                if not self._next_round_begins(domain):
                    return []
                continue
            taken = state._entries_take([(key, kg, (domain, timestamp)) for timestamp, kg, key in due])
            fired = [(timestamp, kg, key, namespaces)
                     for (timestamp, kg, key), namespaces in zip(due, taken) if namespaces is not None]
            self._stale_until_rebuild += len(due) - len(fired)  # deleted, or fired already: stale entries, gone now
            if fired:
                return fired

    def add_timer_namespaces(self, domain: int, rows) -> list:
        """For each (key, key group, timestamp, namespace) of ``rows``: the key's timer at (``domain``,
        ``timestamp``) holds ``namespace`` too, registered if there was none (``set_timer_namespaces``
        for many keys at once; timestamps are ints already). Returns what each timer held before; one
        that held True (restored from before timers held their namespaces) is left as it was, for the
        caller to move its namespaces into it. Timers at one timestamp share one entry object, and new
        timers of one namespace one tuple of it, which a checkpoint pickles once per key group (a
        window's timers: half the bytes and time)."""
        entries: dict = {}
        alone: dict = {}  # id → (namespace,): the namespaces are alive in ``rows`` meanwhile
        before = self._timer_state()._entries_merge(
            [(key, kg, entries.get(timestamp) or entries.setdefault(timestamp, (domain, timestamp)),
              alone.get(id(namespace)) or alone.setdefault(id(namespace), (namespace,)))
             for key, kg, timestamp, namespace in rows], _with_namespace)
        if self._queues is not None:  # _enqueue for each new timer
            new = [(timestamp, kg, key) for (key, kg, timestamp, _), held in zip(rows, before) if held is None]
            if self._next_round is not None:
                self._next_round[domain].extend(new)
            else:
                push = self._queues[domain].push
                for timestamp, kg, key in new:
                    push(timestamp, kg, key)
        return before

    def next_processing_time(self) -> int | None:
        if not self.active:
            return None
        return self._ensure_queues()[PROCESSING_TIME].first()

    # -- internals -------------------------------------------------------------------------------
    def _timer_state(self):
        if self._state is None:
            self._state = self._backend.get_state(MapStateDescriptor(TIMER_STATE))
        return self._state

    def _register(self, domain: int, timestamp) -> None:
        timestamp = _check_timestamp(timestamp)
        if domain == PROCESSING_TIME and self.processing_ended:
            return
        state = self._timer_state()
        entry = (domain, timestamp)
        if state.contains(entry):
            return
        state.put(entry, True)
        self._enqueue(domain, timestamp)

    def _enqueue(self, domain: int, timestamp: int, kg: int | None = None, key=None) -> None:
        """Queue a new timer of ``key`` (by default the backend's current key), or keep it for the next
        round while timers fire."""
        if self._queues is not None:
            if kg is None:
                b = self._backend
                kg, key = b.current_key_group, b.current_key
            if self._next_round is not None:
                self._next_round[domain].append((timestamp, kg, key))
            else:
                self._queues[domain].push(timestamp, kg, key)

    def _delete(self, domain: int, timestamp) -> None:
        timestamp = _check_timestamp(timestamp)
        state = self._timer_state()
        if state.contains((domain, timestamp)):
            state.remove((domain, timestamp))
            self._staled(1)

    def _staled(self, entries: int) -> None:
        """``entries`` more queue entries no longer match a timer."""
        self._stale_until_rebuild -= entries
        if self._stale_until_rebuild < 0:
            self._queues = None  # rebuilt at next use, without the stale entries

    def _ensure_queues(self) -> tuple[DueQueue, DueQueue]:
        if self._queues is None:
            queues = (DueQueue(), DueQueue())
            self._timer_state()  # registered first, so restored timers are in their registered form
            timers = 0
            for kg, key, (domain, timestamp) in self._backend.map_keys_of(TIMER_STATE):
                queues[domain].push(timestamp, kg, key)
                timers += 1
            self._queues = queues
            self._stale_until_rebuild = timers + QUEUE_SLACK
            for waiting in self._next_round or ():  # queued now, from state: a rebuild mid-pass fires them this round
                waiting.clear()
        return self._queues


class DueQueue:
    """Timers of one domain in firing order: by timestamp, then in the order they were queued.

    Timers share few timestamps (a window's end, a rounded deadline), so the heap orders the distinct
    timestamps and each one keeps its (key group, key) entries in order: queuing and firing a timer
    cost O(1) instead of a heap operation over every pending timer. A timestamp with one entry keeps
    just that entry, so timers that all differ take no more memory than in one heap; with more, a
    list whose first item is the position of the next entry to fire. An entry may be stale (its timer
    deleted or fired); ``TimerService.pop_due`` checks each one against the timer state."""

    __slots__ = ("_times", "_entries")

    def __init__(self):
        self._times: list[int] = []  # heap of the timestamps in _entries
        self._entries: dict[int, tuple | list] = {}

    def push(self, timestamp: int, kg: int, key) -> None:
        entries = self._entries.get(timestamp)
        if entries is None:
            self._entries[timestamp] = (kg, key)
            heapq.heappush(self._times, timestamp)
        elif type(entries) is tuple:
            self._entries[timestamp] = [1, entries, (kg, key)]
        else:
            entries.append((kg, key))

    def first(self) -> int | None:
        """The earliest queued timestamp, or None."""
        times = self._times
        while times:
            entries = self._entries[times[0]]
            if type(entries) is tuple or entries[0] < len(entries):
                return times[0]
            del self._entries[heapq.heappop(times)]
        return None

    def pop_many(self, limit: int, count: int) -> list:
        """Up to ``count`` of the next entries due at ``limit``, removed: (timestamp, key group, key) each."""
        due = []
        while len(due) < count:
            timestamp = self.first()
            if timestamp is None or timestamp > limit:
                break
            entries = self._entries[timestamp]
            if type(entries) is tuple:
                del self._entries[heapq.heappop(self._times)]
                due.append((timestamp, entries[0], entries[1]))
                continue
            position = entries[0]
            taken = entries[position:position + count - len(due)]
            entries[0] = position + len(taken)
            due.extend([(timestamp, kg, key) for kg, key in taken])
        return due

    def pop(self, limit: int):
        """(timestamp, key group, key) of the next entry due at ``limit``, removed; or None."""
        timestamp = self.first()
        if timestamp is None or timestamp > limit:
            return None
        entries = self._entries[timestamp]
        if type(entries) is tuple:
            del self._entries[heapq.heappop(self._times)]
            return timestamp, entries[0], entries[1]
        position = entries[0]
        entries[0] = position + 1
        kg, key = entries[position]
        return timestamp, kg, key


def _with_namespace(held, alone: tuple):
    """A timer's namespaces (``held``) once the one namespace of ``alone`` registered it too: ``held``
    itself when nothing changes."""
    if held is True or alone[0] in held:
        return held
    return (*held, *alone)


def _check_timestamp(timestamp) -> int:
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)):
        raise TypeError(f"a timer timestamp must be epoch milliseconds (int), got {timestamp!r}")
    return int(timestamp)
