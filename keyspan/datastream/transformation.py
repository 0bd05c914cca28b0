"""The logical job graph: what the DataStream API builds and the runtime's planner compiles to Spark."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class OperatorKind(StrEnum):
    """What an operator of the graph is; the runtime has one processor per kind."""

    SOURCE = "source"
    TIMESTAMPS = "timestamps"  # assign_timestamps_and_watermarks: a watermark origin
    MAP = "map"
    FLAT_MAP = "flat_map"
    FILTER = "filter"
    PROCESS = "process"
    ASYNC_WAIT = "async_wait"  # AsyncDataStream: an AsyncFunction's calls, awaited before the epoch ends
    KEYED_PROCESS = "keyed_process"  # every keyed operator (reduce, windows, … are keyed process functions)
    BROADCAST_PROCESS = "broadcast_process"
    KEYED_BROADCAST_PROCESS = "keyed_broadcast_process"
    CO_PROCESS = "co_process"  # two ordinary inputs (connect): CoProcessFunction, CoMap, CoFlatMap
    KEYED_CO_PROCESS = "keyed_co_process"  # two inputs keyed into the same key groups: KeyedCoProcessFunction
    UNION = "union"  # names edges only
    SIDE_OUTPUT = "side_output"  # names edges only
    PARTITION = "partition"  # names edges only: how records reach the consumer (rebalance(), shuffle(), ...)
    SINK = "sink"
    DRIVER_SINK = "driver_sink"  # a sink whose records are delivered on the driver


KEYED_KINDS = (OperatorKind.KEYED_PROCESS, OperatorKind.KEYED_BROADCAST_PROCESS, OperatorKind.KEYED_CO_PROCESS)
BROADCAST_KINDS = (OperatorKind.BROADCAST_PROCESS, OperatorKind.KEYED_BROADCAST_PROCESS)
TWO_INPUT_KINDS = (OperatorKind.CO_PROCESS, OperatorKind.KEYED_CO_PROCESS)  # records tagged with their input side
VIRTUAL_KINDS = (OperatorKind.UNION, OperatorKind.SIDE_OUTPUT, OperatorKind.PARTITION)  # no operator of their own
SIDE_OUTPUT_KINDS = (OperatorKind.PROCESS, OperatorKind.KEYED_PROCESS) + BROADCAST_KINDS + TWO_INPUT_KINDS


def user_function(fn):
    """The user's function behind a keyed Map/FlatMap/Filter/Reduce adapter."""
    return fn.wrapped_user_function() if hasattr(fn, "wrapped_user_function") else fn


@dataclass
class Partitioning:
    """How a ``PARTITION`` node's records reach its consumer (DataStream.rebalance(), shuffle(), ...)."""

    strategy: str  # rebalance | rescale | shuffle | forward | broadcast | custom
    partitioner: Any = None  # custom: partition(key, num_partitions) -> int
    key_selector: Any = None  # custom: the key handed to the partitioner


@dataclass(eq=False)
class Transformation:
    """One operator of the job: its kind, user function, inputs and identity."""

    id: int
    kind: OperatorKind
    name: str
    inputs: list["Transformation"] = field(default_factory=list)
    function: Any = None
    key_selector: Any = None  # for keyed kinds: the KeyedStream's selector
    key_selector2: Any = None  # for a keyed two-input operator: the second input's selector
    key_type: Any = None  # for keyed kinds: key_by's key_type, the form in which user code gets the key
    output_type: Any = None
    parallelism: int | None = None
    uid: str | None = None
    spec: Any = None  # a source or sink spec
    chaining: str = "always"  # "head": start_new_chain(), "never": disable_chaining()
    description: str | None = None

    def __repr__(self):
        return f"<{self.kind} '{self.name}' #{self.id}>"

    def input_key_selector(self, index: int):
        """The key selector of input ``index`` (a keyed two-input operator keys each input its own way)."""
        return self.key_selector2 if index == 1 and self.kind in TWO_INPUT_KINDS else self.key_selector


def with_inputs(transformations: list[Transformation]) -> list[Transformation]:
    """The transformations and every one they read from, in the order they were built. A job built
    after an earlier ``execute()`` may read a stream that job already ran (its source, a map): as in
    Flink's StreamGraphGenerator, which follows each transformation's inputs, the new job runs it again."""
    found: dict[int, Transformation] = {}
    pending = list(transformations)
    while pending:
        t = pending.pop()
        if t.id not in found:
            found[t.id] = t
            pending.extend(t.inputs)
    return [found[i] for i in sorted(found)]


def assign_uids(transformations: list[Transformation]) -> dict[int, tuple[str, bool]]:
    """Operator id → (uid, generated?). A generated uid hashes the operator's place in the graph,
    so it is the same on every run of an unchanged job (Flink's auto-generated operator ids)."""
    result: dict[int, tuple[str, bool]] = {}
    seen: dict[str, int] = {}
    for t in sorted(transformations, key=lambda t: t.id):
        if t.uid:
            if t.uid in seen:
                raise ValueError(f"operator uid '{t.uid}' is used twice (operators '{t.name}' and another): "
                                 "a uid must be unique in the job")
            seen[t.uid] = t.id
            result[t.id] = (t.uid, False)
            continue
        parents = ",".join(result[i.id][0] for i in t.inputs)
        base = hashlib.sha1(f"{parents}|{t.kind}|{t.name}".encode()).hexdigest()[:12]
        uid = f"auto-{base}"
        n = 1
        while uid in seen:
            n += 1
            uid = f"auto-{base}-{n}"
        seen[uid] = t.id
        result[t.id] = (uid, True)
    return result


def execution_plan(transformations: list[Transformation], default_parallelism: int) -> str:
    """The job graph as JSON in the shape of Flink's ``getExecutionPlan()``: virtual nodes
    (unions, side outputs, partitionings) become the ship strategy of the edges through them."""
    import json

    def edges(t: Transformation, strategy: str | None = None, side: str | None = None):
        for i in t.inputs:
            if i.kind == OperatorKind.PARTITION:
                yield from edges(i, i.spec.strategy.upper(), side)
            elif i.kind in VIRTUAL_KINDS:
                yield from edges(i, strategy, i.spec.tag_id if i.kind == OperatorKind.SIDE_OUTPUT else side)
            else:
                yield i, strategy, side

    nodes = []
    for t in sorted(transformations, key=lambda t: t.id):
        if t.kind in VIRTUAL_KINDS:
            continue
        node = {"id": t.id, "type": t.name, "pact": {"source": "Data Source", "sink": "Data Sink"}.get(t.kind, "Operator"),
                "contents": t.name, "parallelism": t.parallelism or default_parallelism}
        if t.uid:
            node["uid"] = t.uid
        preds = []
        for i, strategy, side in edges(t):
            hash_ = t.kind in KEYED_KINDS and not (t.kind in BROADCAST_KINDS and i is t.inputs[-1])
            pred = {"id": i.id, "ship_strategy": "HASH" if hash_ else (strategy or "FORWARD"),
                    "side": "second"}  # what Flink's JSON generator writes for every edge
            if side:
                pred["side_output"] = side
            preds.append(pred)
        if preds:
            node["predecessors"] = preds
        nodes.append(node)
    return json.dumps({"nodes": nodes}, indent=2)
