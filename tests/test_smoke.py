from keyspan.datastream import KeyedProcessFunction
from keyspan.datastream.state import ValueStateDescriptor


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


def test_spark_offset_log_is_written_without_checksum_files(env, workdir, spark):
    """keyspan's own query writes Spark's per-batch logs without Hadoop's .crc side files (half the file
    operations of every micro-batch) and leaves the session's setting as it found it."""
    env.set_max_records_per_epoch(2)
    env.from_collection([("a", 1), ("b", 2), ("a", 3)]).key_by(lambda r: r[0]).process(RunningSum()) \
        .execute_and_collect(limit=10)
    logs = [p for p in (workdir / ".keyspan" / "spark").rglob("*") if p.parent.name in ("offsets", "commits")]
    assert len([p for p in logs if not p.name.startswith(".")]) >= 4, logs  # two batches, both logs
    assert not [p for p in logs if p.name.endswith(".crc")]
    assert spark.conf.get("fs.AbstractFileSystem.file.impl", None) is None
