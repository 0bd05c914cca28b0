"""Windows (``keyspan.datastream.window``, ``keyed.window(...)``, ``keyed.count_window(...)``).

Three layers:

* windows, assigners and triggers as plain Python;
* the window operator driven by a small in-process harness: a real heap state backend, a timer
  service whose watermark and clock the test moves, snapshots and rollbacks — Flink's
  ``WindowOperatorTest`` style, fast and exact about when windows fire;
* whole jobs on Spark (timestamps and watermarks from ``assign_timestamps_and_watermarks``, epochs
  from ``set_max_records_per_epoch``, restores from savepoints).

Expected results come from small reference functions or are worked out by hand in comments.
"""

from __future__ import annotations

import json
import pickle
import random
import time
from collections import defaultdict

import cloudpickle
import pytest

from keyspan.common import Duration, Encoder, Time, WatermarkStrategy
from keyspan.common.watermark_strategy import TimestampAssigner
from keyspan.datastream import EmbeddedRocksDBStateBackend, ProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.aggregates import Avg
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.functions import (
    AggregateFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    TimeDomain,
    WindowFunction,
)
from keyspan.datastream.output_tag import OutputTag
from keyspan.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from keyspan.datastream.window import (
    MAX_LONG_VALUE,
    MIN_LONG_VALUE,
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    CountWindow,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindow,
    GlobalWindows,
    MergingWindowAssigner,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    PurgingTrigger,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowOperationDescriptor,
)
from keyspan.datastream.window_operator import AllWindowedStream, WindowedStream, count_window
from keyspan.runtime.operators.window import WindowOperator
from keyspan.runtime.worker.timers import TimerService
from keyspan.state.api import EVENT_TIME, PROCESSING_TIME, TIMER_STATE
from keyspan.state.heap import HeapKeyedStateBackend
from keyspan.state.internal import namespaced
from keyspan.state_processor import KeyedStateBootstrapFunction, OperatorTransformation, SavepointWriter

from savepoint_helpers import BackgroundJob, stop_with_savepoint, use_options, wait_for_checkpoints


# =====================================================================================================
# windows, assigners, triggers
# =====================================================================================================

def test_time_window_basics():
    w = TimeWindow(0, 10)
    assert w.max_timestamp() == 9
    assert w == TimeWindow(0, 10) and hash(w) == hash(TimeWindow(0, 10)) and w != TimeWindow(0, 11)
    assert w.intersects(TimeWindow(10, 20)) and w.intersects(TimeWindow(-5, 0)) and not w.intersects(TimeWindow(11, 20))
    assert w.cover(TimeWindow(5, 15)) == TimeWindow(0, 15)
    assert TimeWindow(0, 5) < TimeWindow(0, 6) < TimeWindow(1, 2)
    assert pickle.loads(pickle.dumps(w)) == w
    assert pickle.dumps(TimeWindow(3, 4)) == pickle.dumps(TimeWindow(3, 4))  # stable map-state keys
    assert CountWindow(3) == CountWindow(3) != CountWindow(4) and CountWindow(3).max_timestamp() == MAX_LONG_VALUE
    assert GlobalWindow.get() == GlobalWindow() and GlobalWindow().max_timestamp() == MAX_LONG_VALUE
    assert pickle.loads(pickle.dumps(CountWindow(7))) == CountWindow(7)
    assert len({TimeWindow(0, 1), TimeWindow(0, 1), CountWindow(0), GlobalWindow()}) == 3


def test_window_serializers_round_trip():
    import io

    from keyspan.datastream.window import CountWindowSerializer, GlobalWindowSerializer, TimeWindowSerializer

    for serializer, window in ((TimeWindowSerializer(), TimeWindow(-5, 1 << 40)),
                               (CountWindowSerializer(), CountWindow(9)), (GlobalWindowSerializer(), GlobalWindow())):
        stream = io.BytesIO()
        serializer.serialize(window, stream)
        stream.seek(0)
        assert serializer.deserialize(stream) == window


def test_pyflink_import_paths():
    import keyspan.datastream as ds

    for name in ("WindowedStream", "AllWindowedStream", "WindowFunction", "ProcessWindowFunction", "AllWindowFunction",
                 "ProcessAllWindowFunction", "TimeWindow", "CountWindow", "GlobalWindow", "WindowAssigner",
                 "MergingWindowAssigner", "Trigger", "TriggerResult", "TumblingEventTimeWindows",
                 "SlidingEventTimeWindows", "EventTimeSessionWindows", "TumblingProcessingTimeWindows",
                 "SlidingProcessingTimeWindows", "ProcessingTimeSessionWindows", "GlobalWindows",
                 "CountTumblingWindowAssigner", "CountSlidingWindowAssigner", "EventTimeTrigger",
                 "ProcessingTimeTrigger", "CountTrigger", "PurgingTrigger", "ContinuousEventTimeTrigger",
                 "ContinuousProcessingTimeTrigger", "SessionWindowTimeGapExtractor"):
        assert hasattr(ds, name), name
        assert name in ds.__all__, name


@pytest.mark.parametrize("timestamp, offset, size", [
    (0, 0, 10), (9, 0, 10), (10, 0, 10), (-1, 0, 10), (-10, 0, 10), (-11, 0, 10), (17, 3, 10), (2, 3, 10),
    (1_700_000_123_456, -28_800_000, 86_400_000), (5, -3, 7),
])
def test_window_start_with_offset(timestamp, offset, size):
    start = TimeWindow.get_window_start_with_offset(timestamp, offset, size)
    assert start <= timestamp < start + size
    assert (start - offset) % size == 0


def test_merge_windows_calls_back_once_per_group():
    calls = []

    class Callback(MergingWindowAssigner.MergeCallback):
        def merge(self, to_be_merged, merge_result):
            calls.append((sorted(to_be_merged), merge_result))

    windows = [TimeWindow(0, 10), TimeWindow(5, 12), TimeWindow(12, 14), TimeWindow(20, 30), TimeWindow(40, 41),
               TimeWindow(25, 26)]
    TimeWindow.merge_windows(windows, Callback())
    assert sorted(calls, key=lambda c: c[1].start) == [
        ([TimeWindow(0, 10), TimeWindow(5, 12), TimeWindow(12, 14)], TimeWindow(0, 14)),
        ([TimeWindow(20, 30), TimeWindow(25, 26)], TimeWindow(20, 30)),
    ]


def test_time_assigners_assign_the_windows_that_contain_the_timestamp():
    assert TumblingEventTimeWindows.of(Time.seconds(5)).assign_windows("x", 7_300, None) == [TimeWindow(5_000, 10_000)]
    assert TumblingEventTimeWindows.of(Time.seconds(5), Time.seconds(1)).assign_windows("x", 700, None) == \
        [TimeWindow(-4_000, 1_000)]
    assert TumblingEventTimeWindows.of(Duration.of_millis(10)).assign_windows("x", -1, None) == [TimeWindow(-10, 0)]
    sliding = SlidingEventTimeWindows.of(Time.milliseconds(10), Time.milliseconds(4)).assign_windows("x", 9, None)
    assert sorted(sliding) == [TimeWindow(0, 10), TimeWindow(4, 14), TimeWindow(8, 18)]
    for ts in range(-30, 30):
        got = SlidingEventTimeWindows.of(15, 5).assign_windows("x", ts, None)
        assert sorted(got) == [TimeWindow(s, s + 15) for s in range(-45, 30) if s % 5 == 0 and s <= ts < s + 15]
    assert EventTimeSessionWindows.with_gap(Time.seconds(3)).assign_windows("x", 100, None) == [TimeWindow(100, 3_100)]

    class Gap(SessionWindowTimeGapExtractor):
        def extract(self, element):
            return element * 10

    assert EventTimeSessionWindows.with_dynamic_gap(Gap()).assign_windows(4, 100, None) == [TimeWindow(100, 140)]
    assert EventTimeSessionWindows.with_dynamic_gap(lambda e: e).assign_windows(4, 100, None) == [TimeWindow(100, 104)]
    assert GlobalWindows.create().assign_windows("x", 1, None) == [GlobalWindow()]
    for assigner in (TumblingEventTimeWindows.of(10), SlidingEventTimeWindows.of(10, 5),
                     EventTimeSessionWindows.with_gap(10)):
        assert assigner.is_event_time()
        assert isinstance(assigner.get_default_trigger(None), EventTimeTrigger)
        with pytest.raises(ValueError, match="assign_timestamps_and_watermarks"):
            assigner.assign_windows("x", MIN_LONG_VALUE, None)


def test_processing_time_assigners_use_the_clock():
    class Clock:
        def get_current_processing_time(self):
            return 12_345

    assert TumblingProcessingTimeWindows.of(Time.seconds(1)).assign_windows("x", None, Clock()) == \
        [TimeWindow(12_000, 13_000)]
    assert sorted(SlidingProcessingTimeWindows.of(Time.seconds(2), Time.seconds(1)).assign_windows("x", 0, Clock())) \
        == [TimeWindow(11_000, 13_000), TimeWindow(12_000, 14_000)]
    assert ProcessingTimeSessionWindows.with_gap(Time.seconds(1)).assign_windows("x", 0, Clock()) == \
        [TimeWindow(12_345, 13_345)]
    for assigner in (TumblingProcessingTimeWindows.of(10), SlidingProcessingTimeWindows.of(10, 5),
                     ProcessingTimeSessionWindows.with_gap(10), ProcessingTimeSessionWindows.with_dynamic_gap(len)):
        assert not assigner.is_event_time()
        assert isinstance(assigner.get_default_trigger(None), ProcessingTimeTrigger)


@pytest.mark.parametrize("build, argument", [
    (lambda: TumblingEventTimeWindows.of(0), "size"),
    (lambda: TumblingEventTimeWindows.of(Time.seconds(-1)), "size"),
    (lambda: TumblingEventTimeWindows.of(10, 10), "offset"),
    (lambda: SlidingEventTimeWindows.of(10, 0), "slide"),
    (lambda: SlidingEventTimeWindows.of(0, 5), "size"),
    (lambda: SlidingEventTimeWindows.of(10, 5, 5), "offset"),
    (lambda: TumblingProcessingTimeWindows.of(-5), "size"),
    (lambda: SlidingProcessingTimeWindows.of(10, -1), "slide"),
    (lambda: EventTimeSessionWindows.with_gap(0), "session_gap"),
    (lambda: ProcessingTimeSessionWindows.with_gap(Time.seconds(0)), "session_gap"),
    (lambda: CountTumblingWindowAssigner.of(0), "window_size"),
    (lambda: CountSlidingWindowAssigner.of(5, 0), "window_slide"),
    (lambda: CountTrigger.of(0), "window_size"),
    (lambda: ContinuousEventTimeTrigger.of(0), "interval"),
    (lambda: ContinuousProcessingTimeTrigger.of(Time.seconds(-1)), "interval"),
])
def test_bad_arguments_are_value_errors_naming_the_argument(build, argument):
    with pytest.raises(ValueError, match=argument):
        build()


def test_trigger_result_flags():
    assert [(r.is_fire(), r.is_purge()) for r in (TriggerResult.CONTINUE, TriggerResult.FIRE, TriggerResult.PURGE,
                                                   TriggerResult.FIRE_AND_PURGE)] == \
        [(False, False), (True, False), (False, True), (True, True)]


# =====================================================================================================
# the window operator in a harness
# =====================================================================================================

class _RuntimeContext:
    def __init__(self, backend):
        self._backend = backend

    def get_state(self, descriptor):
        return self._backend.get_state(descriptor)

    get_list_state = get_map_state = get_reducing_state = get_aggregating_state = get_state

    def get_metrics_group(self):
        return None


class _TimerService(TimerService):
    """The runtime's timer service over the harness's backend, with the harness's clock."""

    def __init__(self, harness):
        super().__init__(harness.backend)
        self._h = harness

    def current_processing_time(self):
        return self._h.now


class _Context:
    def __init__(self, harness, timestamp, domain=None):
        self._h, self._ts, self._domain = harness, timestamp, domain

    def get_current_key(self):
        return self._h.key

    def timestamp(self):
        return self._ts

    def timer_service(self):
        return self._h.timer_service

    def time_domain(self):
        return self._domain


class _FakeKeyedStream:
    def _keyed(self, function, name, output_type=None):
        function = WindowOperator(function)  # the runtime builds the operator from the API's descriptor
        function.transformation_name = name
        return function

    def get_type(self):
        return None

    def get_execution_environment(self):
        return None


def windowed(assigner) -> WindowedStream:
    return WindowedStream(_FakeKeyedStream(), assigner)


class Harness:
    """Drives one WindowOperator the way the runtime does: one key at a time, timers fired in
    timestamp order once the watermark (or the clock) reaches them."""

    def __init__(self, operator, snapshot=None):
        self.template = operator
        self.operator = cloudpickle.loads(cloudpickle.dumps(operator))  # as shipped to a worker
        self.backend = HeapKeyedStateBackend("window", range(0, 1))
        self.now = 0
        self.key = None
        self.timer_service = _TimerService(self)
        self.output = []  # (value, emitted during: "element" | timestamp of the timer)
        self.side = defaultdict(list)
        if snapshot is not None:
            payloads, self.timer_service.watermark, self.now = snapshot
            for kg, payload in payloads.items():
                self.backend.restore_payload(kg, payload)
        self.operator.open(_RuntimeContext(self.backend))

    def _collect(self, results, when):
        for r in results:
            if isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], OutputTag):
                self.side[r[0].tag_id].append(r[1])
            else:
                self.output.append((r, when))

    def element(self, key, value, timestamp=None):
        self.key = key
        self.backend.set_current_key(key, 0)
        self._collect(list(self.operator.process_element(value, _Context(self, timestamp))), "element")

    def elements(self, records):
        for key, value, ts in records:
            self.element(key, value, ts)

    def _fire(self, domain, until):
        runtime_domain = EVENT_TIME if domain is TimeDomain.EVENT_TIME else PROCESSING_TIME
        while (ts := self.timer_service.pop_due(runtime_domain, until)) is not None:
            self.key = self.backend.current_key
            self._collect(list(self.operator.on_timer(ts, _Context(self, ts, domain))), ts)

    @property
    def watermark(self):
        return self.timer_service.watermark

    def advance_watermark(self, watermark):
        self.timer_service.watermark = watermark
        self._fire(TimeDomain.EVENT_TIME, watermark)

    def advance_processing_time(self, now):
        self.now = now
        self._fire(TimeDomain.PROCESSING_TIME, now)

    def values(self):
        return [v for v, _ in self.output]

    def take(self):
        out, self.output = self.output, []
        return out

    def snapshot(self):
        self.backend.confirm()
        return ({kg: payload for kg, payload in self.backend.full_sections().items()}, self.watermark, self.now)

    def rollback(self):
        self.backend.rollback()
        self.timer_service.invalidate()  # as the runtime does: the queues are rebuilt from the state

    def pending_timers(self, domain=EVENT_TIME):
        """(timestamp, key, the timer's windows) of each pending timer of ``domain``, from the timer state."""
        pending = []
        for kg, key, (d, ts) in list(self.backend.map_keys_of(TIMER_STATE)):
            if d == domain:
                self.backend.set_current_key(key, kg)
                pending.append((ts, key, self.timer_service.timer_namespaces(d, ts)))
        return sorted(pending)

    def state_entries(self):
        """State name -> number of entries (map state: entries of all keys' maps)."""
        return {name: sum(len(v) if isinstance(v, dict) else 1 for g in table.groups for v in g.values())
                for name, table in self.backend._tables.items()}


def _sum_values(a, b):
    return (a[0], a[1] + b[1])


class SumAggregate(AggregateFunction):
    """Accumulator updated in place, as Flink users write them."""

    def create_accumulator(self):
        return [0, 0]

    def add(self, value, accumulator):
        accumulator[0] += value[1]
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator):
        return tuple(accumulator)

    def merge(self, acc_a, acc_b):
        acc_a[0] += acc_b[0]
        acc_a[1] += acc_b[1]
        return acc_a


class DescribeWindow(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key, context.window(), sorted(v for _, v in elements)


class ApplyDescribe(WindowFunction):
    def apply(self, key, window, inputs):
        return [(key, window, sorted(v for _, v in inputs))]


def test_tumbling_event_time_reduce_fires_when_the_watermark_passes_the_window():
    h = Harness(windowed(TumblingEventTimeWindows.of(10)).reduce(_sum_values))
    h.elements([("a", ("a", 1), 1), ("a", ("a", 2), 9), ("b", ("b", 5), 3), ("a", ("a", 4), 12)])
    assert h.output == []
    h.advance_watermark(8)
    assert h.output == []
    h.advance_watermark(9)  # window [0, 10) of both keys: max timestamp 9
    assert sorted(h.take()) == [(("a", 3), 9), (("b", 5), 9)]
    h.advance_watermark(MAX_LONG_VALUE)
    assert h.take() == [(("a", 4), 19)]
    assert not any(h.state_entries().values())  # the panes and the timers with their windows


def test_a_trigger_timer_still_pending_at_cleanup_is_deleted_with_the_window():
    """Clearing a fired window skips EventTimeTrigger.clear only when the firing timer was its one
    timer; a trigger that keeps another timer gets it deleted at cleanup, as in Flink."""
    class EarlyAndOnTime(EventTimeTrigger):
        def on_element(self, element, timestamp, window, ctx):
            ctx.register_event_time_timer(window.max_timestamp() + 100)  # never reached before cleanup
            return super().on_element(element, timestamp, window, ctx)

        def clear(self, window, ctx):
            super().clear(window, ctx)
            ctx.delete_event_time_timer(window.max_timestamp() + 100)

    for trigger in (EventTimeTrigger(), EarlyAndOnTime()):
        h = Harness(windowed(TumblingEventTimeWindows.of(10)).trigger(trigger).reduce(_sum_values))
        h.elements([("a", ("a", 1), 1), ("a", ("a", 2), 5)])
        h.advance_watermark(9)
        assert h.take() == [(("a", 3), 9)]
        assert not any(h.state_entries().values()), type(trigger).__name__


def test_every_key_s_state_holds_one_shared_object_per_window_and_restores_to_the_same_results(monkeypatch):
    """A fixed-size window is one object for all keys, so a checkpoint pickles it once per key group;
    with more window starts than the operator keeps, windows are separate equal objects and nothing
    else changes."""
    import pickletools

    from keyspan.runtime.operators import window as window_operator

    def pane_windows(harness):
        return [w for group in harness.backend._tables["window-contents"].groups
                for windows in group.values() for w in windows]

    records = [(f"k{i}", (f"k{i}", i), ts) for i in range(40) for ts in (3, 13)]
    h = Harness(windowed(TumblingEventTimeWindows.of(10)).reduce(_sum_values))
    h.elements(records)
    panes = pane_windows(h)
    assert len(panes) == 80 and len({id(w) for w in panes}) == 2
    payload = h.snapshot()
    (section,) = payload[0].values()
    rebuilt = [op for op, _, _ in pickletools.genops(section) if op.name == "REDUCE"]
    assert len(rebuilt) == 2  # each window pickled once, however many keys hold it

    monkeypatch.setattr(window_operator, "WINDOWS_KEPT", 1)  # every new start drops the cache
    unshared = Harness(windowed(TumblingEventTimeWindows.of(10)).reduce(_sum_values))
    unshared.elements(records)
    assert len({id(w) for w in pane_windows(unshared)}) > 2
    expected = sorted(((f"k{i}", i), end) for i in range(40) for end in (9, 19))
    for harness in (Harness(h.template, payload), unshared):
        harness.advance_watermark(MAX_LONG_VALUE)
        assert sorted(harness.take()) == expected


def test_the_operator_registers_one_runtime_timer_per_key_and_timestamp():
    h = Harness(windowed(SlidingEventTimeWindows.of(10, 5)).reduce(_sum_values))
    h.elements([("a", ("a", 1), 1), ("a", ("a", 1), 2), ("a", ("a", 1), 7)])
    # windows [-5, 5) [0, 10) [5, 15): trigger and cleanup timers share max timestamps 4, 9, 14
    assert h.pending_timers() == [(4, "a", (TimeWindow(-5, 5),)), (9, "a", (TimeWindow(0, 10),)),
                                  (14, "a", (TimeWindow(5, 15),))]
    h.advance_watermark(MAX_LONG_VALUE)
    assert h.take() == [(("a", 2), 4), (("a", 3), 9), (("a", 1), 14)]


def test_sliding_aggregate_matches_a_reference():
    records = [(k, (k, v), ts) for k, v, ts in [("a", 1, 3), ("b", 2, 4), ("a", 3, 14), ("a", 5, 17), ("b", 7, 31),
                                                 ("a", 11, 29), ("b", 13, 2)]]
    h = Harness(windowed(SlidingEventTimeWindows.of(Time.milliseconds(20), Time.milliseconds(10)))
                .aggregate(SumAggregate()))
    h.elements(records)
    h.advance_watermark(MAX_LONG_VALUE)
    expected = defaultdict(lambda: [0, 0])
    for key, (_, value), ts in records:
        for start in range(-100, 100, 10):
            if start <= ts < start + 20:
                expected[(key, start + 19)][0] += value
                expected[(key, start + 19)][1] += 1
    assert sorted((when, v) for v, when in h.output) == sorted((end, tuple(acc)) for (_, end), acc in expected.items())


def test_process_and_apply_see_all_elements_and_the_window():
    for build in (lambda ws: ws.process(DescribeWindow()), lambda ws: ws.apply(ApplyDescribe())):
        h = Harness(build(windowed(TumblingEventTimeWindows.of(100))))
        h.elements([("k", ("k", 3), 10), ("k", ("k", 1), 50), ("k", ("k", 2), 150)])
        h.advance_watermark(MAX_LONG_VALUE)
        assert h.values() == [("k", TimeWindow(0, 100), [1, 3]), ("k", TimeWindow(100, 200), [2])]


def test_reduce_and_aggregate_with_a_window_function_receive_the_single_result():
    class WithWindow(ProcessWindowFunction):
        def process(self, key, context, elements):
            elements = list(elements)
            yield key, context.window().start, elements, context.current_watermark()

    class Apply(WindowFunction):
        def apply(self, key, window, inputs):
            yield key, window.end, list(inputs)

    h = Harness(windowed(TumblingEventTimeWindows.of(10)).reduce(_sum_values, WithWindow()))
    h.elements([("a", ("a", 1), 1), ("a", ("a", 2), 2)])
    h.advance_watermark(100)
    assert h.values() == [("a", 0, [("a", 3)], 100)]
    h = Harness(windowed(TumblingEventTimeWindows.of(10)).aggregate(SumAggregate(), Apply()))
    h.elements([("a", ("a", 1), 1), ("a", ("a", 2), 2)])
    h.advance_watermark(100)
    assert h.values() == [("a", 10, [(3, 2)])]


def test_late_elements_are_dropped_or_sent_to_the_side_output():
    late = OutputTag("late")
    for tag in (None, late):
        ws = windowed(TumblingEventTimeWindows.of(10))
        if tag is not None:
            ws = ws.side_output_late_data(tag)
        h = Harness(ws.reduce(_sum_values))
        h.element("a", ("a", 1), 5)
        h.advance_watermark(9)
        assert h.take() == [(("a", 1), 9)]
        h.element("a", ("a", 100), 9)   # window [0, 10) is gone: late
        h.element("a", ("a", 7), 10)    # window [10, 20) is open
        h.advance_watermark(MAX_LONG_VALUE)
        assert h.take() == [(("a", 7), 19)]
        assert h.side.get("late", []) == ([("a", 100)] if tag is not None else [])


def test_allowed_lateness_fires_late_and_cleans_up_afterwards():
    late = OutputTag("late")
    h = Harness(windowed(TumblingEventTimeWindows.of(10)).allowed_lateness(Time.milliseconds(5))
                .side_output_late_data(late).reduce(_sum_values))
    h.element("a", ("a", 1), 3)
    h.advance_watermark(9)
    assert h.take() == [(("a", 1), 9)]
    h.element("a", ("a", 2), 4)            # within lateness: fires at once with the updated sum
    assert h.take() == [(("a", 3), "element")]
    h.advance_watermark(13)
    h.element("a", ("a", 4), 0)            # still within lateness (cleanup at 9 + 5 = 14)
    assert h.take() == [(("a", 7), "element")]
    h.advance_watermark(14)                # cleanup timer: state gone, nothing emitted
    assert h.take() == [] and h.state_entries().get("window-contents", 0) == 0
    h.element("a", ("a", 8), 8)            # 8 + 5 <= 14: late
    assert h.take() == [] and h.side["late"] == [("a", 8)]


def test_a_pane_saved_under_another_trigger_fires_at_its_end_after_the_restore():
    """A pane saved by a job whose trigger registered no timer at the window's end (CountTrigger),
    restored into the same windows with the default EventTimeTrigger: the pane's later records leave
    the trigger's timer registered, so the window fires at its end, as in Flink. Without lateness the
    pane's cleanup timer is that timer; with lateness it is not, and the next record registers it."""
    for lateness in (0, 5):
        def windows():
            return windowed(TumblingEventTimeWindows.of(10)).allowed_lateness(Time.milliseconds(lateness))

        before = Harness(windows().trigger(CountTrigger.of(100)).reduce(_sum_values))
        before.elements([("a", ("a", 1), 1), ("a", ("a", 2), 2)])
        after = Harness(windows().reduce(_sum_values), before.snapshot())
        after.elements([("a", ("a", 4), 3), ("a", ("a", 8), 4)])
        after.advance_watermark(MAX_LONG_VALUE)
        assert after.take() == [(("a", 15), 9)], f"allowed lateness {lateness}"
    # processing time: the default ProcessingTimeTrigger's timer is the window's cleanup timer
    before = Harness(windowed(TumblingProcessingTimeWindows.of(10)).trigger(CountTrigger.of(100)).reduce(_sum_values))
    before.now = 1
    before.elements([("a", ("a", 1), None), ("a", ("a", 2), None)])
    after = Harness(windowed(TumblingProcessingTimeWindows.of(10)).reduce(_sum_values), before.snapshot())
    after.elements([("a", ("a", 4), None), ("a", ("a", 8), None)])
    after.advance_processing_time(100)
    assert after.take() == [(("a", 15), 9)]


def test_a_timer_restored_without_its_windows_keeps_every_window_it_is_shared_by():
    """State in the layout saved before timers held their windows, where window [0, 10)'s cleanup timer
    and window [10, 20)'s end timer share timestamp 19. A record for [10, 20) registers its end timer
    again; [0, 10) must still be cleaned up and [10, 20) still fire, from that one timer."""
    h = Harness(windowed(TumblingEventTimeWindows.of(10)).allowed_lateness(Time.milliseconds(10)).reduce(_sum_values))
    contents = h.backend.get_state(namespaced(ReducingStateDescriptor("window-contents", _sum_values)))
    saved = h.backend.get_state(MapStateDescriptor("window-event-timers"))
    first, second = TimeWindow(0, 10), TimeWindow(10, 20)
    h.backend.set_current_key("a", 0)
    for window, value in ((first, ("a", 1)), (second, ("a", 2))):
        contents.set_current_namespace(window)
        contents.add(value)
    for at, windows in ((9, (first,)), (19, (first, second)), (29, (second,))):
        saved.put(at, windows)
        h.timer_service.register_event_time_timer(at)  # a plain timer, as saved then
    h.element("a", ("a", 4), 15)
    h.advance_watermark(MAX_LONG_VALUE)
    assert h.take() == [(("a", 1), 9), (("a", 6), 19)]
    assert not any(h.state_entries().values())


def test_allowed_lateness_is_ignored_for_processing_time_and_rejects_negative_values():
    op = windowed(TumblingProcessingTimeWindows.of(10)).allowed_lateness(100).reduce(_sum_values)
    assert op._allowed_lateness == 0
    with pytest.raises(ValueError, match="allowed_lateness"):
        windowed(TumblingEventTimeWindows.of(10)).allowed_lateness(-1)


def test_session_windows_merge_and_fire_once():
    h = Harness(windowed(EventTimeSessionWindows.with_gap(10)).process(DescribeWindow()))
    h.elements([("a", ("a", 1), 0), ("a", ("a", 2), 30), ("a", ("a", 3), 15)])  # three separate sessions
    h.advance_watermark(5)
    h.elements([("a", ("a", 4), 8), ("a", ("a", 5), 22)])  # 8 bridges 0 and 15; 22 bridges 15..25 and 30
    h.advance_watermark(MAX_LONG_VALUE)
    assert h.values() == [("a", TimeWindow(0, 40), [1, 2, 3, 4, 5])]
    assert h.state_entries().get("merging-window-set", 0) == 0
    assert h.pending_timers(EVENT_TIME) == h.pending_timers(PROCESSING_TIME) == []


def reference_sessions(records, gap):
    """key -> sorted [(start, end, sorted values)] for sessions with a fixed gap, all in time."""
    by_key = defaultdict(list)
    for key, value, ts in records:
        by_key[key].append((ts, value))
    out = {}
    for key, items in by_key.items():
        items.sort()
        sessions = []
        for ts, value in items:
            if sessions and ts <= sessions[-1][1]:
                sessions[-1][1] = max(sessions[-1][1], ts + gap)
                sessions[-1][2].append(value)
            else:
                sessions.append([ts, ts + gap, [value]])
        out[key] = [(s, e, sorted(v)) for s, e, v in sessions]
    return out


@pytest.mark.parametrize("seed", range(5))
def test_sessions_across_epochs_and_restores_match_a_reference(seed):
    rnd = random.Random(seed)
    gap = 7
    records = [(rnd.choice("abc"), rnd.randrange(1000), rnd.randrange(200)) for _ in range(120)]
    # epochs of 10 records; the watermark trails the maximum timestamp by 1000 so nothing is late
    h = Harness(windowed(EventTimeSessionWindows.with_gap(gap)).aggregate(SumAggregate(), DescribeSessionAgg()))
    for i in range(0, len(records), 10):
        h.elements([(k, (k, v), ts) for k, v, ts in records[i:i + 10]])
        h.advance_watermark(max(ts for _, _, ts in records[:i + 10]) - 1000)
        h = Harness(h.template, h.snapshot()) if i % 30 == 0 else h   # restore into a new instance
    h.advance_watermark(MAX_LONG_VALUE)
    expected = reference_sessions(records, gap)
    got = defaultdict(list)
    for (key, start, end, total, count), _ in h.output:
        got[key].append((start, end, total, count))
    assert {k: sorted(v) for k, v in got.items()} == \
        {k: [(s, e, sum(vs), len(vs)) for s, e, vs in sessions] for k, sessions in expected.items()}


class DescribeSessionAgg(ProcessWindowFunction):
    def process(self, key, context, elements):
        (total, count), = elements
        yield key, context.window().start, context.window().end, total, count


def test_rolled_back_epoch_replays_to_the_same_result():
    """State values are never changed in place, so the backend's undo log restores the epoch."""
    h = Harness(windowed(EventTimeSessionWindows.with_gap(10)).aggregate(SumAggregate()))
    h.elements([("a", ("a", 1), 0), ("a", ("a", 2), 20)])
    h.backend.confirm()
    for _ in range(2):
        h.elements([("a", ("a", 4), 10)])  # bridges [0, 10) and [20, 30): their accumulators merge
        h.rollback()
    h.elements([("a", ("a", 4), 10)])
    h.advance_watermark(MAX_LONG_VALUE)
    assert h.values() == [(7, 3)]


def test_late_session_element_merging_into_an_open_session_is_not_late():
    late = OutputTag("late")
    h = Harness(windowed(EventTimeSessionWindows.with_gap(10)).side_output_late_data(late).process(DescribeWindow()))
    h.element("a", ("a", 1), 20)
    h.advance_watermark(15)
    h.element("a", ("a", 2), 12)   # its own window [12, 22) is not late (21 > 15) and merges
    h.element("a", ("a", 3), 2)    # [2, 12) is late (11 <= 15) although it touches [12, 30)
    h.advance_watermark(MAX_LONG_VALUE)
    # Flink merges first and then checks the merged window, so the element joins the session
    assert h.values() == [("a", TimeWindow(2, 30), [1, 2, 3])] and h.side.get("late", []) == []


def test_count_trigger_and_purging_trigger_on_global_windows():
    h = Harness(windowed(GlobalWindows.create()).trigger(CountTrigger.of(2)).reduce(_sum_values))
    h.elements([("a", ("a", i), None) for i in (1, 2, 3, 4, 5)])
    assert h.values() == [("a", 3), ("a", 10)]   # FIRE keeps the contents
    h = Harness(windowed(GlobalWindows.create()).trigger(PurgingTrigger.of(CountTrigger.of(2))).reduce(_sum_values))
    h.elements([("a", ("a", i), None) for i in (1, 2, 3, 4, 5)])
    assert h.values() == [("a", 3), ("a", 7)]    # FIRE_AND_PURGE starts over
    h = Harness(windowed(GlobalWindows.create()).reduce(_sum_values))
    h.elements([("a", ("a", 1), None)])
    h.advance_watermark(MAX_LONG_VALUE)
    h.advance_processing_time(MAX_LONG_VALUE)
    assert h.values() == []                      # NeverTrigger


def test_continuous_event_time_trigger_fires_every_interval_and_at_the_end():
    h = Harness(windowed(TumblingEventTimeWindows.of(100)).trigger(ContinuousEventTimeTrigger.of(Time.milliseconds(30)))
                .reduce(_sum_values))
    h.element("a", ("a", 1), 5)      # first fire time: 5 - 5 % 30 + 30 = 30
    h.advance_watermark(29)
    assert h.take() == []
    h.advance_watermark(30)
    assert h.take() == [(("a", 1), 30)]
    h.element("a", ("a", 2), 40)
    h.advance_watermark(75)          # 60
    assert h.take() == [(("a", 3), 60)]
    h.advance_watermark(MAX_LONG_VALUE)  # 90 and the window end 99
    assert h.take() == [(("a", 3), 90), (("a", 3), 99)]
    assert h.pending_timers(EVENT_TIME) == h.pending_timers(PROCESSING_TIME) == []


def test_processing_time_windows_fire_when_the_clock_passes_their_end():
    h = Harness(windowed(TumblingProcessingTimeWindows.of(Time.seconds(1))).reduce(_sum_values))
    h.now = 1_500
    h.elements([("a", ("a", 1), None), ("b", ("b", 2), None)])
    h.now = 1_999
    h.element("a", ("a", 3), None)
    h.advance_processing_time(1_998)
    assert h.take() == []
    h.advance_processing_time(2_100)
    assert sorted(h.take()) == [(("a", 4), 1_999), (("b", 2), 1_999)]
    h.advance_watermark(MAX_LONG_VALUE)  # event time does nothing to processing-time windows
    assert h.take() == [] and h.state_entries().get("window-contents", 0) == 0


def test_processing_time_sessions_and_continuous_processing_trigger():
    h = Harness(windowed(ProcessingTimeSessionWindows.with_gap(100)).process(DescribeWindow()))
    for now, v in [(0, 1), (50, 2), (140, 3), (400, 4)]:
        h.advance_processing_time(now)
        h.element("a", ("a", v), None)
    h.advance_processing_time(10_000)
    # [0, 100) + [50, 150) + [140, 240) merge; the session's timer (239) fires before 400 arrives
    assert h.values() == [("a", TimeWindow(0, 240), [1, 2, 3]), ("a", TimeWindow(400, 500), [4])]
    h = Harness(windowed(GlobalWindows.create()).trigger(ContinuousProcessingTimeTrigger.of(100))
                .reduce(_sum_values))
    h.now = 10
    h.element("a", ("a", 1), None)
    h.advance_processing_time(100)
    h.element("a", ("a", 2), None)
    h.advance_processing_time(250)
    assert h.take() == [(("a", 1), 100), (("a", 3), 200)]


def test_count_windows_tumbling_and_sliding_like_pyflink():
    class Collect(WindowFunction):
        def apply(self, key, window, inputs):
            yield window.id, [v for _, v in inputs]

    h = Harness(count_window(_FakeKeyedStream(), 3).apply(Collect()))
    h.elements([("a", ("a", i), None) for i in range(8)])
    assert h.values() == [(0, [0, 1, 2]), (1, [3, 4, 5])]
    assert h.state_entries()["window-contents"] == 1  # only the open window (6, 7); full ones are dropped
    h = Harness(count_window(_FakeKeyedStream(), 3, 1).apply(Collect()))
    h.elements([("a", ("a", i), None) for i in range(6)])
    # PyFlink: window k holds elements k .. k+2 and fires when full
    assert h.values() == [(k, [k, k + 1, k + 2]) for k in range(4)]
    h = Harness(count_window(_FakeKeyedStream(), 4, 2).reduce(_sum_values))
    h.elements([("a", ("a", i), None) for i in range(9)] + [("b", ("b", 1), None)])
    assert h.values() == [("a", 0 + 1 + 2 + 3), ("a", 2 + 3 + 4 + 5), ("a", 4 + 5 + 6 + 7)]
    with pytest.raises(ValueError, match="slide"):
        count_window(_FakeKeyedStream(), 3, -1)


def test_process_window_function_window_state_global_state_and_clear():
    class Firings(ProcessWindowFunction):
        def process(self, key, context, elements):
            per_window = context.window_state().get_state(ValueStateDescriptor("firings"))
            n = (per_window.value() or 0) + 1
            per_window.update(n)
            total = context.global_state().get_state(ValueStateDescriptor("all-firings"))
            total.update((total.value() or 0) + 1)
            yield context.window().start, n, total.value(), len(list(elements))

        def clear(self, context):
            context.window_state().get_state(ValueStateDescriptor("firings")).clear()

    h = Harness(windowed(TumblingEventTimeWindows.of(10)).allowed_lateness(20).process(Firings()))
    h.element("a", ("a", 1), 1)
    h.element("a", ("a", 1), 11)
    h.advance_watermark(10)
    h.element("a", ("a", 1), 2)   # late firing of [0, 10)
    h.advance_watermark(MAX_LONG_VALUE)
    assert h.values() == [(0, 1, 1, 1), (0, 2, 2, 2), (10, 1, 3, 1)]
    assert h.state_entries().get("window-state-firings", 0) == 0   # clear() ran at cleanup
    with pytest.raises(RuntimeError, match="merging windows"):
        h = Harness(windowed(EventTimeSessionWindows.with_gap(10)).process(Firings()))
        h.element("a", ("a", 1), 1)
        h.advance_watermark(MAX_LONG_VALUE)


def test_a_window_firing_at_its_end_without_lateness_runs_clear_after_process_and_leaves_no_state():
    """The window's last timer (its end, no allowed lateness): process() sees the window's own state,
    clear() runs after it and sees what process() left, and nothing of the window is left behind."""
    seen_by_clear = ListStateDescriptor("seen-by-clear")

    class Firings(ProcessWindowFunction):
        def process(self, key, context, elements):
            per_window = context.window_state().get_state(ValueStateDescriptor("firings"))
            per_window.update((per_window.value() or 0) + 1)
            yield key, context.window().start, sum(v for _, v in elements)

        def clear(self, context):
            per_window = context.window_state().get_state(ValueStateDescriptor("firings"))
            context.global_state().get_list_state(seen_by_clear).add((context.window().start, per_window.value()))
            per_window.clear()

    h = Harness(windowed(TumblingEventTimeWindows.of(10)).process(Firings()))
    h.elements([("a", ("a", 1), 1), ("a", ("a", 2), 5), ("b", ("b", 4), 7), ("a", ("a", 8), 12)])
    h.advance_watermark(9)
    assert h.take() == [(("a", 0, 3), 9), (("b", 0, 4), 9)]
    h.advance_watermark(MAX_LONG_VALUE)
    assert h.take() == [(("a", 10, 8), 19)]
    cleared = {}
    for key in ("a", "b"):
        h.backend.set_current_key(key, 0)
        cleared[key] = list(h.backend.get_state(seen_by_clear).get())
    assert cleared == {"a": [(0, 1), (10, 1)], "b": [(0, 1)]}
    assert h.pending_timers() == []
    assert all(n == 0 for name, n in h.state_entries().items() if name != "seen-by-clear"), h.state_entries()


def test_custom_trigger_with_partitioned_state_on_merging_windows():
    class EveryOther(Trigger):
        """Fires on every second element of a session; its counter merges with the session."""

        desc = ReducingStateDescriptor("seen", lambda a, b: a + b)

        def on_element(self, element, timestamp, window, ctx):
            seen = ctx.get_partitioned_state(self.desc)
            seen.add(1)
            return TriggerResult.FIRE if seen.get() % 2 == 0 else TriggerResult.CONTINUE

        def on_processing_time(self, time, window, ctx):
            return TriggerResult.CONTINUE

        def on_event_time(self, time, window, ctx):
            return TriggerResult.CONTINUE

        def can_merge(self):
            return True

        def on_merge(self, window, ctx):
            ctx.merge_partitioned_state(self.desc)

        def clear(self, window, ctx):
            ctx.get_partitioned_state(self.desc).clear()

    h = Harness(windowed(EventTimeSessionWindows.with_gap(15)).trigger(EveryOther()).process(DescribeWindow()))
    h.element("a", ("a", 1), 0)     # [0, 15)
    h.element("a", ("a", 2), 50)    # [50, 65)
    h.element("a", ("a", 3), 25)    # [25, 40)
    assert h.values() == []
    h.element("a", ("a", 4), 38)    # [38, 53) merges [25, 40) and [50, 65): counters 1 + 1, then 3: no fire
    assert h.values() == []
    h.element("a", ("a", 5), 60)    # [60, 75) joins [25, 65): counter 4: fire
    assert h.take() == [(("a", TimeWindow(25, 75), [2, 3, 4, 5]), "element")]


def test_merging_assigner_rejects_a_trigger_that_cannot_merge():
    class NoMerge(Trigger):
        def on_element(self, element, timestamp, window, ctx):
            return TriggerResult.CONTINUE

        def on_processing_time(self, time, window, ctx):
            return TriggerResult.CONTINUE

        def on_event_time(self, time, window, ctx):
            return TriggerResult.CONTINUE

        def clear(self, window, ctx):
            pass

    with pytest.raises(TypeError, match="merging"):
        windowed(EventTimeSessionWindows.with_gap(10)).trigger(NoMerge())


def test_transformation_names_and_function_type_checks():
    assert windowed(TumblingEventTimeWindows.of(Time.minutes(1))).reduce(_sum_values).transformation_name == \
        "TumblingEventTimeWindows(60000) -> reduce"
    assert windowed(SlidingEventTimeWindows.of(10, 5)).process(DescribeWindow()).transformation_name == \
        "SlidingEventTimeWindows(10, 5) -> process, DescribeWindow"
    with pytest.raises(TypeError, match="WindowFunction or ProcessWindowFunction"):
        windowed(TumblingEventTimeWindows.of(10)).reduce(_sum_values, window_function=lambda *a: a)
    with pytest.raises(TypeError):
        windowed(TumblingEventTimeWindows.of(10)).aggregate(lambda a, b: a)
    with pytest.raises(TypeError):
        windowed(TumblingEventTimeWindows.of(10)).process(ApplyDescribe())
    with pytest.raises(TypeError):
        windowed(TumblingEventTimeWindows.of(10)).apply(DescribeWindow())


# =====================================================================================================
# jobs on Spark
# =====================================================================================================

class SecondField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


def with_timestamps(env, data, bound_ms):
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(bound_ms)) \
        .with_timestamp_assigner(SecondField())
    return env.from_collection(data).assign_timestamps_and_watermarks(strategy)


class Stamped(ProcessFunction):
    """Tags a window operator's results with their name and the timestamp they carry."""

    def __init__(self, name):
        self.name = name

    def process_element(self, value, ctx):
        yield self.name, value, ctx.timestamp()


def _sum3(a, b):
    return (a[0], max(a[1], b[1]), a[2] + b[2])


class SumValues(AggregateFunction):
    """(sum, count) of the records' third field; accumulator changed in place."""

    def create_accumulator(self):
        return [0, 0]

    def add(self, value, accumulator):
        accumulator[0] += value[2]
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator):
        return accumulator[0], accumulator[1]

    def merge(self, acc_a, acc_b):
        return [acc_a[0] + acc_b[0], acc_a[1] + acc_b[1]]


class WindowAndResult(ProcessWindowFunction):
    def process(self, key, context, elements):
        for result in elements:
            yield key, context.window().start, context.window().end, result


class SessionValues(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key, context.window().start, context.window().end, sorted(v for _, _, v in elements)


class CountAndValues(WindowFunction):
    def apply(self, key, window, inputs):
        inputs = list(inputs)
        yield key, window.start, window.end, len(inputs), sorted(v for _, _, v in inputs)


def in_order_data(n=90, keys="abc", seed=7):
    """Timestamps rise by 25 ms per record with up to 99 ms of disorder: with a 100 ms bound no
    window is ever late, and windows fire while the job runs."""
    rnd = random.Random(seed)
    return [(rnd.choice(keys), 25 * i + rnd.randrange(100), rnd.randrange(1, 1000)) for i in range(n)]


def reference_time_windows(data, size, slide):
    out = defaultdict(list)
    for key, ts, value in data:
        first = ts - ts % slide - size + slide
        for start in range(first, ts + 1, slide):
            if start <= ts < start + size:
                out[(key, start, start + size)].append(value)
    return out


@pytest.mark.parametrize("per_epoch, backend", [(4, "heap"), (1000, "rocksdb")])
def test_event_time_windows_on_spark_match_references(env, per_epoch, backend):
    data = in_order_data()
    env.set_max_records_per_epoch(per_epoch)
    if backend == "rocksdb":
        env.set_state_backend(EmbeddedRocksDBStateBackend())
    keyed = with_timestamps(env, data, 100).key_by(lambda r: r[0])
    tumbling = keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(100))).reduce(_sum3) \
        .process(Stamped("tumbling-reduce"))
    sliding = keyed.window(SlidingEventTimeWindows.of(Time.milliseconds(150), Time.milliseconds(50))) \
        .aggregate(SumValues(), WindowAndResult()).process(Stamped("sliding-aggregate"))
    sessions = keyed.window(EventTimeSessionWindows.with_gap(Time.milliseconds(60))).process(SessionValues()) \
        .process(Stamped("session-process"))
    applied = keyed.window(TumblingEventTimeWindows.of(200, 50)).apply(CountAndValues()) \
        .process(Stamped("tumbling-apply"))
    out = list(tumbling.union(sliding, sessions, applied).execute_and_collect())
    by_name = defaultdict(list)
    for name, value, ts in out:
        by_name[name].append((value, ts))

    ref = reference_time_windows(data, 100, 100)
    assert sorted((v[0], ts - 99, v[2]) for v, ts in by_name["tumbling-reduce"]) == \
        sorted((k, s, sum(vs)) for (k, s, _), vs in ref.items())
    assert all(v[1] <= ts for v, ts in by_name["tumbling-reduce"])  # result stamped with the window end - 1

    ref = reference_time_windows(data, 150, 50)
    assert sorted(by_name["sliding-aggregate"]) == \
        sorted(((k, s, e, (sum(vs), len(vs))), e - 1) for (k, s, e), vs in ref.items())

    sessions_ref = reference_sessions([(k, v, ts) for k, ts, v in data], 60)
    assert sorted(by_name["session-process"]) == \
        sorted(((k, s, e, vs), e - 1) for k, ss in sessions_ref.items() for s, e, vs in ss)
    assert any(len(vs) > 1 for ss in sessions_ref.values() for _, _, vs in ss)  # some sessions merged

    ref = defaultdict(list)
    for key, ts, value in data:
        start = TimeWindow.get_window_start_with_offset(ts, 50, 200)
        ref[(key, start, start + 200)].append(value)
    assert sorted(by_name["tumbling-apply"]) == \
        sorted(((k, s, e, len(vs), sorted(vs)), e - 1) for (k, s, e), vs in ref.items())


class AtWindowEnd(EventTimeTrigger):
    """Fires exactly as EventTimeTrigger does; not being that very class, its windows fire one timer
    at a time through ``on_timer``."""


class FailsForKey(ProcessWindowFunction):
    def __init__(self, key):
        self.key = key

    def process(self, key, context, elements):
        if key == self.key:
            raise ValueError(f"no result for {key}")
        yield key, context.window().start


def test_windows_fired_in_bulk_at_their_end_match_windows_fired_timer_by_timer(env):
    """A tumbling or sliding event-time window without lateness fires at its end in bulk
    (``fire_window_ends``, more windows than one bulk call takes); the same windows behind a trigger
    that only behaves like EventTimeTrigger fire timer by timer. Same results, same timestamps."""
    from keyspan.runtime.worker.task import FIRING_BATCH

    keys = [f"k{i}" for i in range(FIRING_BATCH + 300)]
    data = [(key, ts, i + ts) for i, key in enumerate(keys) for ts in (10, 120, 130)]  # two windows per key
    env.set_parallelism(1)
    keyed = with_timestamps(env, data, 0).key_by(lambda r: r[0])
    outputs = []
    for trigger in (EventTimeTrigger(), AtWindowEnd()):
        for name, assigner in (("tumbling", TumblingEventTimeWindows.of(Time.milliseconds(100))),
                               ("sliding", SlidingEventTimeWindows.of(Time.milliseconds(100), Time.milliseconds(50)))):
            windowed = keyed.window(assigner).trigger(trigger)
            outputs.append(windowed.aggregate(SumValues(), WindowAndResult())
                           .process(Stamped(f"{name}-{type(trigger).__name__}")))
    out = list(outputs[0].union(*outputs[1:]).execute_and_collect())
    by_name = defaultdict(list)
    for name, value, ts in out:
        by_name[name].append((value, ts))
    for name, size, slide in (("tumbling", 100, 100), ("sliding", 100, 50)):
        ref = reference_time_windows(data, size, slide)
        expected = sorted(((k, s, e, (sum(vs), len(vs))), e - 1) for (k, s, e), vs in ref.items())
        assert len(expected) > FIRING_BATCH
        assert sorted(by_name[f"{name}-EventTimeTrigger"]) == expected
        assert sorted(by_name[f"{name}-AtWindowEnd"]) == expected


@pytest.mark.parametrize("backend_kind", ["heap", "rocksdb"])
def test_a_pane_read_and_dropped_in_one_step_is_gone_and_a_rollback_brings_it_back(backend_kind, tmp_path):
    """``get_and_clear`` (how a pane is fired at its window's end) on list, reducing and aggregating
    window contents: the value ``get`` gave, then nothing, on this namespace only; undone by a rollback."""
    if backend_kind == "heap":
        backend = HeapKeyedStateBackend("op", range(0, 4))
    else:
        backend = EmbeddedRocksDBStateBackend().create_keyed_backend("op", range(0, 4), local_dir=str(tmp_path))
    try:
        backend.current_key, backend.current_key_group = "k", 1
        first, second = TimeWindow(0, 10), TimeWindow(10, 20)
        for descriptor, values, expected in (
                (ListStateDescriptor("list"), [("k", 1, 2), ("k", 2, 3)], [("k", 1, 2), ("k", 2, 3)]),
                (ReducingStateDescriptor("reducing", _sum3), [("k", 1, 2), ("k", 2, 3)], ("k", 2, 5)),
                (AggregatingStateDescriptor("aggregating", SumValues()), [("k", 1, 2), ("k", 2, 3)], (5, 2))):
            state = backend.get_state(namespaced(descriptor))
            for window in (first, second):
                state.set_current_namespace(window)
                for value in values:
                    state.add(value)
            backend.confirm()
            state.set_current_namespace(first)
            assert state.get_and_clear() == expected
            assert state.get() in (None, [])
            assert state.get_and_clear() in (None, [])
            state.set_current_namespace(second)
            assert state.get() == expected
            backend.rollback()
            state.set_current_namespace(first)
            assert state.get() == expected
    finally:
        backend.close()


class MergeInPlace(SumValues):
    """SumValues whose merge changes its first accumulator in place, as Flink's often do."""

    def merge(self, acc_a, acc_b):
        acc_a[0] += acc_b[0]
        acc_a[1] += acc_b[1]
        return acc_a


class SumAndCount(Avg):
    """The built-in ``Avg`` with its (sum, count) accumulator as the result: its merge is the built-in's."""

    def get_result(self, accumulator):
        return accumulator


@pytest.mark.parametrize("backend_kind", ["heap", "heap with a record hook", "rocksdb"])
@pytest.mark.parametrize("aggregate", [MergeInPlace, SumAndCount])
def test_a_chunk_s_panes_merged_in_one_call_equal_them_merged_one_by_one_and_roll_back(backend_kind, aggregate,
                                                                                     tmp_path):
    """``add_accumulators`` (the columnar window path's merge of a chunk's panes): the same panes and
    flags as ``add_accumulator`` pane by pane, stored accumulators never changed in place, the last
    key and pane left current, and a rollback brings back the epoch before. A merge that changes its
    first accumulator gets a copy of the stored one; the built-in merge, which changes neither, gets
    the stored one itself."""
    assert getattr(aggregate(), "merge_keeps_arguments", False) is (aggregate is SumAndCount)
    _copied = _copied_list if aggregate is MergeInPlace else _copied_tuple
    def backend_of(name):
        if backend_kind == "rocksdb":
            return EmbeddedRocksDBStateBackend().create_keyed_backend(name, range(0, 4), local_dir=str(tmp_path / name))
        backend = HeapKeyedStateBackend(name, range(0, 4))
        if backend_kind == "heap with a record hook":
            backend._add_record_hook(lambda: None)
        return backend

    bulk, one_by_one = backend_of("bulk"), backend_of("one")
    try:
        windows = [TimeWindow(0, 10), TimeWindow(10, 20)]
        states = [b.get_state(namespaced(AggregatingStateDescriptor("contents", aggregate())))
                  for b in (bulk, one_by_one)]
        earlier = [("a", 1, windows[0], [1, 1]), ("b", 2, windows[1], [5, 1])]
        chunk = [("a", 1, windows[0], [2, 1]), ("a", 1, windows[1], [3, 1]), ("c", 3, windows[0], [4, 2]),
                 ("b", 2, windows[1], [6, 3])]
        for backend, state in zip((bulk, one_by_one), states):
            assert state.add_accumulators(list(map(_copied, earlier))) == [False, False]
            backend.confirm()  # an epoch committed
        found = states[0].add_accumulators(map(_copied, chunk))
        expected = []
        for key, kg, window, acc in map(_copied, chunk):
            one_by_one.current_key, one_by_one.current_key_group = key, kg
            states[1].set_current_namespace(window)
            expected.append(states[1].add_accumulator(acc))
        assert found == expected == [True, False, False, True]
        assert (bulk.current_key, bulk.current_key_group) == ("b", 2)
        assert states[0].get() == (11, 4)  # the last row's pane is current
        for key, kg, window in {(key, kg, window) for key, kg, window, _ in earlier + chunk}:
            got = []
            for backend, state in zip((bulk, one_by_one), states):
                backend.current_key, backend.current_key_group = key, kg
                state.set_current_namespace(window)
                got.append(state.get())
            assert got[0] == got[1], (key, window)
        bulk.rollback()
        for key, kg, window, acc in earlier + [("a", 1, windows[1], None), ("c", 3, windows[0], None)]:
            bulk.current_key, bulk.current_key_group = key, kg
            states[0].set_current_namespace(window)
            assert states[0].get() == (None if acc is None else (acc[0], acc[1])), (key, window)
    finally:
        bulk.close()
        one_by_one.close()


def _copied_list(row):
    key, kg, window, acc = row
    return key, kg, window, list(acc)


def _copied_tuple(row):
    key, kg, window, acc = row
    return key, kg, window, tuple(acc)


def test_only_windows_that_fire_and_clean_at_their_end_are_fired_in_bulk():
    def operator(assigner, trigger=None, lateness=0):
        trigger = trigger or assigner.get_default_trigger(None)
        return WindowOperator(WindowOperationDescriptor(assigner, trigger, lateness, None,
                                                        ReducingStateDescriptor("window-contents", _sum3), None, True))

    tumbling = TumblingEventTimeWindows.of(Time.milliseconds(100))
    assert operator(tumbling).event_time_firing is not None
    assert operator(SlidingEventTimeWindows.of(Time.milliseconds(100), Time.milliseconds(50))).event_time_firing is not None
    assert operator(tumbling, AtWindowEnd()).event_time_firing is None
    assert operator(tumbling, lateness=10).event_time_firing is None
    assert operator(EventTimeSessionWindows.with_gap(Time.milliseconds(60))).event_time_firing is None
    assert operator(TumblingProcessingTimeWindows.of(Time.milliseconds(100))).event_time_firing is None


def test_a_window_function_failing_in_a_bulk_firing_names_the_operator_the_timer_and_the_key(env):
    from keyspan.runtime.executor import JobExecutionError

    data = [(f"k{i}", 10 * i, i) for i in range(20)]
    with_timestamps(env, data, 0).key_by(lambda r: r[0]) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(100))).process(FailsForKey("k13")) \
        .name("per-key-windows").print()
    with pytest.raises(JobExecutionError) as info:
        env.execute("failing-window")
    message = str(info.value)
    assert "operator 'per-key-windows'" in message
    assert "on_timer(199) for key 'k13'" in message
    assert "ValueError: no result for k13" in message


class CountPerWindow(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    """Written as for PyFlink: generic parameters, typed context, explicit clear."""

    def process(self, key: str, context: ProcessWindowFunction.Context[TimeWindow], elements) -> list:
        return [(key, context.window().start, context.window().end, len([e for e in elements]))]

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        pass


class SumOfSecond(WindowFunction[tuple, tuple, str, CountWindow]):
    def apply(self, key: str, window: CountWindow, inputs) -> list:
        return [(key, sum(i[1] for i in inputs))]


class GapByKey(SessionWindowTimeGapExtractor):
    def extract(self, element: tuple) -> int:
        return 8 if element[0] == "x" else 4


def test_a_pyflink_style_job_on_spark(env):
    from keyspan.common import Types

    env.set_parallelism(1)  # one input partition: a key's records keep their order (count windows)
    data = [("x", 2), ("x", 3), ("y", 7), ("x", 11), ("y", 12), ("x", 20), ("x", 21), ("y", 30)]
    row = Types.TUPLE([Types.STRING(), Types.INT()])
    ds = env.from_collection(data, type_info=row)
    timed = ds.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondOfTwo()))
    windowed_counts = Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG(), Types.INT()])
    tumbling = timed.key_by(lambda x: x[0], key_type=Types.STRING()) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(10))) \
        .process(CountPerWindow(), windowed_counts).map(lambda r: ("tumbling",) + r)
    sessions = timed.key_by(lambda x: x[0], key_type=Types.STRING()) \
        .window(EventTimeSessionWindows.with_dynamic_gap(GapByKey())) \
        .process(CountPerWindow(), windowed_counts).map(lambda r: ("sessions",) + r)
    counts = ds.key_by(lambda x: x[0], key_type=Types.STRING()).count_window(2) \
        .apply(SumOfSecond(), row).map(lambda r: ("count",) + r)
    sliding = ds.key_by(lambda x: x[0], key_type=Types.STRING()).window(CountSlidingWindowAssigner(2, 1)) \
        .apply(SumOfSecond(), row).map(lambda r: ("sliding",) + r)
    # window_all (DataStream.window_all has no method yet: the stream class is built directly)
    everything = AllWindowedStream(timed, TumblingEventTimeWindows.of(Time.milliseconds(10))) \
        .process(AllInWindow()).map(lambda r: ("all",) + r)
    out = sorted(tumbling.union(sessions, counts, sliding, everything).execute_and_collect())
    assert [r[1:] for r in out if r[0] == "all"] == [(0, 3), (10, 2), (20, 2), (30, 1)]
    assert [r[1:] for r in out if r[0] == "tumbling"] == sorted(
        [("x", 0, 10, 2), ("x", 10, 20, 1), ("x", 20, 30, 2), ("y", 0, 10, 1), ("y", 10, 20, 1), ("y", 30, 40, 1)])
    # x (gap 8): [2,10) [3,11) [11,19) touch -> [2,19); [20,28) [21,29) -> [20,29). y (gap 4): all apart
    assert [r[1:] for r in out if r[0] == "sessions"] == sorted(
        [("x", 2, 19, 3), ("x", 20, 29, 2), ("y", 7, 11, 1), ("y", 12, 16, 1), ("y", 30, 34, 1)])
    assert [r[1:] for r in out if r[0] == "count"] == sorted([("x", 2 + 3), ("x", 11 + 20), ("y", 7 + 12)])
    assert [r[1:] for r in out if r[0] == "sliding"] == sorted(
        [("x", 5), ("x", 14), ("x", 31), ("x", 41), ("y", 19), ("y", 42)])


class AllInWindow(ProcessAllWindowFunction[tuple, tuple, TimeWindow]):
    def process(self, context: ProcessAllWindowFunction.Context, elements) -> list:
        return [(context.window().start, len(list(elements)))]


class SecondOfTwo(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[1])


def test_late_data_allowed_lateness_and_side_output_on_spark(env):
    # one record per epoch, bound 0: the watermark before record i is max(ts before i) - 1
    data = [("a", 3, 1), ("a", 12, 2), ("a", 5, 4), ("a", 30, 8), ("a", 7, 16), ("a", 18, 32), ("a", 26, 64)]
    env.set_max_records_per_epoch(1)
    late = OutputTag("late")
    result = with_timestamps(env, data, 0).key_by(lambda r: r[0]) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(10))) \
        .allowed_lateness(Time.milliseconds(5)).side_output_late_data(late) \
        .reduce(lambda a, b: (a[0], max(a[1], b[1]), a[2] + b[2]))
    got = list(result.get_side_output(late).process(Stamped("late")).union(result.process(Stamped("window")))
               .execute_and_collect())
    windows = sorted((v[2], ts) for name, v, ts in got if name == "window")
    # [0,10): fires at wm 11 with 1, fires late with 1+4 at wm 11 (cleanup at 14);
    # [10,20): fires at wm 29 with 2; 18 arrives at wm 29 > 19 + 5: late;
    # [20,30): 26 arrives at wm 29 >= 29: fires at once with 64; [30,40): 8 at the end
    assert windows == [(1, 9), (2, 19), (5, 9), (8, 39), (64, 29)]
    # late records keep their own timestamps
    assert sorted((v, ts) for name, v, ts in got if name == "late") == [(("a", 7, 16), 7), (("a", 18, 32), 18)]


def test_count_windows_on_spark(env):
    keys = ["k1", "k2", "k3"]
    data = [(keys[i % 3], i) for i in range(40)]
    env.set_max_records_per_epoch(len(keys))  # a key occurs once per epoch: its order is the input order

    class Ids(WindowFunction):
        def apply(self, key, window, inputs):
            yield "tumbling", key, window.id, [v for _, v in inputs]

    class Slides(ProcessWindowFunction):
        def process(self, key, context, elements):
            yield "sliding", key, context.window().id, [v for _, v in elements]

    keyed = env.from_collection(data).key_by(lambda r: r[0])
    out = list(keyed.count_window(4).apply(Ids()).union(keyed.count_window(5, 2).process(Slides()))
               .execute_and_collect())
    expected = []
    for key in keys:
        values = [v for k, v in data if k == key]
        expected += [("tumbling", key, i // 4, values[i:i + 4]) for i in range(0, len(values) - 3, 4)]
        expected += [("sliding", key, w, values[2 * w:2 * w + 5]) for w in range(len(values))
                     if 2 * w + 5 <= len(values)]
    assert sorted(out) == sorted(expected)


def test_triggers_on_spark(env):
    data = [("a", t, 1) for t in (5, 15, 25, 35, 45, 55, 65, 75, 85, 95)] + [("b", 50, 100)]
    env.set_max_records_per_epoch(2)
    keyed = with_timestamps(env, data, 0).key_by(lambda r: r[0])
    counted = keyed.window(GlobalWindows.create()).trigger(PurgingTrigger.of(CountTrigger.of(3))) \
        .reduce(_sum3).map(lambda r: ("count", r[0], r[2]))
    continuous = keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(100))) \
        .trigger(ContinuousEventTimeTrigger.of(Time.milliseconds(40))).reduce(_sum3) \
        .process(Stamped("continuous")).map(lambda r: ("continuous", r[1][0], r[1][2], r[2]))
    out = sorted(counted.union(continuous).execute_and_collect())
    # PurgingTrigger(CountTrigger(3)): every 3 elements of a key, the sum of those 3
    count = [r for r in out if r[0] == "count"]
    assert count == [("count", "a", 3)] * 3
    # ContinuousEventTimeTrigger(40) on [0, 100) of key a: fire times 40, 80, then the window end 99.
    # Epochs (2 records) end at watermarks 14, 34, 54, 74, 94: 40 fires after the epoch of 45 and 55
    # (6 elements), 80 after that of 85 and 95 (10), 99 at the end. Key b's only element (50) comes
    # at watermark 94: its fire time 80 is due at once, then 99. Every result carries the window's
    # max timestamp, as in Flink.
    cont = [r[1:] for r in out if r[0] == "continuous"]
    assert cont == [("a", 6, 99), ("a", 10, 99), ("a", 10, 99), ("b", 100, 99), ("b", 100, 99)]


def test_processing_time_windows_on_spark(env):
    data = [(f"k{i % 4}", i, 1) for i in range(40)]
    env.set_max_records_per_epoch(10)

    class Sizes(ProcessWindowFunction):
        def process(self, key, context, elements):
            yield key, len(list(elements)), context.window().end - context.window().start

    # 1 ms windows end before the epoch that opened them does, so each fires at the end of that epoch
    out = list(env.from_collection(data).key_by(lambda r: r[0])
               .window(TumblingProcessingTimeWindows.of(Time.milliseconds(1))).process(Sizes())
               .execute_and_collect())
    counts = defaultdict(int)
    for key, n, size in out:
        assert size == 1
        counts[key] += n
    assert dict(counts) == {f"k{i}": 10 for i in range(4)}


def test_processing_time_windows_that_have_not_ended_do_not_fire_at_the_end_of_bounded_input(env):
    """As in Flink: at the end of a bounded input, pending processing-time timers are dropped."""
    day = 86_400_000
    now = int(time.time() * 1000)
    offset = (now + day // 2) % day  # the window holding "now" ends about 12 hours from now
    if offset >= day // 2:
        offset -= day
    data = [("a", i, 1) for i in range(10)]
    out = list(env.from_collection(data).key_by(lambda r: r[0])
               .window(TumblingProcessingTimeWindows.of(Time.days(1), Time.milliseconds(offset)))
               .reduce(_sum3).execute_and_collect())
    assert out == []


def _build_sessions(env, out, data, parallelism):
    env.set_parallelism(parallelism)
    env.set_max_records_per_epoch(50)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(100)) \
        .with_timestamp_assigner(SecondField())
    (env.from_collection(data).uid("src").assign_timestamps_and_watermarks(strategy).uid("timestamps")
        .key_by(lambda r: r[0]).window(EventTimeSessionWindows.with_gap(Time.milliseconds(150)))
        .aggregate(SumValues(), SessionBounds()).uid("sessions")
        .map(json.dumps).uid("json")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()).uid("sink"))


class SessionBounds(ProcessWindowFunction):
    def process(self, key, context, elements):
        (total, count), = elements
        yield [key, context.window().start, context.window().end, total, count]


def _lines(out):
    return sorted(line for p in out.iterdir() if p.is_file() for line in p.read_text().splitlines())


def test_sessions_continue_across_a_savepoint_restore_at_another_parallelism(workdir):
    data = in_order_data(n=1500, keys="abcde", seed=11)
    reference_out = workdir / "reference"
    env = StreamExecutionEnvironment.get_execution_environment()
    _build_sessions(env, reference_out, data, 2)
    env.execute("sessions-reference")
    reference = _lines(reference_out)
    expected = reference_sessions([(k, v, ts) for k, ts, v in data], 150)
    assert sorted(json.loads(line) for line in reference) == \
        sorted([k, s, e, sum(vs), len(vs)] for k, ss in expected.items() for s, e, vs in ss)

    out = workdir / "out"
    env = StreamExecutionEnvironment.get_execution_environment()
    _build_sessions(env, out, data, 2)
    job = BackgroundJob(env, "sessions")
    wait_for_checkpoints("sessions", 4, job=job)
    path = stop_with_savepoint("sessions")
    job.join()
    metadata = json.loads(open(path.removeprefix("file://") + "/_metadata.json").read())
    read = metadata["source_offsets"]["0"]["index"]  # records read before the savepoint
    assert 0 < read < len(data)
    # some sessions hold records from both sides of the savepoint: they merge across the restore
    indexed = reference_sessions([(k, i, ts) for i, (k, ts, _) in enumerate(data)], 150)
    assert any(min(idx) < read <= max(idx) for ss in indexed.values() for _, _, idx in ss)

    use_options(savepoint_path=path)
    env = StreamExecutionEnvironment.get_execution_environment()
    _build_sessions(env, out, data, 3)
    env.execute("sessions")
    assert _lines(out) == reference


class SavedBeforeTimersHeldWindows(KeyedStateBootstrapFunction):
    """A tumbling 100 ms reduce's state as keyspan saved it before timers held their windows: the panes,
    the map state ``window-event-timers`` (timestamp → windows) and a plain timer at each window's end."""

    def open(self, runtime_context):
        self.contents = runtime_context.get_state(namespaced(ReducingStateDescriptor("window-contents", _sum3)))
        self.timer_windows = runtime_context.get_map_state(MapStateDescriptor("window-event-timers"))

    def process_element(self, row, ctx):
        window = TimeWindow(row.ts - row.ts % 100, row.ts - row.ts % 100 + 100)
        self.contents.set_current_namespace(window)
        self.contents.add((row.key, row.ts, row.value))
        end = window.max_timestamp()
        self.timer_windows.put(end, (*(self.timer_windows.get(end) or ()), window))
        ctx.timer_service().register_event_time_timer(end)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_windows_saved_before_timers_held_them_fire_once_with_their_saved_contents(spark, workdir, backend,
                                                                                   monkeypatch):
    """A savepoint in the earlier layout: a saved window that gets more records (its timer moves over when
    the window registers it again), one that gets none (it moves over when it fires), and new windows."""
    monkeypatch.setenv("KEYSPAN_SAVEPOINT_KEY", "window-tests")  # the job's workdir is not the writer's
    saved = spark.createDataFrame([("a", 10, 5), ("a", 20, 3), ("b", 110, 7)], "key string, ts long, value long")
    path = SavepointWriter.new_savepoint(spark, max_parallelism=128).with_operator(
        "windows", OperatorTransformation.bootstrap_with(saved).key_by(lambda row: row.key)
        .transform(SavedBeforeTimersHeldWindows())).write(str(workdir / "earlier-layout"))
    use_options(savepoint_path=path)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    if backend == "rocksdb":
        env.set_state_backend(EmbeddedRocksDBStateBackend())
    data = [("a", 50, 1), ("b", 250, 2), ("a", 150, 4)]
    out = with_timestamps(env, data, 1000).key_by(lambda r: r[0]) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(100))).reduce(_sum3).uid("windows") \
        .process(Stamped("windows"))
    assert sorted((value, ts) for _, value, ts in out.execute_and_collect()) == [
        (("a", 50, 9), 99), (("a", 150, 4), 199), (("b", 110, 7), 199), (("b", 250, 2), 299)]
