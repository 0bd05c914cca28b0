"""PyFlink's ``pyflink.datastream.state`` module path; the definitions live in ``keyspan.state.api``."""

from keyspan.state.api import (  # noqa: F401
    AggregatingState,
    AggregatingStateDescriptor,
    AppendingState,
    BroadcastState,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    MergingState,
    OperatorStateStore,
    ReadOnlyBroadcastState,
    ReducingState,
    ReducingStateDescriptor,
    State,
    StateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from keyspan.state.ttl import StateTtlConfig  # noqa: F401
