"""The RocksDB backend's byte layout (see the package docstring): key encoding, value encoding (plain
pickles and TTL-tagged bytes), per-state metadata, point-in-time views and bounded write batches."""

from __future__ import annotations

import io
import pickle
import struct
from collections import deque
from itertools import repeat

from keyspan.io import serde
from keyspan.state.ttl import TtlValue

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_TTL_HEAD = struct.Struct(">Bq")  # tag 0x00, last-access timestamp
_TTL_TAG = 0
_ATOMS = (int, str, bytes, float, type(None))
_NO_KEY = object()
_MISS = object()  # not in the epoch cache


def encode_key(key) -> bytes:
    """Deterministic bytes for a user or map key: equal keys of the supported kinds (None, bool,
    int, float, str, bytes and tuples of these) give equal bytes in every process. Composite keys
    are pickled with the memo off, else ``(s, s)`` and ``(s, copy_of_s)`` would differ."""
    if isinstance(key, _ATOMS):
        if key.__class__ is float and key == 0.0:
            key = 0.0  # -0.0 == 0.0, and both hash to the same key group
        return pickle.dumps(key, protocol=serde.PROTOCOL)
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=serde.PROTOCOL)
    pickler.fast = True
    pickler.dump(key)
    return buf.getvalue()


decode_key = pickle.loads
_SIMPLE_KEYS = frozenset((int, str, bytes))  # keys whose ``encode_key`` is their plain pickle


def encode_keys(keys: list) -> list[bytes]:
    """``encode_key`` of each key, at C speed when all are ints, strs or bytes (the usual keys)."""
    if _SIMPLE_KEYS.issuperset(map(type, keys)):
        return list(map(pickle.dumps, keys, repeat(serde.PROTOCOL)))
    return list(map(encode_key, keys))


class _Frozen(bytes):
    """A mutable value in the object cache, kept as its pickle: every read unpickles a fresh copy (as
    RocksDB's reads do), and the pickle is what RocksDB gets."""

    __slots__ = ()


_NUMBERS = frozenset((int, float, bool, complex, type(None)))  # fixed-size immutable values
_LARGE = 4096  # a value whose pickle is longer goes through the byte cache, where memory is counted
_PLAIN_VALUES = frozenset((int, float, bool, complex, str, bytes))  # kept as they are, pickled as they are


def _cached_all(raws: list) -> list:
    """``_cached`` of looked-up bytes (None stays None), at C speed when every value is a
    number, str or bytes of at most ``_LARGE`` bytes."""
    present = [raw for raw in raws if raw is not None]
    if present and max(map(len, present)) <= _LARGE:
        values = list(map(pickle.loads, present))
        if _PLAIN_VALUES.issuperset(map(type, values)):
            if len(values) == len(raws):
                return values
            it = iter(values)
            return [None if raw is None else next(it) for raw in raws]
    return [None if raw is None else _cached(raw) for raw in raws]


def _stored_all(values: list) -> list:
    """The bytes RocksDB gets for object cache values (None: a delete)."""
    if _PLAIN_VALUES.issuperset(map(type, values)):
        return list(map(pickle.dumps, values, repeat(serde.PROTOCOL)))
    dumps, protocol = pickle.dumps, serde.PROTOCOL
    return [v if v is None or v.__class__ is _Frozen else dumps(v, protocol) for v in values]


def _immutable(value) -> bool:
    """Whether the object cache may hand out ``value`` itself: numbers, str, bytes, tuples of numbers."""
    t = value.__class__
    return t in _NUMBERS or t is str or t is bytes or t is tuple and _NUMBERS.issuperset(map(type, value))


def _cached(raw: bytes):
    """The object cache's form of stored plain bytes: the value when it is immutable, else ``_Frozen``
    (``_MISS``: too large for the object cache)."""
    if len(raw) > _LARGE:
        return _MISS
    value = pickle.loads(raw)
    return value if _immutable(value) else _Frozen(raw)


def _successor(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix``."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        raise ValueError("no successor for an all-0xFF prefix")
    p[-1] += 1
    return bytes(p)


class _View:
    """A point-in-time view of a backend's RocksDB: one iterator, opened at construction, that every
    read seeks. A RocksDB iterator reads the database as of its creation (an implicit snapshot), so
    writes made after it — the next epoch's — are invisible to it, while the memtables and files it
    needs stay pinned until it is dropped. (rocksdict 0.3.29's ``Snapshot`` iterators ignore the
    snapshot, hence this.) Reads bypass the block cache (``fill_cache(False)``): a full scan must
    not evict the working set. Reads are sequential: a ``scan`` generator is consumed before the
    next read."""

    __slots__ = ("_ro", "_it")

    def __init__(self, backend):
        ro = backend._rd.ReadOptions()
        ro.fill_cache(False)
        self._ro = ro  # outlives the iterator
        self._it = backend._db.iter(ro)

    def scan(self, lower: bytes, upper: bytes):
        """(key, value) pairs with lower <= key < upper, in key order."""
        it = self._it
        it.seek(lower)
        valid, key, value, advance = it.valid, it.key, it.value, it.next
        while valid():
            k = key()
            if k >= upper:
                return
            yield k, value()
            advance()

    def lists(self, lower: bytes, upper: bytes) -> tuple[list, list]:
        """(keys, values) with lower <= key < upper, in key order, as two lists: a full snapshot's
        whole key group in one tight loop."""
        it = self._it
        it.seek(lower)
        keys, values = [], []
        valid, key, value, advance = it.valid, it.key, it.value, it.next
        add_key, add_value = keys.append, values.append
        while valid():
            k = key()
            if k >= upper:
                break
            add_key(k)
            add_value(value())
            advance()
        return keys, values

    def first(self, lower: bytes, upper: bytes):
        """The first key in [lower, upper), or None."""
        it = self._it
        it.seek(lower)
        if it.valid():
            k = it.key()
            if k < upper:
                return k
        return None

    def get(self, k: bytes):
        it = self._it
        it.seek(k)
        if it.valid() and it.key() == k:
            return it.value()
        return None


def _decode(raw: bytes):
    """Stored bytes → section value (a ``TtlValue`` for TTL'd bytes)."""
    if raw[0] == _TTL_TAG:
        return TtlValue((pickle.loads(raw[9:]), _I64.unpack_from(raw, 1)[0]))
    return pickle.loads(raw)


def _encode(value) -> bytes:
    """Section value → stored bytes (TtlValue → tagged bytes; lists of TtlValue stay one pickle)."""
    if type(value) is TtlValue:
        return _TTL_HEAD.pack(_TTL_TAG, value[1]) + pickle.dumps(value[0], protocol=serde.PROTOCOL)
    return pickle.dumps(value, protocol=serde.PROTOCOL)


def _is_ttl_form(value) -> bool:
    """Whether a restored section value is in TTL form (a stored value is all TTL'd or all plain)."""
    t = type(value)
    if t is TtlValue:
        return True
    if t is list:
        return bool(value) and type(value[0]) is TtlValue
    if t is dict:
        return bool(value) and type(next(iter(value.values()))) is TtlValue
    return False


class _Meta:
    """One state's id and layout in this backend's RocksDB.

    ``kind``/``ttl`` are set at registration (``ttl``: the TtlPolicy or None); until then
    ``restored_ttl``/``restored_plain`` record which forms restored sections had, so registration
    converts only when needed. ``compact``/``written``/``cursor`` drive the compaction-filter
    emulation of a TTL-enabled state."""

    __slots__ = ("name", "sid", "is_map", "kind", "ttl", "restored_ttl", "restored_plain", "compact", "written",
                 "cursor")

    def __init__(self, name: str, sid: bytes, is_map: bool):
        self.name = name
        self.sid = sid
        self.is_map = is_map
        self.kind = None
        self.ttl = None
        self.restored_ttl = False
        self.restored_plain = False
        self.compact = 0
        self.written = 0
        self.cursor = None


def _drain(d: dict):
    """Items of ``d`` in order, each removed as it is yielded (so it can be freed once used). In
    order: a section's entries come sorted by RocksDB key, and RocksDB inserts a batch in key order
    about twice as fast as one in reverse order."""
    pop = d.pop
    for k in list(d):
        yield k, pop(k)


class _Batch:
    """A write batch that is written out whenever it holds about ``LIMIT`` bytes: restores apply a key
    group in pieces, so memory holds the decoded section plus one piece, whatever the key group's size."""

    LIMIT = 4 << 20
    __slots__ = ("_backend", "_wb", "_bytes")

    def __init__(self, backend):
        self._backend = backend
        self._wb = backend._rd.WriteBatch(raw_mode=True)
        self._bytes = 0

    def put(self, k: bytes, v: bytes) -> None:
        self._wb.put(k, v)
        self._bytes += len(k) + len(v)
        if self._bytes >= self.LIMIT:
            self.flush()

    def put_all(self, keys: list, raws: list) -> None:
        size = sum(map(len, keys)) + sum(map(len, raws))
        if self._bytes + size > self.LIMIT:  # large values: one by one, so no batch outgrows the limit
            deque(map(self.put, keys, raws), 0)
            return
        deque(map(self._wb.put, keys, raws), 0)
        self._bytes += size

    def delete(self, k: bytes) -> None:
        self._wb.delete(k)
        self._bytes += len(k) + 16
        if self._bytes >= self.LIMIT:
            self.flush()

    def flush(self) -> None:
        if self._bytes:
            self._backend._db.write(self._wb)
            self._wb = self._backend._rd.WriteBatch(raw_mode=True)
            self._bytes = 0
