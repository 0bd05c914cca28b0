"""What runs inside a Spark task: one stage for one subtask of one epoch.

The task reads its input Arrow batches, pushes records through the stage's operator chain,
writes the epoch's state changes and staged sink output under attempt-unique names, and ends
with a control row naming what it wrote. The driver commits exactly the attempts whose control
rows reached it (invariant 1); operator instances and their state stay cached in the Python
worker between epochs and are confirmed, rolled back or reloaded at the next epoch.
"""

from __future__ import annotations

import itertools
import time
import uuid

import pyarrow as pa

from keyspan.checkpoint import statefile
from keyspan.common.types import _named_row_class
from keyspan.datastream.functions import (
    BroadcastProcessFunction,
    CheckpointedFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    ProcessFunction,
    RuntimeContext,
)
from keyspan.runtime.planner import BROADCAST_KINDS, CONTROL_EXIT, DRIVER_EXIT, StagePlan, user_function
from keyspan.state import operator as operator_state
from keyspan.state import serde
from keyspan.state.keygroups import (
    SEED,
    _hash_atom,
    compute_key_group_range_for_operator_index,
)

OUTPUT_SCHEMA = pa.schema([("_ks_exit", pa.int32()), ("_ks_sub", pa.int32()), ("_ks_ctl", pa.binary()),
                           ("payload", pa.binary())])
OUTPUT_DDL = "_ks_exit int, _ks_sub int, _ks_ctl binary, payload binary"
FLUSH_RECORDS = 16384
RECORD_PREVIEW = 300

BROADCAST_CHUNK = "broadcast"  # an exchange payload (BROADCAST_CHUNK, records) of a broadcast input

_PLANS: dict[str, StagePlan] = {}
_INSTANCES: dict[tuple, "OperatorInstance"] = {}
IDLE_INSTANCE_SECONDS = 120


def _evict_idle_instances(run_id: str) -> None:
    """Python workers live across jobs: drop cached operators of other runs once they sit idle, so a
    long-lived worker does not keep every finished job's state in memory."""
    now = time.monotonic()
    for key, inst in list(_INSTANCES.items()):
        if key[0] != run_id and now - inst.last_used > IDLE_INSTANCE_SECONDS:
            del _INSTANCES[key]
            close = getattr(inst.backend, "close", None)
            if close is not None:
                close()


class UserFunctionError(RuntimeError):
    """A user function raised; the message names the operator and shows the record."""

    MARKER = "keyspan.UserFunctionError: "


def _fail(op, subtask, record, exc) -> UserFunctionError:
    text = repr(record)
    if len(text) > RECORD_PREVIEW:
        text = text[:RECORD_PREVIEW] + f"… ({len(text)} chars)"
    return UserFunctionError(
        f"{UserFunctionError.MARKER}operator '{op.name}' (uid {op.uid}, subtask {subtask}) failed on record "
        f"{text}: {type(exc).__name__}: {exc}")


def _fail_in(op, subtask, method, exc) -> UserFunctionError:
    return UserFunctionError(
        f"{UserFunctionError.MARKER}operator '{op.name}' (uid {op.uid}, subtask {subtask}) failed in {method}: "
        f"{type(exc).__name__}: {exc}")


def make_stage_function(plan_bytes: bytes, digest: str, epoch_ctx: dict):
    """The function given to ``mapInArrow``; the plan travels as bytes and is unpickled once per worker."""

    def run(batches):
        plan = _PLANS.get(digest)
        if plan is None:
            plan = _PLANS[digest] = serde.loads(plan_bytes)
        from pyspark import TaskContext

        tc = TaskContext.get()
        attempt = tc.attemptNumber() if tc else 0
        subtask = tc.partitionId() if tc else 0
        if plan.input_format in ("exchange", "typed_keyed"):
            # A partition id is not the subtask once Spark unions stage outputs; every partition of an
            # exchange carries rows addressed to it (control rows, or a heartbeat row) that say which.
            batches = iter(batches)
            first = next((b for b in batches if b.num_rows), None)
            if first is not None:
                subtask = first.column(first.schema.get_field_index("_ks_sub"))[0].as_py()
                batches = itertools.chain([first], batches)
        yield from StageTask(plan, epoch_ctx, subtask, attempt).run(batches)

    return run


# --- runtime context and process-function contexts -----------------------------------------------

class _RuntimeContext(RuntimeContext):
    def __init__(self, op, subtask, parallelism, max_parallelism, attempt, backend=None, job_parameters=None):
        self._op = op
        self._subtask = subtask
        self._parallelism = parallelism
        self._max_parallelism = max_parallelism
        self._attempt = attempt
        self._backend = backend
        self._job_parameters = job_parameters or {}

    def get_task_name(self):
        return self._op.name

    def get_number_of_parallel_subtasks(self):
        return self._parallelism

    def get_max_number_of_parallel_subtasks(self):
        return self._max_parallelism

    def get_index_of_this_subtask(self):
        return self._subtask

    def get_attempt_number(self):
        return self._attempt

    def get_task_name_with_subtasks(self):
        return f"{self._op.name} ({self._subtask + 1}/{self._parallelism})"

    def get_job_parameter(self, key, default_value=None):
        return self._job_parameters.get(key, default_value)

    def get_metrics_group(self):
        return None

    def _keyed(self, descriptor):
        if self._backend is None:
            raise RuntimeError(f"operator '{self._op.name}': keyed state is only available on a keyed stream "
                               f"(use key_by(...) before this operator); asked for '{descriptor.name}'")
        return self._backend.get_state(descriptor)

    def get_state(self, state_descriptor):
        return self._keyed(state_descriptor)

    def get_list_state(self, state_descriptor):
        return self._keyed(state_descriptor)

    def get_map_state(self, state_descriptor):
        return self._keyed(state_descriptor)

    def get_reducing_state(self, state_descriptor):
        return self._keyed(state_descriptor)

    def get_aggregating_state(self, state_descriptor):
        return self._keyed(state_descriptor)


class _TimerService:
    """Clock queries; timers themselves come with event-time support."""

    def current_processing_time(self) -> int:
        return int(time.time() * 1000)

    def current_watermark(self) -> int:
        return -(1 << 63)


_TIMER_SERVICE = _TimerService()


class _KeyedContext(KeyedProcessFunction.Context):
    __slots__ = ("_backend",)

    def __init__(self, backend):
        self._backend = backend

    def get_current_key(self):
        return self._backend.current_key

    def timestamp(self):
        return None

    def timer_service(self):
        return _TIMER_SERVICE


class _Context(ProcessFunction.Context):
    def timestamp(self):
        return None

    def timer_service(self):
        return _TIMER_SERVICE


_CONTEXT = _Context()


class _InitializationContext(FunctionInitializationContext):
    def __init__(self, restored_checkpoint, store, keyed_store):
        self._restored = restored_checkpoint
        self._store = store
        self._keyed = keyed_store

    def is_restored(self) -> bool:
        return self._restored is not None

    def get_restored_checkpoint_id(self):
        return self._restored

    def get_operator_state_store(self):
        return self._store

    def get_keyed_state_store(self):
        return self._keyed


class _SnapshotContext(FunctionSnapshotContext):
    def __init__(self, checkpoint_id: int):
        self._id = checkpoint_id
        self._timestamp = int(time.time() * 1000)

    def get_checkpoint_id(self) -> int:
        return self._id

    def get_checkpoint_timestamp(self) -> int:
        return self._timestamp


class _BroadcastStates:
    """The broadcast states an operator declared in ``broadcast(...)``, read-write or read-only."""

    def __init__(self, op, store):
        self._op = op
        self._store = store
        self._declared = {d.name for d in op.broadcast_descriptors or ()}
        self._read_only = {}

    def get(self, descriptor, writable: bool):
        name = getattr(descriptor, "name", None)
        if name not in self._declared:
            raise ValueError(
                f"operator '{self._op.name}': broadcast state {name!r} does not exist; declare its descriptor in "
                f"datastream.broadcast(...) (declared: {sorted(self._declared)})")
        state = self._store.get_broadcast_state(descriptor)
        if writable:
            return state
        view = self._read_only.get(name)
        if view is None:
            view = self._read_only[name] = operator_state.ReadOnlyBroadcastStateView(state)
        return view


class _BroadcastContextBase:
    _writable = False

    def __init__(self, states: _BroadcastStates, backend=None):
        self._states = states
        self._backend = backend

    def get_broadcast_state(self, state_descriptor):
        return self._states.get(state_descriptor, self._writable)

    def timestamp(self):
        return None

    def current_processing_time(self) -> int:
        return _TIMER_SERVICE.current_processing_time()

    def current_watermark(self) -> int:
        return _TIMER_SERVICE.current_watermark()


class _BroadcastReadOnlyContext(_BroadcastContextBase, BroadcastProcessFunction.ReadOnlyContext):
    pass


class _BroadcastContext(_BroadcastContextBase, BroadcastProcessFunction.Context):
    _writable = True


class _KeyedBroadcastReadOnlyContext(_BroadcastContextBase, KeyedBroadcastProcessFunction.ReadOnlyContext):
    def get_current_key(self):
        return self._backend.current_key

    def timer_service(self):
        return _TIMER_SERVICE


class _KeyedBroadcastContext(_BroadcastContextBase, KeyedBroadcastProcessFunction.Context):
    _writable = True

    def apply_to_keyed_state(self, state_descriptor, function) -> None:
        backend = self._backend
        state = backend.get_state(state_descriptor)
        name = state_descriptor.name
        entries = [(kg, key) for kg, section in sorted(backend.all_sections().items()) if name in section
                   for key in list(section[name][0])]
        saved = backend.current_key, backend.current_key_group
        try:
            for kg, key in entries:
                backend.current_key = key
                backend.current_key_group = kg
                function(key, state)
        finally:
            backend.current_key, backend.current_key_group = saved


# --- operators -------------------------------------------------------------------------------------

def _checkpointed(function):
    """The CheckpointedFunction behind an operator's function (through keyed adapters), or None."""
    fn = user_function(function)
    return fn if isinstance(fn, CheckpointedFunction) else None


class OperatorInstance:
    """An operator instance with its state — a keyed state backend for a keyed operator, an operator
    state store for a CheckpointedFunction or a broadcast-process operator — that lives in the worker
    across epochs. Keyed changes of an uncommitted attempt are rolled back through the backend's undo
    log; an instance with operator state is dropped instead and rebuilt from the checkpoint, because
    its function may mirror that state in fields (Flink restarts such a task from the checkpoint)."""

    def __init__(self, op, plan: StagePlan, subtask: int, attempt: int, backend_spec, key_groups: range | None,
                 cache_key: tuple):
        self.op = op
        self.key_groups = key_groups
        self.cache_key = cache_key
        self.last_used = time.monotonic()
        self.backend = backend_spec.create_keyed_backend(op.uid, key_groups) if key_groups is not None else None
        if self.backend is not None:
            self.backend.operator = f"{op.name}' (uid '{op.uid}"  # how errors name the operator
        self.function = serde.loads(serde.dumps_function(op.function))  # own copy per instance
        self.checkpointed = _checkpointed(self.function)
        self.operator_state = None  # a DefaultOperatorStateStore once initialized, if the operator keeps any
        self.has_operator_state = self.checkpointed is not None or op.kind in BROADCAST_KINDS
        self.ctx = _KeyedContext(self.backend) if self.backend is not None else None
        self.runtime_context = _RuntimeContext(op, subtask, plan.parallelism, plan.max_parallelism, attempt,
                                               self.backend)
        self.version = None  # last epoch whose state this instance holds, confirmed
        self.pending = None  # (epoch, token) written but not yet known to be committed
        self.opened = False

    def open(self):
        if not self.opened:
            if hasattr(self.function, "open"):
                self.function.open(self.runtime_context)
            self.opened = True

    def settle(self, committed_epoch: int, committed_tokens: dict, state_id: str) -> None:
        """Confirm last epoch's changes if the driver committed this attempt, else undo them."""
        if self.pending is None:
            return
        epoch, token = self.pending
        if epoch == committed_epoch and committed_tokens.get(state_id) == token:
            if self.backend is not None:
                self.backend.confirm()
            self.version = epoch
        elif self.backend is not None:
            self.backend.rollback()
        self.pending = None


def _restore(backend, handles: list[dict], key_groups: range, storage, after_epoch: int | None = None) -> int:
    stats = statefile.ReadStats()
    for h in sorted(handles, key=lambda h: (h["epoch"], h["kind"] != "full")):
        if h["kind"] == "operator" or (after_epoch is not None and h["epoch"] <= after_epoch):
            continue
        lo, hi = h["kg"]
        if hi <= key_groups.start or lo >= key_groups.stop:
            continue
        for kg, payload in statefile.read_key_groups(storage, h["path"], key_groups, stats):
            backend.restore_payload(kg, payload)
    return stats.bytes_read


class StageTask:
    def __init__(self, plan: StagePlan, ectx: dict, subtask: int, attempt: int):
        self.plan = plan
        self.ectx = ectx
        self.subtask = subtask
        self.attempt = attempt
        self.epoch = ectx["epoch"]
        self.token = uuid.uuid4().hex[:16]
        self.storage = ectx["storage"]
        self.records_in = 0
        self.restored_bytes = 0
        self.out_exit: list[int] = []
        self.out_sub: list[int] = []
        self.out_ctl: list = []
        self.out_payload: list = []
        self.upstream: list = []
        self.instances: list[OperatorInstance] = []
        self.sink_writers: dict[int, object] = {}
        self.exits = {}
        self.driver_buffers: dict[int, list] = {}
        self.broadcast_entry = None  # the broadcast-side input of a broadcast-process stage

    # -- output rows ---------------------------------------------------------------------------
    def _row(self, exit_id, sub, ctl, payload):
        self.out_exit.append(exit_id)
        self.out_sub.append(sub)
        self.out_ctl.append(ctl)
        self.out_payload.append(payload)

    def _take_batch(self):
        if not self.out_exit:
            return None
        batch = pa.RecordBatch.from_arrays(
            [pa.array(self.out_exit, pa.int32()), pa.array(self.out_sub, pa.int32()),
             pa.array(self.out_ctl, pa.binary()), pa.array(self.out_payload, pa.binary())], schema=OUTPUT_SCHEMA)
        self.out_exit, self.out_sub, self.out_ctl, self.out_payload = [], [], [], []
        return batch

    # -- building the chain -------------------------------------------------------------------------
    def _build(self):
        plan = self.plan
        emitters = {}

        def emitter_for(op):
            if op.index in emitters:
                return emitters[op.index]
            targets = [self._target(kind, ref, emitter_for) for kind, ref in op.outputs]
            if not targets:
                fn = _discard
            elif len(targets) == 1:
                fn = targets[0]
            else:
                def fn(value, _targets=tuple(targets)):
                    for t in _targets:
                        t(value)
            emitters[op.index] = fn
            return fn

        self._emitter_for = emitter_for
        self.entry = [self._processor(plan.ops[i], emitter_for) for i in plan.entry]

    def _target(self, kind, ref, emitter_for):
        if kind == "exit":
            return self._exit(ref)
        return self._processor(self.plan.ops[ref], emitter_for)

    def _exit(self, exit_id):
        if exit_id in self.exits:
            return self.exits[exit_id].add
        spec = next(e for e in self.plan.exits if e.exit_id == exit_id)
        if spec.kind == "keyed":
            ex = _KeyedExit(spec, self.plan.max_parallelism)
        elif spec.kind == "rebalance":
            ex = _RebalanceExit(spec, self.subtask)
        elif spec.kind == "broadcast":
            ex = _BroadcastExit(spec)
        else:
            raise ValueError(f"exit {exit_id} of stage {self.plan.stage_id} has no records to route")
        self.exits[exit_id] = ex
        return ex.add

    def _processor(self, op, emitter_for):
        """A callable taking one record (entry of a keyed stage: record, key, key group)."""
        emit = emitter_for(op)
        kind = op.kind
        subtask = self.subtask
        if kind == "source":
            return emit
        if kind == "map":
            fn = self._plain_function(op)
            f = getattr(fn, "map", fn)

            def process(value):
                try:
                    out = f(value)
                except Exception as exc:
                    raise _fail(op, subtask, value, exc) from exc
                emit(out)
            return process
        if kind == "flat_map":
            fn = self._plain_function(op)
            f = getattr(fn, "flat_map", fn)

            def process(value):
                try:
                    outs = f(value)
                    if outs is not None:
                        for out in outs:
                            emit(out)
                except Exception as exc:
                    if isinstance(exc, UserFunctionError):
                        raise
                    raise _fail(op, subtask, value, exc) from exc
            return process
        if kind == "filter":
            fn = self._plain_function(op)
            f = getattr(fn, "filter", fn)

            def process(value):
                try:
                    keep = f(value)
                except Exception as exc:
                    raise _fail(op, subtask, value, exc) from exc
                if keep:
                    emit(value)
            return process
        if kind == "process":
            fn = self._plain_function(op)
            pe = fn.process_element
            ctx = _CONTEXT

            def process(value):
                try:
                    outs = pe(value, ctx)
                    if outs is not None:
                        for out in outs:
                            emit(out)
                except Exception as exc:
                    if isinstance(exc, UserFunctionError):
                        raise
                    raise _fail(op, subtask, value, exc) from exc
            return process
        if kind in BROADCAST_KINDS:
            return self._broadcast_processor(op, emit)
        if kind == "keyed_process":
            inst = self._instance(op, keyed=True)
            backend = inst.backend
            pe = inst.function.process_element
            ctx = inst.ctx

            def process(value, key, kg):
                backend.current_key = key
                backend.current_key_group = kg
                try:
                    outs = pe(value, ctx)
                    if outs is not None:
                        for out in outs:
                            emit(out)
                except Exception as exc:
                    if isinstance(exc, UserFunctionError):
                        raise
                    raise _fail(op, subtask, value, exc) from exc
            return process
        if kind == "sink":
            writer = op.sink.create_writer(self.subtask, self.epoch, self.token)
            self.sink_writers[op.index] = writer
            return writer.write
        if kind == "driver_sink":
            buf = self.driver_buffers.setdefault(op.driver_sink_index, [])
            append = buf.append
            return lambda value: append(_frozen(value))
        raise ValueError(f"unknown operator kind {kind}")

    def _broadcast_processor(self, op, emit):
        """A (keyed) broadcast-process operator: returns the data-side processor and sets the
        broadcast-side one, which the stage's input feeds first (see ``_consume``)."""
        keyed = op.kind == "keyed_broadcast_process"
        inst = self._instance(op, keyed=keyed)
        fn = inst.function
        backend = inst.backend
        states = _BroadcastStates(op, inst.operator_state)
        if keyed:
            read_ctx, write_ctx = _KeyedBroadcastReadOnlyContext(states, backend), _KeyedBroadcastContext(states, backend)
        else:
            read_ctx, write_ctx = _BroadcastReadOnlyContext(states), _BroadcastContext(states)
        pe = fn.process_element
        pbe = fn.process_broadcast_element
        subtask = self.subtask

        def run(method, value, ctx):
            try:
                outs = method(value, ctx)
                if outs is not None:
                    for out in outs:
                        emit(out)
            except Exception as exc:
                if isinstance(exc, UserFunctionError):
                    raise
                raise _fail(op, subtask, value, exc) from exc

        def process_broadcast(value):
            if backend is not None:
                backend.current_key = None  # no current key on the broadcast side (as in Flink)
            run(pbe, value, write_ctx)

        self.broadcast_entry = process_broadcast
        if keyed:
            def process(value, key, kg):
                backend.current_key = key
                backend.current_key_group = kg
                run(pe, value, read_ctx)
        else:
            def process(value):
                run(pe, value, read_ctx)
        return process

    def _open_plain(self, op):
        fn = op.function
        if hasattr(fn, "open"):
            fn.open(_RuntimeContext(op, self.subtask, self.plan.parallelism, self.plan.max_parallelism,
                                    self.attempt))
        return fn

    def _plain_function(self, op):
        """A non-keyed operator's function, opened: the plan's own object, or — for a
        CheckpointedFunction — the function of an instance that keeps operator state across epochs."""
        if _checkpointed(op.function) is not None:
            return self._instance(op, keyed=False).function
        return self._open_plain(op)

    def _instance(self, op, keyed: bool) -> OperatorInstance:
        ectx = self.ectx
        _evict_idle_instances(ectx["run_id"])
        plan = self.plan
        if keyed:
            key_groups = compute_key_group_range_for_operator_index(plan.max_parallelism, plan.parallelism,
                                                                    self.subtask)
            cache_key = (ectx["run_id"], op.uid, self.subtask, key_groups.start, key_groups.stop)
        else:
            key_groups = None
            cache_key = (ectx["run_id"], op.uid, self.subtask, "p", plan.parallelism)
        state_id = f"{op.uid}/{self.subtask}"
        handles = [h for h in ectx["manifest"].get(op.uid, []) if h["kind"] != "operator"]
        committed = ectx["committed_epoch"]
        inst = _INSTANCES.pop(cache_key, None)
        if inst is not None:
            inst.settle(committed, ectx["committed_tokens"], state_id)
            if inst.version != committed:
                newer = [h for h in handles if inst.version is not None and h["epoch"] > inst.version
                         and h["kg"][0] < key_groups.stop and h["kg"][1] > key_groups.start] if keyed else []
                if (keyed and not inst.has_operator_state and inst.version is not None
                        and inst.version < committed and all(h["kind"] == "delta" for h in newer)):
                    self.restored_bytes += _restore(inst.backend, newer, key_groups, self.storage)
                    inst.version = committed
                else:
                    inst = None
        if inst is None:
            inst = OperatorInstance(op, plan, self.subtask, self.attempt, ectx["backend"], key_groups, cache_key)
            if keyed:
                self.restored_bytes += _restore(inst.backend, handles, key_groups, self.storage)
            inst.version = committed
            if inst.has_operator_state:
                self._initialize(inst)
        inst.open()
        self.instances.append(inst)
        return inst

    def _initialize(self, inst: OperatorInstance) -> None:
        """Operator state of the committed checkpoint, redistributed to this subtask, then
        ``initialize_state`` (before ``open``)."""
        ectx = self.ectx
        handles = [h for h in ectx["manifest"].get(inst.op.uid, []) if h["kind"] == "operator"]
        stats = statefile.ReadStats()
        restored = operator_state.restore_subtask(self.storage, handles, self.subtask, self.plan.parallelism, stats)
        self.restored_bytes += stats.bytes_read
        inst.operator_state = operator_state.DefaultOperatorStateStore(inst.op.name, restored)
        if inst.checkpointed is not None:
            committed = ectx["committed_epoch"]
            context = _InitializationContext(committed if committed >= 0 else None, inst.operator_state,
                                             inst.runtime_context if inst.backend is not None else None)
            try:
                inst.checkpointed.initialize_state(context)
            except Exception as exc:
                raise _fail_in(inst.op, self.subtask, "initialize_state", exc) from exc

    # -- running ---------------------------------------------------------------------------------
    def run(self, batches):
        try:
            self._build()
            yield from self._consume(batches)
            yield from self._finish()
        except BaseException:
            for inst in self.instances:
                if inst.backend is not None:
                    inst.backend.rollback()
            raise

    def _consume(self, batches):
        plan = self.plan
        fmt = plan.input_format
        entry = self.entry
        single = entry[0] if len(entry) == 1 else None
        row_cls = _named_row_class(tuple(plan.typed_fields)) if plan.typed_fields else None
        for batch in batches:
            if fmt == "chunks":
                for payload in batch.column(0).to_pylist():
                    records = serde.loads(payload)
                    self.records_in += len(records)
                    for r in records:
                        for e in entry:
                            e(r)
            elif fmt == "typed":
                names = tuple(batch.schema.names)
                cls = _named_row_class(names)
                cols = [c.to_pylist() for c in batch.columns]
                self.records_in += batch.num_rows
                new = tuple.__new__
                for values in zip(*cols):
                    r = new(cls, values)
                    for e in entry:
                        e(r)
            elif fmt == "typed_keyed":
                names = batch.schema.names
                kg_col = batch.column(names.index("_ks_kg")).to_pylist()
                cols = [batch.column(names.index(n)).to_pylist() for n in plan.typed_fields]
                select = plan.key_selector
                new = tuple.__new__
                self.records_in += batch.num_rows - kg_col.count(-1)
                for kg, values in zip(kg_col, zip(*cols)):
                    if kg < 0:
                        continue  # the heartbeat row that tells this task its subtask
                    r = new(row_cls, values)
                    single(r, select(r), kg)
            else:  # exchange
                ctl = batch.column(2).to_pylist()
                payloads = batch.column(3).to_pylist()
                for c, payload in zip(ctl, payloads):
                    if c is not None:
                        self.upstream.append(c)
                        continue
                    chunk = serde.loads(payload)
                    if len(chunk) == 2:  # (BROADCAST_CHUNK, records): the broadcast side, sorted first
                        records = chunk[1]
                        self.records_in += len(records)
                        process_broadcast = self.broadcast_entry
                        for r in records:
                            process_broadcast(r)
                        continue
                    kgs, keys, records = chunk
                    self.records_in += len(records)
                    if plan.keyed:
                        for kg, key, r in zip(kgs, keys, records):
                            single(r, key, kg)
                    else:
                        for r in records:
                            for e in entry:
                                e(r)
            if self._buffered() >= FLUSH_RECORDS:
                self._flush_exits()
                out = self._take_batch()
                if out is not None:
                    yield out

    def _buffered(self) -> int:
        return sum(e.buffered for e in self.exits.values())

    def _flush_exits(self):
        for exit_id, ex in self.exits.items():
            ex.flush(exit_id, self._row)

    def _finish(self):
        handles, tokens = self._snapshot_state()
        sinks = []
        for index, writer in self.sink_writers.items():
            h = writer.finish()
            if h is not None:
                h["sink"] = self.plan.ops[index].uid
                sinks.append(h)
        for sink_index, records in self.driver_buffers.items():
            for i in range(0, len(records), FLUSH_RECORDS):
                self._row(DRIVER_EXIT, self.subtask, None, serde.dumps((sink_index, records[i:i + FLUSH_RECORDS])))
        self._flush_exits()
        control = serde.dumps({
            "stage": self.plan.stage_id, "subtask": self.subtask, "token": self.token, "attempt": self.attempt,
            "handles": handles, "tokens": tokens, "sinks": sinks, "records": self.records_in,
            "restored_bytes": self.restored_bytes, "upstream": self.upstream,
            "states": {inst.op.uid: inst.backend.describe_states() for inst in self.instances
                       if inst.backend is not None},
        })
        downstream = [e for e in self.plan.exits if e.kind != "driver"]
        if downstream:
            for e in downstream:
                for sub in range(e.consumer_parallelism):
                    self._row(e.exit_id, sub, control, None)
        else:
            self._row(CONTROL_EXIT, self.subtask, control, None)
        out = self._take_batch()
        if out is not None:
            yield out
        # this attempt's state changes stay pending until the driver says which attempt it committed
        for inst in self.instances:
            inst.pending = (self.epoch, self.token)
            inst.last_used = time.monotonic()
            _INSTANCES[inst.cache_key] = inst

    def _snapshot_state(self):
        handles, tokens = [], {}
        context = _SnapshotContext(self.epoch)
        for inst in self.instances:
            if inst.checkpointed is not None:
                try:
                    inst.checkpointed.snapshot_state(context)
                except Exception as exc:
                    raise _fail_in(inst.op, self.subtask, "snapshot_state", exc) from exc
        for inst in self.instances:
            uid = inst.op.uid
            tokens[f"{uid}/{self.subtask}"] = self.token
            if inst.operator_state is not None:
                rel = f"state/{uid}/e{self.epoch:010d}-s{self.subtask:04d}-{self.token}.operator"
                h = operator_state.write(self.storage, rel, inst.operator_state.snapshot(), inst.op.name)
                # kg: an empty key-group range — the file holds no key group, keyed restores skip it
                h.update(uid=uid, kind="operator", epoch=self.epoch, kg=[0, 0], subtask=self.subtask,
                         parallelism=self.plan.parallelism)
                handles.append(h)
            if inst.backend is None:
                continue
            full = self.ectx["full_all"] or self._full_snapshot_due(uid, inst.key_groups)
            sections = inst.backend.full_sections() if full else inst.backend.delta_sections()
            if not sections and not full:
                continue
            kind = "full" if full else "delta"
            rel = f"state/{uid}/e{self.epoch:010d}-s{self.subtask:04d}-{self.token}.{kind}"
            h = statefile.write(self.storage, rel, sections)
            h.update(uid=uid, kind=kind, epoch=self.epoch, kg=[inst.key_groups.start, inst.key_groups.stop],
                     subtask=self.subtask)
            handles.append(h)
        return handles, tokens

    def _full_snapshot_due(self, uid: str, key_groups: range) -> bool:
        """Compact when the deltas since the last full snapshot outweigh it (or grow too many): the
        rewrite then costs about what the deltas cost, so an epoch's cost follows what it touched,
        not the total state, and a restore reads at most ~2× the state in a bounded number of files."""
        chain = sorted((h for h in self.ectx["manifest"].get(uid, [])
                        if h["kind"] != "operator" and h["kg"] == [key_groups.start, key_groups.stop]),
                       key=lambda h: h["epoch"])
        fulls = [h for h in chain if h["kind"] == "full"]
        base = fulls[-1] if fulls else (chain[0] if chain else None)  # a first delta serves as the base
        if base is None:
            return False
        deltas = [h for h in chain if h["epoch"] > base["epoch"]]
        if not deltas:
            return False
        if len(deltas) >= self.ectx["max_chain"]:
            return True
        return sum(h["bytes"] for h in deltas) >= base["bytes"]


def _discard(value):
    pass


_IMMUTABLE = frozenset((int, float, str, bytes, bool, type(None), complex))


def _frozen(record):
    """What a record is at the moment it is emitted: mutable records are copied, as PyFlink
    serializes on emit, so a function that mutates an object after yielding it changes nothing."""
    t = type(record)
    if t in _IMMUTABLE:
        return record
    if isinstance(record, tuple) and all(type(v) in _IMMUTABLE for v in record):
        return record
    return serde.loads(serde.dumps(record))


class _KeyedExit:
    """Routes by key group: key group = hash(key) mod max parallelism, subtask = kg × p ÷ max p."""

    def __init__(self, spec, max_parallelism):
        self.selector = spec.key_selector
        self.max_parallelism = max_parallelism
        self.parallelism = spec.consumer_parallelism
        self.buffers = [([], [], []) for _ in range(self.parallelism)]
        self.buffered = 0

    def add(self, record):
        record = _frozen(record)
        key = self.selector(record)
        h = _hash_atom(key, SEED)
        if h >= 1 << 63:
            h -= 1 << 64
        kg = h % self.max_parallelism
        buf = self.buffers[kg * self.parallelism // self.max_parallelism]
        buf[0].append(kg)
        buf[1].append(key)
        buf[2].append(record)
        self.buffered += 1

    def flush(self, exit_id, row):
        for sub, buf in enumerate(self.buffers):
            if buf[2]:
                row(exit_id, sub, None, serde.dumps(buf))
        self.buffers = [([], [], []) for _ in range(self.parallelism)]
        self.buffered = 0


class _BroadcastExit:
    """Every record to every consumer subtask: one pickled chunk, sent once per subtask."""

    def __init__(self, spec):
        self.parallelism = spec.consumer_parallelism
        self.records = []
        self.buffered = 0

    def add(self, record):
        self.records.append(_frozen(record))
        self.buffered += 1

    def flush(self, exit_id, row):
        if not self.records:
            return
        payload = serde.dumps((BROADCAST_CHUNK, self.records))
        for sub in range(self.parallelism):
            row(exit_id, sub, None, payload)
        self.records = []
        self.buffered = 0


class _RebalanceExit:
    def __init__(self, spec, subtask):
        self.parallelism = spec.consumer_parallelism
        self.next = subtask % self.parallelism
        self.records = []
        self.buffered = 0

    def add(self, record):
        self.records.append(_frozen(record))
        self.buffered += 1

    def flush(self, exit_id, row):
        if not self.records:
            return
        n = self.parallelism
        for i in range(n):
            part = self.records[i::n]
            if part:
                row(exit_id, (self.next + i) % n, None, serde.dumps((None, None, part)))
        self.next = (self.next + len(self.records)) % n
        self.records = []
        self.buffered = 0
