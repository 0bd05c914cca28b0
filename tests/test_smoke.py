import pytest

from keyspan.datastream import KeyedProcessFunction, MapFunction
from keyspan.datastream.connectors.file_system import DiscardingSink
from keyspan.datastream.state import ValueStateDescriptor
from keyspan.runtime.session import (
    ARROW_MAX_BYTES,
    ARROW_NO_BYTE_CAP,
    CHECKPOINT_FILE_MANAGER,
    FILE_SYSTEM_MANAGER,
)


class RunningSum(KeyedProcessFunction):
    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_element(self, value, ctx):
        total = (self.total.value() or 0) + value[1]
        self.total.update(total)
        yield ctx.get_current_key(), total


def test_running_sum_over_several_epochs(env):
    env.set_max_records_per_epoch(5)
    data = [(f"k{i % 4}", i) for i in range(23)]
    result = env.from_collection(data).key_by(lambda r: r[0]).process(RunningSum()).execute_and_collect(limit=1000)
    expected = {}
    want = []
    for k, v in data:
        expected[k] = expected.get(k, 0) + v
        want.append((k, expected[k]))
    assert sorted(result) == sorted(want)


def _run_small_job(env, name: str):
    """A three-record keyed job in epochs of two records, run to its end; returns its runner."""
    env.set_max_records_per_epoch(2)
    env.from_collection([("a", 1), ("b", 2), ("a", 3)]).key_by(lambda r: r[0]).process(RunningSum()) \
        .add_sink(DiscardingSink())
    client = env.execute_async(name)
    client.get_job_execution_result().result(timeout=180)
    return client._runner


def _query_session(runner):
    """The Spark session keyspan's query ran its last batch in (the settings it ran with)."""
    return runner.query._jsq.streamingQuery().lastExecution().sparkSession()


@pytest.mark.parametrize("user_value", [None, "org.apache.spark.sql.execution.streaming.checkpointing."
                                              "FileContextBasedCheckpointFileManager"], ids=["unset", "set-by-the-user"])
def test_spark_logs_on_local_disk_are_written_through_hadoop_filesystem(env, workdir, spark, user_value):
    """keyspan's own query writes Spark's per-batch logs on local disk through Hadoop's FileSystem (its
    FileContext runs a readlink process for every rename), leaves the session's setting as it found
    it, and keeps a checkpoint file manager the user chose."""
    if user_value is not None:
        spark.conf.set(CHECKPOINT_FILE_MANAGER, user_value)
    try:
        query_session = _query_session(_run_small_job(env, "spark-logs"))
        assert query_session.conf().get(CHECKPOINT_FILE_MANAGER) == (user_value or FILE_SYSTEM_MANAGER)
        assert spark.conf.get(CHECKPOINT_FILE_MANAGER, None) == user_value
    finally:
        spark.conf.unset(CHECKPOINT_FILE_MANAGER)
    logs = [p for p in (workdir / ".keyspan" / "spark").rglob("*") if p.parent.name in ("offsets", "commits")]
    assert len([p for p in logs if not p.name.startswith(".")]) >= 4, logs  # two batches, both logs


@pytest.mark.parametrize("user_value", [None, "32MB"], ids=["unset", "set-by-the-user"])
def test_arrow_batches_are_cut_by_record_count_in_keyspan_query_only(env, spark, user_value):
    """Spark 4's byte limit per Arrow batch measures the batch after every row: keyspan's own query runs
    without it (the stages reading its Spark stream and those reading a keyspan source alike), the
    session keeps what it had, and a limit the user set wins."""
    if user_value is not None:
        spark.conf.set(ARROW_MAX_BYTES, user_value)
    try:
        env.set_small_epochs_read_in_driver(0)  # its source stage runs on Spark
        runner = _run_small_job(env, "arrow-batches")
        query_session = _query_session(runner)
        read_tasks = list(runner.stages._read_frames.values())
        assert read_tasks  # the keyspan source's stage ran on Spark, not in the driver
        expected = user_value or ARROW_NO_BYTE_CAP
        assert query_session.conf().get(ARROW_MAX_BYTES) == expected
        assert all(frame.sparkSession.conf.get(ARROW_MAX_BYTES) == expected for frame in read_tasks)
        assert spark.conf.get(ARROW_MAX_BYTES, None) == user_value
    finally:
        spark.conf.unset(ARROW_MAX_BYTES)


def test_a_spark_source_and_a_keyspan_source_in_one_job(env, spark, workdir):
    """A keyspan source's stage reads its input partitions itself while a from_spark source in the same
    job comes through Spark's stream: each record arrives once, over several epochs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = workdir / "parquet"
    folder.mkdir()
    pq.write_table(pa.table({"key": ["a", "b", "a"], "value": [100, 200, 300]}), str(folder / "part-0.parquet"))
    env.set_max_records_per_epoch(2)
    from_spark = env.from_spark(spark.readStream.schema("key string, value long").parquet(str(folder)),
                                bounded=True).map(lambda r: (r.key, r.value))
    data = [(f"{'ab'[i % 2]}", i) for i in range(7)]
    result = env.from_collection(data).union(from_spark).key_by(lambda r: r[0]).process(RunningSum()) \
        .execute_and_collect(limit=1000)
    finals = {}
    for key, total in result:
        finals[key] = max(finals.get(key, 0), total)
    assert finals == {"a": 0 + 2 + 4 + 6 + 100 + 300, "b": 1 + 3 + 5 + 200}
    assert len(result) == len(data) + 3


class _WithSubtask(MapFunction):
    def open(self, runtime_context):
        self.subtask = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return value, self.subtask


def test_each_source_task_knows_its_subtask_when_sources_are_unioned(env):
    """Spark numbers the tasks of unioned stages one after the other; every source's tasks are still
    its subtasks 0..p-1, each reading its own part of the epoch's input."""
    first = env.from_collection(list(range(10))).map(_WithSubtask())
    second = env.from_collection(list(range(100, 110))).map(_WithSubtask())
    out = first.union(second).execute_and_collect(limit=100)
    assert sorted(v for v, _ in out) == list(range(10)) + list(range(100, 110))
    for values in (range(10), range(100, 110)):
        assert {s for v, s in out if v in values} == {0, 1}


def test_source_tasks_leave_their_python_workers_reusable(env):
    """A Python worker is reused by later tasks only if its task read all of its input; a source task
    that left its one input row unread would cost a fresh worker (and its imports) every epoch."""
    import os

    env.set_max_records_per_epoch(4)
    out = env.from_collection(list(range(40))).map(lambda v: (v, os.getpid())).execute_and_collect(limit=100)
    assert sorted(v for v, _ in out) == list(range(40))  # 10 epochs, 2 source tasks each
    assert len({pid for _, pid in out}) <= 4, sorted({pid for _, pid in out})


def test_python_workers_import_pyspark_from_its_installed_package(spark):
    """Spark puts pyspark.zip (and the py4j zip, the spark-core jar) first on its workers' path; code
    from a zip is compiled anew by every daemon and re-read by every new worker. In local mode keyspan's
    daemon takes those copies off the path, so PySpark comes from the installed, compiled package."""
    import os

    import pyspark

    def worker_imports(_):
        import sys
        import zipimport

        import pyspark

        zips = [p for p, finder in sys.path_importer_cache.items() if isinstance(finder, zipimport.zipimporter)]
        yield pyspark.__file__, [p for p in sys.path if p.endswith((".zip", ".jar"))], zips

    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == "keyspan.runtime.worker.daemon"
    installed = os.path.dirname(pyspark.__file__)
    for module_file, archives, zip_finders in spark.sparkContext.parallelize(range(2), 2) \
            .mapPartitions(worker_imports).collect():
        assert module_file == pyspark.__file__, module_file
        assert not [a for a in archives if a.startswith(installed)], archives
        assert not [z for z in zip_finders if z.startswith(installed)], zip_finders


def test_only_archives_that_copy_an_installed_pyspark_leave_the_workers_path(tmp_path):
    from keyspan.runtime.worker.daemon import redundant_archives

    def layout(root, with_py4j=True):
        site = root / "site-packages"
        (site / "pyspark" / "python" / "lib").mkdir(parents=True)
        (site / "pyspark" / "jars").mkdir()
        (site / "pyspark" / "__init__.py").write_text("")
        if with_py4j:
            (site / "py4j").mkdir()
            (site / "py4j" / "__init__.py").write_text("")
        archives = [site / "pyspark" / "python" / "lib" / "pyspark.zip",
                    site / "pyspark" / "python" / "lib" / "py4j-0.10.9.9-src.zip",
                    site / "pyspark" / "jars" / "spark-core_2.13.jar"]
        for a in archives:
            a.write_bytes(b"PK")
        return site, [str(a) for a in archives]

    site, archives = layout(tmp_path / "pip")
    assert redundant_archives([*archives, str(site)]) == archives
    # a separate SPARK_HOME: its zips may hold another version than the installed package
    home = tmp_path / "spark-home" / "python" / "lib"
    home.mkdir(parents=True)
    (home / "pyspark.zip").write_bytes(b"PK")
    assert redundant_archives([str(home / "pyspark.zip"), str(site)]) == []
    # py4j only in its zip: nothing leaves
    bare, bare_archives = layout(tmp_path / "no-py4j", with_py4j=False)
    assert redundant_archives([*bare_archives, str(bare)]) == []
    # the package not on the path: nothing leaves
    assert redundant_archives(archives) == []
