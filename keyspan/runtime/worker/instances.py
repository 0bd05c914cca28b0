"""Operator instances cached in a Python worker across epochs, and the exactly-once rules for them.

An instance keeps its function and state between epochs. At the next epoch the driver says which
attempt it committed: the instance confirms its pending changes if they were that attempt's, and
rolls them back otherwise (invariant 1). A cache that is behind catches up from the deltas other
workers wrote — ahead of time while the worker waits for its next task (``worker/handoff``), or
when the task starts; an unknown or unusable one is rebuilt from the committed checkpoint. Workers
are not sticky (DESIGN-NOTES), so nothing here assumes the same worker sees the next epoch.
"""

from __future__ import annotations

import time

from keyspan.checkpoint import statefile
from keyspan.checkpoint.handles import OPERATOR, is_keyed
from keyspan.checkpoint.manifest import catch_up_order
from keyspan.datastream.functions import (
    CheckpointedFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
)
from keyspan.datastream.transformation import BROADCAST_KINDS, user_function
from keyspan.io import serde
from keyspan.runtime.protocol import user_error
from keyspan.runtime.worker import state_io
from keyspan.runtime.worker.contexts import InitializationContext, TaskRuntimeContext
from keyspan.runtime.worker.timers import TimerService
from keyspan.state import operator as operator_state
from keyspan.state.api import TIMER_STATE
from keyspan.state.keygroups import compute_key_group_range_for_operator_index

IDLE_INSTANCE_SECONDS = 120
_INSTANCES: dict[tuple, "OperatorInstance"] = {}


def checkpointed(function):
    """The CheckpointedFunction behind an operator's function (through keyed adapters), or None."""
    fn = user_function(function)
    return fn if isinstance(fn, CheckpointedFunction) else None


def _overrides_on_timer(function) -> bool:
    on_timer = getattr(type(function), "on_timer", None)
    return on_timer is not None and on_timer not in (KeyedProcessFunction.on_timer,
                                                     KeyedBroadcastProcessFunction.on_timer,
                                                     KeyedCoProcessFunction.on_timer)


def close(inst) -> None:
    """Release what an instance no longer cached holds, at once: its state (a RocksDB backend's files)
    and timer queues."""
    if inst.backend is not None:
        inst.backend.close()
        inst.timers.invalidate()


def _drop(dropped) -> None:
    for key, inst in list(_INSTANCES.items()):
        if dropped(key, inst):
            del _INSTANCES[key]
            close(inst)


def evict_idle_instances(run_id: str, ended_runs=()) -> None:
    """Python workers live across jobs: drop cached operators of runs the driver says ended at once, and
    of other runs once they sit idle, so a long-lived worker does not keep every finished job's state in
    memory. Kept, a finished run's state made each later job in the same workers cost more CPU
    (docs/benchmarks.md, "A finished job's state no longer slows the next one")."""
    now = time.monotonic()
    ended = set(ended_runs)
    _drop(lambda key, inst: key[0] != run_id and (key[0] in ended or now - inst.last_used > IDLE_INSTANCE_SECONDS))


def drop_stale(run_id: str, uid: str, parallelism: int, code: str) -> None:
    """Free the run's cached instances of operator ``uid`` that no task will use again: those at another
    parallelism (after a live rescale other subtasks own and restore their key groups or operator state),
    and those built from other code (the job was changed and run again in this process)."""
    _drop(lambda key, inst: key[0] == run_id and key[1] == uid and (inst.parallelism != parallelism or key[-1] != code))


def drop_run(run_id: str) -> None:
    """A run ended: free its cached operators in this process (the driver, after epochs it ran itself)."""
    _drop(lambda key, inst: key[0] == run_id)


class OperatorInstance:
    """An operator instance with its state — a keyed state backend for a keyed operator, an operator
    state store for a CheckpointedFunction or a broadcast-process operator — that lives in the worker
    across epochs. Keyed changes of an uncommitted attempt are rolled back through the backend's undo
    log; an instance with operator state is dropped instead and rebuilt from the checkpoint, because
    its function may mirror that state in fields (Flink restarts such a task from the checkpoint)."""

    def __init__(self, op, plan, subtask: int, attempt: int, backend_spec, key_groups: range | None,
                 cache_key: tuple, job_parameters: dict | None = None):
        self.op = op
        self.parallelism = plan.parallelism
        self.key_groups = key_groups
        self.cache_key = cache_key
        self.last_used = time.monotonic()
        self.backend = backend_spec.create_keyed_backend(op.uid, key_groups) if key_groups is not None else None
        if self.backend is not None:
            self.backend.operator = f"{op.name} (uid {op.uid})"  # how errors name the operator
        self.function = serde.loads(serde.dumps_function(op.function))  # own copy per instance
        self.checkpointed = checkpointed(self.function)
        self.operator_state = None  # a DefaultOperatorStateStore once initialized, if the operator keeps any
        self.has_operator_state = self.checkpointed is not None or op.kind in BROADCAST_KINDS
        # only keyed state alone can take other workers' deltas; operator state is rebuilt instead
        self.catches_up = self.backend is not None and not self.has_operator_state
        self.timers = TimerService(self.backend) if self.backend is not None else None
        self.fires_timers = _overrides_on_timer(self.function)
        self.runtime_context = TaskRuntimeContext(op, subtask, plan.parallelism, plan.max_parallelism, attempt,
                                                  self.backend, job_parameters)
        self.state_id = f"{op.uid}/{subtask}"  # how the driver's committed tokens name this subtask
        self.version = None  # last epoch whose state this instance holds, confirmed
        self.pending = None  # (epoch, token) written but not yet known to be committed
        self.ahead = None  # (epoch, token) of another worker's changes applied ahead of time, not yet confirmed
        self.opened = False

    def open(self):
        if not self.opened:
            if hasattr(self.function, "open"):
                try:
                    self.function.open(self.runtime_context)
                except Exception as exc:
                    raise user_error(self.op, self.runtime_context.get_index_of_this_subtask(), exc, method="open()") from exc
            self.opened = True

    def settle(self, ctx) -> None:
        """Confirm the parked epoch's changes if the driver committed this attempt, else undo them. The
        parked epoch may be older than the last committed one: Spark ran later epochs on other workers.
        Changes another worker wrote and this one applied ahead of time count only if the driver
        committed that attempt; otherwise nothing can undo them and the instance must be rebuilt."""
        if self.pending is not None:
            epoch, token = self.pending
            if _committed_token(ctx, epoch, self.state_id) == token:
                self.confirm_committed()
            else:
                self.pending = None
                self.rollback()
        if self.ahead is not None:
            epoch, token = self.ahead
            self.ahead = None
            self.version = epoch if _committed_token(ctx, epoch, self.state_id) == token else None

    def confirm_committed(self) -> None:
        """The driver committed the parked attempt: its changes become the base."""
        epoch, _ = self.pending
        self.pending = None
        if self.backend is not None:
            self.backend.confirm()
        self.version = epoch

    def rollback(self) -> None:
        if self.backend is not None:
            self.backend.rollback()
            self.timers.invalidate()


def acquire(op, plan, subtask: int, attempt: int, ctx, keyed: bool) -> tuple[OperatorInstance, int]:
    """The operator's instance for this epoch, as of the committed checkpoint: the cached one settled
    (and caught up), or a new one restored; also the state bytes read for it."""
    evict_idle_instances(ctx.run_id, ctx.ended_runs)
    drop_stale(ctx.run_id, op.uid, plan.parallelism, plan.code)
    if keyed:
        key_groups = compute_key_group_range_for_operator_index(plan.max_parallelism, plan.parallelism, subtask)
        cache_key = (ctx.run_id, op.uid, subtask, key_groups.start, key_groups.stop, plan.code)
    else:
        key_groups = None
        cache_key = (ctx.run_id, op.uid, subtask, "p", plan.parallelism, plan.code)
    restored = 0
    inst = _INSTANCES.pop(cache_key, None)
    if inst is not None:
        inst.settle(ctx)
        caught_up = catch_up(inst, ctx)
        if caught_up is None:
            close(inst)
            inst = None
        else:
            restored += caught_up
    if inst is None:
        inst = OperatorInstance(op, plan, subtask, attempt, ctx.backend, key_groups, cache_key, ctx.job_parameters)
        if keyed:
            inst.backend.restored_kinds = ctx.state_kinds.get(op.uid, {})
            restored += state_io.restore_keyed(inst.backend, _keyed_handles(ctx, op.uid), key_groups, ctx.storage)
        inst.version = ctx.committed_epoch
        if inst.has_operator_state:
            restored += _initialize(inst, ctx, subtask, plan.parallelism)
    inst.open()
    return inst, restored


def _keyed_handles(ctx, uid: str) -> list:
    return [h for h in ctx.manifest.get(uid, []) if is_keyed(h)]


def _committed_token(ctx, epoch: int, state_id: str) -> str | None:
    tokens = ctx.committed_tokens if epoch == ctx.committed_epoch else ctx.recent_tokens.get(epoch, {})
    return tokens.get(state_id)


def catch_up(inst: OperatorInstance, ctx) -> int | None:
    """Bring a settled instance to the committed checkpoint with the deltas written since its version;
    the bytes read, or None when it cannot (unknown version, operator state, a compaction that dropped
    the deltas it needs) and must be rebuilt."""
    committed = ctx.committed_epoch
    if inst.version == committed:
        return 0
    if not inst.catches_up or inst.version is None or inst.version > committed:
        return None
    deltas = catch_up_order(_keyed_handles(ctx, inst.op.uid), inst.key_groups, inst.version)
    if deltas is None:
        return None
    read = apply_deltas(inst, deltas, ctx.storage)
    inst.version = committed
    return read


def apply_deltas(inst: OperatorInstance, deltas: list, storage) -> int:
    """Apply other attempts' deltas to a cached instance, its timer queues kept in step; the bytes read."""
    return state_io.apply_keyed(inst.backend, deltas, inst.key_groups, storage, {TIMER_STATE: inst.timers.requeue})


def _initialize(inst: OperatorInstance, ctx, subtask: int, parallelism: int) -> int:
    """Operator state of the committed checkpoint, redistributed to this subtask, then
    ``initialize_state`` (before ``open``)."""
    handles = [h for h in ctx.manifest.get(inst.op.uid, []) if h["kind"] == OPERATOR]
    stats = statefile.ReadStats()
    restored = state_io.restore_operator_state(ctx.storage, handles, subtask, parallelism, stats)
    inst.operator_state = operator_state.DefaultOperatorStateStore(inst.op.name, restored)
    if inst.checkpointed is not None:
        committed = ctx.committed_epoch
        context = InitializationContext(committed if committed >= 0 else None, inst.operator_state,
                                        inst.runtime_context if inst.backend is not None else None)
        try:
            inst.checkpointed.initialize_state(context)
        except Exception as exc:
            raise user_error(inst.op, subtask, exc, method="initialize_state") from exc
    return stats.bytes_read


def park(instances, epoch: int, token: str) -> None:
    """This attempt's changes stay pending until the driver says which attempt it committed."""
    for inst in instances:
        inst.pending = (epoch, token)
        inst.last_used = time.monotonic()
        _INSTANCES[inst.cache_key] = inst
