"""What to read from a savepoint, decided on the driver: the rows' schema and how many Spark tasks,
each reading one key-group range (``tasks.Scan``). Shared by ``SavepointReader`` and the
``keyspan-state`` Spark data source, so both read the same way."""

from __future__ import annotations

import math

import pyarrow as pa

from keyspan.checkpoint import integrity
from keyspan.checkpoint import savepoint as savepoint_format
from keyspan.checkpoint import statefile
from keyspan.checkpoint.handles import is_keyed
from keyspan.common.settings import load as load_settings
from keyspan.common.typeinfo import TypeInformation, Types
from keyspan.io.storage import Storage
from keyspan.state.api import TIMER_STATE
from keyspan.state_processor import tasks as T

BYTES_PER_TASK = 32 << 20  # a read task's share of the state files by default


def signing_key() -> bytes:
    """The key this keyspan signs and verifies savepoint metadata with (``KEYSPAN_SAVEPOINT_KEY``, or the
    workdir's ``savepoint.key``): the same a job restored here checks."""
    return integrity.signing_key(load_settings().workdir)


def load(path: str, verify: bool = True) -> dict:
    """A savepoint's metadata with, as on restore, its signature and every file's checksum checked
    before anything in it is read; ``verify=False`` skips both (only for savepoints you trust: state
    is unpickled)."""
    return savepoint_format.load_savepoint(path, verify=verify, key=signing_key() if verify else None)


# Spark type names accepted as options (the data source plans without a Spark session at hand)
_SPARK_TYPES = {"string": pa.string(), "bigint": pa.int64(), "long": pa.int64(), "int": pa.int32(),
                "integer": pa.int32(), "smallint": pa.int16(), "tinyint": pa.int8(), "double": pa.float64(),
                "float": pa.float32(), "boolean": pa.bool_(), "binary": pa.binary(), "date": pa.date32(),
                "timestamp": pa.timestamp("us", tz="UTC")}


def arrow_type(declared) -> pa.DataType | None:
    """A column type from ``Types.X()``, a Spark DDL type string (``"bigint"``), a pyarrow type, or the
    ``type`` a savepoint recorded for a state (``"LONG"``); None: pickled binary."""
    if declared is None:
        return None
    if isinstance(declared, pa.DataType):
        return declared
    if isinstance(declared, TypeInformation):
        return declared.arrow_type
    if isinstance(declared, str):
        factory = getattr(Types, declared, None)
        if factory is not None and declared.isupper():
            try:
                return factory().arrow_type
            except TypeError:
                return None
        simple = _SPARK_TYPES.get(declared.strip().lower())
        if simple is None:
            raise ValueError(f"unknown column type {declared!r}: one of {', '.join(sorted(_SPARK_TYPES))}, or "
                             "Types.X() in Python")
        return simple
    raise TypeError(f"cannot make a column type of {declared!r}: give Types.X(), a Spark type string or None")


def spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def keyed_handles(metadata: dict, uid: str) -> list[dict]:
    return [h for h in metadata["state"].get(uid, []) if is_keyed(h)]


def read_tasks(metadata: dict, uid: str) -> int:
    """Read tasks for an operator's keyed state: about ``BYTES_PER_TASK`` each, at least 8, at most one
    per key group."""
    total = sum(h["bytes"] for h in keyed_handles(metadata, uid))
    return min(metadata["max_parallelism"], max(8, math.ceil(total / BYTES_PER_TASK)))


class KeyedPlan:
    """One keyed state (or the timers) of one operator."""

    def __init__(self, metadata: dict, storage_uri: str, uid: str, state: str | None, *, kind: str | None = None,
                 key_type=None, value_type=None, map_key_type=None, tasks: int | None = None):
        handles = keyed_handles(metadata, uid)
        described = {d["name"]: d for o in metadata["operators"] if o["uid"] == uid for d in o.get("states", [])}
        if uid not in metadata["state"] and uid not in {o["uid"] for o in metadata["operators"]}:
            known = ", ".join(sorted(metadata["state"])) or "none"
            raise LookupError(f"savepoint {metadata['uri']} has no operator with uid '{uid}' (operators with "
                              f"state: {known})")
        if kind != T.TIMERS:
            if state is None:
                raise ValueError(f"operator '{uid}': name the state to read (its states: "
                                 f"{', '.join(n for n in sorted(described) if n != TIMER_STATE) or 'none'})")
            if state not in described:
                raise LookupError(f"operator '{uid}' has no keyed state '{state}' in savepoint {metadata['uri']} "
                                  f"(its states: {', '.join(n for n in sorted(described) if n != TIMER_STATE) or 'none'})")
            kind = kind or described[state]["kind"]
            value_type = value_type if value_type is not None else described[state].get("type")
        self.uid, self.state, self.kind = uid, state, kind
        self.max_parallelism = metadata["max_parallelism"]
        self.tasks = tasks or read_tasks(metadata, uid)
        self.scan = T.Scan(storage_uri, uid, handles, self.max_parallelism, self.tasks)
        if key_type is None:
            key_type = self._infer_key_type(storage_uri, handles)
        self.schema = T.row_schema(kind, arrow_type(key_type), arrow_type(value_type), arrow_type(map_key_type))

    def _infer_key_type(self, storage_uri: str, handles: list) -> pa.DataType | None:
        """The key column's type from a sampled key (str, int, float, bool); binary otherwise."""
        from keyspan.io import serde

        storage = Storage(storage_uri)
        for h in sorted(handles, key=lambda h: h["bytes"])[:1]:
            for _kg, payload in statefile.read_key_groups(storage, h["path"], range(h["kg"][0], h["kg"][1])):
                for table in serde.loads(payload).values():
                    for key in table[0]:
                        return {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}.get(type(key))
        return None

    def read(self, task: int, stats=None):
        return self.scan.rows(task, self.state, self.kind, self.schema, stats)


class OperatorPlan:
    """Operator list, union list or broadcast state of one operator: read in one task (it is small)."""

    tasks = 1

    def __init__(self, metadata: dict, storage_uri: str, uid: str, state: str, kind: str, *, value_type=None,
                 key_type=None):
        if kind not in ("list", "union", "broadcast"):
            raise ValueError(f"operator state kind must be list, union or broadcast, got {kind!r}")
        self.uid, self.state, self.kind = uid, state, kind
        self.storage_uri = storage_uri
        self.handles = metadata["state"].get(uid, [])
        value = arrow_type(value_type) or pa.binary()
        if kind == "broadcast":
            self.schema = pa.schema([pa.field("key", arrow_type(key_type) or pa.binary()), pa.field("value", value)])
        else:
            self.schema = pa.schema([pa.field("subtask", pa.int32()), pa.field("index", pa.int32()),
                                     pa.field("value", value)])

    def read(self, task: int, stats=None):
        snapshots = T.operator_snapshots(self.storage_uri, self.handles)
        if self.kind == "broadcast":
            entries = snapshots[0]["broadcast"].get(self.state, {}) if snapshots else {}
            if snapshots and self.state not in snapshots[0]["broadcast"]:
                raise LookupError(f"operator '{self.uid}' has no broadcast state '{self.state}'")
            columns = {"key": list(entries), "value": list(entries.values())}
        else:
            mode = "union" if self.kind == "union" else "split"
            rows = [(i, j, v) for i, s in enumerate(snapshots) if self.state in s["list"]
                    and s["list"][self.state]["mode"] == mode for j, v in enumerate(s["list"][self.state]["values"])]
            if snapshots and not any(self.state in s["list"] for s in snapshots):
                raise LookupError(f"operator '{self.uid}' has no operator list state '{self.state}'")
            columns = {"subtask": [r[0] for r in rows], "index": [r[1] for r in rows], "value": [r[2] for r in rows]}
        arrays = [T._column(columns[f.name], f.type) if f.name in ("key", "value") else pa.array(columns[f.name], f.type)
                  for f in self.schema]
        yield pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def plan_for(metadata: dict, storage_uri: str, uid: str, state: str | None, kind: str | None = None, **types):
    if kind in ("list", "union", "broadcast") and not _is_keyed_state(metadata, uid, state):
        return OperatorPlan(metadata, storage_uri, uid, state, kind, value_type=types.get("value_type"),
                            key_type=types.get("key_type"))
    return KeyedPlan(metadata, storage_uri, uid, state, kind=kind, **types)


def _is_keyed_state(metadata: dict, uid: str, state: str | None) -> bool:
    return any(d["name"] == state for o in metadata["operators"] if o["uid"] == uid for d in o.get("states", []))
