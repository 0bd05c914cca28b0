"""``RocksDBKeyedStateBackend`` (one operator's keyed state for one key-group range in one RocksDB) and
``EmbeddedRocksDBStateBackend`` (what the user selects)."""

from __future__ import annotations

import os
import pickle
import re
import tempfile
import uuid
import weakref
from enum import Enum
from itertools import repeat

from keyspan.io import serde
from keyspan.state.api import StateDescriptor
from keyspan.state.backend import KeyedStateBackend, StateBackendSpec, user_functions
from keyspan.state.rocksdb.layout import (
    _I64,
    _MISS,
    _NO_KEY,
    _TTL_TAG,
    _U16,
    _U32,
    _decode,
    _encode,
    _Meta,
    _successor,
    decode_key,
    encode_key,
    encode_keys,
)
from keyspan.state.rocksdb.memory import RocksDBMemoryConfiguration, _bound_memory
from keyspan.state.rocksdb.scratch import _dispose, _prepare_pid_dir
from keyspan.state.rocksdb.snapshot import Snapshots
from keyspan.state.rocksdb.states import NAMESPACED, PLAIN, TTL, RocksDBObjectCell
from keyspan.state.ttl import TtlPolicy, stamp, unstamp

_DIRTY_LIMIT = 4 << 20  # bytes of buffered writes before they go to RocksDB in one batch
_CACHE_SHARE = 4  # the cache may hold 1/4 of RocksDB's memory budget (keys, values, ~64 B per entry)
_ENTRY = 64  # a cache entry's bookkeeping: dict slot and bytes object headers
_OBJECT_ENTRY = 256  # an object cache entry: the key and value objects and three dict slots


# --- the backend -----------------------------------------------------------------------------------

class RocksDBKeyedStateBackend(Snapshots, KeyedStateBackend):
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
        memory = memory or RocksDBMemoryConfiguration()
        _bound_memory(rocksdict, options, memory)
        self._cache_limit = max(_DIRTY_LIMIT, memory.get_fixed_memory_per_slot() // _CACHE_SHARE)
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
        # The byte cache of the other plain (non-map) cells — lists, TTL states, large values: RocksDB key
        # → its current bytes (None: absent), for keys
        # read, prefetched or written lately. Reads look here first, so a key read and updated many
        # times costs one RocksDB get, and a chunk's keys are looked up together (``prefetch``). A key the
        # open epoch has not written holds RocksDB's bytes, which is where the undo log takes them
        # from. Bounded by a quarter of RocksDB's memory budget (then flushed and emptied); kept across a confirmed epoch while at most half full,
        # emptied on rollback and on anything that writes RocksDB directly (restores, TTL cleanup).
        self._cache: dict[bytes, bytes | None] = {}
        self._cache_bytes = 0
        # keys of the cache written but not yet in RocksDB: one WriteBatch per ~4 MB (``_flush``),
        # and before anything reads RocksDB directly
        self._dirty: dict[bytes, None] = {}
        self._dirty_bytes = 0
        self._plain_sids: list[bytes] = []  # state ids of the byte-cached plain states: what ``prefetch`` loads
        # value, reducing and aggregating states without TTL keep their keys' values as objects
        # (``RocksDBObjectCell``), at most ``_object_limit`` entries shared among them (``limit`` each)
        # before clean ones are dropped and written ones spilled to RocksDB through the undo log
        self._object_cells: list = []
        self._object_limit = max(4096, self._cache_limit // _OBJECT_ENTRY)
        self._undo_map: dict[bytes, bytes | None] = {}
        self._touched_maps: dict[bytes, None] = {}  # map prefixes touched this epoch, in order
        # restored values stamped for TTL by this instance: the next delta carries them (kept on rollback)
        self._forced: dict[bytes, None] = {}
        self._forced_maps: dict[bytes, None] = {}
        # serialized current key, cached per key object and key group
        self._ck_obj = _NO_KEY
        self._prefetched_keys: dict[int, bytes] = {}  # id(key) → encoded key, for the last prefetched chunk
        self._prefetched_objects = ()
        self._ck_bytes = b""
        self._ck_mapb = b""
        self._ck_kg = -1
        self._ck_kgb = b""

    # -- keys -------------------------------------------------------------------------------------
    def _key_parts(self):
        key = self.current_key
        if key is not self._ck_obj:
            ukb = self._prefetched_keys.get(id(key)) or encode_key(key)
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
        self._flush()
        ro = self._rd.ReadOptions()
        ro.set_iterate_upper_bound(upper)
        it = self._db.items(from_key=lower, read_opt=ro)
        try:
            yield from it
        finally:
            del it  # the iterator goes before the bounds it points into

    # -- epoch cache ------------------------------------------------------------------------------
    def _get(self, k: bytes):
        raw = self._cache.get(k, _MISS)
        if raw is _MISS:
            raw = self._db.get(k)
            self._cache[k] = raw
            self._cache_bytes += len(k) + (len(raw) if raw is not None else 0) + _ENTRY
            if self._cache_bytes >= self._cache_limit:
                self._drop_cache()
        return raw

    def _write(self, k: bytes, raw: bytes | None) -> None:
        """A plain cell's put (``raw``) or delete (None), through the undo log into the cache."""
        cache = self._cache
        old = cache.get(k, _MISS)
        if k not in self._undo:
            self._undo[k] = self._db.get(k) if old is _MISS else old
        cache[k] = raw
        self._dirty[k] = None
        size = len(raw) if raw is not None else 0
        self._dirty_bytes += len(k) + size + 16
        self._cache_bytes += len(k) + size + _ENTRY if old is _MISS else size - (len(old) if old is not None else 0)
        if self._dirty_bytes >= _DIRTY_LIMIT:
            self._flush()
        if self._cache_bytes >= self._cache_limit:
            self._drop_cache()

    def _flush(self) -> None:
        """Hand the written keys of the cache to RocksDB in one batch, in key order: RocksDB inserts
        a sorted batch into its memtable about twice as fast as one in arrival order (measured here:
        1 M puts in batches of 100 k random keys, 1.5 s sorted against 3.0 s unsorted)."""
        if not self._dirty:
            return
        wb = self._rd.WriteBatch(raw_mode=True)
        put, delete = wb.put, wb.delete
        cache = self._cache
        for k in sorted(self._dirty):
            raw = cache[k]
            if raw is None:
                delete(k)
            else:
                put(k, raw)
        self._db.write(wb)
        self._dirty = {}
        self._dirty_bytes = 0

    def _drop_cache(self) -> None:
        """Flush, then forget the cache (it is full, or RocksDB is about to be written directly)."""
        self._flush()
        self._cache = {}
        self._cache_bytes = 0

    def prefetch(self, key_groups, keys) -> None:
        """Load the entries of a chunk of records' (key group, key) pairs, for every registered value,
        list, reducing and aggregating state, into the object or byte cache: each distinct key once, in
        key order, in one C-level loop of point lookups (rocksdict's multi-get is about 40 % slower
        than that). The byte cache stops where it would be full."""
        for cell in self._object_cells:
            cell.prefetch(key_groups, keys)
        sids = self._plain_sids
        if not sids:
            return
        cache = self._cache
        heads = list(map(_U16.pack, key_groups))
        ukbs = encode_keys(keys)
        # the chunk's records set these very key objects as current key next: their bytes by identity
        # (``keys`` stays referenced, so no other object can take one of these ids meanwhile)
        self._prefetched_keys = dict(zip(map(id, keys), ukbs))
        self._prefetched_objects = keys
        wanted = set()
        for sid in sids:
            wanted.update(map(bytes.__add__, map(bytes.__add__, heads, repeat(sid)), ukbs))
        wanted = wanted.difference(cache)  # looks each key up in the cache (difference_update would scan it)
        if not wanted:
            return
        mean = self._cache_bytes // len(cache) if cache else 4 * _ENTRY  # bytes per entry so far
        limit = self._cache_limit
        if self._cache_bytes + len(wanted) * mean > limit:
            self._drop_cache()  # older entries make room for the chunk's
            cache = self._cache
        wanted = sorted(wanted)
        get = self._db.get
        at = 0
        while at < len(wanted):
            n = min(4096, (limit - self._cache_bytes) // (2 * mean))  # at most half of the room left
            if n < 16:
                return
            ks = wanted[at:at + n]
            at += n
            raws = list(map(get, ks))
            cache.update(zip(ks, raws))
            size = sum(map(len, ks)) + sum(len(raw) for raw in raws if raw is not None) + _ENTRY * len(ks)
            self._cache_bytes += size
            mean = max(mean, size // len(ks))

    def _spill_objects(self) -> None:
        """Hand the object cache's writes to RocksDB through the undo log: before anything reads
        RocksDB for the whole state, or when they outgrow ``_object_limit``."""
        for cell in self._object_cells:
            cell.write_through(self._undo)

    # -- undo log ---------------------------------------------------------------------------------
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
        if kind not in PLAIN:
            raise TypeError(f"unknown state descriptor {descriptor!r}")
        policy = TtlPolicy.of(descriptor)
        if kind == "map" or descriptor.namespaced:  # entries (or namespaces) under the key's prefix
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
        functions = user_functions(descriptor)
        if descriptor.namespaced:
            return NAMESPACED[kind](self, meta, **functions)
        if policy is None:
            state = PLAIN[kind](self, meta, **functions)
        else:
            meta.compact = policy.compact_entries
            state = TTL[kind](self, meta, policy, **functions)
        if isinstance(state, RocksDBObjectCell):
            for cell in self._object_cells:
                cell.limit = max(1, self._object_limit // len(self._object_cells))
        elif not meta.is_map:
            self._plain_sids.append(meta.sid)
        return state

    def _convert_restored(self, meta: _Meta, kind: str, policy) -> None:
        """A non-map state restored before registration, in the other form: stamp plain values with
        the current time (the restore's; the next delta carries them) or drop the timestamps."""
        now = None if policy is None else policy.now(self)
        self._drop_cache()
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
        self._drop_cache()
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
        horizon = policy.clock(self)[1]
        budget = meta.compact
        cursor = meta.cursor
        first = self.key_groups.start if cursor is None else _U16.unpack_from(cursor)[0]
        wb = self._rd.WriteBatch(raw_mode=True)
        dirty = False
        is_list = meta.kind == "list"
        cache = self._cache  # the entries changed here leave it (RocksDB is written directly)
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
                            cache.pop(k, None)
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
                            cache.pop(k, None)
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

    # -- epochs -----------------------------------------------------------------------------------
    def confirm(self) -> None:
        self._flush()
        for cell in self._object_cells:
            cell.write_through()
            if len(cell._values) > cell.limit // 2:
                cell.trim()  # the next epoch starts with at least half the room for its own keys
        if self._cache_bytes > self._cache_limit // 2:
            self._drop_cache()  # the next epoch starts with at least half the cache for its own keys
        self._undo = {}
        self._undo_map = {}
        self._touched_maps = {}
        self._forced = {}
        self._forced_maps = {}

    def rollback(self) -> None:
        for cell in self._object_cells:
            cell.forget()  # its writes not spilled were never in RocksDB; the spilled ones are in the undo log
        self._cache = {}  # unflushed writes were never in RocksDB: dropping them undoes them
        self._cache_bytes = 0
        self._dirty = {}
        self._dirty_bytes = 0
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
        return bool(self._undo or self._touched_maps or self._forced or self._forced_maps
                    or any(cell._written for cell in self._object_cells))

    def keys_of(self, name: str):
        """(key group, key) of every key that has a value in state ``name``: a scan of that state's
        range in each key group, reading keys only (the base class decodes every state's values)."""
        meta = self._metas.get(name)
        if meta is None:
            return
        last = None
        for kg, k in self._state_keys(meta):
            if meta.is_map:
                k = k[:8 + _U32.unpack_from(k, 4)[0]]
                if k == last:
                    continue
                last = k
                yield kg, decode_key(k[8:])
            else:
                yield kg, decode_key(k[4:])

    def map_keys_of(self, name: str):
        """A keys-only scan of map state ``name``'s range in each key group: one RocksDB key per entry."""
        meta = self._metas.get(name)
        if meta is None:
            return
        last = key = None
        for kg, k in self._state_keys(meta):
            end = 8 + _U32.unpack_from(k, 4)[0]
            if k[:end] != last:  # the next user key (or key group)
                last = k[:end]
                key = decode_key(k[8:end])
            yield kg, key, decode_key(k[end:])

    def _state_keys(self, meta):
        """(key group, RocksDB key) of every entry of one state, key group by key group, keys only
        and without filling the block cache."""
        self._spill_objects()
        self._flush()
        ro = self._rd.ReadOptions()
        ro.fill_cache(False)
        for kg in self.key_groups:
            lo = _U16.pack(kg) + meta.sid
            ro.set_iterate_upper_bound(_successor(lo))
            keys = self._db.keys(from_key=lo, read_opt=ro)
            try:
                for k in keys:
                    yield kg, k
            finally:
                del keys  # the iterator goes before the bound it points into

    def key_count(self) -> int:
        """(state, user key) pairs holding a value, as the heap backend counts them."""
        self._spill_objects()
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
        self._cache = {}
        self._dirty = {}
        for cell in self._object_cells:
            cell.forget()
        self._finalizer()

    dispose = close


class PredefinedOptions(Enum):
    """RocksDB option presets (PyFlink's enum): accepted and read back; keyspan sizes RocksDB from
    ``get_memory_configuration()``."""

    DEFAULT = 0
    SPINNING_DISK_OPTIMIZED = 1
    SPINNING_DISK_OPTIMIZED_HIGH_MEM = 2
    FLASH_SSD_OPTIMIZED = 3


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
    (tests/test_rocksdb_memory.py, bench/rocksdb_memory.py). Reads and writes of value, list, reducing
    and aggregating state go through caches of at most a quarter of the fixed memory per slot each,
    which a keyed stage fills with sorted lookups per chunk of records: value, reducing and aggregating
    state without TTL as objects, the rest as bytes. What still grows with an epoch is the undo log
    (the previous bytes of the entries the epoch overwrote) — bound it with
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

    def set_number_of_transfer_threads(self, number_of_transfering_threads: int) -> None:  # PyFlink's spelling
        self._transfer_threads = int(number_of_transfering_threads)

    def get_number_of_transfer_threads(self) -> int:
        return self._transfer_threads

    def set_predefined_options(self, options: PredefinedOptions) -> None:
        """Recorded and read back; keyspan sizes RocksDB from ``get_memory_configuration()`` instead."""
        if not isinstance(options, PredefinedOptions):
            raise TypeError(f"set_predefined_options takes a PredefinedOptions member (e.g. PredefinedOptions.DEFAULT), "
                            f"not {options!r}")
        self._predefined_options = options

    def get_predefined_options(self) -> PredefinedOptions:
        return getattr(self, "_predefined_options", PredefinedOptions.DEFAULT)

    def set_options(self, options_factory_class_name: str) -> None:
        raise NotImplementedError(
            f"not supported by keyspan: set_options('{options_factory_class_name}') takes a Java RocksDB options "
            "factory; size RocksDB with get_memory_configuration() instead")

    def get_options(self) -> None:
        """No Java options factory is ever set (see ``set_options``)."""
        return None

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
