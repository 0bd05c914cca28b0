"""User function interfaces, named as in ``pyflink.datastream.functions``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import Callable, Generic, Optional, TypeVar

from keyspan.datastream.state import (  # noqa: F401 — PyFlink's functions module has them too
    AggregatingState,
    AggregatingStateDescriptor,
    BroadcastState,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReadOnlyBroadcastState,
    ReducingState,
    ReducingStateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from keyspan.datastream.timerservice import TimerService  # noqa: F401 — PyFlink's functions module has it too


class Function(ABC):
    def open(self, runtime_context: "RuntimeContext") -> None:
        pass

    def close(self) -> None:
        pass


class MapFunction(Function):
    @abstractmethod
    def map(self, value): ...


class FlatMapFunction(Function):
    @abstractmethod
    def flat_map(self, value): ...


class FilterFunction(Function):
    @abstractmethod
    def filter(self, value) -> bool: ...


class ReduceFunction(Function):
    @abstractmethod
    def reduce(self, value1, value2): ...


class KeySelector(Function):
    @abstractmethod
    def get_key(self, value): ...


class SinkFunction(Function):
    """A Python sink: ``invoke`` runs on the driver for each record of a committed epoch."""

    @abstractmethod
    def invoke(self, value, context) -> None: ...


class AggregateFunction(Function):
    @abstractmethod
    def create_accumulator(self): ...

    @abstractmethod
    def add(self, value, accumulator): ...

    @abstractmethod
    def get_result(self, accumulator): ...

    def merge(self, acc_a, acc_b):
        raise NotImplementedError(f"{type(self).__name__} does not implement merge")


class TimeDomain(Enum):
    EVENT_TIME = 0
    PROCESSING_TIME = 1


class RuntimeContext(ABC):
    """What an operator instance knows about itself and where its state lives."""

    @abstractmethod
    def get_task_name(self) -> str: ...

    @abstractmethod
    def get_number_of_parallel_subtasks(self) -> int: ...

    @abstractmethod
    def get_max_number_of_parallel_subtasks(self) -> int: ...

    @abstractmethod
    def get_index_of_this_subtask(self) -> int: ...

    @abstractmethod
    def get_attempt_number(self) -> int: ...

    @abstractmethod
    def get_task_name_with_subtasks(self) -> str: ...

    @abstractmethod
    def get_job_parameter(self, key: str, default_value: str): ...

    @abstractmethod
    def get_state(self, state_descriptor): ...

    @abstractmethod
    def get_list_state(self, state_descriptor): ...

    @abstractmethod
    def get_map_state(self, state_descriptor): ...

    @abstractmethod
    def get_reducing_state(self, state_descriptor): ...

    @abstractmethod
    def get_aggregating_state(self, state_descriptor): ...

    @abstractmethod
    def get_metrics_group(self): ...


class ProcessFunction(Function):
    class Context(ABC):
        @abstractmethod
        def timestamp(self) -> int: ...

        @abstractmethod
        def timer_service(self): ...

    @abstractmethod
    def process_element(self, value, ctx: "ProcessFunction.Context"): ...


class KeyedProcessFunction(Function):
    class Context(ABC):
        @abstractmethod
        def get_current_key(self): ...

        @abstractmethod
        def timestamp(self) -> int: ...

        @abstractmethod
        def timer_service(self): ...

    class OnTimerContext(Context):
        @abstractmethod
        def time_domain(self) -> TimeDomain: ...

    @abstractmethod
    def process_element(self, value, ctx: "KeyedProcessFunction.Context"): ...

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.OnTimerContext"):
        pass


class Partitioner(Function):
    """Picks the consumer subtask of a key (``DataStream.partition_custom``)."""

    @abstractmethod
    def partition(self, key, num_partitions: int) -> int: ...


# --- two inputs: DataStream.connect(DataStream) ------------------------------------------------------

class CoMapFunction(Function):
    """``map1`` for each record of the first input, ``map2`` for the second; one result each."""

    @abstractmethod
    def map1(self, value): ...

    @abstractmethod
    def map2(self, value): ...


class CoFlatMapFunction(Function):
    """``flat_map1``/``flat_map2`` yield any number of results per record of the first/second input."""

    @abstractmethod
    def flat_map1(self, value): ...

    @abstractmethod
    def flat_map2(self, value): ...


class CoProcessFunction(Function):
    class Context(ABC):
        @abstractmethod
        def timer_service(self): ...

        @abstractmethod
        def timestamp(self) -> int: ...

    @abstractmethod
    def process_element1(self, value, ctx: "CoProcessFunction.Context"): ...

    @abstractmethod
    def process_element2(self, value, ctx: "CoProcessFunction.Context"): ...


class KeyedCoProcessFunction(Function):
    """Two keyed inputs sharing one key space: both see (and may change) the same keyed state and
    timers of the current key."""

    class Context(ABC):
        @abstractmethod
        def get_current_key(self): ...

        @abstractmethod
        def timer_service(self): ...

        @abstractmethod
        def timestamp(self) -> int: ...

    class OnTimerContext(Context):
        @abstractmethod
        def time_domain(self) -> TimeDomain: ...

    @abstractmethod
    def process_element1(self, value, ctx: "KeyedCoProcessFunction.Context"): ...

    @abstractmethod
    def process_element2(self, value, ctx: "KeyedCoProcessFunction.Context"): ...

    def on_timer(self, timestamp: int, ctx: "KeyedCoProcessFunction.OnTimerContext"):
        pass


# --- operator state: CheckpointedFunction ------------------------------------------------------------

class FunctionInitializationContext(ABC):
    """What ``CheckpointedFunction.initialize_state`` receives."""

    @abstractmethod
    def is_restored(self) -> bool:
        """True when the instance starts from a checkpoint or savepoint of an earlier execution."""

    @abstractmethod
    def get_restored_checkpoint_id(self):
        """The checkpoint (epoch) the state comes from, or None on a fresh start."""

    @abstractmethod
    def get_operator_state_store(self):
        """``keyspan.state.api.OperatorStateStore``: list, union list and broadcast state."""

    @abstractmethod
    def get_keyed_state_store(self):
        """The keyed state of a keyed operator (``get_state``, ``get_list_state``, …), else None."""


class FunctionSnapshotContext(ABC):
    """What ``CheckpointedFunction.snapshot_state`` receives."""

    @abstractmethod
    def get_checkpoint_id(self) -> int:
        """The checkpoint being taken: keyspan's epoch id."""

    @abstractmethod
    def get_checkpoint_timestamp(self) -> int: ...


class CheckpointedFunction(ABC):
    """Mix into a Map/FlatMap/Filter/Process function (keyed or not, or a broadcast process function)
    to keep operator state, as Flink's ``CheckpointedFunction``.

    ``initialize_state`` runs once when the operator instance is created, before ``open``, with the
    state of the last checkpoint redistributed to this subtask (``context.is_restored()``);
    ``snapshot_state`` runs at the end of every epoch, before its state is written, so copy what the
    function keeps in fields into its operator state there."""

    @abstractmethod
    def snapshot_state(self, context: FunctionSnapshotContext) -> None: ...

    @abstractmethod
    def initialize_state(self, context: FunctionInitializationContext) -> None: ...


# --- broadcast state: (Keyed)BroadcastProcessFunction ---------------------------------------------------

class BaseBroadcastProcessFunction(Function):
    """Processes a stream connected with a ``BroadcastStream``: ``process_element`` for the
    non-broadcast side (broadcast state read-only), ``process_broadcast_element`` for the broadcast
    side (broadcast state read-write).

    Every subtask receives every broadcast element and keeps its own copy of the broadcast state; to
    keep the copies equal, change it only from ``process_broadcast_element`` and only as a function of
    the element and the state. Within one epoch, keyspan processes all broadcast elements of the
    epoch before the epoch's other elements, in every subtask (Flink leaves the order between the two
    inputs undefined; keyspan fixes this one so results are deterministic)."""

    class BaseContext(ABC):
        @abstractmethod
        def timestamp(self) -> int: ...

        @abstractmethod
        def current_processing_time(self) -> int: ...

        @abstractmethod
        def current_watermark(self) -> int: ...

    class ReadOnlyContext(BaseContext):
        @abstractmethod
        def get_broadcast_state(self, state_descriptor):
            """A ``ReadOnlyBroadcastState`` for one of the descriptors given to ``broadcast(...)``."""

    class Context(BaseContext):
        @abstractmethod
        def get_broadcast_state(self, state_descriptor):
            """A read-write ``BroadcastState`` for one of the descriptors given to ``broadcast(...)``."""


class BroadcastProcessFunction(BaseBroadcastProcessFunction):
    """For ``data_stream.connect(broadcast_stream).process(...)``."""

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext, ABC):
        pass

    class Context(BaseBroadcastProcessFunction.Context, ABC):
        pass

    @abstractmethod
    def process_element(self, value, ctx: "BroadcastProcessFunction.ReadOnlyContext"): ...

    @abstractmethod
    def process_broadcast_element(self, value, ctx: "BroadcastProcessFunction.Context"): ...


class KeyedBroadcastProcessFunction(BaseBroadcastProcessFunction):
    """For ``keyed_stream.connect(broadcast_stream).process(...)``: ``process_element`` also has keyed
    state and ``ctx.get_current_key()``; ``process_broadcast_element`` has no current key but can
    visit every key's state with ``ctx.apply_to_keyed_state``."""

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext, ABC):
        @abstractmethod
        def timer_service(self): ...

        @abstractmethod
        def get_current_key(self): ...

    class Context(BaseBroadcastProcessFunction.Context, ABC):
        @abstractmethod
        def apply_to_keyed_state(self, state_descriptor, function) -> None:
            """Call ``function(key, state)`` for every key of this subtask that has the state."""

    class OnTimerContext(ReadOnlyContext, ABC):
        @abstractmethod
        def time_domain(self) -> TimeDomain: ...

    @abstractmethod
    def process_element(self, value, ctx: "KeyedBroadcastProcessFunction.ReadOnlyContext"): ...

    @abstractmethod
    def process_broadcast_element(self, value, ctx: "KeyedBroadcastProcessFunction.Context"): ...

    def on_timer(self, timestamp: int, ctx: "KeyedBroadcastProcessFunction.OnTimerContext"):
        pass


# --- windows: window functions (keyspan.runtime.operators.window runs them) ----------------------

W = TypeVar("W")
W2 = TypeVar("W2")
IN = TypeVar("IN")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")


class KeyedStateStore(ABC):
    """Where a window function's ``window_state()``/``global_state()`` come from: the five state getters."""

    @abstractmethod
    def get_state(self, state_descriptor): ...

    @abstractmethod
    def get_list_state(self, state_descriptor): ...

    @abstractmethod
    def get_map_state(self, state_descriptor): ...

    @abstractmethod
    def get_reducing_state(self, state_descriptor): ...

    @abstractmethod
    def get_aggregating_state(self, state_descriptor): ...


class WindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """Evaluates a keyed window: ``apply`` returns (or yields) the results."""

    @abstractmethod
    def apply(self, key, window, inputs): ...


class AllWindowFunction(Function, Generic[IN, OUT, W]):
    """Evaluates a non-keyed window (``window_all``): ``apply`` returns (or yields) the results."""

    @abstractmethod
    def apply(self, window, inputs): ...


class ProcessWindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """Evaluates a keyed window with a context: the window, the clocks, per-window and per-key state."""

    class Context(ABC, Generic[W2]):
        @abstractmethod
        def window(self): ...

        @abstractmethod
        def current_processing_time(self) -> int: ...

        @abstractmethod
        def current_watermark(self) -> int: ...

        @abstractmethod
        def window_state(self) -> KeyedStateStore:
            """State of this key and this window; clean it up in ``clear``. Not available with merging
            (session) windows."""

        @abstractmethod
        def global_state(self) -> KeyedStateStore:
            """State of this key, shared by all its windows."""

    @abstractmethod
    def process(self, key, context: "ProcessWindowFunction.Context", elements): ...

    def clear(self, context: "ProcessWindowFunction.Context") -> None:
        """Called when the window is cleaned up (the watermark passes its end plus the allowed lateness)."""


class ProcessAllWindowFunction(Function, Generic[IN, OUT, W]):
    """Evaluates a non-keyed window (``window_all``) with a context."""

    class Context(ABC, Generic[W2]):
        @abstractmethod
        def window(self): ...

        @abstractmethod
        def window_state(self) -> KeyedStateStore: ...

        @abstractmethod
        def global_state(self) -> KeyedStateStore: ...

    @abstractmethod
    def process(self, context: "ProcessAllWindowFunction.Context", elements): ...

    def clear(self, context: "ProcessAllWindowFunction.Context") -> None:
        """Called when the window is cleaned up."""


# --- async I/O (``AsyncDataStream``) ---------------------------------------------------------------

class AsyncRetryPredicate(ABC):
    """When a result or an error of ``async_invoke`` calls for another attempt."""

    @abstractmethod
    def result_predicate(self) -> Optional[Callable[[list], bool]]:
        """Called with a result; true: try again."""

    @abstractmethod
    def exception_predicate(self) -> Optional[Callable[[Exception], bool]]:
        """Called with an error; true: try again."""


class AsyncRetryStrategy(ABC):
    """How often, and after how long, ``async_invoke`` is tried again."""

    @abstractmethod
    def can_retry(self, current_attempts: int) -> bool: ...

    @abstractmethod
    def get_backoff_time_millis(self, current_attempts: int) -> int: ...

    @abstractmethod
    def get_retry_predicate(self) -> AsyncRetryPredicate: ...

    @staticmethod
    def no_restart():
        from keyspan.datastream import async_retry_strategies

        return async_retry_strategies.NO_RETRY_STRATEGY

    @staticmethod
    def fixed_delay(max_attempts: int, backoff_time_millis: int, result_predicate=None, exception_predicate=None):
        from keyspan.datastream.async_retry_strategies import FixedDelayRetryStrategy

        return FixedDelayRetryStrategy(max_attempts, backoff_time_millis, result_predicate, exception_predicate)

    @staticmethod
    def exponential_backoff(max_attempts: int, initial_delay: int, max_retry_delay: int, multiplier: float,
                            result_predicate=None, exception_predicate=None):
        from keyspan.datastream.async_retry_strategies import ExponentialBackoffDelayRetryStrategy

        return ExponentialBackoffDelayRetryStrategy(max_attempts, initial_delay, max_retry_delay, multiplier,
                                                    result_predicate, exception_predicate)


class AsyncFunction(Function):
    """Calls an outside service for each record without waiting for one call before the next:
    ``async_invoke`` is a coroutine (``async def``) returning the record's results as a list; up to
    ``capacity`` calls of a task are in flight at once. ``timeout(value)`` gives the results of a call
    that did not finish in time; by default it fails the job."""

    @abstractmethod
    async def async_invoke(self, value) -> list: ...

    def timeout(self, value) -> list:
        raise TimeoutError("Async function call has timed out for input: " + str(value))


class AsyncFunctionDescriptor:
    """An async operator's settings, as ``AsyncDataStream`` hands them to the runtime."""

    class OutputMode(Enum):
        ORDERED = 0
        UNORDERED = 1

    def __init__(self, async_function, timeout, capacity, async_retry_strategy, output_mode):
        self.async_function = async_function
        self.timeout = timeout
        self.capacity = capacity
        self.async_retry_strategy = async_retry_strategy
        self.output_mode = output_mode

    def shipped_objects(self) -> list:
        """The user's objects the operator runs (their modules ship by value)."""
        predicate = self.async_retry_strategy.get_retry_predicate()
        return [self.async_function, self.async_retry_strategy, predicate.result_predicate(),
                predicate.exception_predicate()]


from keyspan.common.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("keyspan.datastream.functions", {
    "SourceFunction": "use env.from_source(...) with a keyspan source, env.from_collection(...) or "
                      "env.from_spark(spark.readStream...) instead",
    "JavaFunctionWrapper": "Java functions cannot run in keyspan; write the function in Python instead",
})
