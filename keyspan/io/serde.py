"""Serialization of records and state: pickle (cloudpickle for functions), with errors that say what failed."""

from __future__ import annotations

import os
import pickle
import sys
import sysconfig

import cloudpickle

PROTOCOL = 5


class StateSerializationError(TypeError):
    """A state value or record could not be serialized; the message names operator, state and key."""


def dumps(obj) -> bytes:
    return pickle.dumps(obj, protocol=PROTOCOL)


def loads(data: bytes):
    return pickle.loads(data)


def dumps_function(fn) -> bytes:
    """Functions and closures travel with cloudpickle, like Spark's own UDFs."""
    return cloudpickle.dumps(fn, protocol=PROTOCOL)


_LIBRARY_ROOTS = tuple({os.path.dirname(os.__file__), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


def ship_user_modules(objects) -> None:
    """User code (the job file and modules beside it) is pickled by value, so workers need not be
    able to import it — as PyFlink ships a job's Python files with the job."""
    for obj in objects:
        for name in {getattr(obj, "__module__", None), getattr(type(obj), "__module__", None)}:
            module = sys.modules.get(name) if name else None
            path = getattr(module, "__file__", None)
            if module is None or path is None or name == "__main__" or name.split(".")[0] in ("keyspan", "pyspark"):
                continue
            if not os.path.abspath(path).startswith(_LIBRARY_ROOTS):
                cloudpickle.register_pickle_by_value(module)


def ship_user_modules_within(root, depth: int = 4) -> None:
    """``ship_user_modules`` for an object and the objects its attributes hold, a few levels deep: a
    sink's bucket assigner or a source's deserializer may be a class of the user's own module."""
    seen: set[int] = set()
    found: list = []

    def visit(obj, level: int) -> None:
        if level > depth or id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None))):
            return
        seen.add(id(obj))
        found.append(obj)
        if isinstance(obj, dict):
            inner = list(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            inner = list(obj)
        else:
            inner = list(getattr(obj, "__dict__", {}).values())
        if len(inner) <= 64:  # a longer collection is data, not a job's configuration
            for item in inner:
                visit(item, level + 1)

    visit(root, 0)
    ship_user_modules(found)


def dumps_state(obj, *, operator: str, state: str | None = None, key_group: int | None = None) -> bytes:
    """Pickle state for a checkpoint; on failure find the first offending entry and name it."""
    try:
        return pickle.dumps(obj, protocol=PROTOCOL)
    except Exception as exc:  # noqa: BLE001 — re-raised with context
        where = _find_unpicklable(obj)
        raise StateSerializationError(
            f"operator '{operator}': state '{where[0] if where else state}' "
            f"key {where[1] if where else '?'!r} (key group {key_group}) holds a value that cannot be "
            f"serialized for the checkpoint: {exc}"
        ) from exc


def dump_state(obj, file, *, operator: str, state: str | None = None, key_group: int | None = None) -> None:
    """``dumps_state`` into a binary file: the pickle goes out frame by frame (large values are
    written straight through, not copied), so no payload-sized buffer is built. On failure the file
    holds a partial pickle; the caller discards the file."""
    try:
        pickle.Pickler(file, protocol=PROTOCOL).dump(obj)
    except Exception as exc:  # noqa: BLE001 — re-raised with context
        if isinstance(exc, OSError):  # the file, not the value
            raise
        where = _find_unpicklable(obj)
        raise StateSerializationError(
            f"operator '{operator}': state '{where[0] if where else state}' "
            f"key {where[1] if where else '?'!r} (key group {key_group}) holds a value that cannot be "
            f"serialized for the checkpoint: {exc}"
        ) from exc


def _find_unpicklable(section):
    """``section`` is {state_name: (puts, deletes)}; return (state, key) of the first bad value."""
    if not isinstance(section, dict):
        return None
    for name, entry in section.items():
        puts = entry[0] if isinstance(entry, tuple) else entry
        if not isinstance(puts, dict):
            continue
        for key, value in puts.items():
            try:
                pickle.dumps(value, protocol=PROTOCOL)
            except Exception:  # noqa: BLE001
                return name, key
    return None
