"""The embedded RocksDB keyed state backend: state on local disk (through ``rocksdict``), not in Python dicts.

Layout. Every RocksDB key starts with the key group (2 bytes, big-endian), then a state id
(2 bytes, big-endian, assigned per backend instance), then the user key serialized
deterministically (pickle protocol 5, memo off for composite keys). A map state stores one
RocksDB entry per map entry: the user key is length-prefixed (4 bytes, big-endian) and followed
by the serialized map key. So one key group is one contiguous key range, one state inside a key
group is a contiguous range, and one map is a contiguous range: snapshots and restores read and
write ranges, and a large map is never rewritten as a whole. Values are pickled
(``keyspan.io.serde``).

Epochs. Writes go straight to RocksDB; the first time an epoch touches an entry, its previous
bytes (or "absent") go into an in-memory undo log. ``rollback`` writes those bytes back,
``confirm`` forgets them, ``changed_sections`` re-reads the touched keys. Memory is proportional
to what the epoch touched, not to the state.

Sections. ``changed_sections``/``all_sections``/``apply_section`` use the heap backend's canonical
format (key group → {state: ({user key: value}, [deleted user keys])}, a map state's value being
the whole dict), so checkpoints and savepoints move freely between the two backends. Since
sections don't say which state is a map, a state restored before it is registered is kept one
value per user key and is re-laid out entry by entry when it is registered as a map state.

TTL. A TTL-enabled value/reducing/aggregating state or map entry is stored as a 0x00 tag byte, the
last-access timestamp (8 bytes, signed big-endian) and the pickled value; pickles start with 0x80,
so stored bytes say which form they are in, and the TTL check (and the compaction-filter emulation)
reads the timestamp without unpickling. A TTL-enabled list is one pickled list of ``TtlValue``.
Sections carry ``TtlValue`` objects (``keyspan.state.ttl``), as the heap backend does.

The RocksDB directory is scratch space: it is deleted when the backend is closed or collected
or the process exits; durability comes from keyspan's checkpoints, as in Flink. Spark's Python
workers end with ``os._exit``, so the first backend a process opens also deletes the directories
left by dead processes of the same host.
"""

from __future__ import annotations

import io
import itertools
import os
import pickle
import re
import shutil
import socket
import struct
import tempfile
import uuid
import weakref

from keyspan.io import serde
from keyspan.state.api import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    StateDescriptor,
    ValueState,
)
from keyspan.state.backend import KeyedStateBackend, LazySections, StateBackendSpec
from keyspan.state.ttl import LONG_MAX, TtlPolicy, TtlValue, stamp, unstamp

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_TTL_HEAD = struct.Struct(">Bq")  # tag 0x00, last-access timestamp
_TTL_TAG = 0
_ALL_EXPIRED = float("inf")
_ATOMS = (int, str, bytes, float, type(None))
_NO_KEY = object()


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


def _dispose(db, path: str) -> None:
    try:
        db.close()
    except Exception:  # noqa: BLE001 — already closed
        pass
    shutil.rmtree(path, ignore_errors=True)
    pid_dir = os.path.dirname(path)
    try:
        if os.listdir(pid_dir) == [_HOST_FILE]:  # the process's last backend: remove its directory
            shutil.rmtree(pid_dir, ignore_errors=True)
    except OSError:
        pass


_HOST_FILE = "HOST"
_SWEPT: set[str] = set()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _prepare_pid_dir(root: str) -> str:
    """``root/<pid>``, marked with this host's name. Once per process and root, delete the
    directories of processes of this host that are gone: Spark's Python workers end with
    ``os._exit``, so their backends never get to delete their own directories."""
    host = socket.gethostname()
    if root not in _SWEPT:
        _SWEPT.add(root)
        try:
            names = os.listdir(root)
        except OSError:
            names = []
        for name in names:
            if not name.isdigit() or int(name) == os.getpid():
                continue
            stale = os.path.join(root, name)
            try:
                with open(os.path.join(stale, _HOST_FILE)) as f:
                    if f.read() != host:
                        continue
            except OSError:
                continue
            if not _alive(int(name)):
                shutil.rmtree(stale, ignore_errors=True)
    pid_dir = os.path.join(root, str(os.getpid()))
    os.makedirs(pid_dir, exist_ok=True)
    marker = os.path.join(pid_dir, _HOST_FILE)
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(host)
    return pid_dir


def _drain(d: dict):
    """Items of ``d``, each removed as it is yielded (so it can be freed once used)."""
    while d:
        yield d.popitem()


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


# --- state objects -------------------------------------------------------------------------------

class _RocksState:
    __slots__ = ("_backend", "_db", "_meta")

    def __init__(self, backend: "RocksDBKeyedStateBackend", meta: _Meta):
        self._backend = backend
        self._db = backend._db
        self._meta = meta

    def _key(self) -> bytes:
        kgb, ukb = self._backend._key_parts()
        return kgb + self._meta.sid + ukb

    def _dumps(self, value) -> bytes:
        try:
            return pickle.dumps(value, protocol=serde.PROTOCOL)
        except Exception as exc:  # noqa: BLE001 — re-raised with context
            b = self._backend
            raise serde.StateSerializationError(
                f"operator '{b.operator}': state '{self._meta.name}' key {b.current_key!r} "
                f"(key group {b.current_key_group}) cannot hold a value of type {type(value).__name__} "
                f"in RocksDB: {exc}"
            ) from exc

    def _get_raw(self):
        return self._db.get(self._key())

    def _write_raw(self, raw: bytes) -> None:
        k = self._key()
        self._backend._touch(k)
        self._db.put(k, raw)

    def clear(self) -> None:
        k = self._key()
        self._backend._touch(k)
        self._db.delete(k)


class RocksDBValueState(_RocksState, ValueState):
    __slots__ = ()

    def value(self):
        raw = self._get_raw()
        return None if raw is None else pickle.loads(raw)

    def update(self, value) -> None:
        if value is None:
            self.clear()
            return
        self._write_raw(self._dumps(value))


class RocksDBListState(_RocksState, ListState):
    """The list is one RocksDB value; ``get`` returns a fresh list (mutating it changes nothing)."""

    __slots__ = ()

    def get(self):
        raw = self._get_raw()
        return [] if raw is None else pickle.loads(raw)

    def add(self, value) -> None:
        self.add_all((value,))

    def add_all(self, values) -> None:
        new = []
        bad = False
        for v in values:
            if v is None:
                bad = True
                break
            new.append(v)
        if new:
            lst = self.get()
            lst.extend(new)
            self._write_raw(self._dumps(lst))
        if bad:
            raise ValueError(f"operator '{self._backend.operator}': cannot add None to list state '{self._meta.name}'")

    def update(self, values) -> None:
        values = list(values or ())
        if not values:
            self.clear()
        else:
            self._write_raw(self._dumps(values))


class RocksDBMapState(_RocksState, MapState):
    """One RocksDB entry per map entry under the prefix key group · state · len(user key) · user key."""

    __slots__ = ()

    def _prefix(self) -> bytes:
        b = self._backend
        kgb, _ = b._key_parts()
        return kgb + self._meta.sid + b._ck_mapb

    def _entries(self, prefix: bytes):
        return self._backend._scan(prefix, _successor(prefix))

    def get(self, key):
        raw = self._db.get(self._prefix() + encode_key(key))
        return None if raw is None else pickle.loads(raw)

    def put(self, key, value) -> None:
        prefix = self._prefix()
        raw = self._dumps(value)
        k = prefix + encode_key(key)
        b = self._backend
        b._touch_map(prefix, k)
        self._db.put(k, raw)

    def put_all(self, dict_value) -> None:
        items = [(encode_key(k), self._dumps(v)) for k, v in dict(dict_value).items()]
        b = self._backend
        prefix = self._prefix()
        b._touch_map(prefix)
        if not items:
            return
        wb = b._rd.WriteBatch(raw_mode=True)
        for kb, raw in items:
            k = prefix + kb
            b._touch_map(prefix, k)
            wb.put(k, raw)
        self._db.write(wb)

    def remove(self, key) -> None:
        prefix = self._prefix()
        k = prefix + encode_key(key)
        old = self._db.get(k)
        if old is None:
            return
        self._backend._touch_map(prefix, k, old)
        self._db.delete(k)

    def contains(self, key) -> bool:
        return self._db.get(self._prefix() + encode_key(key)) is not None

    def items(self):
        prefix = self._prefix()
        n = len(prefix)
        return [(decode_key(k[n:]), pickle.loads(v)) for k, v in self._entries(prefix)]

    def keys(self):
        prefix = self._prefix()
        n = len(prefix)
        return [decode_key(k[n:]) for k, _ in self._entries(prefix)]

    def values(self):
        return [pickle.loads(v) for _, v in self._entries(self._prefix())]

    def is_empty(self) -> bool:
        return next(iter(self._entries(self._prefix())), None) is None

    def clear(self) -> None:
        prefix = self._prefix()
        b = self._backend
        b._touch_map(prefix)
        old = list(self._entries(prefix))
        if not old:
            return
        for k, raw in old:
            b._touch_map(prefix, k, raw)
        wb = b._rd.WriteBatch(raw_mode=True)
        for k, _ in old:
            wb.delete(k)
        self._db.write(wb)


class RocksDBReducingState(_RocksState, ReducingState):
    __slots__ = ("_reduce",)

    def __init__(self, backend, meta, reduce_function):
        super().__init__(backend, meta)
        self._reduce = getattr(reduce_function, "reduce", reduce_function)

    def get(self):
        raw = self._get_raw()
        return None if raw is None else pickle.loads(raw)

    def add(self, value) -> None:
        raw = self._get_raw()
        self._write_raw(self._dumps(value if raw is None else self._reduce(pickle.loads(raw), value)))


class RocksDBAggregatingState(_RocksState, AggregatingState):
    __slots__ = ("_agg",)

    def __init__(self, backend, meta, agg_function):
        super().__init__(backend, meta)
        self._agg = agg_function

    def get(self):
        raw = self._get_raw()
        return None if raw is None else self._agg.get_result(pickle.loads(raw))

    def add(self, value) -> None:
        raw = self._get_raw()
        acc = self._agg.create_accumulator() if raw is None else pickle.loads(raw)
        self._write_raw(self._dumps(self._agg.add(value, acc)))


# --- TTL states ------------------------------------------------------------------------------------

class _RocksTtlState(_RocksState):
    """Flink's TTL decorators over the RocksDB layout: values and map entries are tagged bytes
    (tag, timestamp, pickle), a list is a pickled list of TtlValue."""

    __slots__ = ("_ttl",)

    def __init__(self, backend, meta: _Meta, policy: TtlPolicy):
        super().__init__(backend, meta)
        self._ttl = policy

    def _clock(self):
        """(now, horizon): timestamps <= horizon are expired."""
        p = self._ttl
        b = self._backend
        now = b.current_watermark if p.event_time else b.ttl_time_provider()
        return now, (now - p.ttl if now < LONG_MAX else _ALL_EXPIRED)

    def _wrote(self, n: int = 1) -> None:
        meta = self._meta
        if meta.compact:
            meta.written += n
            if meta.written >= meta.compact:
                meta.written = 0
                self._backend._compact_ttl(meta)

    def _put_tagged(self, k: bytes, ts: int, payload: bytes) -> None:
        self._backend._touch(k)
        self._db.put(k, _TTL_HEAD.pack(_TTL_TAG, ts) + payload)
        self._wrote()

    def _get_wrapped(self):
        """Flink's getWrappedWithTtlCheckAndUpdate over the current key's tagged bytes: None, or the
        bytes (an expired value is deleted and returned only with ReturnExpiredIfNotCleanedUp; with
        OnReadAndWrite an unexpired one gets the current time)."""
        k = self._key()
        raw = self._db.get(k)
        if raw is None:
            return None
        now, horizon = self._clock()
        p = self._ttl
        if _I64.unpack_from(raw, 1)[0] <= horizon:
            self._backend._touch(k)
            self._db.delete(k)
            return raw if p.return_expired else None
        if p.update_on_read:
            self._put_tagged(k, now, raw[9:])
        return raw

    def _live_or_none(self, raw, horizon):
        """The stored bytes if they take part in an update (Flink's getUnexpired), else None."""
        if raw is None or (_I64.unpack_from(raw, 1)[0] <= horizon and not self._ttl.return_expired):
            return None
        return raw


class RocksDBTtlValueState(_RocksTtlState, ValueState):
    __slots__ = ()

    def value(self):
        raw = self._get_wrapped()
        return None if raw is None else pickle.loads(raw[9:])

    def update(self, value) -> None:
        if value is None:
            self.clear()
            return
        self._put_tagged(self._key(), self._clock()[0], self._dumps(value))


class RocksDBTtlListState(_RocksTtlState, ListState):
    """Flink's TtlListState: every element has its own timestamp."""

    __slots__ = ()

    def _write_list(self, lst) -> None:
        self._write_raw(self._dumps(lst))
        self._wrote()

    def get(self):
        raw = self._get_raw()
        if raw is None:
            return []
        stored = pickle.loads(raw)
        result, rewrite, clear = self._ttl.read_list(stored, *self._clock())
        if rewrite is not None:
            self._write_list(rewrite)
        elif clear:
            self.clear()
        return result

    def add(self, value) -> None:
        self.add_all((value,))

    def add_all(self, values) -> None:
        new = []
        bad = False
        for v in values:
            if v is None:
                bad = True
                break
            new.append(v)
        if new:
            now = self._clock()[0]
            raw = self._get_raw()
            lst = [] if raw is None else pickle.loads(raw)
            lst.extend(TtlValue((v, now)) for v in new)
            self._write_list(lst)
        if bad:
            raise ValueError(f"operator '{self._backend.operator}': cannot add None to list state '{self._meta.name}'")

    def update(self, values) -> None:
        values = list(values or ())
        if not values:
            self.clear()
        else:
            now = self._clock()[0]
            self._write_list([TtlValue((v, now)) for v in values])


class RocksDBTtlMapState(_RocksTtlState, RocksDBMapState):
    """Flink's TtlMapState: every entry has its own timestamp (one tagged RocksDB entry per map entry)."""

    __slots__ = ()

    def _get_entry(self, key):
        prefix = self._prefix()
        k = prefix + encode_key(key)
        raw = self._db.get(k)
        if raw is None:
            return None
        now, horizon = self._clock()
        p = self._ttl
        b = self._backend
        if _I64.unpack_from(raw, 1)[0] <= horizon:
            b._touch_map(prefix, k, raw)
            self._db.delete(k)
            return raw if p.return_expired else None
        if p.update_on_read:
            b._touch_map(prefix, k, raw)
            self._db.put(k, _TTL_HEAD.pack(_TTL_TAG, now) + raw[9:])
            self._wrote()
        return raw

    def get(self, key):
        raw = self._get_entry(key)
        return None if raw is None else pickle.loads(raw[9:])

    def contains(self, key) -> bool:
        return self._get_entry(key) is not None

    def put(self, key, value) -> None:
        prefix = self._prefix()
        raw = _TTL_HEAD.pack(_TTL_TAG, self._clock()[0]) + self._dumps(value)
        k = prefix + encode_key(key)
        self._backend._touch_map(prefix, k)
        self._db.put(k, raw)
        self._wrote()

    def put_all(self, dict_value) -> None:
        head = _TTL_HEAD.pack(_TTL_TAG, self._clock()[0])
        items = [(encode_key(k), head + self._dumps(v)) for k, v in dict(dict_value).items()]
        b = self._backend
        prefix = self._prefix()
        b._touch_map(prefix)
        if not items:
            return
        wb = b._rd.WriteBatch(raw_mode=True)
        for kb, raw in items:
            k = prefix + kb
            b._touch_map(prefix, k)
            wb.put(k, raw)
        self._db.write(wb)
        self._wrote(len(items))

    def _visible(self, first_only: bool = False):
        """(prefix length, visible (RocksDB key, bytes) pairs) as Flink's entry iterator yields them:
        expired entries are deleted (and yielded only with ReturnExpiredIfNotCleanedUp); with
        OnReadAndWrite the yielded unexpired ones get the current time. ``first_only`` stops at the
        first visible entry."""
        prefix = self._prefix()
        now, horizon = self._clock()
        p = self._ttl
        out = []
        expired = []
        refreshed = []
        entries = self._entries(prefix)
        try:
            for k, raw in entries:
                if _I64.unpack_from(raw, 1)[0] <= horizon:
                    expired.append((k, raw))
                    if p.return_expired:
                        out.append((k, raw))
                else:
                    out.append((k, raw))
                    if p.update_on_read:
                        refreshed.append((k, raw))
                if first_only and out:
                    break
        finally:
            entries.close()
        if expired or refreshed:
            b = self._backend
            wb = b._rd.WriteBatch(raw_mode=True)
            for k, raw in expired:
                b._touch_map(prefix, k, raw)
                wb.delete(k)
            head = _TTL_HEAD.pack(_TTL_TAG, now)
            for k, raw in refreshed:
                b._touch_map(prefix, k, raw)
                wb.put(k, head + raw[9:])
            self._db.write(wb)
            if refreshed:
                self._wrote(len(refreshed))
        return len(prefix), out

    def items(self):
        n, out = self._visible()
        return [(decode_key(k[n:]), pickle.loads(raw[9:])) for k, raw in out]

    def keys(self):
        n, out = self._visible()
        return [decode_key(k[n:]) for k, _ in out]

    def values(self):
        _, out = self._visible()
        return [pickle.loads(raw[9:]) for _, raw in out]

    def is_empty(self) -> bool:
        return not self._visible(first_only=True)[1]


class RocksDBTtlReducingState(_RocksTtlState, ReducingState):
    __slots__ = ("_reduce",)

    def __init__(self, backend, meta, policy, reduce_function):
        super().__init__(backend, meta, policy)
        self._reduce = getattr(reduce_function, "reduce", reduce_function)

    def get(self):
        raw = self._get_wrapped()
        return None if raw is None else pickle.loads(raw[9:])

    def add(self, value) -> None:
        k = self._key()
        now, horizon = self._clock()
        raw = self._live_or_none(self._db.get(k), horizon)
        new = value if raw is None else self._reduce(pickle.loads(raw[9:]), value)
        self._put_tagged(k, now, self._dumps(new))


class RocksDBTtlAggregatingState(_RocksTtlState, AggregatingState):
    __slots__ = ("_agg",)

    def __init__(self, backend, meta, policy, agg_function):
        super().__init__(backend, meta, policy)
        self._agg = agg_function

    def get(self):
        raw = self._get_wrapped()
        return None if raw is None else self._agg.get_result(pickle.loads(raw[9:]))

    def add(self, value) -> None:
        k = self._key()
        now, horizon = self._clock()
        raw = self._live_or_none(self._db.get(k), horizon)
        acc = self._agg.create_accumulator() if raw is None else pickle.loads(raw[9:])
        self._put_tagged(k, now, self._dumps(self._agg.add(value, acc)))


_TTL_CLASSES = {
    "value": RocksDBTtlValueState,
    "list": RocksDBTtlListState,
    "map": RocksDBTtlMapState,
}


# --- the backend -----------------------------------------------------------------------------------

class RocksDBKeyedStateBackend(KeyedStateBackend):
    """One operator's keyed state for one key-group range, in a RocksDB instance at ``path``."""

    def __init__(self, operator: str, key_groups: range, path: str,
                 memory: "RocksDBMemoryConfiguration | None" = None):
        super().__init__(operator, key_groups)
        if key_groups.stop > 0xFFFF:
            raise ValueError(f"key groups {key_groups} do not fit the 2-byte key-group prefix")
        import rocksdict

        self._rd = rocksdict
        self.path = path
        os.makedirs(path, exist_ok=True)
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        _bound_memory(rocksdict, options, memory or RocksDBMemoryConfiguration())
        self._db = rocksdict.Rdict(path, options)
        write_options = rocksdict.WriteOptions()
        write_options.disable_wal = True  # scratch state: checkpoints are the durable copy
        self._db.set_write_options(write_options)
        self._finalizer = weakref.finalize(self, _dispose, self._db, path)
        self._lower = _U16.pack(key_groups.start)
        self._upper = _U16.pack(key_groups.stop)
        self._metas: dict[str, _Meta] = {}
        self._by_sid: dict[bytes, _Meta] = {}
        self._next_sid = 1
        # undo log of the open epoch: RocksDB key → bytes before the epoch (None: absent)
        self._undo: dict[bytes, bytes | None] = {}
        self._undo_map: dict[bytes, bytes | None] = {}
        self._touched_maps: dict[bytes, None] = {}  # map prefixes touched this epoch, in order
        # restored values stamped for TTL by this instance: the next delta carries them (kept on rollback)
        self._forced: dict[bytes, None] = {}
        self._forced_maps: dict[bytes, None] = {}
        # serialized current key, cached per key object and key group
        self._ck_obj = _NO_KEY
        self._ck_bytes = b""
        self._ck_mapb = b""
        self._ck_kg = -1
        self._ck_kgb = b""

    # -- keys -------------------------------------------------------------------------------------
    def _key_parts(self):
        key = self.current_key
        if key is not self._ck_obj:
            ukb = encode_key(key)
            self._ck_bytes = ukb
            self._ck_mapb = _U32.pack(len(ukb)) + ukb
            self._ck_obj = key
        kg = self.current_key_group
        if kg != self._ck_kg:
            self._ck_kgb = _U16.pack(kg)
            self._ck_kg = kg
        return self._ck_kgb, self._ck_bytes

    def _scan(self, lower: bytes, upper: bytes):
        """(key, value) pairs with lower <= key < upper, in key order.

        A generator on purpose: rocksdict (0.3.29) keeps a pointer into the ``upper`` bytes
        object, not a copy, so ``upper`` (and ``lower``) must outlive the RocksDB iterator."""
        ro = self._rd.ReadOptions()
        ro.set_iterate_upper_bound(upper)
        it = self._db.items(from_key=lower, read_opt=ro)
        try:
            yield from it
        finally:
            del it  # the iterator goes before the bounds it points into

    # -- undo log ---------------------------------------------------------------------------------
    def _touch(self, k: bytes) -> None:
        if k not in self._undo:
            self._undo[k] = self._db.get(k)

    def _touch_map(self, prefix: bytes, k: bytes | None = None, old=_NO_KEY) -> None:
        self._touched_maps[prefix] = None
        if k is not None and k not in self._undo_map:
            self._undo_map[k] = self._db.get(k) if old is _NO_KEY else old

    # -- states -----------------------------------------------------------------------------------
    def _new_meta(self, name: str, is_map: bool) -> _Meta:
        if self._next_sid >= 1 << 16:
            raise RuntimeError(f"operator '{self.operator}': too many states for one RocksDB backend")
        meta = _Meta(name, _U16.pack(self._next_sid), is_map)
        self._next_sid += 1
        self._metas[name] = meta
        self._by_sid[meta.sid] = meta
        return meta

    def _meta_for(self, name: str, is_map: bool = False) -> _Meta:
        meta = self._metas.get(name)
        return meta if meta is not None else self._new_meta(name, is_map)

    def _create_state(self, descriptor: StateDescriptor):
        kind = descriptor.kind
        if kind not in ("value", "list", "map", "reducing", "aggregating"):
            raise TypeError(f"unknown state descriptor {descriptor!r}")
        policy = TtlPolicy.of(descriptor)
        if kind == "map":
            meta = self._metas.get(descriptor.name)
            if meta is None:
                meta = self._new_meta(descriptor.name, True)
            elif not meta.is_map:
                meta = self._relayout_as_map(meta, policy)
        else:
            meta = self._meta_for(descriptor.name)  # a map meta only exists for a registered map state
            if policy is not None and meta.restored_plain or policy is None and meta.restored_ttl:
                self._convert_restored(meta, kind, policy)
        meta.kind = kind
        meta.ttl = policy
        meta.restored_ttl = meta.restored_plain = False
        if policy is not None:
            meta.compact = policy.compact_entries
            if kind == "reducing":
                return RocksDBTtlReducingState(self, meta, policy, descriptor.reduce_function)
            if kind == "aggregating":
                return RocksDBTtlAggregatingState(self, meta, policy, descriptor.agg_function)
            return _TTL_CLASSES[kind](self, meta, policy)
        if kind == "map":
            return RocksDBMapState(self, meta)
        if kind == "value":
            return RocksDBValueState(self, meta)
        if kind == "list":
            return RocksDBListState(self, meta)
        if kind == "reducing":
            return RocksDBReducingState(self, meta, descriptor.reduce_function)
        return RocksDBAggregatingState(self, meta, descriptor.agg_function)

    def _convert_restored(self, meta: _Meta, kind: str, policy) -> None:
        """A non-map state restored before registration, in the other form: stamp plain values with
        the current time (the restore's; the next delta carries them) or drop the timestamps."""
        now = None if policy is None else policy.now(self)
        for kg in self.key_groups:
            lo = _U16.pack(kg) + meta.sid
            wb = self._rd.WriteBatch(raw_mode=True)
            dirty = []
            for k, raw in self._scan(lo, _successor(lo)):
                value = _decode(raw)
                new = unstamp(kind, value) if policy is None else stamp(kind, value, now)
                if new is not value:
                    wb.put(k, _encode(new))
                    dirty.append(k)
            if dirty:
                self._db.write(wb)
                if policy is not None:
                    self._forced.update(dict.fromkeys(dirty))

    def _relayout_as_map(self, old: _Meta, policy=None) -> _Meta:
        """A state restored before registration holds one dict per user key; spread it into entries
        (in TTL form for a TTL-enabled map: plain entries get the current time, as ``_convert_restored``)."""
        new = _Meta(old.name, _U16.pack(self._next_sid), True)
        self._next_sid += 1
        now = None if policy is None else policy.now(self)
        for kg in self.key_groups:
            kgb = _U16.pack(kg)
            lo = kgb + old.sid
            hi = _successor(lo)
            wb = self._rd.WriteBatch(raw_mode=True)
            dirty = False
            for k, raw in self._scan(lo, hi):
                value = _decode(raw)
                if not isinstance(value, dict):
                    raise TypeError(
                        f"operator '{self.operator}': state '{old.name}' was restored with a "
                        f"{type(value).__name__} for key {decode_key(k[4:])!r}, cannot use it as map state")
                ukb = k[4:]
                prefix = kgb + new.sid + _U32.pack(len(ukb)) + ukb
                converted = unstamp("map", value) if policy is None else stamp("map", value, now)
                if policy is not None and converted is not value:
                    self._forced_maps[prefix] = None
                for mk, mv in converted.items():
                    wb.put(prefix + encode_key(mk), _encode(mv))
                dirty = True
            if dirty:
                wb.delete_range(lo, hi)
                self._db.write(wb)
        return self._swap_meta(old, new)

    def _swap_meta(self, old: _Meta, new: _Meta) -> _Meta:
        del self._by_sid[old.sid]
        self._metas[new.name] = new
        self._by_sid[new.sid] = new
        return new

    # -- TTL cleanup --------------------------------------------------------------------------------
    def _compact_ttl(self, meta: _Meta) -> None:
        """The compaction-filter emulation: query the time once, then check the state's next
        ``compact`` stored entries (each key group entered counts as one) from where the last run
        stopped (to the end of the key-group range; the run after starts over) and delete the
        expired ones, or the expired elements of a list, through the undo log, so they are deletes
        in the epoch's delta and roll back with it."""
        policy = meta.ttl
        horizon = policy.horizon(policy.now(self))
        budget = meta.compact
        cursor = meta.cursor
        first = self.key_groups.start if cursor is None else _U16.unpack_from(cursor)[0]
        wb = self._rd.WriteBatch(raw_mode=True)
        dirty = False
        is_list = meta.kind == "list"
        stop_at = None
        for kg in range(first, self.key_groups.stop):
            if budget <= 0:  # entering a key group costs a step too: a sparse state's run stays bounded
                stop_at = _U16.pack(kg)  # sorts before the key group's entries: resume at its start
                break
            budget -= 1
            lo = _U16.pack(kg) + meta.sid
            start = lo if cursor is None or cursor < lo else cursor + b"\x00"
            entries = self._scan(start, _successor(lo))
            try:
                for k, raw in entries:
                    budget -= 1
                    if is_list:
                        stored = pickle.loads(raw)
                        kept = policy.unexpired_or_none(stored, horizon)
                        if kept is not stored:
                            self._undo.setdefault(k, raw)
                            if kept is None:
                                wb.delete(k)
                            else:
                                wb.put(k, pickle.dumps(kept, protocol=serde.PROTOCOL))
                            dirty = True
                    elif raw[0] == _TTL_TAG and _I64.unpack_from(raw, 1)[0] <= horizon:
                        if meta.is_map:
                            prefix = k[:8 + _U32.unpack_from(k, 4)[0]]
                            self._touch_map(prefix, k, raw)
                        else:
                            self._undo.setdefault(k, raw)
                        wb.delete(k)
                        dirty = True
                    if budget <= 0:
                        stop_at = k
                        break
            finally:
                entries.close()
            if stop_at is not None:
                break
        meta.cursor = stop_at
        if dirty:
            self._db.write(wb)

    # -- sections ---------------------------------------------------------------------------------
    def _names(self) -> dict[bytes, tuple]:
        """State id → (name, is_map, kind) as of now: what a section built later must use."""
        return {sid: (m.name, m.is_map, m.kind) for sid, m in self._by_sid.items()}

    def _touched(self) -> dict[int, tuple[list, list]]:
        """Key group → (touched non-map RocksDB keys, touched map prefixes) of the open epoch, in key order."""
        groups: dict[int, tuple[list, list]] = {}
        keys = self._undo.keys() if not self._forced else {**self._undo, **self._forced}.keys()
        for k in sorted(keys):
            g = groups.get(_U16.unpack_from(k)[0])
            if g is None:
                g = groups[_U16.unpack_from(k)[0]] = ([], [])
            g[0].append(k)
        maps = self._touched_maps.keys() if not self._forced_maps else {**self._touched_maps,
                                                                         **self._forced_maps}.keys()
        for prefix in sorted(maps):
            g = groups.get(_U16.unpack_from(prefix)[0])
            if g is None:
                g = groups[_U16.unpack_from(prefix)[0]] = ([], [])
            g[1].append(prefix)
        return dict(sorted(groups.items()))

    @staticmethod
    def _delta_section(keys, prefixes, raws, scan, names) -> dict:
        """One key group's delta: a put per present key, a delete per absent one; a touched map is
        put whole (read with ``scan``) or deleted when it has no entries left."""
        section: dict[str, tuple] = {}

        def entry(sid):
            name = names[sid][0]
            e = section.get(name)
            if e is None:
                e = section[name] = ({}, [])
            return e

        for k, raw in zip(keys, raws):
            puts, deletes = entry(k[2:4])
            if raw is None:
                deletes.append(decode_key(k[4:]))
            else:
                puts[decode_key(k[4:])] = pickle.loads(raw) if raw[0] != _TTL_TAG else _decode(raw)
        for prefix in prefixes:
            puts, deletes = entry(prefix[2:4])
            ukey = decode_key(prefix[8:])
            n = len(prefix)
            m = {decode_key(k[n:]): pickle.loads(v) if v[0] != _TTL_TAG else _decode(v)
                 for k, v in scan(prefix, _successor(prefix))}
            if m:
                puts[ukey] = m
            else:
                deletes.append(ukey)
        return section

    def changed_sections(self):
        names = self._names()
        return {kg: self._delta_section(keys, prefixes, self._db.get(keys) if keys else [], self._scan, names)
                for kg, (keys, prefixes) in self._touched().items()}

    def delta_sections(self) -> LazySections:
        """The open epoch's changes, encoded one key group at a time as the checkpoint file is
        written: key groups and keys are fixed now and the values are read from a view of now, so
        memory is one key group's delta, not the epoch's."""
        touched = self._touched()
        view = _View(self)
        names = self._names()

        def produce(kg):
            keys, prefixes = touched[kg]
            return self._delta_section(keys, prefixes, [view.get(k) for k in keys], view.scan, names)

        # every touched key is a put or a delete: a touched key group always has a section
        return LazySections(touched, produce, self._encode_section, nonempty=touched.__contains__,
                            dump=self._dump_section)

    def _encode_section(self, kg: int, section: dict) -> bytes:
        return serde.dumps_state(section, operator=self.operator, key_group=kg)

    def _dump_section(self, kg: int, section: dict, file) -> None:
        serde.dump_state(section, file, operator=self.operator, key_group=kg)

    @staticmethod
    def _group_section(entries, names, horizons) -> dict:
        """One key group's full section from its (RocksDB key, bytes) entries in key order. Expired
        values of states with TTL cleanup in full snapshots (``horizons``: state id → horizon) are
        left out."""
        section: dict[str, tuple] = {}
        last_prefix = None
        current_map = None
        for k, raw in entries:
            sid = k[2:4]
            name, is_map, kind = names[sid]
            if horizons and sid in horizons:
                horizon, policy = horizons[sid]
                if kind == "list":
                    value = policy.unexpired_or_none(pickle.loads(raw), horizon)
                    if value is None:
                        continue
                    e = section.get(name)
                    if e is None:
                        e = section[name] = ({}, [])
                    e[0][decode_key(k[4:])] = value
                    continue
                if raw[0] == _TTL_TAG and _I64.unpack_from(raw, 1)[0] <= horizon:
                    continue
            e = section.get(name)
            if e is None:
                e = section[name] = ({}, [])
            if is_map:
                end = 8 + _U32.unpack_from(k, 4)[0]
                prefix = k[:end]
                if prefix != last_prefix:
                    last_prefix = prefix
                    current_map = e[0][decode_key(k[8:end])] = {}
                current_map[decode_key(k[end:])] = pickle.loads(raw) if raw[0] != _TTL_TAG else _decode(raw)
            else:
                e[0][decode_key(k[4:])] = pickle.loads(raw) if raw[0] != _TTL_TAG else _decode(raw)
        return section

    def _full_snapshot_horizons(self) -> dict:
        """State id → (TTL horizon, policy), for the states whose expired values full snapshots leave out."""
        horizons = {}
        for meta in self._metas.values():
            policy = meta.ttl
            if policy is not None and policy.full_snapshot:
                horizons[meta.sid] = (policy.horizon(policy.now(self)), policy)
        return horizons

    def all_sections(self):
        """Key group → decoded full section, in one pass (a dict: for tests, tools and restores
        in memory; checkpoints use ``full_sections``)."""
        names = self._names()
        horizons = self._full_snapshot_horizons()
        sections = {}
        for kgb, entries in itertools.groupby(self._scan(self._lower, self._upper), key=lambda e: e[0][:2]):
            section = self._group_section(entries, names, horizons)
            if section:
                sections[_U16.unpack(kgb)[0]] = section
        return sections

    def full_sections(self) -> LazySections:
        """A full snapshot as of now, built and encoded one key group at a time (a range scan of the
        key group's prefix in a view opened now) as the checkpoint file is written: peak memory is
        about one key group's section, not the subtask's state."""
        view = _View(self)
        names = self._names()
        horizons = self._full_snapshot_horizons()

        def bounds(kg):
            return _U16.pack(kg), _U16.pack(kg + 1)

        def produce(kg):
            return self._group_section(view.scan(*bounds(kg)), names, horizons)

        def nonempty(kg):
            return view.first(*bounds(kg)) is not None

        return LazySections(self.key_groups, produce, self._encode_section,
                            nonempty=None if horizons else nonempty, dump=self._dump_section)

    def restore_payload(self, key_group: int, payload: bytes) -> None:
        """Restore an encoded section, handing each value to RocksDB and dropping it from the decoded
        section as it goes, so memory holds the payload, what is left of the section and one batch."""
        self.apply_section(key_group, serde.loads(payload), _consume=True)

    def apply_section(self, key_group: int, section: dict, _consume: bool = False) -> None:
        """Restore a section. A registered state gets its values in its own form (plain values
        restored into a TTL-enabled state are stamped with the current time and carried by the next
        delta); a state not registered yet keeps the form it came in until it is registered. Written
        in batches of ~4 MB (``_Batch``), so a large key group never sits whole in a write batch and
        a memtable on top of its decoded section."""
        if key_group not in self.key_groups:
            return
        kgb = _U16.pack(key_group)
        wb = _Batch(self)
        for name, (puts, deletes) in section.items():
            entries = _drain(puts) if _consume else puts.items()
            meta = self._meta_for(name)
            base = kgb + meta.sid
            policy = meta.ttl
            now = None if policy is None else policy.now(self)
            if meta.is_map:
                for ukey, m in entries:
                    if not isinstance(m, dict):
                        raise TypeError(
                            f"operator '{self.operator}': map state '{name}' restored with a "
                            f"{type(m).__name__} for key {ukey!r}")
                    ukb = encode_key(ukey)
                    prefix = base + _U32.pack(len(ukb)) + ukb
                    converted = unstamp("map", m) if policy is None else stamp("map", m, now)
                    if policy is not None and converted is not m:
                        self._forced_maps[prefix] = None
                    new = {prefix + encode_key(mk): _encode(mv) for mk, mv in converted.items()}
                    for k, _ in self._scan(prefix, _successor(prefix)):
                        if k not in new:
                            wb.delete(k)
                    for k, raw in new.items():
                        wb.put(k, raw)
                for ukey in deletes:
                    ukb = encode_key(ukey)
                    prefix = base + _U32.pack(len(ukb)) + ukb
                    for k, _ in self._scan(prefix, _successor(prefix)):
                        wb.delete(k)
            else:
                kind = meta.kind
                for ukey, value in entries:
                    if kind is None:  # not registered: keep the form, remember it for registration
                        if _is_ttl_form(value):
                            meta.restored_ttl = True
                        else:
                            meta.restored_plain = True
                        wb.put(base + encode_key(ukey), _encode(value))
                    elif policy is None:
                        wb.put(base + encode_key(ukey), _encode(unstamp(kind, value)))
                    else:
                        stamped = stamp(kind, value, now)
                        k = base + encode_key(ukey)
                        if stamped is not value:
                            self._forced[k] = None
                        wb.put(k, _encode(stamped))
                for ukey in deletes:
                    wb.delete(base + encode_key(ukey))
        wb.flush()

    # -- epochs -----------------------------------------------------------------------------------
    def confirm(self) -> None:
        self._undo = {}
        self._undo_map = {}
        self._touched_maps = {}
        self._forced = {}
        self._forced_maps = {}

    def rollback(self) -> None:
        if self._undo or self._undo_map:
            wb = self._rd.WriteBatch(raw_mode=True)
            for undo in (self._undo, self._undo_map):
                for k, old in undo.items():
                    if old is None:
                        wb.delete(k)
                    else:
                        wb.put(k, old)
            self._db.write(wb)
        # restored values stamped for TTL stay stamped (and due for the next delta)
        self._undo = {}
        self._undo_map = {}
        self._touched_maps = {}

    def has_pending(self) -> bool:
        return bool(self._undo or self._touched_maps or self._forced or self._forced_maps)

    def keys_of(self, name: str):
        """(key group, key) of every key that has a value in state ``name``: a scan of that state's
        range in each key group, reading keys only (the base class decodes every state's values)."""
        meta = self._metas.get(name)
        if meta is None:
            return
        ro = self._rd.ReadOptions()
        ro.fill_cache(False)
        for kg in self.key_groups:
            lo = _U16.pack(kg) + meta.sid
            hi = _successor(lo)
            ro.set_iterate_upper_bound(hi)
            last = None
            keys = self._db.keys(from_key=lo, read_opt=ro)
            try:
                for k in keys:
                    if meta.is_map:
                        k = k[:8 + _U32.unpack_from(k, 4)[0]]
                        if k == last:
                            continue
                        last = k
                        yield kg, decode_key(k[8:])
                    else:
                        yield kg, decode_key(k[4:])
            finally:
                del keys  # the iterator goes before the bound it points into

    def key_count(self) -> int:
        """(state, user key) pairs holding a value, as the heap backend counts them."""
        count = 0
        last = None
        for k, _ in self._scan(self._lower, self._upper):
            if self._by_sid[k[2:4]].is_map:
                prefix = k[:8 + _U32.unpack_from(k, 4)[0]]
                if prefix != last:
                    last = prefix
                    count += 1
            else:
                count += 1
        return count

    # -- lifecycle --------------------------------------------------------------------------------
    def close(self) -> None:
        """Close RocksDB and delete its directory (also done when the backend is collected)."""
        self._finalizer()

    dispose = close


_UNITS = {"": 1, "b": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "kibibytes": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mebibytes": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gibibytes": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tebibytes": 1 << 40}


def parse_memory_size(size) -> int:
    """Bytes from an int or a Flink ``MemorySize`` string ("64mb", "64 m", "1g", "512kb"; powers of 1024)."""
    if isinstance(size, bool):
        raise TypeError("a memory size is a number of bytes or a string such as '64mb'")
    if isinstance(size, int):
        n = size
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(size))
        if m is None or m.group(2).lower() not in _UNITS:
            raise ValueError(f"cannot parse memory size {size!r} (examples: 64mb, 1g, 512kb, 1048576)")
        n = int(m.group(1)) * _UNITS[m.group(2).lower()]
    if n <= 0:
        raise ValueError(f"memory size must be positive, got {size!r}")
    return n


class RocksDBMemoryConfiguration:
    """How much memory RocksDB may use in one Python worker (Flink's ``RocksDBMemoryConfiguration``,
    from ``EmbeddedRocksDBStateBackend.get_memory_configuration()``; Flink's options
    ``state.backend.rocksdb.memory.fixed-per-slot`` and ``...memory.write-buffer-ratio``).

    A Spark Python worker runs one task at a time, so it is keyspan's "slot": every RocksDB instance
    the worker opens (one per operator and key-group range, kept across epochs) shares one LRU block
    cache and one write-buffer manager that charges memtables to that cache, sized as Flink sizes
    them from ``fixed_memory_per_slot`` M and ``write_buffer_ratio`` r: cache capacity M·(3−r)/3,
    memtable budget 2·M·r/3, each instance's write buffer at most half of that; index and filter
    blocks live in the cache. So RocksDB's own memory (block cache + memtables) stays about M per
    worker however large the state and however many instances (RocksDB iterators, compactions and
    the allocator's slack come on top; the cache limit is not strict). Default: 128 MiB, ratio 0.5.
    """

    DEFAULT_FIXED_MEMORY_PER_SLOT = 128 << 20
    DEFAULT_WRITE_BUFFER_RATIO = 0.5

    def __init__(self):
        self._fixed = self.DEFAULT_FIXED_MEMORY_PER_SLOT
        self._ratio = self.DEFAULT_WRITE_BUFFER_RATIO

    def set_fixed_memory_per_slot(self, size) -> None:
        """Bytes (an int) or a size string ("64mb", "1g") for all RocksDB instances of one worker."""
        self._fixed = parse_memory_size(size)

    def get_fixed_memory_per_slot(self) -> int:
        return self._fixed

    def set_write_buffer_ratio(self, ratio: float) -> None:
        """The share of the memory for memtables (write buffers), strictly between 0 and 1."""
        ratio = float(ratio)
        if not 0 < ratio < 1:
            raise ValueError(f"write buffer ratio must be in (0, 1), got {ratio}")
        self._ratio = ratio

    def get_write_buffer_ratio(self) -> float:
        return self._ratio

    def sizes(self) -> tuple[int, int, int]:
        """(block cache capacity, memtable budget, write buffer size per instance) in bytes."""
        m, r = self._fixed, self._ratio
        cache = int(m * (3 - r) / 3)
        memtables = max(1 << 20, int(2 * m * r / 3))
        return cache, memtables, max(256 << 10, min(64 << 20, memtables // 2))

    def _key(self) -> tuple:
        return (self._fixed, self._ratio)

    def __repr__(self):
        return (f"RocksDBMemoryConfiguration(fixed_memory_per_slot={self._fixed}, "
                f"write_buffer_ratio={self._ratio})")


_SHARED_MEMORY: dict[tuple, tuple] = {}  # per process: configuration → (cache, write buffer manager)


def _bound_memory(rocksdict, options, memory: RocksDBMemoryConfiguration) -> None:
    """Give ``options`` the process's shared block cache and write-buffer manager for ``memory``."""
    cache_bytes, memtable_bytes, write_buffer = memory.sizes()
    shared = _SHARED_MEMORY.get(memory._key())
    if shared is None:
        cache = rocksdict.Cache(cache_bytes)
        manager = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(memtable_bytes, False, cache)
        shared = _SHARED_MEMORY[memory._key()] = (cache, manager)
    cache, manager = shared
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    options.set_block_based_table_factory(table)
    options.set_write_buffer_manager(manager)
    options.set_write_buffer_size(write_buffer)
    options.set_max_write_buffer_number(2)


class EmbeddedRocksDBStateBackend(StateBackendSpec):
    """PyFlink's ``EmbeddedRocksDBStateBackend``: keyed state in an embedded RocksDB per subtask and
    operator, on the worker's local disk, so state may exceed the Python worker's memory.

    keyspan checkpoints are always incremental (each epoch writes only its changes, with a full
    snapshot now and then), so ``enable_incremental_checkpointing`` is recorded but changes nothing.

    Memory. RocksDB's block cache and memtables are bounded per Python worker by
    ``get_memory_configuration()`` (``set_fixed_memory_per_slot``, default 128 MiB;
    ``set_write_buffer_ratio``, default 0.5; see ``RocksDBMemoryConfiguration``). Checkpoints
    (full snapshots and deltas) are built and written one key group at a time and restores read one
    key group (or a few small ones) at a time, so the worker's memory does not grow with the state:
    a job whose state is 10× the memory its workers may use runs to completion
    (tests/test_rocksdb_memory.py, bench/rocksdb_memory.py). What still grows with an epoch is the
    undo log (the previous bytes of the entries the epoch overwrote) — bound it with
    ``set_max_records_per_epoch`` when values are large.
    """

    name = "rocksdb"

    def __init__(self, enable_incremental_checkpointing=None):
        self._incremental = enable_incremental_checkpointing
        self._db_storage_paths: list[str] | None = None
        self._transfer_threads = 1
        self._memory = RocksDBMemoryConfiguration()

    def get_memory_configuration(self) -> RocksDBMemoryConfiguration:
        """RocksDB's memory budget per Python worker (Flink's ``getMemoryConfiguration()``), e.g.
        ``backend.get_memory_configuration().set_fixed_memory_per_slot("64mb")``."""
        if getattr(self, "_memory", None) is None:  # a backend pickled before this existed
            self._memory = RocksDBMemoryConfiguration()
        return self._memory

    def is_incremental_checkpoints_enabled(self) -> bool:
        return bool(self._incremental)

    def set_db_storage_paths(self, *paths: str) -> None:
        """Local directories for the RocksDB files (default: the temp directory); one is picked per backend."""
        self._db_storage_paths = [p[len("file://"):] if p.startswith("file://") else p for p in paths] or None

    def get_db_storage_paths(self) -> list[str]:
        return list(self._db_storage_paths or [])

    def set_number_of_transfer_threads(self, number_of_transfer_threads: int) -> None:
        self._transfer_threads = int(number_of_transfer_threads)

    def get_number_of_transfer_threads(self) -> int:
        return self._transfer_threads

    def _root(self, operator: str, key_groups: range) -> str:
        if self._db_storage_paths:
            paths = self._db_storage_paths
            return os.path.join(paths[(key_groups.start + len(operator)) % len(paths)], "keyspan-rocksdb")
        return os.path.join(tempfile.gettempdir(), "keyspan-rocksdb")

    def create_keyed_backend(self, operator: str, key_groups: range, local_dir: str | None = None):
        """Open a fresh RocksDB under ``local_dir`` (or the storage paths, or the temp directory),
        in ``<root>/<pid>/<operator>-<start>-<stop>-<uuid>``."""
        root = local_dir if local_dir is not None else self._root(operator, key_groups)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", operator)[:100]
        name = f"{safe}-{key_groups.start}-{key_groups.stop}-{uuid.uuid4().hex[:12]}"
        return RocksDBKeyedStateBackend(operator, key_groups, os.path.join(_prepare_pid_dir(root), name),
                                        self.get_memory_configuration())

    def __repr__(self):
        return f"EmbeddedRocksDBStateBackend(enable_incremental_checkpointing={self._incremental!r})"
