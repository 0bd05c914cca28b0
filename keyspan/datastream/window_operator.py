"""``WindowedStream`` and the window operator: Flink's ``WindowOperator`` as a keyed process function.

Windows are composed from the runtime's core pieces: ``keyed_stream.window(assigner).reduce(...)``
adds an ordinary keyed-process transformation whose function is a ``WindowOperator``. All of its
state is keyed state of that operator, so checkpoints, savepoints, restores and rescaling apply
unchanged:

* ``window-contents`` — map state, window → the pane's contents: the reduced value (``reduce``), the
  accumulator (``aggregate``) or the list of elements (``process``/``apply``);
* ``window-event-timers`` / ``window-processing-timers`` — map state, timestamp → the windows that
  registered a timer at that timestamp. The runtime's timers carry no namespace (window), so the
  operator registers one runtime timer per (key, timestamp) and maps it back to its windows; a runtime
  timer is deleted only when no window needs it any more;
* ``merging-window-set`` — map state, window → state window, for merging (session) assigners, as
  Flink's ``MergingWindowSet``: a session's contents stay under the window it started as, however
  often it merges;
* ``window-trigger-<name>`` / ``window-state-<name>`` — map state, window → value: the trigger's
  ``get_partitioned_state`` and the window function's ``window_state()``, scoped to key and window.

Nothing lives in Python fields between records, so a session that spans epochs, workers or a
restore merges exactly as in one uninterrupted run.
"""

from __future__ import annotations

import copy
from typing import Callable, Iterable, Union

from keyspan.datastream.functions import (
    AggregateFunction,
    AllWindowFunction,
    KeyedProcessFunction,
    KeyedStateStore,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    ReduceFunction,
    TimeDomain,
    WindowFunction,
)
from keyspan.datastream.output_tag import OutputTag
from keyspan.datastream.window import (
    MAX_LONG_VALUE,
    MIN_LONG_VALUE,
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    MergingWindowAssigner,
    PurgingTrigger,
    Trigger,
    WindowAssigner,
    _CountAssigner,
    _millis,
)
from keyspan.state.api import AggregatingState, ListState, MapState, MapStateDescriptor, ReducingState, ValueState

__all__ = ["WindowedStream", "AllWindowedStream", "WindowOperator", "count_window", "count_window_all"]

_IMMUTABLE = frozenset((int, float, str, bytes, bool, type(None), complex))


def _private(value):
    """A copy the caller may mutate: state values are shared with the backend's undo log (heap)."""
    if type(value) in _IMMUTABLE or (type(value) is tuple and all(type(v) in _IMMUTABLE for v in value)):
        return value
    return copy.deepcopy(value)


def _reducer(reduce_function) -> Callable:
    return getattr(reduce_function, "reduce", reduce_function)


# --- state scoped to key and window: one map state keyed by window ------------------------------------

class _Namespaced:
    """A state kind over a map state whose keys are windows (Flink's namespaces)."""

    mergeable = False

    def __init__(self, map_state: MapState, descriptor=None):
        self._m = map_state
        self._descriptor = descriptor

    def get_ns(self, window):
        return self._m.get(window)

    def clear_ns(self, window) -> None:
        self._m.remove(window)

    def merge_ns(self, target, sources) -> None:
        raise TypeError(f"state '{self._descriptor.name if self._descriptor else '?'}' is not a merging state "
                        f"(list, reducing or aggregating) and cannot be merged")

    def _merge_values(self, target, sources, combine, private=_private):
        """Flink's ``mergeNamespaces``: combine the sources' values (removing them), then the target's
        value with that. ``private`` copies a value before ``combine`` may change it in place."""
        merged = None
        for source in sources:
            value = self._m.get(source)
            if value is None:
                continue
            self._m.remove(source)
            merged = value if merged is None else combine(private(merged), value)
        if merged is not None:
            current = self._m.get(target)
            self._m.put(target, merged if current is None else combine(private(current), merged))


class _NsValue(_Namespaced):
    def bind(self, window):
        return _BoundValue(self, window)


class _NsList(_Namespaced):
    mergeable = True

    def get_ns(self, window):
        """The elements, or None when there are none (Flink: an empty list state reads as null)."""
        return self._m.get(window) or None

    def add_ns(self, window, value) -> None:
        if value is None:
            raise ValueError("cannot add None to a list state")
        current = self._m.get(window)
        self._m.put(window, [value] if current is None else [*current, value])

    def add_all_ns(self, window, values) -> None:
        values = list(values or ())
        if any(v is None for v in values):
            raise ValueError("cannot add None to a list state")
        if values:
            self._m.put(window, [*(self._m.get(window) or ()), *values])

    def update_ns(self, window, values) -> None:
        values = list(values or ())
        if values:
            self._m.put(window, values)
        else:
            self._m.remove(window)

    def merge_ns(self, target, sources) -> None:
        self._merge_values(target, sources, lambda a, b: [*a, *b], private=lambda v: v)

    def bind(self, window):
        return _BoundList(self, window)


class _NsReducing(_Namespaced):
    mergeable = True

    def __init__(self, map_state, descriptor=None, reduce_function=None):
        super().__init__(map_state, descriptor)
        self._reduce = _reducer(reduce_function if reduce_function is not None else descriptor.reduce_function)

    def add_ns(self, window, value) -> None:
        current = self._m.get(window)
        self._m.put(window, value if current is None else self._reduce(_private(current), value))

    def merge_ns(self, target, sources) -> None:
        self._merge_values(target, sources, self._reduce)

    def bind(self, window):
        return _BoundReducing(self, window)


class _NsAggregating(_Namespaced):
    mergeable = True

    def __init__(self, map_state, descriptor=None, agg_function=None):
        super().__init__(map_state, descriptor)
        self._agg = agg_function if agg_function is not None else descriptor.agg_function

    def get_ns(self, window):
        acc = self._m.get(window)
        return None if acc is None else self._agg.get_result(acc)

    def add_ns(self, window, value) -> None:
        acc = self._m.get(window)
        acc = self._agg.create_accumulator() if acc is None else _private(acc)
        self._m.put(window, self._agg.add(value, acc))

    def merge_ns(self, target, sources) -> None:
        self._merge_values(target, sources, self._agg.merge)

    def bind(self, window):
        return _BoundAggregating(self, window)


class _NsMap(_Namespaced):
    def bind(self, window):
        return _BoundMap(self, window)


class _BoundValue(ValueState):
    __slots__ = ("_ns", "_w")

    def __init__(self, ns, window):
        self._ns, self._w = ns, window

    def value(self):
        return self._ns.get_ns(self._w)

    def update(self, value) -> None:
        if value is None:
            self._ns.clear_ns(self._w)
        else:
            self._ns._m.put(self._w, value)

    def clear(self) -> None:
        self._ns.clear_ns(self._w)


class _BoundList(ListState):
    __slots__ = ("_ns", "_w")

    def __init__(self, ns, window):
        self._ns, self._w = ns, window

    def get(self):
        return list(self._ns.get_ns(self._w) or ())

    def add(self, value) -> None:
        self._ns.add_ns(self._w, value)

    def add_all(self, values) -> None:
        self._ns.add_all_ns(self._w, values)

    def update(self, values) -> None:
        self._ns.update_ns(self._w, values)

    def clear(self) -> None:
        self._ns.clear_ns(self._w)


class _BoundReducing(ReducingState):
    __slots__ = ("_ns", "_w")

    def __init__(self, ns, window):
        self._ns, self._w = ns, window

    def get(self):
        return self._ns.get_ns(self._w)

    def add(self, value) -> None:
        self._ns.add_ns(self._w, value)

    def clear(self) -> None:
        self._ns.clear_ns(self._w)


class _BoundAggregating(_BoundReducing, AggregatingState):
    __slots__ = ()


class _BoundMap(MapState):
    __slots__ = ("_ns", "_w")

    def __init__(self, ns, window):
        self._ns, self._w = ns, window

    def _map(self) -> dict:
        return self._ns._m.get(self._w) or {}

    def _write(self, m: dict) -> None:
        if m:
            self._ns._m.put(self._w, m)
        else:
            self._ns.clear_ns(self._w)

    def get(self, key):
        return self._map().get(key)

    def put(self, key, value) -> None:
        m = dict(self._map())
        m[key] = value
        self._write(m)

    def put_all(self, dict_value) -> None:
        m = dict(self._map())
        m.update(dict_value)
        self._write(m)

    def remove(self, key) -> None:
        m = self._map()
        if key in m:
            m = dict(m)
            del m[key]
            self._write(m)

    def contains(self, key) -> bool:
        return key in self._map()

    def items(self):
        return list(self._map().items())

    def keys(self):
        return list(self._map().keys())

    def values(self):
        return list(self._map().values())

    def is_empty(self) -> bool:
        return not self._map()

    def clear(self) -> None:
        self._ns.clear_ns(self._w)


_KINDS = {"value": _NsValue, "list": _NsList, "map": _NsMap, "reducing": _NsReducing, "aggregating": _NsAggregating}


class _NamespacedStates:
    """Per-window states of one operator, each kept in a map state named ``prefix + descriptor name``."""

    def __init__(self, runtime_context, prefix: str):
        self._rc = runtime_context
        self._prefix = prefix
        self._states: dict[str, _Namespaced] = {}

    def get(self, descriptor) -> _Namespaced:
        ns = self._states.get(descriptor.name)
        if ns is None:
            cls = _KINDS.get(descriptor.kind)
            if cls is None:
                raise TypeError(f"unsupported state descriptor {descriptor!r}")
            map_state = self._rc.get_map_state(MapStateDescriptor(self._prefix + descriptor.name))
            ns = self._states[descriptor.name] = cls(map_state, descriptor)
        elif type(ns) is not _KINDS.get(descriptor.kind):
            raise ValueError(f"per-window state '{descriptor.name}' is already registered as another kind of state, "
                             f"cannot use it as {descriptor.kind} state")
        return ns


# --- contexts ----------------------------------------------------------------------------------------

class _TriggerContext(Trigger.OnMergeContext):
    """What a trigger sees: clocks, timers and state of the current key and ``window``."""

    def __init__(self, op: "WindowOperator"):
        self._op = op
        self.window = None
        self.merged_windows = None

    def get_current_processing_time(self) -> int:
        return self._op._timer_service.current_processing_time()

    def get_metric_group(self):
        return self._op._runtime_context.get_metrics_group()  # observability

    def get_current_watermark(self) -> int:
        return self._op._timer_service.current_watermark()

    def register_processing_time_timer(self, time: int) -> None:
        self._op._register_timer(False, time, self.window)

    def register_event_time_timer(self, time: int) -> None:
        self._op._register_timer(True, time, self.window)

    def delete_processing_time_timer(self, time: int) -> None:
        self._op._delete_timer(False, time, self.window)

    def delete_event_time_timer(self, time: int) -> None:
        self._op._delete_timer(True, time, self.window)

    def get_partitioned_state(self, state_descriptor):
        return self._op._trigger_states.get(state_descriptor).bind(self.window)

    def merge_partitioned_state(self, state_descriptor) -> None:
        if self.merged_windows:
            ns = self._op._trigger_states.get(state_descriptor)
            if not ns.mergeable:
                raise TypeError(f"trigger state '{state_descriptor.name}' is not a merging state "
                                f"(list, reducing or aggregating) and cannot be merged")
            ns.merge_ns(self.window, list(self.merged_windows))


class _WindowStateStore(KeyedStateStore):
    def __init__(self, op: "WindowOperator", window):
        self._op = op
        self._window = window

    def _get(self, descriptor):
        if self._op._merging:
            raise RuntimeError("Per-window state is not allowed when using merging windows.")
        return self._op._window_states.get(descriptor).bind(self._window)

    def get_state(self, state_descriptor):
        return self._get(state_descriptor)

    def get_list_state(self, state_descriptor):
        return self._get(state_descriptor)

    def get_map_state(self, state_descriptor):
        return self._get(state_descriptor)

    def get_reducing_state(self, state_descriptor):
        return self._get(state_descriptor)

    def get_aggregating_state(self, state_descriptor):
        return self._get(state_descriptor)


class _ProcessContext(ProcessWindowFunction.Context, ProcessAllWindowFunction.Context):
    def __init__(self, op: "WindowOperator"):
        self._op = op
        self._window = None

    def window(self):
        return self._window

    def current_processing_time(self) -> int:
        return self._op._timer_service.current_processing_time()

    def current_watermark(self) -> int:
        return self._op._timer_service.current_watermark()

    def window_state(self) -> KeyedStateStore:
        return _WindowStateStore(self._op, self._window)

    def global_state(self) -> KeyedStateStore:
        return self._op._runtime_context


class _AssignerContext(WindowAssigner.WindowAssignerContext):
    def __init__(self, op: "WindowOperator"):
        self._op = op

    def get_current_processing_time(self) -> int:
        return self._op._timer_service.current_processing_time()

    def get_runtime_context(self):
        return self._op._runtime_context


# --- window functions: what a firing emits -------------------------------------------------------------

class _InternalWindowFunction:
    """Calls the user's window function on a pane: ``single`` panes (reduce/aggregate) hold one value."""

    def __init__(self, function, single: bool):
        self.function = function
        self.single = single

    def open(self, runtime_context):
        if self.function is not None:
            self.function.open(runtime_context)

    def close(self):
        if self.function is not None:
            self.function.close()

    def process(self, key, window, context: _ProcessContext, contents) -> Iterable:
        inputs = [contents] if self.single else contents
        fn = self.function
        if fn is None:
            return inputs
        if isinstance(fn, ProcessWindowFunction):
            context._window = window
            return fn.process(key, context, inputs)
        if isinstance(fn, WindowFunction):
            return fn.apply(key, window, inputs)
        if isinstance(fn, ProcessAllWindowFunction):
            context._window = window
            return fn.process(context, inputs)
        return fn.apply(window, inputs)  # AllWindowFunction

    def clear(self, window, context: _ProcessContext) -> None:
        if isinstance(self.function, (ProcessWindowFunction, ProcessAllWindowFunction)):
            context._window = window
            self.function.clear(context)


# --- merging windows: Flink's MergingWindowSet over map state --------------------------------------------

class _MergingWindowSet:
    """The in-flight windows of a merging assigner for the current key: window → state window, where
    the state window is the window under which the contents are kept (it never changes when a window
    merges, so merging does not move contents that are already there)."""

    def __init__(self, assigner: MergingWindowAssigner, state: MapState):
        self._assigner = assigner
        self._state = state
        self._mapping = dict(state.items())
        self._initial = dict(self._mapping)

    def persist(self) -> None:
        if self._mapping != self._initial:
            for window in self._initial.keys() - self._mapping.keys():
                self._state.remove(window)
            for window, state_window in self._mapping.items():
                if self._initial.get(window) != state_window:
                    self._state.put(window, state_window)
            self._initial = dict(self._mapping)

    def get_state_window(self, window):
        return self._mapping.get(window)

    def retire_window(self, window) -> None:
        if self._mapping.pop(window, None) is None:
            raise RuntimeError(f"Window {window} is not in in-flight window set.")

    def add_window(self, new_window, merge_function) -> object:
        """Add ``new_window``, merging it with in-flight windows; returns the window it ends up in."""
        merge_results: list = []

        class _Collect(MergingWindowAssigner.MergeCallback):
            def merge(self, to_be_merged, merge_result):
                merge_results.append((merge_result, list(to_be_merged)))

        self._assigner.merge_windows([*self._mapping.keys(), new_window], _Collect())

        result_window = new_window
        merged_new_window = False
        for merge_result, merged_windows in merge_results:
            if new_window in merged_windows:
                merged_new_window = True
                merged_windows.remove(new_window)
                result_window = merge_result
            # the state window of any merged window becomes the state window of the merge result
            merged_state_window = self._mapping[merged_windows[0]]
            merged_state_windows = [self._mapping.pop(w) for w in merged_windows if w in self._mapping]
            self._mapping[merge_result] = merged_state_window
            merged_state_windows.remove(merged_state_window)
            # nothing to merge if one pre-existing window merely absorbed the new window
            if not (merge_result in merged_windows and len(merged_windows) == 1):
                merge_function(merge_result, merged_windows, self._mapping[merge_result], merged_state_windows)
        if not merge_results or (result_window == new_window and not merged_new_window):
            self._mapping[result_window] = result_window
        return result_window


# --- the operator ------------------------------------------------------------------------------------------

class WindowOperator(KeyedProcessFunction):
    """Flink's ``WindowOperator`` (and PyFlink's) as a keyed process function over keyspan's keyed
    state and timers. ``contents`` says how a pane keeps its elements: ``("reduce", fn)``,
    ``("aggregate", fn)`` or ``("list", None)``."""

    def __init__(self, assigner: WindowAssigner, trigger: Trigger, allowed_lateness: int,
                 late_data_output_tag: OutputTag | None, contents: tuple, window_function: _InternalWindowFunction):
        self._assigner = assigner
        self._trigger = trigger
        self._allowed_lateness = allowed_lateness if assigner.is_event_time() else 0
        self._late_tag = late_data_output_tag
        self._contents_kind, self._contents_function = contents
        self._window_function = window_function
        self._merging = isinstance(assigner, MergingWindowAssigner)
        nested = trigger.nested_trigger if isinstance(trigger, PurgingTrigger) else trigger
        # a CountTrigger only fires on elements, so once a count window is full it never fires again
        self._drop_full_count_windows = isinstance(assigner, _CountAssigner) and type(nested) is CountTrigger
        self._runtime_context = None
        self._timer_service = None
        self._key = None

    # lifecycle ---------------------------------------------------------------------------------
    def open(self, runtime_context):
        self._runtime_context = runtime_context
        contents_map = runtime_context.get_map_state(MapStateDescriptor("window-contents"))
        if self._contents_kind == "reduce":
            self._contents = _NsReducing(contents_map, reduce_function=self._contents_function)
        elif self._contents_kind == "aggregate":
            self._contents = _NsAggregating(contents_map, agg_function=self._contents_function)
        else:
            self._contents = _NsList(contents_map)
        self._timers = {
            True: runtime_context.get_map_state(MapStateDescriptor("window-event-timers")),
            False: runtime_context.get_map_state(MapStateDescriptor("window-processing-timers")),
        }
        self._merging_state = (runtime_context.get_map_state(MapStateDescriptor("merging-window-set"))
                               if self._merging else None)
        self._trigger_states = _NamespacedStates(runtime_context, "window-trigger-")
        self._window_states = _NamespacedStates(runtime_context, "window-state-")
        self._trigger_ctx = _TriggerContext(self)
        self._process_ctx = _ProcessContext(self)
        self._assigner_ctx = _AssignerContext(self)
        self._window_function.open(runtime_context)

    def close(self):
        self._window_function.close()

    def wrapped_user_function(self):
        """The user's window function (the runtime calls CheckpointedFunction methods on it)."""
        return self._window_function.function

    def shipped_objects(self) -> list:
        """Every user-supplied object this operator runs (for shipping the user's modules by value)."""
        objects = [self._assigner, self._trigger, self._contents_function, self._window_function.function]
        if isinstance(self._trigger, PurgingTrigger):
            objects.append(self._trigger.nested_trigger)
        return [o for o in objects if o is not None]

    # timers: many windows share one runtime timer per (key, timestamp, domain) ----------------
    def _register_timer(self, event_time: bool, time: int, window) -> None:
        timers = self._timers[event_time]
        windows = timers.get(time)
        if windows is None:
            timers.put(time, (window,))
            if event_time:
                self._timer_service.register_event_time_timer(time)
            else:
                self._timer_service.register_processing_time_timer(time)
        elif window not in windows:
            timers.put(time, (*windows, window))

    def _delete_timer(self, event_time: bool, time: int, window) -> None:
        timers = self._timers[event_time]
        windows = timers.get(time)
        if windows is None or window not in windows:
            return
        rest = tuple(w for w in windows if w != window)
        if rest:
            timers.put(time, rest)
            return
        timers.remove(time)
        if event_time:
            self._timer_service.delete_event_time_timer(time)
        else:
            self._timer_service.delete_processing_time_timer(time)

    # lateness and cleanup ------------------------------------------------------------------------
    def _cleanup_time(self, window) -> int:
        if self._assigner.is_event_time():
            return min(window.max_timestamp() + self._allowed_lateness, MAX_LONG_VALUE)
        return window.max_timestamp()

    def _register_cleanup_timer(self, window) -> None:
        time = self._cleanup_time(window)
        if time == MAX_LONG_VALUE:
            return  # e.g. GlobalWindow and count windows: their state is kept until the trigger purges it
        self._register_timer(self._assigner.is_event_time(), time, window)

    def _delete_cleanup_timer(self, window) -> None:
        time = self._cleanup_time(window)
        if time == MAX_LONG_VALUE:
            return
        self._delete_timer(self._assigner.is_event_time(), time, window)

    def _is_window_late(self, window) -> bool:
        return self._assigner.is_event_time() and self._cleanup_time(window) <= self._timer_service.current_watermark()

    def _is_element_late(self, timestamp: int) -> bool:
        return (self._assigner.is_event_time()
                and timestamp + self._allowed_lateness <= self._timer_service.current_watermark())

    def _clear_all_state(self, window, state_window, merging_windows) -> None:
        self._contents.clear_ns(state_window)
        tc = self._trigger_ctx
        tc.window = window
        self._trigger.clear(window, tc)
        self._window_function.clear(window, self._process_ctx)
        if merging_windows is not None:
            merging_windows.retire_window(window)

    def _emit(self, window, contents, ctx):
        """Evaluate the pane; its results carry the window's max timestamp, as in Flink."""
        results = self._window_function.process(self._key, window, self._process_ctx, contents)
        if results is None:
            return
        # keyspan's runtime stamps an emitted record with the timestamp in the context's cell (the
        # input record's, or the event-time timer's); a window result gets window.max_timestamp()
        cell = getattr(ctx, "_cell", None)
        if type(cell) is not list or not cell:
            yield from results
            return
        saved = cell[0]
        timestamp = window.max_timestamp()
        try:
            for result in results:
                cell[0] = timestamp
                yield result
        finally:
            cell[0] = saved

    # merging -------------------------------------------------------------------------------------
    def _merge(self, merge_result, merged_windows, state_window_result, merged_state_windows) -> None:
        if (self._assigner.is_event_time()
                and merge_result.max_timestamp() + self._allowed_lateness <= self._timer_service.current_watermark()):
            raise RuntimeError(f"The end timestamp of an event-time window cannot become earlier than the current "
                               f"watermark by merging. Current watermark: {self._timer_service.current_watermark()} "
                               f"window: {merge_result}")
        tc = self._trigger_ctx
        tc.window = merge_result
        tc.merged_windows = merged_windows
        try:
            self._trigger.on_merge(merge_result, tc)
        finally:
            tc.merged_windows = None
        for m in merged_windows:
            tc.window = m
            self._trigger.clear(m, tc)
            self._delete_cleanup_timer(m)
        self._contents.merge_ns(state_window_result, merged_state_windows)

    # processing ----------------------------------------------------------------------------------
    def process_element(self, value, ctx):
        self._timer_service = ctx.timer_service()
        self._key = ctx.get_current_key()
        timestamp = ctx.timestamp()
        if timestamp is None:
            timestamp = MIN_LONG_VALUE
        windows = self._assigner.assign_windows(value, timestamp, self._assigner_ctx)
        skipped = True
        tc = self._trigger_ctx
        trigger = self._trigger
        contents = self._contents
        merging_windows = _MergingWindowSet(self._assigner, self._merging_state) if self._merging else None
        for window in windows:
            if merging_windows is not None:
                actual = merging_windows.add_window(window, self._merge)
                if self._is_window_late(actual):
                    merging_windows.retire_window(actual)
                    continue
                state_window = merging_windows.get_state_window(actual)
                if state_window is None:
                    raise RuntimeError(f"Window {actual} is not in in-flight window set.")
            else:
                if self._is_window_late(window):
                    continue
                actual = state_window = window
            skipped = False
            contents.add_ns(state_window, value)
            tc.window = actual
            result = trigger.on_element(value, timestamp, actual, tc)
            if result.is_fire():
                pane = contents.get_ns(state_window)
                if pane is None:
                    continue
                yield from self._emit(actual, pane, ctx)
            if result.is_purge():
                contents.clear_ns(state_window)
            self._register_cleanup_timer(actual)
        if merging_windows is not None:
            merging_windows.persist()
        elif self._drop_full_count_windows and windows:
            # a full count window never receives another element and its count trigger has fired:
            # drop its state now (PyFlink keeps it forever, as its cleanup time is Long.MAX_VALUE)
            index = self._runtime_context.get_state(self._assigner._count_descriptor).value() - 1
            complete = self._assigner._complete_window(index)
            if complete is not None:
                self._clear_all_state(complete, complete, None)
        if skipped and self._is_element_late(timestamp):
            if self._late_tag is not None:
                yield self._late_tag, value

    def on_timer(self, timestamp, ctx):
        self._timer_service = ctx.timer_service()
        self._key = ctx.get_current_key()
        event_time = ctx.time_domain() == TimeDomain.EVENT_TIME
        timers = self._timers[event_time]
        windows = timers.get(timestamp)
        if windows is None:
            return
        timers.remove(timestamp)
        for window in windows:
            yield from self._on_window_timer(window, timestamp, event_time, ctx)

    def _on_window_timer(self, window, timestamp: int, event_time: bool, ctx):
        tc = self._trigger_ctx
        tc.window = window
        merging_windows = None
        if self._merging:
            merging_windows = _MergingWindowSet(self._assigner, self._merging_state)
            state_window = merging_windows.get_state_window(window)
            if state_window is None:
                return  # a timer of a window that no longer exists (merged away or cleaned up)
        else:
            state_window = window
        if event_time:
            result = self._trigger.on_event_time(timestamp, window, tc)
        else:
            result = self._trigger.on_processing_time(timestamp, window, tc)
        if result.is_fire():
            pane = self._contents.get_ns(state_window)
            if pane is not None:
                yield from self._emit(window, pane, ctx)
        if result.is_purge():
            self._contents.clear_ns(state_window)
        if event_time == self._assigner.is_event_time() and timestamp == self._cleanup_time(window):
            self._clear_all_state(window, state_window, merging_windows)
        if merging_windows is not None:
            merging_windows.persist()


# --- the API ----------------------------------------------------------------------------------------------

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
        return self._build(("reduce", reduce_function), _InternalWindowFunction(window_function, True), name,
                           output_type)

    def aggregate(self, aggregate_function: AggregateFunction, window_function=None, accumulator_type=None,
                  output_type=None):
        """Aggregate each window incrementally with an ``AggregateFunction`` (its ``merge`` is needed for
        session windows); with a window function, that function receives ``get_result(acc)``."""
        if not isinstance(aggregate_function, AggregateFunction):
            raise TypeError("aggregate_function should be an AggregateFunction")
        self._check_window_function(window_function)
        name = "aggregate" if window_function is None else f"aggregate, {_describe(window_function)}"
        return self._build(("aggregate", aggregate_function), _InternalWindowFunction(window_function, True), name,
                           output_type)

    def apply(self, window_function, output_type=None):
        """Evaluate each window with a ``WindowFunction`` over all its elements (kept until it fires)."""
        if not isinstance(window_function, self._function_types[0]):
            raise TypeError(f"apply() needs a {self._function_types[0].__name__}, got {type(window_function).__name__}")
        return self._build(("list", None), _InternalWindowFunction(window_function, False),
                           f"apply, {_describe(window_function)}", output_type)

    def process(self, process_window_function, output_type=None):
        """Evaluate each window with a ``ProcessWindowFunction`` over all its elements."""
        if not isinstance(process_window_function, self._function_types[1]):
            raise TypeError(f"process() needs a {self._function_types[1].__name__}, "
                            f"got {type(process_window_function).__name__}")
        return self._build(("list", None), _InternalWindowFunction(process_window_function, False),
                           f"process, {_describe(process_window_function)}", output_type)

    def _build(self, contents: tuple, window_function: _InternalWindowFunction, what: str, output_type):
        trigger = self._window_trigger
        if trigger is None:
            trigger = self._window_assigner.get_default_trigger(self.get_execution_environment())
        if isinstance(self._window_assigner, MergingWindowAssigner) and not trigger.can_merge():
            raise TypeError(f"A merging window assigner cannot be used with a trigger that does not support "
                            f"merging: {trigger!r}")
        operator = WindowOperator(self._window_assigner, trigger, self._allowed_lateness, self._late_data_output_tag,
                                  contents, window_function)
        name = f"{self._window_assigner!r} -> {what}"
        return self._keyed_stream._keyed(operator, name, output_type)


def _null_key(value):
    return 0


class AllWindowedStream(WindowedStream):
    """All elements of a stream split into windows (``window_all``): one key, so one subtask evaluates
    every window, as in Flink. Window functions are ``AllWindowFunction``/``ProcessAllWindowFunction``."""

    _function_types = (AllWindowFunction, ProcessAllWindowFunction)
    _function_error = "window_function should be a AllWindowFunction or ProcessAllWindowFunction"

    def __init__(self, data_stream, window_assigner: WindowAssigner):
        super().__init__(data_stream.key_by(_null_key), window_assigner)

    def _build(self, contents, window_function, what, output_type):
        return super()._build(contents, window_function, what, output_type).set_parallelism(1)


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
