"""Retry strategies of ``AsyncDataStream.*_wait_with_retry`` (``pyflink.datastream.async_retry_strategies``).

An attempt is retried when the strategy's predicate holds for its result or error, the strategy
``can_retry`` the attempts made so far, and the record's timeout has not passed; the next attempt
starts ``get_backoff_time_millis`` later."""

from __future__ import annotations

from typing import Callable, List, Optional

from keyspan.datastream.functions import AsyncRetryPredicate, AsyncRetryStrategy

__all__ = ["RetryPredicate", "NoRetryStrategy", "FixedDelayRetryStrategy", "ExponentialBackoffDelayRetryStrategy"]


class RetryPredicate(AsyncRetryPredicate):
    def __init__(self, result_predicate: Optional[Callable[[List], bool]],
                 exception_predicate: Optional[Callable[[Exception], bool]]):
        self._result_predicate = result_predicate
        self._exception_predicate = exception_predicate

    def result_predicate(self) -> Optional[Callable[[List], bool]]:
        return self._result_predicate

    def exception_predicate(self) -> Optional[Callable[[Exception], bool]]:
        return self._exception_predicate


class NoRetryStrategy(AsyncRetryStrategy):
    def can_retry(self, current_attempts: int) -> bool:
        return False

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return -1

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return RetryPredicate(None, None)


class FixedDelayRetryStrategy(AsyncRetryStrategy):
    """At most ``max_attempts`` retries, ``backoff_time_millis`` apart."""

    def __init__(self, max_attempts: int, backoff_time_millis: int,
                 result_predicate: Optional[Callable[[List], bool]],
                 exception_predicate: Optional[Callable[[Exception], bool]]):
        if max_attempts <= 0:
            raise ValueError("max_attempts should be greater than zero.")
        if backoff_time_millis <= 0:
            raise ValueError("backoff_time_millis should be greater than zero.")
        self._max_attempts = max_attempts
        self._backoff_time_millis = backoff_time_millis
        self._result_predicate = result_predicate
        self._exception_predicate = exception_predicate

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self._max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return self._backoff_time_millis

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return RetryPredicate(self._result_predicate, self._exception_predicate)


class ExponentialBackoffDelayRetryStrategy(AsyncRetryStrategy):
    """At most ``max_attempts`` retries: the first after ``initial_delay`` ms, each next one
    ``multiplier`` times later than the one before, up to ``max_retry_delay`` ms."""

    def __init__(self, max_attempts: int, initial_delay: int, max_retry_delay: int, multiplier: float,
                 result_predicate: Optional[Callable[[List], bool]],
                 exception_predicate: Optional[Callable[[Exception], bool]]):
        for name, value in (("max_attempts", max_attempts), ("initial_delay", initial_delay),
                            ("max_retry_delay", max_retry_delay), ("multiplier", multiplier)):
            if value <= 0:
                raise ValueError(f"{name} should be greater than zero.")
        self._max_attempts = max_attempts
        self._initial_delay = initial_delay
        self._max_retry_delay = max_retry_delay
        self._multiplier = multiplier
        self._result_predicate = result_predicate
        self._exception_predicate = exception_predicate

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self._max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        # Flink's sequence, computed from the attempt alone: records in flight at once share the strategy
        delay = self._initial_delay
        for _ in range(current_attempts - 1):
            delay = int(min(delay * self._multiplier, self._max_retry_delay))
        return delay

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return RetryPredicate(self._result_predicate, self._exception_predicate)


NO_RETRY_STRATEGY: AsyncRetryStrategy = NoRetryStrategy()
