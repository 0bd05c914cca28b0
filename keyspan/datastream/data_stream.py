"""``DataStream`` and ``KeyedStream`` with PyFlink's method names; each call adds a transformation."""

from __future__ import annotations

from typing import Callable, Union

from keyspan.common.types import Row
from keyspan.datastream.functions import (
    BroadcastProcessFunction,
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
from keyspan.datastream.transformation import OperatorKind, Transformation


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


def _field_getter(position):
    if isinstance(position, str):
        return lambda v: getattr(v, position) if not isinstance(v, dict) else v[position]
    return lambda v: v[position]


def _replace_field(value, position, new):
    if isinstance(value, Row) and value._fields is not None:
        idx = value._fields.index(position) if isinstance(position, str) else position
        values = list(value)
        values[idx] = new
        return Row.from_values(value._fields, values)
    if isinstance(value, (tuple, list)):
        values = list(value)
        values[position] = new
        return type(value)(values) if not isinstance(value, Row) else Row(*values)
    if isinstance(value, dict):
        return {**value, position: new}
    raise TypeError(f"cannot aggregate field {position!r} of a {type(value).__name__}")


def _aggregation(kind: str, position):
    """Flink's built-in aggregations: sum/min/max keep the first record's other fields, *_by keep the
    whole winning record."""
    get = _field_getter(position)

    def scalar(a, b):
        return {"sum": a + b, "min": min(a, b), "max": max(a, b)}[kind]

    def reduce(acc, value):
        if not isinstance(acc, (tuple, list, dict)):
            if kind in ("min_by", "max_by"):
                return value if (value < acc if kind == "min_by" else value > acc) else acc
            return scalar(acc, value)
        a, b = get(acc), get(value)
        if kind == "min_by":
            return value if b < a else acc
        if kind == "max_by":
            return value if b > a else acc
        return _replace_field(acc, position, scalar(a, b))

    return reduce


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
        if parallelism < 1:
            raise ValueError(f"parallelism must be at least 1, got {parallelism}")
        self._t.parallelism = parallelism
        return self

    def get_type(self):
        return self._t.output_type

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
        return DataStream(self._env, self._add(OperatorKind.TIMESTAMPS, "Timestamps/Watermarks", watermark_strategy,
                                               self._t.output_type))

    def window_all(self, window_assigner):
        """Windows over the whole (non-keyed) stream, evaluated by one subtask, as in Flink."""
        from keyspan.datastream.window_operator import AllWindowedStream

        return AllWindowedStream(self, window_assigner)

    def count_window_all(self, size: int, slide: int = 0):
        from keyspan.datastream.window_operator import count_window_all

        return count_window_all(self, size, slide)

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
        """A ``BroadcastStream`` whose records reach every subtask of the operator it is connected to,
        which keeps the given broadcast state(s)."""
        if broadcast_state_descriptor is None:
            raise NotImplementedError("broadcast() without a MapStateDescriptor (broadcast partitioning) is not "
                                      "supported; pass the broadcast state descriptor(s) and connect the result")
        return BroadcastStream(self, [broadcast_state_descriptor, *more_descriptors])

    def connect(self, ds: "BroadcastStream") -> "BroadcastConnectedStream":
        """Connect with a ``BroadcastStream``; ``process`` then takes a ``BroadcastProcessFunction``."""
        if not isinstance(ds, BroadcastStream):
            raise NotImplementedError("connect() supports a BroadcastStream (stream.broadcast(descriptor)); "
                                      "connecting two DataStreams (ConnectedStreams) is not supported")
        return BroadcastConnectedStream(self, ds)

    def sink_to(self, sink) -> "DataStreamSink":
        return DataStreamSink(self._add(OperatorKind.SINK, sink.name, spec=sink))

    def add_sink(self, sink_func: SinkFunction) -> "DataStreamSink":
        from keyspan.connectors.driver_sinks import FunctionSink

        if getattr(sink_func, "runs_in_task", False):  # a connector sink under its legacy name (FlinkKafkaProducer)
            return self.sink_to(sink_func)
        return self.sink_to(FunctionSink(sink_func))

    def print(self, sink_identifier: str | None = None) -> "DataStreamSink":
        from keyspan.connectors.driver_sinks import PrintSink

        return self.sink_to(PrintSink(sink_identifier))

    def execute_and_collect(self, job_execution_name: str | None = None, limit: int | None = None):
        """Run the (bounded) job and return its results: a list with ``limit``, else a closeable iterator."""
        from keyspan.connectors.driver_sinks import CollectSink, CloseableIterator

        sink = CollectSink()
        self.sink_to(sink)
        self._env._execute_fresh(job_execution_name or "collect")
        results = sink.results()
        if limit is not None:
            return results[:limit]
        return CloseableIterator(results)


class KeyedStream(DataStream):
    def __init__(self, origin: DataStream, key_selector, key_type=None):
        super().__init__(origin._env, origin._t)
        self._origin = origin
        self._key_selector = key_selector
        self._key_type = key_type

    def _keyed(self, function: KeyedProcessFunction, name: str, output_type=None) -> DataStream:
        t = self._add(OperatorKind.KEYED_PROCESS, name, function, output_type, key_selector=self._key_selector)
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
        return self._keyed(_KeyedReduce(_aggregation("sum", position_to_sum)), "Sum", self._t.output_type)

    def min(self, position_to_min: Union[int, str] = 0) -> DataStream:
        return self._keyed(_KeyedReduce(_aggregation("min", position_to_min)), "Min", self._t.output_type)

    def max(self, position_to_max: Union[int, str] = 0) -> DataStream:
        return self._keyed(_KeyedReduce(_aggregation("max", position_to_max)), "Max", self._t.output_type)

    def min_by(self, position_to_min_by: Union[int, str] = 0) -> DataStream:
        return self._keyed(_KeyedReduce(_aggregation("min_by", position_to_min_by)), "MinBy", self._t.output_type)

    def max_by(self, position_to_max_by: Union[int, str] = 0) -> DataStream:
        return self._keyed(_KeyedReduce(_aggregation("max_by", position_to_max_by)), "MaxBy", self._t.output_type)

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

    def connect(self, ds: "BroadcastStream") -> "BroadcastConnectedStream":
        """Connect with a ``BroadcastStream``; ``process`` then takes a ``KeyedBroadcastProcessFunction``."""
        if not isinstance(ds, BroadcastStream):
            raise NotImplementedError("connect() supports a BroadcastStream (stream.broadcast(descriptor)); "
                                      "connecting two DataStreams (ConnectedStreams) is not supported")
        return BroadcastConnectedStream(self, ds)

    def name(self, name):
        raise Exception("Set name for KeyedStream is not supported.")

    def uid(self, uid):
        raise Exception("Set uid for KeyedStream is not supported.")

    def set_parallelism(self, parallelism):
        raise Exception("Set parallelism for KeyedStream is not supported.")


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
        else:
            if not isinstance(func, BroadcastProcessFunction):
                raise TypeError("a DataStream connected with a BroadcastStream needs a BroadcastProcessFunction "
                                "(key_by(...) first for a KeyedBroadcastProcessFunction)")
            t = data._add(OperatorKind.BROADCAST_PROCESS, "Co-Process-Broadcast", func, output_type, inputs=inputs,
                          spec=descriptors)
        return DataStream(data._env, t)


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
        self._t.parallelism = parallelism
        return self
