"""A continuous FileSource reads every file that appears exactly once, whatever its name: a file whose
name sorts before files already read is read too (not one of those again), within a run, after a
restart from the job's checkpoint, and after a restore from a savepoint or a retained checkpoint
(both start the job's checkpoint folder afresh: the savepoint carries the order files were read in)."""

from __future__ import annotations

import time

from keyspan.common import WatermarkStrategy
from keyspan.datastream import StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSource, StreamFormat
from keyspan.datastream.functions import SinkFunction
from savepoint_helpers import BackgroundJob, stop_with_savepoint, store, use_options, wait_for_checkpoints


class Seen(SinkFunction):
    """The records delivered to the driver (after their checkpoint committed)."""

    def __init__(self):
        self.ids = []

    def invoke(self, value, context):
        self.ids.append(value)


def _write(folder, name: str) -> list[str]:
    ids = [f"{name}-{i}" for i in range(5)]
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(f'{{"id": "{i}"}}\n' for i in ids))
    tmp.rename(folder / f"{name}.jsonl")  # the source never sees a file half written
    return ids


def _start(folder, job: str) -> tuple[BackgroundJob, Seen]:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    source = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), str(folder)) \
        .monitor_continuously().build()
    seen = Seen()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "files").uid("files") \
        .map(lambda r: r["id"]).uid("ids").add_sink(seen)
    return BackgroundJob(env, job), seen


def _until(seen: Seen, count: int, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while len(seen.ids) < count and time.time() < deadline:
        time.sleep(0.1)


def _unsorted_run(folder, job: str) -> str:
    """Run the job while files arrive whose names sort before files already read; each file's records
    are delivered exactly once. Stops the job with a savepoint and returns its path."""
    expected = _write(folder, "m")
    running, seen = _start(folder, job)
    wait_for_checkpoints(job, 1, job=running)
    _until(seen, 5)
    for name in ("a", "z", "b"):  # "a" and "b" sort before files already read
        expected += _write(folder, name)
        _until(seen, len(expected))
    time.sleep(1)  # a few more epochs: nothing is read twice
    savepoint = stop_with_savepoint(job)
    running.join()
    assert sorted(seen.ids) == sorted(expected)
    return savepoint


def _run_once_more(folder, job: str, name: str) -> list[str]:
    """Write file ``name`` while the job is stopped, run the job until it delivered that file's records
    and a moment more, stop it with a savepoint; what the run delivered."""
    _write(folder, name)
    running, seen = _start(folder, job)
    wait_for_checkpoints(job, 1, job=running)
    _until(seen, 5)
    time.sleep(1)
    stop_with_savepoint(job)
    running.join()
    return seen.ids


def test_files_are_read_once_whatever_order_their_names_sort_in(workdir):
    folder = workdir / "in"
    folder.mkdir()
    _unsorted_run(folder, "unsorted-files")
    # resumed from its latest checkpoint, after a file that sorts first arrived while it was stopped
    assert sorted(_run_once_more(folder, "unsorted-files", "0")) == [f"0-{i}" for i in range(5)]


def test_a_restore_from_a_savepoint_or_retained_checkpoint_reads_on_from_the_same_files(workdir):
    from keyspan.checkpoint.savepoint import checkpoint_dir
    from keyspan.io.storage import Storage
    from keyspan.runtime import options

    folder = workdir / "in"
    folder.mkdir()
    use_options(savepoint_path=_unsorted_run(folder, "restored-files"))
    assert sorted(_run_once_more(folder, "restored-files", "0")) == [f"0-{i}" for i in range(5)]

    latest = store().list_checkpoints("restored-files")[-1]["epoch"]
    retained = Storage(options.current().checkpoint_root()).child("restored-files").url(checkpoint_dir(latest))
    use_options(savepoint_path=retained)
    assert sorted(_run_once_more(folder, "restored-files", "1")) == [f"1-{i}" for i in range(5)]


def test_a_source_reads_every_path_it_is_given_files_of_the_same_name_included(workdir):
    """PyFlink's ``for_record_stream_format(format, *paths)``: folders and single files, bounded and
    continuously monitored; equal file names under two folders are two files."""
    first, second, third = (workdir / name for name in ("first", "second", "third"))
    for folder in (first, second, third):
        folder.mkdir()
    expected = _write_ids(first, "part") + _write_ids(second, "part")
    _write_ids(third, "ignored")
    single = third / "single.jsonl"
    single.write_text('{"id": "single"}\n')
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    bounded = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), str(first), str(second),
                                                  str(single)).build()
    with env.from_source(bounded, WatermarkStrategy.no_watermarks(), "paths").map(lambda r: r["id"]) \
            .execute_and_collect("several-paths") as records:
        assert sorted(records) == sorted(expected + ["single"])

    source = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), str(first), str(second)) \
        .monitor_continuously().build()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(200)
    seen = Seen()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "files").uid("files") \
        .map(lambda r: r["id"]).uid("ids").add_sink(seen)
    running = BackgroundJob(env, "monitored-paths")
    wait_for_checkpoints("monitored-paths", 1, job=running)
    _until(seen, len(expected))
    for folder in (second, first):
        expected += _write_ids(folder, "later")
        _until(seen, len(expected))
    time.sleep(1)  # a few more epochs: nothing is read twice
    stop_with_savepoint("monitored-paths")
    running.join()
    assert sorted(seen.ids) == sorted(expected)


def _write_ids(folder, name: str) -> list[str]:
    """A file of five records whose ids name their folder, written as ``_write`` writes them."""
    ids = [f"{folder.name}/{i}" for i in range(5)]
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(f'{{"id": "{i}"}}\n' for i in ids))
    tmp.rename(folder / f"{name}.jsonl")
    return ids
