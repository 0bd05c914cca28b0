"""Time constants and the wall clock shared by watermarks, timers, TTL and windows (Java's long range)."""

from __future__ import annotations

import time

LONG_MIN = -(1 << 63)
LONG_MAX = (1 << 63) - 1


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
