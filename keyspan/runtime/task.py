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
from keyspan.metrics import metricbase  # observability
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
from keyspan.datastream import timerservice
from keyspan.datastream.functions import TimeDomain
from keyspan.datastream.output_tag import OutputTag
from keyspan.runtime import event_time
from keyspan.runtime.event_time import LONG_MIN
from keyspan.runtime.planner import BROADCAST_KINDS, CONTROL_EXIT, DRIVER_EXIT, StagePlan, user_function
from keyspan.runtime.timers import EVENT_TIME, PROCESSING_TIME, TimerService, wall_clock_ms
from keyspan.state import operator as operator_state
from keyspan.io import serde
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

BROADCAST_CHUNK = "broadcast"  # in place of the key groups: an exchange chunk of a broadcast input

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
        return metricbase.operator_group(self._op.uid, self._subtask)  # observability

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


class _Clock(timerservice.TimerService):
    """``timer_service()`` of an operator without keyed state: the clocks only, as in Flink."""

    def __init__(self, watermark: int = LONG_MIN):
        self.watermark = watermark

    def current_processing_time(self) -> int:
        return wall_clock_ms()

    def current_watermark(self) -> int:
        return self.watermark

    def _no_timers(self, timestamp):
        raise RuntimeError("timers are only available on a keyed stream: use key_by(...).process(...) with a "
                           "KeyedProcessFunction")

    register_event_time_timer = register_processing_time_timer = _no_timers
    delete_event_time_timer = delete_processing_time_timer = _no_timers


class _KeyedContext(KeyedProcessFunction.Context):
    """``process_element``'s context: the record's timestamp is the task's current one."""

    __slots__ = ("_backend", "_cell", "_timers")

    def __init__(self, backend, cell, timers):
        self._backend = backend
        self._cell = cell
        self._timers = timers

    def get_current_key(self):
        return self._backend.current_key

    def timestamp(self):
        return self._cell[0]

    def timer_service(self):
        return self._timers


class _Firing:
    """What an ``on_timer`` context adds: the firing timer's timestamp and domain (set by ``_fire_timers``)."""

    domain = TimeDomain.EVENT_TIME
    firing = None

    def timestamp(self):
        return self.firing

    def time_domain(self):
        return self.domain


class _OnTimerContext(_Firing, _KeyedContext, KeyedProcessFunction.OnTimerContext):
    pass


class _Context(ProcessFunction.Context):
    __slots__ = ("_cell", "_clock")

    def __init__(self, cell, clock):
        self._cell = cell
        self._clock = clock

    def timestamp(self):
        return self._cell[0]

    def timer_service(self):
        return self._clock


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

    def __init__(self, states: _BroadcastStates, cell, clock, backend=None):
        self._states = states
        self._cell = cell
        self._clock = clock
        self._backend = backend

    def get_broadcast_state(self, state_descriptor):
        return self._states.get(state_descriptor, self._writable)

    def timestamp(self):
        return self._cell[0]

    def current_processing_time(self) -> int:
        return wall_clock_ms()

    def current_watermark(self) -> int:
        return self._clock.current_watermark()


class _BroadcastReadOnlyContext(_BroadcastContextBase, BroadcastProcessFunction.ReadOnlyContext):
    pass


class _BroadcastContext(_BroadcastContextBase, BroadcastProcessFunction.Context):
    _writable = True


class _KeyedBroadcastReadOnlyContext(_BroadcastContextBase, KeyedBroadcastProcessFunction.ReadOnlyContext):
    def get_current_key(self):
        return self._backend.current_key

    def timer_service(self):
        return self._clock  # the instance's TimerService


class _KeyedBroadcastOnTimerContext(_Firing, _KeyedBroadcastReadOnlyContext, KeyedBroadcastProcessFunction.OnTimerContext):
    pass


class _KeyedBroadcastContext(_BroadcastContextBase, KeyedBroadcastProcessFunction.Context):
    _writable = True

    def apply_to_keyed_state(self, state_descriptor, function) -> None:
        backend = self._backend
        state = backend.get_state(state_descriptor)
        entries = list(backend.keys_of(state_descriptor.name))
        saved = backend.current_key, backend.current_key_group
        try:
            for kg, key in entries:
                backend.current_key = key
                backend.current_key_group = kg
                function(key, state)
        finally:
            backend.current_key, backend.current_key_group = saved


# --- operators -------------------------------------------------------------------------------------

def _overrides_on_timer(function) -> bool:
    on_timer = getattr(type(function), "on_timer", None)
    return on_timer is not None and on_timer not in (KeyedProcessFunction.on_timer,
                                                     KeyedBroadcastProcessFunction.on_timer)


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
                 cache_key: tuple, job_parameters: dict | None = None):
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
        self.timers = TimerService(self.backend) if self.backend is not None else None
        self.fires_timers = _overrides_on_timer(self.function)
        self.runtime_context = _RuntimeContext(op, subtask, plan.parallelism, plan.max_parallelism, attempt,
                                               self.backend, job_parameters)
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
        else:
            self.rollback()
        self.pending = None

    def rollback(self) -> None:
        if self.backend is not None:
            self.backend.rollback()
            self.timers.invalidate()


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
            del payload  # not held while the next key group is read
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
        self.records_out = 0  # observability: records sent downstream or to driver sinks
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
        self.ts_cell = [None]  # the event timestamp of the record being processed (None: none)
        self.split_max: dict[str, dict[str, list]] = {}  # origin uid → {split: [max timestamp]} of this epoch
        self.keyed_emit = None  # (instance, emit) of the stage's keyed operator, whose timers fire at the end

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
            main = [self._target(kind, ref, emitter_for) for kind, ref, tag in op.outputs if tag is None]
            side: dict[str, list] = {}
            for kind, ref, tag in op.outputs:
                if tag is not None:
                    side.setdefault(tag, []).append(self._target(kind, ref, emitter_for))
            fn = _fan_out(main)
            if op.kind in SIDE_OUTPUT_KINDS:
                fn = _with_side_outputs(fn, {tag: _fan_out(targets) for tag, targets in side.items()})
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
            ex = _KeyedExit(spec, self.plan.max_parallelism, self.ts_cell)
        elif spec.kind == "rebalance":
            ex = _RebalanceExit(spec, self.subtask, self.ts_cell)
        elif spec.kind == "broadcast":
            ex = _BroadcastExit(spec, self.ts_cell)
        else:
            raise ValueError(f"exit {exit_id} of stage {self.plan.stage_id} has no records to route")
        self.exits[exit_id] = ex
        return ex.add

    def _watermark(self, op) -> int:
        """The operator's watermark during this epoch: the one reached after the previous epoch."""
        return event_time.watermark_of(self.ectx["time"]["state"], op.origins)

    def _processor(self, op, emitter_for):
        """A callable taking one record (entry of a keyed stage: record, key, key group)."""
        emit = emitter_for(op)
        kind = op.kind
        subtask = self.subtask
        if op.watermark_strategy is not None:
            return self._timestamp_assigner(op, emit)
        if kind in ("source", "timestamps"):
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
            ctx = _Context(self.ts_cell, _Clock(self._watermark(op)))

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
            ctx = _KeyedContext(backend, self.ts_cell, inst.timers)
            self._start_timers(inst, op, emit, _OnTimerContext(backend, self.ts_cell, inst.timers))

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

    def _timestamp_assigner(self, op, emit):
        """A watermark origin that assigns timestamps: sets each record's timestamp and tracks the
        largest one of its split (the whole source in a source stage, else this subtask)."""
        strategy = op.watermark_strategy
        assigner = strategy.timestamp_assigner
        extract = assigner.extract_timestamp if assigner is not None else None
        split = str(self.subtask if op.split is None else op.split)
        seen = self.split_max.setdefault(op.uid, {}).setdefault(split, [LONG_MIN])
        cell = self.ts_cell
        subtask = self.subtask

        def process(value):
            if extract is not None:
                try:
                    ts = extract(value, cell[0])
                except Exception as exc:
                    raise _fail(op, subtask, value, exc) from exc
                if ts is not None:
                    if isinstance(ts, bool) or not isinstance(ts, int):
                        raise _fail(op, subtask, value, TypeError(
                            f"extract_timestamp must return epoch milliseconds as int, got {ts!r}"))
                cell[0] = ts
            ts = cell[0]
            if ts is not None and ts > seen[0]:
                seen[0] = ts
            emit(value)
        return process

    def _start_timers(self, inst, op, emit, timer_ctx) -> None:
        """The keyed operator's clocks for this epoch; its due timers fire at the end (``_fire_timers``)."""
        watermark = self._watermark(op)
        inst.timers.watermark = watermark
        inst.backend.current_watermark = watermark
        self.keyed_emit = (inst, op, emit, timer_ctx)

    def _broadcast_processor(self, op, emit):
        """A (keyed) broadcast-process operator: returns the data-side processor and sets the
        broadcast-side one, which the stage's input feeds first (see ``_consume``)."""
        keyed = op.kind == "keyed_broadcast_process"
        inst = self._instance(op, keyed=keyed)
        fn = inst.function
        backend = inst.backend
        states = _BroadcastStates(op, inst.operator_state)
        cell = self.ts_cell
        if keyed:
            timers = inst.timers
            read_ctx = _KeyedBroadcastReadOnlyContext(states, cell, timers, backend)
            write_ctx = _KeyedBroadcastContext(states, cell, timers, backend)
            self._start_timers(inst, op, emit, _KeyedBroadcastOnTimerContext(states, cell, timers, backend))
        else:
            clock = _Clock(self._watermark(op))
            read_ctx, write_ctx = _BroadcastReadOnlyContext(states, cell, clock), _BroadcastContext(states, cell, clock)
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
                                    self.attempt, job_parameters=self.ectx.get("job_parameters")))
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
                    inst.timers.invalidate()
                    inst.version = committed
                else:
                    inst = None
        if inst is None:
            inst = OperatorInstance(op, plan, self.subtask, self.attempt, ectx["backend"], key_groups, cache_key,
                                    ectx.get("job_parameters"))
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
            metricbase.begin_epoch([op.uid for op in self.plan.ops], self.subtask)  # observability
            self._build()
            yield from self._consume(batches)
            yield from self._finish()
        except BaseException:
            for inst in self.instances:
                inst.rollback()
            raise

    def _consume(self, batches):
        plan = self.plan
        fmt = plan.input_format
        entry = self.entry
        single = entry[0] if len(entry) == 1 else None
        row_cls = _named_row_class(tuple(plan.typed_fields)) if plan.typed_fields else None
        cell = self.ts_cell
        if len(entry) > 1 and any(op.watermark_strategy is not None for op in plan.ops):
            # a source feeding several branches: a timestamp assigned on one branch must not leak into another
            def reset_timestamp(e):
                def run(r):
                    cell[0] = None
                    e(r)
                return run
            entry = [reset_timestamp(e) for e in entry]
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
                    kgs, keys, records, stamps = serde.loads(payload)
                    self.records_in += len(records)
                    cell[0] = None
                    if kgs == BROADCAST_CHUNK:  # the broadcast side, sorted first
                        process_broadcast = self.broadcast_entry
                        if stamps is None:
                            for r in records:
                                process_broadcast(r)
                        else:
                            for r, cell[0] in zip(records, stamps):
                                process_broadcast(r)
                    elif plan.keyed:
                        if stamps is None:
                            for kg, key, r in zip(kgs, keys, records):
                                single(r, key, kg)
                        else:
                            for kg, key, r, cell[0] in zip(kgs, keys, records, stamps):
                                single(r, key, kg)
                    else:
                        for i, r in enumerate(records):
                            if stamps is not None:
                                cell[0] = stamps[i]
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
        self.records_out += self._buffered()  # observability
        for exit_id, ex in self.exits.items():
            ex.flush(exit_id, self._row)

    def _fire_timers(self):
        """Fire the keyed operator's timers that the new watermark (the one after this epoch, computed
        from every upstream origin's report) or the wall clock has passed, in timestamp order."""
        inst, op, emit, ctx = self.keyed_emit
        timers = inst.timers
        if not (inst.fires_timers or timers.active):
            return
        watermark = event_time.watermark_of(self._time_after_epoch(), op.origins)
        timers.watermark = watermark
        inst.backend.current_watermark = watermark
        on_timer = inst.function.on_timer
        cell = self.ts_cell
        while True:
            domain = TimeDomain.EVENT_TIME
            ts = timers.pop_due(EVENT_TIME, watermark)
            if ts is None:
                domain = TimeDomain.PROCESSING_TIME
                ts = timers.pop_due(PROCESSING_TIME, wall_clock_ms())
                if ts is None:
                    return
            ctx.domain = domain
            ctx.firing = ts
            cell[0] = ts if domain is TimeDomain.EVENT_TIME else None
            try:
                outs = on_timer(ts, ctx)
                if outs is not None:
                    for out in outs:
                        emit(out)
            except Exception as exc:
                if isinstance(exc, UserFunctionError):
                    raise
                raise _fail_in(op, self.subtask, f"on_timer({ts}) for key {inst.backend.current_key!r}", exc) from exc
            if self._buffered() >= FLUSH_RECORDS:
                self._flush_exits()

    def _time_after_epoch(self) -> dict:
        """The origins' time state after this epoch: what the driver will commit, computed from the
        reports of every upstream task (each consumer task receives all of them)."""
        reports = {}
        seen = set()
        stack = list(self.upstream)
        while stack:
            raw = stack.pop()
            if raw in seen:
                continue
            seen.add(raw)
            report = serde.loads(raw)
            event_time.merge_reports(reports, report.get("splits", {}))
            stack.extend(report["upstream"])
        event_time.merge_reports(reports, self._split_report())
        time_ctx = self.ectx["time"]
        return event_time.advance(time_ctx["origins"], time_ctx["state"], reports, time_ctx["now"],
                                  time_ctx["finished"])

    def _split_report(self) -> dict:
        return {uid: {split: m[0] for split, m in splits.items()} for uid, splits in self.split_max.items()}

    def _finish(self):
        if self.keyed_emit is not None:
            self._fire_timers()
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
            "metrics": metricbase.take_epoch_snapshot([op.uid for op in self.plan.ops], self.subtask),  # observability
            "records_out": self.records_out + sum(map(len, self.driver_buffers.values())),  # observability
            "states": {inst.op.uid: inst.backend.describe_states() for inst in self.instances
                       if inst.backend is not None},
            "splits": self._split_report(),
            "next_timer": min((t for t in (inst.timers.next_processing_time() for inst in self.instances
                                           if inst.timers is not None) if t is not None), default=None),
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


SIDE_OUTPUT_KINDS = ("process", "keyed_process", "broadcast_process", "keyed_broadcast_process")


def _discard(value):
    pass


def _fan_out(targets: list):
    if not targets:
        return _discard
    if len(targets) == 1:
        return targets[0]

    def emit(value, _targets=tuple(targets)):
        for t in _targets:
            t(value)
    return emit


def _with_side_outputs(main, side: dict):
    """A process function's ``yield tag, value`` goes to side output ``tag`` (dropped if nobody reads it)."""
    def emit(value):
        if type(value) is tuple and len(value) == 2 and isinstance(value[0], OutputTag):
            side.get(value[0].tag_id, _discard)(value[1])
        else:
            main(value)
    return emit


def _stamps(stamps: list):
    """A chunk's timestamps, or None when its records have none (the common case without event time)."""
    for t in stamps:
        if t is not None:
            return stamps
    return None


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
    """Routes by key group: key group = hash(key) mod max parallelism, subtask = kg × p ÷ max p.
    A chunk is (key groups, keys, records, timestamps or None)."""

    def __init__(self, spec, max_parallelism, cell):
        self.selector = spec.key_selector
        self.max_parallelism = max_parallelism
        self.parallelism = spec.consumer_parallelism
        self.cell = cell
        self.buffers = [([], [], [], []) for _ in range(self.parallelism)]
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
        buf[3].append(self.cell[0])
        self.buffered += 1

    def flush(self, exit_id, row):
        for sub, (kgs, keys, records, stamps) in enumerate(self.buffers):
            if records:
                row(exit_id, sub, None, serde.dumps((kgs, keys, records, _stamps(stamps))))
        self.buffers = [([], [], [], []) for _ in range(self.parallelism)]
        self.buffered = 0


class _BroadcastExit:
    """Every record to every consumer subtask: one pickled chunk, sent once per subtask."""

    def __init__(self, spec, cell):
        self.parallelism = spec.consumer_parallelism
        self.cell = cell
        self.records = []
        self.stamps = []
        self.buffered = 0

    def add(self, record):
        self.records.append(_frozen(record))
        self.stamps.append(self.cell[0])
        self.buffered += 1

    def flush(self, exit_id, row):
        if not self.records:
            return
        payload = serde.dumps((BROADCAST_CHUNK, None, self.records, _stamps(self.stamps)))
        for sub in range(self.parallelism):
            row(exit_id, sub, None, payload)
        self.records = []
        self.stamps = []
        self.buffered = 0


class _RebalanceExit:
    def __init__(self, spec, subtask, cell):
        self.parallelism = spec.consumer_parallelism
        self.next = subtask % self.parallelism
        self.cell = cell
        self.records = []
        self.stamps = []
        self.buffered = 0

    def add(self, record):
        self.records.append(_frozen(record))
        self.stamps.append(self.cell[0])
        self.buffered += 1

    def flush(self, exit_id, row):
        if not self.records:
            return
        n = self.parallelism
        stamps = _stamps(self.stamps)
        for i in range(n):
            part = self.records[i::n]
            if part:
                row(exit_id, (self.next + i) % n, None,
                    serde.dumps((None, None, part, stamps[i::n] if stamps is not None else None)))
        self.next = (self.next + len(self.records)) % n
        self.records = []
        self.stamps = []
        self.buffered = 0
