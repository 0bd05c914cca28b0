"""Async I/O (``AsyncDataStream``): each record's ``async_invoke`` runs concurrently with the others
(up to ``capacity``), results come in input order (ordered) or as calls finish (unordered), with
their record's timestamp; timeouts call ``timeout``, retries follow the strategy, and every call
finishes inside its epoch."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from keyspan.common import Duration, Time, Types, WatermarkStrategy
from keyspan.common.restart_strategy import RestartStrategies
from keyspan.common.serialization import Encoder
from keyspan.datastream import (
    AsyncDataStream, AsyncFunction, AsyncRetryStrategy, MapFunction, ProcessWindowFunction, TumblingEventTimeWindows,
)
from keyspan.datastream.async_retry_predicates import empty_result_predicate
from keyspan.datastream.async_retry_strategies import ExponentialBackoffDelayRetryStrategy, FixedDelayRetryStrategy
from keyspan.datastream.connectors import FileSink
from keyspan.runtime.executor import JobExecutionError


class Lookup(AsyncFunction):
    """A service that answers record ``v`` after ``delay(v)`` seconds; each answer says how many calls
    were in flight when it started."""

    def __init__(self, delay):
        self.delay = delay

    def open(self, runtime_context):
        self.active = 0

    async def async_invoke(self, value):
        self.active += 1
        in_flight = self.active
        await asyncio.sleep(self.delay(value))
        self.active -= 1
        return [(value, value * 10, in_flight)]


@pytest.mark.parametrize("in_driver", [0, 1000], ids=["spark-jobs", "epochs-in-driver"])
def test_ordered_wait_runs_calls_concurrently_and_emits_in_input_order(env, in_driver):
    env.set_parallelism(1)
    env.set_small_epochs_in_driver(in_driver)
    values = list(range(40))
    stream = env.from_collection(values)
    out = list(AsyncDataStream.ordered_wait(stream, Lookup(lambda v: 0.002 * (v % 7)), Time.seconds(10), capacity=4)
               .execute_and_collect())
    assert [(v, w) for v, w, _ in out] == [(v, v * 10) for v in values]
    in_flight = [n for _, _, n in out]
    assert max(in_flight) <= 4  # capacity bounds the calls in flight
    assert max(in_flight) > 1  # ... and they did overlap


def test_unordered_wait_emits_as_calls_finish(env):
    env.set_parallelism(1)
    values = list(range(8))
    stream = env.from_collection(values)
    out = list(AsyncDataStream.unordered_wait(stream, Lookup(lambda v: 0.05 * (8 - v)), Time.seconds(10), capacity=8,
                                              output_type=Types.TUPLE([Types.INT(), Types.INT(), Types.INT()]))
               .execute_and_collect())
    assert sorted((v, w) for v, w, _ in out) == [(v, v * 10) for v in values]
    assert [v for v, _, _ in out] == list(reversed(values))  # the last record's call finished first


class Slow(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(30 if value == "stuck" else 0)
        return [value]


class SlowWithFallback(Slow):
    def timeout(self, value):
        return [f"no answer for {value}"]


def test_a_call_that_times_out_gives_the_timeout_results_or_fails_naming_the_record(env):
    env.set_parallelism(1)
    stream = env.from_collection(["a", "stuck", "b"])
    out = list(AsyncDataStream.ordered_wait(stream, SlowWithFallback(), Time.milliseconds(300)).execute_and_collect())
    assert out == ["a", "no answer for stuck", "b"]

    stream = env.from_collection(["a", "stuck"])
    AsyncDataStream.unordered_wait(stream, Slow(), Duration.of_millis(300)).name("lookup").print()
    with pytest.raises(JobExecutionError, match=r"lookup.*'stuck'.*TimeoutError"):
        env.execute("async-timeout")


class Flaky(AsyncFunction):
    """Fails its first two calls for every record, then answers empty once, then answers."""

    def open(self, runtime_context):
        self.calls = {}

    async def async_invoke(self, value):
        n = self.calls[value] = self.calls.get(value, 0) + 1
        if n <= 2:
            raise ConnectionError(f"service unavailable ({value})")
        return [] if n == 3 else [(value, n)]


def test_retries_follow_the_strategy_and_give_up_when_it_does(env):
    env.set_parallelism(1)
    retry_all = FixedDelayRetryStrategy(
        5, 10, empty_result_predicate, lambda error: isinstance(error, ConnectionError))
    stream = env.from_collection(["x", "y"])
    out = list(AsyncDataStream.ordered_wait_with_retry(stream, Flaky(), Time.seconds(10), retry_all)
               .execute_and_collect())
    assert out == [("x", 4), ("y", 4)]  # two errors and one empty answer retried

    errors_only = AsyncRetryStrategy.exponential_backoff(5, 5, 50, 2.0, None, lambda error: True)  # PyFlink's shortcut
    assert isinstance(errors_only, ExponentialBackoffDelayRetryStrategy)
    assert [errors_only.get_backoff_time_millis(n) for n in (1, 2, 3, 4, 5)] == [5, 10, 20, 40, 50]
    stream = env.from_collection(["z"])
    assert list(AsyncDataStream.unordered_wait_with_retry(stream, Flaky(), Time.seconds(10), errors_only)
                .execute_and_collect()) == []  # the empty answer is final without a result predicate

    too_few = AsyncRetryStrategy.fixed_delay(1, 10, None, lambda error: True)
    assert isinstance(too_few, FixedDelayRetryStrategy)
    stream = env.from_collection(["w"])
    AsyncDataStream.ordered_wait_with_retry(stream, Flaky(), Time.seconds(10), too_few).name("flaky").print()
    with pytest.raises(JobExecutionError, match=r"flaky.*'w'.*ConnectionError"):
        env.execute("async-retries-exhausted")


class Stamp(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(0.001 * (value[1] % 5))
        return [value[0]]


class CountWindow(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key, context.window().start, len(list(elements))


def test_results_keep_their_record_s_timestamp_across_epochs_and_reach_a_file_sink(env, tmp_path):
    """Event-time windows after the async operator count each record in its own window, and every
    result is written exactly once, though epochs end with calls in flight."""
    env.set_parallelism(2)
    env.set_max_records_per_epoch(13)
    records = [(f"k{i % 3}", i * 100) for i in range(90)]
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0)) \
        .with_timestamp_assigner(lambda r, _: r[1])
    keys = AsyncDataStream.unordered_wait(
        env.from_collection(records).assign_timestamps_and_watermarks(strategy), Stamp(), Time.seconds(10), capacity=3)
    (keys.key_by(lambda k: k).window(TumblingEventTimeWindows.of(Time.seconds(1))).process(CountWindow())
        .map(json.dumps).sink_to(FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()))
    env.execute("async-windows")
    written = sorted(tuple(json.loads(line)) for p in (tmp_path / "out").iterdir() if p.is_file()
                     for line in p.read_text().splitlines())
    expected = {}
    for key, ts in records:
        expected[(key, ts - ts % 1000)] = expected.get((key, ts - ts % 1000), 0) + 1
    assert written == sorted((k, start, n) for (k, start), n in expected.items())


class NotAsync(AsyncFunction):
    def async_invoke(self, value):
        return [value]


def test_an_async_function_must_be_a_coroutine_and_retries_need_a_timeout(env):
    stream = env.from_collection([1])
    with pytest.raises(TypeError, match="async_invoke.*async def"):
        AsyncDataStream.ordered_wait(stream, NotAsync(), Time.seconds(1))
    with pytest.raises(ValueError, match="Timeout should be configured"):
        AsyncDataStream.ordered_wait_with_retry(stream, Slow(), Time.seconds(0),
                                                FixedDelayRetryStrategy(2, 10, None, lambda e: True))
    with pytest.raises(ValueError, match="capacity"):
        AsyncDataStream.unordered_wait(stream, Slow(), Time.seconds(1), capacity=0)


class FailsOnceAfter(MapFunction):
    """Fails the first time (over all attempts, a marker file remembers) it sees record ``at``."""

    def __init__(self, marker: str, at: int):
        self.marker = marker
        self.at = at

    def map(self, value):
        if value[0] == self.at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError(f"injected failure at record {self.at}")
        return f"{value[0]},{value[1]}"


def test_an_epoch_that_fails_with_calls_in_flight_runs_again_and_writes_each_result_once(env, tmp_path):
    env.set_parallelism(2)
    env.set_max_records_per_epoch(20)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 100))
    marker = str(tmp_path / "failed")
    values = list(range(100))
    answers = AsyncDataStream.ordered_wait(env.from_collection(values), Lookup(lambda v: 0.01 * (v % 3)),
                                           Time.seconds(10), capacity=5)
    (answers.map(FailsOnceAfter(marker, 47))
        .sink_to(FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()))
    env.execute("async-restart")
    assert os.path.exists(marker)  # the failure happened, with calls of its epoch in flight
    written = sorted(line for p in (tmp_path / "out").iterdir() if p.is_file() for line in p.read_text().splitlines())
    assert written == sorted(f"{v},{v * 10}" for v in values)
