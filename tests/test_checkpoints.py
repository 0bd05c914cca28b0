"""Incremental checkpoints and retention, on both state backends: a checkpoint after a small change
writes far less than the first; compaction and retention delete files no retained checkpoint
lists, never one a retained checkpoint or a savepoint uses."""

from __future__ import annotations

import pytest

from keyspan.checkpoint.metadata import MetadataStore
from keyspan.checkpoint.reader import read_keyed_state
from keyspan.io.storage import Storage
from keyspan.datastream import KeyedProcessFunction
from keyspan.datastream.connectors.file_system import DiscardingSink, FileSource, StreamFormat
from keyspan.datastream.state import ValueStateDescriptor
from keyspan.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend
from keyspan.runtime import options as run_options


class Latest(KeyedProcessFunction):
    def open(self, ctx):
        self.value = ctx.get_state(ValueStateDescriptor("latest"))

    def process_element(self, value, ctx):
        self.value.update(value[1])
        return iter(())


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
def test_incremental_checkpoints_and_cleanup(env, workdir, backend):
    env.set_state_backend(backend())
    config = env.get_checkpoint_config()
    config.set_num_retained_checkpoints(2)
    config.set_max_delta_chain(5)
    inputs = workdir / "in"
    inputs.mkdir()
    data = [(k, "initial-" + "x" * 50) for k in range(3000)]  # epoch 0 writes every key
    (inputs / "f-000.txt").write_text("\n".join(f"{k},{v}" for k, v in data))
    for i in range(1, 21):  # then each epoch changes 40 keys
        batch = [(k, f"update-{i}") for k in range(i * 7, i * 7 + 40)]
        data += batch
        (inputs / f"f-{i:03d}.txt").write_text("\n".join(f"{k},{v}" for k, v in batch))
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(inputs)) \
        .set_max_files_per_epoch(1).build()
    env.from_source(source, None, "lines").uid("src").map(lambda line: (int(line.split(",")[0]), line.split(",")[1])) \
        .key_by(lambda r: r[0]).process(Latest()).uid("latest").sink_to(DiscardingSink())
    env.execute("incremental")

    opts = run_options.current()
    store = MetadataStore(opts.metadata())
    checkpoints = store.list_checkpoints("incremental")
    first, second = checkpoints[0], checkpoints[1]
    assert second["bytes_written"] * 20 < first["bytes_written"], (first["bytes_written"], second["bytes_written"])

    storage = Storage(opts.checkpoint_root()).child("incremental")
    retained = [c for c in checkpoints if not c["discarded"]]
    assert len(retained) == 2
    referenced = {h["path"] for c in retained for hs in c["manifest"].values() for h in hs}
    on_disk = {f"state/latest/{name}" for name in storage.list("state/latest")}
    assert referenced <= on_disk, "a retained checkpoint lost a file"
    assert on_disk <= referenced, f"unreferenced files were kept: {sorted(on_disk - referenced)[:3]}"
    # compaction happened (the chain of small deltas was folded into full snapshots)
    assert any(h["kind"] == "full" and h["epoch"] > 0 for hs in retained[-1]["manifest"].values() for h in hs)

    state = read_keyed_state(storage, retained[-1]["manifest"], "latest", 128)["latest"]
    expected = {}
    for k, v in data:
        expected[k] = v
    assert state == expected


def test_epoch_phases_split_the_tasks_time_into_state_loading_processing_and_state_writes(env, workdir):
    """One keyed task per epoch (parallelism 1), so its state loading, record processing and state-file
    writes happen one after the other inside the epoch's Spark job: together at most the job's time."""
    env.set_parallelism(1)
    inputs = workdir / "in"
    inputs.mkdir()
    for i in range(4):
        (inputs / f"f-{i:03d}.txt").write_text("\n".join(f"{k},v{i}" for k in range(2000)))
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(inputs)) \
        .set_max_files_per_epoch(1).build()
    env.from_source(source, None, "lines").uid("src").map(lambda line: tuple(line.split(","))) \
        .key_by(lambda r: r[0]).process(Latest()).uid("latest").sink_to(DiscardingSink())
    phases = env.execute("phases").epoch_phases
    assert len(phases) >= 4
    for p in phases:
        parts = p["tasks.restore"] + p["tasks.busy"] + p["tasks.snapshot"]
        assert min(p["tasks.restore"], p["tasks.busy"], p["tasks.snapshot"]) >= 0 and parts <= p["tasks"], p
    assert all(p["tasks.busy"] > 0 and p["tasks.snapshot"] > 0 for p in phases[:4])  # 2,000 records, a delta each


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_retired_checkpoints_history_stays_bounded(database, tmp_path, request):
    """A long-running job commits a checkpoint per epoch; the rows of retired ones (and their stats)
    are kept for CHECKPOINT_HISTORY epochs only, so the store and the dashboard's history do not grow
    with the job's age. Retained checkpoints and any whose output is unpublished are always kept."""
    from keyspan.checkpoint import stats
    from keyspan.checkpoint.metadata import CHECKPOINT_HISTORY

    url = f"sqlite:///{tmp_path}/k.db" if database == "sqlite" else request.getfixturevalue("postgres_url")
    store = MetadataStore(url)
    row = dict(run_id="r", parallelism=2, max_parallelism=128, source_offsets={"0": {"index": 1}},
               manifest={"op": [{"path": "x", "bytes": 10}]}, tokens={}, operators=[], bytes_written=10, records=5)
    epochs = CHECKPOINT_HISTORY + 300
    for epoch in range(epochs):
        unpublished = epoch == 5  # its output never published (a crash between commit and publish)
        recorder = stats.checkpoint_recorder(store, "long", epoch, 1.0, 2.0, 10, 10)
        store.commit_checkpoint(discard=[epoch - 2] if epoch >= 2 else [], also=recorder, job_id="long", epoch=epoch,
                                sinks={"out": [{"path": "p"}]} if unpublished else {}, **row)
        if epoch == 0:
            store.commit_checkpoint(job_id="other", epoch=0, sinks={}, **row)  # another job's history is its own

    kept = [c["epoch"] for c in store.list_checkpoints("long")]
    newest = epochs - 1
    assert kept == [5] + list(range(newest - CHECKPOINT_HISTORY, newest + 1))
    assert [c["epoch"] for c in store.list_checkpoints("long", include_discarded=False)] == [newest - 1, newest]
    assert [c["epoch"] for c in store.list_checkpoints("other")] == [0]
    with store.engine.connect() as c:
        with_stats = sorted(r[0] for r in c.execute(
            stats.select(stats.checkpoint_stats.c.epoch).where(stats.checkpoint_stats.c.job_id == "long")))
    assert with_stats == kept
    history = stats.checkpoint_history(store, "long", limit=50)
    assert [h["epoch"] for h in history] == list(range(newest - 49, newest + 1))
    assert all(h["duration_ms"] == 1000.0 for h in history)
    assert store.latest_checkpoint("long")["epoch"] == newest


def test_the_commit_fsyncs_every_file_of_its_epoch_before_recording_the_checkpoint(env, workdir, monkeypatch):
    """Tasks write their state files and staged sink output without waiting for the disk; the
    driver's commit makes each one durable (fsync) before the metadata transaction that lists it, so
    a machine crash after a commit cannot leave a committed checkpoint pointing at lost bytes."""
    import os

    from keyspan.common import Encoder
    from keyspan.datastream.connectors.file_system import FileSink

    events = []
    real_fsync, real_commit = os.fsync, MetadataStore.commit_checkpoint

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def commit_checkpoint(self, **kwargs):
        events.append(("commit", kwargs["epoch"]))
        return real_commit(self, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(MetadataStore, "commit_checkpoint", commit_checkpoint)
    env.set_parallelism(2)
    inputs, output = workdir / "in", workdir / "out"
    inputs.mkdir()
    for i in range(3):
        (inputs / f"f-{i:03d}.txt").write_text("\n".join(f"{k},v{i}" for k in range(200)))
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(inputs)) \
        .set_max_files_per_epoch(1).build()
    lines = env.from_source(source, None, "lines").uid("src").map(lambda line: tuple(line.split(",")))
    lines.key_by(lambda r: r[0]).process(Latest()).uid("latest").sink_to(DiscardingSink())
    lines.map(lambda r: r[1]).sink_to(FileSink.for_row_format(str(output), Encoder.simple_string_encoder()).build()) \
        .uid("out")
    env.execute("synced")

    opts = run_options.current()
    storage, sink_storage = Storage(opts.checkpoint_root()).child("synced"), Storage(str(output))
    checkpoints = MetadataStore(opts.metadata()).list_checkpoints("synced")
    assert len(checkpoints) >= 3
    for c in checkpoints:
        own = [os.path.realpath(storage.full_path(h["path"]))
               for hs in c["manifest"].values() for h in hs if h["epoch"] == c["epoch"]]
        staged = [os.path.realpath(sink_storage.full_path(h["staged"])) for h in c["sinks"].get("out", [])]
        assert len(own) >= 2 and staged, (own, staged)  # a state file per keyed subtask, a part file
        recorded = events.index(("commit", c["epoch"]))
        synced_before = {path for kind, path in events[:recorded] if kind == "fsync"}
        assert set(own + staged) <= synced_before, sorted(set(own + staged) - synced_before)
    assert sum(len(p.read_text().split()) for p in output.rglob("part-*")) == 600
