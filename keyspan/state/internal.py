"""Internal keyed state: the five state kinds written once over a backend's *cells*, and namespaces.

A backend stores values; the classes here say what a value, list, map, reducing or aggregating
state does with them (and ``keyspan.state.ttl.states`` what their TTL twins do). They meet in a
small cell interface that every backend implements as a mixin over (current key, current
namespace); a concrete state class is ``compose(cell mixin, state class)`` (e.g. heap cell +
``InternalValueState`` = ``HeapValueState``).

A cell mixin provides, for the slot of the current key (and namespace):

* ``_load()`` → the stored value or None; ``_store(stored)``; ``_delete()``;
* ``_load_for_update()`` → like ``_load``, for a value the caller changes in place before
  ``_store`` (the heap keeps an undo copy first);
* ``_append(items)`` — extend the stored list;
* map states, per entry of the slot's map: ``_entry_load(k)``, ``_entry_contains(k)``,
  ``_entry_store(k, stored)``, ``_entry_delete(k)``, ``_entries()`` ((k, stored) pairs),
  ``_entries_update(puts, deletes)``; ``_delete()`` drops the whole map; plain (not namespaced)
  map cells also ``_entry_take(k)``: load and delete in one step, as the timer service fires a timer,
  and, for many keys' entries in one call, ``_entries_take(rows)`` and ``_entries_merge(rows, merge)``
  (defaults made of the one-entry methods in ``InternalMapState``; the heap's are one pass): the
  timers of a chunk's windows registered, or a round's due timers fired, at once;
* TTL form of a value or map entry: ``_stamped(value, ts)``, ``_timestamp_of(stored)``,
  ``_value_of(stored)``, ``_restamped(stored, ts)`` — the heap keeps ``TtlValue`` objects, RocksDB
  tagged bytes whose timestamp it reads without unpickling the value;
* ``_access()`` (once per TTL state access: the heap's incremental cleanup) and ``_wrote(n)``
  (after a TTL write: RocksDB's compaction-filter emulation);
* ``_private(value)`` — a copy the caller may change (namespaced heap states share stored values
  with the undo log);
* ``_backend`` (the ``KeyedStateBackend``: clocks, operator name) and ``_name`` (the state's name);
* namespaced cells: ``_take()`` → the stored value, deleted (``NamespaceMixin`` has a default made of
  ``_load`` and ``_delete``): the window operator reads and drops a pane it fires in one step, and
  ``_take_each(rows)`` many such panes; and
  ``_merge_each(rows, merge, copy, merge_absent)``, many (key, namespace) slots merged in one call (a
  default made of ``_load_for_update`` — ``_load`` when ``merge`` changes no argument — and
  ``_store``; the heap's is one pass): the columnar and folding window paths' panes.

Namespaces (PyFlink's ``fn_execution/internal_state.py``): a state registered with a descriptor
from ``namespaced(descriptor)`` keeps one value per (key, namespace) — laid out like a map state
whose map keys are the namespaces — and has ``set_current_namespace``; list, reducing and
aggregating ones also ``merge_namespaces``. The window operator keeps its panes, trigger state and
per-window state this way, with windows as namespaces.
"""

from __future__ import annotations

import copy

from keyspan.state.api import AggregatingState, ListState, MapState, ReducingState, ValueState

IMMUTABLE = frozenset((int, float, str, bytes, bool, type(None), complex))


def private(value):
    """A copy the caller may change in place (immutable values, and plain tuples of them, are shared)."""
    if type(value) in IMMUTABLE or (type(value) is tuple and IMMUTABLE.issuperset(map(type, value))):
        return value
    return copy.deepcopy(value)


__all__ = ["InternalValueState", "InternalListState", "InternalMapState", "InternalReducingState",
           "InternalAggregatingState", "STATES", "compose", "namespaced", "NamespaceMixin", "DictEntryReads"]


def namespaced(descriptor):
    """A copy of ``descriptor`` whose state keeps one value per (key, namespace)."""
    marked = copy.copy(descriptor)
    marked.namespaced = True
    return marked


class InternalValueState(ValueState):
    __slots__ = ()

    def value(self):
        return self._load()

    def update(self, value) -> None:
        if value is None:
            self._delete()
        else:
            self._store(value)

    def clear(self) -> None:
        self._delete()


def _no_none(state, values) -> tuple[list, bool]:
    """(the values before the first None, whether there was one)."""
    new = []
    for v in values:
        if v is None:
            return new, True
        new.append(v)
    return new, False


def _none_error(state) -> ValueError:
    return ValueError(f"operator '{state._backend.operator}': cannot add None to list state '{state._name}'")


class InternalListState(ListState):
    __slots__ = ()

    def get(self):
        value = self._load()
        return [] if value is None else value

    def get_and_clear(self):
        """``get``, then ``clear``, in one step (namespaced states: the window operator's firing)."""
        value = self._take()
        return [] if value is None else value

    def get_and_clear_each(self, rows) -> list:
        """``get_and_clear`` for each (key, key group, namespace) of ``rows``: the panes of the windows
        a round of timers fires, taken in one call."""
        return [[] if value is None else value for value in self._take_each(rows)]

    def add(self, value) -> None:
        if value is None:
            raise _none_error(self)
        self._append((value,))

    def added_to_existing(self, value) -> bool:
        """``add``; whether the state held elements before (a window pane's later record)."""
        existed = bool(self._load())
        self.add(value)
        return existed

    def add_all(self, values) -> None:
        new, bad = _no_none(self, values)
        if new:
            self._append(new)
        if bad:
            raise _none_error(self)

    def update(self, values) -> None:
        values = list(values or ())
        if values:
            self._store(values)
        else:
            self._delete()

    def clear(self) -> None:
        self._delete()

    def _merge_values(self, a, b):
        return [*a, *b]


class InternalMapState(MapState):
    __slots__ = ()

    def get(self, key):
        return self._entry_load(key)

    def put(self, key, value) -> None:
        self._entry_store(key, value)

    def put_all(self, dict_value) -> None:
        self._entries_update(dict(dict_value), ())

    def remove(self, key) -> None:
        self._entry_delete(key)

    def contains(self, key) -> bool:
        return self._entry_contains(key)

    def items(self):
        return list(self._entries())

    def keys(self):
        return [k for k, _ in self._entries()]

    def values(self):
        return [v for _, v in self._entries()]

    def is_empty(self) -> bool:
        return next(iter(self._entries()), None) is None

    def clear(self) -> None:
        self._delete()

    # many keys' entries in one call (cell defaults; see the module docstring) -----------------------
    def _entries_take(self, rows) -> list:
        """For each (key, key group, map key) of ``rows``, in order: the entry's stored value, deleted
        (None without one)."""
        backend = self._backend
        taken = []
        for key, key_group, map_key in rows:
            backend.current_key, backend.current_key_group = key, key_group
            taken.append(self._entry_take(map_key))
        return taken

    def _entries_merge(self, rows, merge) -> list:
        """For each (key, key group, map key, value) of ``rows``, in order: store ``value`` where there is
        no entry, else ``merge(stored, value)`` unless it returns ``stored`` itself; the stored values
        before (None for no entry)."""
        backend = self._backend
        before = []
        for key, key_group, map_key, value in rows:
            backend.current_key, backend.current_key_group = key, key_group
            stored = self._entry_load(map_key)
            merged = value if stored is None else merge(stored, value)
            if merged is not stored:
                self._entry_store(map_key, merged)
            before.append(stored)
        return before


class InternalReducingState(ReducingState):
    __slots__ = ()

    def get(self):
        return self._load()

    def get_and_clear(self):
        return self._take()

    def get_and_clear_each(self, rows) -> list:
        return self._take_each(rows)

    def add(self, value) -> None:
        self.added_to_existing(value)

    def added_to_existing(self, value) -> bool:
        """``add``; whether the state held a value before (a window pane's later record)."""
        current = self._load_for_update()
        self._store(value if current is None else self._reduce(current, value))
        return current is not None

    def clear(self) -> None:
        self._delete()

    def _merge_values(self, a, b):
        return self._reduce(a, b)


class InternalAggregatingState(AggregatingState):
    __slots__ = ()

    def get(self):
        acc = self._load()
        return None if acc is None else self._agg.get_result(acc)

    def get_and_clear(self):
        acc = self._take()
        return None if acc is None else self._agg.get_result(acc)

    def get_and_clear_each(self, rows) -> list:
        get_result = self._agg.get_result
        return [None if acc is None else get_result(acc) for acc in self._take_each(rows)]

    def add(self, value) -> None:
        self.added_to_existing(value)

    def added_to_existing(self, value) -> bool:
        """``add``; whether the state held an accumulator before (a window pane's later record)."""
        acc = self._load_for_update()
        self._store(self._agg.add(value, self._agg.create_accumulator() if acc is None else acc))
        return acc is not None

    def add_accumulator(self, accumulator) -> bool:
        """Merge an accumulator of records pre-aggregated elsewhere (the columnar path) after the
        stored one, as if its records had been ``add``-ed (Flink's ``updateInternal``); whether
        there was a stored one."""
        acc = self._load_for_update()
        self._store(accumulator if acc is None else self._agg.merge(acc, accumulator))
        return acc is not None

    def add_accumulators(self, rows) -> list[bool]:
        """``add_accumulator`` for each (key, key group, namespace, accumulator) of ``rows``, in order,
        each key and namespace current in turn (the last stays current); whether each found one
        stored. A namespaced state only: a chunk's panes merged in one call."""
        return self._merge_each(rows, self._agg.merge, copy=not getattr(self._agg, "merge_keeps_arguments", False))

    def clear(self) -> None:
        self._delete()

    def _merge_values(self, a, b):
        return self._agg.merge(a, b)


STATES = {"value": InternalValueState, "list": InternalListState, "map": InternalMapState,
          "reducing": InternalReducingState, "aggregating": InternalAggregatingState}


class DictEntryReads:
    """Map-entry reads for cells whose slot holds the whole map as a dict (heap map states,
    namespaced map states)."""

    __slots__ = ()

    def _entry_load(self, key):
        m = self._load()
        return None if m is None else m.get(key)

    def _entry_contains(self, key) -> bool:
        m = self._load()
        return m is not None and key in m

    def _entries(self):
        m = self._load()
        return () if m is None else list(m.items())


class NamespaceMixin(DictEntryReads):
    """PyFlink's ``InternalKvState.set_current_namespace`` and ``InternalMergingState.merge_namespaces``,
    for the cells of a namespaced state (they read ``self._ns``)."""

    __slots__ = ()

    def _take(self):
        stored = self._load()
        if stored is not None:
            self._delete()
        return stored

    def _take_each(self, rows) -> list:
        """``_take`` for each (key, key group, namespace) of ``rows``, in order."""
        backend = self._backend
        taken = []
        for key, key_group, namespace in rows:
            backend.current_key, backend.current_key_group, self._ns = key, key_group, namespace
            taken.append(self._take())
        return taken

    # a namespaced map state keeps one dict per (key, namespace), replaced on every change
    def _entry_store(self, key, stored) -> None:
        self._entries_update({key: stored}, ())

    def _entry_delete(self, key) -> None:
        self._entries_update({}, (key,))

    def _entries_update(self, puts: dict, deletes) -> None:
        m = dict(self._load() or {})
        for key in deletes:
            m.pop(key, None)
        m.update(puts)
        if m:
            self._store(m)
        else:
            self._delete()

    def set_current_namespace(self, namespace) -> None:
        self._ns = namespace

    def _merge_each(self, rows, merge, copy: bool = True, merge_absent: bool = False) -> list[bool]:
        """For each (key, key group, namespace, value) of ``rows``: store ``merge(stored, value)``,
        or ``value`` where nothing is stored (``merge(None, value)`` with ``merge_absent``); whether
        something was. A cell may do it in one pass. ``copy`` False: ``merge`` never changes
        ``stored``, which then needs no private copy."""
        backend = self._backend
        found = []
        load = self._load_for_update if copy else self._load
        for key, key_group, namespace, value in rows:
            backend.current_key, backend.current_key_group, self._ns = key, key_group, namespace
            stored = load()
            self._store(merge(stored, value) if stored is not None or merge_absent else value)
            found.append(stored is not None)
        return found

    def fold_each(self, rows, fold, copy: bool = True) -> list[bool]:
        """For each (key, key group, namespace, values) of ``rows``: store ``fold(stored, values)``,
        ``stored`` a private copy (``copy`` False: ``fold`` never changes it) or None; whether
        something was stored. A chunk's records of many windows added with one state access per
        window (the folding window path)."""
        return self._merge_each(rows, fold, copy=copy, merge_absent=True)

    def merge_namespaces(self, target, sources) -> None:
        """Combine the values of the ``sources`` namespaces (removing them), then the target's value
        with that (Flink's ``mergeNamespaces``); leaves ``target`` current."""
        merge = getattr(self, "_merge_values", None)
        if merge is None:
            raise TypeError(f"state '{self._name}' is not a merging state (list, reducing or aggregating) "
                            f"and cannot be merged")
        merged = None
        for source in sources:
            self._ns = source
            value = self._load()
            if value is None:
                continue
            self._delete()
            merged = value if merged is None else merge(self._private(merged), value)
        self._ns = target
        if merged is not None:
            current = self._load()
            self._store(merged if current is None else merge(self._private(current), merged))


_COMPOSED: dict = {}


def compose(cell: type, state: type, name: str) -> type:
    """The concrete state class ``name``: ``state``'s behaviour over ``cell``'s storage (cached)."""
    cls = _COMPOSED.get((cell, state))
    if cls is None:
        cls = _COMPOSED[(cell, state)] = type(name, (cell, state), {"__slots__": (), "__module__": cell.__module__})
    return cls
