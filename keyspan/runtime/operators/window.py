"""Flink's ``WindowOperator`` (and PyFlink's) as a keyed process function, built by the runtime from
the ``WindowOperationDescriptor`` that ``WindowedStream`` produces.

All of its state is keyed state of its operator, so checkpoints, savepoints, restores and
rescaling apply unchanged. Per-window state is namespaced state (``keyspan.state.internal``) with
the window as namespace, each laid out as a map from window to value:

* ``window-contents`` — the panes: the reduced value (``reduce``), the accumulator (``aggregate``)
  or the list of elements (``process``/``apply``);
* timers — the runtime's timers, as in Flink's internal timer service, carry their windows: one
  timer per (key, domain, timestamp) holds the windows that registered it, and is deleted only when
  no window needs it any more. Savepoints taken before timers held windows kept them in map states
  ``window-event-timers`` / ``window-processing-timers`` (timestamp → windows) beside plain timers;
  the operator moves a timer's windows over the first time it touches that timer;
* ``merging-window-set`` — map state, window → state window, for merging (session) assigners, as
  Flink's ``MergingWindowSet``: a session's contents stay under the window it started as, however
  often it merges;
* ``window-trigger-<name>`` / ``window-state-<name>`` — the trigger's ``get_partitioned_state`` and
  the window function's ``window_state()``, scoped to key and window.

Nothing lives in Python fields between records, so a session that spans epochs, workers or a
restore merges exactly as in one uninterrupted run.
"""

from __future__ import annotations

from typing import Iterable

from keyspan.datastream.functions import (
    KeyedProcessFunction,
    KeyedStateStore,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    TimeDomain,
    WindowFunction,
)
from keyspan.datastream.window import (
    MAX_LONG_VALUE,
    CountTrigger,
    EventTimeTrigger,
    MergingWindowAssigner,
    ProcessingTimeTrigger,
    PurgingTrigger,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    Trigger,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
    WindowOperationDescriptor,
    _CountAssigner,
)
from keyspan.state.api import EVENT_TIME, PROCESSING_TIME, ListState, MapState, MapStateDescriptor, MergingState
from keyspan.state.internal import namespaced

_EVENT_TIME = TimeDomain.EVENT_TIME  # an enum member read per firing: a plain name is cheaper than its attribute
WINDOWS_KEPT = 4096  # the most window starts a fixed-size window operator keeps a shared TimeWindow for

__all__ = ["WindowOperator"]


class _PerWindowStates:
    """The per-window states of one operator: each descriptor's state, namespaced by window, under the
    name ``prefix + descriptor name``."""

    def __init__(self, runtime_context, prefix: str):
        self._rc = runtime_context
        self._prefix = prefix
        self._states: dict = {}

    def get(self, descriptor):
        known = self._states.get(descriptor.name)
        if known is None:
            scoped = namespaced(descriptor)
            scoped.name = self._prefix + descriptor.name
            known = self._states[descriptor.name] = (descriptor.kind, self._rc.get_state(scoped))
        elif known[0] != descriptor.kind:
            raise ValueError(f"per-window state '{descriptor.name}' is already registered as {known[0]} state, "
                             f"cannot use it as {descriptor.kind} state")
        return known[1]


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
        self._op._register_timer(PROCESSING_TIME, time, self.window)

    def register_event_time_timer(self, time: int) -> None:
        self._op._register_timer(EVENT_TIME, time, self.window)

    def delete_processing_time_timer(self, time: int) -> None:
        self._op._delete_timer(PROCESSING_TIME, time, self.window)

    def delete_event_time_timer(self, time: int) -> None:
        self._op._delete_timer(EVENT_TIME, time, self.window)

    def get_partitioned_state(self, state_descriptor):
        state = self._op._trigger_states.get(state_descriptor)
        state.set_current_namespace(self.window)
        return state

    def merge_partitioned_state(self, state_descriptor) -> None:
        if self.merged_windows:
            state = self._op._trigger_states.get(state_descriptor)
            if not isinstance(state, MergingState):
                raise TypeError(f"trigger state '{state_descriptor.name}' is not a merging state "
                                f"(list, reducing or aggregating) and cannot be merged")
            state.merge_namespaces(self.window, list(self.merged_windows))


class _WindowStateStore(KeyedStateStore):
    def __init__(self, op: "WindowOperator", window):
        self._op = op
        self._window = window

    def _get(self, descriptor):
        if self._op._merging:
            raise RuntimeError("Per-window state is not allowed when using merging windows.")
        state = self._op._window_states.get(descriptor)
        state.set_current_namespace(self._window)
        return state

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
        # the function's kind, told apart once: isinstance against these abstract classes costs a
        # few microseconds, and a job fires one window per key and window
        self.takes_context = isinstance(function, (ProcessWindowFunction, ProcessAllWindowFunction))
        self.keyed = isinstance(function, (ProcessWindowFunction, WindowFunction))

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
        if self.takes_context:
            context._window = window
            return fn.process(key, context, inputs) if self.keyed else fn.process(context, inputs)
        return fn.apply(key, window, inputs) if self.keyed else fn.apply(window, inputs)  # AllWindowFunction

    def clear(self, window, context: _ProcessContext) -> None:
        if self.takes_context:
            context._window = window
            self.function.clear(context)


# --- merging windows: Flink's MergingWindowSet over map state --------------------------------------------

class _CollectMerges(MergingWindowAssigner.MergeCallback):
    """The merges an assigner's ``merge_windows`` reports: (merge result, the windows it merges)."""

    def __init__(self):
        self.merges: list = []

    def merge(self, to_be_merged, merge_result):
        self.merges.append((merge_result, list(to_be_merged)))


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
        collected = _CollectMerges()
        self._assigner.merge_windows([*self._mapping.keys(), new_window], collected)
        merge_results = collected.merges

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
    state and timers, built from the API's ``WindowOperationDescriptor``."""

    def __init__(self, descriptor: WindowOperationDescriptor):
        assigner = descriptor.assigner
        trigger = descriptor.trigger
        self._descriptor = descriptor
        self._assigner = assigner
        self._trigger = trigger
        self._event_time = assigner.is_event_time()
        self._domain = EVENT_TIME if self._event_time else PROCESSING_TIME  # of the cleanup timers
        self._allowed_lateness = descriptor.allowed_lateness if self._event_time else 0
        self._late_tag = descriptor.late_data_output_tag
        self._window_function = _InternalWindowFunction(descriptor.window_function, descriptor.single_value)
        self._merging = isinstance(assigner, MergingWindowAssigner)
        nested = trigger.nested_trigger if isinstance(trigger, PurgingTrigger) else trigger
        # a CountTrigger only fires on elements, so once a count window is full it never fires again
        self._drop_full_count_windows = isinstance(assigner, _CountAssigner) and type(nested) is CountTrigger
        self._runtime_context = None
        self._timer_service = None
        self._key = None
        fixed_size = type(assigner) in (TumblingEventTimeWindows, TumblingProcessingTimeWindows,
                                        SlidingEventTimeWindows, SlidingProcessingTimeWindows)
        self._window_size = assigner._size if fixed_size else None
        self._windows: dict[int, TimeWindow] = {}
        # an EventTimeTrigger's only timer is at the window's end: once that timer fires, clearing
        # the trigger has nothing left to delete
        self._trigger_timer_only_at_end = type(trigger) is EventTimeTrigger
        self._fires_and_cleans_at_end = (self._trigger_timer_only_at_end and self._event_time
                                         and not self._merging and not self._allowed_lateness)
        # a pane that had records before gets no trigger call: its first record registered the cleanup
        # timer at the window's end (whatever the trigger was then: a restored pane may come from a job
        # with another trigger), and that is the only timer of an EventTimeTrigger without lateness (a
        # window the watermark has passed is late then) and of a ProcessingTimeTrigger on time windows
        self._later_records_skip_trigger = self._fires_and_cleans_at_end or (
            type(trigger) is ProcessingTimeTrigger and not self._event_time and self._window_size is not None)

    # lifecycle ---------------------------------------------------------------------------------
    def open(self, runtime_context):
        self._runtime_context = runtime_context
        self._contents = runtime_context.get_state(namespaced(self._descriptor.window_state_descriptor))
        self._contents_are_list = isinstance(self._contents, ListState)
        self._saved_timer_windows = {}  # domain → the map state that held timers' windows before timers did
        self._merging_state = (runtime_context.get_map_state(MapStateDescriptor("merging-window-set"))
                               if self._merging else None)
        self._trigger_states = _PerWindowStates(runtime_context, "window-trigger-")
        self._window_states = _PerWindowStates(runtime_context, "window-state-")
        self._trigger_ctx = _TriggerContext(self)
        self._process_ctx = _ProcessContext(self)
        self._assigner_ctx = _AssignerContext(self)
        self._window_function.open(runtime_context)

    def close(self):
        self._window_function.close()

    def wrapped_user_function(self):
        return self._descriptor.wrapped_user_function()

    def shipped_objects(self) -> list:
        return self._descriptor.shipped_objects()

    def _pane(self, state_window):
        """The contents of a pane, or None when it has none (an empty list state reads as null)."""
        contents = self._contents
        contents.set_current_namespace(state_window)
        pane = contents.get()
        return pane if pane or not self._contents_are_list else None

    # timers: many windows share one runtime timer per (key, timestamp, domain) ----------------
    def _timer_windows(self, domain: int, time: int):
        """The windows of the current key's timer at ``time``, or None without such a timer."""
        windows = self._timer_service.timer_namespaces(domain, time)
        if windows is True:  # restored from before timers held their windows: they move into the timer
            windows = self._saved_windows(domain, time)
            self._timer_service.set_timer_namespaces(domain, time, windows)
            return windows or None
        return windows

    def _saved_windows(self, domain: int, time: int) -> tuple:
        """A timer restored from a savepoint taken before timers held their windows: its windows, taken
        out of the map state they were kept in then."""
        saved = self._saved_timer_windows.get(domain)
        if saved is None:
            name = "window-event-timers" if domain == EVENT_TIME else "window-processing-timers"
            saved = self._saved_timer_windows[domain] = self._runtime_context.get_map_state(MapStateDescriptor(name))
        windows = saved.get(time)
        if windows is None:
            return ()
        saved.remove(time)
        return windows

    def _register_timer(self, domain: int, time: int, window) -> None:
        windows = self._timer_windows(domain, time)
        if windows is None:
            self._timer_service.set_timer_namespaces(domain, time, (window,), new=True)
        elif window not in windows:
            self._timer_service.set_timer_namespaces(domain, time, (*windows, window))

    def _delete_timer(self, domain: int, time: int, window) -> None:
        windows = self._timer_windows(domain, time)
        if windows is None or window not in windows:
            return
        self._timer_service.set_timer_namespaces(domain, time, tuple(w for w in windows if w != window))

    def _shared_window(self, start: int) -> TimeWindow:
        """The one TimeWindow object of a fixed-size assigner's window at ``start``, for every key and
        record: state then holds one shared object, so lookups find it by identity (no ``__eq__`` call)
        and a checkpoint pickles it once per key group instead of once per key (a quarter fewer bytes
        for a tumbling-window sum). Windows are never changed in place. The cache is dropped when it
        grows past ``WINDOWS_KEPT`` starts: a window no longer cached is just a separate, equal object."""
        windows = self._windows
        window = windows.get(start)
        if window is None:
            if len(windows) >= WINDOWS_KEPT:
                windows.clear()
            window = windows[start] = TimeWindow(start, start + self._window_size)
        return window

    # lateness and cleanup ------------------------------------------------------------------------
    def _cleanup_time(self, window) -> int:
        if self._event_time:
            return min(window.max_timestamp() + self._allowed_lateness, MAX_LONG_VALUE)
        return window.max_timestamp()

    def _register_cleanup_timer(self, window) -> None:
        time = self._cleanup_time(window)
        if time == MAX_LONG_VALUE:
            return  # e.g. GlobalWindow and count windows: their state is kept until the trigger purges it
        self._register_timer(self._domain, time, window)

    def _delete_cleanup_timer(self, window) -> None:
        time = self._cleanup_time(window)
        if time == MAX_LONG_VALUE:
            return
        self._delete_timer(self._domain, time, window)

    def _is_window_late(self, window) -> bool:
        return self._event_time and self._cleanup_time(window) <= self._timer_service.current_watermark()

    def _is_element_late(self, timestamp: int) -> bool:
        return (self._event_time
                and timestamp + self._allowed_lateness <= self._timer_service.current_watermark())

    def _clear_all_state(self, window, state_window, merging_windows, trigger_timer_fired: bool = False) -> None:
        self._contents.set_current_namespace(state_window)
        self._contents.clear()
        if not (trigger_timer_fired and self._trigger_timer_only_at_end):
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
        if (self._event_time
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
        self._contents.merge_namespaces(state_window_result, merged_state_windows)

    # processing ----------------------------------------------------------------------------------
    def process_element(self, value, ctx):
        self._timer_service = ctx.timer_service()
        self._key = ctx.get_current_key()
        timestamp = ctx.timestamp()
        windows = self._assigner.assign_windows(value, timestamp, self._assigner_ctx)
        skipped = True
        tc = self._trigger_ctx
        trigger = self._trigger
        contents = self._contents
        merging_windows = _MergingWindowSet(self._assigner, self._merging_state) if self._merging else None
        skip_trigger = self._later_records_skip_trigger
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
                if self._window_size is not None:
                    window = self._shared_window(window.start)
                if self._is_window_late(window):
                    continue
                actual = state_window = window
            skipped = False
            contents.set_current_namespace(state_window)
            if not skip_trigger:
                contents.add(value)
            elif contents.added_to_existing(value):
                continue
            tc.window = actual
            result = trigger.on_element(value, timestamp, actual, tc)
            if result.is_fire():
                pane = self._pane(state_window)
                if pane is None:
                    continue
                yield from self._emit(actual, pane, ctx)
            if result.is_purge():
                contents.set_current_namespace(state_window)
                contents.clear()
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
        event_time = ctx.time_domain() is _EVENT_TIME
        windows = self._timer_service.fired_namespaces
        if windows is True:
            windows = self._saved_windows(EVENT_TIME if event_time else PROCESSING_TIME, timestamp)
        if (self._fires_and_cleans_at_end and event_time and len(windows) == 1
                and timestamp == windows[0].max_timestamp()):
            return self._fire_and_clear(windows[0])
        return self._on_window_timers(windows, timestamp, event_time, ctx)

    @property
    def event_time_firing(self):
        """``fire_window_ends`` when every event-time timer of this operator is a window's end that
        fires and cleans the window (``_fires_and_cleans_at_end``); else None."""
        return self.fire_window_ends if self._fires_and_cleans_at_end else None

    def fire_window_ends(self, timers, watermark: int, ctx, emit, limit: int) -> bool:
        """The task's firing loop over this operator's event-time timers up to ``watermark``, at most
        ``limit`` of them: each window's results go to ``emit`` stamped with its end. The round's due
        timers and their windows' panes are taken out of state in one pass each, then each window fires
        with one call, instead of one timer at a time through every layer (``on_timer``,
        ``_fire_and_clear``). ``ctx`` is the task's on_timer context: ``ctx.firing`` says which timer
        fired last, should a call fail (the task then fails and its epoch is rolled back, the timers and
        panes already taken included). Whether it fired any: more may be due."""
        self._timer_service = timers
        due = timers.pop_due_many(EVENT_TIME, watermark, limit)
        if not due:
            return False
        panes = None
        if all(windows is not True and len(windows) == 1 and ts == windows[0].max_timestamp()
               for ts, _, _, windows in due):
            panes = self._contents.get_and_clear_each([(key, kg, windows[0]) for _, kg, key, windows in due])
        backend = ctx._backend
        cell = ctx._cell
        present_key = ctx._present_key  # ctx.get_current_key() inlined: once per window
        fired = self._fired
        for i, (ts, kg, key, windows) in enumerate(due):
            backend.current_key = key
            backend.current_key_group = kg
            ctx.firing = cell[0] = ts
            if panes is not None:
                self._key = key if present_key is None else present_key(key)
                results = fired(windows[0], panes[i])
            else:  # restored from before timers held their windows, or several windows in one timer
                timers.fired_namespaces = windows
                results = self.on_timer(ts, ctx)
            for result in results:
                emit(result)
        return True

    def _on_window_timers(self, windows, timestamp: int, event_time: bool, ctx):
        for window in windows:
            yield from self._on_window_timer(window, timestamp, event_time, ctx)

    def _fire_and_clear(self, window):
        """An event-time trigger's end-of-window timer that is also the window's cleanup timer (no
        allowed lateness, no merging): what ``_on_window_timer`` does for it, without asking the
        trigger, whose answer is always the same (FIRE), and with the pane read and dropped in one
        step. The results carry the timer's timestamp, the window's max timestamp, as ``_emit``
        would stamp them."""
        contents = self._contents
        contents.set_current_namespace(window)
        return self._fired(window, contents.get_and_clear())

    def _fired(self, window, pane):
        """``_fire_and_clear``'s results from the ``pane`` it took."""
        if not pane and self._contents_are_list:
            pane = None  # an empty list state reads as null
        function = self._window_function
        results = () if pane is None else function.process(self._key, window, self._process_ctx, pane)
        if function.takes_context:  # its clear() comes after its process(), as in Flink
            results = list(results)
            function.clear(window, self._process_ctx)
        return results

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
            pane = self._pane(state_window)
            if pane is not None:
                yield from self._emit(window, pane, ctx)
        if result.is_purge():
            self._contents.set_current_namespace(state_window)
            self._contents.clear()
        if event_time == self._event_time and timestamp == self._cleanup_time(window):
            # this timer's entry is gone already (on_timer): an end-of-window timer has nothing to delete
            self._clear_all_state(window, state_window, merging_windows,
                                  trigger_timer_fired=event_time and timestamp == window.max_timestamp())
        if merging_windows is not None:
            merging_windows.persist()
