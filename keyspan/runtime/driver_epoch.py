"""Small epochs in the driver process: run whole (opt-in,
``StreamExecutionEnvironment.set_small_epochs_in_driver``), or read there (on by default,
``set_small_epochs_read_in_driver``).

An epoch run as Spark jobs costs Spark two Python stages and an exchange whatever the epoch holds
(docs/benchmarks.md), which bounds latency. An epoch of a few thousand records takes the driver a
few ms. Run whole, the driver runs exactly what the tasks would run — a ``StageTask`` per stage and
subtask, with the same epoch context, reports and checkpoint files — and does the exchange itself by
each row's subtask column, so the commit protocol is unchanged. State-wise the driver is one more
Python process a subtask can run in: its operator instances stay cached there across driver epochs,
and when an epoch is too large and runs on Spark again, the workers catch up from the checkpoint as
they do whenever Spark moves a subtask.

Read there, the driver runs only the source stages (which hold no state: an operator with operator
state gets a stage of its own, ``planner``), and each subtask of the stages they feed gets its rows as
one partition of a DataFrame the driver made (``SparkStages._driver_input``): those stages, and the
keyed state, run as Spark jobs of one stage, with no exchange.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pyarrow as pa

from keyspan.common.logs import get_logger
from keyspan.connectors.sources import SplitChunk
from keyspan.runtime.planner import InputFormat, PhysicalPlan
from keyspan.runtime.protocol import OUTPUT_SCHEMA, EpochContext, decode_context
from keyspan.runtime.worker import instances
from keyspan.runtime.worker.task import StageTask, source_reader, stage_plan

log = get_logger("keyspan.runtime")
# An epoch's files larger than this per record of the limit are not read in the driver. A file is parsed
# whole before its records are counted: at most 320 KB at the default limit, about 12 ms of JSON lines,
# wasted when the epoch then holds too many records (5 MB took 192 ms).
BYTES_PER_RECORD = 64


def runs_in_driver(plan: PhysicalPlan, readers: dict) -> bool:
    """Only jobs whose every source is a keyspan source: the driver reads their input itself. A Spark
    DataFrame source's rows exist only inside Spark's own jobs."""
    return len(readers) == len(plan.sources) and all(
        s.plan.input_format in (InputFormat.CHUNKS, InputFormat.EXCHANGE) for s in plan.stages)


def reads_in_driver(plan: PhysicalPlan, readers: dict) -> bool:
    """Jobs whose every source is a keyspan source, whose source stages all send records on to later
    stages (one that does not would run whole in the driver, which only the opt-in of
    ``runs_in_driver`` does), and whose other stages read only source stages or none: a stage gets its
    input from the driver or through Spark's exchanges, never both."""
    sources = {s.plan.stage_id for s in plan.stages if s.source is not None}
    return len(readers) == len(plan.sources) and all(
        s.plan.input_format == InputFormat.CHUNKS and s.plan.has_downstream
        for s in plan.stages if s.source is not None) and all(
        len({up in sources for up, _ in s.inputs}) <= 1 for s in plan.stages if s.source is None)


class DriverEpochs:
    """Runs an epoch in the driver when its input holds at most ``max_records`` records, and only its
    source stages when it holds at most ``sources_max_records``."""

    def __init__(self, plan: PhysicalPlan, stage_code: dict, reader_code: dict, max_records: int,
                 sources_max_records: int):
        self.plan = plan
        self.stage_code = stage_code  # stage id → (pickled plan, digest), as the Spark tasks get them
        self.reader_code = reader_code  # source stage id → its pickled SourceReader
        self.max_records = max_records
        self.sources_max_records = sources_max_records
        self.run_ids: set[str] = set()  # runs whose operators the driver holds
        self.last_run = 0.0  # when the driver last ran an epoch (time.monotonic)

    def run(self, ctx: EpochContext, context: str) -> tuple[dict[int, list[dict]], bool] | None:
        """Stage id → the rows its tasks returned, for the stages the driver ran, and whether it ran
        them all; None when the epoch's input is too large: it then runs as Spark jobs. ``context``: the
        encoded epoch context, decoded as each task decodes it, so the tasks share no object with the driver."""
        try:
            inputs, records = self._read(ctx, max(self.max_records, self.sources_max_records))
            if inputs is None:
                self._forget_when_idle()
                return None
            whole = 0 < self.max_records and records <= self.max_records
            outputs = self._run(decode_context(context), inputs, whole)
            self.last_run = time.monotonic()
            return outputs, whole
        except Exception as exc:  # noqa: BLE001 — Spark runs it again, as it retries a failed task
            log.warning("epoch %s failed in the driver (%s); running it again as Spark jobs",
                        ctx.epoch, (str(exc).splitlines() or [type(exc).__name__])[0][:300])
            log.debug("the driver's failure", exc_info=True)
            return None

    def _run(self, ctx: EpochContext, inputs: dict[int, list[list]], whole: bool) -> dict[int, list[dict]]:
        self.run_ids.add(ctx.run_id)
        outputs: dict[int, list[dict]] = {}
        for s in self.plan.stages:
            if s.source is None and not whole:
                continue
            plan = stage_plan(*self.stage_code[s.plan.stage_id])
            if s.source is not None:
                tasks = enumerate(inputs[plan.stage_id])
            else:
                tasks = exchange(s, outputs).items()
            rows = []
            for subtask, batches in tasks:
                for batch in StageTask(plan, ctx, subtask, 0).run(iter(batches)):
                    rows.extend(batch.to_pylist())
            outputs[plan.stage_id] = rows
        return outputs

    def _read(self, ctx: EpochContext, limit: int) -> tuple[dict[int, list[list]] | None, int]:
        """Each source task's chunks, read here as its task would read them, and how many records they
        hold; None past ``limit``, known from the offsets (or the files' sizes) where they tell, else
        after reading at most the limit."""
        readers = {stage_id: source_reader(self.reader_code[stage_id]) for stage_id in ctx.reads}
        bounds = [readers[stage_id].most_records(partitions) for stage_id, partitions in ctx.reads.items()]
        if sum(b for b in bounds if b is not None) > limit:
            return None, 0
        sizes = [readers[stage_id].most_bytes(partitions) for stage_id, partitions in ctx.reads.items()]
        if sum(b for b in sizes if b is not None) > limit * BYTES_PER_RECORD:
            return None, 0
        records = 0
        inputs = {}
        for stage_id, partitions in ctx.reads.items():
            reader = readers[stage_id]
            inputs[stage_id] = []
            for partition in partitions:
                chunks = []
                for chunk in reader.read(partition):
                    records += len(chunk.records if type(chunk) is SplitChunk else chunk)
                    if records > limit:
                        return None, 0
                    chunks.append(chunk)
                inputs[stage_id].append(chunks)
        return inputs, records

    def _forget_when_idle(self) -> None:
        """Epochs went to Spark for as long as a worker keeps an idle job's operators: free the driver's
        copy of the state, which it would restore again if small epochs come back."""
        if self.run_ids and time.monotonic() - self.last_run > instances.IDLE_INSTANCE_SECONDS:
            self.close()

    def close(self) -> None:
        """Free the operator instances the driver cached for this job's runs."""
        for run_id in self.run_ids:
            instances.drop_run(run_id)
        self.run_ids.clear()


def exchange(stage, outputs: dict[int, list[dict]]) -> dict[int, list[pa.RecordBatch]]:
    """Subtask → its input, as ``repartitionById`` on the subtask column delivers it: every
    upstream row sent through an exit this stage reads, broadcast-side inputs first."""
    inputs = sorted(stage.inputs, key=lambda edge: edge not in stage.broadcast_inputs)
    rows = defaultdict(list)
    for up, exit_id in inputs:
        for row in outputs[up]:
            if row["_ks_exit"] == exit_id:
                rows[row["_ks_sub"]].append(row)
    return {sub: [pa.RecordBatch.from_pylist(rows[sub], schema=OUTPUT_SCHEMA)] if rows[sub] else []
            for sub in range(stage.plan.parallelism)}
