"""The RocksDB backend's cells (``keyspan.state.internal``): the current key's RocksDB entry, a map's
entries under the key's prefix, or a namespace's entry under it.

Every write first records the entry's previous bytes in the backend's undo log. Stored values go
through ``_enc``/``_dec``: pickles for plain values and TTL lists; for TTL'd values and map entries
the tagged bytes themselves, whose timestamp ``_timestamp_of`` reads without unpickling.
"""

from __future__ import annotations

import pickle

from keyspan.io import serde
from keyspan.state.internal import STATES, NamespaceMixin, compose
from keyspan.state.rocksdb.layout import _I64, _MISS, _TTL_HEAD, _TTL_TAG, _successor, decode_key, encode_key
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
        prefix = self._prefix()
        k = prefix + encode_key(key)
        old = self._db.get(k)
        if old is None:
            return
        self._backend._touch_map(prefix, k, old)
        self._db.delete(k)

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


def _cell(kind: str) -> type:
    return RocksDBMapCell if kind == "map" else RocksDBCell


PLAIN = {kind: compose(_cell(kind), cls, f"RocksDB{cls.__name__[len('Internal'):]}") for kind, cls in STATES.items()}
TTL = {kind: compose(_cell(kind), cls, f"RocksDB{cls.__name__}") for kind, cls in TTL_STATES.items()}
NAMESPACED = {kind: compose(RocksDBNamespacedCell, cls, f"RocksDBNamespaced{cls.__name__[len('Internal'):]}")
              for kind, cls in STATES.items()}
