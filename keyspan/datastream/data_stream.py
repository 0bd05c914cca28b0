"""``DataStream`` and ``KeyedStream`` with PyFlink's method names; each call adds a transformation."""

from __future__ import annotations

import copy
from typing import Callable, Union

from keyspan.common.clock import LONG_MAX
from keyspan.common.execution_config import ExecutionConfig
from keyspan.common.typeinfo import TupleTypeInfo, Types
from keyspan.common.types import Row
from keyspan.datastream.aggregates import RollingAggregation
from keyspan.datastream.functions import (
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    Partitioner,
    FilterFunction,
    FlatMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
    SinkFunction,
)
from keyspan.datastream.state import MapStateDescriptor, ValueStateDescriptor
from keyspan.datastream.transformation import OperatorKind, Partitioning, Transformation


def _as_callable(func, method: str, interface: type):
    if isinstance(func, interface):
        return getattr(func, method)
    if callable(func):
        return func
    raise TypeError(f"expected a {interface.__name__} or a callable, got {type(func).__name__}")


class _FunctionAdapter(KeyedProcessFunction):
    """Runs a Map/FlatMap/Filter/Reduce function as a KeyedProcessFunction, as PyFlink does."""

    def __init__(self, func, method: str, interface: type):
        self._func = func
        self._call = _as_callable(func, method, interface)

    def open(self, runtime_context: RuntimeContext):
        if isinstance(self._func, interface_types()):
            self._func.open(runtime_context)

    def close(self):
        if isinstance(self._func, interface_types()):
            self._func.close()

    def wrapped_user_function(self):
        """The wrapped function (the runtime calls CheckpointedFunction methods on it)."""
        return self._func


def interface_types():
    return (MapFunction, FlatMapFunction, FilterFunction, ReduceFunction)


class _KeyedMap(_FunctionAdapter):
    def __init__(self, func):
        super().__init__(func, "map", MapFunction)

    def process_element(self, value, ctx):
        yield self._call(value)


class _KeyedFlatMap(_FunctionAdapter):
    def __init__(self, func):
        super().__init__(func, "flat_map", FlatMapFunction)

    def process_element(self, value, ctx):
        yield from self._call(value)


class _KeyedFilter(_FunctionAdapter):
    def __init__(self, func):
        super().__init__(func, "filter", FilterFunction)

    def process_element(self, value, ctx):
        if self._call(value):
            yield value


class _KeyedReduce(_FunctionAdapter):
    """Emits the running reduction per key after every element (PyFlink's streaming-mode reduce)."""

    STATE = ValueStateDescriptor("_reduce_state")

    def __init__(self, func):
        super().__init__(func, "reduce", ReduceFunction)
        self._state = None

    def open(self, runtime_context: RuntimeContext):
        super().open(runtime_context)
        self._state = runtime_context.get_state(self.STATE)

    def process_element(self, value, ctx):
        current = self._state.value()
        current = value if current is None else self._call(current, value)
        self._state.update(current)
        yield current

    def in_batch_mode(self) -> "_FinalKeyedReduce":
        return _FinalKeyedReduce(self._func)


class _FinalKeyedReduce(_KeyedReduce):
    """A keyed reduce (``sum``, ``min``, ``max_by``, ...) in BATCH mode: only each key's final result,
    emitted at the end of input, as Flink's ``BatchGroupedReduceOperator`` does (a timer at the
    largest timestamp, which fires when the input ends). Same state as the streaming form."""

    def process_element(self, value, ctx):
        current = self._state.value()
        self._state.update(value if current is None else self._call(current, value))
        ctx.timer_service().register_event_time_timer(LONG_MAX)  # once per key: timers de-duplicate

    def on_timer(self, timestamp, ctx):
        yield self._state.value()


class DataStream:
    def __init__(self, env, transformation: Transformation):
        self._env = env
        self._t = transformation

    def get_execution_environment(self):
        return self._env

    def get_name(self) -> str:
        return self._t.name

    def name(self, name: str) -> "DataStream":
        self._t.name = name
        return self

    def uid(self, uid: str) -> "DataStream":
        self._t.uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> "DataStream":
        self._t.parallelism = _operator_parallelism(parallelism)
        return self

    def get_type(self):
        return self._t.output_type

    def get_execution_config(self):
        return self._env.get_config()

    def set_uid_hash(self, uid_hash: str) -> "DataStream":
        """Flink's user-provided operator id; in keyspan the operator's state identity, like ``uid``
        (an explicit ``uid`` wins)."""
        if not self._t.uid:
            self._t.uid = uid_hash
        return self

    def set_max_parallelism(self, max_parallelism: int) -> "DataStream":
        """Checked (at least the operator's parallelism, at most the job's); keyspan keys every
        operator with the job's max parallelism (``env.set_max_parallelism``), which fixes the key groups."""
        if max_parallelism < 1 or (self._t.parallelism and max_parallelism < self._t.parallelism):
            raise ValueError(f"operator '{self._t.name}': max parallelism {max_parallelism} is below its "
                             f"parallelism {self._t.parallelism}")
        if max_parallelism > self._env.get_max_parallelism():
            raise ValueError(f"operator '{self._t.name}': max parallelism {max_parallelism} exceeds the job's "
                             f"({self._env.get_max_parallelism()}); raise it with env.set_max_parallelism")
        return self

    def force_non_parallel(self) -> "DataStream":
        """Parallelism 1 for this operator."""
        self._t.parallelism = 1
        return self

    def set_buffer_timeout(self, timeout_millis: int) -> "DataStream":
        """Accepted: records leave a stage in chunks within the epoch; the epoch interval bounds latency."""
        return self

    def start_new_chain(self) -> "DataStream":
        """This operator starts a new stage (Spark task) instead of chaining to its input."""
        self._t.chaining = "head"
        return self

    def disable_chaining(self) -> "DataStream":
        """This operator runs in a stage of its own: nothing chains to it and it chains to nothing."""
        self._t.chaining = "never"
        return self

    def slot_sharing_group(self, slot_sharing_group) -> "DataStream":
        """Accepted: Spark places tasks; there are no slots to share."""
        return self

    def set_description(self, description: str) -> "DataStream":
        self._t.description = description
        return self

    # partitioning: how records reach the next operator ------------------------------------
    def _partition(self, strategy: str, partitioner=None, key_selector=None) -> "DataStream":
        return DataStream(self._env, self._add(OperatorKind.PARTITION, strategy.capitalize(), output_type=self._t.output_type,
                                               spec=Partitioning(strategy, partitioner, key_selector)))

    def rebalance(self) -> "DataStream":
        """Round robin over the next operator's subtasks."""
        return self._partition("rebalance")

    def rescale(self) -> "DataStream":
        """Round robin, as ``rebalance`` (Spark has no task locality for a local round robin to keep)."""
        return self._partition("rescale")

    def shuffle(self) -> "DataStream":
        """Each record to a uniformly random subtask of the next operator."""
        return self._partition("shuffle")

    def forward(self) -> "DataStream":
        """The next operator runs in the same task (same parallelism required, as in Flink)."""
        return self._partition("forward")

    def partition_custom(self, partitioner: Union[Callable, Partitioner],
                         key_selector: Union[Callable, KeySelector]) -> "DataStream":
        """Subtask = ``partitioner.partition(key_selector(record), number of subtasks)``."""
        part = _as_callable(partitioner, "partition", Partitioner)
        selector = _as_callable(key_selector, "get_key", KeySelector)
        return self._partition("custom", part, selector)

    def project(self, *field_indexes: int) -> "DataStream":
        """A stream of the given fields of each tuple/Row record. On a stream of ``Types.TUPLE`` (the
        only kind PyFlink projects) the result is a tuple type of those fields, so ``print()`` shows
        Java's tuples (``(0.1,b)``) as PyFlink's Java projection does."""
        fields = list(field_indexes)
        t = self._t.output_type
        output_type = Types.TUPLE([t.field_types[i] for i in fields]) if isinstance(t, TupleTypeInfo) else None
        return self.map(lambda value: Row(*[value[i] for i in fields]) if isinstance(value, Row)
                        else tuple(value[i] for i in fields), output_type)

    def _add(self, kind: str, name: str, function=None, output_type=None, inputs=None, key_selector=None,
             spec=None) -> Transformation:
        return self._env._add_transformation(kind, name, inputs or [self._t], function=function,
                                             output_type=output_type, key_selector=key_selector, spec=spec)

    def map(self, func: Union[Callable, MapFunction], output_type=None) -> "DataStream":
        _as_callable(func, "map", MapFunction)
        return DataStream(self._env, self._add(OperatorKind.MAP, "Map", func, output_type))

    def flat_map(self, func: Union[Callable, FlatMapFunction], output_type=None) -> "DataStream":
        _as_callable(func, "flat_map", FlatMapFunction)
        return DataStream(self._env, self._add(OperatorKind.FLAT_MAP, "FlatMap", func, output_type))

    def filter(self, func: Union[Callable, FilterFunction]) -> "DataStream":
        _as_callable(func, "filter", FilterFunction)
        return DataStream(self._env, self._add(OperatorKind.FILTER, "Filter", func, self._t.output_type))

    def process(self, func: ProcessFunction, output_type=None) -> "DataStream":
        if not isinstance(func, ProcessFunction):
            raise TypeError("DataStream.process needs a ProcessFunction (use key_by(...).process for a "
                            "KeyedProcessFunction)")
        return DataStream(self._env, self._add(OperatorKind.PROCESS, "Process", func, output_type))

    def key_by(self, key_selector: Union[Callable, KeySelector], key_type=None) -> "KeyedStream":
        selector = _as_callable(key_selector, "get_key", KeySelector)
        return KeyedStream(self, selector, key_type)

    def assign_timestamps_and_watermarks(self, watermark_strategy) -> "DataStream":
        """Event timestamps from the strategy's assigner and watermarks from its bound; downstream
        operators see this stream's watermark instead of the upstream one (as in Flink)."""
        from keyspan.common.watermark_strategy import WatermarkStrategy

        if not isinstance(watermark_strategy, WatermarkStrategy):
            raise TypeError(f"assign_timestamps_and_watermarks needs a WatermarkStrategy, got {watermark_strategy!r}")
        # a copy: the strategy's later changes (with_timestamp_assigner) do not reach this stream, as in PyFlink
        return DataStream(self._env, self._add(OperatorKind.TIMESTAMPS, "Timestamps/Watermarks",
                                               copy.copy(watermark_strategy), self._t.output_type))

    def window_all(self, window_assigner):
        """Windows over the whole (non-keyed) stream, evaluated by one subtask, as in Flink."""
        from keyspan.datastream.window_operator import AllWindowedStream

        return AllWindowedStream(self, window_assigner)

    def count_window_all(self, size: int, slide: int = 0):
        from keyspan.datastream.window_operator import count_window_all

        return count_window_all(self, size, slide)

    def cache(self) -> "CachedDataStream":
        """PyFlink's handle for reusing this stream's result in later jobs of the environment. keyspan
        computes the stream again in each job that uses it, as PyFlink does when it runs locally (each
        ``execute`` there starts a new mini cluster); the results are the same."""
        return CachedDataStream(self._env, self._t)

    def get_side_output(self, output_tag) -> "DataStream":
        """The records this operator emitted with ``yield output_tag, value``."""
        from keyspan.datastream.output_tag import OutputTag

        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"get_side_output needs an OutputTag, got {output_tag!r}")
        return DataStream(self._env, self._add(OperatorKind.SIDE_OUTPUT, f"SideOutput({output_tag.tag_id})",
                                               output_type=output_tag.type_info, spec=output_tag))

    def union(self, *streams: "DataStream") -> "DataStream":
        inputs = [self._t] + [s._t for s in streams]
        return DataStream(self._env, self._add(OperatorKind.UNION, "Union", inputs=inputs, output_type=self._t.output_type))

    def broadcast(self, broadcast_state_descriptor: MapStateDescriptor | None = None,
                  *more_descriptors: MapStateDescriptor) -> "BroadcastStream":
        """Without a descriptor: a stream whose records reach every subtask of the next operator.
        With descriptor(s): a ``BroadcastStream`` whose records reach every subtask of the operator it
        is connected to, which keeps the given broadcast state(s)."""
        if broadcast_state_descriptor is None:
            return self._partition("broadcast")  # every record to every subtask of the next operator
        return BroadcastStream(self, [broadcast_state_descriptor, *more_descriptors])

    def connect(self, ds: Union["DataStream", "BroadcastStream"]
                ) -> Union["ConnectedStreams", "BroadcastConnectedStream"]:
        """With a ``DataStream``: ``ConnectedStreams`` for CoMap/CoFlatMap/(Keyed)CoProcess functions.
        With a ``BroadcastStream``: a ``BroadcastConnectedStream`` for a (Keyed)BroadcastProcessFunction."""
        if isinstance(ds, BroadcastStream):
            return BroadcastConnectedStream(self, ds)
        if isinstance(ds, DataStream):
            return ConnectedStreams(self, ds)
        raise TypeError(f"connect() needs a DataStream or a BroadcastStream, got {type(ds).__name__}")

    def sink_to(self, sink) -> "DataStreamSink":
        # a sink that writes by the stream's declared type (print(), a row-format FileSink) is told it
        for_input_type = getattr(sink, "for_input_type", None)
        spec = sink if for_input_type is None else for_input_type(self.get_type())
        return DataStreamSink(self._add(OperatorKind.SINK, spec.name, spec=spec))

    def add_sink(self, sink_func: SinkFunction) -> "DataStreamSink":
        from keyspan.connectors.driver_sinks import FunctionSink

        if getattr(sink_func, "runs_in_task", False):  # a connector sink under its legacy name (FlinkKafkaProducer)
            return self.sink_to(sink_func)
        return self.sink_to(FunctionSink(sink_func))

    def print(self, sink_identifier: str | None = None) -> "DataStreamSink":
        from keyspan.connectors.driver_sinks import PrintSink

        return self.sink_to(PrintSink(sink_identifier))

    def execute_and_collect(self, job_execution_name: str | None = None, limit: int | None = None):
        """Run this stream's job and return its results: with ``limit`` a list of the first ``limit``
        records, returned as soon as they arrive (the job is then cancelled, so an unbounded job works
        too); without, a closeable iterator over all results of a bounded job. As in PyFlink, the job is
        this stream and what it reads: other operators built so far are dropped without running."""
        import time

        from keyspan.connectors.driver_sinks import CollectSink, CloseableIterator

        sink = CollectSink(self.get_type())
        collected = self.sink_to(sink)._t
        name = job_execution_name or "collect"
        if limit is None:
            self._env._execute_fresh(name, collected)
            return CloseableIterator(sink.results())
        client = self._env._start_async(name, fresh=True, collected=collected)
        finished = client.get_job_execution_result()
        while not finished.done():
            if len(sink.results()) >= limit:
                client.cancel()
                break
            time.sleep(0.05)
        finished.result()  # the run's end (after a cancel: the epoch in flight commits first)
        return sink.results()[:limit]


# the DataStream methods PyFlink's KeyedStream and CachedDataStream raise on, and how they say it
_REFUSED_SETTINGS = {
    "get_name": "Get name of", "name": "Set name for", "uid": "Set uid for", "set_uid_hash": "Set uid hash for",
    "set_parallelism": "Set parallelism for", "set_max_parallelism": "Set max parallelism for",
    "force_non_parallel": "Set force non-parallel for", "set_buffer_timeout": "Set buffer timeout for",
    "start_new_chain": "Start new chain for", "disable_chaining": "Disable chaining for",
    "slot_sharing_group": "Setting slot sharing group for",
}


def _refuses_settings(cls):
    for method, what in _REFUSED_SETTINGS.items():
        def refused(self, *args, _message=f"{what} {cls.__name__} is not supported.", **kwargs):
            raise Exception(_message)

        refused.__name__ = method
        setattr(cls, method, refused)
    return cls


@_refuses_settings
class KeyedStream(DataStream):
    def __init__(self, origin: DataStream, key_selector, key_type=None):
        super().__init__(origin._env, origin._t)
        self._origin = origin
        self._key_selector = key_selector
        self._key_type = key_type

    def _keyed(self, function: KeyedProcessFunction, name: str, output_type=None) -> DataStream:
        t = self._add(OperatorKind.KEYED_PROCESS, name, function, output_type, key_selector=self._key_selector)
        t.key_type = self._key_type
        return DataStream(self._env, t)

    def process(self, func: KeyedProcessFunction, output_type=None) -> DataStream:
        if not isinstance(func, KeyedProcessFunction):
            raise TypeError("KeyedStream.process needs a KeyedProcessFunction")
        return self._keyed(func, "KeyedProcess", output_type)

    def map(self, func, output_type=None) -> DataStream:
        return self._keyed(_KeyedMap(func), "Map", output_type)

    def flat_map(self, func, output_type=None) -> DataStream:
        return self._keyed(_KeyedFlatMap(func), "FlatMap", output_type)

    def filter(self, func) -> DataStream:
        return self._keyed(_KeyedFilter(func), "Filter", self._t.output_type)

    def reduce(self, func) -> DataStream:
        return self._keyed(_KeyedReduce(func), "Reduce", self._t.output_type)

    def sum(self, position_to_sum: Union[int, str] = 0) -> DataStream:
        return self._keyed(_KeyedReduce(RollingAggregation("sum", position_to_sum)), "Sum", self._t.output_type)

    def min(self, position_to_min: Union[int, str] = 0) -> DataStream:
        return self._keyed(_KeyedReduce(RollingAggregation("min", position_to_min)), "Min", self._t.output_type)

    def max(self, position_to_max: Union[int, str] = 0) -> DataStream:
        return self._keyed(_KeyedReduce(RollingAggregation("max", position_to_max)), "Max", self._t.output_type)

    def min_by(self, position_to_min_by: Union[int, str] = 0) -> DataStream:
        return self._keyed(_KeyedReduce(RollingAggregation("min_by", position_to_min_by)), "MinBy", self._t.output_type)

    def max_by(self, position_to_max_by: Union[int, str] = 0) -> DataStream:
        return self._keyed(_KeyedReduce(RollingAggregation("max_by", position_to_max_by)), "MaxBy", self._t.output_type)

    def window(self, window_assigner) -> "WindowedStream":
        """Split the keyed stream into windows (``keyspan.datastream.window``); ``reduce``, ``aggregate``,
        ``process`` or ``apply`` on the result evaluate them."""
        from keyspan.datastream.window_operator import WindowedStream

        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int = 0) -> "WindowedStream":
        """Tumbling count windows of ``size`` elements per key, or sliding ones every ``slide`` elements."""
        from keyspan.datastream.window_operator import count_window

        return count_window(self, size, slide)

    def key_by(self, key_selector, key_type=None) -> "KeyedStream":
        return self._origin.key_by(key_selector, key_type)

    def _values(self) -> DataStream:
        return self.map(lambda value: value, self._t.output_type).name("_keyed_stream_values_operator")

    def sink_to(self, sink):
        return self._values().sink_to(sink)

    def add_sink(self, sink_func):
        return self._values().add_sink(sink_func)

    def print(self, sink_identifier=None):
        return self._values().print(sink_identifier)

    def union(self, *streams):
        return self._values().union(*streams)

    def broadcast(self, *args, **kwargs):
        raise Exception("Cannot override partitioning for KeyedStream.")

    def _partition(self, strategy, partitioner=None, key_selector=None):
        raise Exception("Cannot override partitioning for KeyedStream.")

    def project(self, *field_indexes):
        return self._values().project(*field_indexes)

    def cache(self):
        raise Exception("Cache for KeyedStream is not supported.")


@_refuses_settings
class CachedDataStream(DataStream):
    """``DataStream.cache()``: the stream itself, with PyFlink's restrictions on renaming it."""

    def invalidate(self) -> None:
        """Nothing is kept between jobs (see ``DataStream.cache``), so nothing is released."""


class BroadcastStream:
    """A stream whose records go to every subtask of the operator it is connected to (from
    ``DataStream.broadcast(descriptor)``); that operator keeps the broadcast state(s) it declares."""

    def __init__(self, input_stream: DataStream, broadcast_state_descriptors: list):
        if isinstance(input_stream, KeyedStream):
            raise Exception("Cannot override partitioning for KeyedStream.")
        for d in broadcast_state_descriptors:
            if not isinstance(d, MapStateDescriptor):
                raise TypeError(f"broadcast state needs a MapStateDescriptor, got {type(d).__name__}")
        names = [d.name for d in broadcast_state_descriptors]
        if len(set(names)) != len(names):
            raise ValueError(f"broadcast state names must be unique, got {names}")
        self._input_stream = input_stream
        self._broadcast_state_descriptors = list(broadcast_state_descriptors)

    def get_execution_environment(self):
        return self._input_stream.get_execution_environment()


class BroadcastConnectedStream:
    """A (keyed or non-keyed) stream connected with a ``BroadcastStream``."""

    def __init__(self, non_broadcast_stream: DataStream, broadcast_stream: BroadcastStream):
        self._non_broadcast_stream = non_broadcast_stream
        self._broadcast_stream = broadcast_stream

    def process(self, func, output_type=None) -> DataStream:
        data = self._non_broadcast_stream
        descriptors = self._broadcast_stream._broadcast_state_descriptors
        inputs = [data._t, self._broadcast_stream._input_stream._t]
        if isinstance(data, KeyedStream):
            if not isinstance(func, KeyedBroadcastProcessFunction):
                raise TypeError("a KeyedStream connected with a BroadcastStream needs a KeyedBroadcastProcessFunction")
            t = data._add(OperatorKind.KEYED_BROADCAST_PROCESS, "Co-Process-Broadcast-Keyed", func, output_type, inputs=inputs,
                          key_selector=data._key_selector, spec=descriptors)
            t.key_type = data._key_type
        else:
            if not isinstance(func, BroadcastProcessFunction):
                raise TypeError("a DataStream connected with a BroadcastStream needs a BroadcastProcessFunction "
                                "(key_by(...) first for a KeyedBroadcastProcessFunction)")
            t = data._add(OperatorKind.BROADCAST_PROCESS, "Co-Process-Broadcast", func, output_type, inputs=inputs,
                          spec=descriptors)
        return DataStream(data._env, t)


def _one_or_none(result):
    return None if result is None else (result,)  # PyFlink's co-map drops a None result


class _CoFunctionAdapter(KeyedCoProcessFunction):
    """Runs a CoMap/CoFlatMap function as a two-input process function, as PyFlink does (on keyed
    and non-keyed connected streams alike: the runtime calls ``process_element1/2``)."""

    def __init__(self, func, flat: bool):
        self._func = func
        if flat:
            self._one, self._two = func.flat_map1, func.flat_map2
        else:
            self._one, self._two = (lambda v: _one_or_none(func.map1(v))), (lambda v: _one_or_none(func.map2(v)))

    def open(self, runtime_context: RuntimeContext):
        self._func.open(runtime_context)

    def close(self):
        self._func.close()

    def wrapped_user_function(self):
        return self._func

    def process_element1(self, value, ctx):
        return self._one(value)

    def process_element2(self, value, ctx):
        return self._two(value)


class ConnectedStreams:
    """Two streams of possibly different types processed by one operator: the function's ``*1``
    method sees the first stream's records, ``*2`` the second's. Keyed (``key_by(sel1, sel2)``), both
    inputs go to the same key groups, so a key's state and timers are shared by both sides."""

    def __init__(self, stream1: DataStream, stream2: DataStream):
        self.stream1 = stream1
        self.stream2 = stream2

    def key_by(self, key_selector1: Union[Callable, KeySelector], key_selector2: Union[Callable, KeySelector],
               key_type=None) -> "ConnectedStreams":
        ds1 = self.stream1._origin if isinstance(self.stream1, KeyedStream) else self.stream1
        ds2 = self.stream2._origin if isinstance(self.stream2, KeyedStream) else self.stream2
        return ConnectedStreams(ds1.key_by(key_selector1, key_type), ds2.key_by(key_selector2, key_type))

    def map(self, func: CoMapFunction, output_type=None) -> DataStream:
        if not isinstance(func, CoMapFunction):
            raise TypeError("The input function must be a CoMapFunction!")
        return self._process(_CoFunctionAdapter(func, flat=False), output_type, "Co-Map")

    def flat_map(self, func: CoFlatMapFunction, output_type=None) -> DataStream:
        if not isinstance(func, CoFlatMapFunction):
            raise TypeError("The input must be a CoFlatMapFunction!")
        return self._process(_CoFunctionAdapter(func, flat=True), output_type, "Co-Flat Map")

    def process(self, func: Union[CoProcessFunction, KeyedCoProcessFunction], output_type=None) -> DataStream:
        if not isinstance(func, (CoProcessFunction, KeyedCoProcessFunction)):
            raise TypeError("The input must be a CoProcessFunction or KeyedCoProcessFunction!")
        if isinstance(func, KeyedCoProcessFunction) and not self._is_keyed_stream():
            raise TypeError("a KeyedCoProcessFunction needs keyed connected streams: "
                            "ds1.connect(ds2).key_by(key_selector1, key_selector2).process(...)")
        return self._process(func, output_type, "Keyed Co-Process" if self._is_keyed_stream() else "Co-Process")

    def _process(self, func, output_type, name: str) -> DataStream:
        one, two = self.stream1, self.stream2
        if isinstance(one, KeyedStream) != isinstance(two, KeyedStream):
            raise ValueError("connect a keyed stream with a keyed stream (or neither): use "
                             "connected.key_by(key_selector1, key_selector2)")
        if self._is_keyed_stream():
            t = one._add(OperatorKind.KEYED_CO_PROCESS, name, func, output_type, inputs=[one._t, two._t],
                         key_selector=one._key_selector)
            t.key_selector2 = two._key_selector
            t.key_type = one._key_type  # PyFlink's connected key_by gives both inputs one key type
        else:
            t = one._add(OperatorKind.CO_PROCESS, name, func, output_type, inputs=[one._t, two._t])
        return DataStream(one._env, t)

    def _is_keyed_stream(self) -> bool:
        return isinstance(self.stream1, KeyedStream) and isinstance(self.stream2, KeyedStream)


class DataStreamSink:
    def __init__(self, transformation: Transformation):
        self._t = transformation

    def name(self, name: str) -> "DataStreamSink":
        self._t.name = name
        return self

    def uid(self, uid: str) -> "DataStreamSink":
        self._t.uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> "DataStreamSink":
        self._t.parallelism = _operator_parallelism(parallelism)
        return self

    def set_uid_hash(self, uid_hash: str) -> "DataStreamSink":
        if not self._t.uid:
            self._t.uid = uid_hash
        return self

    def set_description(self, description: str) -> "DataStreamSink":
        self._t.description = description
        return self

    def disable_chaining(self) -> "DataStreamSink":
        self._t.chaining = "never"
        return self

    def slot_sharing_group(self, slot_sharing_group) -> "DataStreamSink":
        """Accepted: Spark places tasks; there are no slots to share."""
        return self


def _operator_parallelism(parallelism: int) -> int | None:
    """An operator's own parallelism; None (``PARALLELISM_DEFAULT``) runs it at the job's."""
    if parallelism == ExecutionConfig.PARALLELISM_DEFAULT:
        return None
    if parallelism < 1:
        raise ValueError(f"The parallelism of an operator must be at least 1, or ExecutionConfig.PARALLELISM_DEFAULT "
                         f"(use system default), got {parallelism}")
    return parallelism


def __getattr__(name: str):
    """PyFlink's data_stream module also holds the windowed streams and CloseableIterator."""
    if name in ("WindowedStream", "AllWindowedStream"):
        from keyspan.datastream import window_operator

        return getattr(window_operator, name)
    if name == "CloseableIterator":
        from keyspan.connectors.driver_sinks import CloseableIterator

        return CloseableIterator
    raise AttributeError(f"module 'keyspan.datastream.data_stream' has no attribute {name!r}")
