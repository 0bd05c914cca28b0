"""``spark.read.format("keyspan-state")``: a savepoint's state as a Spark data source, for Spark SQL.

Options: ``path`` (savepoint directory), ``uid`` (operator), ``state`` (state name), and optionally
``kind`` (``timers``; ``list``/``union``/``broadcast`` for operator state), ``key_type``/``value_type``/
``map_key_type`` (Spark type strings such as ``bigint``), ``tasks`` (read tasks) and ``verify``
(``false`` skips the checksum check of the savepoint's files). Each input partition is one
key-group range: a task reads only those key groups' bytes of each file."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from keyspan.state_processor import plans

NAME = "keyspan-state"


def _plan(options: dict):
    path = options.get("path")
    uid = options.get("uid")
    if not path or not uid:
        raise ValueError(f'format("{NAME}") needs .option("path", SAVEPOINT) and .option("uid", OPERATOR_UID)')
    metadata = plans.load(path, verify=str(options.get("verify", "true")).lower() != "false")
    tasks = int(options["tasks"]) if options.get("tasks") else None
    kind = options.get("kind")
    types = {k: options.get(k) for k in ("key_type", "value_type", "map_key_type") if options.get(k)}
    if kind in ("list", "union", "broadcast"):
        return plans.plan_for(metadata, metadata["uri"], uid, options.get("state"), kind, **types)
    return plans.KeyedPlan(metadata, metadata["uri"], uid, options.get("state"), kind=kind, tasks=tasks, **types)


class KeyspanStateDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        return plans.spark_schema(_plan(self.options).schema)

    def reader(self, schema):
        return _Reader(_plan(self.options))


class _Reader(DataSourceReader):
    def __init__(self, plan):
        self.plan = plan

    def partitions(self):
        return [InputPartition(i) for i in range(self.plan.tasks)]

    def read(self, partition):
        yield from self.plan.read(partition.value)


def register(spark) -> None:
    """Make ``format("keyspan-state")`` known to this SparkSession (done by ``SavepointReader.read``)."""
    spark.dataSource.register(KeyspanStateDataSource)
