"""The user functions of the State Processor API, named after Flink's (``org.apache.flink.state.api``)
in Python style: PyFlink's function shapes (``open(runtime_context)``, generators for output)."""

from __future__ import annotations

from keyspan.datastream.functions import Function


class OperatorIdentifier:
    """Names the operator whose state is read or written: its ``uid(...)`` in the job."""

    def __init__(self, uid: str):
        if not isinstance(uid, str) or not uid:
            raise ValueError("an operator is identified by its non-empty uid, as given to .uid(...) in the job")
        self.uid = uid

    @staticmethod
    def for_uid(uid: str) -> "OperatorIdentifier":
        return OperatorIdentifier(uid)

    def __repr__(self):
        return f"OperatorIdentifier.for_uid({self.uid!r})"

    def __eq__(self, other):
        return isinstance(other, OperatorIdentifier) and other.uid == self.uid

    def __hash__(self):
        return hash(self.uid)


def uid_of(operator) -> str:
    """An ``OperatorIdentifier`` or a plain uid string."""
    return operator.uid if isinstance(operator, OperatorIdentifier) else OperatorIdentifier(operator).uid


class KeyedStateReaderFunction(Function):
    """Reads one key's state into output rows: register states in ``open`` with
    ``runtime_context.get_state(...)`` (etc.) as in the job, then ``read_key`` is called once per key
    with those states set to that key; yield rows (tuples, dicts or ``Row``) matching the output schema."""

    class Context:
        def registered_event_time_timers(self) -> list[int]: ...

        def registered_processing_time_timers(self) -> list[int]: ...

    def read_key(self, key, ctx: "KeyedStateReaderFunction.Context"):
        raise NotImplementedError


class KeyedStateBootstrapFunction(Function):
    """Writes keyed state from historical rows: register states in ``open``, then ``process_element`` is
    called per row with the row's key current; timers registered through ``ctx.timer_service()`` are
    saved and fire in the job restored from the savepoint."""

    class Context:
        def get_current_key(self): ...

        def timer_service(self): ...

    def process_element(self, value, ctx: "KeyedStateBootstrapFunction.Context") -> None:
        raise NotImplementedError


class ColumnBootstrapFunction(KeyedStateBootstrapFunction):
    """One keyed state from one column of the input: each key's last value (``kind="value"``) or all
    its values in input order (``kind="list"``) — what ``keyspan state bootstrap`` runs."""

    def __init__(self, state: str, kind: str, column: str):
        if kind not in ("value", "list"):
            raise ValueError(f"ColumnBootstrapFunction writes value or list state, not {kind!r}")
        self.name, self.kind, self.column = state, kind, column

    def open(self, runtime_context):
        from keyspan.state.api import ListStateDescriptor, ValueStateDescriptor

        if self.kind == "list":
            self.state = runtime_context.get_list_state(ListStateDescriptor(self.name))
        else:
            self.state = runtime_context.get_state(ValueStateDescriptor(self.name))

    def process_element(self, value, ctx) -> None:
        cell = value[self.column]
        if self.kind == "list":
            self.state.add(cell)
        else:
            self.state.update(cell)


class StateBootstrapFunction(Function):
    """Writes operator list / union list state: as Flink's, a ``CheckpointedFunction`` — create the states
    in ``initialize_state(context)`` (``context.get_operator_state_store()``), fill them in
    ``process_element`` (each Spark partition of the input is one operator subtask), and
    ``snapshot_state`` is called once at the end."""

    def initialize_state(self, context) -> None:
        raise NotImplementedError

    def snapshot_state(self, context) -> None:
        pass

    def process_element(self, value, ctx) -> None:
        raise NotImplementedError


class BroadcastStateBootstrapFunction(Function):
    """Writes broadcast state: ``process_element(value, ctx)`` with ``ctx.get_broadcast_state(descriptor)``.
    Every subtask of the restored job gets the same broadcast state."""

    class Context:
        def get_broadcast_state(self, state_descriptor): ...

        def current_processing_time(self) -> int: ...

    def process_element(self, value, ctx: "BroadcastStateBootstrapFunction.Context") -> None:
        raise NotImplementedError
