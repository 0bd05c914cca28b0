"""FileSink with Flink's layout: bucket directories decided per record, part files named by
OutputFileConfig, rolled by size within an epoch, all staged until the checkpoint commits; the
Parquet bulk format is readable by pyarrow."""

from __future__ import annotations

import datetime
import json
import os
import posixpath
import signal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from job_processes import committed_epoch, crash_seed, run_here, run_with_kills, start_job
from keyspan.common import Row, Types, WatermarkStrategy
from keyspan.common.serialization import Encoder
from keyspan.datastream.connectors import BucketAssigner, FileSink, OutputFileConfig, RollingPolicy
from keyspan.datastream.formats.parquet import ParquetBulkWriters


def _published(root) -> dict[str, bytes]:
    """Relative path → bytes of every visible file (staging excluded)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".staging"]
        for f in files:
            path = os.path.join(folder, f)
            out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


class ByUser(BucketAssigner):
    def get_bucket_id(self, element, context):
        return f"user={element.split(',')[0]}"


class EvenOdd(BucketAssigner):
    def get_bucket_id(self, element, context):
        return "odd" if int(element.split()[-1]) % 2 else "even"


def test_writer_stages_rolled_part_files_and_publishes_them_only_on_commit(tmp_path):
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()) \
        .with_rolling_policy(RollingPolicy.default_rolling_policy(part_size=20)) \
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("orders").with_part_suffix(".csv").build()) \
        .with_bucket_assigner(ByUser()).build()
    writer = sink.create_writer(3, 12, "tok")
    for i in range(6):
        writer.write(f"a,{i:05d}")  # 8 bytes per line: a file rolls once it holds 20 bytes or more
    writer.write("b,00000")
    handles = writer.finish()
    assert _published(tmp_path / "out") == {}  # nothing visible before the checkpoint commits
    sink.publish(handles)
    sink.publish(handles)  # idempotent, as after a crash between commit and publish
    assert _published(tmp_path / "out") == {
        "user=a/orders-0000000012-0003.csv": b"a,00000\na,00001\na,00002\n",
        "user=a/orders-0000000012-0003-1.csv": b"a,00003\na,00004\na,00005\n",
        "user=b/orders-0000000012-0003.csv": b"b,00000\n",
    }
    assert os.listdir(tmp_path / "out" / ".staging") == []


def test_discarded_epoch_leaves_nothing(tmp_path):
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()
    writer = sink.create_writer(0, 1, "tok")
    writer.write("x")
    sink.discard(writer.finish())
    assert _published(tmp_path / "out") == {}


def test_date_time_bucket_assigner_formats_wall_clock_with_java_pattern(tmp_path):
    assigner = BucketAssigner.date_time_bucket_assigner("yyyy-MM-dd--HH", "UTC")
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()) \
        .with_bucket_assigner(assigner).build()
    before = datetime.datetime.now(datetime.timezone.utc)
    writer = sink.create_writer(0, 5, "tok")
    writer.write("x")
    sink.publish(writer.finish())
    after = datetime.datetime.now(datetime.timezone.utc)
    [path] = _published(tmp_path / "out")
    assert path.split("/")[0] in {before.strftime("%Y-%m-%d--%H"), after.strftime("%Y-%m-%d--%H")}
    assert BucketAssigner.date_time_bucket_assigner("yyyy/MM/dd 'at' HH", "GMT-08:00")._strftime == "%Y/%m/%d at %H"
    with pytest.raises(ValueError, match="unknown time zone"):
        BucketAssigner.date_time_bucket_assigner("yyyy", "Mars/Olympus")


def test_bulk_format_rolls_on_checkpoints_only():
    with pytest.raises(TypeError, match="on_checkpoint_rolling_policy"):
        FileSink.for_bulk_format("/tmp/x", ParquetBulkWriters.for_row_type(Types.ROW_NAMED(["a"], [Types.INT()]))) \
            .with_rolling_policy(RollingPolicy.default_rolling_policy())


def test_job_with_rolling_and_bucketing_sink_gives_exact_layout_and_contents(env, tmp_path):
    out = tmp_path / "out"
    data = [f"{'ab'[i % 2]},{i:05d}" for i in range(400)]
    sink = FileSink.for_row_format(str(out), Encoder.simple_string_encoder()) \
        .with_bucket_assigner(ByUser()) \
        .with_rolling_policy(RollingPolicy.default_rolling_policy(part_size=800)) \
        .with_output_file_config(OutputFileConfig("part", ".txt")).build()
    env.from_collection(data).map(lambda s: s).set_parallelism(1).sink_to(sink).set_parallelism(1)
    env.execute("rolling")
    files = _published(out)
    assert sorted({p.split("/")[0] for p in files}) == ["user=a", "user=b"]
    for path, content in files.items():
        bucket, name = path.split("/")
        assert name.startswith("part-") and name.endswith(".txt")
        assert all(line.startswith(bucket[-1] + ",") for line in content.decode().splitlines())
    # lines of 8 bytes, rolled once a part file holds 800 bytes: within one bucket, epoch and subtask
    # every part file but the last holds exactly 100 lines, and at least one file rolled per bucket
    groups: dict[str, list[tuple[int, int]]] = {}
    for path, content in files.items():
        stem = path[:-len(".txt")].split("-")
        n = int(stem[3]) if len(stem) == 4 else 0
        groups.setdefault("-".join(stem[:3]), []).append((n, len(content)))
    for parts in groups.values():
        parts.sort()
        assert [n for n, _ in parts] == list(range(len(parts)))
        assert all(size == 800 for _, size in parts[:-1]) and 0 < parts[-1][1] <= 800, parts
    assert all(any(len(parts) > 1 for g, parts in groups.items() if g.startswith(b)) for b in ("user=a", "user=b"))
    lines = sorted(line for c in files.values() for line in c.decode().splitlines())
    assert lines == sorted(data)


def test_simple_string_encoder_writes_a_declared_type_as_flink_s_java_object(env, tmp_path):
    """PyFlink hands a typed stream to Flink's SimpleStringEncoder as Java objects, which it writes
    with ``toString``; a stream without a declared type is written as Python's ``str``."""
    env.set_parallelism(1)
    row = Types.ROW_NAMED(["name", "n", "ok", "x"], [Types.STRING(), Types.INT(), Types.BOOLEAN(), Types.DOUBLE()])
    streams = {
        "row": env.from_collection([Row(name="ann", n=3, ok=True, x=1e7), Row(name="bob", n=None, ok=False, x=2.0)],
                                   type_info=row),
        "tuple": env.from_collection([("ann", 3)], type_info=Types.TUPLE([Types.STRING(), Types.LONG()])),
        "keyed": env.from_collection([("ann", 1.0), ("ann", 2.5)], type_info=Types.TUPLE([Types.STRING(), Types.DOUBLE()]))
                    .key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + b[1])),
        "untyped": env.from_collection([("ann", True)]),
    }
    for name, stream in streams.items():
        stream.sink_to(FileSink.for_row_format(str(tmp_path / name), Encoder.simple_string_encoder()).build())
    env.execute("simple-string")
    written = {name: sorted(b"".join(_published(tmp_path / name).values()).decode().splitlines()) for name in streams}
    assert written == {
        "row": ["+I[ann, 3, true, 1.0E7]", "+I[bob, null, false, 2.0]"],
        "tuple": ["(ann,3)"],
        "keyed": ["(ann,1.0)", "(ann,3.5)"],
        "untyped": ["('ann', True)"],
    }


def test_legacy_streaming_file_sink_through_add_sink_writes_as_file_sink_does(env, tmp_path):
    from keyspan.datastream.connectors import StreamingFileSink

    sink = StreamingFileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()) \
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("legacy").build()).build()
    env.from_collection([f"line {i}" for i in range(20)]).add_sink(sink)
    env.execute("legacy-sink")
    files = _published(tmp_path / "out")
    assert files and all(name.startswith("legacy-") for name in files)
    assert sorted(b"".join(files.values()).decode().splitlines()) == sorted(f"line {i}" for i in range(20))


def test_parquet_bulk_sink_is_readable_by_pyarrow(env, tmp_path):
    row = Types.ROW_NAMED(["user", "amount", "tags"], [Types.STRING(), Types.LONG(), Types.LIST(Types.STRING())])
    data = [Row(user=f"u{i % 4}", amount=i, tags=[str(i)] * (i % 3)) for i in range(100)]
    sink = FileSink.for_bulk_format(str(tmp_path / "pq"), ParquetBulkWriters.for_row_type(row)) \
        .with_output_file_config(OutputFileConfig.builder().with_part_suffix(".parquet").build()).build()
    env.from_collection(data, type_info=row).sink_to(sink)
    env.execute("parquet")
    files = sorted(p for p in _published(tmp_path / "pq"))
    assert files and all(f.endswith(".parquet") and f.startswith("part-") for f in files)
    rows = [r for f in files for r in pq.read_table(tmp_path / "pq" / f).to_pylist()]
    assert pq.read_table(tmp_path / "pq" / files[0]).schema.field("amount").type == "int64"
    assert sorted(rows, key=lambda r: r["amount"]) == [r.as_dict() for r in data]


def test_parquet_columnar_row_input_format_reads_the_sink_s_files_back(env, tmp_path):
    """PyFlink's way to read Parquet: FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(
    DataTypes.ROW([...]))), fields by column name (case-insensitive if asked), a missing one None."""
    from keyspan.datastream.connectors import FileSource
    from keyspan.datastream.formats.parquet import ParquetColumnarRowInputFormat
    from keyspan.table import DataTypes

    written = Types.ROW_NAMED(["User", "amount"], [Types.STRING(), Types.LONG()])
    data = [Row(User=f"u{i % 4}", amount=i) for i in range(30)]
    env.from_collection(data, type_info=written).sink_to(
        FileSink.for_bulk_format(str(tmp_path / "pq"), ParquetBulkWriters.for_row_type(written)).build())
    env.execute("parquet-out")
    wanted = DataTypes.ROW([DataTypes.FIELD("amount", DataTypes.BIGINT()), DataTypes.FIELD("user", DataTypes.STRING()),
                            DataTypes.FIELD("note", DataTypes.STRING())])
    source = FileSource.for_bulk_file_format(
        ParquetColumnarRowInputFormat(wanted, batch_size=512, is_case_sensitive=False), str(tmp_path / "pq")).build()
    stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "parquet-in")
    assert stream.get_type() == wanted
    back = stream.execute_and_collect(limit=100)
    assert sorted(back, key=lambda r: r.amount) == [Row(amount=r.amount, user=r.User, note=None) for r in data]
    with pytest.raises(TypeError, match="needs a BulkFormat"):
        FileSource.for_bulk_file_format(object(), str(tmp_path / "pq"))


def test_orc_bulk_sink_is_readable_by_pyarrow_with_the_writer_properties_applied(env, tmp_path):
    """PyFlink's OrcBulkWriters.for_row_type(DataTypes.ROW([...]), writer_properties): ORC files that
    another reader (pyarrow's ORC reader) reads back, compressed as ``orc.compress`` asks."""
    import pyarrow.orc as orc

    from keyspan.common import Configuration
    from keyspan.datastream.formats.orc import OrcBulkWriters
    from keyspan.table import DataTypes

    row = DataTypes.ROW([DataTypes.FIELD("user", DataTypes.STRING()), DataTypes.FIELD("amount", DataTypes.BIGINT()),
                         DataTypes.FIELD("tags", DataTypes.ARRAY(DataTypes.STRING()))])
    data = [Row(user=f"u{i % 4}", amount=i, tags=[str(i)] * (i % 3)) for i in range(60)]
    properties = Configuration().set_string("orc.compress", "SNAPPY").set_string("orc.bloom.filter.columns", "user")
    sink = FileSink.for_bulk_format(str(tmp_path / "orc"), OrcBulkWriters.for_row_type(row, properties)) \
        .with_output_file_config(OutputFileConfig.builder().with_part_suffix(".orc").build()).build()
    env.from_collection(data, type_info=row).sink_to(sink)
    env.execute("orc")
    files = sorted(_published(tmp_path / "orc"))
    assert files and all(f.endswith(".orc") and f.startswith("part-") for f in files)
    readers = [orc.ORCFile(str(tmp_path / "orc" / f)) for f in files]
    assert {r.compression for r in readers} == {"SNAPPY"}
    assert readers[0].schema.field("amount").type == "int64"
    rows = [r for reader in readers for r in reader.read().to_pylist()]
    assert sorted(rows, key=lambda r: r["amount"]) == [r.as_dict() for r in data]
    with pytest.raises(ValueError, match="orc.compress=LZO is not supported"):
        OrcBulkWriters.for_row_type(row, Configuration().set_string("orc.compress", "LZO"))
    with pytest.raises(ValueError, match=r"orc.bloom.filter.columns names \['name'\]"):
        OrcBulkWriters.for_row_type(row, Configuration().set_string("orc.bloom.filter.columns", "name"))
    assert OrcBulkWriters.for_row_type(row).get_row_type() == row  # a RowDataBulkWriterFactory, as in PyFlink
    with pytest.raises(TypeError, match="OrcBulkWriters.for_row_type needs"):
        OrcBulkWriters.for_row_type(Types.STRING())


def _visible_lines(root) -> dict[str, list[str]]:
    return {path: sorted(content.decode().splitlines()) for path, content in _published(root).items()
            if not path.startswith(".compaction/")}


def test_compaction_joins_part_files_when_its_strategy_fires(env, tmp_path):
    """enable_compact(FileCompactStrategy, FileCompactor): committed part files wait hidden until their
    bucket's strategy fires (every 3 checkpoints, or at a size), then become one compacted-<first file>;
    the end of a bounded job compacts what is left. Every record is visible exactly once."""
    from keyspan.datastream.connectors.file_system import FileCompactor, FileCompactStrategy

    env.set_parallelism(2)
    env.set_max_records_per_epoch(10)
    every_three = FileCompactStrategy.builder().enable_compaction_on_checkpoint(3).build()
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()) \
        .with_bucket_assigner(EvenOdd()) \
        .enable_compact(every_three, FileCompactor.concat_file_compactor(b"")) \
        .build()
    env.from_collection(list(range(70))).map(lambda n: f"line {n}").sink_to(sink)
    env.execute("compacting")
    files = _visible_lines(tmp_path / "out")
    assert all(posixpath.basename(p).startswith("compacted-part-") for p in files), sorted(files)
    for bucket in ("even", "odd"):
        assert len([p for p in files if p.startswith(bucket + "/")]) >= 2  # compacted during the run, not only at its end
    lines = [line for content in files.values() for line in content]
    assert sorted(lines) == sorted(f"line {n}" for n in range(70))
    assert json.loads((tmp_path / "out" / ".compaction" / "state.json").read_text()) == {"plan": [], "waiting": []}

    by_size = FileCompactStrategy.builder().set_size_threshold(1).set_num_compact_threads(2).build()
    sink = FileSink.for_row_format(str(tmp_path / "single"), Encoder.simple_string_encoder()) \
        .enable_compact(by_size, FileCompactor.identical_file_compactor()).build()
    env.from_collection(list(range(30))).map(lambda n: f"line {n}").sink_to(sink)
    env.execute("compacting-identical")
    files = _visible_lines(tmp_path / "single")
    assert all(p.startswith("compacted-part-") for p in files) and len(files) >= 3  # one per part file
    assert sorted(line for content in files.values() for line in content) == sorted(f"line {n}" for n in range(30))

    plain = FileSink.for_row_format(str(tmp_path / "plain"), Encoder.simple_string_encoder()) \
        .enable_compact(every_three, FileCompactor.concat_file_compactor()).disable_compact().build()
    assert not plain.compacts
    with pytest.raises(ValueError, match="At least one trigger condition must be configured"):
        FileCompactStrategy.builder().build()
    with pytest.raises(ValueError, match="should be more than 0"):
        FileCompactStrategy.builder().enable_compaction_on_checkpoint(0)
    row = Types.ROW_NAMED(["n"], [Types.LONG()])
    with pytest.raises(TypeError, match="breaks a bulk format's files"):
        FileSink.for_bulk_format(str(tmp_path / "pq"), ParquetBulkWriters.for_row_type(row)) \
            .enable_compact(every_three, FileCompactor.concat_file_compactor())


def test_file_source_reads_a_bucketed_sink_s_folder_with_its_subfolders(env, tmp_path):
    """A FileSource on a folder reads the files of its subfolders too (Flink's file enumerators are
    recursive), skipping files and folders named .* or _* (staging, compaction, markers)."""
    from keyspan.datastream.connectors import FileEnumeratorProvider, FileSource, FileSplitAssignerProvider
    from keyspan.datastream.connectors.file_system import StreamFormat

    env.set_parallelism(2)
    env.from_collection([f"line {n}" for n in range(40)]).sink_to(
        FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).with_bucket_assigner(EvenOdd())
        .build())
    env.execute("bucketed-out")
    (tmp_path / "out" / "_SUCCESS").write_text("not data")
    (tmp_path / "out" / "even" / ".part-in-progress").write_text("not data either")
    (tmp_path / "out" / "_temporary" / "0").mkdir(parents=True)
    (tmp_path / "out" / "_temporary" / "0" / "part").write_text("nor this")
    assert {p.split("/")[0] for p in _published(tmp_path / "out")} >= {"even", "odd", "_temporary"}
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path / "out")) \
        .set_file_enumerator(FileEnumeratorProvider.default_non_splittable_file_enumerator()) \
        .set_split_assigner(FileSplitAssignerProvider.locality_aware_split_assigner()).build()
    back = env.from_source(source, WatermarkStrategy.no_watermarks(), "back").execute_and_collect(limit=100)
    assert sorted(back) == sorted(f"line {n}" for n in range(40))
    with pytest.raises(TypeError, match="set_file_enumerator needs a FileEnumeratorProvider"):
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).set_file_enumerator("all")


# --- exactly-once after SIGKILL ---------------------------------------------------------------------

BUCKETED_JOB = Path(__file__).parent / "jobs" / "bucketed_sink_job.py"


def _bucketed_env(output: Path, compact_every: int | None) -> dict:
    env = {"BUCKETED_JOB_OUTPUT": str(output)}
    if compact_every:
        env["BUCKETED_JOB_COMPACT"] = str(compact_every)
    return env


def _run_bucketed(workdir: Path, output: Path, compact_every: int | None = None):
    return start_job(BUCKETED_JOB, workdir, _bucketed_env(output, compact_every))


def _layout(output: Path) -> dict[tuple[str, int, int], list[str]]:
    """(bucket, epoch, subtask) → sorted lines of its part files; checks the rolling rule on the way."""
    groups: dict[tuple[str, int, int], list[tuple[int, bytes]]] = {}
    for path, content in _published(output).items():
        bucket, name = path.split("/")
        assert name.startswith("counts-") and name.endswith(".jsonl"), name
        parts = name[:-len(".jsonl")].split("-")
        groups.setdefault((bucket, int(parts[1]), int(parts[2])), []).append((int(parts[3]) if len(parts) == 4 else 0,
                                                                               content))
    out = {}
    for key, files in groups.items():
        files.sort()
        assert [n for n, _ in files] == list(range(len(files))), (key, files)
        assert all(len(c) >= 400 for _, c in files[:-1]), key  # rolled only once 400 bytes were reached
        out[key] = sorted(line for _, c in files for line in c.decode().splitlines())
    return out


@pytest.mark.timeout(1800)  # three driver start-ups on a shared 2-core machine
def test_bucketed_rolling_sink_is_exactly_once_after_sigkill(tmp_path, spark):
    run_here(BUCKETED_JOB, tmp_path / "clean", _bucketed_env(tmp_path / "clean-out", None))
    reference = _layout(tmp_path / "clean-out")
    assert {b for b, _, _ in reference} == {"class=0", "class=1", "class=2"}
    assert len({e for _, e, _ in reference}) >= 10  # 2400 records, 150 per epoch
    assert sum(len(v) for v in reference.values()) == 2400

    seed = crash_seed()
    work, out = tmp_path / "crashy", tmp_path / "crashy-out"

    def only_committed_epochs_visible():
        assert all(e <= committed_epoch(work) for _, e, _ in _layout(out)), f"seed {seed}"

    run_with_kills(lambda: _run_bucketed(work, out), work, 2, seed, jitter_s=0.5, wait_s=180, finish_timeout=600,
                   after_kill=only_committed_epochs_visible, max_runs=8)
    assert _layout(out) == reference


@pytest.mark.timeout(1800)
def test_compacting_sink_is_exactly_once_after_sigkill(tmp_path, spark):
    """A compacting FileSink killed right after a commit published its files and before it compacted
    them, then at random points (while epochs run, commit or compact), ends with the same compacted
    files as a run without failures, and no record is ever visible twice."""
    run_here(BUCKETED_JOB, tmp_path / "clean", _bucketed_env(tmp_path / "clean-out", 4))
    reference = _visible_lines(tmp_path / "clean-out")
    assert all(posixpath.basename(p).startswith("compacted-counts-") for p in reference)
    assert len(reference) >= 9  # three buckets, compacted about every fourth of 16 epochs
    assert len([line for lines in reference.values() for line in lines]) == 2400

    seed = crash_seed()
    work, out = tmp_path / "crashy", tmp_path / "crashy-out"

    def never_visible_twice():
        lines = [line for lines in _visible_lines(out).values() for line in lines]
        assert len(lines) == len(set(lines)), f"seed {seed}"

    # epoch 3 is the first whose commit compacts (files since epoch 0, every 4 checkpoints)
    killed = start_job(BUCKETED_JOB, work, {**_bucketed_env(out, 4), "BUCKETED_JOB_KILL_BEFORE_COMPACTING": "3"})
    killed.communicate(timeout=600)
    assert killed.returncode == -signal.SIGKILL and committed_epoch(work) == 3
    never_visible_twice()
    run_with_kills(lambda: _run_bucketed(work, out, compact_every=4), work, 2, seed, jitter_s=0.5, wait_s=180,
                   finish_timeout=600, after_kill=never_visible_twice, max_runs=8)
    assert _visible_lines(out) == reference
