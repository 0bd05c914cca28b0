"""Windows, window assigners and triggers with PyFlink's names (``pyflink.datastream.window``).

A window operation is ``keyed_stream.window(assigner)`` (``keyspan.datastream.window_operator``):
the assigner puts every element into zero or more windows, the trigger decides when a window's
pane is evaluated. Assigners and triggers keep no state in Python fields: what they need lives in
keyed state (triggers through ``TriggerContext.get_partitioned_state``), so windows survive epochs,
checkpoints, restores and rescaling like any other keyed state.

Times are epoch milliseconds. Sizes, slides, offsets, gaps and intervals accept
``keyspan.common.Time``/``Duration`` (anything with ``to_milliseconds()``) or a plain int of
milliseconds.
"""

from __future__ import annotations

import math
import struct
from abc import ABC, abstractmethod
from enum import Enum
from typing import Any, Collection, Generic, Iterable, TypeVar

from keyspan.common.time import Time  # noqa: F401 — PyFlink exports it from this module too
from keyspan.datastream.functions import ReduceFunction, RuntimeContext
from keyspan.state.api import ReducingState, ReducingStateDescriptor, State, StateDescriptor, ValueStateDescriptor

__all__ = [
    "Window", "TimeWindow", "CountWindow", "GlobalWindow",
    "WindowAssigner", "MergingWindowAssigner",
    "TumblingEventTimeWindows", "SlidingEventTimeWindows", "EventTimeSessionWindows",
    "DynamicEventTimeSessionWindows",
    "TumblingProcessingTimeWindows", "SlidingProcessingTimeWindows", "ProcessingTimeSessionWindows",
    "DynamicProcessingTimeSessionWindows",
    "GlobalWindows", "CountTumblingWindowAssigner", "CountSlidingWindowAssigner",
    "SessionWindowTimeGapExtractor",
    "TriggerResult", "Trigger", "EventTimeTrigger", "ProcessingTimeTrigger", "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger", "CountTrigger", "PurgingTrigger", "NeverTrigger",
    "TimeWindowSerializer", "CountWindowSerializer", "GlobalWindowSerializer", "WindowOperationDescriptor",
]

MAX_LONG_VALUE = (1 << 63) - 1
MIN_LONG_VALUE = -(1 << 63)

T = TypeVar("T")
W = TypeVar("W")
W2 = TypeVar("W2")


def _millis(value, name: str) -> int:
    """Milliseconds from a ``Time``/``Duration`` (``to_milliseconds()``) or an int."""
    if hasattr(value, "to_milliseconds"):
        return int(value.to_milliseconds())
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a Time, a Duration or an int of milliseconds, got {value!r}")
    return value


def _positive(value, name: str, owner: str) -> int:
    ms = _millis(value, name)
    if ms <= 0:
        raise ValueError(f"{owner}: {name} must be > 0, got {ms} ms")
    return ms


# --- windows -------------------------------------------------------------------------------------

class Window(ABC):
    """A finite bucket of elements; ``max_timestamp()`` is the largest timestamp it can hold."""

    __slots__ = ()

    @abstractmethod
    def max_timestamp(self) -> int: ...


class TimeWindow(Window):
    """The time interval [start, end): start inclusive, end exclusive."""

    __slots__ = ("start", "end", "_hash")

    def __init__(self, start: int, end: int):
        self.start = start
        self.end = end

    def max_timestamp(self) -> int:
        return self.end - 1

    def intersects(self, other: "TimeWindow") -> bool:
        """True if the windows overlap or touch (so that sessions separated by exactly the gap merge)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: "TimeWindow") -> "TimeWindow":
        """The smallest window covering both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
        """Start of the window of ``window_size`` ms, shifted by ``offset`` ms, that holds ``timestamp``."""
        remainder = (timestamp - offset) % window_size  # Python's % is never negative for size > 0
        return timestamp - remainder

    @staticmethod
    def merge_windows(windows: Iterable["TimeWindow"],
                      callback: "MergingWindowAssigner.MergeCallback") -> None:
        """Merge overlapping windows: ``callback.merge(to_be_merged, merge_result)`` per group of two or more."""
        merged = []
        current = None
        current_set: set = set()
        for candidate in sorted(windows, key=lambda w: (w.start, w.end)):
            if current is None:
                current, current_set = candidate, {candidate}
            elif current.intersects(candidate):
                current = current.cover(candidate)
                current_set.add(candidate)
            else:
                merged.append((current, current_set))
                current, current_set = candidate, {candidate}
        if current is not None:
            merged.append((current, current_set))
        for merge_result, merge_set in merged:
            if len(merge_set) > 1:
                callback.merge(merge_set, merge_result)

    def __eq__(self, other):
        return type(other) is TimeWindow and other.start == self.start and other.end == self.end

    def __hash__(self):
        # kept once computed: a window is looked up in state several times from opening to firing
        try:
            return self._hash
        except AttributeError:
            self._hash = h = hash((self.start, self.end))
            return h

    def __lt__(self, other: "TimeWindow"):
        if not isinstance(other, TimeWindow):
            raise TypeError(f"cannot compare a TimeWindow with {other!r}")
        return (self.start, self.end) < (other.start, other.end)

    def __le__(self, other: "TimeWindow"):
        return self == other or self < other

    def __reduce__(self):
        return TimeWindow, (self.start, self.end)

    def __repr__(self):
        return f"TimeWindow(start={self.start}, end={self.end})"


class CountWindow(Window):
    """A count window, identified by its id (the n-th window of a key)."""

    __slots__ = ("id",)

    def __init__(self, id: int):  # noqa: A002 — PyFlink's parameter name
        self.id = id

    def max_timestamp(self) -> int:
        return MAX_LONG_VALUE

    def __eq__(self, other):
        return type(other) is CountWindow and other.id == self.id

    def __hash__(self):
        return hash(("CountWindow", self.id))

    def __reduce__(self):
        return CountWindow, (self.id,)

    def __repr__(self):
        return f"CountWindow(id={self.id})"


class GlobalWindow(Window):
    """The single window of ``GlobalWindows``."""

    __slots__ = ()

    @staticmethod
    def get() -> "GlobalWindow":
        return GlobalWindow()

    def max_timestamp(self) -> int:
        return MAX_LONG_VALUE

    def __eq__(self, other):
        return type(other) is GlobalWindow

    def __hash__(self):
        return 0

    def __reduce__(self):
        return GlobalWindow, ()

    def __repr__(self):
        return "GlobalWindow"


class TimeWindowSerializer:
    """PyFlink's serializer of TimeWindow (start and end as big-endian longs). keyspan pickles windows
    in state; this exists for assigners written for PyFlink that return it from get_window_serializer."""

    def serialize(self, element: TimeWindow, stream) -> None:
        stream.write(struct.pack(">qq", element.start, element.end))

    def deserialize(self, stream) -> TimeWindow:
        return TimeWindow(*struct.unpack(">qq", stream.read(16)))


class CountWindowSerializer:
    def serialize(self, element: CountWindow, stream) -> None:
        stream.write(struct.pack(">q", element.id))

    def deserialize(self, stream) -> CountWindow:
        return CountWindow(struct.unpack(">q", stream.read(8))[0])


class GlobalWindowSerializer:
    def serialize(self, element: GlobalWindow, stream) -> None:
        stream.write(b"\x00")

    def deserialize(self, stream) -> GlobalWindow:
        stream.read(1)
        return GlobalWindow.get()


# --- triggers ------------------------------------------------------------------------------------

class TriggerResult(Enum):
    """What a trigger decides for a pane: CONTINUE (nothing), FIRE (evaluate, keep the contents),
    PURGE (drop the contents), FIRE_AND_PURGE. A window without contents is never evaluated."""

    CONTINUE = (False, False)
    FIRE_AND_PURGE = (True, True)
    FIRE = (True, False)
    PURGE = (False, True)

    def is_fire(self) -> bool:
        return self.value[0]

    def is_purge(self) -> bool:
        return self.value[1]


class Trigger(ABC, Generic[T, W]):
    """Decides when a pane (the elements of one key and one window) is evaluated.

    A trigger must not keep state in fields: the same instance serves every key and window. State
    goes through ``ctx.get_partitioned_state(descriptor)`` (scoped to the key and the window), timers
    through ``ctx.register_event_time_timer``/``register_processing_time_timer``. Used with a merging
    assigner (sessions), ``can_merge()`` must be True and ``on_merge`` implemented."""

    class TriggerContext(ABC):
        @abstractmethod
        def get_current_processing_time(self) -> int: ...

        def get_metric_group(self):
            return None

        @abstractmethod
        def get_current_watermark(self) -> int: ...

        @abstractmethod
        def register_processing_time_timer(self, time: int) -> None:
            """``on_processing_time`` is called once the wall clock passes ``time``."""

        @abstractmethod
        def register_event_time_timer(self, time: int) -> None:
            """``on_event_time`` is called once the watermark reaches ``time``."""

        @abstractmethod
        def delete_processing_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def delete_event_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def get_partitioned_state(self, state_descriptor: StateDescriptor) -> State:
            """State scoped to the key and the window of the current trigger call."""

    class OnMergeContext(TriggerContext):
        @abstractmethod
        def merge_partitioned_state(self, state_descriptor: StateDescriptor) -> None:
            """Merge the (reducing, aggregating or list) state of the merged windows into the new window."""

    @abstractmethod
    def on_element(self, element: T, timestamp: int, window: W, ctx: "Trigger.TriggerContext") -> TriggerResult:
        """Called for every element added to a pane."""

    @abstractmethod
    def on_processing_time(self, time: int, window: W, ctx: "Trigger.TriggerContext") -> TriggerResult:
        """Called when a processing-time timer of this trigger fires."""

    @abstractmethod
    def on_event_time(self, time: int, window: W, ctx: "Trigger.TriggerContext") -> TriggerResult:
        """Called when an event-time timer of this trigger fires."""

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: W, ctx: "Trigger.OnMergeContext") -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support merging windows")

    @abstractmethod
    def clear(self, window: W, ctx: "Trigger.TriggerContext") -> None:
        """Delete the trigger's timers and partitioned state of ``window`` (the window is purged)."""


class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the end of the window; an element arriving for a window the
    watermark has already passed (within the allowed lateness) fires the window again at once."""

    def on_element(self, element, timestamp, window, ctx):
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window, ctx):
        # only register a timer if the watermark is not yet past the end of the merged window;
        # otherwise the window fired (or will fire at once) and the cleanup timer cleans it up
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window, ctx):
        ctx.delete_event_time_timer(window.max_timestamp())

    @staticmethod
    def create() -> "EventTimeTrigger":
        return EventTimeTrigger()

    def __repr__(self):
        return "EventTimeTrigger()"


class ProcessingTimeTrigger(Trigger):
    """Fires once the wall clock passes the end of the window."""

    def on_element(self, element, timestamp, window, ctx):
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.FIRE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window, ctx):
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window, ctx):
        ctx.delete_processing_time_timer(window.max_timestamp())

    @staticmethod
    def create() -> "ProcessingTimeTrigger":
        return ProcessingTimeTrigger()

    def __repr__(self):
        return "ProcessingTimeTrigger()"


class Min(ReduceFunction):
    def reduce(self, value1, value2):
        return min(value1, value2)


class _Sum(ReduceFunction):
    def reduce(self, value1, value2):
        return value1 + value2


class _ContinuousTrigger(Trigger):
    """Fires every ``interval`` of one time domain; the next firing time is partitioned state, so it
    merges (smallest wins) when session windows merge. Subclasses name the domain's timer calls."""

    def __init__(self, interval: int):
        self.interval = _positive(interval, "interval", type(self).__name__)
        self.state_desc = ReducingStateDescriptor("fire-time", Min())

    def _register(self, ctx, time): ...

    def _delete(self, ctx, time): ...

    def _fire_if_due(self, time, window, ctx):
        fire_timestamp = ctx.get_partitioned_state(self.state_desc)
        if fire_timestamp.get() == time:
            fire_timestamp.clear()
            self._register_next_fire_timestamp(time, window, ctx, fire_timestamp)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def _start(self, time, window, ctx):
        fire_timestamp = ctx.get_partitioned_state(self.state_desc)
        if fire_timestamp.get() is None:
            self._register_next_fire_timestamp(time - (time % self.interval), window, ctx, fire_timestamp)

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window, ctx):
        ctx.merge_partitioned_state(self.state_desc)
        next_fire = ctx.get_partitioned_state(self.state_desc).get()
        if next_fire is not None:
            self._register(ctx, next_fire)

    def clear(self, window, ctx):
        fire_timestamp = ctx.get_partitioned_state(self.state_desc)
        timestamp = fire_timestamp.get()
        if timestamp is not None:
            self._delete(ctx, timestamp)
            fire_timestamp.clear()

    def _register_next_fire_timestamp(self, time, window, ctx, fire_timestamp: ReducingState):
        next_fire = min(time + self.interval, window.max_timestamp())
        fire_timestamp.add(next_fire)
        self._register(ctx, next_fire)

    def __repr__(self):
        return f"{type(self).__name__}({self.interval})"


class ContinuousEventTimeTrigger(_ContinuousTrigger):
    """Fires repeatedly every ``interval`` of event time (aligned to multiples of the interval), and
    at the end of the window."""

    @staticmethod
    def of(interval) -> "ContinuousEventTimeTrigger":
        return ContinuousEventTimeTrigger(_millis(interval, "interval"))

    def _register(self, ctx, time):
        ctx.register_event_time_timer(time)

    def _delete(self, ctx, time):
        ctx.delete_event_time_timer(time)

    def on_element(self, element, timestamp, window, ctx):
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # the watermark is already past the window: fire at once
        ctx.register_event_time_timer(window.max_timestamp())
        self._start(timestamp, window, ctx)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        return self._fire_if_due(time, window, ctx)


class ContinuousProcessingTimeTrigger(_ContinuousTrigger):
    """Fires repeatedly every ``interval`` of processing (wall-clock) time."""

    @staticmethod
    def of(interval) -> "ContinuousProcessingTimeTrigger":
        return ContinuousProcessingTimeTrigger(_millis(interval, "interval"))

    def _register(self, ctx, time):
        ctx.register_processing_time_timer(time)

    def _delete(self, ctx, time):
        ctx.delete_processing_time_timer(time)

    def on_element(self, element, timestamp, window, ctx):
        self._start(ctx.get_current_processing_time(), window, ctx)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return self._fire_if_due(time, window, ctx)

    def on_event_time(self, time, window, ctx):
        return TriggerResult.CONTINUE


class PurgingTrigger(Trigger):
    """Turns another trigger's FIRE into FIRE_AND_PURGE."""

    def __init__(self, nested_trigger: Trigger):
        if not isinstance(nested_trigger, Trigger):
            raise TypeError(f"PurgingTrigger needs a Trigger, got {type(nested_trigger).__name__}")
        self.nested_trigger = nested_trigger

    @staticmethod
    def of(nested_trigger: Trigger) -> "PurgingTrigger":
        return PurgingTrigger(nested_trigger)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    def on_element(self, element, timestamp, window, ctx):
        return self._purging(self.nested_trigger.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time, window, ctx):
        return self._purging(self.nested_trigger.on_event_time(time, window, ctx))

    def on_processing_time(self, time, window, ctx):
        return self._purging(self.nested_trigger.on_processing_time(time, window, ctx))

    def clear(self, window, ctx):
        self.nested_trigger.clear(window, ctx)

    def can_merge(self) -> bool:
        return self.nested_trigger.can_merge()

    def on_merge(self, window, ctx):
        self.nested_trigger.on_merge(window, ctx)

    def __repr__(self):
        return f"PurgingTrigger({self.nested_trigger!r})"


class CountTrigger(Trigger):
    """Fires once a pane holds ``window_size`` elements (counted since its last firing)."""

    def __init__(self, window_size: int):
        if isinstance(window_size, bool) or not isinstance(window_size, int) or window_size <= 0:
            raise ValueError(f"CountTrigger: window_size must be an int > 0, got {window_size!r}")
        self._window_size = window_size
        self._count_state_descriptor = ReducingStateDescriptor("count", _Sum())

    @staticmethod
    def of(window_size: int) -> "CountTrigger":
        return CountTrigger(window_size)

    def on_element(self, element, timestamp, window, ctx):
        count = ctx.get_partitioned_state(self._count_state_descriptor)
        count.add(1)
        if count.get() >= self._window_size:
            count.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window, ctx):
        ctx.merge_partitioned_state(self._count_state_descriptor)

    def clear(self, window, ctx):
        ctx.get_partitioned_state(self._count_state_descriptor).clear()

    def __repr__(self):
        return f"CountTrigger({self._window_size})"


class NeverTrigger(Trigger):
    """Never fires: the default trigger of ``GlobalWindows``."""

    def on_element(self, element, timestamp, window, ctx):
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window, ctx):
        pass

    def clear(self, window, ctx):
        pass

    def __repr__(self):
        return "NeverTrigger()"


# --- assigners -----------------------------------------------------------------------------------

class WindowAssigner(ABC, Generic[T, W]):
    """Assigns zero or more windows to every element."""

    class WindowAssignerContext(ABC):
        @abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abstractmethod
        def get_runtime_context(self) -> RuntimeContext: ...

    @abstractmethod
    def assign_windows(self, element: T, timestamp: int,
                       context: "WindowAssigner.WindowAssignerContext") -> Collection[W]:
        """The windows of ``element``; ``timestamp`` is its event timestamp (Long.MIN_VALUE if it has none)."""

    @abstractmethod
    def get_default_trigger(self, env) -> Trigger:
        """The trigger used unless ``WindowedStream.trigger(...)`` sets another."""

    def get_window_serializer(self):
        """PyFlink's hook for the window's serializer; keyspan pickles windows, so this is unused."""
        return None

    @abstractmethod
    def is_event_time(self) -> bool:
        """True if windows follow event time (lateness and cleanup then follow the watermark)."""


class MergingWindowAssigner(WindowAssigner[T, W]):
    """An assigner whose windows can merge (sessions)."""

    class MergeCallback(ABC, Generic[W2]):
        @abstractmethod
        def merge(self, to_be_merged: Iterable[W2], merge_result: W2) -> None: ...

    @abstractmethod
    def merge_windows(self, windows: Iterable[W], callback: "MergingWindowAssigner.MergeCallback") -> None:
        """Call ``callback.merge(to_be_merged, merge_result)`` for each set of windows that merge."""


class SessionWindowTimeGapExtractor(ABC):
    """Extracts the session gap (ms) from an element, for dynamic session windows."""

    @abstractmethod
    def extract(self, element: Any) -> int: ...


class _CallableGapExtractor(SessionWindowTimeGapExtractor):
    def __init__(self, fn):
        self._fn = fn

    def extract(self, element):
        return self._fn(element)


def _gap_extractor(extractor) -> SessionWindowTimeGapExtractor:
    if isinstance(extractor, SessionWindowTimeGapExtractor):
        return extractor
    if callable(extractor):
        return _CallableGapExtractor(extractor)
    raise TypeError(f"a session gap extractor must be a SessionWindowTimeGapExtractor or a callable, "
                    f"got {type(extractor).__name__}")


def _dynamic_gap(extractor: SessionWindowTimeGapExtractor, element) -> int:
    gap = _millis(extractor.extract(element), "session gap")
    if gap <= 0:
        raise ValueError(f"dynamic session gap must be > 0, got {gap} ms for element {element!r}")
    return gap


def _no_timestamp(assigner) -> Exception:
    return ValueError(
        f"{assigner!r}: record has no event timestamp. Event-time windows need timestamps: call "
        f"data_stream.assign_timestamps_and_watermarks(WatermarkStrategy....with_timestamp_assigner(...)) "
        f"before key_by(...).window(...), or use a processing-time assigner")


def _fmt(name: str, *parts) -> str:
    return f"{name}({', '.join(str(p) for p in parts)})"


class TumblingEventTimeWindows(WindowAssigner):
    """Non-overlapping windows of ``size`` ms by event timestamp, optionally shifted by ``offset``."""

    def __init__(self, size: int, offset: int = 0):
        self._size = _positive(size, "size", "TumblingEventTimeWindows")
        self._offset = _millis(offset, "offset")
        if abs(self._offset) >= self._size:
            raise ValueError(f"TumblingEventTimeWindows: offset must satisfy abs(offset) < size, "
                             f"got offset={self._offset} ms, size={self._size} ms")

    @staticmethod
    def of(size, offset=None) -> "TumblingEventTimeWindows":
        return TumblingEventTimeWindows(_millis(size, "size"), 0 if offset is None else _millis(offset, "offset"))

    def assign_windows(self, element, timestamp, context):
        if timestamp is None or timestamp <= MIN_LONG_VALUE:
            raise _no_timestamp(self)
        start = TimeWindow.get_window_start_with_offset(timestamp, self._offset, self._size)
        return [TimeWindow(start, start + self._size)]

    def get_default_trigger(self, env) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True

    def __repr__(self):
        return _fmt("TumblingEventTimeWindows", self._size, *([self._offset] if self._offset else []))


class TumblingProcessingTimeWindows(WindowAssigner):
    """Non-overlapping windows of ``size`` ms by the wall clock of the worker processing the element."""

    def __init__(self, size: int, offset: int = 0):
        self._size = _positive(size, "size", "TumblingProcessingTimeWindows")
        self._offset = _millis(offset, "offset")
        if abs(self._offset) >= self._size:
            raise ValueError(f"TumblingProcessingTimeWindows: offset must satisfy abs(offset) < size, "
                             f"got offset={self._offset} ms, size={self._size} ms")

    @staticmethod
    def of(size, offset=None) -> "TumblingProcessingTimeWindows":
        return TumblingProcessingTimeWindows(_millis(size, "size"),
                                             0 if offset is None else _millis(offset, "offset"))

    def assign_windows(self, element, timestamp, context):
        now = context.get_current_processing_time()
        start = TimeWindow.get_window_start_with_offset(now, self._offset, self._size)
        return [TimeWindow(start, start + self._size)]

    def get_default_trigger(self, env) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False

    def __repr__(self):
        return _fmt("TumblingProcessingTimeWindows", self._size, *([self._offset] if self._offset else []))


def _sliding_windows(timestamp: int, size: int, slide: int, offset: int) -> list:
    last_start = TimeWindow.get_window_start_with_offset(timestamp, offset, slide)
    return [TimeWindow(start, start + size) for start in range(last_start, timestamp - size, -slide)]


class SlidingEventTimeWindows(WindowAssigner):
    """Windows of ``size`` ms starting every ``slide`` ms, by event timestamp; an element belongs to
    about size/slide windows."""

    def __init__(self, size: int, slide: int, offset: int = 0):
        self._size = _positive(size, "size", "SlidingEventTimeWindows")
        self._slide = _positive(slide, "slide", "SlidingEventTimeWindows")
        self._offset = _millis(offset, "offset")
        if abs(self._offset) >= self._slide:
            raise ValueError(f"SlidingEventTimeWindows: offset must satisfy abs(offset) < slide, "
                             f"got offset={self._offset} ms, slide={self._slide} ms")
        self._pane_size = math.gcd(self._size, self._slide)

    @staticmethod
    def of(size, slide, offset=None) -> "SlidingEventTimeWindows":
        return SlidingEventTimeWindows(_millis(size, "size"), _millis(slide, "slide"),
                                       0 if offset is None else _millis(offset, "offset"))

    def assign_windows(self, element, timestamp, context):
        if timestamp is None or timestamp <= MIN_LONG_VALUE:
            raise _no_timestamp(self)
        return _sliding_windows(timestamp, self._size, self._slide, self._offset)

    def get_default_trigger(self, env) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True

    def __repr__(self):
        return _fmt("SlidingEventTimeWindows", self._size, self._slide, *([self._offset] if self._offset else []))


class SlidingProcessingTimeWindows(WindowAssigner):
    """Windows of ``size`` ms starting every ``slide`` ms, by the wall clock."""

    def __init__(self, size: int, slide: int, offset: int = 0):
        self._size = _positive(size, "size", "SlidingProcessingTimeWindows")
        self._slide = _positive(slide, "slide", "SlidingProcessingTimeWindows")
        self._offset = _millis(offset, "offset")
        if abs(self._offset) >= self._slide:
            raise ValueError(f"SlidingProcessingTimeWindows: offset must satisfy abs(offset) < slide, "
                             f"got offset={self._offset} ms, slide={self._slide} ms")
        self._pane_size = math.gcd(self._size, self._slide)

    @staticmethod
    def of(size, slide, offset=None) -> "SlidingProcessingTimeWindows":
        return SlidingProcessingTimeWindows(_millis(size, "size"), _millis(slide, "slide"),
                                            0 if offset is None else _millis(offset, "offset"))

    def assign_windows(self, element, timestamp, context):
        return _sliding_windows(context.get_current_processing_time(), self._size, self._slide, self._offset)

    def get_default_trigger(self, env) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False

    def __repr__(self):
        return _fmt("SlidingProcessingTimeWindows", self._size, self._slide,
                    *([self._offset] if self._offset else []))


class EventTimeSessionWindows(MergingWindowAssigner):
    """Sessions by event time: an element opens [ts, ts + gap); windows that overlap or touch merge."""

    def __init__(self, session_gap: int):
        self._session_gap = _positive(session_gap, "session_gap", "EventTimeSessionWindows")

    @staticmethod
    def with_gap(size) -> "EventTimeSessionWindows":
        return EventTimeSessionWindows(_millis(size, "size"))

    @staticmethod
    def with_dynamic_gap(extractor) -> "DynamicEventTimeSessionWindows":
        return DynamicEventTimeSessionWindows(extractor)

    def merge_windows(self, windows, callback):
        TimeWindow.merge_windows(windows, callback)

    def assign_windows(self, element, timestamp, context):
        if timestamp is None or timestamp <= MIN_LONG_VALUE:
            raise _no_timestamp(self)
        return [TimeWindow(timestamp, timestamp + self._session_gap)]

    def get_default_trigger(self, env) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True

    def __repr__(self):
        return _fmt("EventTimeSessionWindows", self._session_gap)


class DynamicEventTimeSessionWindows(MergingWindowAssigner):
    """Event-time sessions whose gap the extractor computes per element."""

    def __init__(self, session_window_time_gap_extractor):
        self._session_window_time_gap_extractor = _gap_extractor(session_window_time_gap_extractor)

    @staticmethod
    def with_dynamic_gap(extractor) -> "DynamicEventTimeSessionWindows":
        return DynamicEventTimeSessionWindows(extractor)

    def merge_windows(self, windows, callback):
        TimeWindow.merge_windows(windows, callback)

    def assign_windows(self, element, timestamp, context):
        if timestamp is None or timestamp <= MIN_LONG_VALUE:
            raise _no_timestamp(self)
        return [TimeWindow(timestamp, timestamp + _dynamic_gap(self._session_window_time_gap_extractor, element))]

    def get_default_trigger(self, env) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True

    def __repr__(self):
        return "DynamicEventTimeSessionWindows()"


class ProcessingTimeSessionWindows(MergingWindowAssigner):
    """Sessions by the wall clock: an element opens [now, now + gap)."""

    def __init__(self, session_gap: int):
        self._session_gap = _positive(session_gap, "session_gap", "ProcessingTimeSessionWindows")

    @staticmethod
    def with_gap(size) -> "ProcessingTimeSessionWindows":
        return ProcessingTimeSessionWindows(_millis(size, "size"))

    @staticmethod
    def with_dynamic_gap(extractor) -> "DynamicProcessingTimeSessionWindows":
        return DynamicProcessingTimeSessionWindows(extractor)

    def merge_windows(self, windows, callback):
        TimeWindow.merge_windows(windows, callback)

    def assign_windows(self, element, timestamp, context):
        now = context.get_current_processing_time()
        return [TimeWindow(now, now + self._session_gap)]

    def get_default_trigger(self, env) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False

    def __repr__(self):
        return _fmt("ProcessingTimeSessionWindows", self._session_gap)


class DynamicProcessingTimeSessionWindows(MergingWindowAssigner):
    """Processing-time sessions whose gap the extractor computes per element."""

    def __init__(self, session_window_time_gap_extractor):
        self._session_window_time_gap_extractor = _gap_extractor(session_window_time_gap_extractor)

    @staticmethod
    def with_dynamic_gap(extractor) -> "DynamicProcessingTimeSessionWindows":
        return DynamicProcessingTimeSessionWindows(extractor)

    def merge_windows(self, windows, callback):
        TimeWindow.merge_windows(windows, callback)

    def assign_windows(self, element, timestamp, context):
        now = context.get_current_processing_time()
        return [TimeWindow(now, now + _dynamic_gap(self._session_window_time_gap_extractor, element))]

    def get_default_trigger(self, env) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False

    def __repr__(self):
        return "DynamicProcessingTimeSessionWindows()"


class GlobalWindows(WindowAssigner):
    """Every element goes to the one ``GlobalWindow``; its default trigger never fires, so set one."""

    def assign_windows(self, element, timestamp, context):
        return [GlobalWindow.get()]

    @staticmethod
    def create() -> "GlobalWindows":
        return GlobalWindows()

    def get_default_trigger(self, env) -> Trigger:
        return NeverTrigger()

    def is_event_time(self) -> bool:
        return False

    def __repr__(self):
        return "GlobalWindows()"


def _count_arg(value, name: str, owner: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}: {name} must be an int number of elements, got {value!r}")
    if value <= 0:
        raise ValueError(f"{owner}: {name} must be > 0, got {value}")
    return value


class _CountAssigner(WindowAssigner):
    """Count windows number a key's elements 0, 1, 2, … in a ValueState (as PyFlink does)."""

    def _next_index(self, context) -> int:
        state = context.get_runtime_context().get_state(self._count_descriptor)
        index = state.value() or 0
        state.update(index + 1)
        return index

    def get_default_trigger(self, env) -> Trigger:
        return CountTrigger(self._window_size)

    def is_event_time(self) -> bool:
        return False

    def _complete_window(self, index: int):
        """The window that the element number ``index`` completes (no later element joins it), or None."""
        raise NotImplementedError


class CountTumblingWindowAssigner(_CountAssigner):
    """Element n of a key goes to ``CountWindow(n // window_size)``; with the default
    ``CountTrigger(window_size)`` each window fires once, when it is full."""

    def __init__(self, window_size: int):
        self._window_size = _count_arg(window_size, "window_size", "CountTumblingWindowAssigner")
        self._count_descriptor = ValueStateDescriptor("tumble-count-assigner")

    @staticmethod
    def of(window_size: int) -> "CountTumblingWindowAssigner":
        return CountTumblingWindowAssigner(window_size)

    def assign_windows(self, element, timestamp, context):
        return [CountWindow(self._next_index(context) // self._window_size)]

    def _complete_window(self, index: int):
        if index % self._window_size == self._window_size - 1:
            return CountWindow(index // self._window_size)
        return None

    def __repr__(self):
        return f"CountTumblingWindowAssigner({self._window_size})"


class CountSlidingWindowAssigner(_CountAssigner):
    """Window k holds a key's elements k·slide … k·slide + size − 1; with the default
    ``CountTrigger(window_size)`` each window fires once, when it is full, i.e. every ``window_slide``
    elements once ``window_size`` elements have arrived, over the last ``window_size`` elements."""

    def __init__(self, window_size: int, window_slide: int):
        self._window_size = _count_arg(window_size, "window_size", "CountSlidingWindowAssigner")
        self._window_slide = _count_arg(window_slide, "window_slide", "CountSlidingWindowAssigner")
        self._count_descriptor = ValueStateDescriptor("slide-count-assigner")

    @staticmethod
    def of(window_size: int, window_slide: int) -> "CountSlidingWindowAssigner":
        return CountSlidingWindowAssigner(window_size, window_slide)

    def assign_windows(self, element, timestamp, context):
        index = self._next_index(context)
        last_id = index // self._window_slide
        windows = []
        window_id = last_id
        while window_id >= 0 and window_id * self._window_slide + self._window_size - 1 >= index:
            windows.append(CountWindow(window_id))
            window_id -= 1
        return windows

    def _complete_window(self, index: int):
        first = index - (self._window_size - 1)
        if first >= 0 and first % self._window_slide == 0:
            return CountWindow(first // self._window_slide)
        return None

    def __repr__(self):
        return f"CountSlidingWindowAssigner({self._window_size}, {self._window_slide})"


class WindowOperationDescriptor(object):
    """What a window operation is, as plain data (PyFlink's ``WindowOperationDescriptor``): the API
    (``WindowedStream``) produces it, the runtime builds its window operator from it
    (``keyspan.runtime.operators.window``).

    ``window_state_descriptor`` says how a pane keeps its elements: a ``ReducingStateDescriptor``
    (``reduce``), an ``AggregatingStateDescriptor`` (``aggregate``) or a ``ListStateDescriptor``
    (``process``/``apply``), named ``window-contents``. ``window_function`` is the user's window
    function or None; ``single_value`` says that it receives the pane's one value (reduce/aggregate)."""

    def __init__(self, assigner: WindowAssigner, trigger: Trigger, allowed_lateness: int, late_data_output_tag,
                 window_state_descriptor: StateDescriptor, window_function, single_value: bool):
        self.assigner = assigner
        self.trigger = trigger
        self.allowed_lateness = allowed_lateness
        self.late_data_output_tag = late_data_output_tag
        self.window_state_descriptor = window_state_descriptor
        self.window_function = window_function
        self.single_value = single_value

    def wrapped_user_function(self):
        """The user's window function (the runtime calls CheckpointedFunction methods on it)."""
        return self.window_function

    def shipped_objects(self) -> list:
        """Every user-supplied object the operation runs (for shipping the user's modules by value)."""
        d = self.window_state_descriptor
        objects = [self.assigner, self.trigger, getattr(d, "reduce_function", None), getattr(d, "agg_function", None),
                   self.window_function]
        if isinstance(self.trigger, PurgingTrigger):
            objects.append(self.trigger.nested_trigger)
        return [o for o in objects if o is not None]

    def __repr__(self):
        return f"WindowOperationDescriptor({self.assigner!r}, {self.trigger!r})"
