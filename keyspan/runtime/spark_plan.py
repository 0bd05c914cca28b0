"""The job's Spark side: one streaming DataFrame for all sources, and per epoch the DataFrames of its
stages — one ``mapInArrow`` per stage, ``repartitionById`` per exchange — collected so that only
control rows (and driver-sink records) come back to the driver. A stage's function is built once per
plan; the epoch's context reaches its tasks as a Spark local property of the epoch's jobs. A keyspan
source's stage runs one task per input partition the driver planned, and each task reads its
partition itself: the streaming DataFrame only advances those sources' offsets."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import reduce

import pyarrow as pa

from keyspan.checkpoint.coordinator import InconsistentEpoch
from keyspan.connectors.sources import TICK, source_dataframe
from keyspan.io import serde
from keyspan.runtime.planner import ExitKind, InputFormat, PhysicalPlan
from keyspan.runtime.protocol import (
    CONTROL_EXIT,
    DRIVER_EXIT,
    EPOCH_CONTEXT_PROPERTY,
    OUTPUT_SCHEMA,
    EpochContext,
    encode_context,
)
from keyspan.runtime.driver_epoch import DriverEpochs, exchange, reads_in_driver, runs_in_driver
from keyspan.runtime.worker.task import make_stage_function, no_rows

# Names a pool of Python workers in the environment of a stage's Python function: Spark keeps one pool
# of workers per function environment (``SparkEnv.PythonWorkersKey``; ``SparkStages._worker_pools``).
WORKER_POOL_ENV = "KEYSPAN_WORKER_POOL"
_UDF_ENVIRONMENT = threading.Lock()  # a function takes SparkContext.environment as it is when it is created


@dataclass
class EpochRows:
    control: list[bytes]  # pickled TaskReports of the terminal tasks
    driver: list[tuple[int, bytes]]  # (subtask, pickled driver-sink records)
    in_driver: bool = False  # the epoch ran in the driver process, not as Spark jobs (``DriverEpochs``)
    read_in_driver: bool = False  # the driver read the epoch's input and ran its source stages


class SparkStages:
    def __init__(self, plan: PhysicalPlan, spark, max_records_per_epoch: int | None, batch: bool = False,
                 driver_max_records: int = 0, worker_per_subtask: bool = True, driver_read_max_records: int = 0):
        self.plan = plan
        self.worker_per_subtask = worker_per_subtask  # see ``_worker_pools``
        self._executor_cores: int | None = None
        self.driver_max_records = driver_max_records  # an epoch of at most this many records runs in the driver
        self.driver_read_max_records = driver_read_max_records  # ... and its source stages alone, up to this many
        self._in_driver: DriverEpochs | None = None
        self.spark = spark
        self.max_records_per_epoch = max_records_per_epoch
        self.batch = batch  # BATCH execution mode: no per-epoch limit, the whole input in one epoch
        self.stage_code = {s.plan.stage_id: plan.digest(s.plan.stage_id) for s in plan.stages}
        self.readers: dict[int, object] = {}  # source index → its SourceReader (keyspan sources)
        self._initial: dict[int, dict | None] = {}  # source index → the offset its stream starts from
        self._read_parallelism: dict[int, int] = {}  # source index → most partitions of its epoch (fixed per stream)
        self._read_frames: dict[int, object] = {}  # n → a DataFrame of n partitions, one row each: n source tasks
        self.source_uids = {i: self._stage_of(t).plan.ops[0].uid for i, t in enumerate(plan.sources)}
        self._columns: dict[int, list[str]] = {}  # source transformation id → its DataFrame's columns
        self._index: dict[int, int] | None = None  # source transformation id → _ks_src tag (several sources)
        self._routing: dict[int, tuple] = {}  # stage id → its JVM routing columns, heartbeat rows, subtask column
        self._last_epoch_on_spark: int | None = None
        self._functions: dict[tuple, object] = {}  # (stage id, subtask or None) → its mapInArrow UDF column
        from pyspark.sql.pandas.types import from_arrow_schema

        self.output_type = from_arrow_schema(OUTPUT_SCHEMA)  # a DDL string would cost a JVM parse per stage and epoch
        self._output_json = self.output_type.json()

    def replan(self, plan: PhysicalPlan) -> None:
        """Run the next epochs with ``plan`` (a live rescale); the source stream stays as it is."""
        self.plan = plan
        self.stage_code = {s.plan.stage_id: plan.digest(s.plan.stage_id) for s in plan.stages}
        self._routing = {}
        self._functions = {}
        self.close()

    def touch_workers(self, group: str, description: str) -> None:
        """One Python task per Spark core, and one in each pool of the subtasks' own workers
        (``_worker_pools``), each reading one row and returning none. Spark stops all idle
        Python workers of an executor once none of them ran a task for a minute (``PythonWorkerFactory``),
        and with them the operators and state this job keeps in them between epochs. The Spark job runs
        in job group ``group`` (``cancelJobGroup`` ends it)."""
        sc = self.spark.sparkContext
        sc.setJobGroup(group, description, interruptOnCancel=True)  # this thread's jobs only
        cores = sc.defaultParallelism
        rows = self.spark.range(cores, numPartitions=cores)
        _map_in_arrow(rows, _udf_column(self.spark, no_rows, "id long", rows.columns)).collect()
        pools = max((self._worker_pools(s) for s in self.plan.stages), default=0)
        if pools:
            rows = self.spark.range(pools, numPartitions=pools)
            _collect_partitions(sc, _union([
                _map_in_arrow(rows, _udf_column(self.spark, no_rows, "id long", rows.columns, pool=k))
                for k in range(pools)]), _partitions_in_pools(pools, pools))

    def close(self) -> None:
        """The run ended (or was replanned): the driver forgets the operators it ran."""
        if self._in_driver is not None:
            self._in_driver.close()
            self._in_driver = None

    def _stage_of(self, source):
        return next(s for s in self.plan.stages if s.source is source)

    # -- the sources --------------------------------------------------------------------------------
    def source_stream(self, storage, parallelism: int, offsets: dict | None, wake_file: str | None,
                      replay: dict | None = None):
        """One streaming DataFrame for the whole job: several sources are unioned and told apart by
        a ``_ks_src`` column, so every source advances in the same micro-batch (one consistent cut).
        ``replay``: source index → the end offsets of epochs to replay exactly as they ran."""
        frames = []
        for i, t in enumerate(self.plan.sources):
            if hasattr(t.spec, "reader"):
                reader = t.spec.reader(storage, self.source_uids[i], t.name)
                start = offsets.get(str(i)) if offsets else None
                limit = None if self.batch else (
                    t.spec.max_per_epoch or (self.max_records_per_epoch if reader.unit == "records" else None))
                df = source_dataframe(self.spark, reader, limit, start, wake_file, (replay or {}).get(str(i)))
                self.readers[i] = reader
                self._initial[i] = start or reader.initial_offset()  # as the stream's ``initialOffset``
                self._read_parallelism[i] = min(parallelism, self._stage_of(t).plan.parallelism)
            elif hasattr(t.spec, "dataframe"):
                df = t.spec.dataframe
            else:
                raise TypeError(f"source '{t.name}' is not a keyspan source or Spark DataFrame: {t.spec!r}")
            self._columns[t.id] = df.columns
            frames.append((t, df))
        if len(frames) == 1:
            return frames[0][1]
        from pyspark.sql import functions as F

        self._index = {t.id: i for i, (t, _) in enumerate(frames)}
        tagged = [df.withColumn("_ks_src", F.lit(i)) for i, (_, df) in enumerate(frames)]
        return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), tagged)

    def checkpointed(self, offsets: dict | None) -> None:
        """Tell each keyspan source the offsets its latest committed checkpoint holds."""
        for i, reader in self.readers.items():
            offset = (offsets or {}).get(str(i))
            if offset:
                reader.checkpointed({k: v for k, v in offset.items() if k != TICK})

    def input_partitions(self, start: dict | None, end: dict | None) -> dict[int, list]:
        """Source stage id → the input partitions of an epoch reading from offsets ``start`` (None: where
        the stream started) to ``end``, planned as Spark's data source plans them; its task i reads the
        i-th. An empty list: the stage runs no task this epoch."""
        reads = {}
        for i, t in enumerate(self.plan.sources):
            reader = self.readers.get(i)
            if reader is None:
                continue
            to = (end or {}).get(str(i))
            since = (start or {}).get(str(i)) or self._initial[i]
            reads[self._stage_of(t).plan.stage_id] = (
                [] if to is None else reader.partitions(since, to, self._read_parallelism[i]))
        return reads

    def _read_tasks(self, n: int, session):
        """``n`` tasks whose partition i holds the one row i (none for n = 0), kept across epochs. Made in
        ``session``, the query's own, so that its settings (``session.query_settings``, keyspan.runtime)
        reach the source stage and the stages after it, as they reach those reading the batch's DataFrame."""
        frame = self._read_frames.get(n)
        if frame is None:
            frame = self._read_frames[n] = session.range(0, n, 1, max(n, 1))
        return frame

    def _source_batch(self, batch_df, t):
        if self._index is None:
            return batch_df
        from pyspark.sql import functions as F

        return batch_df.filter(F.col("_ks_src") == self._index[t.id]).select(*self._columns[t.id])

    def _routed_by_key(self, stage, src, heartbeat: bool):
        """A JVM-routed stage's input: ``src`` with its key group column, repartitioned by subtask.
        Every subtask's task runs, with or without records, and learns its subtask from its first
        row's key group or else from Spark's partition id. ``heartbeat`` adds a row per subtask (key
        group -1 - subtask) where that is not enough: when Spark unions the stage's output with
        another's before an exchange (a union numbers partitions on), and when an epoch runs again
        after a run that lacked a subtask's report. Those rows are one more Spark task, which on a
        2-core machine waits for a core: about 5 % of a window job's time (docs/benchmarks.md). The
        subtask is the exchange's partitioning expression, not a column: rows cross the exchange
        and reach Python one field smaller. The columns and heartbeat rows are built once per plan
        and the steps go to the JVM as single calls: each PySpark step would convert its columns
        again, several round trips to the JVM each, and an epoch's fixed cost is what bounds latency."""
        from pyspark.sql import DataFrame

        cached = self._routing.get(stage.plan.stage_id)
        if cached is None:
            from pyspark.sql import functions as F

            p = stage.plan
            schema = stage.pushdown_source.spec.dataframe.schema
            kg = F.pmod(F.xxhash64(*[_jvm_key_column(schema, c) for c in p.key_fields]),
                        F.lit(p.max_parallelism)).cast("int")
            beats = self.spark.range(0, p.parallelism, 1, 1).select(  # one task, not one per core
                *[F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields],
                (-1 - F.col("id")).cast("int").alias("_ks_kg"))
            routed_kg = F.col("_ks_kg")
            subtask = F.when(routed_kg < 0, -1 - routed_kg).otherwise(  # exact: small integers
                F.floor(routed_kg * p.parallelism / p.max_parallelism)).cast("int")
            cached = self._routing[stage.plan.stage_id] = (src._jcols("*", kg.alias("_ks_kg")), beats._jdf,
                                                           subtask._jc)
        columns, heartbeat_rows, subtask = cached
        routed = src._jdf.select(columns)
        if heartbeat:
            routed = routed.unionByName(heartbeat_rows, False)
        return DataFrame(routed.repartitionById(stage.plan.parallelism, subtask), self.spark)

    def _rows_through(self, out, stage_id: int, exit_id: int):
        """The rows of stage ``stage_id``'s output that leave through ``exit_id``. When that is its only
        exit, every row does (its control rows included), so no filter: each DataFrame step costs the
        driver 10–20 ms of Spark analysis in every epoch."""
        from pyspark.sql import functions as F

        exits = next(s.plan.exits for s in self.plan.stages if s.plan.stage_id == stage_id)
        if len(exits) == 1 and exits[0].kind != ExitKind.DRIVER and exits[0].exit_id == exit_id:
            return out
        return out.filter(F.col("_ks_exit") == exit_id)

    def _stage_function(self, df, stage_id: int, pool: int | None = None):
        """``df.mapInArrow(stage function)`` with the function created on the JVM once per plan (and
        pool, ``_worker_pools``). PySpark's own ``mapInArrow`` wraps its function in a new
        UDF at every call and passes it each column as a resolved ``Column``, one py4j round trip each:
        ~15–20 ms per stage and epoch. This builds the same plan node from a UDF column kept across epochs,
        whose arguments are the stage input's columns by name, resolved again in each epoch's plan (a
        stage's input columns are fixed by the plan; the optimizer keeps exactly the columns a UDF names)."""
        column = self._functions.get((stage_id, pool))
        if column is None:
            function = make_stage_function(*self.stage_code[stage_id], self._reader_code(stage_id),
                                           in_union=pool is not None)
            column = self._functions[(stage_id, pool)] = _udf_column(self.spark, function, self.output_type,
                                                                     df.columns, pool)
        return _map_in_arrow(df, column)

    def _worker_pools(self, stage) -> int:
        """Spark hands a task to whichever Python worker of its pool is idle, so the worker that gets a
        subtask's next task has often cached that subtask's state an epoch behind, and first applies
        the epoch another worker ran (a quarter of the window benchmark's Python time; for RocksDB,
        every change written into two copies). A terminal stage fed by an exchange therefore runs in
        pools of workers of its own: one function per pool, each naming its pool in its environment,
        over the one exchange; subtask i runs in pool i mod pools. The epoch's job is the union of
        those functions' outputs, of which it computes only subtask i's partition of i's pool's
        function (``_collect_partitions``). The exchange is computed once (Spark reuses an exchange
        that appears twice in a plan). With a pool per subtask (at most as many subtasks as an
        executor's cores), each subtask keeps its worker; more subtasks share the pools, which bounds
        an executor's Python workers by about its cores squared. A stage with a downstream exchange
        is not terminal and keeps one function (0 pools): its output feeds that exchange, which
        would read every function's partitions."""
        p = stage.plan
        if not (self.worker_per_subtask and not p.has_downstream and stage.source is None
                and p.input_format in (InputFormat.EXCHANGE, InputFormat.TYPED_KEYED)):
            return 0
        if self._executor_cores is None:
            sc = self.spark.sparkContext
            cores = sc.getConf().get("spark.executor.cores")  # unset: local mode, or an executor takes every core
            self._executor_cores = int(cores) if cores else sc.defaultParallelism
        return min(p.parallelism, self._executor_cores)

    def _reader_code(self, stage_id: int) -> bytes | None:
        """The pickled ``SourceReader`` a keyspan source's stage reads with (None for other stages)."""
        stage = next(s for s in self.plan.stages if s.plan.stage_id == stage_id)
        index = next((i for i, t in enumerate(self.plan.sources) if t is stage.source), None)
        if index not in self.readers:
            return None
        serde.ship_user_modules_within(self.readers[index])
        return serde.dumps_function(self.readers[index])

    def _driver_epochs(self) -> DriverEpochs | None:
        if self._in_driver is None:
            whole = self.driver_max_records if runs_in_driver(self.plan, self.readers) else 0
            sources = self.driver_read_max_records if reads_in_driver(self.plan, self.readers) else 0
            if whole or sources:
                self._in_driver = DriverEpochs(self.plan, self.stage_code, {
                    s.plan.stage_id: self._reader_code(s.plan.stage_id)
                    for s in self.plan.stages if s.source is not None}, whole, sources)
        return self._in_driver

    # -- one epoch ------------------------------------------------------------------------------------
    def run(self, batch_df, ctx: EpochContext) -> EpochRows:
        context = encode_context(ctx)
        in_driver = self._driver_epochs()
        ran = in_driver.run(ctx, context) if in_driver is not None else None
        if ran is None:
            return _epoch_rows(self._run_on_spark(batch_df, ctx, context))
        outputs, whole = ran
        rows = [row for stage_rows in outputs.values() for row in stage_rows]
        if whole:
            return _epoch_rows(rows, in_driver=True)
        rows.extend(self._run_on_spark(batch_df, ctx, context, outputs))
        return _epoch_rows(rows, read_in_driver=True)

    def _driver_input(self, stage, outputs: dict[int, list[dict]], session):
        """A DataFrame whose partition i holds subtask i's input, as the source stages the driver ran
        sent it, so the stage reads it with no exchange: Spark makes one partition of each Arrow batch
        once ``spark.sql.execution.arrow.localRelationThreshold`` is 0 (else it spreads small data's rows
        over the cores). Set in ``session``, the query's own, which only keyspan's epochs use."""
        from pyspark.sql import DataFrame
        from pyspark.sql.pandas.serializers import ArrowStreamSerializer

        session.conf.set("spark.sql.execution.arrow.localRelationThreshold", "0")  # a wrapper per batch: set each time
        batches = [pa.concat_batches(b) if len(b) > 1 else b[0] if b else _NO_ROWS
                   for b in exchange(stage, outputs).values()]
        sc = session.sparkContext
        jvm = sc._jvm
        served = sc._serialize_to_jvm(batches, ArrowStreamSerializer(), jvm.PythonSQLUtils.readArrowStreamFromFile,
                                      jvm.ArrowIteratorServer)
        return DataFrame(jvm.PythonSQLUtils.toDataFrame(served, self._output_json, session._jsparkSession), session)

    def _run_on_spark(self, batch_df, ctx: EpochContext, context: str, driver_outputs: dict | None = None) -> list:
        """The epoch as Spark jobs: the rows of its terminal tasks. ``driver_outputs``: stage id → the
        rows of the source stages the driver ran (``DriverEpochs``); the stages they feed get them as
        their input."""
        from pyspark.sql import functions as F

        plan = self.plan
        rerun = ctx.epoch == self._last_epoch_on_spark  # the coordinator runs it again (``_routed_by_key``)
        self._last_epoch_on_spark = ctx.epoch
        outputs = {}
        consumers = {s.plan.stage_id: 0 for s in plan.stages}
        unioned = set()  # stages whose output is unioned with another's: a partition id is not the subtask there
        for s in plan.stages:
            for up, _ in s.inputs:
                consumers[up] += 1
                if len(s.inputs) > 1 or s.broadcast_inputs:
                    unioned.add(up)
            if not s.plan.has_downstream or any(e.kind == ExitKind.DRIVER for e in s.plan.exits):
                consumers[s.plan.stage_id] += 1
        persisted = []
        in_pools = {}  # stage id → the partitions its epoch's job computes: a stage run in pools of its own
        for s in plan.stages:
            p = s.plan
            if p.input_format == InputFormat.PUSHED_DOWN or (driver_outputs and p.stage_id in driver_outputs):
                continue
            if driver_outputs and any(up in driver_outputs for up, _ in s.inputs):
                in_df = self._driver_input(s, driver_outputs, batch_df.sparkSession)
            elif s.source is not None and p.stage_id in ctx.reads:
                in_df = self._read_tasks(len(ctx.reads[p.stage_id]), batch_df.sparkSession)
            elif s.source is not None:
                in_df = self._source_batch(batch_df, s.source)
            elif p.input_format == InputFormat.TYPED_KEYED:
                in_df = self._routed_by_key(s, self._source_batch(batch_df, s.pushdown_source),
                                            heartbeat=rerun or p.stage_id in unioned)
            else:
                parts = [self._rows_through(outputs[up], up, exit_id) for up, exit_id in s.inputs]
                if s.broadcast_inputs:
                    parts = _broadcast_first(parts, s)
                in_df = _union(parts).repartitionById(p.parallelism, "_ks_sub")
                if s.broadcast_inputs:
                    in_df = in_df.sortWithinPartitions("_ks_first", "_ks_seq").drop("_ks_first", "_ks_seq")
            pools = self._worker_pools(s)
            if pools:
                out = _union([self._stage_function(in_df, p.stage_id, k) for k in range(pools)])
                in_pools[p.stage_id] = _partitions_in_pools(p.parallelism, pools)
            else:
                out = self._stage_function(in_df, p.stage_id)
            if consumers[p.stage_id] > 1:
                out = out.persist()
                persisted.append(out)
            outputs[p.stage_id] = out
        finals = []
        for s in plan.stages:
            if s.plan.stage_id not in outputs:
                continue
            out = outputs[s.plan.stage_id]
            if not s.plan.has_downstream:
                finals.append((out, in_pools.get(s.plan.stage_id)))
            elif any(e.kind == ExitKind.DRIVER for e in s.plan.exits):
                finals.append((out.filter(F.col("_ks_exit") == DRIVER_EXIT), None))
        try:
            return _collect_all(self.spark.sparkContext, finals, context)  # each has OUTPUT_SCHEMA's columns
        finally:
            for df in persisted:
                df.unpersist()


_NO_ROWS = pa.RecordBatch.from_pylist([], schema=OUTPUT_SCHEMA)


def _epoch_rows(result, in_driver: bool = False, read_in_driver: bool = False) -> EpochRows:
    """The control rows of terminal tasks and the driver-sink rows among ``result`` (rows sent on
    through an exchange carry that exchange's id)."""
    rows = EpochRows([], [], in_driver, read_in_driver)
    for row in result:
        if row["_ks_exit"] == CONTROL_EXIT:
            rows.control.append(bytes(row["_ks_ctl"]))
        elif row["_ks_exit"] == DRIVER_EXIT:
            rows.driver.append((row["_ks_sub"], bytes(row["payload"])))
    return rows


def _collect_all(sc, frames, context: str) -> list:
    """Each terminal stage is its own Spark job (run concurrently), never a union of stage outputs:
    under a union, a task's partition id would no longer be its subtask index. ``frames``: (DataFrame,
    the partitions to compute, None for all). Every job carries the epoch's context as a local property
    of the thread that starts it (a Python thread has a JVM thread of its own, which inherits nothing)."""
    def collect(frame_partitions):
        frame, partitions = frame_partitions
        sc.setLocalProperty(EPOCH_CONTEXT_PROPERTY, context)
        try:
            return _collect_partitions(sc, frame, partitions)
        finally:
            sc.setLocalProperty(EPOCH_CONTEXT_PROPERTY, None)

    if len(frames) == 1:
        return collect(frames[0])
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(frames)) as pool:
        return [row for rows in pool.map(collect, frames) for row in rows]


def _collect_partitions(sc, frame, partitions: list[int] | None) -> list:
    """The rows of ``partitions`` of ``frame`` (None: all of them), as one Spark job: PySpark's own
    ``DataFrame.collect`` path, or for some partitions ``DataFrame.rdd`` rows (pickled on the JVM)
    through ``SparkContext.runJob``'s path, without a Python step between."""
    if partitions is None:
        return _served_rows(frame._jdf.collectToPython())
    return _served_rows(sc._jvm.PythonRDD.runJob(sc._jsc.sc(), frame._jdf.javaToPython(), partitions))


def _served_rows(served) -> list:
    """The rows a finished Spark job serves the driver on a one-time local socket (PySpark's own
    collect path; ``runJob`` with partitions computes only those). Only the first connection is served:
    if something else reached the port first (a process of an earlier driver on this host still calling
    the port it knew), Spark closes it, the rows are lost and the epoch runs again, as when two attempts
    of a subtask report."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.serializers import BatchedSerializer, CPickleSerializer
    from pyspark.util import _create_local_socket

    try:
        sockfile, sock = _create_local_socket(served)
    except (PySparkRuntimeError, OSError) as exc:
        raise InconsistentEpoch(f"Spark's results of the epoch could not be read ({exc})") from exc
    try:
        return list(BatchedSerializer(CPickleSerializer()).load_stream(sockfile))
    except OSError as exc:
        raise InconsistentEpoch(f"Spark's results of the epoch were cut off ({exc})") from exc
    finally:
        sockfile.close()
        sock.close()


def _partitions_in_pools(subtasks: int, pools: int) -> list[int]:
    """In the union of one function per pool over ``subtasks`` partitions: partition i of the function
    of pool i mod pools, for each subtask i."""
    return [(i % pools) * subtasks + i for i in range(subtasks)]


def _union(frames):
    return reduce(lambda a, b: a.union(b), frames)


def _udf_column(spark, function, return_type, columns: list[str], pool: int | None = None):
    """``function`` as an Arrow map-iterator UDF over ``columns`` (by name), a column on the JVM; its
    environment names ``pool`` when given (WORKER_POOL_ENV)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.functions import pandas_udf
    from pyspark.util import PythonEvalType

    udf = pandas_udf(function, returnType=return_type, functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
    names = [F.col("`" + c.replace("`", "``") + "`") for c in columns]
    environment = spark.sparkContext.environment
    with _UDF_ENVIRONMENT:
        if pool is not None:
            environment[WORKER_POOL_ENV] = str(pool)
        try:
            return udf(*names)._jc
        finally:
            environment.pop(WORKER_POOL_ENV, None)


def _map_in_arrow(df, column):
    """The plan node PySpark 4.3's ``DataFrame.mapInArrow`` builds, from a UDF column made beforehand."""
    from pyspark.sql import DataFrame

    return DataFrame(df._jdf.mapInArrow(column, False, None), df.sparkSession)


def _broadcast_first(parts, stage):
    """Every subtask of a broadcast-process stage reads all broadcast-side rows of the epoch before the
    other rows; rows of one upstream task keep their order (a sequence number taken before the shuffle)."""
    from pyspark.sql import functions as F

    return [df.select("*", F.lit(0 if edge in stage.broadcast_inputs else 1).alias("_ks_first"),
                      F.monotonically_increasing_id().alias("_ks_seq"))
            for df, edge in zip(parts, stage.inputs)]


def _jvm_key_column(schema, name):
    """Cast so Spark's xxhash64 sees the same bytes stable_hash hashes for the Python value."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    dtype = schema[name].dataType
    if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType)):
        return F.col(name).cast("long")
    if isinstance(dtype, T.FloatType):
        return F.col(name).cast("double")
    return F.col(name)
