"""The heap backend's storage: one ``StateTable`` per state (dicts per key group and an undo log per
epoch), and Flink's incremental TTL cleanup over a table."""

from __future__ import annotations

from keyspan.state.internal import IMMUTABLE, private
from keyspan.state.ttl import TtlPolicy

MISSING = object()


class StateTable:
    """One state's entries for a key-group range; ``undo`` keeps pre-epoch values of touched keys.

    ``kind``/``ttl``/``namespaced`` are set when the state is registered (``ttl``: its TtlPolicy, or
    None; a namespaced state keeps a dict namespace → value per key);
    ``restored`` says that sections were applied before that, so registration must convert them
    between plain and TTL form; ``forced`` holds keys that such a conversion stamped, which the next
    delta must carry although no state operation touched them."""

    __slots__ = ("name", "start", "groups", "undo", "kind", "ttl", "namespaced", "restored", "forced")

    def __init__(self, name: str, key_groups: range):
        self.name = name
        self.start = key_groups.start
        self.groups = [dict() for _ in key_groups]
        self.undo: dict[int, dict] = {}
        self.kind = None
        self.ttl = None
        self.namespaced = False
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
            if old is not MISSING and type(old) not in IMMUTABLE:
                # the user may have mutated the object they got from value() before update():
                # keep a private copy so a rollback restores what the last committed epoch held
                old = (copy or private)(old)
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


class IncrementalCleanup:
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
        self.copy = {"list": list, "map": dict}.get(policy.kind)

    def run(self) -> None:
        table = self.table
        groups = table.groups
        policy = self.policy
        b = self.backend
        horizon = policy.clock(b)[1]
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
