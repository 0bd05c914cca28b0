"""State Processor API on real Spark: read every state kind from a savepoint and compare with what the
job held (its own outputs); bootstrap a savepoint from a DataFrame and run the job from it; remove
and transform state; change max parallelism offline; tampered output refused; the Spark data source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keyspan.common import Encoder, Types
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from keyspan.runtime.executor import JobExecutionError
from keyspan.state_processor import (
    KeyedStateBootstrapFunction,
    KeyedStateReaderFunction,
    OperatorIdentifier,
    OperatorTransformation,
    SavepointReader,
    SavepointWriter,
    decode,
)

from savepoint_helpers import BackgroundJob, use_options, wait_for_checkpoints


@pytest.fixture(autouse=True, scope="module")
def savepoint_key():
    """Jobs here run in a per-test workdir, the State Processor API in the process's: one configured key
    makes both sign and verify alike, as one keyspan installation does."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KEYSPAN_SAVEPOINT_KEY", "state-processor-tests")
        yield

from keyspan.datastream import AggregateFunction  # noqa: E402

from keyspan.state_processor.plans import signing_key  # noqa: E402

FAR = 4_000_000_000_000  # a processing-time timer that never fires during the test


class Average(AggregateFunction):
    def create_accumulator(self):
        return [0, 0]

    def add(self, value, accumulator):
        return [accumulator[0] + value, accumulator[1] + 1]

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]


class TallyState:
    """Every keyed state kind and a timer per key, updated one value at a time: what the job does per
    record and the bootstrap function per history row."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.last = ctx.get_list_state(ListStateDescriptor("last"))
        self.seen = ctx.get_map_state(MapStateDescriptor("seen"))
        self.total = ctx.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b))
        self.avg = ctx.get_aggregating_state(AggregatingStateDescriptor("avg", Average()))

    def tally(self, v, ctx) -> int:
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.last.add(v)
        if len(self.last.get()) > 3:
            self.last.update(self.last.get()[-3:])
        self.seen.put(v % 5, n)
        self.total.add(v)
        self.avg.add(v)
        ctx.timer_service().register_processing_time_timer(FAR + v % 3)
        return n


class Tally(TallyState, KeyedProcessFunction):
    """Each output line is the key's state after the record."""

    def process_element(self, value, ctx):
        n = self.tally(value[1], ctx)
        yield json.dumps({"key": ctx.get_current_key(), "count": n, "last": self.last.get(),
                          "seen": sorted(self.seen.items()), "total": self.total.get(), "avg": self.avg.get()})

    def on_timer(self, timestamp, ctx):
        yield json.dumps({"key": ctx.get_current_key(), "timer": timestamp})


def on_timer_lines(out: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(out.iterdir()) if p.is_file() for line in p.read_text().splitlines()
            if "timer" in line]


def history(records: int, keys: int) -> list[tuple[str, int]]:
    return [(f"k{i % keys:03d}", i) for i in range(records)]


DATA = history(600, 20)
HISTORY, FUTURE = DATA[:400], DATA[400:]


def build(env, data, out: Path, function=None):
    env.set_max_records_per_epoch(200)
    (env.from_collection(data).uid("src").key_by(lambda r: r[0]).process(function or Tally()).uid("tally")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()).uid("sink"))


def final_state(out: Path) -> dict[str, dict]:
    """Each key's last output line: the state the job held at the end."""
    lines = [json.loads(line) for p in sorted(out.iterdir()) if p.is_file() for line in p.read_text().splitlines()]
    last: dict[str, dict] = {}
    for line in lines:
        if "count" in line and line["count"] > last.get(line["key"], {"count": 0})["count"]:
            last[line["key"]] = line
    return last


def env_with(parallelism: int) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


def savepoint_of(workdir: Path, name: str, data, parallelism: int = 2) -> tuple[str, Path]:
    """Run the job on ``data`` to its end, then take a savepoint of its last checkpoint."""
    out = workdir / f"out-{name}"
    env = env_with(parallelism)
    build(env, data, out)
    env.execute(name)
    from keyspan.checkpoint.metadata import MetadataStore
    from keyspan.checkpoint.savepoint import write_savepoint
    from keyspan.io.storage import Storage
    from keyspan.runtime import options as run_options

    opts = run_options.current()
    checkpoint = MetadataStore(opts.metadata()).latest_checkpoint(name)
    path = write_savepoint(Storage(opts.checkpoint_root()).child(name), checkpoint,
                           "file://" + str(workdir / "savepoints" / name), job_name=name, job_file_bytes=None,
                           key=signing_key())
    return path, out


@pytest.fixture(scope="module")
def tally_savepoint(spark, tmp_path_factory):
    """One job run shared by the read tests (a run takes a while on a shared machine)."""
    from keyspan.runtime import options as run_options

    workdir = tmp_path_factory.mktemp("tally")
    run_options.install(run_options.RunOptions(workdir=str(workdir / ".keyspan")))
    try:
        yield savepoint_of(workdir, "tally", HISTORY)
    finally:
        run_options.install(run_options.RunOptions())


def test_read_every_keyed_state_kind_equals_what_the_job_held(spark, tally_savepoint):
    path, out = tally_savepoint
    held = final_state(out)
    reader = SavepointReader.read(spark, path)
    tally = OperatorIdentifier.for_uid("tally")

    count = reader.read_keyed_state(tally, state="count")
    assert dict(count.schema.simpleString() and [("key", "string"), ("value", "bigint")]) == \
        {f.name: f.dataType.simpleString() for f in count.schema.fields if f.name in ("key", "value")}
    assert {r.key: r.value for r in count.collect()} == {k: s["count"] for k, s in held.items()}

    last: dict[str, list] = {}
    for r in reader.read_keyed_state(tally, state="last").orderBy("key", "index").collect():
        last.setdefault(r.key, []).append(decode(r.value))
    assert last == {k: s["last"] for k, s in held.items()}

    seen: dict[str, list] = {}
    for r in reader.read_keyed_state(tally, state="seen").collect():
        seen.setdefault(r.key, []).append([decode(r.map_key), decode(r.value)])
    assert {k: sorted(v) for k, v in seen.items()} == {k: s["seen"] for k, s in held.items()}

    total = {r.key: decode(r.value) for r in reader.read_keyed_state(tally, state="total").collect()}
    assert total == {k: s["total"] for k, s in held.items()}
    avg = {r.key: decode(r.value) for r in reader.read_keyed_state(tally, state="avg").collect()}  # the accumulator
    assert {k: a[0] / a[1] for k, a in avg.items()} == {k: s["avg"] for k, s in held.items()}

    # every key group comes from the key's hash, as in the job
    from keyspan.state.keygroups import assign_to_key_group
    assert all(r.key_group == assign_to_key_group(r.key, 128) for r in count.collect())

    timers = reader.read_timers(tally).collect()
    expected = {(k, FAR + v % 3) for k, v in HISTORY}
    assert {(t.key, t.timestamp) for t in timers} == expected
    assert {t.domain for t in timers} == {"processing_time"}


class Summary(KeyedStateReaderFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))
        self.avg = ctx.get_aggregating_state(AggregatingStateDescriptor("avg", Average()))

    def read_key(self, key, ctx):
        yield key, self.count.value(), self.avg.get(), len(ctx.registered_processing_time_timers())


def test_reader_function_sees_states_as_the_job_did_and_tasks_read_only_their_share(spark, tally_savepoint):
    path, out = tally_savepoint
    held = final_state(out)
    reader = SavepointReader.read(spark, path)
    rows = reader.read_keyed_state("tally", Summary(), "key string, n long, avg double, timers int",
                                   tasks=4).collect()
    assert {r.key: (r.n, r.avg) for r in rows} == {k: (s["count"], s["avg"]) for k, s in held.items()}
    timers_per_key = {k: len({v % 3 for kk, v in HISTORY if kk == k}) for k in held}
    assert {r.key: r.timers for r in rows} == timers_per_key
    per_task = reader.bytes_read.value
    metadata = json.loads(Path(path.removeprefix("file://"), "_metadata.json").read_text())
    total = sum(h["bytes"] for h in metadata["state"]["tally"])
    assert sorted(per_task) == [0, 1, 2, 3]
    assert max(per_task.values()) < total / 4 * 1.5 + 4096 * len(metadata["state"]["tally"]) * 32


def test_spark_data_source_and_sql(spark, tally_savepoint):
    path, out = tally_savepoint
    held = final_state(out)
    SavepointReader.read(spark, path)  # registers the data source on this session
    # the data source plans in a Python worker started before this module configured its savepoint key,
    # so it cannot check the signature here (the reader above did); verify=false skips the checks
    df = spark.read.format("keyspan-state").option("path", path).option("uid", "tally").option("state", "count") \
        .option("verify", "false").load()
    df.createOrReplaceTempView("counts")
    rows = spark.sql("select key, value from counts where value >= 15 order by key").collect()
    assert [(r.key, r.value) for r in rows] == sorted((k, s["count"]) for k, s in held.items() if s["count"] >= 15)
    with pytest.raises(Exception, match="no keyed state 'nope'"):
        spark.read.format("keyspan-state").option("path", path).option("uid", "tally").option("state", "nope") \
            .option("verify", "false").load()


# -- writing -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory):
    """The job run over all of DATA without interruption: what every restored run must end with."""
    from keyspan.runtime import options as run_options

    workdir = tmp_path_factory.mktemp("reference")
    run_options.install(run_options.RunOptions(workdir=str(workdir / ".keyspan")))
    try:
        env = env_with(2)
        build(env, DATA, workdir / "out")
        env.execute("reference")
        yield final_state(workdir / "out")
    finally:
        run_options.install(run_options.RunOptions())


class BackfillTally(TallyState, KeyedStateBootstrapFunction):
    """Builds Tally's state from history rows, as the job would have."""

    def process_element(self, row, ctx):
        n = self.tally(row.v, ctx)
        if ctx.get_current_key() == "k007" and n == 1:
            ctx.timer_service().register_processing_time_timer(1)  # due at once after the restore


def test_bootstrap_then_run_equals_a_run_that_processed_the_history(spark, workdir, reference):
    from keyspan.datastream.state_backend import EmbeddedRocksDBStateBackend

    # history rows in order of arrival per key: one Spark partition keeps their order
    df = spark.createDataFrame(HISTORY, "key string, v long").coalesce(1)
    transformation = OperatorTransformation.bootstrap_with(df).key_by(lambda row: row.key).transform(BackfillTally())
    path = SavepointWriter.new_savepoint(spark, max_parallelism=128) \
        .with_operator(OperatorIdentifier.for_uid("tally"), transformation).write(str(workdir / "bootstrapped"))

    written = SavepointReader.read(spark, path)
    assert {d["name"]: d["kind"] for d in written.operators()["tally"] if not d["name"].startswith("__")} == \
        {"count": "value", "last": "list", "seen": "map", "total": "reducing", "avg": "aggregating"}

    use_options(savepoint_path=path)
    env = env_with(3)
    env.set_state_backend(EmbeddedRocksDBStateBackend())  # written by the heap backend's code, read by RocksDB
    build(env, FUTURE, workdir / "out")
    env.execute("backfilled")
    assert final_state(workdir / "out") == reference
    assert on_timer_lines(workdir / "out") == [{"key": "k007", "timer": 1}]


def test_transform_one_state_and_remove_an_operator(spark, workdir, tally_savepoint):
    from pyspark.sql import functions as F

    path, held_out = tally_savepoint
    held = final_state(held_out)
    fixed = SavepointWriter.from_existing_savepoint(spark, path).transform_state(
        "tally", "count",
        lambda rows: rows.filter(F.col("key") != "k002")
        .withColumn("value", F.when(F.col("key") == "k001", F.lit(1000)).otherwise(F.col("value")))
    ).write(str(workdir / "fixed"))
    counts = {r.key: r.value for r in SavepointReader.read(spark, fixed).read_keyed_state("tally", state="count").collect()}
    assert counts == {**{k: s["count"] for k, s in held.items() if k != "k002"}, "k001": 1000}
    total = {r.key: decode(r.value) for r in SavepointReader.read(spark, fixed).read_keyed_state("tally", state="total").collect()}
    assert total == {k: s["total"] for k, s in held.items()}, "the operator's other states are kept"

    use_options(savepoint_path=fixed)
    env = env_with(2)
    build(env, DATA, workdir / "out-fixed")
    env.execute("fixed")
    after = final_state(workdir / "out-fixed")
    assert after["k001"]["count"] == 1000 + 10 and after["k002"]["count"] == 10  # 10 more records per key
    assert after["k002"]["total"] == held["k002"]["total"] + sum(v for k, v in FUTURE if k == "k002")
    assert after["k003"]["count"] == held["k003"]["count"] + 10

    removed = SavepointWriter.from_existing_savepoint(spark, path).remove_operator("tally").write(str(workdir / "rm"))
    assert "tally" not in json.loads(Path(removed.removeprefix("file://"), "_metadata.json").read_text())["state"]
    use_options(savepoint_path=removed)
    env = env_with(2)
    build(env, DATA, workdir / "out-removed")
    env.execute("removed")
    assert {s["count"] for s in final_state(workdir / "out-removed").values()} == {10}, "state starts empty"


def test_rekey_to_a_larger_max_parallelism_and_restore_above_the_old_max(spark, tmp_path, reference):
    from keyspan.runtime import options as run_options

    run_options.install(run_options.RunOptions(workdir=str(tmp_path / ".keyspan")))
    try:
        env = env_with(2)
        env.set_max_parallelism(2)
        build(env, HISTORY, tmp_path / "small")
        env.execute("small")
        from keyspan.checkpoint.metadata import MetadataStore
        from keyspan.checkpoint.savepoint import write_savepoint
        from keyspan.io.storage import Storage

        opts = run_options.current()
        checkpoint = MetadataStore(opts.metadata()).latest_checkpoint("small")
        path = write_savepoint(Storage(opts.checkpoint_root()).child("small"), checkpoint,
                               "file://" + str(tmp_path / "sp-small"), job_name="small", job_file_bytes=None,
                               key=signing_key())
        MetadataStore(opts.metadata()).add_savepoint(path=path, job_id="small", epoch=checkpoint["epoch"],
                                                     parallelism=2, code_version=None, restored_from=None,
                                                     trigger="manual")
        rekeyed = SavepointWriter.from_existing_savepoint(spark, path).change_max_parallelism(8) \
            .write(str(tmp_path / "sp-8"), metadata_url=opts.metadata())
        metadata = json.loads(Path(rekeyed.removeprefix("file://"), "_metadata.json").read_text())
        assert metadata["max_parallelism"] == 8 and metadata["operations"] == ["max parallelism 2 -> 8"]
        assert all(h["kg"][1] <= 8 for h in metadata["state"]["tally"])

        # the version tree shows the derived savepoint under its source, with what was done
        from typer.testing import CliRunner
        from keyspan.cli.main import app
        tree = CliRunner().invoke(app, ["savepoints", "small", "--tree", "--workdir", opts.workdir]).output
        assert "sp-8" in tree and "max parallelism 2 -> 8" in tree, tree
        assert tree.index("sp-small") < tree.index("sp-8")

        use_options(savepoint_path=rekeyed)
        env = env_with(4)  # above the old max parallelism 2
        env.set_max_parallelism(8)
        build(env, DATA, tmp_path / "small")
        env.execute("small")
        assert final_state(tmp_path / "small") == reference

        # a tampered file of the writer's output is refused, naming the file
        victim = sorted(Path(rekeyed.removeprefix("file://"), "state").rglob("*.full"))[0]
        data = victim.read_bytes()
        victim.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
        use_options(savepoint_path=rekeyed)
        env = env_with(4)
        env.set_max_parallelism(8)
        build(env, DATA, tmp_path / "never")
        with pytest.raises(JobExecutionError, match=f"{victim.name}.*corrupt|corrupt.*{victim.name}"):
            env.execute("small-again")
        with pytest.raises(Exception, match="corrupt"):
            SavepointReader.read(spark, rekeyed)
        # so is one whose metadata was edited (a signature over it), before any state is read
        meta = Path(rekeyed.removeprefix("file://"), "_metadata.json")
        edited = json.loads(meta.read_text())
        edited["max_parallelism"] = 16
        meta.write_text(json.dumps(edited))
        with pytest.raises(Exception, match="signature"):
            SavepointReader.read(spark, rekeyed)
    finally:
        run_options.install(run_options.RunOptions())


# -- queryable state -----------------------------------------------------------------------------------------

def _consumed(offsets) -> int:
    """Records the source had consumed at a checkpoint (its offsets hold {"index": n})."""
    if isinstance(offsets, dict):
        if "index" in offsets and isinstance(offsets["index"], int):
            return offsets["index"]
        return sum(_consumed(v) for v in offsets.values())
    return 0


def test_queryable_state_matches_the_committed_checkpoint_while_the_job_runs(workdir):
    import time

    import httpx
    from typer.testing import CliRunner

    from keyspan.cli.main import app
    from keyspan.rest.auth import auth_headers
    from keyspan.runtime import options as run_options
    from savepoint_helpers import store

    env = env_with(2)
    build(env, DATA, workdir / "out")
    env.set_max_records_per_epoch(20)  # 30 epochs: the job still runs while the test asks
    job = BackgroundJob(env, "live")
    wait_for_checkpoints("live", 2, job=job)
    api = store().get_job("live")["api_url"]
    headers = auth_headers(run_options.current().workdir)
    missing = httpx.get(f"{api}/jobs/live/state/tally/nope", params={"key": "k003"}, headers=headers, timeout=30)
    answers = []
    deadline = time.time() + 120
    while job.thread.is_alive() and len(answers) < 3 and time.time() < deadline:
        r = httpx.get(f"{api}/jobs/live/state/tally/count", params={"key": "k003"}, headers=headers, timeout=30)
        if r.status_code == 200:
            answers.append(r.json())
        time.sleep(0.5)
    cli_running = CliRunner().invoke(app, ["state", "get", "live", "--uid", "tally", "--state", "count", "--key",
                                           "k003", "--workdir", run_options.current().workdir])
    job.join()
    assert answers, "the API answered no query while the job ran"
    assert missing.status_code == 404 and "no keyed state 'nope'" in missing.json()["detail"]
    for a in answers:
        consumed = _consumed(store().get_checkpoint("live", a["epoch"])["source_offsets"])
        assert a["value"] == sum(1 for k, _ in DATA[:consumed] if k == "k003"), a
        assert a["key"] == "k003" and a["kind"] == "value"
    assert cli_running.exit_code == 0, cli_running.output
    # after the run: read from the last checkpoint's files, no driver needed
    done = CliRunner().invoke(app, ["state", "get", "live", "--uid", "tally", "--state", "last", "--key", "k003",
                                    "--workdir", run_options.current().workdir])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["value"] == final_state(workdir / "out")["k003"]["last"]


# -- operator state: list, union list, broadcast -------------------------------------------------------------

from keyspan.datastream import BroadcastProcessFunction, CheckpointedFunction, MapFunction  # noqa: E402
from keyspan.state_processor import BroadcastStateBootstrapFunction, StateBootstrapFunction  # noqa: E402

RULES = MapStateDescriptor("rules", Types.STRING(), Types.LONG())
RULE_UPDATES = [("limit", 10), ("floor", 1), ("limit", 30)]


class Remember(MapFunction, CheckpointedFunction):
    """Operator list state of every value its subtask saw; union list state of each subtask's maximum."""

    def initialize_state(self, context):
        store = context.get_operator_state_store()
        self.values = store.get_list_state(ListStateDescriptor("values"))
        self.maxes = store.get_union_list_state(ListStateDescriptor("maxes"))
        self.mine = []

    def snapshot_state(self, context):
        self.maxes.update([max(self.values.get())] if self.values.get() else [])

    def map(self, value):
        self.values.add(value[1])
        return value


class ApplyRules(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield value

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(*value)


def test_read_and_bootstrap_operator_list_union_and_broadcast_state(spark, workdir):
    from keyspan.checkpoint.metadata import MetadataStore
    from keyspan.checkpoint.savepoint import write_savepoint
    from keyspan.connectors.sources import CollectionSource
    from keyspan.io.storage import Storage
    from keyspan.runtime import options as run_options

    env = env_with(2)
    env.set_max_records_per_epoch(100)
    rules = CollectionSource(RULE_UPDATES)
    rules.max_per_epoch = 1
    broadcast = env.from_source(rules, source_name="rules").uid("rules").broadcast(RULES)
    data = env.from_collection(HISTORY).uid("src").map(Remember()).uid("remember")
    data.connect(broadcast).process(ApplyRules()).uid("apply").sink_to(
        FileSink.for_row_format(str(workdir / "o"), Encoder.simple_string_encoder()).build()).uid("sink")
    env.execute("operators")
    opts = run_options.current()
    checkpoint = MetadataStore(opts.metadata()).latest_checkpoint("operators")
    path = write_savepoint(Storage(opts.checkpoint_root()).child("operators"), checkpoint,
                           "file://" + str(workdir / "sp"), job_name="operators", job_file_bytes=None,
                           key=signing_key())

    reader = SavepointReader.read(spark, path)
    values = reader.read_list_state("remember", "values", Types.LONG()).collect()
    assert sorted(r.value for r in values) == sorted(v for _, v in HISTORY)
    assert {r.subtask for r in values} == {0, 1}
    per_subtask_max = {s: max(r.value for r in values if r.subtask == s) for s in (0, 1)}
    maxes = reader.read_union_state("remember", "maxes", Types.LONG()).collect()
    assert sorted(r.value for r in maxes) == sorted(per_subtask_max.values())
    rules_read = reader.read_broadcast_state("apply", "rules", Types.STRING(), Types.LONG()).collect()
    assert {r.key: r.value for r in rules_read} == dict(RULE_UPDATES)

    class Values(StateBootstrapFunction):
        def initialize_state(self, context):
            self.values = context.get_operator_state_store().get_list_state(ListStateDescriptor("values"))

        def process_element(self, row, ctx):
            self.values.add(row.v)

    class Rules(BroadcastStateBootstrapFunction):
        def process_element(self, row, ctx):
            ctx.get_broadcast_state(RULES).put(row.name, row.limit)

    values_df = spark.createDataFrame([(i,) for i in range(10)], "v long").repartition(2)
    rules_df = spark.createDataFrame([("limit", 99), ("floor", 3)], "name string, limit long")
    written = SavepointWriter.new_savepoint(spark, 16) \
        .with_operator("remember", OperatorTransformation.bootstrap_with(values_df).transform(Values())) \
        .with_operator("apply", OperatorTransformation.bootstrap_with(rules_df).transform(Rules())) \
        .write(str(workdir / "bootstrapped-operators"))
    back = SavepointReader.read(spark, written)
    assert sorted(r.value for r in back.read_list_state("remember", "values", Types.LONG()).collect()) == list(range(10))
    assert {r.key: r.value for r in back.read_broadcast_state("apply", "rules", Types.STRING(), Types.LONG())
            .collect()} == {"limit": 99, "floor": 3}


# -- the command line ------------------------------------------------------------------------------------------

def test_cli_dump_bootstrap_and_rekey(spark, tmp_path, tally_savepoint):
    from typer.testing import CliRunner

    from keyspan.cli.main import app

    path, out = tally_savepoint
    held = final_state(out)
    cli = CliRunner()
    result = cli.invoke(app, ["state", "dump", path, "--uid", "tally", "--format", "jsonl", str(tmp_path / "all"),
                              "--workdir", str(tmp_path / ".ks")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == ["avg", "count", "last", "seen", "timers", "total"]
    lines = [json.loads(line) for p in (tmp_path / "all" / "last").glob("part-*") for line in p.read_text().splitlines()]
    last: dict = {}
    for line in sorted(lines, key=lambda r: r["index"]):
        last.setdefault(line["key"], []).append(line["value"])
    assert last == {k: s["last"] for k, s in held.items()}

    result = cli.invoke(app, ["state", "dump", path, "--uid", "tally", "--state", "count", "--format", "parquet",
                              str(tmp_path / "count"), "--workdir", str(tmp_path / ".ks")])
    assert result.exit_code == 0, result.output
    counts = {r.key: r.value for r in spark.read.parquet(str(tmp_path / "count")).collect()}
    assert counts == {k: s["count"] for k, s in held.items()}

    # a bootstrap from that table, re-keyed to 32 key groups, reads back the same values
    result = cli.invoke(app, ["state", "bootstrap", str(tmp_path / "count"), str(tmp_path / "boot"), "--uid", "tally",
                              "--state", "count", "--key", "key", "--value", "value", "--workdir", str(tmp_path / ".ks")])
    assert result.exit_code == 0, result.output
    result = cli.invoke(app, ["state", "rekey", str(tmp_path / "boot"), "--max-parallelism", "32", str(tmp_path / "r32"),
                              "--workdir", str(tmp_path / ".ks")])
    assert result.exit_code == 0, result.output
    reader = SavepointReader.read(spark, str(tmp_path / "r32"))
    assert reader.max_parallelism == 32
    assert {r.key: decode(r.value) for r in reader.read_keyed_state("tally", state="count").collect()} == counts

    # bad input: a short message naming what is wrong, the trace in the log file
    result = cli.invoke(app, ["state", "dump", path, "--uid", "nope", "--format", "jsonl", str(tmp_path / "x"),
                              "--workdir", str(tmp_path / ".ks")])
    assert result.exit_code == 1 and "'nope'" in result.output and "Traceback" not in result.output
    assert "Traceback" in (tmp_path / ".ks" / "logs" / "state.log").read_text()
