"""The heap ("hashmap") keyed state backend: Python dicts per key group, with an undo log per epoch."""

from __future__ import annotations

import copy

from keyspan.state.api import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    StateDescriptor,
    ValueState,
)
from keyspan.state.backend import KeyedStateBackend, StateBackendSpec
from keyspan.state.ttl import LONG_MAX, TtlPolicy, TtlValue, needs_stamp, needs_unstamp, stamp, unstamp

_ALL_EXPIRED = float("inf")

MISSING = object()
_IMMUTABLE = frozenset((int, float, str, bytes, bool, type(None), complex))


def _copy_value(value):
    if isinstance(value, tuple) and all(type(v) in _IMMUTABLE for v in value):
        return value
    return copy.deepcopy(value)


class StateTable:
    """One state's entries for a key-group range; ``undo`` keeps pre-epoch values of touched keys.

    ``kind``/``ttl`` are set when the state is registered (``ttl``: its TtlPolicy, or None);
    ``restored`` says that sections were applied before that, so registration must convert them
    between plain and TTL form; ``forced`` holds keys that such a conversion stamped, which the next
    delta must carry although no state operation touched them."""

    __slots__ = ("name", "start", "groups", "undo", "kind", "ttl", "restored", "forced")

    def __init__(self, name: str, key_groups: range):
        self.name = name
        self.start = key_groups.start
        self.groups = [dict() for _ in key_groups]
        self.undo: dict[int, dict] = {}
        self.kind = None
        self.ttl = None
        self.restored = False
        self.forced: dict[int, set] = {}

    def touch(self, kg: int, key, copy=None) -> dict:
        """Record the pre-epoch value of ``key`` once per epoch; returns the key group's dict."""
        group = self.groups[kg - self.start]
        undo = self.undo.get(kg)
        if undo is None:
            undo = self.undo[kg] = {}
        if key not in undo:
            old = group.get(key, MISSING)
            if old is not MISSING and type(old) not in _IMMUTABLE:
                # the user may have mutated the object they got from value() before update():
                # keep a private copy so a rollback restores what the last committed epoch held
                old = (copy or _copy_value)(old)
            undo[key] = old
        return group

    def changes(self):
        forced = self.forced
        kgs = self.undo if not forced else dict.fromkeys([*self.undo, *forced])
        for kg in kgs:
            group = self.groups[kg - self.start]
            puts = {}
            deletes = []
            keys = self.undo.get(kg, ())
            if forced and kg in forced:
                keys = dict.fromkeys([*keys, *forced[kg]])
            for key in keys:
                value = group.get(key, MISSING)
                if value is MISSING:
                    deletes.append(key)
                else:
                    puts[key] = value
            if puts or deletes:
                yield kg, puts, deletes

    def rollback(self) -> None:
        for kg, undo in self.undo.items():
            group = self.groups[kg - self.start]
            for key, old in undo.items():
                if old is MISSING:
                    group.pop(key, None)
                else:
                    group[key] = old
        self.undo = {}


class _HeapState:
    __slots__ = ("_backend", "_table")

    def __init__(self, backend: "HeapKeyedStateBackend", table: StateTable):
        self._backend = backend
        self._table = table

    def _current(self):
        b = self._backend
        return self._table.groups[b.current_key_group - self._table.start].get(b.current_key, MISSING)

    def _write(self, value, copy=None) -> None:
        b = self._backend
        self._table.touch(b.current_key_group, b.current_key, copy)[b.current_key] = value

    def clear(self) -> None:
        b = self._backend
        group = self._table.touch(b.current_key_group, b.current_key)
        group.pop(b.current_key, None)


class HeapValueState(_HeapState, ValueState):
    __slots__ = ()

    def value(self):
        b = self._backend
        return self._table.groups[b.current_key_group - self._table.start].get(b.current_key)

    def update(self, value) -> None:
        if value is None:
            self.clear()
            return
        b = self._backend
        self._table.touch(b.current_key_group, b.current_key)[b.current_key] = value


class HeapListState(_HeapState, ListState):
    __slots__ = ()

    def get(self):
        value = self._current()
        return [] if value is MISSING else value

    def add(self, value) -> None:
        if value is None:
            raise ValueError(f"operator '{self._backend.operator}': cannot add None to list state '{self._table.name}'")
        b = self._backend
        group = self._table.touch(b.current_key_group, b.current_key, list)
        lst = group.get(b.current_key)
        if lst is None:
            group[b.current_key] = [value]
        else:
            lst.append(value)

    def add_all(self, values) -> None:
        for v in values:
            self.add(v)

    def update(self, values) -> None:
        values = list(values or ())
        if not values:
            self.clear()
        else:
            self._write(values)


class HeapMapState(_HeapState, MapState):
    __slots__ = ()

    def _map(self):
        value = self._current()
        return None if value is MISSING else value

    def _mutable_map(self) -> dict:
        b = self._backend
        group = self._table.touch(b.current_key_group, b.current_key, dict)
        m = group.get(b.current_key)
        if m is None:
            m = group[b.current_key] = {}
        return m

    def get(self, key):
        m = self._map()
        return None if m is None else m.get(key)

    def put(self, key, value) -> None:
        self._mutable_map()[key] = value

    def put_all(self, dict_value) -> None:
        self._mutable_map().update(dict_value)

    def remove(self, key) -> None:
        m = self._map()
        if m is None or key not in m:
            return
        m = self._mutable_map()
        del m[key]
        if not m:
            self.clear()

    def contains(self, key) -> bool:
        m = self._map()
        return m is not None and key in m

    def items(self):
        m = self._map()
        return [] if m is None else list(m.items())

    def keys(self):
        m = self._map()
        return [] if m is None else list(m.keys())

    def values(self):
        m = self._map()
        return [] if m is None else list(m.values())

    def is_empty(self) -> bool:
        m = self._map()
        return not m


class HeapReducingState(_HeapState, ReducingState):
    __slots__ = ("_reduce",)

    def __init__(self, backend, table, reduce_function):
        super().__init__(backend, table)
        self._reduce = getattr(reduce_function, "reduce", reduce_function)

    def get(self):
        value = self._current()
        return None if value is MISSING else value

    def add(self, value) -> None:
        current = self._current()
        if current is not MISSING:  # the reduce function may update ``current`` in place: keep the undo copy
            b = self._backend
            self._table.touch(b.current_key_group, b.current_key, copy.deepcopy)
        self._write(value if current is MISSING else self._reduce(current, value))


class HeapAggregatingState(_HeapState, AggregatingState):
    __slots__ = ("_agg",)

    def __init__(self, backend, table, agg_function):
        super().__init__(backend, table)
        self._agg = agg_function

    def get(self):
        acc = self._current()
        return None if acc is MISSING else self._agg.get_result(acc)

    def add(self, value) -> None:
        acc = self._current()
        if acc is MISSING:
            acc = self._agg.create_accumulator()
        else:  # ``add`` usually updates the accumulator in place: keep the undo copy first
            b = self._backend
            self._table.touch(b.current_key_group, b.current_key, copy.deepcopy)
        self._write(self._agg.add(value, acc))


# --- TTL states: values are TtlValue((user value, last access ms)); per element/entry for list/map ---

class _HeapIncrementalCleanup:
    """Flink's incremental cleanup for the heap backend: a lazy cursor over all of a state's entries
    (every key group, in turn); each run checks ``size`` entries and removes the expired parts through
    the undo log, so the removals are deletes (or smaller values) in the epoch's delta and roll back
    with it. A key group's keys are listed when the cursor enters it (entries added later are seen in
    the next round), and each empty key group passed counts as one check, so a run is bounded."""

    __slots__ = ("backend", "table", "policy", "size", "index", "keys", "pos", "value_like", "copy")

    def __init__(self, backend, table: StateTable, policy: TtlPolicy):
        self.backend = backend
        self.table = table
        self.policy = policy
        self.size = policy.incremental_size
        self.index = -1
        self.keys = ()
        self.pos = 0
        self.value_like = policy.kind not in ("list", "map")
        self.copy = _TTL_COPY.get(policy.kind)

    def run(self) -> None:
        table = self.table
        groups = table.groups
        policy = self.policy
        b = self.backend
        now = b.current_watermark if policy.event_time else b.ttl_time_provider()
        horizon = now - policy.ttl if now < LONG_MAX else _ALL_EXPIRED
        value_like = self.value_like
        budget = self.size
        keys = self.keys
        pos = self.pos
        index = self.index
        group = groups[index] if index >= 0 else None
        while budget > 0:
            if pos >= len(keys):
                index = (index + 1) % len(groups)
                group = groups[index]
                keys = list(group) if group else ()
                pos = 0
                if not keys:
                    budget -= 1
                continue
            key = keys[pos]
            pos += 1
            budget -= 1
            stored = group.get(key)
            if stored is None:
                continue
            if value_like:
                if stored[1] > horizon:
                    continue
                kept = None
            else:
                kept = policy.unexpired_or_none(stored, horizon)
                if kept is stored:
                    continue
            touched = table.touch(table.start + index, key, self.copy)
            if kept is None:
                del touched[key]
            else:
                touched[key] = kept
        self.keys = keys
        self.pos = pos
        self.index = index


_TTL_COPY = {"list": list, "map": dict}


class _HeapTtlState(_HeapState):
    __slots__ = ("_ttl", "_cleanup")

    def __init__(self, backend, table, policy: TtlPolicy, cleanup):
        super().__init__(backend, table)
        self._ttl = policy
        self._cleanup = cleanup

    def _clock(self):
        """(now, horizon): timestamps <= horizon are expired."""
        p = self._ttl
        b = self._backend
        now = b.current_watermark if p.event_time else b.ttl_time_provider()
        return now, (now - p.ttl if now < LONG_MAX else _ALL_EXPIRED)

    def _get_wrapped(self):
        """Flink's getWrappedWithTtlCheckAndUpdate: the current key's TtlValue or None; an expired one
        is removed (and returned only with ReturnExpiredIfNotCleanedUp); with OnReadAndWrite an
        unexpired one gets the current time."""
        b = self._backend
        table = self._table
        key = b.current_key
        tv = table.groups[b.current_key_group - table.start].get(key)
        if tv is None:
            return None
        now, horizon = self._clock()
        p = self._ttl
        if tv[1] <= horizon:
            table.touch(b.current_key_group, key).pop(key, None)
            return tv if p.return_expired else None
        if p.update_on_read:
            table.touch(b.current_key_group, key)[key] = TtlValue((tv[0], now))
        return tv

    def clear(self) -> None:
        if self._cleanup is not None:
            self._cleanup.run()
        b = self._backend
        self._table.touch(b.current_key_group, b.current_key).pop(b.current_key, None)


class HeapTtlValueState(_HeapTtlState, ValueState):
    __slots__ = ()

    def value(self):
        if self._cleanup is not None:
            self._cleanup.run()
        tv = self._get_wrapped()
        return None if tv is None else tv[0]

    def update(self, value) -> None:
        if value is None:
            self.clear()
            return
        if self._cleanup is not None:
            self._cleanup.run()
        b = self._backend
        self._table.touch(b.current_key_group, b.current_key)[b.current_key] = TtlValue((value, self._clock()[0]))


class HeapTtlListState(_HeapTtlState, ListState):
    """Flink's TtlListState: every element has its own timestamp."""

    __slots__ = ()

    def get(self):
        if self._cleanup is not None:
            self._cleanup.run()
        stored = self._current()
        if stored is MISSING:
            return []
        result, rewrite, clear = self._ttl.read_list(stored, *self._clock())
        if rewrite is not None:
            self._write(rewrite)
        elif clear:
            self._clear_now()
        return result

    def _clear_now(self) -> None:
        b = self._backend
        self._table.touch(b.current_key_group, b.current_key).pop(b.current_key, None)

    def add(self, value) -> None:
        if value is None:
            raise ValueError(f"operator '{self._backend.operator}': cannot add None to list state '{self._table.name}'")
        if self._cleanup is not None:
            self._cleanup.run()
        b = self._backend
        group = self._table.touch(b.current_key_group, b.current_key, list)
        tv = TtlValue((value, self._clock()[0]))
        lst = group.get(b.current_key)
        if lst is None:
            group[b.current_key] = [tv]
        else:
            lst.append(tv)

    def add_all(self, values) -> None:
        for v in values:
            self.add(v)

    def update(self, values) -> None:
        values = list(values or ())
        if not values:
            self.clear()
            return
        if self._cleanup is not None:
            self._cleanup.run()
        now = self._clock()[0]
        self._write([TtlValue((v, now)) for v in values])


class HeapTtlMapState(_HeapTtlState, MapState):
    """Flink's TtlMapState: every entry has its own timestamp."""

    __slots__ = ()

    def _map(self):
        value = self._current()
        return None if value is MISSING else value

    def _mutable_map(self) -> dict:
        b = self._backend
        group = self._table.touch(b.current_key_group, b.current_key, dict)
        m = group.get(b.current_key)
        if m is None:
            m = group[b.current_key] = {}
        return m

    def _drop_if_empty(self, m: dict) -> None:
        if not m:
            b = self._backend
            self._table.touch(b.current_key_group, b.current_key, dict).pop(b.current_key, None)

    def _get_entry(self, key):
        if self._cleanup is not None:
            self._cleanup.run()
        m = self._map()
        if m is None:
            return None
        tv = m.get(key)
        if tv is None:
            return None
        now, horizon = self._clock()
        p = self._ttl
        if tv[1] <= horizon:
            mm = self._mutable_map()
            del mm[key]
            self._drop_if_empty(mm)
            return tv if p.return_expired else None
        if p.update_on_read:
            self._mutable_map()[key] = TtlValue((tv[0], now))
        return tv

    def get(self, key):
        tv = self._get_entry(key)
        return None if tv is None else tv[0]

    def contains(self, key) -> bool:
        return self._get_entry(key) is not None

    def put(self, key, value) -> None:
        if self._cleanup is not None:
            self._cleanup.run()
        self._mutable_map()[key] = TtlValue((value, self._clock()[0]))

    def put_all(self, dict_value) -> None:
        if self._cleanup is not None:
            self._cleanup.run()
        items = dict(dict_value)
        if items:
            now = self._clock()[0]
            self._mutable_map().update({k: TtlValue((v, now)) for k, v in items.items()})

    def remove(self, key) -> None:
        if self._cleanup is not None:
            self._cleanup.run()
        m = self._map()
        if m is None or key not in m:
            return
        m = self._mutable_map()
        del m[key]
        self._drop_if_empty(m)

    def _entries(self, first_only: bool = False):
        """Visible (key, value) pairs, as Flink's entry iterator yields them: expired entries are
        removed (and yielded only with ReturnExpiredIfNotCleanedUp), with OnReadAndWrite the yielded
        unexpired ones get the current time. ``first_only`` stops after the first visible entry."""
        if self._cleanup is not None:
            self._cleanup.run()
        m = self._map()
        if m is None:
            return []
        now, horizon = self._clock()
        p = self._ttl
        out = []
        expired = []
        refreshed = {}
        for k, tv in m.items():
            if tv[1] <= horizon:
                expired.append(k)
                if p.return_expired:
                    out.append((k, tv[0]))
            else:
                out.append((k, tv[0]))
                if p.update_on_read:
                    refreshed[k] = TtlValue((tv[0], now))
            if first_only and out:
                break
        if expired or refreshed:
            mm = self._mutable_map()
            for k in expired:
                del mm[k]
            mm.update(refreshed)
            self._drop_if_empty(mm)
        return out

    def items(self):
        return self._entries()

    def keys(self):
        return [k for k, _ in self._entries()]

    def values(self):
        return [v for _, v in self._entries()]

    def is_empty(self) -> bool:
        return not self._entries(first_only=True)


class HeapTtlReducingState(_HeapTtlState, ReducingState):
    __slots__ = ("_reduce",)

    def __init__(self, backend, table, policy, cleanup, reduce_function):
        super().__init__(backend, table, policy, cleanup)
        self._reduce = getattr(reduce_function, "reduce", reduce_function)

    def get(self):
        if self._cleanup is not None:
            self._cleanup.run()
        tv = self._get_wrapped()
        return None if tv is None else tv[0]

    def add(self, value) -> None:
        if self._cleanup is not None:
            self._cleanup.run()
        current = self._current()
        now, horizon = self._clock()
        # Flink's TtlReduceFunction: an expired value takes no part unless expired values are visible
        if current is MISSING or (current[1] <= horizon and not self._ttl.return_expired):
            self._write(TtlValue((value, now)))
            return
        b = self._backend  # the reduce function may update the stored value in place: keep the undo copy
        self._table.touch(b.current_key_group, b.current_key, copy.deepcopy)
        self._write(TtlValue((self._reduce(current[0], value), now)))


class HeapTtlAggregatingState(_HeapTtlState, AggregatingState):
    __slots__ = ("_agg",)

    def __init__(self, backend, table, policy, cleanup, agg_function):
        super().__init__(backend, table, policy, cleanup)
        self._agg = agg_function

    def get(self):
        if self._cleanup is not None:
            self._cleanup.run()
        tv = self._get_wrapped()
        return None if tv is None else self._agg.get_result(tv[0])

    def add(self, value) -> None:
        if self._cleanup is not None:
            self._cleanup.run()
        current = self._current()
        now, horizon = self._clock()
        if current is MISSING or (current[1] <= horizon and not self._ttl.return_expired):
            acc = self._agg.create_accumulator()
        else:  # ``add`` usually updates the accumulator in place: keep the undo copy first
            b = self._backend
            self._table.touch(b.current_key_group, b.current_key, copy.deepcopy)
            acc = current[0]
        self._write(TtlValue((self._agg.add(value, acc), now)))


_TTL_CLASSES = {
    "value": HeapTtlValueState,
    "list": HeapTtlListState,
    "map": HeapTtlMapState,
    "reducing": HeapTtlReducingState,
    "aggregating": HeapTtlAggregatingState,
}


class HeapKeyedStateBackend(KeyedStateBackend):
    def __init__(self, operator: str, key_groups: range):
        super().__init__(operator, key_groups)
        self._tables: dict[str, StateTable] = {}

    def _table(self, name: str) -> StateTable:
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = StateTable(name, self.key_groups)
        return table

    def _create_state(self, descriptor: StateDescriptor):
        table = self._table(descriptor.name)
        kind = descriptor.kind
        if kind not in ("value", "list", "map", "reducing", "aggregating"):
            raise TypeError(f"unknown state descriptor {descriptor!r}")
        policy = TtlPolicy.of(descriptor)
        table.kind = kind
        table.ttl = policy
        if table.restored:
            self._convert_restored(table)
        if policy is not None:
            cleanup = None
            if policy.incremental_size:
                cleanup = _HeapIncrementalCleanup(self, table, policy)
                if policy.per_record:
                    self._add_record_hook(cleanup.run)
            cls = _TTL_CLASSES[kind]
            if kind == "reducing":
                return cls(self, table, policy, cleanup, descriptor.reduce_function)
            if kind == "aggregating":
                return cls(self, table, policy, cleanup, descriptor.agg_function)
            return cls(self, table, policy, cleanup)
        if kind == "value":
            return HeapValueState(self, table)
        if kind == "list":
            return HeapListState(self, table)
        if kind == "map":
            return HeapMapState(self, table)
        if kind == "reducing":
            return HeapReducingState(self, table, descriptor.reduce_function)
        return HeapAggregatingState(self, table, descriptor.agg_function)

    def _convert_restored(self, table: StateTable) -> None:
        """State restored before its registration: into TTL form for a TTL-enabled state (plain
        values stamped with the current time, i.e. the restore's; the next delta carries them) or
        into plain form for a state without TTL."""
        table.restored = False
        kind = table.kind
        policy = table.ttl
        now = None if policy is None else policy.now(self)
        for i, group in enumerate(table.groups):
            if not group:
                continue
            if policy is None:
                if not needs_unstamp(kind, group.values()):
                    continue
                for key, value in group.items():
                    plain = unstamp(kind, value)
                    if plain is not value:
                        group[key] = plain
            elif needs_stamp(kind, group.values()):
                stamped_keys = [key for key, value in group.items() if stamp(kind, value, now) is not value]
                for key in stamped_keys:
                    group[key] = stamp(kind, group[key], now)
                if stamped_keys:
                    table.forced.setdefault(table.start + i, set()).update(stamped_keys)

    def changed_sections(self):
        sections: dict[int, dict] = {}
        for name, table in self._tables.items():
            for kg, puts, deletes in table.changes():
                sections.setdefault(kg, {})[name] = (puts, deletes)
        return sections

    def all_sections(self):
        sections: dict[int, dict] = {}
        for name, table in self._tables.items():
            policy = table.ttl
            if policy is not None and policy.full_snapshot:  # TTL cleanup in full snapshots
                horizon = policy.horizon(policy.now(self))
                unexpired = policy.unexpired_or_none
                for i, group in enumerate(table.groups):
                    kept = {}
                    for key, stored in group.items():
                        stored = unexpired(stored, horizon)
                        if stored is not None:
                            kept[key] = stored
                    if kept:
                        sections.setdefault(table.start + i, {})[name] = (kept, [])
                continue
            for i, group in enumerate(table.groups):
                if group:
                    sections.setdefault(table.start + i, {})[name] = (group, [])
        return sections

    def apply_section(self, key_group: int, section: dict) -> None:
        if key_group not in self.key_groups:
            return
        for name, (puts, deletes) in section.items():
            table = self._table(name)
            group = table.groups[key_group - self.key_groups.start]
            if table.kind is None:
                table.restored = True  # converted to the registered form at registration
            elif table.ttl is None:
                if needs_unstamp(table.kind, puts.values()):
                    puts = {k: unstamp(table.kind, v) for k, v in puts.items()}
            elif needs_stamp(table.kind, puts.values()):
                now = table.ttl.now(self)
                stamped = {k: stamp(table.kind, v, now) for k, v in puts.items()}
                forced = [k for k, v in puts.items() if stamped[k] is not v]
                if forced:
                    table.forced.setdefault(key_group, set()).update(forced)
                puts = stamped
            group.update(puts)
            for key in deletes:
                group.pop(key, None)

    def confirm(self) -> None:
        for table in self._tables.values():
            table.undo = {}
            table.forced = {}

    def rollback(self) -> None:
        for table in self._tables.values():
            table.rollback()

    def has_pending(self) -> bool:
        return any(t.undo or t.forced for t in self._tables.values())

    def keys_of(self, name: str):
        table = self._tables.get(name)
        if table is not None:
            for i, group in enumerate(table.groups):
                for key in list(group):
                    yield table.start + i, key

    def restored_state_names(self):
        return self._tables.keys()

    def key_count(self) -> int:
        return sum(len(g) for t in self._tables.values() for g in t.groups)


class HashMapStateBackend(StateBackendSpec):
    """PyFlink's name for the heap backend: state lives in Python dicts on the worker."""

    name = "hashmap"

    def create_keyed_backend(self, operator: str, key_groups: range, local_dir: str | None = None):
        return HeapKeyedStateBackend(operator, key_groups)
