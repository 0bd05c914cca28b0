"""What runs inside a Spark task: one stage for one subtask of one epoch.

The task reads its input (Arrow batches, or a keyspan source's partition, which it reads itself),
pushes records through the stage's operator chain, writes
the epoch's state changes and staged sink output under attempt-unique names, and ends with a
control row — its ``TaskReport`` — naming what it wrote. The driver commits exactly the attempts
whose reports reached it (invariant 1); operator instances and their state stay cached in the
Python worker between epochs and are confirmed, rolled back or reloaded at the next epoch.
"""

from __future__ import annotations

import itertools
from functools import partial
import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc

from keyspan.checkpoint.handles import TaskReport
from keyspan.common import garbage
from keyspan.common.clock import LONG_MAX, wall_clock_ms
from keyspan.common.types import named_row_class, packed_rows
from keyspan.connectors.sources import SplitChunk
from keyspan.datastream.functions import TimeDomain
from keyspan.io import serde
from keyspan.metrics import metricbase
from keyspan.runtime import event_time
from keyspan.runtime.planner import ExitKind, InputFormat, StagePlan
from keyspan.runtime.protocol import (
    BROADCAST_CHUNK,
    COLUMN_CHUNK,
    CONTROL_EXIT,
    DRIVER_EXIT,
    EPOCH_CONTEXT_PROPERTY,
    FLUSH_RECORDS,
    OUTPUT_SCHEMA,
    EpochContext,
    UserFunctionError,
    decode_context,
    user_error,
)
from keyspan.runtime.worker import handoff, instances, state_io
from keyspan.runtime.worker.acks import acknowledging
from keyspan.runtime.worker.chain import OperatorChain, emitting
from keyspan.runtime.worker.contexts import SnapshotContext
from keyspan.runtime.worker.timers import EVENT_TIME, PROCESSING_TIME
from keyspan.state.keygroups import compute_operator_index_for_key_group

FIRING_BATCH = 1024  # windows an operator fires between two looks at the exits' buffers
_PLANS: dict[str, StagePlan] = {}
_READERS: dict[bytes, object] = {}  # a source stage's pickled SourceReader → the reader


def make_stage_function(plan_bytes: bytes, digest: str, reader_bytes: bytes | None = None,
                        in_union: bool = False):
    """The function given to ``mapInArrow``, built once per plan; the plan travels as bytes and is
    unpickled once per worker, the epoch's context comes with each task (a Spark local property).
    A keyspan source's stage gets its ``SourceReader`` too: each of its tasks reads one input partition.
    A function ``in_union`` is one of a union of functions over the same exchange, each with as many
    partitions as the stage has subtasks: the subtask is the partition id modulo the parallelism
    (``SparkStages._worker_pools``)."""

    def run(batches):
        plan = stage_plan(plan_bytes, digest)
        from pyspark import TaskContext

        tc = TaskContext.get()
        encoded = tc.getLocalProperty(EPOCH_CONTEXT_PROPERTY)
        if encoded is None:
            raise RuntimeError(f"a task of stage {plan.stage_id} ran without its epoch's context: it must run in "
                               f"a Spark job started by the keyspan driver, which sets '{EPOCH_CONTEXT_PROPERTY}'")
        ctx = decode_context(encoded)
        attempt = tc.attemptNumber()
        subtask = tc.partitionId() % plan.parallelism if in_union else tc.partitionId()
        if reader_bytes is not None:
            # the task's one row is its index among the epoch's reads: its subtask (under a union of stage
            # outputs, Spark's partition id counts the partitions of the inputs before it too). The input
            # is read to its end: a Python worker that leaves input unread is not reused for other tasks
            (subtask,) = [i for batch in batches for i in batch.column(0).to_pylist()]
            batches = source_reader(reader_bytes).read(ctx.reads[plan.stage_id][subtask])
        elif not in_union and plan.input_format in (InputFormat.EXCHANGE, InputFormat.TYPED_KEYED):
            # A partition id is not the subtask once Spark unions stage outputs; every partition of an
            # exchange then carries rows addressed to it (control rows, or a heartbeat row) that say
            # which. A JVM-routed partition without rows is the subtask its partition id says
            # (SparkStages._routed_by_key).
            batches = iter(batches)
            first = next((b for b in batches if b.num_rows), None)
            if first is not None:
                subtask = _addressed_subtask(first, plan)
                batches = itertools.chain([first], batches)
        yield from StageTask(plan, ctx, subtask, attempt).run(batches)

    return acknowledging(run)


def _addressed_subtask(batch, plan: StagePlan) -> int:
    """The subtask a partition's first row is addressed to: an exchange's rows name it; a JVM-routed
    row's key group gives it, a heartbeat row's (key group -1 - subtask) too."""
    if plan.input_format == InputFormat.EXCHANGE:
        return batch.column(batch.schema.get_field_index("_ks_sub"))[0].as_py()
    kg = batch.column(batch.schema.get_field_index("_ks_kg"))[0].as_py()
    return -1 - kg if kg < 0 else compute_operator_index_for_key_group(plan.max_parallelism, plan.parallelism, kg)


def _joined(batches, rows: int):
    """Consecutive Arrow batches joined up to ``rows`` rows: an operator that takes whole chunks pays
    its per-key work once per chunk, and Spark's batches (10,000 rows) hold too few records per key."""
    pending, count = [], 0
    for batch in batches:
        pending.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.concat_batches(pending) if len(pending) > 1 else batch
            pending, count = [], 0
    if pending:
        yield pa.concat_batches(pending) if len(pending) > 1 else pending[0]


def _in_timestamp_order(chunks: list):
    """Chunks of a keyed stage's timestamped input (key groups, keys, records, timestamps, input side)
    as chunks of at most FLUSH_RECORDS records in timestamp order, ties in the order they came."""
    rows = [(kg, key, r, ts, side) for kgs, keys, records, stamps, side in chunks
            for kg, key, r, ts in zip(kgs, keys, records, stamps)]
    chunks.clear()
    rows.sort(key=lambda row: row[3])
    for side, run in itertools.groupby(rows, key=lambda row: row[4]):
        run = list(run)
        for i in range(0, len(run), FLUSH_RECORDS):
            kgs, keys, records, stamps, _ = map(list, zip(*run[i:i + FLUSH_RECORDS]))
            yield kgs, keys, records, stamps, side


def no_rows(batches):
    """A Python task that only occupies a worker (``SparkStages.touch_workers``). It reads its input to
    the end: Spark reuses only workers that did."""
    for _ in batches:
        pass
    return iter(())


def stage_plan(plan_bytes: bytes, digest: str) -> StagePlan:
    """A stage's plan, unpickled once per process."""
    plan = _PLANS.get(digest)
    if plan is None:
        plan = _PLANS[digest] = serde.loads_code(plan_bytes)
        plan.code = digest
    return plan


def source_reader(reader_bytes: bytes):
    """A source stage's ``SourceReader``, unpickled once per process: every task reads with its own copy
    of the driver's reader, never the driver's reader itself."""
    reader = _READERS.get(reader_bytes)
    if reader is None:
        reader = _READERS[reader_bytes] = serde.loads_code(reader_bytes)
    return reader


class StageTask(OperatorChain):
    def __init__(self, plan: StagePlan, ctx: EpochContext, subtask: int, attempt: int):
        self.plan = plan
        self.ctx = ctx
        self.subtask = subtask
        self.attempt = attempt
        self.token = uuid.uuid4().hex[:16]
        self.records_in = 0
        self.records_out = 0  # records sent downstream or to driver sinks
        self.restored_bytes = 0
        self.restore_s = 0.0
        self.out_exit: list[int] = []
        self.out_sub: list[int] = []
        self.out_ctl: list = []
        self.out_payload: list = []
        self.upstream: list = []
        self.instances: list[instances.OperatorInstance] = []
        self.sink_writers: dict[int, object] = {}
        self.async_waits: list = []  # (op index, AsyncWait): async operators, whose calls finish before the snapshot
        self.exits = {}
        self.driver_buffers: dict[int, list] = {}
        self.broadcast_entry = None  # the broadcast-side input of a broadcast-process stage
        self.second_entry = None  # the second input of a two-input stage (chunks tagged with input side 1)
        self.ts_cell = [None]  # the event timestamp of the record being processed (None: none)
        self.chunk_split = [None]  # the split a source chunk names (a Kafka partition), for its watermarks
        self.split_max: dict[str, dict[str, list]] = {}  # origin uid → {split: [max timestamp]} of this epoch
        self.keyed_emit = None  # (instance, op, emit, timer context) of the keyed operator, whose timers fire at the end
        self.entry: list = []

    def _instance(self, op, keyed: bool) -> instances.OperatorInstance:
        began = time.perf_counter()
        inst, restored = instances.acquire(op, self.plan, self.subtask, self.attempt, self.ctx, keyed)
        self.restore_s += time.perf_counter() - began
        self.restored_bytes += restored
        self.instances.append(inst)
        return inst

    # -- output rows ---------------------------------------------------------------------------
    def _row(self, exit_id, sub, ctl, payload):
        self.out_exit.append(exit_id)
        self.out_sub.append(sub)
        self.out_ctl.append(ctl)
        self.out_payload.append(payload)

    def _take_batch(self):
        if not self.out_exit:
            return None
        batch = pa.RecordBatch.from_arrays(
            [pa.array(self.out_exit, pa.int32()), pa.array(self.out_sub, pa.int32()),
             pa.array(self.out_ctl, pa.binary()), pa.array(self.out_payload, pa.binary())], schema=OUTPUT_SCHEMA)
        self.out_exit, self.out_sub, self.out_ctl, self.out_payload = [], [], [], []
        return batch

    def _buffered(self) -> int:
        return sum(e.buffered for e in self.exits.values())

    def _full_batch(self):
        """The exits' rows once they buffer FLUSH_RECORDS records (else None), so that a task's output
        leaves while it runs."""
        if self._buffered() < FLUSH_RECORDS:
            return None
        self._flush_exits()
        return self._take_batch()

    def _flush_exits(self):
        self.records_out += self._buffered()
        for exit_id, ex in self.exits.items():
            ex.flush(exit_id, self._row)

    # -- running ---------------------------------------------------------------------------------
    def run(self, batches):
        handoff.wait()
        self.busy_s = 0.0
        try:
            with garbage.streaming_records():
                metricbase.begin_epoch([op.uid for op in self.plan.ops], self.subtask)
                self._build()
                if self.plan.timestamp_field and self.keyed_emit is not None:
                    # timers the last epoch's watermark passed that its task could not see passed (_stamped)
                    began = time.perf_counter()
                    self._fire_timers(self._watermark(self.keyed_emit[1]))
                    self.busy_s += time.perf_counter() - began
                yield from self._consume(batches)
                yield from self._finish()
        except BaseException:
            for _, wait in self.async_waits:
                wait.cancel()
            for inst in self.instances:
                inst.rollback()
            raise

    def _consume(self, batches):
        plan = self.plan
        fmt = plan.input_format
        entry = self.entry
        single = entry[0] if len(entry) == 1 else None
        batch_entry = getattr(single, "batch", None)  # a columnar keyed operator takes whole chunks
        # ... and, keyed by columns of a Spark source, Arrow chunks joined up to COLUMN_CHUNK rows (as they are
        # for the columnar entry, as records for the chunk entry)
        columns_entry = getattr(single, "columns", None) if plan.key_fields else None
        if plan.timestamp_field and not getattr(columns_entry, "take_timestamps", False):
            columns_entry = None  # e.g. a rolling aggregate: its output batches would drop the timestamps
        if fmt == InputFormat.TYPED_KEYED and (columns_entry is not None or batch_entry is not None):
            batches = _joined(batches, COLUMN_CHUNK)
        row_cls = named_row_class(tuple(plan.typed_fields)) if plan.typed_fields else None
        key_at = [plan.typed_fields.index(c) for c in plan.key_fields] if plan.key_fields else None
        make_row = partial(tuple.__new__, row_cls)  # a typed input's values → its named Row
        cell = self.ts_cell
        source_ts = [None]  # the timestamp the source gave the record (Kafka's), if any
        # a keyed stage's state backend loads each chunk's keys in one go before the chunk is processed
        prefetch = getattr(self.keyed_emit[0].backend, "prefetch", None) if plan.keyed and self.keyed_emit else None
        if len(entry) > 1 and any(op.watermark_strategy is not None for op in plan.ops):
            # a source feeding several branches: a timestamp assigned on one branch must not leak into another
            def reset_timestamp(e):
                def run(r):
                    cell[0] = source_ts[0]
                    e(r)
                return run
            entry = [reset_timestamp(e) for e in entry]
        keyed = partial(self._keyed, single, batch_entry, prefetch)
        # BATCH mode: as Flink's sorted inputs, a key's records reach its operator in timestamp order,
        # so the task holds its timestamped input back (as chunks) and processes it once it has all of
        # it. Records without a timestamp come first in that order, so they are processed as they come.
        held = [] if self.ctx.time.batch and plan.keyed and fmt != InputFormat.CHUNKS else None
        if held is not None:
            process_keyed, columns_entry = keyed, None

            def keyed(kgs, keys, records, stamps, side=0):
                if stamps is not None and None in stamps:  # a chunk of both: its untimed records go now
                    timed = [ts is not None for ts in stamps]
                    untimed = [not t for t in timed]
                    process_keyed(*(list(itertools.compress(c, untimed)) for c in (kgs, keys, records)), None, side)
                    kgs, keys, records, stamps = (list(itertools.compress(c, timed)) for c in (kgs, keys, records, stamps))
                if stamps is None:
                    process_keyed(kgs, keys, records, None, side)
                elif records:
                    held.append((kgs, keys, records, stamps, side))
        for batch in batches:
            began = time.perf_counter()
            if fmt == InputFormat.CHUNKS:  # a chunk of records the task read from its source partition
                if type(batch) is SplitChunk:  # records of one split with the source's event timestamps
                    records, stamps, self.chunk_split[0] = batch
                    self.records_in += len(records)
                    for r, ts in zip(records, stamps):
                        source_ts[0] = cell[0] = ts
                        for e in entry:
                            e(r)
                    source_ts[0] = cell[0] = self.chunk_split[0] = None
                else:
                    self.records_in += len(batch)
                    for r in batch:
                        for e in entry:
                            e(r)
            elif fmt == InputFormat.TYPED:
                cls = named_row_class(tuple(batch.schema.names))
                cols = [c.to_pylist() for c in batch.columns]
                self.records_in += batch.num_rows
                new = tuple.__new__
                for values in zip(*cols):
                    r = new(cls, values)
                    for e in entry:
                        e(r)
            elif fmt == InputFormat.TYPED_KEYED:
                if columns_entry is None or not self._columns(columns_entry, batch, row_cls):
                    self._typed_keyed(batch, make_row, key_at, keyed)
            else:  # an exchange
                ctl = batch.column(2).to_pylist()
                payloads = batch.column(3).to_pylist()
                for c, payload in zip(ctl, payloads):
                    if c is not None:
                        self.upstream.append(c)
                        continue
                    kgs, keys, records, stamps, side = serde.loads(payload)
                    self.records_in += len(records)
                    cell[0] = None
                    if kgs == BROADCAST_CHUNK and self.broadcast_entry is not None:  # sorted first
                        process_broadcast = self.broadcast_entry
                        if stamps is None:
                            for r in records:
                                process_broadcast(r)
                        else:
                            for r, cell[0] in zip(records, stamps):
                                process_broadcast(r)
                    elif plan.keyed:
                        keyed(kgs, keys, records, stamps, side)
                    else:
                        targets = (self.second_entry,) if side else entry
                        for i, r in enumerate(records):
                            if stamps is not None:
                                cell[0] = stamps[i]
                            for e in targets:
                                e(r)
            self.busy_s += time.perf_counter() - began
            out = self._full_batch()
            if out is not None:
                yield out
        if held:
            for chunk in _in_timestamp_order(held):
                began = time.perf_counter()
                process_keyed(*chunk)
                self.busy_s += time.perf_counter() - began
                out = self._full_batch()
                if out is not None:
                    yield out

    def _keyed(self, single, batch_entry, prefetch, kgs, keys, records, stamps, side=0):
        """Records of a keyed stage (their key groups, keys and timestamps alongside) to its operator:
        the chunk at once to a columnar one, else record by record (``side`` 1: a two-input operator's
        second input)."""
        if prefetch is not None:
            prefetch(kgs, keys)
        if batch_entry is not None and not side:
            batch_entry(kgs, keys, records, stamps)
            return
        process = self.second_entry if side else single
        if stamps is None:
            for kg, key, r in zip(kgs, keys, records):
                process(r, key, kg)
        else:
            cell = self.ts_cell
            for kg, key, r, cell[0] in zip(kgs, keys, records, stamps):
                process(r, key, kg)
            cell[0] = None

    def _typed_keyed(self, batch, make_row, key_at, keyed):
        """A chunk of a Spark source keyed in the JVM, record by record (or as a list, to a columnar operator)."""
        names = batch.schema.names
        kg_col = batch.column(names.index("_ks_kg")).to_pylist()
        cols = [batch.column(names.index(n)).to_pylist() for n in self.plan.typed_fields]
        # the key selector named these columns (planner.key_columns), so they are each record's key
        key_col = (cols[key_at[0]] if len(key_at) == 1
                   else list(zip(*[cols[i] for i in key_at])))
        records = list(map(make_row, zip(*cols)))
        field = self.plan.timestamp_field
        stamps = cols[self.plan.typed_fields.index(field)] if field else None
        if min(kg_col, default=0) < 0:  # the heartbeat row that tells this task its subtask
            keep = [i for i, kg in enumerate(kg_col) if kg >= 0]
            kg_col, key_col, records = ([col[i] for i in keep] for col in (kg_col, key_col, records))
            stamps = [stamps[i] for i in keep] if stamps is not None else None
        self.records_in += len(records)
        if stamps is not None:
            self._stamped(max((t for t in stamps if t is not None), default=None))
        keyed(kg_col, key_col, records, stamps)

    def _columns(self, columns_entry, batch, row_cls) -> bool:
        """The same chunk as Arrow columns to the operator's ``process_columns``; False if it declined."""
        kg_col = batch.column(batch.schema.get_field_index("_ks_kg"))
        kgs = kg_col.to_numpy()
        if (kgs < 0).any():  # the heartbeat row that tells this task its subtask
            batch = batch.filter(pc.greater_equal(kg_col, 0))
            kgs = kgs[kgs >= 0]
        fields = batch.select(self.plan.typed_fields)
        stamps = None
        if self.plan.timestamp_field:
            column = fields.column(self.plan.timestamp_field)
            if column.null_count:
                return False
            stamps = column.to_numpy().astype("int64", copy=False)
        if not columns_entry(kgs, [fields.column(k) for k in self.plan.key_fields], fields, row_cls, stamps):
            return False
        if stamps is not None and len(stamps):
            self._stamped(int(stamps.max()))
        self.records_in += fields.num_rows
        return True

    def _stamped(self, largest) -> None:
        """A chunk's largest timestamp, read from the column of a timestamp assigner pushed into this
        stage: the stage reports that assigner's one split (the source's), the driver merges every
        subtask's maximum into it. The watermark after the epoch that this task computes from its own
        maximum is never ahead of the driver's; the timers it leaves fire before the next epoch's records."""
        if largest is not None:
            seen = self.split_max.setdefault(self.plan.timestamp_origin, {}).setdefault("0", [largest])
            if largest > seen[0]:
                seen[0] = largest

    def _fire_timers(self, watermark: int | None = None):
        """Fire the keyed operator's timers that the watermark (by default the one after this epoch,
        computed from every upstream origin's report) or the wall clock has passed, in timestamp order.
        In BATCH mode the end of the input ends processing time too: every processing-time timer fires
        after the event-time ones, and timers those register are ignored, as in Flink's batch runtime."""
        inst, op, emit, ctx = self.keyed_emit
        timers = inst.timers
        if not (inst.fires_timers or timers.active):
            return
        if watermark is None:
            watermark = event_time.watermark_of(self._time_after_epoch(), op.origins)
        timers.watermark = watermark
        inst.backend.current_watermark = watermark
        timers.processing_ended = self.ctx.time.batch and watermark == LONG_MAX
        backend = inst.backend

        def describe(ts):
            return f"on_timer({ts}) for key {backend.current_key!r}"

        on_timer = emitting(op, self.subtask, inst.function.on_timer, emit, describe=describe)
        fire_window_ends = getattr(inst.function, "event_time_firing", None)
        cell = self.ts_cell
        timers.start_firing()
        try:
            while True:
                domain = TimeDomain.EVENT_TIME
                if fire_window_ends is not None:  # a window operator fires its windows' ends itself
                    ctx.domain = domain
                    try:
                        more = fire_window_ends(timers, watermark, ctx, emit, FIRING_BATCH)
                    except UserFunctionError:
                        raise
                    except Exception as exc:
                        raise user_error(op, self.subtask, exc, method=describe(ctx.firing)) from exc
                    if self._buffered() >= FLUSH_RECORDS:
                        self._flush_exits()
                    if more:
                        continue
                    ts = None
                else:
                    ts = timers.pop_due(EVENT_TIME, watermark)
                if ts is None:
                    domain = TimeDomain.PROCESSING_TIME
                    ts = timers.pop_due(PROCESSING_TIME, LONG_MAX if timers.processing_ended else wall_clock_ms())
                    if ts is None:
                        return
                ctx.domain = domain
                ctx.firing = ts
                cell[0] = ts if domain is TimeDomain.EVENT_TIME else None
                on_timer(ts, ctx)
                if self._buffered() >= FLUSH_RECORDS:
                    self._flush_exits()
        finally:
            timers.end_firing()
            timers.processing_ended = False

    def _time_after_epoch(self) -> dict:
        """The origins' time state after this epoch: what the driver will commit, computed from the
        reports of every upstream task (each consumer task receives all of them)."""
        reports = {}
        seen = set()
        stack = list(self.upstream)
        while stack:
            raw = stack.pop()
            if raw in seen:
                continue
            seen.add(raw)
            report: TaskReport = serde.loads(raw)
            event_time.merge_reports(reports, report.splits)
            stack.extend(report.upstream)
        event_time.merge_reports(reports, self._split_report())
        t = self.ctx.time
        return event_time.advance(t.origins, t.state, reports, t.now, t.finished, t.splits)

    def _split_report(self) -> dict:
        return {uid: {split: m[0] for split, m in splits.items()} for uid, splits in self.split_max.items()}

    def _finish(self):
        if self.keyed_emit is not None:
            began = time.perf_counter()
            self._fire_timers()
            self.busy_s += time.perf_counter() - began
        for _, wait in sorted(self.async_waits, key=lambda w: w[0]):  # upstream first: it feeds those after it
            wait.drain()
        began = time.perf_counter()
        handles, tokens = self._snapshot_state()
        snapshot_s = time.perf_counter() - began
        sinks = []
        for index, writer in self.sink_writers.items():
            staged = writer.finish()  # a writer returns None, one handle or a list of them
            for h in staged if isinstance(staged, list) else [staged] if staged else []:
                h["sink"] = self.plan.ops[index].uid
                sinks.append(h)
        to_driver = 0
        for sink_index, records in self.driver_buffers.items():
            for i in range(0, len(records), FLUSH_RECORDS):
                self._row(DRIVER_EXIT, self.subtask, None, serde.dumps((sink_index, packed_rows(records[i:i + FLUSH_RECORDS]))))
            to_driver += len(records)
            # emptied, not dropped: the chain's sink closure holds the list, in a reference cycle with the
            # task that only a full collection frees, and the worker's objects are frozen between tasks
            # (``garbage``), so the records would stay in memory for several tasks
            records.clear()
        self._flush_exits()
        control = serde.dumps(TaskReport(
            stage=self.plan.stage_id, subtask=self.subtask, token=self.token, attempt=self.attempt,
            handles=handles, tokens=tokens, sinks=sinks, records=self.records_in,
            records_out=self.records_out + to_driver,
            restored_bytes=self.restored_bytes, upstream=self.upstream,
            states={inst.op.uid: inst.backend.describe_states() for inst in self.instances
                    if inst.backend is not None},
            splits=self._split_report(),
            timers=any(inst.timers is not None and inst.timers.active for inst in self.instances),
            next_timer=min((t for t in (inst.timers.next_processing_time() for inst in self.instances
                                        if inst.timers is not None) if t is not None), default=None),
            metrics=metricbase.take_epoch_snapshot([op.uid for op in self.plan.ops], self.subtask),
            busy_ms=self.busy_s * 1000,
            snapshot_ms=snapshot_s * 1000,
            restore_ms=self.restore_s * 1000,
        ))
        downstream = [e for e in self.plan.exits if e.kind != ExitKind.DRIVER]
        if downstream:
            for e in downstream:
                for sub in range(e.consumer_parallelism):
                    self._row(e.exit_id, sub, control, None)
        else:
            self._row(CONTROL_EXIT, self.subtask, control, None)
        out = self._take_batch()
        if out is not None:
            yield out
        instances.park(self.instances, self.ctx.epoch, self.token)
        notes = handoff.notes_directory()
        if notes is not None:
            handoff.leave_notes(notes, self.ctx, self.instances, handles, self.token)
            handoff.start(notes, self.ctx, self.instances, handles)

    def _snapshot_state(self):
        context = SnapshotContext(self.ctx.epoch)
        for inst in self.instances:
            if inst.checkpointed is not None:
                try:
                    inst.checkpointed.snapshot_state(context)
                except Exception as exc:
                    raise user_error(inst.op, self.subtask, exc, method="snapshot_state") from exc
        return state_io.snapshot(self.instances, self.ctx, self.subtask, self.plan.parallelism, self.token)
