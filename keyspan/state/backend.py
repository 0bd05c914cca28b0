"""The keyed state backend interface and the pieces every backend shares.

A backend holds one operator's keyed state for one subtask's key-group range in one worker
process. Each epoch's changes stay revocable until the driver commits the checkpoint that
contains them: ``delta_sections`` writes them out, ``confirm`` makes them the base, ``rollback``
undoes them when another attempt's output was committed instead (invariant 1).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import ItemsView, Mapping

from keyspan.common.types import packed_values
from keyspan.io import serde
from keyspan.state.api import StateDescriptor
from keyspan.state.ttl import LONG_MIN, wall_clock_ms


class StateBackendSpec(ABC):
    """What the user selects with ``env.set_state_backend``; creates backends inside tasks."""

    name = "abstract"

    @abstractmethod
    def create_keyed_backend(self, operator: str, key_groups: range, local_dir: str | None = None): ...


def user_functions(descriptor) -> dict:
    """The reduce/aggregate function a state kind needs, as keyword arguments of its cell."""
    return {"reduce_function": getattr(descriptor, "reduce_function", None),
            "agg_function": getattr(descriptor, "agg_function", None)}


def _get_current_key(self):
    return self.__dict__["current_key"]


def _set_current_key(self, key):
    self.__dict__["current_key"] = key
    for hook in self._record_hooks:
        hook()


_HOOKED_CLASSES: dict = {}


class KeyedStateBackend(ABC):
    def __init__(self, operator: str, key_groups: range):
        self.operator = operator
        self.key_groups = key_groups
        self.current_key = None
        self.current_key_group = key_groups.start
        self._states: dict[str, object] = {}
        self._descriptors: dict[str, StateDescriptor] = {}
        self.restored_kinds: dict[str, str] = {}  # state name → its kind in the checkpoint restored from
        # State TTL: "now" in ms for the ProcessingTime characteristic, and the event-time clock
        # (set by the runtime from the job's watermark) for keyspan's EventTime characteristic
        self.ttl_time_provider = wall_clock_ms
        self.current_watermark = LONG_MIN
        self._record_hooks: list = []

    def set_current_key(self, key, key_group: int) -> None:
        self.current_key = key
        self.current_key_group = key_group

    def get_current_key(self):
        return self.current_key

    def get_state(self, descriptor: StateDescriptor):
        """One state object per name; asking again with another kind is an error naming both."""
        known = self._descriptors.get(descriptor.name)
        if known is not None:
            if known.kind != descriptor.kind or known.namespaced != descriptor.namespaced:
                raise ValueError(
                    f"operator '{self.operator}': state '{descriptor.name}' is already registered as "
                    f"{known.kind} state, cannot use it as {descriptor.kind} state"
                )
            return self._states[descriptor.name]
        restored = self.restored_kinds.get(descriptor.name)
        if restored is not None and restored != descriptor.kind:
            raise ValueError(
                f"state '{descriptor.name}' was restored as {restored} state and cannot be used as "
                f"{descriptor.kind} state: a state keeps its kind under its name. Give the new state "
                f"another name (the old one's values are then kept, unused), rewrite it with the State Processor "
                f"API, or start over with --fresh")
        if descriptor.namespaced and descriptor.ttl_config is not None and descriptor.ttl_config.is_enabled():
            raise ValueError(f"operator '{self.operator}': state '{descriptor.name}' is kept per window (namespace) "
                             f"and cannot have a TTL; remove enable_time_to_live from its descriptor")
        state = self._create_state(descriptor)
        self._descriptors[descriptor.name] = descriptor
        self._states[descriptor.name] = state
        return state

    def _add_record_hook(self, hook) -> None:
        """Run ``hook()`` whenever the current key is set, i.e. once per processed record (the runtime
        assigns ``current_key`` directly). Only backends that have such a hook pay for it: their class
        becomes a subclass in which ``current_key`` is a property."""
        self._record_hooks.append(hook)
        cls = type(self)
        if not getattr(cls, "_has_record_hooks", False):
            hooked = _HOOKED_CLASSES.get(cls)
            if hooked is None:
                hooked = _HOOKED_CLASSES[cls] = type(cls.__name__, (cls,), {
                    "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                    "_has_record_hooks": True, "current_key": property(_get_current_key, _set_current_key)})
            key = self.__dict__.get("current_key")
            self.__class__ = hooked
            self.__dict__["current_key"] = key

    def keys_of(self, name: str):
        """(key group, key) of every key that has a value in state ``name``."""
        for kg, section in sorted(self.all_sections().items()):
            if name in section:
                for key in list(section[name][0]):
                    yield kg, key

    def map_keys_of(self, name: str):
        """(key group, key, map key) of every entry of map state ``name``, key by key: what rebuilding
        the timer queues reads, without making each key current and reading its map."""
        for kg, section in sorted(self.all_sections().items()):
            if name in section:
                for key, entries in list(section[name][0].items()):
                    for map_key in entries:
                        yield kg, key, map_key

    def restored_state_names(self):
        """Names of states that hold values, registered or only restored so far."""
        return self._descriptors.keys()

    def describe_states(self) -> list[dict]:
        return [d.describe() for d in self._descriptors.values()]

    @abstractmethod
    def _create_state(self, descriptor: StateDescriptor): ...

    @abstractmethod
    def changed_sections(self) -> dict[int, dict]:
        """Key group → {state: (puts, deletes)} changed in the open epoch."""

    @abstractmethod
    def all_sections(self) -> dict[int, dict]:
        """Key group → {state: (all entries, [])}: a full snapshot."""

    @abstractmethod
    def apply_section(self, key_group: int, section: dict) -> None:
        """Restore: apply a full or delta section (later sections win)."""

    @abstractmethod
    def confirm(self) -> None: ...

    @abstractmethod
    def rollback(self) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Free the state at once (files, memory): the backend of an instance no longer cached."""

    def delta_sections(self) -> Mapping[int, bytes]:
        """Key group → encoded delta section. The heap backend's is a dict; RocksDB's is a
        ``LazySections`` that encodes one key group at a time as it is read."""
        return self._encode(self.changed_sections())

    def full_sections(self) -> Mapping[int, bytes]:
        """Key group → encoded full section, as ``delta_sections``: the heap backend's is a dict
        (its state is in memory anyway), RocksDB's a ``LazySections`` over a point-in-time view, so
        ``statefile.write`` streams it to the checkpoint file one key group at a time."""
        return self._encode(self.all_sections())

    def _encode(self, sections: dict[int, dict]) -> dict[int, bytes]:
        return {kg: encode_section(section, self.operator, kg) for kg, section in sections.items()}

    def restore_payload(self, key_group: int, payload: bytes, watched: dict | None = None) -> None:
        self.apply_section(key_group, note_puts(serde.loads(payload), key_group, watched, self.values_in_memory))

    def values_in_memory(self, name: str, key_group: int) -> Mapping | None:
        """Key → value of state ``name`` in ``key_group`` when the backend holds them as Python objects
        (None otherwise: RocksDB would pay a read per key)."""
        return None


def encode_section(section: dict, operator: str, key_group: int) -> bytes:
    """A key group's section ({state name: (puts, deleted keys)}) as state files store it: puts whose
    values are Rows of one named class go packed (``packed_values``): a third to a half of the bytes,
    and a tenth of the time of pickling each Row. Every reader unpickles the same section."""
    try:
        return serde.dumps_state(_packed(section), operator=operator, key_group=key_group)
    except serde.StateSerializationError:
        return serde.dumps_state(section, operator=operator, key_group=key_group)  # names the key


def dump_section(section: dict, file, operator: str, key_group: int) -> None:
    """``encode_section`` into a binary file (see ``serde.dump_state``)."""
    try:
        serde.dump_state(_packed(section), file, operator=operator, key_group=key_group)
    except serde.StateSerializationError:
        serde.dumps_state(section, operator=operator, key_group=key_group)  # names the key
        raise


def _packed(section: dict) -> dict:
    return {name: (packed_values(puts), deletes) for name, (puts, deletes) in section.items()}


def note_puts(section: dict, key_group: int, watched: dict | None, values_in_memory) -> dict:
    """Hand the changes ``section`` makes to each watched state to its watcher (state name → a callable
    taking the key group, the puts, the deleted keys and the values before), before a backend applies
    (and may consume) them: a catch-up queues the timers of the keys it changed, instead of rebuilding
    the queues from every timer. The values before are the key group's values held in memory (the
    backend's ``values_in_memory``, key → value), or None where the backend does not hold them."""
    if watched:
        for name, noted in watched.items():
            entry = section.get(name)
            if entry is not None:
                noted(key_group, entry[0], entry[1], values_in_memory(name, key_group))
    return section


class LazySections(Mapping):
    """Key group → encoded section payload, built one key group at a time when it is read.

    ``produce(kg)`` returns the decoded section of one key group (empty or None: the key group
    is left out); ``groups`` are the key groups that may have one, in ascending order. Iterating
    ``items()`` (what ``statefile.write`` does) builds and encodes each key group once, in order,
    and keeps none of them, so peak memory is about one key group's section, whatever the total.
    It is a read-only mapping, so code that treats sections as a dict keeps working (``len``,
    ``in``, ``[kg]``, ``set(...)``, ``dict(...)``), each such access scanning again. ``produce`` must
    read a point-in-time view (RocksDB: one iterator opened when the mapping was made) for the
    mapping to be a snapshot. ``nonempty(kg)``, when given, answers ``bool(produce(kg))`` cheaply."""

    def __init__(self, groups, produce, encode, nonempty=None, dump=None):
        self._groups = tuple(groups)
        self._produce = produce
        self._encode_one = encode
        self._nonempty = nonempty
        self._dump = dump

    def dump_items(self):
        """(key group, ``write(file)``) for every non-empty key group, in order: ``write`` pickles
        the key group's section straight into a binary file (``dump(kg, section, file)``), so not
        even one encoded payload is held — what ``statefile.write`` uses when it is offered. Each
        section is built when its pair is produced and dropped once the next one is asked for."""
        dump = self._dump
        if dump is None:
            for kg, payload in self.items():
                yield kg, (lambda f, payload=payload: f.write(payload))
            return
        for kg in self._groups:
            section = self._produce(kg)
            if section:
                yield kg, (lambda f, kg=kg, section=section: dump(kg, section, f))
            section = None

    def _has(self, kg: int) -> bool:
        if self._nonempty is not None:
            return self._nonempty(kg)
        return bool(self._produce(kg))

    def __iter__(self):
        for kg in self._groups:
            if self._has(kg):
                yield kg

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:
        return any(True for _ in self)

    def __contains__(self, kg) -> bool:
        return kg in self._groups and self._has(kg)

    def __getitem__(self, kg) -> bytes:
        if kg not in self._groups:
            raise KeyError(kg)
        section = self._produce(kg)
        if not section:
            raise KeyError(kg)
        return self._encode_one(kg, section)

    def items(self):
        return _LazyItems(self)

    def __repr__(self) -> str:
        return f"LazySections({len(self._groups)} candidate key groups)"


class _LazyItems(ItemsView):
    def __iter__(self):
        m = self._mapping
        for kg in m._groups:
            section = m._produce(kg)
            if section:
                payload = m._encode_one(kg, section)
                section = None  # only the payload stays alive while it is written
                yield kg, payload
                payload = None
