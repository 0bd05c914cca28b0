"""Small epochs in the driver (``set_small_epochs_in_driver``): the same results, state and checkpoints as
epochs run as Spark jobs, epochs that move between the driver and Spark's workers keep their state, and a
failure in the driver runs the epoch again on Spark, as Spark retries a failed task. Small epochs read in
the driver (``set_small_epochs_read_in_driver``, on by default): only the source stages run there, the
rest as Spark jobs without an exchange, with the same results and state."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from keyspan.common import Duration, Time, WatermarkStrategy
from keyspan.common.watermark_strategy import TimestampAssigner
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.functions import CheckpointedFunction, MapFunction
from keyspan.datastream.connectors.file_system import FileSource, StreamFormat
from keyspan.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from keyspan.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend
from keyspan.datastream.window import TumblingEventTimeWindows

DRIVER = os.getpid()  # the test process is the job's driver


class Count(KeyedProcessFunction):
    """Per key: how many records so far, and how many of each value; the pid of the process it ran in.
    ``opened_log``: a file that gets the pid of every process that opens an instance."""

    def __init__(self, opened_log: str | None = None):
        self.opened_log = opened_log

    def open(self, runtime_context):
        if self.opened_log:
            with open(self.opened_log, "a") as log:
                log.write(f"{os.getpid()}\n")
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.per_value = runtime_context.get_map_state(MapStateDescriptor("per_value"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.per_value.put(value.v, (self.per_value.get(value.v) or 0) + 1)
        yield "count", value.key, n, len(list(self.per_value.keys())), os.getpid()


class Ts(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value.ts


def _files(folder, sizes):
    """One JSON-lines file per size: records of 5 keys, timestamps rising by 100 ms per record."""
    folder.mkdir()
    n = 0
    for i, size in enumerate(sizes):
        lines = []
        for _ in range(size):
            lines.append(json.dumps({"key": f"k{n % 5}", "ts": 100 * n, "v": n % 3}))
            n += 1
        (folder / f"part-{i:03d}.jsonl").write_text("\n".join(lines) + "\n")


def _job(folder, in_driver: int = 0, read_in_driver: int = 0, backend=HashMapStateBackend, files_per_epoch: int = 1):
    """An environment at parallelism 2 and a source reading ``files_per_epoch`` of the folder's files per epoch."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_state_backend(backend())
    env.set_small_epochs_in_driver(in_driver)
    env.set_small_epochs_read_in_driver(read_in_driver)
    source = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), str(folder)) \
        .set_max_files_per_epoch(files_per_epoch).build()
    return env, source


def _run(folder, in_driver: int, backend=HashMapStateBackend, opened_log: str | None = None):
    env, source = _job(folder, in_driver, backend=backend)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0)).with_timestamp_assigner(Ts())
    events = env.from_source(source, strategy, "events").uid("events")
    counts = events.key_by(lambda r: r.key).process(Count(opened_log)).uid("count")
    sums = (events.map(lambda r: (r.key, r.v)).key_by(lambda t: t[0])
            .window(TumblingEventTimeWindows.of(Time.seconds(1))).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("sum")
            .map(lambda t: ("window", t[0], t[1], 0, os.getpid())))
    return list(counts.union(sums).execute_and_collect())


def _without_pid(rows):
    return Counter(r[:4] for r in rows)


def test_small_epochs_run_in_the_driver_with_the_results_of_spark_jobs(workdir):
    _files(workdir / "in", [12, 7, 20, 9])
    on_spark = _run(workdir / "in", 0)
    in_driver = _run(workdir / "in", 1000)
    assert {r[4] for r in on_spark} and DRIVER not in {r[4] for r in on_spark}
    assert {r[4] for r in in_driver} == {DRIVER}  # every record of every operator was processed here
    assert _without_pid(in_driver) == _without_pid(on_spark)
    assert sum(1 for r in on_spark if r[0] == "window") == 5 * 5  # 48 records: 5 windows of 5 keys fired


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
def test_epochs_moving_between_the_driver_and_spark_keep_their_state(workdir, backend):
    """Files of 4 and 40 records, one per epoch, at most 10 records in the driver: epochs alternate, so each
    subtask's state goes from the driver to a Spark worker and back, caught up from the checkpoint."""
    sizes = [4, 40, 4, 4, 40, 4, 40, 4]
    _files(workdir / "in", sizes)
    mixed = _run(workdir / "in", 10, backend)
    on_spark = _run(workdir / "in", 0, backend)
    assert _without_pid(mixed) == _without_pid(on_spark)
    count_pids = [r[4] for r in mixed if r[0] == "count"]  # in file order within a key
    ran_in_driver = Counter(pid == DRIVER for pid in count_pids)
    assert ran_in_driver[True] == sum(s for s in sizes if s <= 10)
    assert ran_in_driver[False] == sum(s for s in sizes if s > 10)
    finals = {}
    for _, key, n, _, _ in (r for r in mixed if r[0] == "count"):
        finals[key] = max(finals.get(key, 0), n)
    assert finals == {f"k{i}": sum(sizes) // 5 for i in range(5)}


class FailInDriverOnce(KeyedProcessFunction):
    """Fails at one record the first time, after changing state for the records before it."""

    def __init__(self, marker: str, poison: int):
        self.marker = marker
        self.poison = poison

    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_element(self, value, ctx):
        self.total.update((self.total.value() or 0) + value[1])
        if value[1] == self.poison and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("injected failure")
        yield ctx.get_current_key(), self.total.value(), value[1], os.getpid()


def test_a_failure_in_the_driver_runs_the_epoch_again_as_spark_jobs(env, workdir, caplog):
    env.set_max_records_per_epoch(40)
    env.set_small_epochs_in_driver(1000)
    data = [(f"k{i % 3}", i) for i in range(120)]
    marker = str(workdir / "failed-once")
    out = list(env.from_collection(data).key_by(lambda r: r[0]).process(FailInDriverOnce(marker, poison=57))
               .execute_and_collect())
    assert os.path.exists(marker), "the failure was not injected"
    where = {value: pid for _, _, value, pid in out}
    assert {where[v] == DRIVER for v in range(40, 80)} == {False}  # the failed epoch ran on Spark
    assert {where[v] == DRIVER for v in (*range(40), *range(80, 120))} == {True}  # the others in the driver
    totals = {}
    for key, total, _, _ in out:
        totals[key] = max(totals.get(key, 0), total)
    assert totals == {f"k{j}": sum(i for i in range(120) if i % 3 == j) for j in range(3)}
    assert len(out) == len(data)
    assert "epoch 1 failed in the driver (keyspan.UserFunctionError: operator" in caplog.text


def test_a_function_that_always_fails_fails_the_job_with_its_error(env, workdir):
    from keyspan.runtime.executor import JobExecutionError

    env.set_small_epochs_in_driver(1000)

    def broken(r):
        raise ValueError(f"cannot handle {r}")

    with pytest.raises(JobExecutionError) as failure:
        env.from_collection([1, 2, 3]).map(broken).uid("broken").execute_and_collect()
    assert "ValueError: cannot handle" in str(failure.value)
    assert "broken" in str(failure.value)


def test_the_epochs_run_in_the_driver_are_counted_in_the_job_metrics(workdir):
    from prometheus_client import generate_latest

    from keyspan.datastream import SinkFunction
    from keyspan.metrics.prometheus import job_registry

    class Drop(SinkFunction):
        def invoke(self, value, context):
            pass

    _files(workdir / "in", [4, 40, 4, 40, 4])
    env, source = _job(workdir / "in", in_driver=10)
    env.from_source(source, None, "events").key_by(lambda r: r.key).process(Count()).uid("count").add_sink(Drop())
    result = env.execute("in-driver-metrics")
    assert result.metrics.summary()["epochs_in_driver"] == 3
    assert [p["tasks.in_driver"] for p in result.epoch_phases] == [True, False, True, False, True]
    assert 'keyspan_numEpochsInDriver_total{job="in-driver-metrics"} 3.0' in generate_latest(
        job_registry(result.metrics)).decode()


def test_an_epoch_whose_offsets_exceed_the_limit_is_not_read_in_the_driver():
    from types import SimpleNamespace

    from keyspan.connectors.kafka.source import KafkaReader
    from keyspan.connectors.number_seq import NumberSequenceReader
    from keyspan.io import serde
    from keyspan.runtime.driver_epoch import DriverEpochs

    reader = serde.dumps_function(NumberSequenceReader(100, 1000))
    epochs = DriverEpochs(None, {}, {7: reader}, max_records=10, sources_max_records=0)
    assert epochs._read(SimpleNamespace(reads={7: [(0, 6), (6, 10)]}), 10) == (
        {7: [[list(range(100, 106))], [list(range(106, 110))]]}, 10)
    assert epochs._read(SimpleNamespace(reads={7: [(0, 6), (6, 11)]}), 10) == (None, 0)
    assert NumberSequenceReader(0, 1000).most_records([(0, 6), (6, 11)]) == 11
    # Kafka offsets bound the records (markers and compaction only make fewer); a range from a
    # partition's beginning is unknown until read
    kafka = KafkaReader.__new__(KafkaReader)
    assert kafka.most_records([[("t/0", 5, 9), ("t/2", 0, 3)], [("t/1", 7, 8)]]) == 8
    assert kafka.most_records([[("t/0", None, 9)]]) is None


@pytest.mark.parametrize("idle_seconds, opened", [(120, 2), (0, 4)])
def test_the_driver_frees_its_state_once_epochs_go_to_spark_for_long(workdir, monkeypatch, idle_seconds, opened):
    """Epochs of 4, 40 and 4 records, at most 10 in the driver. Kept, the driver's operators (one per keyed
    subtask) catch up after the Spark epoch; freed at once (no idle time allowed), they are built and
    restored again for the third epoch. The results are the same either way."""
    from keyspan.runtime.worker import instances

    monkeypatch.setattr(instances, "IDLE_INSTANCE_SECONDS", idle_seconds)
    _files(workdir / "in", [4, 40, 4])
    log = workdir / "opened"
    rows = _run(workdir / "in", 10, opened_log=str(log))
    assert log.read_text().split().count(str(DRIVER)) == opened
    assert _without_pid(rows) == _without_pid(_run(workdir / "in", 0))


class CountWithSourcePid(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        key, v, source_pid = value
        yield key, v, n, source_pid, os.getpid()


class Numbered(MapFunction, CheckpointedFunction):
    """Numbers the records its subtask saw, the count kept in operator state."""

    def initialize_state(self, context):
        self.state = context.get_operator_state_store().get_list_state(ListStateDescriptor("seen"))
        self.seen = sum(self.state.get())

    def snapshot_state(self, context):
        self.state.update([self.seen])

    def map(self, value):
        self.seen += 1
        return (*value, self.seen)


def _run_read_in_driver(folder, read_in_driver: int, backend=HashMapStateBackend, files_per_epoch: int = 1):
    env, source = _job(folder, read_in_driver=read_in_driver, backend=backend, files_per_epoch=files_per_epoch)
    result = env.from_source(source, None, "events").uid("events").map(lambda r: (r.key, r.v, os.getpid())) \
        .key_by(lambda t: t[0]).process(CountWithSourcePid()).uid("count").map(Numbered()).uid("numbered")
    return list(result.execute_and_collect())


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
def test_small_epochs_read_in_the_driver_give_the_results_of_spark_jobs(workdir, backend):
    """Files of 4 and 40 records, one per epoch, at most 10 records read in the driver: the source stage
    moves between the driver and Spark's workers; the keyed stage, fed by the driver or by Spark's
    exchange, always runs on Spark, with an operator-state function chained to it; every count and
    number is what a run entirely on Spark gives."""
    sizes = [4, 40, 4, 4, 40, 4, 40, 4]
    _files(workdir / "in", sizes)
    mixed = _run_read_in_driver(workdir / "in", 10, backend)
    on_spark = _run_read_in_driver(workdir / "in", 0, backend)
    assert DRIVER not in {r[4] for r in mixed}  # keyed state stays in Spark's workers
    read_here = Counter(r[3] == DRIVER for r in mixed)
    assert read_here[True] == sum(s for s in sizes if s <= 10)
    assert read_here[False] == sum(s for s in sizes if s > 10)
    assert DRIVER not in {r[3] for r in on_spark}
    # each key's records reached its own subtask, in order, and each subtask numbered the same records
    assert Counter((r[0], r[1], r[2], r[5]) for r in mixed) == Counter((r[0], r[1], r[2], r[5]) for r in on_spark)
    finals = {}
    for key, _, n, _, _, _ in mixed:
        finals[key] = max(finals.get(key, 0), n)
    assert finals == {f"k{i}": sum(sizes) // 5 for i in range(5)}


def test_a_key_s_records_read_in_the_driver_all_reach_its_subtask(workdir):
    """Epochs of two files of one key (13, 7 and 8 records), read as two source tasks: the driver hands
    every record to the subtask that owns its key group, however unevenly the rows it sends (a chunk of
    records per source task and subtask, and each source task's report to every subtask) spread over
    the subtasks."""
    folder = workdir / "in"
    folder.mkdir()
    for i, (key, size) in enumerate([("a", 8), ("a", 5), ("b", 3), ("b", 4), ("a", 6), ("a", 2)]):
        (folder / f"part-{i:03d}.jsonl").write_text("".join(
            json.dumps({"key": key, "ts": 0, "v": j}) + "\n" for j in range(size)))
    out = _run_read_in_driver(folder, 20, files_per_epoch=2)
    assert {r[3] for r in out} == {DRIVER}  # every epoch was read in the driver
    assert sorted((r[0], r[2]) for r in out) == [("a", n) for n in range(1, 22)] + [("b", n) for n in range(1, 8)]


class CountThenFire(Count):
    """Count, and an event-time timer per record."""

    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(value.ts)
        yield from super().process_element(value, ctx)

    def on_timer(self, timestamp, ctx):
        yield "fired", ctx.get_current_key(), timestamp, 0, os.getpid()


def test_epochs_read_in_the_driver_are_marked_in_the_epoch_phases(workdir):
    """Epochs of 4, 40, 4, 40 and 4 records, at most 10 read in the driver: the keyed stage, its state and
    its timers stay on Spark in every epoch."""
    from keyspan.datastream import SinkFunction

    class Keep(SinkFunction):
        def __init__(self):
            self.rows = []

        def invoke(self, value, context):
            self.rows.append(value)

    _files(workdir / "in", [4, 40, 4, 40, 4])
    env, source = _job(workdir / "in", read_in_driver=10)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0)).with_timestamp_assigner(Ts())
    sink = Keep()
    env.from_source(source, strategy, "events").key_by(lambda r: r.key).process(CountThenFire()).uid("count") \
        .add_sink(sink)
    result = env.execute("read-in-driver-phases")
    phases = result.epoch_phases
    assert [p["tasks.read_in_driver"] for p in phases] == [True, False, True, False, True]
    assert [p["tasks.in_driver"] for p in phases] == [False] * 5
    assert result.metrics.summary()["epochs_in_driver"] == 0
    fired = [r for r in sink.rows if r[0] == "fired"]
    assert len(fired) == 92 and DRIVER not in {r[4] for r in fired}


def test_an_empty_epoch_runs_whole_in_the_driver_only_when_asked(monkeypatch):
    """An epoch with no records is within any limit: without ``set_small_epochs_in_driver`` the driver
    still runs only its source stages."""
    from types import SimpleNamespace

    from keyspan.runtime import driver_epoch

    monkeypatch.setattr(driver_epoch, "decode_context", lambda context: context)
    ran = []
    for whole_limit, expected in ((0, False), (10, True)):
        epochs = driver_epoch.DriverEpochs(None, {}, {}, max_records=whole_limit, sources_max_records=10)
        epochs._read = lambda ctx, limit: ({}, 0)
        epochs._run = lambda ctx, inputs, whole: ran.append(whole) or {}
        assert epochs.run(SimpleNamespace(epoch=1, run_id="r"), "context") == ({}, expected)
    assert ran == [False, True]


def test_the_driver_does_not_read_files_larger_than_64_bytes_per_record_of_the_limit(workdir):
    """Limit 10 records: a file of 5 records is read in the driver, one of 5 records of 200 bytes each
    (over 640 bytes) is read by Spark's tasks, without the driver reading it first."""
    folder = workdir / "in"
    folder.mkdir()
    for i, pad in enumerate([0, 150, 0]):
        (folder / f"part-{i:03d}.jsonl").write_text("".join(
            json.dumps({"key": f"k{j}", "ts": 0, "v": i, "pad": "x" * pad}) + "\n" for j in range(5)))
    out = _run_read_in_driver(folder, 10)
    assert {v: source_pid == DRIVER for _, v, _, source_pid, _, _ in out} == {
        0: True, 1: False, 2: True}
