"""The RocksDB backend's cells (``keyspan.state.internal``): the current key's RocksDB entry, a map's
entries under the key's prefix, or a namespace's entry under it.

Every write first records the entry's previous bytes in the backend's undo log. Stored values go
through ``_enc``/``_dec``: pickles for plain values and TTL lists; for TTL'd values and map entries
the tagged bytes themselves, whose timestamp ``_timestamp_of`` reads without unpickling.
"""

from __future__ import annotations

import pickle
from collections import deque
from itertools import repeat

from keyspan.io import serde
from keyspan.state.internal import STATES, NamespaceMixin, compose
from keyspan.state.rocksdb.layout import (
    _I64,
    _LARGE,
    _MISS,
    _NUMBERS,
    _TTL_HEAD,
    _TTL_TAG,
    _U16,
    _cached,
    _cached_all,
    _Frozen,
    _immutable,
    _stored_all,
    _successor,
    decode_key,
    encode_key,
    encode_keys,
)
from keyspan.state.ttl import TTL_STATES


def _same(x):
    return x


def _timestamp_of(raw: bytes) -> int:
    return _I64.unpack_from(raw, 1)[0]


def _value_of(raw: bytes):
    return pickle.loads(raw[9:])


def _restamped(raw: bytes, ts: int) -> bytes:
    return _TTL_HEAD.pack(_TTL_TAG, ts) + raw[9:]


class RocksDBCell:
    """The current key's entry: key group · state id · serialized key."""

    __slots__ = ("_backend", "_db", "_meta", "_name", "_ttl", "_reduce", "_agg", "_enc", "_dec", "_kobj", "_kkg",
                 "_kbytes")

    _timestamp_of = staticmethod(_timestamp_of)
    _value_of = staticmethod(_value_of)
    _restamped = staticmethod(_restamped)
    _private = staticmethod(_same)  # values are unpickled afresh on every read

    def __init__(self, backend, meta, policy=None, reduce_function=None, agg_function=None):
        self._backend = backend
        self._db = backend._db
        self._meta = meta
        self._name = meta.name
        self._ttl = policy
        self._reduce = getattr(reduce_function, "reduce", reduce_function)
        self._agg = agg_function
        tagged = policy is not None and meta.kind != "list"  # TTL values and map entries: tagged bytes
        self._enc = _same if tagged else self._dumps
        self._dec = _same if tagged else pickle.loads
        self._kobj = self._kkg = self._kbytes = None  # the last current key's RocksDB key (read, then write)

    def _dumps(self, value) -> bytes:
        try:
            return pickle.dumps(value, protocol=serde.PROTOCOL)
        except Exception as exc:  # noqa: BLE001 — re-raised with context
            b = self._backend
            raise serde.StateSerializationError(
                f"operator '{b.operator}': state '{self._name}' key {b.current_key!r} "
                f"(key group {b.current_key_group}) cannot hold a value of type {type(value).__name__} "
                f"in RocksDB: {exc}"
            ) from exc

    def _stamped(self, value, ts: int) -> bytes:
        return _TTL_HEAD.pack(_TTL_TAG, ts) + self._dumps(value)

    def _access(self) -> None:
        pass

    def _wrote(self, n: int) -> None:
        """Count TTL writes; every ``compact`` of them run the compaction-filter emulation."""
        meta = self._meta
        if meta.compact:
            meta.written += n
            if meta.written >= meta.compact:
                meta.written = 0
                self._backend._compact_ttl(meta)

    def _key(self) -> bytes:
        b = self._backend
        if b.current_key is self._kobj and b.current_key_group == self._kkg:
            return self._kbytes
        kgb, ukb = b._key_parts()
        self._kobj, self._kkg = b.current_key, b.current_key_group
        self._kbytes = k = kgb + self._meta.sid + ukb
        return k

    def _prefix(self) -> bytes:
        """Where the current key's map entries (or namespaces) start: key group · state · len(key) · key."""
        b = self._backend
        kgb, _ = b._key_parts()
        return kgb + self._meta.sid + b._ck_mapb

    def _load(self):
        b = self._backend
        k = self._key()
        raw = b._cache.get(k, _MISS)
        if raw is _MISS:
            raw = b._get(k)
        return None if raw is None else self._dec(raw)

    _load_for_update = _load  # a fresh copy anyway

    def _store(self, stored) -> None:
        self._backend._write(self._key(), self._enc(stored))

    def _delete(self) -> None:
        self._backend._write(self._key(), None)

    def _append(self, items) -> None:
        current = self._load()
        if current is None:
            current = []
        current.extend(items)
        self._store(current)


class RocksDBObjectCell(RocksDBCell):
    """A value, reducing or aggregating state without TTL, through the backend's object cache: the
    current values of the keys read or written lately, as objects keyed by user key, so a read or
    write is a dict lookup, as on the heap. Writes stay there (``_written``: key → key group) until
    the epoch is confirmed, when they go to RocksDB in one sorted batch (``write_through``), and the
    epoch's delta is taken from them without decoding. Values whose pickle is larger than ``_LARGE``
    go through the byte cache and undo log instead, where their memory is counted; a key's newest
    write is in exactly one of the two."""

    __slots__ = ("_values", "_written", "_rkeys", "_large", "limit")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._values: dict = {}  # user key → immutable value, ``_Frozen`` pickle, or None (absent)
        self._written: dict = {}  # user key → key group, written in the open epoch
        self._rkeys: dict = {}  # user key → RocksDB key, for the keys in ``_values``
        self._large = False  # whether a value of this state went through the byte cache
        self.limit = self._backend._object_limit  # entries kept: the backend's share for this state
        self._backend._object_cells.append(self)

    def _load(self):
        value = self._values.get(self._backend.current_key, _MISS)
        if value is _MISS:
            value = self._fetch()
        return pickle.loads(value) if value.__class__ is _Frozen else value

    _load_for_update = _load

    def _fetch(self):
        """The current key's value from the byte cache or RocksDB, remembered when small."""
        b = self._backend
        k = self._key()
        raw = b._get(k) if self._large else self._db.get(k)
        if raw is None:
            value = None
        else:
            value = _cached(raw)
            if value is _MISS:
                return _Frozen(raw)
        if len(self._values) >= self.limit:
            self.trim()
        self._values[b.current_key] = value
        self._rkeys[b.current_key] = k
        return value

    def _store(self, stored) -> None:
        if stored.__class__ not in _NUMBERS:  # numbers, the usual values, skip the checks
            if not _immutable(stored):
                raw = self._dumps(stored)
                if len(raw) > _LARGE:
                    return self._store_large(raw)
                stored = _Frozen(raw)
            elif stored.__class__ is not tuple and len(stored) > _LARGE:  # a long str or bytes
                return self._store_large(self._dumps(stored))
        b = self._backend
        key = b.current_key
        self._values[key] = stored
        written = self._written
        written[key] = b.current_key_group
        if len(written) >= self.limit:
            b._spill_objects()

    def _delete(self) -> None:
        self._store(None)

    def _store_large(self, raw: bytes) -> None:
        b = self._backend
        key = b.current_key
        self._values.pop(key, None)
        self._written.pop(key, None)
        self._large = True
        b._write(self._key(), raw)

    def prefetch(self, key_groups, keys) -> None:
        """Load the values of a chunk's keys not in the object cache, looked up in key order."""
        values = self._values
        wanted = {key: kg for kg, key in zip(key_groups, keys) if key not in values}
        if not wanted:
            return
        b = self._backend
        if len(values) + len(wanted) > self.limit:
            self.trim()
            values = self._values
        if self._large:
            b._flush()  # RocksDB gets the byte cache's writes before it is read
        ukeys = list(wanted)
        ks = list(map(bytes.__add__, map(bytes.__add__, map(_U16.pack, wanted.values()), repeat(self._meta.sid)),
                      encode_keys(ukeys)))
        order = sorted(range(len(ks)), key=ks.__getitem__)  # positions in key order (as in ``write_through``)
        ks = list(map(ks.__getitem__, order))
        ukeys = list(map(ukeys.__getitem__, order))
        cached = _cached_all(list(map(self._db.get, ks)))  # faster than rocksdict's multi-get
        values.update(zip(ukeys, cached))
        self._rkeys.update(zip(ukeys, ks))
        if _MISS in cached:  # large values (written or restored): read from RocksDB each time
            for key, value in zip(ukeys, cached):
                if value is _MISS:
                    del values[key]

    def write_through(self, undo: dict | None = None) -> None:
        """Hand the written values to RocksDB in one sorted batch, their previous bytes first into
        ``undo`` when the epoch is still open (a spill); the byte cache forgets these keys."""
        written = self._written
        if not written:
            return
        b = self._backend
        rkeys = self._rkeys
        ks = list(map(rkeys.get, written))
        if None in ks:
            sid = self._meta.sid
            for i, (key, kg) in enumerate(written.items()):
                if ks[i] is None:
                    ks[i] = rkeys[key] = _U16.pack(kg) + sid + encode_key(key)
        raws = _stored_all(list(map(self._values.__getitem__, written)))
        # in key order, which RocksDB inserts faster; sorting positions by key, rather than a dict of
        # the puts by key, saves a lookup per key
        order = sorted(range(len(ks)), key=ks.__getitem__)
        if self._large:
            b._flush()
        if undo is not None:
            missing = [k for k in ks if k not in undo]
            if missing:
                undo.update(zip(missing, map(self._db.get, missing)))
        wb = b._rd.WriteBatch(raw_mode=True)
        if None in raws:  # deletes (``in`` compares bytes with None only)
            for i in order:
                raw = raws[i]
                if raw is None:
                    wb.delete(ks[i])
                else:
                    wb.put(ks[i], raw)
        else:
            deque(map(wb.put, map(ks.__getitem__, order), map(raws.__getitem__, order)), 0)
        self._db.write(wb)
        if self._large:
            cache = b._cache
            for k in ks:
                cache.pop(k, None)
        self._written = {}

    def written_sections(self) -> dict:
        """Key group → (puts, deleted keys) of the open epoch's writes, values decoded."""
        groups: dict = {}
        values = self._values
        for key, kg in self._written.items():
            group = groups.get(kg)
            if group is None:
                group = groups[kg] = ({}, [])
            value = values[key]
            if value is None:
                group[1].append(key)
            else:
                group[0][key] = pickle.loads(value) if value.__class__ is _Frozen else value
        return groups

    def trim(self) -> None:
        """Forget the cached values of keys not written in the open epoch."""
        written, values, rkeys = self._written, self._values, self._rkeys
        self._values = {key: values[key] for key in written}
        self._rkeys = {key: rkeys[key] for key in written if key in rkeys}

    def forget(self) -> None:
        """Drop everything cached, written values included (a rollback, or RocksDB written directly)."""
        self._values = {}
        self._written = {}
        self._rkeys = {}


class RocksDBMapCell(RocksDBCell):
    """One RocksDB entry per map entry under the prefix key group · state · len(user key) · user key."""

    __slots__ = ()

    def _entry_load(self, key):
        raw = self._db.get(self._prefix() + encode_key(key))
        return None if raw is None else self._dec(raw)

    def _entry_contains(self, key) -> bool:
        return self._db.get(self._prefix() + encode_key(key)) is not None

    def _entry_store(self, key, stored) -> None:
        prefix = self._prefix()
        raw = self._enc(stored)
        k = prefix + encode_key(key)
        self._backend._touch_map(prefix, k)
        self._db.put(k, raw)

    def _entry_delete(self, key) -> None:
        self._entry_take(key, decode=False)

    def _entry_take(self, key, decode: bool = True):
        """The entry of ``key``, deleted (None without one): one read."""
        prefix = self._prefix()
        k = prefix + encode_key(key)
        old = self._db.get(k)
        if old is None:
            return None
        self._backend._touch_map(prefix, k, old)
        self._db.delete(k)
        return self._dec(old) if decode else None

    def _entries(self):
        prefix = self._prefix()
        n = len(prefix)
        dec = self._dec
        for k, raw in self._backend._scan(prefix, _successor(prefix)):
            yield decode_key(k[n:]), dec(raw)

    def _entries_update(self, puts: dict, deletes) -> None:
        if not puts and not deletes:
            return
        enc = self._enc
        encoded = [(encode_key(k), enc(v)) for k, v in puts.items()]
        b = self._backend
        prefix = self._prefix()
        wb = b._rd.WriteBatch(raw_mode=True)
        for key in deletes:
            k = prefix + encode_key(key)
            b._touch_map(prefix, k)
            wb.delete(k)
        for kb, raw in encoded:
            k = prefix + kb
            b._touch_map(prefix, k)
            wb.put(k, raw)
        self._db.write(wb)

    def _delete(self) -> None:
        prefix = self._prefix()
        b = self._backend
        b._touch_map(prefix)
        old = list(b._scan(prefix, _successor(prefix)))
        if not old:
            return
        wb = b._rd.WriteBatch(raw_mode=True)
        for k, raw in old:
            b._touch_map(prefix, k, raw)
            wb.delete(k)
        self._db.write(wb)


class RocksDBNamespacedCell(NamespaceMixin, RocksDBCell):
    """The (current key, current namespace) entry: laid out as a map state whose map keys are the
    namespaces, so a key's namespaces are one range."""

    __slots__ = ("_ns",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ns = None

    def _load(self):
        raw = self._db.get(self._prefix() + encode_key(self._ns))
        return None if raw is None else self._dec(raw)

    _load_for_update = _load

    def _store(self, stored) -> None:
        prefix = self._prefix()
        k = prefix + encode_key(self._ns)
        self._backend._touch_map(prefix, k)
        self._db.put(k, self._enc(stored))

    def _delete(self) -> None:
        prefix = self._prefix()
        k = prefix + encode_key(self._ns)
        old = self._db.get(k)
        if old is None:
            return
        self._backend._touch_map(prefix, k, old)
        self._db.delete(k)


def _cell(kind: str, ttl: bool) -> type:
    if kind == "map":
        return RocksDBMapCell
    return RocksDBCell if ttl or kind == "list" else RocksDBObjectCell


PLAIN = {kind: compose(_cell(kind, False), cls, f"RocksDB{cls.__name__[len('Internal'):]}")
         for kind, cls in STATES.items()}
TTL = {kind: compose(_cell(kind, True), cls, f"RocksDB{cls.__name__}") for kind, cls in TTL_STATES.items()}
NAMESPACED = {kind: compose(RocksDBNamespacedCell, cls, f"RocksDBNamespaced{cls.__name__[len('Internal'):]}")
              for kind, cls in STATES.items()}
