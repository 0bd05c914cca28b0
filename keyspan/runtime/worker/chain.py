"""A stage's operator chain (Flink's chaining): each operator becomes a processor — a callable taking
one record (an entry of a keyed stage: record, key, key group) — that calls the user's function and
emits to the next processor or to an exit. Every user call that emits goes through ``emitting``,
the one place where a user error is turned into a message naming operator and record (the keyed
processor, which runs once per record, inlines it)."""

from __future__ import annotations

from functools import partial

import pyarrow as pa

from keyspan.common.clock import LONG_MIN
from keyspan.common.java_values import received_form, received_key_form
from keyspan.common.types import rows_of_arrow
from keyspan.connectors.dead_letter import DeadLetter
from keyspan.datastream.output_tag import OutputTag
from keyspan.metrics import metricbase
from keyspan.datastream.transformation import BROADCAST_KINDS, SIDE_OUTPUT_KINDS, TWO_INPUT_KINDS, OperatorKind
from keyspan.runtime import event_time
from keyspan.runtime.planner import ExitKind
from keyspan.runtime.protocol import RecordFailed, UserFunctionError, user_error
from keyspan.runtime.worker import instances
from keyspan.runtime.worker.async_wait import AsyncWait
from keyspan.runtime.worker.contexts import (
    BroadcastContext,
    BroadcastReadOnlyContext,
    BroadcastStates,
    Clock,
    CoContext,
    Context,
    KeyedBroadcastContext,
    KeyedBroadcastOnTimerContext,
    KeyedBroadcastReadOnlyContext,
    KeyedCoContext,
    KeyedCoOnTimerContext,
    KeyedContext,
    OnTimerContext,
    TaskRuntimeContext,
)
from keyspan.runtime.worker.exits import BroadcastExit, CustomExit, KeyedExit, RebalanceExit, ShuffleExit, frozen


def emitting(op, subtask: int, call, emit, describe=None):
    """``call(value, *args)`` returns None or an iterable of results, each emitted. A failure names the
    operator and the record (or, with ``describe(value)``, the call: e.g. an on_timer firing)."""
    emit = per_record(emit)

    def run(value, *args):
        try:
            outs = call(value, *args)
            if outs is not None:
                for out in outs:
                    emit(out)
        except UserFunctionError:
            raise
        except Exception as exc:
            if describe is None:
                raise user_error(op, subtask, exc, record=value) from exc
            raise user_error(op, subtask, exc, method=describe(value)) from exc
    return run


def _discard(value):
    pass


def fan_out(targets: list):
    if not targets:
        return _discard
    if len(targets) == 1:
        return targets[0]

    def emit(value, _targets=tuple(map(per_record, targets))):
        for t in _targets:
            t(value)
    return emit


def per_record(target):
    """``target`` as called with one record: a sink's writer is wrapped in a ``partial`` only to carry
    its columnar entry (``.columns``), which records need not go through (a third of a sink call)."""
    if type(target) is partial and not target.args and not target.keywords:
        return target.func
    return target


def with_side_outputs(main, side: dict):
    """A process function's ``yield tag, value`` goes to side output ``tag`` (dropped if nobody reads it).
    ``emit.routes`` is (main, side) for a processor that inlines this routing (the keyed one)."""
    call_main = per_record(main)

    def emit(value, _tuple=tuple, _tag=OutputTag):
        if value.__class__ is _tuple and len(value) == 2 and isinstance(value[0], _tag):
            side.get(value[0].tag_id, _discard)(value[1])
        else:
            call_main(value)
    emit.routes = (call_main, side)
    if hasattr(main, "columns"):  # a columnar operator's output has no side outputs
        emit.columns = main.columns
    return emit


class OperatorChain:
    """Builds the processors of a StageTask's chain (mixed into it: the chain reads the task's
    subtask, epoch context, timestamp cell and exits)."""

    def _build(self):
        plan = self.plan
        emitters = {}

        def emitter_for(op):
            if op.index in emitters:
                return emitters[op.index]
            forms = op.output_forms
            main = [self._target(kind, ref, emitter_for, forms.get(None)) for kind, ref, tag in op.outputs if tag is None]
            side: dict[str, list] = {}
            for kind, ref, tag in op.outputs:
                if tag is not None:
                    side.setdefault(tag, []).append(self._target(kind, ref, emitter_for, forms.get(tag)))
            fn = fan_out(main)
            if op.kind in SIDE_OUTPUT_KINDS:
                fn = with_side_outputs(fn, {tag: per_record(fan_out(targets)) for tag, targets in side.items()})
            emitters[op.index] = fn
            return fn

        self.entry = [self._processor(plan.ops[i], emitter_for) for i in plan.entry]

    def _target(self, kind, ref, emitter_for, form=None):
        """``form``: what the sending operator's values become before the function of operator ``ref`` of
        this chain gets them (``OpSpec.output_forms``; an exit's receiver and a sink convert them themselves)."""
        if kind == "exit":
            return self._exit(ref)
        op = self.plan.ops[ref]
        process = self._processor(op, emitter_for)
        if form is None or op.kind in (OperatorKind.SINK, OperatorKind.DRIVER_SINK):
            return process
        return lambda value: process(form(value))

    def _exit(self, exit_id):
        if exit_id in self.exits:
            return self.exits[exit_id].add
        spec = next(e for e in self.plan.exits if e.exit_id == exit_id)
        if spec.kind == ExitKind.KEYED:
            sender = next(op for op in self.plan.ops if any(o[:2] == ("exit", exit_id) for o in op.outputs))
            ex = KeyedExit(spec, self.plan.max_parallelism, self.ts_cell,
                           metricbase.operator_group(sender.uid, self.subtask).counter("numKeyErrors"))
        elif spec.kind == ExitKind.REBALANCE:
            ex = RebalanceExit(spec, self.subtask, self.ts_cell)
        elif spec.kind == ExitKind.BROADCAST:
            ex = BroadcastExit(spec, self.ts_cell)
        elif spec.kind == ExitKind.SHUFFLE:
            ex = ShuffleExit(spec, self.ts_cell)
        elif spec.kind == ExitKind.CUSTOM:
            op = next(o for o in self.plan.ops if ("exit", exit_id) in [(k, r) for k, r, _ in o.outputs])
            ex = CustomExit(spec, self.ts_cell, f"operator '{op.name}' (uid '{op.uid}'), subtask {self.subtask}")
        else:
            raise ValueError(f"exit {exit_id} of stage {self.plan.stage_id} has no records to route")
        received = received_form(spec.record_type)
        if received is not None:  # records cross as PyFlink's serializer of their declared type gives them back
            add = ex.add
            ex.add = lambda value: add(received(value))
        self.exits[exit_id] = ex
        return ex.add

    def _watermark(self, op) -> int:
        """The operator's watermark during this epoch: the one reached after the previous epoch."""
        return event_time.watermark_of(self.ctx.time.state, op.origins)

    def _processor(self, op, emitter_for):
        if op.error_policy is not None:
            return self._dead_letter_router(op, emitter_for)
        return self._operator(op, emitter_for)

    def _dead_letter_router(self, op, emitter_for):
        """A source whose reader may emit ``DeadLetter``s: each is counted (``numRecordsInErrors``)
        and goes to the policy's side output when the job reads it, before any timestamp assigner."""
        process = self._operator(op, emitter_for)
        tag = op.error_policy.tag
        side = fan_out([self._target(kind, ref, emitter_for) for kind, ref, t in op.outputs
                        if tag is not None and t == tag.tag_id])
        errors = metricbase.operator_group(op.uid, self.subtask).counter("numRecordsInErrors")

        def route(value):
            if type(value) is DeadLetter:
                errors.inc()
                side(value.row)
            else:
                process(value)
        return route

    def _operator(self, op, emitter_for):
        emit = emitter_for(op)
        kind = op.kind
        subtask = self.subtask
        if op.watermark_strategy is not None:
            return self._timestamp_assigner(op, emit)
        if kind in (OperatorKind.SOURCE, OperatorKind.TIMESTAMPS):
            return emit
        if kind == OperatorKind.MAP:
            f = self._method(op, "map")
            return emitting(op, subtask, lambda value: (f(value),), emit)
        if kind == OperatorKind.FLAT_MAP:
            return emitting(op, subtask, self._method(op, "flat_map"), emit)
        if kind == OperatorKind.FILTER:
            f = self._method(op, "filter")
            return emitting(op, subtask, lambda value: (value,) if f(value) else None, emit)
        if kind == OperatorKind.PROCESS:
            ctx = Context(self.ts_cell, Clock(self._watermark(op)))
            pe = emitting(op, subtask, self._plain_function(op).process_element, emit)
            return lambda value: pe(value, ctx)
        if kind == OperatorKind.ASYNC_WAIT:
            wait = AsyncWait(op, subtask, self._plain_function(op, op.function.async_function), emit, self.ts_cell)
            self.async_waits.append((op.index, wait))
            return wait
        if kind in BROADCAST_KINDS:
            return self._broadcast_processor(op, emit)
        if kind in TWO_INPUT_KINDS:
            return self._two_input_processor(op, emit)
        if kind == OperatorKind.KEYED_PROCESS:
            inst = self._instance(op, keyed=True)
            backend = inst.backend
            present_key = received_key_form(op.key_type)
            ctx = KeyedContext(backend, self.ts_cell, inst.timers, present_key)
            self._start_timers(inst, op, emit, OnTimerContext(backend, self.ts_cell, inst.timers, present_key))
            process_element = inst.function.process_element
            main, side = emit.routes

            def process(value, key, kg, _tuple=tuple, _tag=OutputTag):
                # ``emitting`` and ``with_side_outputs`` inlined: this runs once per record
                backend.current_key = key
                backend.current_key_group = kg
                try:
                    outs = process_element(value, ctx)
                    if outs is not None:
                        for out in outs:
                            if out.__class__ is _tuple and len(out) == 2 and isinstance(out[0], _tag):
                                side.get(out[0].tag_id, _discard)(out[1])
                            else:
                                main(out)
                except UserFunctionError:
                    raise
                except Exception as exc:
                    raise user_error(op, subtask, exc, record=value) from exc
            if hasattr(inst.function, "process_batch"):
                process.batch = self._batch_processor(op, inst, ctx, emit, process)
            if hasattr(inst.function, "process_columns"):
                process.columns = self._columns_processor(op, inst, ctx, emit, process)
            return process
        if kind == OperatorKind.SINK:
            if hasattr(op.sink, "use_checkpoint_storage"):  # a sink that stages its output with the checkpoint
                op.sink.use_checkpoint_storage(self.ctx.storage, op.uid)
            writer = op.sink.create_writer(self.subtask, self.ctx.epoch, self.token)
            self.sink_writers[op.index] = writer
            if hasattr(writer, "write_columns"):  # a writer that takes a columnar operator's output as is
                write = partial(writer.write)
                write.columns = writer.write_columns
                return write
            return writer.write
        if kind == OperatorKind.DRIVER_SINK:
            append = self.driver_buffers.setdefault(op.driver_sink_index, []).append
            return lambda value: append(frozen(value))
        raise ValueError(f"unknown operator kind {kind}")

    def _batch_processor(self, op, inst, ctx, emit, process):
        """A chunk-at-a-time operator's entry (``keyspan.runtime.operators.vectorized``): a whole chunk
        goes to ``process_batch``; a chunk it declines, and the records it leaves over, run record by
        record through ``process``. Records that took the chunk path count in the operator's metric
        ``records_metric``: ``numRecordsVectorized`` (columnar) or ``numRecordsFolded``."""
        batch = inst.function.process_batch
        backend = inst.backend
        cell = self.ts_cell
        subtask = self.subtask
        vectorized = metricbase.operator_group(op.uid, subtask).counter(inst.function.records_metric)

        def run(kgs, keys, records, stamps):
            try:
                result = batch(backend, ctx, kgs, keys, records, stamps) if records else None
            except UserFunctionError:
                raise
            except RecordFailed as failed:
                raise user_error(op, subtask, failed.__cause__, record=failed.record) from failed.__cause__
            except Exception as exc:
                raise user_error(op, subtask, exc, method=f"process_batch of {len(records)} records") from exc
            if result is None:
                if stamps is None:
                    cell[0] = None
                    for kg, key, r in zip(kgs, keys, records):
                        process(r, key, kg)
                else:
                    for kg, key, r, cell[0] in zip(kgs, keys, records, stamps):
                        process(r, key, kg)
                return
            outputs, out_stamps, leftover = result
            vectorized.inc(len(records) - len(leftover))
            if out_stamps is None:
                cell[0] = None
                for out in outputs:
                    emit(out)
            else:
                for out, cell[0] in zip(outputs, out_stamps):
                    emit(out)
            for i in leftover:
                cell[0] = None if stamps is None else stamps[i]
                process(records[i], keys[i], kgs[i])
        return run

    def _columns_processor(self, op, inst, ctx, emit, process):
        """A columnar operator's entry for Arrow input (``process_columns``): ``run`` returns whether
        the operator took the chunk. Its output batch goes on whole to a target that takes columns (a
        processor with ``columns``: a sink writer's ``write_columns``), else one named Row per record;
        the records it leaves over (late ones) run record by record through ``process``."""
        columns = inst.function.process_columns
        backend = inst.backend
        subtask = self.subtask
        cell = self.ts_cell
        vectorized = metricbase.operator_group(op.uid, subtask).counter("numRecordsVectorized")
        send_columns = getattr(emit, "columns", None)

        def run(kgs, keys, batch, row_cls, stamps):
            try:
                result = columns(backend, ctx, kgs, keys, batch, row_cls, stamps)
            except UserFunctionError:
                raise
            except Exception as exc:
                raise user_error(op, subtask, exc, method=f"process_columns of {batch.num_rows} records") from exc
            if result is None:
                return False
            outputs, leftover = result
            vectorized.inc(batch.num_rows - len(leftover))
            cell[0] = None
            if outputs is not None and send_columns is not None:
                send_columns(outputs)
            elif outputs is not None:
                for row in rows_of_arrow(outputs):
                    emit(row)
            if leftover:
                at = pa.array(leftover)
                left_keys = [k.take(at).to_pylist() for k in keys]
                for i, r, key in zip(leftover, rows_of_arrow(batch.take(at)),
                                     left_keys[0] if len(keys) == 1 else zip(*left_keys)):
                    cell[0] = None if stamps is None else int(stamps[i])
                    process(r, key, int(kgs[i]))
                cell[0] = None
            return True
        run.take_timestamps = inst.function.columns_take_timestamps  # see StageTask._consume
        return run

    def _method(self, op, name: str):
        """A MapFunction's ``map`` (etc.), or the plain callable the user passed."""
        fn = self._plain_function(op)
        return getattr(fn, name, fn)

    def _timestamp_assigner(self, op, emit):
        """A watermark origin that assigns timestamps: sets each record's timestamp and tracks the
        largest one of its split (the whole source in a source stage, else this subtask; at a source
        whose chunks name their split, that split: a Kafka partition). A split is reported only when
        it had a record with a timestamp: that is what keeps it from going idle."""
        assigner = op.watermark_strategy.timestamp_assigner
        extract = assigner.extract_timestamp if assigner is not None else None
        default = str(self.subtask if op.split is None else op.split)
        chunk_split = self.chunk_split if op.kind == OperatorKind.SOURCE else [None]
        maxima = self.split_max.setdefault(op.uid, {})
        cell = self.ts_cell
        subtask = self.subtask

        def process(value):
            given = cell[0]  # put back once the record has gone on: the next record's timestamp is not this one's
            if extract is not None:
                try:
                    ts = extract(value, LONG_MIN if given is None else given)  # PyFlink's no-timestamp value
                except Exception as exc:
                    raise user_error(op, subtask, exc, record=value) from exc
                if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int)):
                    raise user_error(op, subtask, TypeError(
                        f"extract_timestamp must return epoch milliseconds as int, got {ts!r}"), record=value)
                cell[0] = ts
            ts = cell[0]
            if ts is not None:
                seen = maxima.setdefault(chunk_split[0] or default, [ts])
                if ts > seen[0]:
                    seen[0] = ts
            emit(value)
            cell[0] = given
        return process

    def _start_timers(self, inst, op, emit, timer_ctx) -> None:
        """The keyed operator's clocks for this epoch; its due timers fire at the end (``_fire_timers``)."""
        watermark = self._watermark(op)
        inst.timers.watermark = watermark
        inst.backend.current_watermark = watermark
        self.keyed_emit = (inst, op, emit, timer_ctx)

    def _broadcast_processor(self, op, emit):
        """A (keyed) broadcast-process operator: returns the data-side processor and sets the
        broadcast-side one, which the stage's input feeds first (see ``StageTask._consume``)."""
        keyed = op.kind == OperatorKind.KEYED_BROADCAST_PROCESS
        inst = self._instance(op, keyed=keyed)
        fn = inst.function
        backend = inst.backend
        states = BroadcastStates(op, inst.operator_state)
        cell = self.ts_cell
        if keyed:
            timers = inst.timers
            present_key = received_key_form(op.key_type)
            read_ctx = KeyedBroadcastReadOnlyContext(states, cell, timers, backend, present_key)
            write_ctx = KeyedBroadcastContext(states, cell, timers, backend, present_key)
            self._start_timers(inst, op, emit, KeyedBroadcastOnTimerContext(states, cell, timers, backend, present_key))
        else:
            clock = Clock(self._watermark(op))
            read_ctx, write_ctx = BroadcastReadOnlyContext(states, cell, clock), BroadcastContext(states, cell, clock)
        pe = emitting(op, self.subtask, fn.process_element, emit)
        pbe = emitting(op, self.subtask, fn.process_broadcast_element, emit)

        def process_broadcast(value):
            if backend is not None:
                backend.current_key = None  # no current key on the broadcast side (as in Flink)
            pbe(value, write_ctx)

        self.broadcast_entry = process_broadcast
        if keyed:
            def process(value, key, kg):
                backend.current_key = key
                backend.current_key_group = kg
                pe(value, read_ctx)
            return process
        return lambda value: pe(value, read_ctx)

    def _two_input_processor(self, op, emit):
        """A two-input operator: returns the first input's processor (``process_element1``) and sets
        the second's (``process_element2``), which ``StageTask._consume`` feeds chunks of input side 1.
        Keyed, both share the key's state and timers: the same key group lands in the same subtask."""
        subtask = self.subtask
        if op.kind == OperatorKind.KEYED_CO_PROCESS:
            inst = self._instance(op, keyed=True)
            backend = inst.backend
            present_key = received_key_form(op.key_type)
            ctx = KeyedCoContext(backend, self.ts_cell, inst.timers, present_key)
            self._start_timers(inst, op, emit, KeyedCoOnTimerContext(backend, self.ts_cell, inst.timers, present_key))

            def keyed(call):
                pe = emitting(op, subtask, call, emit)

                def process(value, key, kg):
                    backend.current_key = key
                    backend.current_key_group = kg
                    pe(value, ctx)
                return process
            self.second_entry = keyed(inst.function.process_element2)
            return keyed(inst.function.process_element1)
        fn = self._plain_function(op)
        ctx = CoContext(self.ts_cell, Clock(self._watermark(op)))
        pe1 = emitting(op, subtask, fn.process_element1, emit)
        pe2 = emitting(op, subtask, fn.process_element2, emit)
        self.second_entry = lambda value: pe2(value, ctx)
        return lambda value: pe1(value, ctx)

    def _plain_function(self, op, fn=None):
        """A non-keyed operator's function (``fn``, by default the plan's), opened: the plan's own object,
        or — for a CheckpointedFunction — the function of an instance that keeps operator state across epochs."""
        if fn is None and instances.checkpointed(op.function) is not None:
            return self._instance(op, keyed=False).function
        fn = op.function if fn is None else fn
        if hasattr(fn, "open"):
            fn.open(TaskRuntimeContext(op, self.subtask, self.plan.parallelism, self.plan.max_parallelism,
                                       self.attempt, job_parameters=self.ctx.job_parameters))
        return fn
