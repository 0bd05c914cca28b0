"""The heap ("hashmap") keyed state backend: ``table`` (storage and undo log), ``states`` (its cells
and state classes), ``backend`` (registration, restore, snapshots)."""

from keyspan.state.heap.backend import HashMapStateBackend, HeapKeyedStateBackend
from keyspan.state.heap.table import StateTable

__all__ = ["HashMapStateBackend", "HeapKeyedStateBackend", "StateTable"]
