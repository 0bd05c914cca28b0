"""Snapshots and restores of the RocksDB backend in the backend-neutral section format: deltas of the
open epoch, full snapshots built one key group at a time from a point-in-time view, and restores
written in bounded batches."""

from __future__ import annotations

import bisect
import itertools
import operator
import pickle
from itertools import repeat

from keyspan.io import serde
from keyspan.state.backend import LazySections, dump_section, encode_section, note_puts
from keyspan.state.rocksdb.layout import (
    _I64,
    _TTL_TAG,
    _U16,
    _U32,
    _Batch,
    _decode,
    _drain,
    _encode,
    _is_ttl_form,
    _successor,
    _View,
    decode_key,
    encode_key,
    encode_keys,
)
from keyspan.state.ttl import TtlValue, stamp, unstamp

_KEY_GROUP = operator.itemgetter(slice(0, 2))  # a RocksDB key's key-group prefix
_STATE_ID = operator.itemgetter(slice(2, 4))
_USER_KEY = operator.itemgetter(slice(4, None))  # of a plain (non-map) state's entry
_FIRST_BYTE = operator.itemgetter(0)
_RESTORE_RUN = 128  # entries restored at C speed at a time (their pickles are held at once)


def _needs_no_conversion(kind, values) -> bool:
    """Whether restored values of a state without TTL are stored as they are: no ``TtlValue``, nor
    (for a state not registered yet, whose form the values tell) a list or dict that may hold some."""
    types = set(map(type, values))
    return TtlValue not in types and (kind is not None or not (list in types or dict in types))


class Snapshots:
    """The section methods of ``RocksDBKeyedStateBackend``."""

    # -- sections ---------------------------------------------------------------------------------
    def _names(self) -> dict[bytes, tuple]:
        """State id → (name, is_map, kind) as of now: what a section built later must use."""
        return {sid: (m.name, m.is_map, m.kind) for sid, m in self._by_sid.items()}

    def _touched(self) -> dict[int, tuple[list, list]]:
        """Key group → (touched non-map RocksDB keys, touched map prefixes) of the open epoch, in key order."""
        keys = self._undo.keys() if not self._forced else {**self._undo, **self._forced}.keys()
        groups: dict[int, tuple[list, list]] = {
            _U16.unpack(kgb)[0]: (list(ks), []) for kgb, ks in itertools.groupby(sorted(keys), _KEY_GROUP)}
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

        sid = None
        for k, raw in zip(keys, raws):
            if k[2:4] != sid:  # keys are sorted: a key group's entries come state by state
                sid = k[2:4]
                puts, deletes = entry(sid)
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

    def _object_writes(self) -> dict[int, list]:
        """Key group → [(state name, (puts, deleted keys))]: the object cache's writes of the open
        epoch, as of now."""
        writes: dict[int, list] = {}
        for cell in self._object_cells:
            for kg, entry in cell.written_sections().items():
                writes.setdefault(kg, []).append((cell._name, entry))
        return writes

    @staticmethod
    def _with_objects(section: dict, writes) -> dict:
        """A key group's delta section with the object cache's writes on top: they are newer than
        what the undo log's keys read (keys the object cache spilled earlier in the epoch)."""
        for name, (puts, deletes) in writes:
            e = section.get(name)
            if e is None:
                section[name] = (puts, deletes)
                continue
            merged, gone = e[0], dict.fromkeys(e[1])  # spilled earlier: a key may be on both sides
            for key in deletes:
                merged.pop(key, None)
                gone[key] = None
            for key, value in puts.items():
                merged[key] = value
                gone.pop(key, None)
            section[name] = (merged, list(gone))
        return section

    def changed_sections(self):
        self._flush()
        names = self._names()
        touched = self._touched()
        writes = self._object_writes()
        sections = {}
        for kg in sorted(touched.keys() | writes.keys()):
            keys, prefixes = touched.get(kg, ((), ()))
            section = self._delta_section(keys, prefixes, list(map(self._db.get, keys)), self._scan, names)
            sections[kg] = self._with_objects(section, writes.get(kg, ()))
        return sections

    def delta_sections(self) -> LazySections:
        """The open epoch's changes, encoded one key group at a time as the checkpoint file is
        written: key groups and keys are fixed now and the values are taken from the object cache,
        the byte cache or read from a view of now, so memory is the caches plus one key group's delta."""
        self._flush()
        touched = self._touched()
        writes = self._object_writes()
        view = _View(self)
        names = self._names()
        cache = self._cache
        known = {k: cache[k] for k in self._undo if k in cache}  # the epoch cache's bytes, as of now

        def produce(kg):
            keys, prefixes = touched.get(kg, ((), ()))
            raws = [known.get(k, _View) for k in keys]
            for i, raw in enumerate(raws):
                if raw is _View:  # not in the cache (any more): read it from the view
                    raws[i] = view.get(keys[i])
            section = self._delta_section(keys, prefixes, raws, view.scan, names)
            return self._with_objects(section, writes.get(kg, ()))

        # every touched key is a put or a delete: a touched key group always has a section
        groups = sorted(touched.keys() | writes.keys())
        return LazySections(groups, produce, self._encode_section,
                            nonempty=lambda kg: kg in touched or kg in writes, dump=self._dump_section)

    def _encode_section(self, kg: int, section: dict) -> bytes:
        return encode_section(section, self.operator, kg)

    def _dump_section(self, kg: int, section: dict, file) -> None:
        dump_section(section, file, self.operator, kg)

    @classmethod
    def _group_section(cls, keys: list, raws: list, names, horizons) -> dict:
        """One key group's full section from its RocksDB keys and bytes in key order. A state's run of
        plain values is decoded at C speed; maps, TTL'd values and states with TTL cleanup in full
        snapshots (``horizons``: state id → horizon, whose expired values are left out) entry by entry."""
        section: dict[str, tuple] = {}
        sids = list(map(_STATE_ID, keys))
        start, n = 0, len(keys)
        while start < n:
            sid = sids[start]
            end = bisect.bisect_right(sids, sid, start)
            name, is_map, _ = names[sid]
            ks, vs = keys[start:end], raws[start:end]
            if is_map or sid in horizons or _TTL_TAG in bytes(map(_FIRST_BYTE, vs)):
                cls._entries_section(section, zip(ks, vs), names, horizons)
            else:
                e = section.get(name)
                if e is None:
                    e = section[name] = ({}, [])
                e[0].update(zip(map(decode_key, map(_USER_KEY, ks)), map(pickle.loads, vs)))
            start = end
        return section

    @staticmethod
    def _entries_section(section: dict, entries, names, horizons) -> None:
        """Add one state's (RocksDB key, bytes) entries to ``section``, entry by entry."""
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

    def _full_snapshot_horizons(self) -> dict:
        """State id → (TTL horizon, policy), for the states whose expired values full snapshots leave out."""
        horizons = {}
        for meta in self._metas.values():
            policy = meta.ttl
            if policy is not None and policy.full_snapshot:
                horizons[meta.sid] = (policy.clock(self)[1], policy)
        return horizons

    def all_sections(self):
        """Key group → decoded full section (a dict: for tests, tools and restores in memory;
        checkpoints use ``full_sections``)."""
        produce, _ = self._full_snapshot()
        return {kg: section for kg in self.key_groups if (section := produce(kg))}

    def full_sections(self) -> LazySections:
        """A full snapshot as of now, built and encoded one key group at a time (a range scan of the
        key group's prefix in a view opened now) as the checkpoint file is written: peak memory is
        about one key group's section, not the subtask's state."""
        produce, nonempty = self._full_snapshot()
        return LazySections(self.key_groups, produce, self._encode_section, nonempty=nonempty,
                            dump=self._dump_section)

    def _full_snapshot(self):
        """(produce(kg) → the key group's full section, nonempty(kg) or None): a view of RocksDB
        opened now, with the object cache's writes of the open epoch on top."""
        self._flush()
        view = _View(self)
        writes = self._object_writes()
        names = self._names()
        horizons = self._full_snapshot_horizons()

        def produce(kg):
            keys, raws = view.lists(_U16.pack(kg), _U16.pack(kg + 1))
            section = self._group_section(keys, raws, names, horizons) if keys else {}
            for name, (puts, deletes) in writes.get(kg, ()):
                e = section.get(name)
                if e is None:
                    e = section[name] = ({}, [])
                e[0].update(puts)
                for key in deletes:
                    e[0].pop(key, None)
                if not e[0]:
                    del section[name]
            return section

        def nonempty(kg):
            if kg in writes:
                return bool(produce(kg))
            return view.first(_U16.pack(kg), _U16.pack(kg + 1)) is not None

        return produce, None if horizons else nonempty

    def restore_payload(self, key_group: int, payload: bytes, watched: dict | None = None) -> None:
        """Restore an encoded section, handing each value to RocksDB and dropping it from the decoded
        section as it goes, so memory holds the payload, what is left of the section and one batch."""
        self.apply_section(key_group, note_puts(serde.loads(payload), key_group, watched, self.values_in_memory),
                           _consume=True)

    def apply_section(self, key_group: int, section: dict, _consume: bool = False) -> None:
        """Restore a section. A registered state gets its values in its own form (plain values
        restored into a TTL-enabled state are stamped with the current time and carried by the next
        delta); a state not registered yet keeps the form it came in until it is registered. Written
        in batches of ~4 MB (``_Batch``), so a large key group never sits whole in a write batch and
        a memtable on top of its decoded section."""
        if key_group not in self.key_groups:
            return
        self._spill_objects()
        for cell in self._object_cells:
            cell.forget()  # RocksDB is written directly
        self._drop_cache()
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
                if policy is None and meta.kind != "list":
                    entries = iter(entries)
                    while run := list(itertools.islice(entries, _RESTORE_RUN)):
                        ukeys, values = zip(*run)
                        if _needs_no_conversion(meta.kind, values):  # keys and values pickled at C speed
                            if meta.kind is None:
                                meta.restored_plain = True
                            wb.put_all(list(map(bytes.__add__, repeat(base), encode_keys(ukeys))),
                                       list(map(pickle.dumps, values, repeat(serde.PROTOCOL))))
                        else:
                            self._restore_entries(meta, base, None, run, wb)
                else:
                    self._restore_entries(meta, base, now, entries, wb)
                for ukey in deletes:
                    wb.delete(base + encode_key(ukey))
        wb.flush()

    def _restore_entries(self, meta, base: bytes, now, entries, wb) -> None:
        """Restore a plain state's (user key, value) entries one by one, converting their form."""
        kind, policy = meta.kind, meta.ttl
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
