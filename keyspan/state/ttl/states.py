"""The TTL states, written once over any backend's cells (Flink's ``AbstractTtlState`` and its five
decorators; the cell interface is in ``keyspan.state.internal``).

A value/reducing/aggregating state stores one stamped value per key, a map state one per entry,
both in the backend's own form (``_stamped``/``_timestamp_of``/``_value_of``); a list state stores
a list of ``TtlValue``. Every access first runs the backend's access hook (the heap's incremental
cleanup), every write ends with its write hook (RocksDB's compaction-filter emulation).
"""

from __future__ import annotations

from keyspan.state.api import AggregatingState, ListState, MapState, ReducingState, ValueState
from keyspan.state.internal import _no_none, _none_error
from keyspan.state.ttl.values import TtlValue


class AbstractTtlState:
    """What every TTL state does: read the clock, and Flink's ``getWrappedWithTtlCheckAndUpdate``."""

    __slots__ = ()

    def _clock(self):
        """(now, horizon): timestamps <= horizon are expired."""
        return self._ttl.clock(self._backend)

    def _get_wrapped(self):
        """The current key's stored value or None: an expired one is removed (and returned only
        with ReturnExpiredIfNotCleanedUp); with OnReadAndWrite an unexpired one gets the current time."""
        stored = self._load()
        if stored is None:
            return None
        now, horizon = self._clock()
        p = self._ttl
        if self._timestamp_of(stored) <= horizon:
            self._delete()
            return stored if p.return_expired else None
        if p.update_on_read:
            self._store(self._restamped(stored, now))
            self._wrote(1)
        return stored

    def _live_for_update(self, horizon):
        """The stored value if it takes part in an update (Flink's ``getUnexpired``), else None."""
        stored = self._load_for_update()
        if stored is None or (self._timestamp_of(stored) <= horizon and not self._ttl.return_expired):
            return None
        return stored

    def clear(self) -> None:
        self._access()
        self._delete()


class TtlValueState(AbstractTtlState, ValueState):
    __slots__ = ()

    def value(self):
        self._access()
        stored = self._get_wrapped()
        return None if stored is None else self._value_of(stored)

    def update(self, value) -> None:
        if value is None:
            self.clear()
            return
        self._access()
        self._store(self._stamped(value, self._clock()[0]))
        self._wrote(1)


class TtlListState(AbstractTtlState, ListState):
    """Flink's TtlListState: every element has its own timestamp."""

    __slots__ = ()

    def get(self):
        self._access()
        stored = self._load()
        if stored is None:
            return []
        result, rewrite, clear = self._ttl.read_list(stored, *self._clock())
        if rewrite is not None:
            self._store(rewrite)
            self._wrote(1)
        elif clear:
            self._delete()
        return result

    def add(self, value) -> None:
        self.add_all((value,))

    def add_all(self, values) -> None:
        new, bad = _no_none(self, values)
        if new:
            self._access()
            now = self._clock()[0]
            self._append([TtlValue((v, now)) for v in new])
            self._wrote(1)
        if bad:
            raise _none_error(self)

    def update(self, values) -> None:
        values = list(values or ())
        if not values:
            self.clear()
            return
        self._access()
        now = self._clock()[0]
        self._store([TtlValue((v, now)) for v in values])
        self._wrote(1)


class TtlMapState(AbstractTtlState, MapState):
    """Flink's TtlMapState: every entry has its own timestamp."""

    __slots__ = ()

    def _get_entry(self, key):
        self._access()
        stored = self._entry_load(key)
        if stored is None:
            return None
        now, horizon = self._clock()
        p = self._ttl
        if self._timestamp_of(stored) <= horizon:
            self._entry_delete(key)
            return stored if p.return_expired else None
        if p.update_on_read:
            self._entry_store(key, self._restamped(stored, now))
            self._wrote(1)
        return stored

    def get(self, key):
        stored = self._get_entry(key)
        return None if stored is None else self._value_of(stored)

    def contains(self, key) -> bool:
        return self._get_entry(key) is not None

    def put(self, key, value) -> None:
        self._access()
        self._entry_store(key, self._stamped(value, self._clock()[0]))
        self._wrote(1)

    def put_all(self, dict_value) -> None:
        self._access()
        items = dict(dict_value)
        if items:
            now = self._clock()[0]
            stamped = self._stamped
            self._entries_update({k: stamped(v, now) for k, v in items.items()}, ())
            self._wrote(len(items))

    def remove(self, key) -> None:
        self._access()
        self._entry_delete(key)

    def _visible(self, first_only: bool = False):
        """Visible (key, value) pairs as Flink's entry iterator yields them: expired entries are
        removed (and yielded only with ReturnExpiredIfNotCleanedUp); with OnReadAndWrite the yielded
        unexpired ones get the current time. ``first_only`` stops at the first visible entry."""
        self._access()
        now, horizon = self._clock()
        p = self._ttl
        timestamp_of, value_of = self._timestamp_of, self._value_of
        out = []
        expired = []
        refreshed = {}
        for k, stored in self._entries():
            if timestamp_of(stored) <= horizon:
                expired.append(k)
                if p.return_expired:
                    out.append((k, value_of(stored)))
            else:
                out.append((k, value_of(stored)))
                if p.update_on_read:
                    refreshed[k] = self._restamped(stored, now)
            if first_only and out:
                break
        if expired or refreshed:
            self._entries_update(refreshed, expired)
            if refreshed:
                self._wrote(len(refreshed))
        return out

    def items(self):
        return self._visible()

    def keys(self):
        return [k for k, _ in self._visible()]

    def values(self):
        return [v for _, v in self._visible()]

    def is_empty(self) -> bool:
        return not self._visible(first_only=True)


class TtlReducingState(AbstractTtlState, ReducingState):
    __slots__ = ()

    def get(self):
        self._access()
        stored = self._get_wrapped()
        return None if stored is None else self._value_of(stored)

    def add(self, value) -> None:
        self._access()
        now, horizon = self._clock()
        # Flink's TtlReduceFunction: an expired value takes no part unless expired values are visible
        stored = self._live_for_update(horizon)
        new = value if stored is None else self._reduce(self._value_of(stored), value)
        self._store(self._stamped(new, now))
        self._wrote(1)


class TtlAggregatingState(AbstractTtlState, AggregatingState):
    __slots__ = ()

    def get(self):
        self._access()
        stored = self._get_wrapped()
        return None if stored is None else self._agg.get_result(self._value_of(stored))

    def add(self, value) -> None:
        self._access()
        now, horizon = self._clock()
        stored = self._live_for_update(horizon)
        acc = self._agg.create_accumulator() if stored is None else self._value_of(stored)
        self._store(self._stamped(self._agg.add(value, acc), now))
        self._wrote(1)


TTL_STATES = {"value": TtlValueState, "list": TtlListState, "map": TtlMapState, "reducing": TtlReducingState,
              "aggregating": TtlAggregatingState}
