"""What runs inside the Spark tasks of the State Processor API.

A savepoint's keyed state is split by key group, and every state file has an index of its key
groups, so a Spark task reads exactly its key-group range's bytes of each file (``Scan``) and a
task writing state owns a key-group range and writes one file of it (``KeyedWrite``). Files are
read and written through ``keyspan.checkpoint`` (the format's one home) and keyed state is built
on the heap backend the jobs themselves use, so what is written is canonical and restorable on
every backend at any parallelism up to the max parallelism.
"""

from __future__ import annotations

import dataclasses
import uuid

import pyarrow as pa

from keyspan.checkpoint import reader as checkpoint_reader
from keyspan.checkpoint import savepoint as savepoint_format
from keyspan.checkpoint import statefile
from keyspan.checkpoint.handles import FULL, OPERATOR
from keyspan.common.types import Row
from keyspan.io import serde
from keyspan.io.storage import Storage
from keyspan.state import operator as operator_state
from keyspan.state.api import EVENT_TIME, PROCESSING_TIME, TIMER_STATE, MapStateDescriptor
from keyspan.state.backend import encode_section
from keyspan.state.heap import HeapKeyedStateBackend
from keyspan.state.keygroups import (
    assign_to_key_group,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
)
from keyspan.state.ttl import unstamp

BATCH_ROWS = 8192
VALUE_KINDS = ("value", "reducing", "aggregating")
TIMERS = "timers"  # the kind of the rows of an operator's timers (state TIMER_STATE)
DOMAINS = {EVENT_TIME: "event_time", PROCESSING_TIME: "processing_time"}


def decode(value: bytes):
    """The decoder of binary ``key``/``value`` columns: the Python object the job held (a pickle)."""
    return None if value is None else serde.loads(value)


def encode(obj) -> bytes:
    return serde.dumps(obj)


# -- reading ---------------------------------------------------------------------------------------------

def row_schema(kind: str, key_type=None, value_type=None, map_key_type=None) -> pa.Schema:
    """The rows of one state: one per key (value, reducing, aggregating), per element (list), per entry
    (map) or per timer. Columns without a declared type hold pickles (``decode``)."""
    fields = [pa.field("key_group", pa.int32()), pa.field("key", key_type or pa.binary())]
    if kind in VALUE_KINDS:
        fields.append(pa.field("value", value_type or pa.binary()))
    elif kind == "list":
        fields += [pa.field("index", pa.int32()), pa.field("value", value_type or pa.binary())]
    elif kind == "map":
        fields += [pa.field("map_key", map_key_type or pa.binary()), pa.field("value", value_type or pa.binary())]
    elif kind == TIMERS:
        fields += [pa.field("domain", pa.string()), pa.field("timestamp", pa.int64())]
    else:
        raise ValueError(f"unknown state kind {kind!r}: one of value, list, map, reducing, aggregating, timers")
    return pa.schema(fields)


def _column(values: list, type_):
    if type_ is None or pa.types.is_binary(type_):
        return pa.array([None if v is None else serde.dumps(v) for v in values], pa.binary())
    try:
        return pa.array(values, type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
        raise TypeError(f"a state value does not fit the column type {type_}: {exc}. Read it as pickled binary "
                        "(key_type/value_type=\"binary\") and decode it with keyspan.state_processor.decode") from None


@dataclasses.dataclass
class Scan:
    """One operator's keyed state in a savepoint (or checkpoint), split into ``tasks`` key-group ranges."""

    storage_uri: str
    uid: str
    handles: list
    max_parallelism: int
    tasks: int

    def key_groups(self, task: int) -> range:
        return compute_key_group_range_for_operator_index(self.max_parallelism, self.tasks, task)

    def states(self, task: int, stats: statefile.ReadStats | None = None):
        """(key group, {state: {key: stored value}}) of the task's key groups, one key group at a time."""
        storage = Storage(self.storage_uri)
        for kg in self.key_groups(task):
            state = checkpoint_reader.key_group_state(storage, self.handles, kg, stats)
            if state:
                yield kg, state

    def rows(self, task: int, state: str, kind: str, schema: pa.Schema, stats=None):
        """Record batches of one state's rows (see ``row_schema``)."""
        names = schema.names
        types = {f.name: f.type for f in schema}
        columns: dict[str, list] = {n: [] for n in names}

        def flush():
            batch = pa.RecordBatch.from_arrays([_column(columns[n], types[n]) if n in ("key", "value", "map_key")
                                                else pa.array(columns[n], types[n]) for n in names], schema=schema)
            for n in names:
                columns[n] = []
            return batch

        for kg, tables in self.states(task, stats):
            for key, stored in tables.get(TIMER_STATE if kind == TIMERS else state, {}).items():
                for extra in _expand(kind, stored):
                    columns["key_group"].append(kg)
                    columns["key"].append(key)
                    for n, v in zip(names[2:], extra):
                        columns[n].append(v)
                if len(columns["key"]) >= BATCH_ROWS:
                    yield flush()
        if columns["key"]:
            yield flush()

    def entries(self, task: int, stats=None):
        """(key group, state, key, stored value) of every keyed state, TTL timestamps included."""
        for kg, tables in self.states(task, stats):
            for name, table in tables.items():
                for key, stored in table.items():
                    yield kg, name, key, stored


def _expand(kind: str, stored):
    """The rows' non-key columns of one key's stored value."""
    if kind in VALUE_KINDS:
        yield (unstamp(kind, stored),)
    elif kind == "list":
        for i, v in enumerate(unstamp("list", stored)):
            yield i, v
    elif kind == "map":
        for k, v in unstamp("map", stored).items():
            yield k, v
    else:  # timers: {(domain, timestamp): True}
        for domain, timestamp in sorted(stored):
            yield DOMAINS[domain], timestamp


class _ReaderContext:
    """``KeyedStateReaderFunction.Context`` and the ``RuntimeContext`` given to its ``open``."""

    def __init__(self, backend, uid: str, task: int, tasks: int, max_parallelism: int):
        self._backend = backend
        self._uid = uid
        self._task = task
        self._tasks = tasks
        self._max_parallelism = max_parallelism
        self._timers = backend.get_state(MapStateDescriptor(TIMER_STATE))

    # RuntimeContext
    def get_task_name(self) -> str:
        return self._uid

    def get_number_of_parallel_subtasks(self) -> int:
        return self._tasks

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._max_parallelism

    def get_index_of_this_subtask(self) -> int:
        return self._task

    def get_state(self, descriptor):
        return self._backend.get_state(descriptor)

    get_list_state = get_map_state = get_reducing_state = get_aggregating_state = get_state

    # the function's Context
    def get_current_key(self):
        return self._backend.current_key

    def _timers_of(self, domain: int) -> list[int]:
        return sorted(ts for d, ts in self._timers.keys() if d == domain)

    def registered_event_time_timers(self) -> list[int]:
        return self._timers_of(EVENT_TIME)

    def registered_processing_time_timers(self) -> list[int]:
        return self._timers_of(PROCESSING_TIME)


def read_with_function(scan: Scan, task: int, function, schema: pa.Schema, stats=None):
    """Record batches of what ``function.read_key`` yields for every key of the task's key groups: the
    key groups are restored, one at a time, into the heap backend the jobs use, so the function sees
    its states exactly as the job did (TTL, reducing/aggregating results included)."""
    groups = scan.key_groups(task)
    backend = HeapKeyedStateBackend(scan.uid, groups)
    ctx = _ReaderContext(backend, scan.uid, task, scan.tasks, scan.max_parallelism)
    function.open(ctx)
    storage = Storage(scan.storage_uri)
    out: list = []
    for kg in groups:
        keys: dict = {}
        for payload in checkpoint_reader.key_group_payloads(storage, scan.handles, kg, stats):
            section = serde.loads(payload)
            backend.apply_section(kg, section)
            for name, (puts, _deletes) in section.items():
                if name != TIMER_STATE:
                    keys.update(dict.fromkeys(puts))
        for key in keys:
            backend.current_key_group = kg
            backend.current_key = key
            produced = function.read_key(key, ctx)
            for row in produced or ():
                out.append(_as_dict(row, schema.names))
            if len(out) >= BATCH_ROWS:
                yield pa.RecordBatch.from_pylist(out, schema=schema)
                out = []
    function.close()
    if out:
        yield pa.RecordBatch.from_pylist(out, schema=schema)


def _as_dict(row, names) -> dict:
    if isinstance(row, dict):
        return row
    if hasattr(row, "asDict"):
        return row.asDict()
    if not isinstance(row, (tuple, list)):
        row = (row,)
    return dict(zip(names, row))


def operator_snapshots(storage_uri: str, handles: list) -> list[dict]:
    """Every operator subtask's operator-state snapshot (newest parallelism), in subtask order."""
    storage = Storage(storage_uri)
    handles = sorted((h for h in handles if h["kind"] == OPERATOR), key=lambda h: h["subtask"])
    if not handles:
        return []
    newest = max(h["parallelism"] for h in handles)
    return [operator_state.decode(statefile.read_section(storage, h["path"])) for h in handles
            if h["parallelism"] == newest]


# -- writing ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class KeyedWrite:
    """Writing one operator's keyed state into a savepoint: task ``i`` owns key-group range ``i`` of
    ``tasks`` and writes one full-snapshot file of it."""

    target_uri: str
    uid: str
    max_parallelism: int
    tasks: int
    epoch: int
    token: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:8])

    def key_groups(self, task: int) -> range:
        return compute_key_group_range_for_operator_index(self.max_parallelism, self.tasks, task)

    def route(self, key) -> tuple[int, int]:
        """(key group, writing task) of a key."""
        kg = assign_to_key_group(key, self.max_parallelism)
        return kg, compute_operator_index_for_key_group(self.max_parallelism, self.tasks, kg)

    def _file(self, task: int, sections) -> dict | None:
        written = savepoint_format.write_state_file(
            self.target_uri, self.uid, f"e{self.epoch:010d}-s{task:04d}-{self.token}.{FULL}", sections)
        groups = self.key_groups(task)
        return dict(uid=self.uid, kind=FULL, epoch=self.epoch, kg=[groups.start, groups.stop], subtask=task, **written)

    def bootstrap(self, task: int, function, records) -> tuple[dict | None, list[dict]]:
        """Run a ``KeyedStateBootstrapFunction`` over ``records`` ((key group, key, value), any order) on
        the heap backend and write the task's key groups; returns (handle or None, state descriptors)."""
        backend = HeapKeyedStateBackend(self.uid, self.key_groups(task))
        ctx = _BootstrapContext(backend, self, task)
        function.open(ctx)
        any_record = False
        for kg, key, value in records:
            any_record = True
            backend.current_key_group = kg
            backend.current_key = key
            function.process_element(value, ctx)
        function.close()
        states = backend.describe_states()
        if not any_record:
            return None, states
        sections = backend.full_sections()
        return (self._file(task, sections) if sections else None), states

    def rewrite(self, task: int, entries) -> dict | None:
        """Write entries ((key group, state, key, stored value), ascending key group) as the task's file,
        one key group's section at a time."""
        def sections():
            current, section = None, {}
            for kg, state, key, stored in entries:
                if kg != current:
                    if section:
                        yield current, encode_section(section, self.uid, current)
                    current, section = kg, {}
                section.setdefault(state, ({}, []))[0][key] = stored
            if section:
                yield current, encode_section(section, self.uid, current)

        first = next(iter_ := sections(), None)
        if first is None:
            return None
        return self._file(task, _chain(first, iter_))


def _chain(first, rest):
    yield first
    yield from rest


class _TimerService:
    """Timers registered while bootstrapping: saved in the key's timer state, as the job saves them."""

    def __init__(self, backend):
        self._state = backend.get_state(MapStateDescriptor(TIMER_STATE))

    def register_event_time_timer(self, timestamp: int) -> None:
        self._state.put((EVENT_TIME, int(timestamp)), True)

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._state.put((PROCESSING_TIME, int(timestamp)), True)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._state.remove((EVENT_TIME, int(timestamp)))

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._state.remove((PROCESSING_TIME, int(timestamp)))


class _BootstrapContext(_ReaderContext):
    """``KeyedStateBootstrapFunction.Context`` and the ``RuntimeContext`` given to its ``open``."""

    def __init__(self, backend, write: KeyedWrite, task: int):
        self._backend = backend
        self._uid = write.uid
        self._task = task
        self._tasks = write.tasks
        self._max_parallelism = write.max_parallelism
        self._timer_service = None

    def timer_service(self):
        if self._timer_service is None:
            self._timer_service = _TimerService(self._backend)
        return self._timer_service


class _OperatorContext:
    """The initialization/snapshot context of a ``StateBootstrapFunction`` and the context of a
    ``BroadcastStateBootstrapFunction``."""

    def __init__(self, store, task: int):
        self._store = store
        self._task = task

    def is_restored(self) -> bool:
        return False

    def get_restored_checkpoint_id(self):
        return None

    def get_operator_state_store(self):
        return self._store

    def get_keyed_state_store(self):
        raise RuntimeError("a StateBootstrapFunction writes operator state; use key_by(...) and a "
                           "KeyedStateBootstrapFunction for keyed state")

    def get_broadcast_state(self, descriptor):
        return self._store.get_broadcast_state(descriptor)

    def get_checkpoint_id(self) -> int:
        return 0

    def get_checkpoint_timestamp(self) -> int:
        return 0

    def current_processing_time(self) -> int:
        from keyspan.common.clock import wall_clock_ms

        return wall_clock_ms()


def bootstrap_operator_state(target_uri: str, uid: str, epoch: int, task: int, parallelism: int, function,
                             values, broadcast: bool) -> dict:
    """Run a ``StateBootstrapFunction`` or ``BroadcastStateBootstrapFunction`` as operator subtask
    ``task`` and write its operator state file; returns the handle."""
    store = operator_state.DefaultOperatorStateStore(uid)
    ctx = _OperatorContext(store, task)
    function.open(ctx)
    if not broadcast:
        function.initialize_state(ctx)
    for value in values:
        function.process_element(value, ctx)
    if not broadcast:
        function.snapshot_state(ctx)
    function.close()
    payload = operator_state.encode(store.snapshot(), type(function).__name__)
    token = uuid.uuid4().hex[:8]
    written = savepoint_format.write_operator_state_file(target_uri, uid,
                                                         f"e{epoch:010d}-s{task:04d}-{token}.{OPERATOR}", payload)
    return dict(uid=uid, kind=OPERATOR, epoch=epoch, kg=[0, 0], subtask=task, parallelism=parallelism, **written)


def record(values: dict) -> Row:
    """An input row as the bootstrap function sees it: PyFlink's ``Row`` with named fields."""
    return Row(**values)

