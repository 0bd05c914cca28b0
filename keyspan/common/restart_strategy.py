"""PyFlink's ``pyflink.common.restart_strategy``: what the driver does when a run of the job fails.

A restart runs the job again in the same driver from its latest committed checkpoint (state and
source offsets), so a restart never loses or duplicates state. Each configuration also answers
the runtime's one question — "after a failure at time t, restart after how many milliseconds, or
give up?" — through :meth:`RestartStrategyConfiguration.new_tracker`.
"""

from __future__ import annotations

import random
from datetime import timedelta

__all__ = ["RestartStrategies", "RestartStrategyConfiguration"]


def _millis(value, name: str) -> int:
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    to_ms = getattr(value, "to_milliseconds", None)  # keyspan.common.Time / Duration
    if to_ms is not None:
        return int(to_ms())
    raise TypeError(f"The parameter '{name}' only supports integer (milliseconds) and datetime.timedelta, "
                    f"current input type is {type(value)}.")


class RestartTracker:
    """One job's failure history under one strategy."""

    def __init__(self, config: "RestartStrategyConfiguration"):
        self.config = config
        self.failures: list[int] = []  # wall-clock ms of every failure so far
        self.restarts = 0

    def on_failure(self, now_ms: int) -> int | None:
        """The delay before the next restart, or None when the strategy says the job fails."""
        self.failures.append(now_ms)
        delay = self.config._next_delay(self, now_ms)
        if delay is not None:
            self.restarts += 1
        return delay


class RestartStrategyConfiguration:
    """Abstract configuration for restart strategies."""

    def get_description(self) -> str:
        raise NotImplementedError

    def new_tracker(self) -> RestartTracker:
        return RestartTracker(self)

    def _next_delay(self, tracker: RestartTracker, now_ms: int) -> int | None:
        raise NotImplementedError

    def _key(self) -> tuple:
        return ()

    def __eq__(self, other):
        return isinstance(other, self.__class__) and other._key() == self._key()

    def __hash__(self):
        return hash((self.__class__.__name__, self._key()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.get_description()})"


class RestartStrategies:
    """Factories of restart strategy configurations, as in PyFlink."""

    class NoRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Configuration representing no restart strategy."""

        def get_description(self) -> str:
            return "Restart deactivated."

        def _next_delay(self, tracker, now_ms):
            return None

    class FixedDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Restart at most ``restart_attempts`` times, waiting a fixed delay before each."""

        def __init__(self, restart_attempts: int, delay_between_attempts_interval):
            if int(restart_attempts) < 0:
                raise ValueError(f"restart_attempts must be >= 0, got {restart_attempts}")
            self._attempts = int(restart_attempts)
            self._delay = _millis(delay_between_attempts_interval, "delay_between_attempts_interval")

        def get_restart_attempts(self) -> int:
            return self._attempts

        def get_delay_between_attempts_interval(self) -> timedelta:
            return timedelta(milliseconds=self._delay)

        def get_description(self) -> str:
            return f"Restart with fixed delay ({self._delay} ms). #{self._attempts} restart attempts."

        def _next_delay(self, tracker, now_ms):
            return self._delay if tracker.restarts < self._attempts else None

        def _key(self):
            return self._attempts, self._delay

    class FailureRateRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Restart after a fixed delay while fewer than ``max_failure_rate`` failures fell within the
        last ``failure_interval``; more than that fails the job."""

        def __init__(self, max_failure_rate: int, failure_interval, delay_between_attempts_interval):
            if int(max_failure_rate) < 1:
                raise ValueError(f"max_failure_rate must be >= 1, got {max_failure_rate}")
            self._rate = int(max_failure_rate)
            self._interval = _millis(failure_interval, "failure_interval")
            self._delay = _millis(delay_between_attempts_interval, "delay_between_attempts_interval")

        def get_max_failure_rate(self) -> int:
            return self._rate

        def get_failure_interval(self) -> timedelta:
            return timedelta(milliseconds=self._interval)

        def get_delay_between_attempts_interval(self) -> timedelta:
            return timedelta(milliseconds=self._delay)

        def get_description(self) -> str:
            return (f"Failure rate restart with maximum of {self._rate} failures within interval "
                    f"{self._interval} ms and fixed delay {self._delay} ms.")

        def _next_delay(self, tracker, now_ms):
            recent = [t for t in tracker.failures if now_ms - t <= self._interval]
            return self._delay if len(recent) < self._rate else None

        def _key(self):
            return self._rate, self._interval, self._delay

    class ExponentialDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Restart forever, the delay growing by ``backoff_multiplier`` from ``initial_backoff`` up to
        ``max_backoff``; it starts over once the job ran ``reset_backoff_threshold`` without failing."""

        def __init__(self, initial_backoff, max_backoff, backoff_multiplier: float, reset_backoff_threshold,
                     jitter_factor: float):
            self._initial = _millis(initial_backoff, "initial_backoff")
            self._max = _millis(max_backoff, "max_backoff")
            self._multiplier = float(backoff_multiplier)
            self._reset = _millis(reset_backoff_threshold, "reset_backoff_threshold")
            self._jitter = float(jitter_factor)
            if self._multiplier < 1 or not 0 <= self._jitter <= 1 or self._initial < 0 or self._max < self._initial:
                raise ValueError("exponential delay restart needs backoff_multiplier >= 1, 0 <= jitter_factor <= 1 "
                                 "and 0 <= initial_backoff <= max_backoff")

        def get_initial_backoff(self) -> timedelta:
            return timedelta(milliseconds=self._initial)

        def get_max_backoff(self) -> timedelta:
            return timedelta(milliseconds=self._max)

        def get_backoff_multiplier(self) -> float:
            return self._multiplier

        def get_reset_backoff_threshold(self) -> timedelta:
            return timedelta(milliseconds=self._reset)

        def get_jitter_factor(self) -> float:
            return self._jitter

        def get_description(self) -> str:
            return (f"Restart with exponential delay: starting at {self._initial} ms, increasing by "
                    f"{self._multiplier}, with maximum {self._max} ms. Delay resets after {self._reset} ms "
                    f"with jitter {self._jitter}")

        def _next_delay(self, tracker, now_ms):
            streak = 0  # failures since the last quiet period of reset_backoff_threshold
            for earlier, later in zip(tracker.failures, tracker.failures[1:]):
                streak = 0 if later - earlier > self._reset else streak + 1
            delay = min(self._max, self._initial * self._multiplier ** streak)
            return int(delay * (1 + random.uniform(-self._jitter, self._jitter)))

        def _key(self):
            return self._initial, self._max, self._multiplier, self._reset, self._jitter

    class FallbackRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Use the cluster's restart strategy: keyspan's is the one ``keyspan run --restart-attempts N
        --restart-delay S`` sets, and no restart without those flags."""

        def get_description(self) -> str:
            return "Cluster level default restart strategy"

        def _next_delay(self, tracker, now_ms):
            raise TypeError("the fallback strategy is resolved by the runtime before a run starts")

    @staticmethod
    def no_restart() -> "RestartStrategies.NoRestartStrategyConfiguration":
        return RestartStrategies.NoRestartStrategyConfiguration()

    @staticmethod
    def fall_back_restart() -> "RestartStrategies.FallbackRestartStrategyConfiguration":
        return RestartStrategies.FallbackRestartStrategyConfiguration()

    @staticmethod
    def fixed_delay_restart(restart_attempts: int, delay_between_attempts):
        """``delay_between_attempts``: milliseconds (int) or a ``datetime.timedelta``."""
        return RestartStrategies.FixedDelayRestartStrategyConfiguration(restart_attempts, delay_between_attempts)

    @staticmethod
    def failure_rate_restart(failure_rate: int, failure_interval, delay_interval):
        """At most ``failure_rate`` restarts within ``failure_interval``; intervals in ms or timedelta."""
        return RestartStrategies.FailureRateRestartStrategyConfiguration(failure_rate, failure_interval,
                                                                         delay_interval)

    @staticmethod
    def exponential_delay_restart(initial_backoff, max_backoff, backoff_multiplier: float,
                                  reset_backoff_threshold, jitter_factor: float):
        """Flink's ``RestartStrategies.exponentialDelayRestart``; durations in ms or timedelta."""
        return RestartStrategies.ExponentialDelayRestartStrategyConfiguration(
            initial_backoff, max_backoff, backoff_multiplier, reset_backoff_threshold, jitter_factor)
