"""Operator (non-keyed) state: Flink's list, union list and broadcast state of one operator subtask.

A subtask writes all of its operator state every epoch as one small file (one pickled snapshot,
backend-neutral like keyed state; the worker puts it in the checkpoint's file format); the manifest lists it with kind ``"operator"`` and keeps only the newest file per (operator,
subtask). A restore reads the files of all old subtasks and redistributes them over the new
parallelism as Flink's ``RoundRobinOperatorStateRepartitioner`` does:

* list state (``get_list_state``, Flink's SPLIT_DISTRIBUTE): the elements of all old subtasks,
  concatenated in subtask order, are cut into contiguous parts whose sizes differ by at most one
  (where the larger parts start rotates from one state to the next, in state-name order); at an
  unchanged parallelism every subtask keeps its own list;
* union list state (``get_union_list_state``): every subtask receives the whole concatenation;
* broadcast state (``get_broadcast_state``): new subtask ``i`` receives a copy of old subtask
  ``i mod p``'s map (all copies are equal when the function follows the broadcast-state contract).
"""

from __future__ import annotations

import pickle

from keyspan.io import serde
from keyspan.state.api import (
    BroadcastState,
    ListState,
    ListStateDescriptor,
    MapStateDescriptor,
    OperatorStateStore,
    ReadOnlyBroadcastState,
)

SPLIT = "split"
UNION = "union"
FORMAT = 1


def empty_snapshot() -> dict:
    return {"format": FORMAT, "list": {}, "broadcast": {}}


# --- state objects ------------------------------------------------------------------------------------

class OperatorListState(ListState):
    """A subtask's list; ``get`` returns a copy, so iterating while adding is safe."""

    __slots__ = ("_name", "_values")

    def __init__(self, name: str, values: list):
        self._name = name
        self._values = values

    def _check(self, value):
        if value is None:
            raise ValueError(f"list state '{self._name}': cannot add None to a list state")
        return value

    def get(self):
        return list(self._values)

    def add(self, value) -> None:
        self._values.append(self._check(value))

    def add_all(self, values) -> None:
        self._values.extend([self._check(v) for v in (values or ())])

    def update(self, values) -> None:
        self._values[:] = [self._check(v) for v in (values or ())]

    def clear(self) -> None:
        self._values.clear()


class OperatorBroadcastState(BroadcastState):
    __slots__ = ("_name", "_map")

    def __init__(self, name: str, mapping: dict):
        self._name = name
        self._map = mapping

    def get(self, key):
        return self._map.get(key)

    def contains(self, key) -> bool:
        return key in self._map

    def items(self):
        return list(self._map.items())

    def keys(self):
        return list(self._map.keys())

    def values(self):
        return list(self._map.values())

    def is_empty(self) -> bool:
        return not self._map

    def put(self, key, value) -> None:
        self._map[key] = value

    def put_all(self, dict_value) -> None:
        self._map.update(dict_value)

    def remove(self, key) -> None:
        self._map.pop(key, None)

    def clear(self) -> None:
        self._map.clear()

    def __getitem__(self, key):
        return self.get(key)

    def __setitem__(self, key, value):
        self.put(key, value)

    def __delitem__(self, key):
        self.remove(key)

    def __contains__(self, key):
        return self.contains(key)

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self._map)


class ReadOnlyBroadcastStateView(ReadOnlyBroadcastState):
    """What ``process_element`` sees: reads only, so every subtask's copy stays the same."""

    __slots__ = ("_state",)

    def __init__(self, state: OperatorBroadcastState):
        self._state = state

    def get(self, key):
        return self._state.get(key)

    def contains(self, key) -> bool:
        return self._state.contains(key)

    def items(self):
        return self._state.items()

    def keys(self):
        return self._state.keys()

    def values(self):
        return self._state.values()

    def is_empty(self) -> bool:
        return self._state.is_empty()

    def clear(self) -> None:
        raise RuntimeError(f"broadcast state '{self._state._name}' is read-only in process_element; "
                           "change it in process_broadcast_element")

    def __getitem__(self, key):
        return self.get(key)

    def __contains__(self, key):
        return self.contains(key)

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self._state)


# --- the store -----------------------------------------------------------------------------------------

class DefaultOperatorStateStore(OperatorStateStore):
    """One subtask's operator state. Restored states that the function never asks for again are
    kept and written with every snapshot, as in Flink."""

    def __init__(self, operator: str, restored: dict | None = None):
        self.operator = operator
        restored = restored or empty_snapshot()
        self._lists: dict[str, tuple[str, list]] = {n: (s["mode"], list(s["values"]))
                                                   for n, s in restored["list"].items()}
        self._maps: dict[str, dict] = {n: dict(m) for n, m in restored["broadcast"].items()}
        self._list_states: dict[str, OperatorListState] = {}
        self._broadcast_states: dict[str, OperatorBroadcastState] = {}

    def _list(self, descriptor, mode: str) -> OperatorListState:
        if not isinstance(descriptor, ListStateDescriptor):
            raise TypeError(f"operator '{self.operator}': operator list state needs a ListStateDescriptor, "
                            f"got {type(descriptor).__name__}")
        name = descriptor.name
        known = self._lists.get(name)
        if known is not None and known[0] != mode:
            raise ValueError(
                f"operator '{self.operator}': list state '{name}' is registered (or restored) as "
                f"{_mode_api(known[0])}, cannot use it as {_mode_api(mode)}: its redistribution mode differs")
        if known is None:
            known = self._lists[name] = (mode, [])
        state = self._list_states.get(name)
        if state is None:
            state = self._list_states[name] = OperatorListState(name, known[1])
        return state

    def get_list_state(self, state_descriptor):
        return self._list(state_descriptor, SPLIT)

    def get_union_list_state(self, state_descriptor):
        return self._list(state_descriptor, UNION)

    def get_broadcast_state(self, state_descriptor) -> OperatorBroadcastState:
        if not isinstance(state_descriptor, MapStateDescriptor):
            raise TypeError(f"operator '{self.operator}': broadcast state needs a MapStateDescriptor, "
                            f"got {type(state_descriptor).__name__}")
        name = state_descriptor.name
        state = self._broadcast_states.get(name)
        if state is None:
            state = self._broadcast_states[name] = OperatorBroadcastState(name, self._maps.setdefault(name, {}))
        return state

    def get_registered_state_names(self) -> list[str]:
        return sorted(self._lists)

    def get_registered_broadcast_state_names(self) -> list[str]:
        return sorted(self._maps)

    def snapshot(self) -> dict:
        return {"format": FORMAT,
                "list": {n: {"mode": mode, "values": list(values)} for n, (mode, values) in self._lists.items()},
                "broadcast": {n: dict(m) for n, m in self._maps.items()}}


def _mode_api(mode: str) -> str:
    return "get_union_list_state" if mode == UNION else "get_list_state"


# --- encoding (the checkpoint's file format is not this module's concern) ----------------------------

def encode(snapshot: dict, operator: str) -> bytes:
    try:
        return serde.dumps(snapshot)
    except Exception as exc:  # noqa: BLE001 — re-raised naming the state
        bad = "?"
        for kind in ("list", "broadcast"):
            for name, value in snapshot[kind].items():
                try:
                    pickle.dumps(value, protocol=serde.PROTOCOL)
                except Exception:  # noqa: BLE001
                    bad = name
        raise serde.StateSerializationError(
            f"operator '{operator}': operator state '{bad}' holds a value that cannot be serialized for the "
            f"checkpoint: {exc}") from exc


def decode(payload: bytes | None) -> dict:
    return serde.loads(payload) if payload is not None else empty_snapshot()


def redistribute(snapshots: list[dict], parallelism: int) -> list[dict]:
    """Old subtasks' snapshots → the state each of ``parallelism`` new subtasks starts with."""
    out = [empty_snapshot() for _ in range(parallelism)]
    if not snapshots:
        return out
    modes: dict[str, str] = {}
    for s in snapshots:
        for name, entry in s["list"].items():
            if modes.setdefault(name, entry["mode"]) != entry["mode"]:
                raise ValueError(f"operator state '{name}' was written with two redistribution modes")
    same = len(snapshots) == parallelism
    start = 0
    for name in sorted(modes):
        parts = [s["list"][name]["values"] if name in s["list"] else [] for s in snapshots]
        if modes[name] == UNION:
            union = [v for part in parts for v in part]
            for target in out:
                target["list"][name] = {"mode": UNION, "values": list(union)}
        elif same:
            for target, part in zip(out, parts):
                target["list"][name] = {"mode": SPLIT, "values": list(part)}
        else:
            start = _split(name, [v for part in parts for v in part], out, start)
    for name in sorted({n for s in snapshots for n in s["broadcast"]}):
        holders = [s["broadcast"][name] for s in snapshots if name in s["broadcast"]]
        for i, target in enumerate(out):
            target["broadcast"][name] = dict(holders[i % len(holders)])
    return out


def _split(name: str, elements: list, out: list[dict], start: int) -> int:
    """Contiguous parts of ``elements``, sizes differing by at most one; the larger parts go to the
    subtasks from ``start`` on, and the next state begins where this one's larger parts ended."""
    n = len(out)
    base, remainder = divmod(len(elements), n)
    next_start = start
    pos = 0
    for i in range(n):
        index = (i + start) % n
        count = base
        if remainder > 0:
            count += 1
            remainder -= 1
        elif remainder == 0:
            next_start = index
            remainder -= 1
        out[index]["list"][name] = {"mode": SPLIT, "values": elements[pos:pos + count]}
        pos += count
    return next_start


def restore_subtask(snapshots: list[dict], subtask: int, parallelism: int) -> dict | None:
    """What one new subtask restores from the old subtasks' snapshots (None: nothing)."""
    if not snapshots:
        return None
    return redistribute(snapshots, parallelism)[subtask]
