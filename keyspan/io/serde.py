"""Serialization of records and state: pickle (cloudpickle for functions), with errors that say what failed."""

from __future__ import annotations

import functools
import itertools
import os
import pickle
import re
import sys
import sysconfig
import types

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


def loads_code(data: bytes):
    """User code that ``dumps_function`` shipped, loaded where it runs (``adopt_main_classes``)."""
    code = pickle.loads(data)
    adopt_main_classes(code)
    return code


def adopt_main_classes(root) -> None:
    """Puts the job file's classes that ``root`` uses into this process's ``__main__``. cloudpickle
    ships them by value with the job's functions, but pickle saves an instance's class by name: a record
    or state value of such a class (a dataclass defined in the job file) could not cross an exchange or
    reach a checkpoint where ``__main__`` is Spark's worker. Only in a Spark worker (``__main__`` is
    PySpark's daemon or worker) is a job file's class replaced by a newer job's; a job file's or a
    notebook's own ``__main__`` only gains names it lacks."""
    main = sys.modules.get("__main__")
    if main is None:
        return
    path = getattr(main, "__file__", None) or ""
    in_worker = main.__name__ != "__main__" or os.path.basename(os.path.dirname(path)) == "pyspark"
    for name, cls in main_classes(root).items():
        held = getattr(main, name, None)
        if held is None or (in_worker and isinstance(held, type) and held.__module__ == "__main__"):
            setattr(main, name, cls)


def main_module_classes() -> tuple[type, ...]:
    """The top-level classes of this program's ``__main__`` that can be shipped: what a program that
    reads or rewrites a job's state (the State Processor API) defined for the objects in it. Its Spark
    tasks ``adopt_main_classes`` them before they unpickle state."""
    main = sys.modules.get("__main__")
    found = []
    for value in list(vars(main).values()) if main is not None else ():
        if isinstance(value, type) and value.__module__ == "__main__" and value.__qualname__ == value.__name__:
            try:
                cloudpickle.dumps(value, protocol=PROTOCOL)
            except Exception:  # noqa: BLE001 — a class that cannot travel is not one state can hold either
                continue
            found.append(value)
    return tuple(found)


_LEAF_TYPES = (str, bytes, bytearray, int, float, bool, complex, type(None), types.ModuleType,
               types.BuiltinFunctionType)


def main_classes(root) -> dict[str, type]:
    """The job file's (``__main__``'s) top-level classes that ``root`` uses: its own, those its functions
    name, and those of the objects it holds. keyspan's objects and the job file's are looked into, a
    library's are not; of a long collection, its first items."""
    found: dict[str, type] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if isinstance(obj, _LEAF_TYPES) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, type):
            if obj.__module__ == "__main__":
                if obj.__qualname__ == obj.__name__:
                    found.setdefault(obj.__name__, obj)
                stack.extend(vars(obj).values())
                stack.extend(obj.__bases__)
        elif isinstance(obj, types.FunctionType):
            if obj.__module__ == "__main__":
                names = _names(obj.__code__)
                stack.extend(value for name, value in obj.__globals__.items() if name in names)
                stack.extend(cell.cell_contents for cell in obj.__closure__ or () if _filled(cell))
                stack.extend(obj.__defaults__ or ())
        elif isinstance(obj, types.MethodType):
            stack.extend((obj.__func__, obj.__self__))
        elif isinstance(obj, (staticmethod, classmethod)):
            stack.append(obj.__func__)
        elif isinstance(obj, property):
            stack.extend((obj.fget, obj.fset, obj.fdel))
        elif isinstance(obj, functools.partial):
            stack.extend((obj.func, obj.args, obj.keywords))
        elif isinstance(obj, (dict, list, tuple, set, frozenset)):
            stack.extend(itertools.islice(obj.values() if isinstance(obj, dict) else obj, 64))
        elif type(obj).__module__ == "__main__" or type(obj).__module__.split(".")[0] == "keyspan":
            stack.append(type(obj))
            stack.extend(getattr(obj, "__dict__", {}).values())
            for slot in getattr(type(obj), "__slots__", ()):
                if isinstance(slot, str) and hasattr(obj, slot):
                    stack.append(getattr(obj, slot))
    return found


def _names(code: types.CodeType) -> set[str]:
    """The global names a function's code (nested functions' included) may read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


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


def missing_code(exc: Exception) -> str | None:
    """What an unpickling failure needed that this program lacks ("objects of class Tally of the job
    file"), or None when ``exc`` is not such a failure."""
    text = str(exc)
    cls = re.match(r"Can't get attribute '([^']+)' on <module '([^']+)'", text)
    if isinstance(exc, AttributeError) and cls is not None:
        where = cls.group(2)
        owner = "the job file" if where == "__main__" or where.startswith("pyspark.") else f"module {where}"
        return f"objects of class {cls.group(1)} of {owner}, which is not defined here"
    module = re.match(r"No module named '([^']+)'", text)
    if isinstance(exc, ImportError) and module is not None:
        return f"objects of module {module.group(1)}, which cannot be imported here"
    return None


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
