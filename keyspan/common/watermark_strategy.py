"""``WatermarkStrategy`` and ``TimestampAssigner`` as in ``pyflink.common.watermark_strategy``.

keyspan computes watermarks at epoch boundaries (see docs/event-time.md): after each epoch the
watermark of a stream is min over its splits of (max event timestamp − bound − 1), never lower than
before, and it is what the records of the next epoch are judged against.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from keyspan.common.time import Duration


class TimestampAssigner(ABC):
    """Extracts a record's event timestamp (epoch milliseconds)."""

    @abstractmethod
    def extract_timestamp(self, value, record_timestamp: int) -> int: ...


class _CallableAssigner(TimestampAssigner):
    def __init__(self, fn):
        self._fn = fn

    def extract_timestamp(self, value, record_timestamp):
        return self._fn(value, record_timestamp)


class WatermarkStrategy:
    """How a stream gets event timestamps and watermarks. ``bound_ms`` is None for no watermarks."""

    def __init__(self, bound_ms: int | None, timestamp_assigner: TimestampAssigner | None = None,
                 idleness_ms: int | None = None):
        self.bound_ms = bound_ms
        self.timestamp_assigner = timestamp_assigner
        self.idleness_ms = idleness_ms

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Duration) -> "WatermarkStrategy":
        bound = _millis(max_out_of_orderness, "max_out_of_orderness")
        if bound < 0:
            raise ValueError(f"max_out_of_orderness must not be negative, got {bound} ms")
        return WatermarkStrategy(bound)

    @staticmethod
    def for_monotonous_timestamps() -> "WatermarkStrategy":
        return WatermarkStrategy(0)

    @staticmethod
    def no_watermarks() -> "WatermarkStrategy":
        return WatermarkStrategy(None)

    def with_timestamp_assigner(self, timestamp_assigner: TimestampAssigner) -> "WatermarkStrategy":
        """Sets the assigner on this strategy and returns it, as PyFlink does (a stream already built with
        the strategy keeps the assigner it had)."""
        if not isinstance(timestamp_assigner, TimestampAssigner):
            if not callable(timestamp_assigner):
                raise TypeError("with_timestamp_assigner needs a TimestampAssigner")
            timestamp_assigner = _CallableAssigner(timestamp_assigner)
        self.timestamp_assigner = timestamp_assigner
        return self

    def with_idleness(self, idle_timeout: Duration) -> "WatermarkStrategy":
        idle = _millis(idle_timeout, "idle_timeout")
        if idle <= 0:
            raise ValueError(f"idle_timeout must be positive, got {idle} ms")
        return WatermarkStrategy(self.bound_ms, self.timestamp_assigner, idle)

    def with_watermark_alignment(self, watermark_group: str, max_allowed_watermark_drift: Duration,
                                 update_interval: Duration | None = None) -> "WatermarkStrategy":
        raise NotImplementedError(
            f"not supported by keyspan: watermark alignment (group '{watermark_group}'): keyspan never pauses a "
            "source; each epoch reads every source's new input, and env.set_max_records_per_epoch(...) bounds "
            "how much one epoch reads")

    def describe(self) -> dict:
        return {"bound_ms": self.bound_ms, "idleness_ms": self.idleness_ms}

    def __repr__(self):
        kind = "no_watermarks" if self.bound_ms is None else f"bounded_out_of_orderness({self.bound_ms} ms)"
        idle = f", idleness {self.idleness_ms} ms" if self.idleness_ms else ""
        return f"WatermarkStrategy({kind}{idle})"


def _millis(duration, name: str) -> int:
    if isinstance(duration, int):
        return duration
    if hasattr(duration, "to_milliseconds"):
        return int(duration.to_milliseconds())
    raise TypeError(f"{name} must be a Duration, got {duration!r}")
