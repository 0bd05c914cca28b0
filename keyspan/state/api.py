"""State descriptors and state interfaces, with PyFlink's names; ``keyspan.datastream.state`` re-exports them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Iterable


# Timers of a keyed operator are keyed state: the map state TIMER_STATE holds each key's pending
# timers as {(domain, timestamp): True}; the runtime fires them, the State Processor API reads and
# bootstraps them.
TIMER_STATE = "__ks_timers"
EVENT_TIME = 0
PROCESSING_TIME = 1


class StateDescriptor(ABC):
    """Declares a state by name; the same name in the same operator is the same state after restore."""

    kind = "abstract"
    namespaced = False  # one value per (key, namespace): see keyspan.state.internal.namespaced

    def __init__(self, name: str, type_info=None):
        if not isinstance(name, str) or not name:
            raise ValueError("a state descriptor needs a non-empty name")
        self.name = name
        self.type_info = type_info
        self._ttl_config = None

    def get_name(self) -> str:
        return self.name

    def enable_time_to_live(self, ttl_config) -> None:
        """Configures state time-to-live (``keyspan.datastream.state.StateTtlConfig``): values expire,
        become unavailable and are cleaned up as the config says."""
        from keyspan.state.ttl import StateTtlConfig

        if not isinstance(ttl_config, StateTtlConfig):
            raise TypeError(f"state '{self.name}': enable_time_to_live expects a StateTtlConfig, "
                            f"got {type(ttl_config).__name__}")
        self._ttl_config = ttl_config

    @property
    def ttl_config(self):
        return self._ttl_config

    def describe(self) -> dict:
        """What a savepoint records about this state."""
        described = {"name": self.name, "kind": self.kind, "type": self.type_info.name if self.type_info else None}
        if self._ttl_config is not None and self._ttl_config.is_enabled():
            described["ttl_ms"] = self._ttl_config.get_ttl().to_milliseconds()
        return described

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r})"


class ValueStateDescriptor(StateDescriptor):
    kind = "value"

    def __init__(self, name: str, value_type_info=None):
        super().__init__(name, value_type_info)


class ListStateDescriptor(StateDescriptor):
    kind = "list"

    def __init__(self, name: str, elem_type_info=None):
        super().__init__(name, elem_type_info)


class MapStateDescriptor(StateDescriptor):
    kind = "map"

    def __init__(self, name: str, key_type_info=None, value_type_info=None):
        super().__init__(name, value_type_info)
        self.key_type_info = key_type_info


class ReducingStateDescriptor(StateDescriptor):
    kind = "reducing"

    def __init__(self, name: str, reduce_function, type_info=None):
        super().__init__(name, type_info)
        self.reduce_function = reduce_function

    def get_reduce_function(self):
        return self.reduce_function


class AggregatingStateDescriptor(StateDescriptor):
    kind = "aggregating"

    def __init__(self, name: str, agg_function, state_type_info=None):
        super().__init__(name, state_type_info)
        self.agg_function = agg_function

    def get_agg_function(self):
        return self.agg_function


class State(ABC):
    @abstractmethod
    def clear(self) -> None: ...


class ValueState(State):
    @abstractmethod
    def value(self) -> Any: ...

    @abstractmethod
    def update(self, value) -> None: ...


class AppendingState(State):
    @abstractmethod
    def get(self) -> Any: ...

    @abstractmethod
    def add(self, value) -> None: ...


class MergingState(AppendingState):
    pass


class ReducingState(MergingState):
    pass


class AggregatingState(MergingState):
    pass


class ListState(MergingState):
    @abstractmethod
    def update(self, values: Iterable) -> None: ...

    @abstractmethod
    def add_all(self, values: Iterable) -> None: ...

    def __iter__(self):
        return iter(self.get())


class MapState(State):
    @abstractmethod
    def get(self, key): ...

    @abstractmethod
    def put(self, key, value) -> None: ...

    @abstractmethod
    def put_all(self, dict_value) -> None: ...

    @abstractmethod
    def remove(self, key) -> None: ...

    @abstractmethod
    def contains(self, key) -> bool: ...

    @abstractmethod
    def items(self): ...

    @abstractmethod
    def keys(self): ...

    @abstractmethod
    def values(self): ...

    @abstractmethod
    def is_empty(self) -> bool: ...

    def __getitem__(self, key):
        return self.get(key)

    def __setitem__(self, key, value):
        self.put(key, value)

    def __delitem__(self, key):
        self.remove(key)

    def __contains__(self, key):
        return self.contains(key)

    def __iter__(self):
        return iter(self.keys())


class ReadOnlyBroadcastState(State):
    @abstractmethod
    def get(self, key): ...

    @abstractmethod
    def contains(self, key) -> bool: ...

    @abstractmethod
    def items(self): ...

    @abstractmethod
    def keys(self): ...

    @abstractmethod
    def values(self): ...

    @abstractmethod
    def is_empty(self) -> bool: ...


class BroadcastState(ReadOnlyBroadcastState):
    @abstractmethod
    def put(self, key, value) -> None: ...

    @abstractmethod
    def put_all(self, dict_value) -> None: ...

    @abstractmethod
    def remove(self, key) -> None: ...


class OperatorStateStore(ABC):
    """Operator (non-keyed) state of one operator subtask, from ``CheckpointedFunction.initialize_state``'s
    ``context.get_operator_state_store()``; the implementation is ``keyspan.state.operator``."""

    @abstractmethod
    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState:
        """List state redistributed by even split when the parallelism changes."""

    @abstractmethod
    def get_union_list_state(self, state_descriptor: ListStateDescriptor) -> ListState:
        """List state of which every subtask receives the union of all subtasks' lists on restore."""

    @abstractmethod
    def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> BroadcastState:
        """Map state every subtask keeps a copy of; a new subtask receives a copy on restore."""
