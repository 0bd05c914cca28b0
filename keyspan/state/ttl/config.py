"""PyFlink's ``StateTtlConfig`` (``pyflink.datastream.state.StateTtlConfig``): what a user configures."""


from __future__ import annotations

from abc import ABC
from enum import Enum
from typing import Dict, Optional

from keyspan.common.time import Duration, Time

__all__ = ["StateTtlConfig"]


class StateTtlConfig(object):
    """Configuration of state TTL, with PyFlink's names (``pyflink.datastream.state.StateTtlConfig``)."""

    class UpdateType(Enum):
        """When the last-access timestamp, which prolongs the state's life, is updated."""

        Disabled = 0
        """TTL is disabled: the state does not expire."""

        OnCreateAndWrite = 1
        """The last-access timestamp is initialised when state is created and updated on every write."""

        OnReadAndWrite = 2
        """Like OnCreateAndWrite, and also updated on read."""

    class StateVisibility(Enum):
        """Whether an expired value that has not been cleaned up yet can be returned."""

        ReturnExpiredIfNotCleanedUp = 0
        """Return the expired value if it is not cleaned up yet (the read that returns it cleans it up)."""

        NeverReturnExpired = 1
        """Never return an expired value."""

    class TtlTimeCharacteristic(Enum):
        """The time scale of the TTL."""

        ProcessingTime = 0
        """Processing time: the backend's ``ttl_time_provider`` (wall clock by default)."""

        EventTime = 1
        """keyspan extension: event time, i.e. the backend's ``current_watermark``."""

    def __init__(self,
                 update_type: "StateTtlConfig.UpdateType",
                 state_visibility: "StateTtlConfig.StateVisibility",
                 ttl_time_characteristic: "StateTtlConfig.TtlTimeCharacteristic",
                 ttl: Time,
                 cleanup_strategies: "StateTtlConfig.CleanupStrategies"):
        self._update_type = update_type
        self._state_visibility = state_visibility
        self._ttl_time_characteristic = ttl_time_characteristic
        self._ttl = ttl
        self._cleanup_strategies = cleanup_strategies

    @staticmethod
    def new_builder(ttl: Time) -> "StateTtlConfig.Builder":
        return StateTtlConfig.Builder(ttl)

    def get_update_type(self) -> "StateTtlConfig.UpdateType":
        return self._update_type

    def get_state_visibility(self) -> "StateTtlConfig.StateVisibility":
        return self._state_visibility

    def get_ttl(self) -> Time:
        return self._ttl

    def get_ttl_time_characteristic(self) -> "StateTtlConfig.TtlTimeCharacteristic":
        return self._ttl_time_characteristic

    def is_enabled(self) -> bool:
        return self._update_type.value != StateTtlConfig.UpdateType.Disabled.value

    def get_cleanup_strategies(self) -> "StateTtlConfig.CleanupStrategies":
        return self._cleanup_strategies

    def __repr__(self):
        return (f"StateTtlConfig<update_type={self._update_type}, state_visibility={self._state_visibility}, "
                f"ttl_time_characteristic={self._ttl_time_characteristic}, ttl={self._ttl}>")

    class Builder(object):
        """Builder for the StateTtlConfig."""

        def __init__(self, ttl: Time):
            self._ttl = ttl
            self._update_type = StateTtlConfig.UpdateType.OnCreateAndWrite
            self._state_visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
            self._ttl_time_characteristic = StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
            self._is_cleanup_in_background = True
            self._strategies = {}  # type: Dict

        def set_update_type(self, update_type: "StateTtlConfig.UpdateType") -> "StateTtlConfig.Builder":
            """Sets the ttl update type: when the last-access timestamp is updated."""
            self._update_type = update_type
            return self

        def update_ttl_on_create_and_write(self) -> "StateTtlConfig.Builder":
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> "StateTtlConfig.Builder":
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, state_visibility: "StateTtlConfig.StateVisibility") \
                -> "StateTtlConfig.Builder":
            """Sets whether an expired value may be returned."""
            self._state_visibility = state_visibility
            return self

        def return_expired_if_not_cleaned_up(self) -> "StateTtlConfig.Builder":
            return self.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def never_return_expired(self) -> "StateTtlConfig.Builder":
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def set_ttl_time_characteristic(self, ttl_time_characteristic: "StateTtlConfig.TtlTimeCharacteristic") \
                -> "StateTtlConfig.Builder":
            """Sets the time scale of the TTL."""
            self._ttl_time_characteristic = ttl_time_characteristic
            return self

        def use_processing_time(self) -> "StateTtlConfig.Builder":
            return self.set_ttl_time_characteristic(StateTtlConfig.TtlTimeCharacteristic.ProcessingTime)

        def use_event_time(self) -> "StateTtlConfig.Builder":
            """keyspan extension: expire by the watermark instead of processing time."""
            return self.set_ttl_time_characteristic(StateTtlConfig.TtlTimeCharacteristic.EventTime)

        def cleanup_full_snapshot(self) -> "StateTtlConfig.Builder":
            """Leave expired state out of full snapshots (full checkpoints and savepoints).

            The local state is not cleaned by this; a job restored from such a snapshot no longer
            has the expired values."""
            self._strategies[StateTtlConfig.CleanupStrategies.Strategies.FULL_STATE_SCAN_SNAPSHOT] = \
                StateTtlConfig.CleanupStrategies.EMPTY_STRATEGY
            return self

        def cleanup_incrementally(self, cleanup_size: int, run_cleanup_for_every_record) \
                -> "StateTtlConfig.Builder":
            """Upon every access to the state, check ``cleanup_size`` of its entries (any keys, in turn)
            for expiration and remove the expired ones; with ``run_cleanup_for_every_record`` also once
            per processed record. As in Flink, implemented by the heap backend only: it has no effect
            on the RocksDB backend (which has ``cleanup_in_rocksdb_compact_filter``)."""
            self._strategies[StateTtlConfig.CleanupStrategies.Strategies.INCREMENTAL_CLEANUP] = \
                StateTtlConfig.CleanupStrategies.IncrementalCleanupStrategy(cleanup_size, run_cleanup_for_every_record)
            return self

        def cleanup_in_rocksdb_compact_filter(self, query_time_after_num_entries,
                                              periodic_compaction_time=Duration.of_days(30)) \
                -> "StateTtlConfig.Builder":
            """Remove expired state in the background of the RocksDB backend (no effect on the heap backend).

            rocksdict exposes no compaction filter, so keyspan emulates it: after every
            ``query_time_after_num_entries`` entries written to the state, the current time is queried
            once and the next ``query_time_after_num_entries`` stored entries of the state (continuing
            where the previous run stopped, wrapping around) are checked and the expired ones deleted,
            so the work follows the write volume as compaction does. ``periodic_compaction_time`` is
            recorded but not used."""
            self._strategies[StateTtlConfig.CleanupStrategies.Strategies.ROCKSDB_COMPACTION_FILTER] = \
                StateTtlConfig.CleanupStrategies.RocksdbCompactFilterCleanupStrategy(
                    query_time_after_num_entries, periodic_compaction_time)
            return self

        def disable_cleanup_in_background(self) -> "StateTtlConfig.Builder":
            """Disable the default background cleanup (incremental cleanup of 5 entries per access on
            the heap backend, the compaction-filter emulation every 1000 entries on RocksDB). Strategies
            configured explicitly stay active."""
            self._is_cleanup_in_background = False
            return self

        def set_ttl(self, ttl: Time) -> "StateTtlConfig.Builder":
            self._ttl = ttl
            return self

        def build(self) -> "StateTtlConfig":
            ttl = self._ttl
            if not isinstance(ttl, Duration):
                raise TypeError(f"the TTL must be a keyspan.common.time.Time, got {type(ttl).__name__}")
            if ttl.to_milliseconds() <= 0:
                raise ValueError(f"TTL is expected to be positive, got {ttl!r}")
            return StateTtlConfig(
                self._update_type,
                self._state_visibility,
                self._ttl_time_characteristic,
                self._ttl,
                StateTtlConfig.CleanupStrategies(dict(self._strategies), self._is_cleanup_in_background),
            )

    class CleanupStrategies(object):
        """TTL cleanup strategies. Expired state is always cleaned up when a read finds it expired;
        these strategies clean it up in snapshots and in the background as well."""

        class Strategies(Enum):
            FULL_STATE_SCAN_SNAPSHOT = 0
            INCREMENTAL_CLEANUP = 1
            ROCKSDB_COMPACTION_FILTER = 2

        class CleanupStrategy(ABC):
            """Base class of cleanup strategy configurations."""

        class EmptyCleanupStrategy(CleanupStrategy):
            def __repr__(self):
                return "EmptyCleanupStrategy"

        class IncrementalCleanupStrategy(CleanupStrategy):
            def __init__(self, cleanup_size: int, run_cleanup_for_every_record: bool):
                if int(cleanup_size) <= 0:
                    raise ValueError("Number of incrementally cleaned up state entries should be positive.")
                self._cleanup_size = int(cleanup_size)
                self._run_cleanup_for_every_record = bool(run_cleanup_for_every_record)

            def get_cleanup_size(self) -> int:
                return self._cleanup_size

            def run_cleanup_for_every_record(self) -> bool:
                return self._run_cleanup_for_every_record

            def __repr__(self):
                return (f"IncrementalCleanupStrategy(cleanup_size={self._cleanup_size}, "
                        f"run_cleanup_for_every_record={self._run_cleanup_for_every_record})")

        class RocksdbCompactFilterCleanupStrategy(CleanupStrategy):
            def __init__(self, query_time_after_num_entries: int, periodic_compaction_time=None):
                self._query_time_after_num_entries = int(query_time_after_num_entries)
                self._periodic_compaction_time = (Duration.of_days(30) if periodic_compaction_time is None
                                                  else periodic_compaction_time)

            def get_query_time_after_num_entries(self) -> int:
                return self._query_time_after_num_entries

            def get_periodic_compaction_time(self) -> Duration:
                return self._periodic_compaction_time

            def __repr__(self):
                return (f"RocksdbCompactFilterCleanupStrategy(query_time_after_num_entries="
                        f"{self._query_time_after_num_entries})")

        EMPTY_STRATEGY = EmptyCleanupStrategy()

        def __init__(self, strategies: Dict, is_cleanup_in_background: bool):
            self._strategies = strategies
            self._is_cleanup_in_background = is_cleanup_in_background

        def is_cleanup_in_background(self) -> bool:
            return self._is_cleanup_in_background

        def in_full_snapshot(self) -> bool:
            return StateTtlConfig.CleanupStrategies.Strategies.FULL_STATE_SCAN_SNAPSHOT in self._strategies

        def get_incremental_cleanup_strategy(self) \
                -> Optional["StateTtlConfig.CleanupStrategies.IncrementalCleanupStrategy"]:
            default = (StateTtlConfig.CleanupStrategies.IncrementalCleanupStrategy(5, False)
                       if self._is_cleanup_in_background else None)
            return self._strategies.get(StateTtlConfig.CleanupStrategies.Strategies.INCREMENTAL_CLEANUP, default)

        def get_rocksdb_compact_filter_cleanup_strategy(self) \
                -> Optional["StateTtlConfig.CleanupStrategies.RocksdbCompactFilterCleanupStrategy"]:
            default = (StateTtlConfig.CleanupStrategies.RocksdbCompactFilterCleanupStrategy(1000)
                       if self._is_cleanup_in_background else None)
            return self._strategies.get(StateTtlConfig.CleanupStrategies.Strategies.ROCKSDB_COMPACTION_FILTER,
                                        default)

        def __repr__(self):
            return (f"CleanupStrategies({list(self._strategies.values())}, "
                    f"is_cleanup_in_background={self._is_cleanup_in_background})")
