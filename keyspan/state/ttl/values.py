"""What both backends and the TTL states share: ``TtlValue``, the clock, ``TtlPolicy`` and the
conversions between plain and TTL form of restored values."""

from __future__ import annotations

import time
from operator import itemgetter

from keyspan.state.ttl.config import StateTtlConfig

LONG_MIN = -(1 << 63)
LONG_MAX = (1 << 63) - 1
_ALL_EXPIRED = float("inf")  # horizon when the clock reads Long.MAX: every timestamp is expired


def wall_clock_ms() -> int:
    """The default TTL clock: processing time in milliseconds."""
    return time.time_ns() // 1_000_000


class TtlValue(tuple):
    """A user value with its last-access timestamp (ms): ``TtlValue((value, timestamp))``.

    A tuple, so creating, copying and unpickling one stays in C; the same type in both backends and in
    checkpoints."""

    __slots__ = ()

    value = property(itemgetter(0), doc="the user value")
    timestamp = property(itemgetter(1), doc="the last-access timestamp in milliseconds")

    def get_user_value(self):
        return self[0]

    def get_last_access_timestamp(self) -> int:
        return self[1]

    def __repr__(self):
        return f"TtlValue({self[0]!r}, ts={self[1]})"


class TtlPolicy:
    """A TTL-enabled state's configuration, flattened for the backends' hot paths."""

    __slots__ = ("config", "ttl", "update_on_read", "return_expired", "event_time", "full_snapshot",
                 "incremental_size", "per_record", "compact_entries", "kind")

    def __init__(self, config: StateTtlConfig, kind: str):
        self.config = config
        self.kind = kind
        self.ttl = int(config.get_ttl().to_milliseconds())
        self.update_on_read = config.get_update_type() == StateTtlConfig.UpdateType.OnReadAndWrite
        self.return_expired = (config.get_state_visibility()
                               == StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)
        self.event_time = (config.get_ttl_time_characteristic()
                           == StateTtlConfig.TtlTimeCharacteristic.EventTime)
        strategies = config.get_cleanup_strategies()
        self.full_snapshot = strategies.in_full_snapshot()
        incremental = strategies.get_incremental_cleanup_strategy()
        self.incremental_size = incremental.get_cleanup_size() if incremental is not None else 0
        self.per_record = incremental.run_cleanup_for_every_record() if incremental is not None else False
        compact = strategies.get_rocksdb_compact_filter_cleanup_strategy()
        self.compact_entries = max(1, compact.get_query_time_after_num_entries()) if compact is not None else 0

    @staticmethod
    def of(descriptor) -> "TtlPolicy | None":
        """The policy of a descriptor's TTL, or None when TTL is not enabled (no config, or update type
        ``Disabled``: in Flink such a state is not TTL state at all and never expires)."""
        config = getattr(descriptor, "_ttl_config", None)
        if config is None or not config.is_enabled():
            return None
        return TtlPolicy(config, descriptor.kind)

    def now(self, backend) -> int:
        return backend.current_watermark if self.event_time else backend.ttl_time_provider()

    def clock(self, backend):
        """(now, horizon) on ``backend``'s clock: timestamps <= horizon are expired, i.e.
        ``min(ts + ttl, Long.MAX) <= now`` as in Flink's ``TtlUtils.expired``."""
        now = backend.current_watermark if self.event_time else backend.ttl_time_provider()
        return now, (now - self.ttl if now < LONG_MAX else _ALL_EXPIRED)

    def read_list(self, stored: list, now: int, horizon):
        """Flink's TTL list read, shared by both backends: (what the caller sees, the elements to write
        back — refreshed on read — or None, whether the whole list state is to be cleared)."""
        if self.update_on_read:
            unexpired = [TtlValue((e[0], now)) for e in stored if e[1] > horizon]
            result = [e[0] for e in stored] if self.return_expired else [e[0] for e in unexpired]
            return result, unexpired or None, not unexpired
        result = []
        any_unexpired = False
        for e in stored:
            if e[1] > horizon:
                any_unexpired = True
                result.append(e[0])
            elif self.return_expired:
                result.append(e[0])
        return result, None, not any_unexpired  # Flink clears a list state whose elements all expired

    # -- whole stored values (the heap layout, and the section format) -------------------------------
    def unexpired_or_none(self, stored, horizon):
        """``stored`` without its expired parts (elements of a list, entries of a map); None when
        nothing is left; ``stored`` itself when nothing expired."""
        kind = self.kind
        if kind == "list":
            for e in stored:
                if e[1] <= horizon:
                    break
            else:
                return stored
            return [e for e in stored if e[1] > horizon] or None
        if kind == "map":
            for e in stored.values():
                if e[1] <= horizon:
                    break
            else:
                return stored
            return {k: e for k, e in stored.items() if e[1] > horizon} or None
        return None if stored[1] <= horizon else stored


def sample_types(kind: str, values) -> set:
    """The types of one part of each stored value (a list's first element, a map's first entry's
    value, else the value): a stored value is all TTL'd or all plain, so this says, at C speed,
    whether ``stamp``/``unstamp`` has anything to do for these values."""
    if kind == "list":
        return set(map(type, map(itemgetter(0), filter(None, values))))
    if kind == "map":
        return set(map(type, map(next, map(iter, map(dict.values, filter(None, values))))))
    return set(map(type, values))


def needs_stamp(kind: str, values) -> bool:
    types = sample_types(kind, values)
    return bool(types) and types != {TtlValue}


def needs_unstamp(kind: str, values) -> bool:
    return TtlValue in sample_types(kind, values)


def stamp(kind: str, value, now: int):
    """A restored value in TTL form: parts without a timestamp get ``now``; ``value`` itself if it was."""
    if kind == "list":
        if all(type(e) is TtlValue for e in value):
            return value
        return [e if type(e) is TtlValue else TtlValue((e, now)) for e in value]
    if kind == "map":
        if all(type(e) is TtlValue for e in value.values()):
            return value
        return {k: e if type(e) is TtlValue else TtlValue((e, now)) for k, e in value.items()}
    return value if type(value) is TtlValue else TtlValue((value, now))


def unstamp(kind: str, value):
    """A restored value in plain form (timestamps dropped); ``value`` itself if it was."""
    if kind == "list":
        if not any(type(e) is TtlValue for e in value):
            return value
        return [e[0] if type(e) is TtlValue else e for e in value]
    if kind == "map":
        if not any(type(e) is TtlValue for e in value.values()):
            return value
        return {k: e[0] if type(e) is TtlValue else e for k, e in value.items()}
    return value[0] if type(value) is TtlValue else value
