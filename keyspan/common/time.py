"""``Time`` and ``Duration`` as in PyFlink; both are kept as milliseconds."""

from __future__ import annotations


class Duration:
    def __init__(self, millis: int):
        self._millis = int(millis)

    @staticmethod
    def of_millis(millis: int) -> "Duration":
        return Duration(millis)

    @staticmethod
    def of_nanos(nanos: int) -> "Duration":
        """Whole milliseconds, as Java's ``Duration.toMillis`` reads it (keyspan's times are milliseconds)."""
        return Duration(nanos // 1_000_000)

    @staticmethod
    def of_seconds(seconds: int) -> "Duration":
        return Duration(seconds * 1000)

    @staticmethod
    def of_minutes(minutes: int) -> "Duration":
        return Duration(minutes * 60_000)

    @staticmethod
    def of_hours(hours: int) -> "Duration":
        return Duration(hours * 3_600_000)

    @staticmethod
    def of_days(days: int) -> "Duration":
        return Duration(days * 86_400_000)

    @staticmethod
    def zero() -> "Duration":
        return Duration(0)

    def to_milliseconds(self) -> int:
        return self._millis

    def __eq__(self, other):
        return isinstance(other, Duration) and other._millis == self._millis

    def __hash__(self):
        return hash(self._millis)

    def __repr__(self):
        return f"Duration({self._millis} ms)"


class Time(Duration):
    def __init__(self, milliseconds: int):  # PyFlink's parameter name
        super().__init__(milliseconds)

    @staticmethod
    def milliseconds(milliseconds: int) -> "Time":
        return Time(milliseconds)

    @staticmethod
    def seconds(seconds: int) -> "Time":
        return Time(seconds * 1000)

    @staticmethod
    def minutes(minutes: int) -> "Time":
        return Time(minutes * 60_000)

    @staticmethod
    def hours(hours: int) -> "Time":
        return Time(hours * 3_600_000)

    @staticmethod
    def days(days: int) -> "Time":
        return Time(days * 86_400_000)

    def __str__(self):
        return f"{self._millis} ms"  # as PyFlink's Time prints


class Instant:
    """A point on the time line (PyFlink's ``Instant``, Java's ``java.time.Instant``): whole seconds
    since the epoch plus nanoseconds in [0, 10⁹)."""

    def __init__(self, seconds: int, nanos: int):
        self.seconds = seconds
        self.nanos = nanos

    def to_epoch_milli(self) -> int:
        return self.seconds * 1000 + self.nanos // 1_000_000

    @staticmethod
    def of_epoch_milli(epoch_milli: int) -> "Instant":
        seconds, millis = divmod(epoch_milli, 1000)
        return Instant(seconds, millis * 1_000_000)

    def __eq__(self, other):
        return isinstance(other, Instant) and (self.seconds, self.nanos) == (other.seconds, other.nanos)

    def __hash__(self):
        return hash((self.seconds, self.nanos))

    def __repr__(self):
        return f"Instant<{self.seconds}, {self.nanos}>"
