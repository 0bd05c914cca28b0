"""``WindowedStream`` and ``AllWindowedStream``: the window API (PyFlink's
``pyflink.datastream.data_stream.WindowedStream``).

``keyed_stream.window(assigner).reduce(...)`` adds an ordinary keyed-process transformation whose
function is a ``WindowOperationDescriptor`` (``keyspan.datastream.window``); the runtime builds
Flink's window operator from it (``keyspan.runtime.operators.window``). So windows are composed
from the runtime's core pieces, and their state is keyed state like any other.
"""

from __future__ import annotations

from typing import Callable, Union

from keyspan.datastream.functions import (
    AggregateFunction,
    AllWindowFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    ReduceFunction,
    WindowFunction,
)
from keyspan.datastream.output_tag import OutputTag
from keyspan.datastream.window import (
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    MergingWindowAssigner,
    Trigger,
    WindowAssigner,
    WindowOperationDescriptor,
    _millis,
)
from keyspan.state.api import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
)

__all__ = ["WindowedStream", "AllWindowedStream", "count_window", "count_window_all"]

_CONTENTS = "window-contents"  # the state that keeps the panes


def _describe(function) -> str:
    if function is None:
        return ""
    return getattr(function, "__name__", None) or type(function).__name__


class WindowedStream:
    """A keyed stream split into windows by a ``WindowAssigner`` (from ``keyed_stream.window(...)`` or
    ``count_window(...)``); ``reduce``/``aggregate``/``process``/``apply`` turn it back into a DataStream.

    Results of a firing are emitted when the trigger fires: for the default event-time trigger, when
    the watermark passes the window's end (at the end of the epoch that advances it). Processing-time
    windows fire when the wall clock passes their end, checked at the end of each epoch; as in Flink,
    processing-time windows that have not fired when a bounded input ends are not evaluated."""

    def __init__(self, keyed_stream, window_assigner: WindowAssigner):
        if not isinstance(window_assigner, WindowAssigner):
            raise TypeError(f"window() needs a WindowAssigner, got {type(window_assigner).__name__}")
        self._keyed_stream = keyed_stream
        self._window_assigner = window_assigner
        self._allowed_lateness = 0
        self._late_data_output_tag = None
        self._window_trigger = None

    def get_execution_environment(self):
        return self._keyed_stream.get_execution_environment()

    def get_input_type(self):
        return self._keyed_stream.get_type()

    def trigger(self, trigger: Trigger) -> "WindowedStream":
        """Set the trigger that decides when windows are evaluated (instead of the assigner's default)."""
        if not isinstance(trigger, Trigger):
            raise TypeError(f"trigger() needs a Trigger, got {type(trigger).__name__}")
        if isinstance(self._window_assigner, MergingWindowAssigner) and not trigger.can_merge():
            raise TypeError(f"A merging window assigner cannot be used with a trigger that does not support "
                            f"merging: {trigger!r} (can_merge() is False)")
        self._window_trigger = trigger
        return self

    def allowed_lateness(self, time_ms) -> "WindowedStream":
        """Keep windows for ``time_ms`` (int ms or ``Time``) after the watermark passes their end: an
        element arriving meanwhile fires the window again with the updated result. Event-time windows
        only; ignored for other assigners."""
        lateness = _millis(time_ms, "allowed_lateness")
        if lateness < 0:
            raise ValueError(f"allowed_lateness must not be negative, got {lateness} ms")
        self._allowed_lateness = lateness
        return self

    def side_output_late_data(self, output_tag: OutputTag) -> "WindowedStream":
        """Send elements that arrive too late for all their windows (window end + allowed lateness at or
        before the watermark) to ``result.get_side_output(output_tag)`` instead of dropping them."""
        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"side_output_late_data needs an OutputTag, got {type(output_tag).__name__}")
        self._late_data_output_tag = output_tag
        return self

    # window functions ------------------------------------------------------------------------------
    _function_types = (WindowFunction, ProcessWindowFunction)
    _function_error = "window_function should be a WindowFunction or ProcessWindowFunction"

    def _check_window_function(self, window_function):
        if window_function is not None and not isinstance(window_function, self._function_types):
            raise TypeError(self._function_error)

    def reduce(self, reduce_function: Union[Callable, ReduceFunction], window_function=None, output_type=None):
        """Reduce each window's elements incrementally (one value per pane); with a window function,
        that function receives the reduced value as its only element."""
        if not isinstance(reduce_function, ReduceFunction) and not callable(reduce_function):
            raise TypeError("reduce_function should be a ReduceFunction or a callable")
        self._check_window_function(window_function)
        if window_function is None and output_type is None:
            output_type = self.get_input_type()
        name = "reduce" if window_function is None else f"reduce, {_describe(window_function)}"
        return self._build(ReducingStateDescriptor(_CONTENTS, reduce_function), window_function, True, name,
                           output_type)

    def aggregate(self, aggregate_function: AggregateFunction, window_function=None, accumulator_type=None,
                  output_type=None):
        """Aggregate each window incrementally with an ``AggregateFunction`` (its ``merge`` is needed for
        session windows); with a window function, that function receives ``get_result(acc)``."""
        if not isinstance(aggregate_function, AggregateFunction):
            raise TypeError("aggregate_function should be an AggregateFunction")
        self._check_window_function(window_function)
        name = "aggregate" if window_function is None else f"aggregate, {_describe(window_function)}"
        return self._build(AggregatingStateDescriptor(_CONTENTS, aggregate_function), window_function, True, name,
                           output_type)

    def apply(self, window_function, output_type=None):
        """Evaluate each window with a ``WindowFunction`` over all its elements (kept until it fires)."""
        if not isinstance(window_function, self._function_types[0]):
            raise TypeError(f"apply() needs a {self._function_types[0].__name__}, got {type(window_function).__name__}")
        return self._build(ListStateDescriptor(_CONTENTS), window_function, False,
                           f"apply, {_describe(window_function)}", output_type)

    def process(self, process_window_function, output_type=None):
        """Evaluate each window with a ``ProcessWindowFunction`` over all its elements."""
        if not isinstance(process_window_function, self._function_types[1]):
            raise TypeError(f"process() needs a {self._function_types[1].__name__}, "
                            f"got {type(process_window_function).__name__}")
        return self._build(ListStateDescriptor(_CONTENTS), process_window_function, False,
                           f"process, {_describe(process_window_function)}", output_type)

    def _build(self, contents: StateDescriptor, window_function, single_value: bool, what: str, output_type):
        trigger = self._window_trigger
        if trigger is None:
            trigger = self._window_assigner.get_default_trigger(self.get_execution_environment())
        if isinstance(self._window_assigner, MergingWindowAssigner) and not trigger.can_merge():
            raise TypeError(f"A merging window assigner cannot be used with a trigger that does not support "
                            f"merging: {trigger!r}")
        operation = WindowOperationDescriptor(self._window_assigner, trigger, self._allowed_lateness,
                                              self._late_data_output_tag, contents, window_function, single_value)
        name = f"{self._window_assigner!r} -> {what}"
        return self._keyed_stream._keyed(operation, name, output_type)


def _null_key(value):
    return 0


class AllWindowedStream(WindowedStream):
    """All elements of a stream split into windows (``window_all``): one key, so one subtask evaluates
    every window, as in Flink. Window functions are ``AllWindowFunction``/``ProcessAllWindowFunction``."""

    _function_types = (AllWindowFunction, ProcessAllWindowFunction)
    _function_error = "window_function should be a AllWindowFunction or ProcessAllWindowFunction"

    def __init__(self, data_stream, window_assigner: WindowAssigner):
        super().__init__(data_stream.key_by(_null_key), window_assigner)

    def _build(self, contents, window_function, single_value, what, output_type):
        return super()._build(contents, window_function, single_value, what, output_type).set_parallelism(1)


def count_window(keyed_stream, size: int, slide: int = 0) -> WindowedStream:
    """``KeyedStream.count_window``: tumbling count windows of ``size`` elements, or with ``slide`` > 0
    sliding ones (PyFlink's ``CountTumblingWindowAssigner``/``CountSlidingWindowAssigner``)."""
    if isinstance(slide, bool) or not isinstance(slide, int) or slide < 0:
        raise ValueError(f"count_window: slide must be an int >= 0 (0 for tumbling windows), got {slide!r}")
    if slide == 0:
        return WindowedStream(keyed_stream, CountTumblingWindowAssigner(size))
    return WindowedStream(keyed_stream, CountSlidingWindowAssigner(size, slide))


def count_window_all(data_stream, size: int, slide: int = 0) -> AllWindowedStream:
    """``DataStream.count_window_all``: count windows over the whole stream."""
    if isinstance(slide, bool) or not isinstance(slide, int) or slide < 0:
        raise ValueError(f"count_window_all: slide must be an int >= 0 (0 for tumbling windows), got {slide!r}")
    if slide == 0:
        return AllWindowedStream(data_stream, CountTumblingWindowAssigner(size))
    return AllWindowedStream(data_stream, CountSlidingWindowAssigner(size, slide))
