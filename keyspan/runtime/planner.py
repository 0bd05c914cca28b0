"""Compiles the logical graph into stages: chains of operators that run in one Spark task, joined by
exchanges (a keyed exchange routes each record to the subtask owning its key group).

A stage is one ``mapInArrow`` over its input; an exchange is ``repartitionById`` on the target
subtask that the upstream stage computed. When a keyed operator reads a typed Spark source
directly and its key selector only picks columns, the key group is computed in the JVM with
``xxhash64`` (the same hash as ``stable_hash``) and no Python runs before the shuffle.
"""

from __future__ import annotations

import copy
import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from enum import StrEnum

from keyspan.common.java_values import received_form
from keyspan.datastream.functions import CheckpointedFunction
from keyspan.datastream.transformation import (
    BROADCAST_KINDS,
    KEYED_KINDS,
    TWO_INPUT_KINDS,
    VIRTUAL_KINDS,
    OperatorKind,
    Transformation,
    assign_uids,
    user_function,
)
from keyspan.io import serde
from keyspan.runtime.operators import runtime_function
from keyspan.runtime.protocol import DRIVER_EXIT


class InputFormat(StrEnum):
    """How a stage's input arrives."""

    CHUNKS = "chunks"  # a keyspan source: pickled record chunks
    TYPED = "typed"  # a Spark source: typed columns, read as Row records
    EXCHANGE = "exchange"  # from upstream stages, routed to this subtask
    TYPED_KEYED = "typed_keyed"  # a Spark source routed by key group in the JVM (no Python before the shuffle)
    PUSHED_DOWN = "pushed_down"  # a source stage whose routing moved into its consumer's TYPED_KEYED input


class ExitKind(StrEnum):
    KEYED = "keyed"  # by key group
    REBALANCE = "rebalance"  # round robin
    BROADCAST = "broadcast"  # every record to every consumer subtask
    SHUFFLE = "shuffle"  # uniformly random
    CUSTOM = "custom"  # partition_custom: the user's partitioner picks the subtask
    DRIVER = "driver"  # driver-sink records


@dataclass
class ExitSpec:
    exit_id: int
    kind: ExitKind
    consumer_stage: int | None = None
    consumer_parallelism: int = 1
    key_selector: Any = None
    input_side: int = 0  # which input of a two-input consumer the records feed (0: first, 1: second)
    partitioner: Any = None  # CUSTOM: partition(key, num_partitions) -> subtask
    consumer: str = ""  # the consumer operator, named in errors: "'name' (uid …)"
    record_type: Any = None  # the records' declared type (``output_type``): they cross as PyFlink's serializer gives them back


@dataclass
class OpSpec:
    index: int
    uid: str
    uid_generated: bool
    name: str
    kind: OperatorKind
    function: Any = None
    sink: Any = None
    driver_sink_index: int | None = None
    broadcast_descriptors: list | None = None  # the MapStateDescriptors a broadcast-process operator declares
    outputs: list = field(default_factory=list)  # ("op", index, tag) | ("exit", exit_id, tag); tag: side output
    origins: list = field(default_factory=list)  # uids of the watermark origins upstream (event_time.py)
    watermark_strategy: Any = None  # for a watermark origin that assigns timestamps
    split: int | None = None  # an origin's split: 0 in a source stage (one per source, unless the source's
    # chunks name theirs: a Kafka partition), else the subtask
    error_policy: Any = None  # a source's ErrorPolicy when its records may carry DeadLetters
    key_type: Any = None  # a keyed operator's key_by key_type: user code gets the key as PyFlink decodes it
    output_forms: dict = field(default_factory=dict)  # output (None: main, else a side output's tag) → what its
    # values become before the next function of the chain gets them: see fused_with_its_consumer


@dataclass
class StagePlan:
    """What a task needs to run its stage; pickled once per epoch and cached by digest in workers."""

    stage_id: int
    parallelism: int
    max_parallelism: int
    input_format: InputFormat
    entry: list[int]
    ops: list[OpSpec]
    exits: list[ExitSpec]
    keyed: bool = False
    key_selector: Any = None
    typed_fields: list[str] | None = None
    key_fields: list[str] | None = None  # typed_keyed: the key columns, hashed in the JVM and read as the key
    timestamp_field: str | None = None  # typed_keyed: the column the pushed-down timestamp assigner read
    timestamp_origin: str | None = None  # ... and that assigner's uid: the watermark origin this stage reports for
    job_classes: tuple = ()  # the job file's classes any stage uses: workers put them in __main__ (serde.loads_code)
    code: str = ""  # the digest of the pickled plan, set where it is loaded (``stage_plan``): cached operator
    # instances built from other code (a job changed and run again in the same process) are not reused

    @property
    def has_downstream(self) -> bool:
        return any(e.kind != ExitKind.DRIVER for e in self.exits)


@dataclass
class Stage:
    plan: StagePlan
    source: Transformation | None = None
    inputs: list[tuple[int, int]] = field(default_factory=list)  # (upstream stage, exit id)
    pushdown_source: Transformation | None = None
    broadcast_inputs: list[tuple[int, int]] = field(default_factory=list)  # inputs to process before the rest


@dataclass
class DriverSinkSpec:
    """A sink whose records the driver delivers after their epoch commits, and the parallelism it
    runs at: the job's (as Flink's sinks), not necessarily that of the stage whose tasks send them."""

    sink: Any
    parallelism: int
    stage_parallelism: int

    def by_sink_subtask(self, records_by_subtask: dict[int, list]) -> dict[int, list]:
        """The records per sink subtask: as the stage's subtasks sent them when the parallelisms
        match (Flink chains them), else each sending subtask's records round-robin from its own index
        (Flink's rebalance, whose start is random)."""
        n = self.parallelism
        if n == self.stage_parallelism:
            return records_by_subtask
        out: dict[int, list] = {}
        for subtask in sorted(records_by_subtask):
            for i, record in enumerate(records_by_subtask[subtask], subtask):
                out.setdefault(i % n, []).append(record)
        return out


@dataclass
class PhysicalPlan:
    stages: list[Stage]
    sources: list[Transformation]
    driver_sinks: list[DriverSinkSpec]
    task_sinks: dict[str, Any]
    operators: list[dict]  # uid, name, kind, generated — recorded in every checkpoint
    origins: dict[str, dict] = field(default_factory=dict)  # watermark origin uid → bound, idleness, splits, sources
    job_classes: tuple | None = None  # the job file's classes its code uses (serde.main_classes), found once

    def stage(self, stage_id: int) -> Stage:
        return self.stages[stage_id]

    def digest(self, stage_id: int) -> tuple[bytes, str]:
        plan = self.stages[stage_id].plan
        if self.job_classes is None:  # every stage's plan carries them: a record of one reaches the others
            self.job_classes = tuple(serde.main_classes([[s.plan for s in self.stages],
                                                         [t.spec for t in self.sources]]).values())
        plan.job_classes = self.job_classes
        serde.ship_user_modules([f for o in plan.ops for f in _user_objects(o.function)])
        # a guarded key selector's function, a sink's bucket assigner, a strategy's timestamp
        # assigner: user code held by keyspan's objects ships too
        held = ([plan.key_selector] + [e.key_selector for e in plan.exits] + [e.partitioner for e in plan.exits]
                + [o.sink for o in plan.ops] + [o.watermark_strategy for o in plan.ops])
        for obj in held:
            if obj is not None:
                serde.ship_user_modules_within(obj)
        try:
            data = serde.dumps_function(plan)
        except Exception as exc:
            raise _unpicklable(plan, held, exc) from exc
        return data, hashlib.sha256(data).hexdigest()


def _unpicklable(plan: StagePlan, held: list, exc: Exception) -> TypeError:
    """Which of a stage's functions cannot be pickled (Spark ships each to its tasks), and what to do."""
    why = f"{type(exc).__name__}: {exc}"
    advice = ("Spark ships it to every task, pickled; create what it holds (a lock, a connection, a client) in "
              "open() instead of __init__, or leave it out of the closure")
    for op in plan.ops:
        for part in (op.function, op.sink, op.watermark_strategy):
            try:
                serde.dumps_function(part)
            except Exception:  # noqa: BLE001 — the first part that fails is the one to name
                return TypeError(f"operator '{op.name}' (uid {op.uid}): its function cannot be pickled ({why}). {advice}.")
    for part in held:
        try:
            serde.dumps_function(part)
        except Exception:  # noqa: BLE001
            return TypeError(f"a key selector or partitioner of the stage that starts with operator "
                             f"'{plan.ops[0].name}' cannot be pickled ({why}). {advice}.")
    return TypeError(f"the stage that starts with operator '{plan.ops[0].name}' cannot be pickled ({why})")


class _FieldRef:
    def __init__(self, name):
        self.name = name


class _RowProbe:
    """Stands in for a record to find out whether a key selector or timestamp assigner only picks columns."""

    def __init__(self, names):
        self._names = list(names)

    def __getitem__(self, item):
        if isinstance(item, int) and -len(self._names) <= item < len(self._names):
            return _FieldRef(self._names[item])
        if isinstance(item, str) and item in self._names:
            return _FieldRef(item)
        raise KeyError(item)

    def __getattr__(self, item):
        if item.startswith("_"):
            raise AttributeError(item)
        if item in self._names:
            return _FieldRef(item)
        raise AttributeError(item)


def _user_objects(fn) -> list:
    """A function and the user objects inside it (adapters, window operators), whose modules ship by value."""
    objects = [fn, user_function(fn)]
    if hasattr(fn, "shipped_objects"):
        objects.extend(fn.shipped_objects())
    return objects


def has_operator_state(t) -> bool:
    """Keeps operator state: a CheckpointedFunction or a broadcast-process operator."""
    return t.kind in BROADCAST_KINDS or isinstance(user_function(t.function), CheckpointedFunction)


def _probe(fn, names: list[str]):
    """What ``fn`` returns for a stand-in record: a ``_FieldRef`` for each column it returns as is;
    None when it does anything else with the record (it then runs in Python)."""
    try:
        return fn(_RowProbe(names))
    except Exception:  # noqa: BLE001 — any other function runs in Python
        return None


def key_columns(selector, names: list[str]) -> list[str] | None:
    """The columns a key selector returns as they are (one, or a tuple), else None."""
    result = _probe(selector, names)
    if isinstance(result, _FieldRef):
        return [result.name]
    if isinstance(result, tuple) and result and all(isinstance(r, _FieldRef) for r in result):
        return [r.name for r in result]
    return None


def _with_discarding_sinks(transformations: list[Transformation]) -> list[Transformation]:
    """As in Flink, a job needs no sink: its operators still run (for their side effects and state).
    Each end of a sinkless graph gets a sink that drops what it emits."""
    from keyspan.connectors.discarding_sink import DiscardingSink

    consumers: dict[int, list[Transformation]] = defaultdict(list)
    for t in transformations:
        for i in t.inputs:
            consumers[i.id].append(t)

    def read(t: Transformation) -> bool:
        """Some operator reads ``t``'s output, perhaps through unions, side outputs or partitionings."""
        return any(c.kind not in VIRTUAL_KINDS or read(c) for c in consumers[t.id])

    ends = [t for t in transformations if t.kind not in (OperatorKind.SOURCE, OperatorKind.SINK, OperatorKind.DRIVER_SINK)
            and t.kind not in VIRTUAL_KINDS and not read(t)]
    next_id = max(t.id for t in transformations) + 1
    return transformations + [Transformation(next_id + n, OperatorKind.SINK, DiscardingSink.name, [t], spec=DiscardingSink())
                              for n, t in enumerate(ends)]


@dataclass(frozen=True)
class AdaptiveBatch:
    """How Flink's adaptive batch scheduler (on by default in BATCH mode) sets the parallelism of the
    operators a job leaves at the default: a source at ``source_parallelism`` (a non-parallel one at
    1), operators that take a source's output without an exchange at the source's, and an operator
    behind an exchange at one subtask per ``bytes_per_task`` of input. So a BATCH job over little
    data runs most operators at 1, as PyFlink's does. Flink counts the bytes each operator reads; a
    bounded source's size stands for them here (unknown: ``max_parallelism``)."""

    min_parallelism: int = 1
    max_parallelism: int | None = None  # None: the job's default parallelism
    bytes_per_task: int = 16 * 1024 * 1024
    source_parallelism: int | None = None  # None: max_parallelism

    def decide(self, volume: int | None, default_parallelism: int) -> int:
        upper = self.max_parallelism or default_parallelism
        if volume is None:
            return upper
        return max(self.min_parallelism, min(upper, -(-volume // self.bytes_per_task)))


def compile_graph(transformations: list[Transformation], default_parallelism: int, max_parallelism: int,
                  chaining: bool = True, vectorize: bool = True, batch: bool = False,
                  adaptive: AdaptiveBatch | None = None) -> PhysicalPlan:
    if all(t.kind == OperatorKind.SOURCE or t.kind in VIRTUAL_KINDS for t in transformations):
        raise ValueError("No operators defined in streaming topology. Cannot execute. (Each execute() runs what "
                         "was built since the previous one, as in PyFlink; sources alone are not a job.)")
    if not any(t.kind in (OperatorKind.SINK, OperatorKind.DRIVER_SINK) for t in transformations):
        transformations = _with_discarding_sinks(transformations)
    uids = assign_uids(transformations)
    consumers: dict[int, list[Transformation]] = defaultdict(list)
    for t in transformations:
        for i in t.inputs:
            if t not in consumers[i.id]:
                consumers[i.id].append(t)

    def keyed(t: Transformation) -> bool:
        return t.kind in KEYED_KINDS

    def parallelism(t: Transformation) -> int:
        if t.id in decided:
            return decided[t.id]
        if t.parallelism:
            return t.parallelism
        return default_parallelism  # a sink too: Flink's sinkTo/addSink take the job's, not their input's

    def physical_inputs(t: Transformation) -> list[Transformation]:
        out = []
        for i in t.inputs:
            out.extend(physical_inputs(i) if i.kind in VIRTUAL_KINDS else [i])
        return out

    def consumer_edges(t: Transformation, declared, tag=None, partitioning=None) -> list[tuple]:
        """(consumer, input index, side-output tag, Partitioning or None, ``declared``: the type the
        records were declared with) for every edge leaving ``t``, through unions, side outputs and
        partitionings."""
        out = []
        for c in consumers[t.id]:
            for index, i in enumerate(c.inputs):
                if i is not t:
                    continue
                if c.kind == OperatorKind.UNION:
                    out.extend(consumer_edges(c, declared, tag, partitioning))
                elif c.kind == OperatorKind.SIDE_OUTPUT:
                    out.extend(consumer_edges(c, c.output_type, c.spec.tag_id, partitioning))
                elif c.kind == OperatorKind.PARTITION:
                    out.extend(consumer_edges(c, declared, tag, c.spec))
                else:
                    out.append((c, index, tag, partitioning, declared))
        return out

    def forwarded(t: Transformation) -> bool:
        """``t`` reads its one input through ``forward()``: same parallelism required, as in Flink."""
        i = t.inputs[0] if len(t.inputs) == 1 else None
        if i is None or i.kind != OperatorKind.PARTITION or i.spec.strategy != "forward":
            return False
        up = physical_inputs(t)[0]
        if parallelism(t) != parallelism(up):
            raise ValueError(f"Forward partitioning does not allow change of parallelism: '{up.name}' has "
                             f"parallelism {parallelism(up)}, '{t.name}' {parallelism(t)}; use rebalance() instead")
        return True

    def fused_with_its_consumer(t: Transformation) -> bool:
        """Whether PyFlink's optimizer fuses ``t``'s Python operator with the one after it, which then
        gets ``t``'s values as its function returned them; otherwise they pass through the declared
        type's serializer first (PyFlink's ``PythonOperatorChainingOptimizer``). It fuses a
        non-keyed one-input Python operator (map, flat_map, filter, process; ``print()`` of rows is
        one, at the job's parallelism) into the operator before it when that is its only consumer
        (no second one, no side output read), through forward partitionings only, at the same
        parallelism, chaining allowed."""
        if t.kind not in _FUSING_KINDS:
            return False
        after = t
        while True:
            if len(consumers[after.id]) != 1:
                return False
            after = consumers[after.id][0]
            if not (after.kind == OperatorKind.PARTITION and after.spec.strategy == "forward"):
                break
        if not chaining or t.chaining == "never":
            return False
        if after.kind == OperatorKind.SINK:  # print()'s Python map runs at the job's parallelism
            return hasattr(after.spec, "with_rows_as_returned") and parallelism(t) == default_parallelism
        return after.kind in _FUSED_KINDS and parallelism(after) == parallelism(t) and after.chaining == "always"

    def chained(t: Transformation) -> bool:
        ins = physical_inputs(t)
        if len(t.inputs) == 1 and t.inputs[0].kind == OperatorKind.PARTITION and not forwarded(t):
            return False  # rebalance(), shuffle(), broadcast(), partition_custom(): an exchange
        # a driver sink's subtasks are only which records it prints under which subtask: the driver
        # spreads them over its parallelism (``DriverSinkSpec``), no exchange needed
        driver_sink = t.kind == OperatorKind.SINK and not t.spec.runs_in_task
        if (keyed(t) or len(ins) != 1 or len(t.inputs) != 1 or t.inputs[0].kind == OperatorKind.UNION
                or (parallelism(t) != parallelism(ins[0]) and not driver_sink)):
            return False
        if not chaining or t.chaining != "always" or ins[0].chaining == "never":
            return False
        # a source stage runs as many tasks as the epoch's input has partitions: an operator with
        # operator state needs a stable subtask count, so it gets its own stage behind an exchange
        return not (has_operator_state(t) and stages[stage_of[ins[0].id]].source is not None)

    decided = _decided_parallelism(transformations, adaptive, default_parallelism, physical_inputs, keyed) \
        if adaptive else {}
    stages: list[Stage] = []
    stage_of: dict[int, int] = {}
    op_index: dict[int, int] = {}
    driver_sinks: list = []
    task_sinks: dict[str, Any] = {}
    operators: list[dict] = []

    def new_stage(t: Transformation, input_format: str) -> Stage:
        plan = StagePlan(len(stages), parallelism(t), max_parallelism, input_format, [], [], [], keyed=keyed(t),
                         key_selector=t.key_selector)
        stage = Stage(plan)
        stages.append(stage)
        return stage

    def add_op(stage: Stage, t: Transformation, kind: str) -> OpSpec:
        uid, generated = uids[t.id]
        function = runtime_function(t.function, vectorize, batch)
        if kind in _USER_FUNCTION_KINDS:
            function = _own_copy(function)
        op = OpSpec(len(stage.plan.ops), uid, generated, t.name, kind, function=function, origins=sorted(origins_of(t)))
        if kind in _FUSING_KINDS and not fused_with_its_consumer(t):
            op.output_forms[None] = received_form(t.output_type)
        for c in consumers[t.id]:  # get_side_output reads a side output by its tag's type: never fused
            if c.kind == OperatorKind.SIDE_OUTPUT:
                op.output_forms[c.spec.tag_id] = received_form(c.output_type)
        if kind == OperatorKind.TIMESTAMPS or (kind == OperatorKind.SOURCE and getattr(t.spec, "watermark_strategy", None)):
            op.watermark_strategy = t.function if kind == OperatorKind.TIMESTAMPS else t.spec.watermark_strategy
            op.split = 0 if stage.source is not None else None
        policy = getattr(t.spec, "error_policy", None) if kind == OperatorKind.SOURCE else None
        if policy is not None and not policy.fails:
            op.error_policy = policy
        if kind in BROADCAST_KINDS:
            op.broadcast_descriptors = list(t.spec)
        if kind in KEYED_KINDS:
            op.key_type = t.key_type
        if kind == OperatorKind.SINK:
            if t.spec.runs_in_task:
                op.sink = t.spec
                task_sinks[uid] = t.spec
            else:
                op.kind = OperatorKind.DRIVER_SINK
                op.driver_sink_index = len(driver_sinks)
                sink = t.spec
                if hasattr(sink, "with_rows_as_returned") and fused_with_its_consumer(physical_inputs(t)[0]):
                    sink = sink.with_rows_as_returned()
                driver_sinks.append(DriverSinkSpec(sink, parallelism(t), stage.plan.parallelism))
        stage.plan.ops.append(op)
        stage_of[t.id] = stage.plan.stage_id
        op_index[t.id] = op.index
        operators.append({"uid": uid, "name": t.name, "kind": op.kind, "generated": generated,
                          "stage": stage.plan.stage_id, "stateful": keyed(t) or has_operator_state(t)})
        return op

    sources = [t for t in transformations if t.kind == OperatorKind.SOURCE]
    origin_cache: dict[int, frozenset] = {}

    def origins_of(t: Transformation) -> frozenset:
        """The watermark origins whose watermarks reach ``t``: sources and timestamp assigners."""
        if t.id not in origin_cache:
            if t.kind in (OperatorKind.SOURCE, OperatorKind.TIMESTAMPS):
                origin_cache[t.id] = frozenset([uids[t.id][0]])
            else:
                origin_cache[t.id] = frozenset().union(*(origins_of(i) for i in t.inputs))
        return origin_cache[t.id]

    def sources_of(t: Transformation) -> set[int]:
        if t.kind == OperatorKind.SOURCE:
            return {sources.index(t)}
        return set().union(*(sources_of(i) for i in t.inputs))

    for t in sorted(transformations, key=lambda t: t.id):
        if t.kind in VIRTUAL_KINDS:
            continue
        if t.kind == OperatorKind.SOURCE:
            stage = new_stage(t, InputFormat(t.spec.input_format))
            stage.source = t
            add_op(stage, t, OperatorKind.SOURCE)
            stage.plan.entry.append(0)
        elif chained(t):
            stage = stages[stage_of[physical_inputs(t)[0].id]]
            add_op(stage, t, t.kind)
        else:
            stage = new_stage(t, InputFormat.EXCHANGE)
            add_op(stage, t, t.kind)
            stage.plan.entry.append(0)

    # wire outputs: chained consumers are ops in the same stage, the rest leave through exits
    for t in sorted(transformations, key=lambda t: t.id):
        if t.kind in VIRTUAL_KINDS or t.id not in stage_of:
            continue
        stage = stages[stage_of[t.id]]
        op = stage.plan.ops[op_index[t.id]]
        if op.kind == OperatorKind.DRIVER_SINK:
            _driver_exit(stage)
        for c, index, tag, partitioning, declared in consumer_edges(t, t.output_type):
            if stage_of.get(c.id) == stage.plan.stage_id and chained(c):
                op.outputs.append(("op", op_index[c.id], tag))
                continue
            target = stages[stage_of[c.id]]
            broadcast_side = c.kind in BROADCAST_KINDS and index == 1
            if broadcast_side:
                kind = ExitKind.BROADCAST
            elif keyed(c):
                kind = ExitKind.KEYED
            else:
                kind = _PARTITIONING_EXITS[partitioning.strategy if partitioning else "rebalance"]
            selector = c.input_key_selector(index) if kind == ExitKind.KEYED else None
            exit_spec = ExitSpec(len(stage.plan.exits), kind, target.plan.stage_id, target.plan.parallelism,
                                 partitioning.key_selector if kind == ExitKind.CUSTOM else selector,
                                 input_side=index if c.kind in TWO_INPUT_KINDS else 0,
                                 partitioner=partitioning.partitioner if kind == ExitKind.CUSTOM else None,
                                 consumer=f"'{c.name}' (uid {uids[c.id][0]})", record_type=declared)
            stage.plan.exits.append(exit_spec)
            op.outputs.append(("exit", exit_spec.exit_id, tag))
            target.inputs.append((stage.plan.stage_id, exit_spec.exit_id))
            if broadcast_side:
                target.broadcast_inputs.append((stage.plan.stage_id, exit_spec.exit_id))

    _push_down_key_columns(stages)
    origins = {}
    for t in transformations:
        if t.kind == OperatorKind.SOURCE:
            strategy = getattr(t.spec, "watermark_strategy", None)
            splits, source = 1, sources.index(t)  # one split, unless its reader names them (event_time.py)
        elif t.kind == OperatorKind.TIMESTAMPS:
            strategy = t.function
            stage = stages[stage_of[t.id]]
            splits, source = 1 if stage.source is not None else stage.plan.parallelism, None
        else:
            continue
        origins[uids[t.id][0]] = {"bound_ms": strategy.bound_ms if strategy else None,
                                  "idleness_ms": strategy.idleness_ms if strategy else None,
                                  "splits": splits, "source": source, "sources": sorted(sources_of(t))}
    return PhysicalPlan(stages, sources, driver_sinks, task_sinks, operators, origins)


def _decided_parallelism(transformations, adaptive: AdaptiveBatch, default_parallelism: int, physical_inputs,
                         keyed) -> dict[int, int]:
    """``AdaptiveBatch``'s parallelism of every operator. Operators joined without an exchange at the
    same configured parallelism form a group (Flink's forward group) that runs at one parallelism: one
    its operators set themselves, else their source's, else decided by the bytes the group reads."""

    def configured_parallelism(t: Transformation) -> int:
        """The parallelism the job gives ``t`` (Flink's graph before the scheduler decides)."""
        if t.parallelism:
            return t.parallelism
        if t.kind == OperatorKind.SOURCE and getattr(t.spec, "non_parallel", False):
            return 1
        return default_parallelism

    group = {t.id: t.id for t in transformations}

    def root(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    for t in transformations:
        if t.kind == OperatorKind.SOURCE or t.kind in VIRTUAL_KINDS or len(t.inputs) != 1 or keyed(t):
            continue
        link, ins = t.inputs[0], physical_inputs(t)
        if link.kind == OperatorKind.UNION or (link.kind == OperatorKind.PARTITION and link.spec.strategy != "forward"):
            continue
        if len(ins) == 1 and configured_parallelism(t) == configured_parallelism(ins[0]):
            group[root(t.id)] = root(ins[0].id)

    members: dict[int, list[Transformation]] = defaultdict(list)
    for t in transformations:
        if t.kind not in VIRTUAL_KINDS:
            members[root(t.id)].append(t)
    upper = adaptive.max_parallelism or default_parallelism

    def volume(ts: list[Transformation]) -> int | None:
        seen, total, todo = set(), 0, list(ts)
        while todo:
            t = todo.pop()
            if t.id in seen:
                continue
            seen.add(t.id)
            if t.kind == OperatorKind.SOURCE:
                size = t.spec.estimated_bytes() if hasattr(t.spec, "estimated_bytes") else None
                if size is None:
                    return None
                total += size
            todo.extend(t.inputs)
        return total

    decided = {}
    for ts in members.values():
        own = [t.parallelism for t in ts if t.parallelism] or [
            1 for t in ts if t.kind == OperatorKind.SOURCE and getattr(t.spec, "non_parallel", False)]
        if own:
            p = max(own)
        elif any(t.kind == OperatorKind.SOURCE for t in ts):
            p = adaptive.source_parallelism or upper
        else:
            p = adaptive.decide(volume(ts), default_parallelism)
        decided.update((t.id, p) for t in ts)
    return decided


# a non-keyed consumer's exchange per partitioning; rescale and forward (across a parallelism change,
# refused above) are round robin: on Spark no task is closer to another for a local round robin
_PARTITIONING_EXITS = {"rebalance": ExitKind.REBALANCE, "rescale": ExitKind.REBALANCE, "forward": ExitKind.REBALANCE,
                       "shuffle": ExitKind.SHUFFLE, "broadcast": ExitKind.BROADCAST, "custom": ExitKind.CUSTOM}


# PyFlink fuses an operator of _FUSED_KINDS into one of _FUSING_KINDS before it (fused_with_its_consumer)
_FUSING_KINDS = (OperatorKind.MAP, OperatorKind.FLAT_MAP, OperatorKind.FILTER, OperatorKind.PROCESS,
                 OperatorKind.KEYED_PROCESS, OperatorKind.CO_PROCESS, OperatorKind.KEYED_CO_PROCESS)
_FUSED_KINDS = (OperatorKind.MAP, OperatorKind.FLAT_MAP, OperatorKind.FILTER, OperatorKind.PROCESS)
_USER_FUNCTION_KINDS = _FUSING_KINDS + (OperatorKind.ASYNC_WAIT, OperatorKind.BROADCAST_PROCESS,
                                        OperatorKind.KEYED_BROADCAST_PROCESS)


def _own_copy(function):
    """The operator's own copy of its function: PyFlink serializes each operator's function on its own,
    so one function object given to two operators keeps two sets of attributes (what ``open`` sets,
    counters). A stage's operators are pickled together, which would keep them one object."""
    try:
        return copy.deepcopy(function)
    except Exception:  # e.g. it holds a lock or a client: shipped as it is
        return function


def _driver_exit(stage: Stage) -> None:
    """Driver sinks buffer in the task and leave as DRIVER_EXIT rows; the exit marks the stage for it."""
    if not any(e.kind == ExitKind.DRIVER for e in stage.plan.exits):
        stage.plan.exits.append(ExitSpec(DRIVER_EXIT, ExitKind.DRIVER))


def _push_down_key_columns(stages: list[Stage]) -> None:
    """A typed source whose only consumer is keyed by plain columns needs no Python stage, also when a
    timestamp assigner that only reads an integer column sits between them: the keyed stage then reads
    each record's timestamp from that column and reports the origin's split for it."""
    for stage in stages:
        plan = stage.plan
        if stage.source is None or plan.input_format != InputFormat.TYPED or len(plan.ops) > 2:
            continue
        if plan.ops[0].watermark_strategy is not None:
            continue  # timestamps are assigned in Python, at the source
        if len(plan.exits) != 1 or plan.exits[0].kind != ExitKind.KEYED:
            continue
        target = stages[plan.exits[0].consumer_stage]
        if len(target.inputs) != 1:
            continue
        dataframe = stage.source.spec.dataframe
        columns = dataframe.columns
        keys = key_columns(plan.exits[0].key_selector, columns)
        if keys is None or not _hashable_in_jvm(dataframe, keys):
            continue
        stamps = plan.ops[1] if len(plan.ops) == 2 else None
        if stamps is not None:
            if (stamps.kind != OperatorKind.TIMESTAMPS or plan.ops[0].outputs != [("op", 1, None)]
                    or stamps.outputs != [("exit", plan.exits[0].exit_id, None)]):
                continue
            stamp = timestamp_column(stamps.watermark_strategy, columns)
            if stamp is None or not _integral(dataframe, stamp):
                continue
            target.plan.timestamp_field, target.plan.timestamp_origin = stamp, stamps.uid
            stamps.outputs = []
        target.plan.input_format = InputFormat.TYPED_KEYED
        target.plan.typed_fields = list(columns)
        target.plan.key_fields = keys
        target.pushdown_source = stage.source
        target.inputs = []
        stage.plan.exits = []
        stage.plan.ops[0].outputs = []
        stage.plan.input_format = InputFormat.PUSHED_DOWN


def timestamp_column(strategy, names: list[str]) -> str | None:
    """The column a watermark strategy's timestamp assigner returns as it is, else None."""
    assigner = strategy.timestamp_assigner
    if assigner is None:
        return None
    result = _probe(lambda row: assigner.extract_timestamp(row, None), names)
    return result.name if isinstance(result, _FieldRef) else None


def _column_types_are(dataframe, columns: list[str], types: tuple) -> bool:
    fields = {f.name: f.dataType for f in dataframe.schema.fields}
    return all(isinstance(fields.get(c), types) for c in columns)


def _integral(dataframe, column: str) -> bool:
    from pyspark.sql import types as T

    return _column_types_are(dataframe, [column], (T.ByteType, T.ShortType, T.IntegerType, T.LongType))


def _hashable_in_jvm(dataframe, columns: list[str]) -> bool:
    from pyspark.sql import types as T

    return _column_types_are(dataframe, columns, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.StringType,
                                                  T.BinaryType, T.BooleanType, T.FloatType, T.DoubleType))
