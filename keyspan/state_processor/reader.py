"""``SavepointReader``: a savepoint's (or retained checkpoint's) state as Spark DataFrames — Flink's
``SavepointReader`` (``readKeyedState``, ``readListState``, ``readUnionState``, ``readBroadcastState``)."""

from __future__ import annotations

import pyarrow as pa

from keyspan.io import serde
from keyspan.io.storage import Storage
from keyspan.state_processor import datasource, plans
from keyspan.state_processor import tasks as T
from keyspan.state_processor.functions import KeyedStateReaderFunction, uid_of


class SavepointReader:
    def __init__(self, spark, metadata: dict, storage_uri: str, verify: bool):
        self.spark = spark
        self.metadata = metadata
        self.storage_uri = storage_uri
        self._verify = verify
        self.bytes_read = spark.sparkContext.accumulator({}, _PerTask())
        datasource.register(spark)

    @staticmethod
    def read(spark, path: str, verify: bool = True) -> "SavepointReader":
        """A savepoint; its files' checksums are checked first unless ``verify=False``."""
        metadata = plans.load(path, verify=verify)
        return SavepointReader(spark, metadata, metadata["uri"], verify)

    @staticmethod
    def read_checkpoint(spark, metadata_url: str, checkpoint_dir: str, job_id: str,
                        epoch: int | None = None) -> "SavepointReader":
        """A retained checkpoint of a job (the latest committed one unless ``epoch``), where it lies."""
        from keyspan.checkpoint.metadata import MetadataStore

        store = MetadataStore(metadata_url)
        checkpoint = store.latest_checkpoint(job_id) if epoch is None else store.get_checkpoint(job_id, epoch)
        if checkpoint is None:
            raise LookupError(f"job '{job_id}' has no committed checkpoint{'' if epoch is None else f' {epoch}'}")
        storage = Storage(checkpoint_dir).child(job_id)
        metadata = {**checkpoint, "state": checkpoint["manifest"], "uri": storage.uri}
        return SavepointReader(spark, metadata, storage.uri, False)

    # -- what is in it -----------------------------------------------------------------------------------
    @property
    def max_parallelism(self) -> int:
        return self.metadata["max_parallelism"]

    def operators(self) -> dict[str, list[dict]]:
        """Operator uid → its keyed states as recorded (name, kind, declared type, TTL)."""
        return {o["uid"]: o.get("states", []) for o in self.metadata["operators"]}

    # -- keyed state ---------------------------------------------------------------------------------------
    def read_keyed_state(self, operator, function: KeyedStateReaderFunction | None = None, output_schema=None,
                         *, state: str | None = None, key_type=None, value_type=None, map_key_type=None,
                         tasks: int | None = None):
        """With ``function``: the rows it yields per key, in ``output_schema`` (a StructType or DDL string).
        With ``state``: that state's rows — one per key (value, reducing, aggregating), per element (list),
        per entry (map) — with columns ``key_group``, ``key`` and ``value`` (and ``index`` / ``map_key``).
        Columns without a declared type hold the Python objects pickled: ``keyspan.state_processor.decode``."""
        uid = uid_of(operator)
        if function is None:
            return self._keyed(plans.KeyedPlan(self.metadata, self.storage_uri, uid, state, key_type=key_type,
                                               value_type=value_type, map_key_type=map_key_type, tasks=tasks))
        if output_schema is None:
            raise ValueError("read_keyed_state with a reader function needs output_schema (StructType or DDL)")
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import StructType, _parse_datatype_string

        serde.ship_user_modules([function])
        shipped = serde.dumps_function(function)  # user code by value: workers need not import it
        spark_schema = output_schema if isinstance(output_schema, StructType) else _parse_datatype_string(output_schema)
        schema = to_arrow_schema(spark_schema)
        n = tasks or plans.read_tasks(self.metadata, uid)
        scan = T.Scan(self.storage_uri, uid, plans.keyed_handles(self.metadata, uid), self.max_parallelism, n)
        accumulator = self.bytes_read
        classes = serde.main_module_classes()  # the function's and the state's, adopted once per Spark task

        def run(batches):
            serde.adopt_main_classes(classes)
            for batch in batches:
                for task in batch.column(0).to_pylist():
                    stats = T.statefile.ReadStats()
                    yield from T.read_with_function(scan, task, serde.loads(shipped), schema, stats)
                    accumulator.add({task: stats.bytes_read})

        return self._tasks(n).mapInArrow(run, spark_schema)

    def read_timers(self, operator, key_type=None, tasks: int | None = None):
        """Every pending timer of a keyed operator: ``key_group``, ``key``, ``domain`` (event_time |
        processing_time), ``timestamp``."""
        return self._keyed(plans.KeyedPlan(self.metadata, self.storage_uri, uid_of(operator), None, kind=T.TIMERS,
                                           key_type=key_type, tasks=tasks))

    def _keyed(self, plan: plans.KeyedPlan):
        """The plan's rows, one Spark task per key-group range."""
        accumulator = self.bytes_read
        classes = serde.main_module_classes()  # a state's objects may be of classes this program defines

        def run(batches):
            serde.adopt_main_classes(classes)
            for batch in batches:
                for task in batch.column(0).to_pylist():
                    stats = T.statefile.ReadStats()
                    yield from plan.read(task, stats)
                    accumulator.add({task: stats.bytes_read})

        return self._tasks(plan.tasks).mapInArrow(run, plans.spark_schema(plan.schema))

    def _tasks(self, n: int):
        """One row per read task, one task per Spark partition."""
        return self.spark.range(0, n, 1, n).selectExpr("cast(id as int) as task")

    # -- operator state ------------------------------------------------------------------------------------
    def read_list_state(self, operator, name: str, type_info=None):
        """Operator list state: ``subtask``, ``index``, ``value`` (subtask: the subtask that held it)."""
        return self._operator(operator, name, "list", value_type=type_info)

    def read_union_state(self, operator, name: str, type_info=None):
        return self._operator(operator, name, "union", value_type=type_info)

    def read_broadcast_state(self, operator, name: str, key_type_info=None, value_type_info=None):
        """Broadcast state (every subtask holds the same): ``key``, ``value``."""
        return self._operator(operator, name, "broadcast", key_type=key_type_info, value_type=value_type_info)

    def _operator(self, operator, name, kind, **types):
        plan = plans.OperatorPlan(self.metadata, self.storage_uri, uid_of(operator), name, kind, **types)
        rows = pa.Table.from_batches(list(plan.read(0)), schema=plan.schema)
        return self.spark.createDataFrame(rows.to_pylist(), plans.spark_schema(plan.schema))


class _PerTask:
    """Accumulates {read task: bytes read} from the tasks, for benchmarks and tests."""

    def zero(self, value):
        return {}

    def addInPlace(self, a, b):
        for k, v in b.items():
            a[k] = a.get(k, 0) + v
        return a
