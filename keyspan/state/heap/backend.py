"""The heap ("hashmap") keyed state backend: Python dicts per key group, with an undo log per epoch."""

from __future__ import annotations

from keyspan.state.api import StateDescriptor
from keyspan.state.backend import KeyedStateBackend, StateBackendSpec, user_functions
from keyspan.state.heap.states import NAMESPACED, PLAIN, TTL
from keyspan.state.heap.table import IncrementalCleanup, StateTable
from keyspan.state.ttl import TtlPolicy, needs_stamp, needs_unstamp, stamp, unstamp


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
        if kind not in PLAIN:
            raise TypeError(f"unknown state descriptor {descriptor!r}")
        policy = TtlPolicy.of(descriptor)
        table.kind = kind
        table.ttl = policy
        table.namespaced = descriptor.namespaced
        if table.restored:
            self._convert_restored(table)
        functions = user_functions(descriptor)
        if descriptor.namespaced:
            return NAMESPACED[kind](self, table, **functions)
        if policy is None:
            return PLAIN[kind](self, table, **functions)
        cleanup = None
        if policy.incremental_size:
            cleanup = IncrementalCleanup(self, table, policy)
            if policy.per_record:
                self._add_record_hook(cleanup.run)
        return TTL[kind](self, table, policy, cleanup, **functions)

    def _convert_restored(self, table: StateTable) -> None:
        """State restored before its registration: into TTL form for a TTL-enabled state (plain
        values stamped with the current time, i.e. the restore's; the next delta carries them) or
        into plain form for a state without TTL."""
        table.restored = False
        if table.namespaced:
            return  # namespaced states have no TTL: nothing to convert
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
                horizon = policy.clock(self)[1]
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
            elif table.namespaced:
                pass
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

    def close(self) -> None:
        """Free the state now: the operator's function, its state objects and this backend refer to
        each other, so the state of a dropped instance would otherwise wait for Python's cyclic
        collector, which in a worker runs in full only every few tasks (``keyspan.common.garbage``)."""
        for table in self._tables.values():
            for group in table.groups:
                group.clear()
            table.undo = {}

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

    def map_keys_of(self, name: str):
        table = self._tables.get(name)
        if table is not None:
            for i, group in enumerate(table.groups):
                kg = table.start + i
                for key, entries in list(group.items()):
                    for map_key in list(entries):
                        yield kg, key, map_key

    def restored_state_names(self):
        return self._tables.keys()

    def values_in_memory(self, name: str, key_group: int):
        table = self._tables.get(name)
        return None if table is None or key_group not in self.key_groups else table.groups[key_group - table.start]

    def key_count(self) -> int:
        return sum(len(g) for t in self._tables.values() for g in t.groups)


class HashMapStateBackend(StateBackendSpec):
    """PyFlink's name for the heap backend: state lives in Python dicts on the worker."""

    name = "hashmap"

    def create_keyed_backend(self, operator: str, key_groups: range, local_dir: str | None = None):
        return HeapKeyedStateBackend(operator, key_groups)
