"""Async I/O (``pyflink.datastream.async_data_stream``): an ``AsyncFunction`` over a stream, with up to
``capacity`` calls in flight per task.

keyspan waits for every call of an epoch before the epoch's checkpoint, so a checkpoint never holds
a call in flight, and a record's results are committed with the epoch that read it. An epoch that
runs again (after a failure) calls the service again for its records, as Flink does for the calls
in flight at a restore: the service should tolerate a repeated call."""

from __future__ import annotations

import inspect

from keyspan.common.time import Duration
from keyspan.datastream import async_retry_strategies
from keyspan.datastream.data_stream import DataStream, KeyedStream
from keyspan.datastream.functions import AsyncFunction, AsyncFunctionDescriptor, AsyncRetryStrategy
from keyspan.datastream.transformation import OperatorKind

__all__ = ["AsyncDataStream"]


class AsyncDataStream:
    """Applies an ``AsyncFunction`` to a stream: results in input order (``ordered_wait``) or as the
    calls finish (``unordered_wait``), each with its input's timestamp."""

    @staticmethod
    def unordered_wait(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration,
                       capacity: int = 100, output_type=None) -> DataStream:
        return AsyncDataStream.unordered_wait_with_retry(
            data_stream, async_function, timeout, async_retry_strategies.NO_RETRY_STRATEGY, capacity, output_type)

    @staticmethod
    def unordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration,
                                  async_retry_strategy: AsyncRetryStrategy, capacity: int = 100,
                                  output_type=None) -> DataStream:
        return AsyncDataStream._wait(data_stream, async_function, timeout, async_retry_strategy, capacity,
                                     output_type, AsyncFunctionDescriptor.OutputMode.UNORDERED)

    @staticmethod
    def ordered_wait(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration,
                     capacity: int = 100, output_type=None) -> DataStream:
        return AsyncDataStream.ordered_wait_with_retry(
            data_stream, async_function, timeout, async_retry_strategies.NO_RETRY_STRATEGY, capacity, output_type)

    @staticmethod
    def ordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration,
                                async_retry_strategy: AsyncRetryStrategy, capacity: int = 100,
                                output_type=None) -> DataStream:
        return AsyncDataStream._wait(data_stream, async_function, timeout, async_retry_strategy, capacity,
                                     output_type, AsyncFunctionDescriptor.OutputMode.ORDERED)

    @staticmethod
    def _wait(data_stream, async_function, timeout, async_retry_strategy, capacity, output_type, mode) -> DataStream:
        AsyncDataStream._validate(data_stream, async_function, timeout, async_retry_strategy)
        if not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"capacity of an async operator must be a positive number of calls, got {capacity!r}")
        if isinstance(data_stream, KeyedStream):  # each key's records stay in its key group's task, as in Flink
            data_stream = data_stream._values()
        descriptor = AsyncFunctionDescriptor(async_function, timeout, capacity, async_retry_strategy, mode)
        return DataStream(data_stream._env, data_stream._add(
            OperatorKind.ASYNC_WAIT, "async wait operator", descriptor, output_type))

    @staticmethod
    def _validate(data_stream, async_function, timeout, async_retry_strategy) -> None:
        if not isinstance(data_stream, DataStream):
            raise TypeError(f"AsyncDataStream needs a DataStream, got {type(data_stream).__name__}")
        if not inspect.iscoroutinefunction(getattr(async_function, "async_invoke", None)):
            raise TypeError(f"Method 'async_invoke' of class '{type(async_function).__name__}' should be "
                            f"declared as 'async def'.")
        if async_retry_strategy is None:
            raise ValueError("Async retry strategy should not be None.")
        if async_retry_strategy is not async_retry_strategies.NO_RETRY_STRATEGY and timeout.to_milliseconds() <= 0:
            raise ValueError("Timeout should be configured when do async with retry.")
        if async_retry_strategy.get_retry_predicate() is None:
            raise ValueError(f"Retry predicate of the async retry strategy "
                             f"'{type(async_retry_strategy).__name__}' is None.")
