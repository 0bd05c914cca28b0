"""The heap backend's cells (``keyspan.state.internal``): the current key's slot in a ``StateTable``.

Every write goes through ``StateTable.touch``, which keeps the slot's pre-epoch value once per
epoch, so a rollback restores it. TTL'd values and map entries are ``TtlValue`` objects.
"""

from __future__ import annotations

import copy
from operator import itemgetter

from keyspan.state.heap.table import MISSING
from keyspan.state.internal import (
    IMMUTABLE,
    STATES,
    DictEntryReads,
    InternalMapState,
    InternalValueState,
    NamespaceMixin,
    compose,
    private,
)
from keyspan.state.ttl import TTL_STATES, TtlValue


def _stamped(value, ts):
    return TtlValue((value, ts))


def _restamped(stored, ts):
    return TtlValue((stored[0], ts))


class HeapCell(DictEntryReads):
    """The current key's value in ``_table``; a map state's value is a dict (its entries)."""

    __slots__ = ("_backend", "_table", "_name", "_ttl", "_cleanup", "_reduce", "_agg")

    _stamped = staticmethod(_stamped)
    _restamped = staticmethod(_restamped)
    _timestamp_of = staticmethod(itemgetter(1))
    _value_of = staticmethod(itemgetter(0))
    _private = staticmethod(lambda value: value)

    def __init__(self, backend, table, policy=None, cleanup=None, reduce_function=None, agg_function=None):
        self._backend = backend
        self._table = table
        self._name = table.name
        self._ttl = policy
        self._cleanup = cleanup
        self._reduce = getattr(reduce_function, "reduce", reduce_function)
        self._agg = agg_function

    def _access(self) -> None:
        if self._cleanup is not None:
            self._cleanup.run()

    def _wrote(self, n: int) -> None:
        pass

    def _load(self):
        b = self._backend
        return self._table.groups[b.current_key_group - self._table.start].get(b.current_key)

    def _store(self, stored) -> None:
        b = self._backend
        self._table.touch(b.current_key_group, b.current_key)[b.current_key] = stored

    def _delete(self) -> None:
        b = self._backend
        self._table.touch(b.current_key_group, b.current_key).pop(b.current_key, None)

    def _load_for_update(self):
        # the caller may change the value in place: the undo log keeps a deep copy first
        b = self._backend
        return self._table.touch(b.current_key_group, b.current_key, copy.deepcopy).get(b.current_key)

    def _append(self, items) -> None:
        b = self._backend
        group = self._table.touch(b.current_key_group, b.current_key, list)
        lst = group.get(b.current_key)
        if lst is None:
            group[b.current_key] = list(items)
        else:
            lst.extend(items)

    # map entries ------------------------------------------------------------------------------
    def _key_dict(self) -> dict:
        """The current key's dict (a map's entries, a namespaced state's namespaces), created if
        absent; the undo log keeps a copy of it first."""
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

    def _entry_store(self, key, stored) -> None:
        self._key_dict()[key] = stored

    def _entry_delete(self, key) -> None:
        self._entry_take(key)

    def _entry_take(self, key):
        """The entry of ``key``, deleted (None without one): one lookup of the key's map."""
        b = self._backend
        table = self._table
        kg, current = b.current_key_group, b.current_key
        m = table.groups[kg - table.start].get(current)
        if m is None or key not in m:
            return None
        group = table.touch(kg, current, dict)  # the undo log copies the map; ``m`` stays the live one
        stored = m.pop(key)
        if not m:
            del group[current]
        return stored

    def _entries_update(self, puts: dict, deletes) -> None:
        if not puts and not deletes:
            return
        m = self._key_dict()
        for key in deletes:
            m.pop(key, None)
        m.update(puts)
        self._drop_if_empty(m)

    # many keys' entries in one pass over the key groups' dicts, without setting each key current.
    # TTL'd entries, and a backend with record hooks (TTL cleanup), which must see each key set, take
    # the one-entry way.
    def _entries_take(self, rows) -> list:
        if self._ttl is not None or self._backend._record_hooks:
            return InternalMapState._entries_take(self, rows)
        table = self._table
        groups, start, undos = table.groups, table.start, table.undo
        taken = []
        for key, key_group, entry in rows:
            group = groups[key_group - start]
            m = group.get(key)
            if m is None or entry not in m:
                taken.append(None)
                continue
            undo = undos.get(key_group)  # StateTable.touch inlined: the undo log copies the map, ``m`` stays live
            if undo is None:
                undo = undos[key_group] = {}
            if key not in undo:
                undo[key] = dict(m)
            taken.append(m.pop(entry))
            if not m:
                del group[key]
        return taken

    def _entries_merge(self, rows, merge) -> list:
        if self._ttl is not None or self._backend._record_hooks:
            return InternalMapState._entries_merge(self, rows, merge)
        table = self._table
        groups, start, undos = table.groups, table.start, table.undo
        before = []
        for key, key_group, entry, value in rows:
            group = groups[key_group - start]
            m = group.get(key)
            stored = None if m is None else m.get(entry)
            merged = value if stored is None else merge(stored, value)
            if merged is not stored:
                undo = undos.get(key_group)  # StateTable.touch inlined
                if undo is None:
                    undo = undos[key_group] = {}
                if key not in undo:
                    undo[key] = MISSING if m is None else dict(m)
                if m is None:
                    m = group[key] = {}
                m[entry] = merged
            before.append(stored)
        return before


class HeapNamespacedCell(NamespaceMixin, HeapCell):
    """The (current key, current namespace) slot: per key a dict namespace → value. Stored values are
    never changed in place (the undo log copies the dict, not the values)."""

    __slots__ = ("_ns",)

    _private = staticmethod(private)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ns = None

    def _load(self):
        b = self._backend
        slots = self._table.groups[b.current_key_group - self._table.start].get(b.current_key)
        return None if slots is None else slots.get(self._ns)

    def _store(self, stored) -> None:
        self._key_dict()[self._ns] = stored

    def _delete(self) -> None:
        self._take()

    def _take(self):
        # a key's namespaces are laid out as a map's entries are
        return HeapCell._entry_take(self, self._ns)

    def _take_each(self, rows) -> list:
        if self._ttl is not None or self._backend._record_hooks:
            return NamespaceMixin._take_each(self, rows)
        return HeapCell._entries_take(self, rows)  # the namespace in the place of the map key

    def _load_for_update(self):
        stored = self._load()
        return None if stored is None else private(stored)

    def _append(self, items) -> None:
        current = self._load()
        self._store(list(items) if current is None else [*current, *items])

    def _merge_each(self, rows, merge, copy: bool = True, merge_absent: bool = False) -> list[bool]:
        # NamespaceMixin._merge_each with the key group's dict, StateTable.touch's undo step and
        # _load_for_update inlined: the columnar window path merges a chunk's panes here. A backend
        # with record hooks (TTL cleanup) sees each key set, as there
        if self._backend._record_hooks:
            return NamespaceMixin._merge_each(self, rows, merge, copy, merge_absent)
        table = self._table
        groups, start, undos = table.groups, table.start, table.undo
        found = []
        key = key_group = namespace = None
        for key, key_group, namespace, value in rows:
            group = groups[key_group - start]
            slots = group.get(key)
            undo = undos.get(key_group)
            if undo is None:
                undo = undos[key_group] = {}
            if key not in undo:
                undo[key] = MISSING if slots is None else dict(slots)
            if slots is None:
                slots = group[key] = {}
            stored = slots.get(namespace)
            if stored is None:
                slots[namespace] = merge(None, value) if merge_absent else value
                found.append(False)
            else:
                slots[namespace] = merge(private(stored) if copy else stored, value)
                found.append(True)
        if found:
            b = self._backend
            b.current_key, b.current_key_group, self._ns = key, key_group, namespace
        return found


class HeapValueState(HeapCell, InternalValueState):
    """The plain value state, the one a per-record function touches most: ``value`` and ``update``
    read and write the key group's dict directly (``StateTable.touch``'s undo step inlined), which
    halves the Python calls per access."""

    __slots__ = ()

    def value(self):
        b = self._backend
        table = self._table
        return table.groups[b.current_key_group - table.start].get(b.current_key)

    def update(self, value) -> None:
        if value is None:
            self._delete()
            return
        b = self._backend
        key, kg = b.current_key, b.current_key_group
        table = self._table
        group = table.groups[kg - table.start]
        undo = table.undo.get(kg)
        if undo is None:
            undo = table.undo[kg] = {}
        if key not in undo:
            old = group.get(key, MISSING)
            undo[key] = old if old is MISSING or type(old) in IMMUTABLE else private(old)
        group[key] = value


PLAIN = {kind: compose(HeapCell, cls, f"Heap{cls.__name__[len('Internal'):]}") for kind, cls in STATES.items()}
PLAIN["value"] = HeapValueState
TTL = {kind: compose(HeapCell, cls, f"Heap{cls.__name__}") for kind, cls in TTL_STATES.items()}
NAMESPACED = {kind: compose(HeapNamespacedCell, cls, f"HeapNamespaced{cls.__name__[len('Internal'):]}")
              for kind, cls in STATES.items()}

__all__ = ["HeapCell", "HeapNamespacedCell", "PLAIN", "TTL", "NAMESPACED", "MISSING"]
