"""Watermarks, record timestamps, timers and side outputs, on real Spark.

Records are (key, event time ms, tag). Jobs cut their input into many epochs with
``set_max_records_per_epoch`` so watermarks advance between epochs, and their results are
compared with what Flink's semantics give, computed here from the input.
"""

from __future__ import annotations

import pytest

from keyspan.common import Duration, WatermarkStrategy
from keyspan.common.watermark_strategy import TimestampAssigner
from keyspan.datastream import KeyedProcessFunction, ProcessFunction, TimeDomain
from keyspan.datastream.output_tag import OutputTag
from keyspan.datastream.state import ValueStateDescriptor

LONG_MIN = -(1 << 63)
LONG_MAX = (1 << 63) - 1


class SecondField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


def bounded(ms: int) -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(ms)).with_timestamp_assigner(
        SecondField())


class SeesTime(ProcessFunction):
    """Emits (record, its timestamp, the watermark the operator had when it arrived)."""

    def process_element(self, value, ctx):
        yield value, ctx.timestamp(), ctx.timer_service().current_watermark()


def test_watermark_is_max_timestamp_minus_bound_at_the_previous_epoch_end(env):
    data = [("a", t, i) for i, t in enumerate([1000, 3000, 2500, 7000, 6000, 9000, 8000, 12000])]
    env.set_max_records_per_epoch(2)
    out = env.from_collection(data).assign_timestamps_and_watermarks(bounded(1000)).process(
        SeesTime()).execute_and_collect()
    rows = sorted(list(out), key=lambda r: r[0][2])
    epochs = [data[i:i + 2] for i in range(0, len(data), 2)]
    expected_wm = LONG_MIN
    i = 0
    for epoch in epochs:
        for record in epoch:
            assert rows[i] == (record, record[1], expected_wm)
            i += 1
        expected_wm = max(expected_wm, max(r[1] for r in data[: i]) - 1000 - 1)


class TimerAtTimestamp(KeyedProcessFunction):
    """Registers an event-time timer at record time + 10 and a duplicate of it; one deleted timer."""

    def process_element(self, value, ctx):
        ts = ctx.timestamp()
        ctx.timer_service().register_event_time_timer(ts + 10)
        ctx.timer_service().register_event_time_timer(ts + 10)  # de-duplicated
        ctx.timer_service().register_event_time_timer(ts + 5)
        if value[2] == "cancel":
            ctx.timer_service().delete_event_time_timer(ts + 5)

    def on_timer(self, timestamp, ctx):
        yield (ctx.get_current_key(), timestamp, ctx.time_domain(), ctx.timer_service().current_watermark(),
               ctx.timestamp())


@pytest.mark.parametrize("per_epoch", [1, 3, 100])
def test_event_time_timers_fire_once_in_timestamp_order(env, per_epoch):
    data = [("a", 100, ""), ("b", 130, "cancel"), ("a", 120, ""), ("a", 100, "dup"), ("b", 400, ""),
            ("a", 390, "")]
    env.set_max_records_per_epoch(per_epoch)
    out = list(env.from_collection(data).assign_timestamps_and_watermarks(bounded(50)).key_by(
        lambda r: r[0]).process(TimerAtTimestamp()).execute_and_collect())
    expected = set()
    for key, ts, tag in data:
        expected.add((key, ts + 10))
        if tag != "cancel":
            expected.add((key, ts + 5))
    fired = [(k, t) for k, t, _, _, _ in out]
    assert sorted(fired) == sorted(expected) and len(fired) == len(set(fired))
    assert all(d == TimeDomain.EVENT_TIME and ts == t and wm >= t for _, t, d, wm, ts in out)
    # per key, in timestamp order
    for key in ("a", "b"):
        times = [t for k, t, *_ in out if k == key]
        assert times == sorted(times)


class Late(ProcessFunction):
    def __init__(self, tag):
        self.tag = tag

    def process_element(self, value, ctx):
        if ctx.timestamp() <= ctx.timer_service().current_watermark():
            yield self.tag, value
        else:
            yield value


def test_side_output_routes_tagged_records(env):
    tag = OutputTag("late")
    data = [("a", 1000, 0), ("a", 5000, 1), ("a", 100, 2), ("a", 6000, 3), ("a", 3000, 4)]
    env.set_max_records_per_epoch(1)
    main = env.from_collection(data).assign_timestamps_and_watermarks(bounded(500)).process(Late(tag))
    main.get_side_output(tag).map(lambda r: ("late", r[2])).print()
    got = list(main.map(lambda r: ("on time", r[2])).execute_and_collect())
    # watermark before record i: max(ts of records < i) - 501
    assert sorted(got) == [("on time", 0), ("on time", 1), ("on time", 3)]
