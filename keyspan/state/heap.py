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

MISSING = object()
_IMMUTABLE = frozenset((int, float, str, bytes, bool, type(None), complex))


def _copy_value(value):
    if isinstance(value, tuple) and all(type(v) in _IMMUTABLE for v in value):
        return value
    return copy.deepcopy(value)


class StateTable:
    """One state's entries for a key-group range; ``undo`` keeps pre-epoch values of touched keys."""

    __slots__ = ("name", "start", "groups", "undo")

    def __init__(self, name: str, key_groups: range):
        self.name = name
        self.start = key_groups.start
        self.groups = [dict() for _ in key_groups]
        self.undo: dict[int, dict] = {}

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
        for kg, undo in self.undo.items():
            group = self.groups[kg - self.start]
            puts = {}
            deletes = []
            for key in undo:
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
        if kind == "value":
            return HeapValueState(self, table)
        if kind == "list":
            return HeapListState(self, table)
        if kind == "map":
            return HeapMapState(self, table)
        if kind == "reducing":
            return HeapReducingState(self, table, descriptor.reduce_function)
        if kind == "aggregating":
            return HeapAggregatingState(self, table, descriptor.agg_function)
        raise TypeError(f"unknown state descriptor {descriptor!r}")

    def changed_sections(self):
        sections: dict[int, dict] = {}
        for name, table in self._tables.items():
            for kg, puts, deletes in table.changes():
                sections.setdefault(kg, {})[name] = (puts, deletes)
        return sections

    def all_sections(self):
        sections: dict[int, dict] = {}
        for name, table in self._tables.items():
            for i, group in enumerate(table.groups):
                if group:
                    sections.setdefault(table.start + i, {})[name] = (group, [])
        return sections

    def apply_section(self, key_group: int, section: dict) -> None:
        if key_group not in self.key_groups:
            return
        for name, (puts, deletes) in section.items():
            group = self._table(name).groups[key_group - self.key_groups.start]
            group.update(puts)
            for key in deletes:
                group.pop(key, None)

    def confirm(self) -> None:
        for table in self._tables.values():
            table.undo = {}

    def rollback(self) -> None:
        for table in self._tables.values():
            table.rollback()

    def has_pending(self) -> bool:
        return any(t.undo for t in self._tables.values())

    def key_count(self) -> int:
        return sum(len(g) for t in self._tables.values() for g in t.groups)


class HashMapStateBackend(StateBackendSpec):
    """PyFlink's name for the heap backend: state lives in Python dicts on the worker."""

    name = "hashmap"

    def create_keyed_backend(self, operator: str, key_groups: range, local_dir: str | None = None):
        return HeapKeyedStateBackend(operator, key_groups)
