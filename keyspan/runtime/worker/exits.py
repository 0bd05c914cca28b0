"""Where records leave a stage: buffered per consumer subtask and emitted as pickled chunks
(``(key groups, keys, records, timestamps or None, input side)``), one Arrow row per chunk and
subtask. The input side tells a two-input consumer which of its inputs the chunk feeds."""

from __future__ import annotations

import random

from keyspan.common.types import packed_rows
from keyspan.io import serde
from keyspan.runtime.protocol import BROADCAST_CHUNK, RECORD_PREVIEW, UserFunctionError
from keyspan.state.internal import IMMUTABLE
from keyspan.state.keygroups import assign_to_key_group


def frozen(value):
    """What a value is at the moment it is emitted or stored: mutable values are copied, as PyFlink
    serializes on emit, so a function that mutates an object afterwards changes nothing."""
    if type(value) in IMMUTABLE:
        return value
    if isinstance(value, tuple):  # a Row or tuple of plain values, the common case: a loop beats set algebra here
        for item in value:
            if type(item) not in IMMUTABLE:
                break
        else:
            return value
    return serde.loads(serde.dumps(value))


def hashable_key(key):
    """A list key (``key_by(lambda r: [r.a, r.b])``, a ``Types.LIST`` key), or a tuple key holding
    lists, as the tuple that keys state: a list cannot key a dict. Its key group is the list's: the
    hash reads both alike."""
    return tuple(hashable_key(part) if type(part) in (list, tuple) else part for part in key)


def chunk(kgs, keys, records: list, stamps, side) -> bytes:
    """One pickled chunk (the Rows of one named class travel as one list per field: ``packed_rows``)."""
    return serde.dumps((kgs, keys, packed_rows(records), stamps, side))


def _stamps(stamps: list):
    """A chunk's timestamps, or None when its records have none (the common case without event time)."""
    for t in stamps:
        if t is not None:
            return stamps
    return None


class Exit:
    """Buffers the records of one exit; ``flush`` hands the chunks to ``row(exit_id, subtask, ctl, payload)``."""

    def __init__(self, spec, cell):
        self.parallelism = spec.consumer_parallelism
        self.side = spec.input_side
        self.cell = cell  # the current record's event timestamp
        self.records: list = []
        self.stamps: list = []
        self.buffered = 0

    def add(self, record):
        self.records.append(frozen(record))
        self.stamps.append(self.cell[0])
        self.buffered += 1

    def flush(self, exit_id, row):
        if not self.records:
            return
        for subtask, payload in self.route(self.records, _stamps(self.stamps)):
            row(exit_id, subtask, None, payload)
        self.records = []
        self.stamps = []
        self.buffered = 0

    def route(self, records: list, stamps: list | None):
        """(consumer subtask, chunk payload) pairs for the buffered records."""
        raise NotImplementedError


class BroadcastExit(Exit):
    """Every record to every consumer subtask: one pickled chunk, sent once per subtask."""

    def route(self, records, stamps):
        payload = chunk(BROADCAST_CHUNK, None, records, stamps, self.side)
        return [(sub, payload) for sub in range(self.parallelism)]


class RebalanceExit(Exit):
    """Round robin over the consumer subtasks, continuing where the last flush stopped."""

    def __init__(self, spec, subtask, cell):
        super().__init__(spec, cell)
        self.next = subtask % self.parallelism

    def route(self, records, stamps):
        n = self.parallelism
        out = [((self.next + i) % n,
                chunk(None, None, records[i::n], stamps[i::n] if stamps else None, self.side))
               for i in range(min(n, len(records)))]
        self.next = (self.next + len(records)) % n
        return out


class ShuffleExit(Exit):
    """Each record to a uniformly random consumer subtask (``DataStream.shuffle()``)."""

    def __init__(self, spec, cell):
        super().__init__(spec, cell)
        self.random = random.Random()

    def route(self, records, stamps):
        n = self.parallelism
        picks = [self.random.randrange(n) for _ in records]
        out = []
        for sub in range(n):
            idx = [i for i, p in enumerate(picks) if p == sub]
            if idx:
                out.append((sub, chunk(None, None, [records[i] for i in idx],
                                       [stamps[i] for i in idx] if stamps else None, self.side)))
        return out


class CustomExit(Exit):
    """``partition_custom``: the user's partitioner picks each record's subtask from its key."""

    def __init__(self, spec, cell, describe):
        super().__init__(spec, cell)
        self.partitioner = spec.partitioner
        self.selector = spec.key_selector
        self.describe = describe  # how errors name the operator

    def route(self, records, stamps):
        n = self.parallelism
        parts: dict[int, list[int]] = {}
        for i, record in enumerate(records):
            sub = self.partitioner(self.selector(record), n)
            if isinstance(sub, bool) or not isinstance(sub, int) or not 0 <= sub < n:
                raise ValueError(f"{self.describe}: partition_custom's partitioner returned {sub!r} for record "
                                 f"{record!r}; it must return a subtask index in [0, {n})")
            parts.setdefault(sub, []).append(i)
        return [(sub, chunk(None, None, [records[i] for i in idx], [stamps[i] for i in idx] if stamps else None,
                            self.side))
                for sub, idx in sorted(parts.items())]


class KeyExtractionError(UserFunctionError):
    """A record whose key selector failed or whose key cannot be hashed into a key group."""

    def __init__(self, consumer: str, record, exc: BaseException):
        text = repr(record)
        if len(text) > RECORD_PREVIEW:
            text = text[:RECORD_PREVIEW] + f"… ({len(text)} chars)"
        reason = (f"unhashable key: {exc}" if isinstance(exc, TypeError) and "hash" in str(exc).lower()
                  else f"{type(exc).__name__}: {exc}")
        super().__init__(f"{UserFunctionError.MARKER}the key selector of operator {consumer} failed on record "
                         f"{text}: {reason}. Fix the key selector, or drop such records with "
                         "key_by(ErrorPolicy.skip().key_selector(selector))")


# keys whose dict equality matches their key group: never 1 == 1.0 == True across these two types
_MEMO_KEY_TYPES = frozenset((int, str))
_MEMO_LIMIT = 100_000
# max parallelism → {key: key group}, kept by the worker process across tasks and epochs: a key's
# group never changes, so it is hashed once per worker instead of once per epoch's task
_KEY_GROUP_MEMOS: dict[int, dict] = {}


class KeyedExit:
    """Routes by key group (``assign_to_key_group``), subtask = key group × p ÷ max p. Its ``add`` is
    the hottest loop of a keyed job: buffers per subtask, no per-record objects."""

    def __init__(self, spec, max_parallelism, cell, key_errors=None):
        self.selector = spec.key_selector
        self.consumer = spec.consumer
        self.max_parallelism = max_parallelism
        self.parallelism = spec.consumer_parallelism
        self.side = spec.input_side
        self.cell = cell
        self.buffers = [([], [], [], []) for _ in range(self.parallelism)]
        self.buffered = 0
        self.key_groups = _KEY_GROUP_MEMOS.setdefault(max_parallelism, {})  # key → key group, keys seen before
        # ErrorPolicy.skip().key_selector(fn) drops records without a usable key, counted here
        policy = getattr(self.selector, "error_policy", None)
        self.key_errors = key_errors if policy is not None and not policy.fails else None

    def add(self, record):
        record = frozen(record)
        try:
            key = self.selector(record)
            memo = self.key_groups if type(key) in _MEMO_KEY_TYPES else None
            kg = None if memo is None else memo.get(key)
            if kg is None:
                if type(key) is list:
                    key = hashable_key(key)
                elif type(key) is tuple:
                    try:
                        hash(key)  # 40 ns; a scan of the parts for lists costs three times that
                    except TypeError:
                        key = hashable_key(key)
                kg = assign_to_key_group(key, self.max_parallelism)
                if memo is not None and len(memo) < _MEMO_LIMIT:
                    memo[key] = kg
        except Exception as exc:
            if self.key_errors is None:
                raise KeyExtractionError(self.consumer, record, exc) from exc
            self.key_errors.inc()
            return
        buf = self.buffers[kg * self.parallelism // self.max_parallelism]
        buf[0].append(kg)
        buf[1].append(key)
        buf[2].append(record)
        buf[3].append(self.cell[0])
        self.buffered += 1

    def flush(self, exit_id, row):
        for sub, (kgs, keys, records, stamps) in enumerate(self.buffers):
            if records:
                row(exit_id, sub, None, chunk(kgs, keys, records, _stamps(stamps), self.side))
        self.buffers = [([], [], [], []) for _ in range(self.parallelism)]
        self.buffered = 0
