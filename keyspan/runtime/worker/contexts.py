"""PyFlink's runtime context and the contexts process functions receive, as a task provides them."""

from __future__ import annotations


from keyspan.common.clock import LONG_MIN, wall_clock_ms
from keyspan.datastream import timerservice
from keyspan.datastream.functions import (
    BroadcastProcessFunction,
    CoProcessFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    ProcessFunction,
    RuntimeContext,
    TimeDomain,
)
from keyspan.metrics import metricbase
from keyspan.state import operator as operator_state


class TaskRuntimeContext(RuntimeContext):
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
        """As Flink's: ``name (index + 1/parallelism)#attempt``."""
        return f"{self._op.name} ({self._subtask + 1}/{self._parallelism})#{self._attempt}"

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


class Clock(timerservice.TimerService):
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


def presented_key(backend, present_key):
    """The current key as user code gets it: ``present_key`` (``received_key_form`` of key_by's key_type)
    gives the form PyFlink decodes a typed key in, a ``Types.ROW`` key as a row named ``f0, f1, …``.
    State keeps the selector's own value, so a key_type given later does not move any state."""
    key = backend.current_key
    return key if present_key is None else present_key(key)


class KeyedContext(KeyedProcessFunction.Context):
    """``process_element``'s context: the record's timestamp is the task's current one."""

    __slots__ = ("_backend", "_cell", "_timers", "_present_key")

    def __init__(self, backend, cell, timers, present_key=None):
        self._backend = backend
        self._cell = cell
        self._timers = timers
        self._present_key = present_key

    def get_current_key(self):
        key = self._backend.current_key  # presented_key inlined: a window operator asks once per record
        present_key = self._present_key
        return key if present_key is None else present_key(key)

    def timestamp(self):
        ts = self._cell[0]  # inlined, once per record: a call would double its cost
        return LONG_MIN if ts is None else ts  # PyFlink's value for a record without a timestamp

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


class OnTimerContext(_Firing, KeyedContext, KeyedProcessFunction.OnTimerContext):
    pass


class Context(ProcessFunction.Context):
    __slots__ = ("_cell", "_clock")

    def __init__(self, cell, clock):
        self._cell = cell
        self._clock = clock

    def timestamp(self):
        ts = self._cell[0]  # inlined, once per record: a call would double its cost
        return LONG_MIN if ts is None else ts  # PyFlink's value for a record without a timestamp

    def timer_service(self):
        return self._clock


class CoContext(Context, CoProcessFunction.Context):
    """``process_element1/2``'s context of a non-keyed two-input operator."""


class KeyedCoContext(KeyedContext, KeyedCoProcessFunction.Context):
    """``process_element1/2``'s context of a keyed two-input operator: one key, state and timers for both inputs."""


class KeyedCoOnTimerContext(_Firing, KeyedContext, KeyedCoProcessFunction.OnTimerContext):
    pass


class InitializationContext(FunctionInitializationContext):
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


class SnapshotContext(FunctionSnapshotContext):
    def __init__(self, checkpoint_id: int):
        self._id = checkpoint_id
        self._timestamp = wall_clock_ms()

    def get_checkpoint_id(self) -> int:
        return self._id

    def get_checkpoint_timestamp(self) -> int:
        return self._timestamp


class BroadcastStates:
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

    def __init__(self, states: BroadcastStates, cell, clock, backend=None, present_key=None):
        self._states = states
        self._cell = cell
        self._clock = clock
        self._backend = backend
        self._present_key = present_key

    def get_broadcast_state(self, state_descriptor):
        return self._states.get(state_descriptor, self._writable)

    def timestamp(self):
        ts = self._cell[0]  # inlined, once per record: a call would double its cost
        return LONG_MIN if ts is None else ts  # PyFlink's value for a record without a timestamp

    def current_processing_time(self) -> int:
        return wall_clock_ms()

    def current_watermark(self) -> int:
        return self._clock.current_watermark()


class BroadcastReadOnlyContext(_BroadcastContextBase, BroadcastProcessFunction.ReadOnlyContext):
    pass


class BroadcastContext(_BroadcastContextBase, BroadcastProcessFunction.Context):
    _writable = True


class KeyedBroadcastReadOnlyContext(_BroadcastContextBase, KeyedBroadcastProcessFunction.ReadOnlyContext):
    def get_current_key(self):
        return presented_key(self._backend, self._present_key)

    def timer_service(self):
        return self._clock  # the instance's TimerService


class KeyedBroadcastOnTimerContext(_Firing, KeyedBroadcastReadOnlyContext, KeyedBroadcastProcessFunction.OnTimerContext):
    pass


class KeyedBroadcastContext(_BroadcastContextBase, KeyedBroadcastProcessFunction.Context):
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
                function(presented_key(backend, self._present_key), state)
        finally:
            backend.current_key, backend.current_key_group = saved
