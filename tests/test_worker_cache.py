"""A Python worker's cached keyed state when Spark runs a subtask's epochs on different workers (it
hands a task to whichever worker is idle): a cache parked a few epochs ago confirms its own committed
changes and catches up from the checkpoint's deltas, also across a compaction right after its epoch
(from the full snapshot's catch-up delta); otherwise it is rebuilt. Either way its state equals the
checkpoint's, and restores and savepoints never read catch-up deltas. Epochs further apart than
Spark's idle minute keep their workers (``JobRunner._keep_workers``)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from keyspan.checkpoint import reader
from keyspan.checkpoint.handles import is_catch_up
from keyspan.checkpoint.manifest import next_manifest, restore_order
from keyspan.checkpoint.savepoint import load_savepoint, write_checkpoint_metadata, write_savepoint
from keyspan.datastream import KeyedProcessFunction
from keyspan.datastream.state import ValueStateDescriptor
from keyspan.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend
from keyspan.datastream.transformation import OperatorKind
from keyspan.io.storage import Storage
from keyspan.runtime import options as run_options
from keyspan.runtime.planner import InputFormat, OpSpec, StagePlan
from keyspan.runtime.protocol import EpochContext, TimeContext
from keyspan.runtime.worker import handoff, instances, state_io
from keyspan.state.api import EVENT_TIME
from keyspan.state.keygroups import assign_to_key_group

MAX_PARALLELISM = 128
COUNT = ValueStateDescriptor("count")


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(COUNT)

    def process_element(self, value, ctx):
        yield value


class Tally(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n"))

    def process_element(self, value, ctx):
        self.n.update((self.n.value() or 0) + 1)
        yield value


class Job:
    """One keyed subtask (parallelism 1) run epoch by epoch on whichever of two workers the test
    says, committed the way the driver commits: manifest, tokens, the last few epochs' tokens."""

    def __init__(self, root, backend, max_chain: int):
        self.storage = Storage(root.as_uri())
        self.backend = backend
        self.max_chain = max_chain
        self.op = OpSpec(index=0, uid="count", uid_generated=False, name="count", kind=OperatorKind.KEYED_PROCESS,
                         function=Count())
        self.plan = StagePlan(stage_id=0, parallelism=1, max_parallelism=MAX_PARALLELISM,
                              input_format=InputFormat.EXCHANGE, entry=[0], ops=[self.op], exits=[], keyed=True)
        self.run_id = uuid.uuid4().hex
        self.workers = {"A": {}, "B": {}}  # each worker's instance cache
        self.committed = {"epoch": -1, "manifest": {}, "tokens": {}}
        self.recent: dict[int, dict] = {}
        self.expected: dict[str, int] = {}
        self.history: list[tuple[dict, dict]] = []  # (checkpoint, state) before each epoch

    def epoch(self, worker: str, counts: dict[str, int], notes=None, ended_runs=(), work=None) -> tuple[object, int, list]:
        """Run the next epoch on ``worker``, setting ``counts`` (None: clearing the key's state) and
        calling ``work(instance)``; the instance, bytes it loaded, files it wrote. With ``notes`` (a
        folder), the task ends as in a Spark worker: it leaves a note of the files it wrote for the other
        workers. ``ended_runs``: the runs the driver says ended."""
        epoch = self.committed["epoch"] + 1
        ctx = EpochContext(run_id=self.run_id, epoch=epoch, committed_epoch=self.committed["epoch"],
                           committed_tokens=self.committed["tokens"], manifest=self.committed["manifest"],
                           storage=self.storage, backend=self.backend, max_chain=self.max_chain, full_all=False,
                           time=TimeContext(origins={}, state={}, now=0, finished=[]), recent_tokens=dict(self.recent),
                           ended_runs=tuple(ended_runs))
        instances._INSTANCES = self.workers[worker]
        inst, restored = instances.acquire(self.op, self.plan, 0, 0, ctx, keyed=True)
        assert self.state_of(inst) == self.expected  # the cache holds exactly the committed state
        state = inst.runtime_context.get_state(COUNT)
        for key, value in counts.items():
            inst.backend.set_current_key(key, assign_to_key_group(key, MAX_PARALLELISM))
            state.update(value) if value is not None else state.clear()
        if work is not None:
            work(inst)
        self.history.append((self.committed, dict(self.expected)))
        token = uuid.uuid4().hex[:8]
        handles, tokens = state_io.snapshot([inst], ctx, 0, 1, token)
        instances.park([inst], epoch, token)
        if notes is not None:
            handoff.leave_notes(str(notes), ctx, [inst], handles, token)
        self.last_context = ctx
        self.committed = {"epoch": epoch, "manifest": next_manifest(self.committed["manifest"], handles),
                          "tokens": tokens}
        self.recent[epoch] = tokens
        self.expected.update(counts)
        self.expected = {k: v for k, v in self.expected.items() if v is not None}
        return inst, restored, handles

    def wait_for_next_task(self, worker: str, notes) -> None:
        """``worker`` ran another subtask in the last epoch and waits for its next task (as a Spark
        worker does after ``handoff.start``); the task arrives and stops the wait."""
        instances._INSTANCES = self.workers[worker]
        handoff.start(str(notes), self.last_context, [], [])
        handoff.wait()

    def write_checkpoint_file(self) -> None:
        """What the driver writes right after each commit: the checkpoint's ``_metadata.json``."""
        write_checkpoint_metadata(self.storage, {
            "job_id": "job", "epoch": self.committed["epoch"], "max_parallelism": MAX_PARALLELISM, "parallelism": 1,
            "source_offsets": {}, "operators": [], "manifest": self.committed["manifest"]}, job_name="job", key=None)

    def retry_last_epoch(self) -> None:
        """The last epoch's attempt is not the one committed: the checkpoint before it is the latest."""
        self.recent.pop(self.committed["epoch"])
        self.committed, self.expected = self.history.pop()

    @staticmethod
    def state_of(inst) -> dict:
        state = inst.runtime_context.get_state(COUNT)
        values = {}
        for kg, key in list(inst.backend.keys_of("count")):
            inst.backend.set_current_key(key, kg)
            values[key] = state.value()
        return values


@pytest.fixture(autouse=True)
def _own_instance_cache():
    saved = instances._INSTANCES
    yield
    instances._INSTANCES = saved


def test_a_worker_frees_a_run_the_driver_ended_at_the_next_run_s_first_task(tmp_path):
    """A Python worker outlives jobs. The state it caches for a run the driver says ended goes at the
    next task of another run, long before the idle time; a run that is running again (resumed) keeps its
    own, and so does a run nobody said ended."""
    first = Job(tmp_path / "first", HashMapStateBackend(), max_chain=4)
    other = Job(tmp_path / "other", HashMapStateBackend(), max_chain=4)
    second = Job(tmp_path / "second", HashMapStateBackend(), max_chain=4)
    other.workers = second.workers = first.workers  # one worker, three runs
    first.epoch("A", {"a": 1})
    other.epoch("A", {"b": 1})
    cached_runs = lambda: {key[0] for key in first.workers["A"]}  # noqa: E731
    assert cached_runs() == {first.run_id, other.run_id}
    kept = first.epoch("A", {"a": 2}, ended_runs=[first.run_id])[0]  # resumed: its own cache stays
    assert kept is first.epoch("A", {"a": 3})[0]
    second.epoch("A", {"c": 1}, ended_runs=[first.run_id])
    assert cached_runs() == {other.run_id, second.run_id}  # the ended run is gone, the other one idles on


class Payload:
    """A state value the test can watch being freed (a weak reference to it dies)."""


def test_a_dropped_instance_s_state_is_freed_at_once_not_by_a_later_full_collection(tmp_path):
    """A backend and its state objects refer to each other, and a worker's objects stay frozen between
    tasks (``keyspan.common.garbage``), so the cyclic collector would free a dropped instance's state
    only tasks later. Dropping it frees its state at once."""
    import gc
    import weakref

    job = Job(tmp_path / "ended", HashMapStateBackend(), max_chain=4)
    later = Job(tmp_path / "later", HashMapStateBackend(), max_chain=4)
    later.workers = job.workers
    watched = []

    def keep_a_payload(inst):
        inst.backend.set_current_key("a", assign_to_key_group("a", MAX_PARALLELISM))
        payload = Payload()
        inst.runtime_context.get_state(ValueStateDescriptor("payload")).update(payload)
        watched.append(weakref.ref(payload))

    job.epoch("A", {"a": 1}, work=keep_a_payload)
    gc.disable()
    try:
        later.epoch("A", {"b": 1}, ended_runs=[job.run_id])
        assert watched[0]() is None
    finally:
        gc.enable()


def _written(handles, kind):
    return [h for h in handles if h["kind"] == kind]


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
def test_a_cache_catches_up_across_the_compaction_right_after_its_epoch(tmp_path, backend):
    job = Job(tmp_path / "chk", backend(), max_chain=1)
    keys = [f"k{i:03d}" for i in range(300)]
    a, restored, _ = job.epoch("A", {k: 1 for k in keys})  # a first delta: the chain's base
    assert restored == 0
    assert job.epoch("A", {k: 2 for k in keys[:10]})[0] is a
    # Spark runs epoch 2 on worker B: it rebuilds the subtask, and the chain is due for compaction
    b, rebuilt, handles = job.epoch("B", {k: 3 for k in keys[10:20]})
    assert b is not a and rebuilt > 0
    full, catch_up = _written(handles, "full"), _written(handles, "delta")
    assert len(full) == 1 and len(catch_up) == 1 and is_catch_up(catch_up[0]) and catch_up[0]["epoch"] == 2
    assert catch_up[0]["bytes"] * 5 < full[0]["bytes"]  # the epoch's 10 keys, not the subtask's 300

    # worker A's cache of epoch 1 confirms its own committed epoch and applies only the catch-up delta
    again, read, _ = job.epoch("A", {k: 4 for k in keys[20:30]})
    assert again is a and 0 < read <= catch_up[0]["bytes"]

    # restores, readers and savepoints read the full snapshot, never the catch-up delta
    manifest = job.committed["manifest"]["count"]
    assert any(is_catch_up(h) for h in manifest)
    assert not any(is_catch_up(h) for h in restore_order(manifest))
    assert reader.read_keyed_state(job.storage, job.committed["manifest"], "count", MAX_PARALLELISM)["count"] \
        == job.expected
    checkpoint = {**job.committed, "job_id": "cache", "max_parallelism": MAX_PARALLELISM, "parallelism": 1,
                  "operators": [], "source_offsets": None}
    location = write_savepoint(job.storage, checkpoint, (tmp_path / "sp").as_uri(), job_name="cache",
                               job_file_bytes=None)
    assert not any(is_catch_up(h) for h in load_savepoint(location)["state"]["count"])


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
def test_a_cache_catches_up_across_a_compaction_of_the_chain_it_was_in(tmp_path, backend):
    job = Job(tmp_path / "chk", backend(), max_chain=1)
    keys = [f"k{i:03d}" for i in range(100)]
    a = job.epoch("A", {k: 1 for k in keys})[0]  # the chain's base (a first delta)
    job.epoch("B", {k: 2 for k in keys[:5]})  # a delta
    _, _, handles = job.epoch("B", {k: 3 for k in keys[5:10]})  # compaction of the chain from epoch 0
    assert _written(handles, "full")[0]["catch_up_from"] == 0
    assert [h["epoch"] for h in job.committed["manifest"]["count"] if is_catch_up(h)] == [0, 1, 2]
    again, read, _ = job.epoch("A", {k: 4 for k in keys[10:15]})
    assert again is a and read > 0  # epochs 1 and 2 applied as deltas (the state check is in ``epoch``)


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
def test_a_cache_behind_an_older_compaction_is_rebuilt(tmp_path, backend):
    job = Job(tmp_path / "chk", backend(), max_chain=1)
    keys = [f"k{i:03d}" for i in range(100)]
    a = job.epoch("A", {k: 1 for k in keys})[0]
    job.epoch("B", {k: 2 for k in keys[:5]})
    job.epoch("B", {k: 3 for k in keys[5:10]})  # compaction of the chain from epoch 0
    job.epoch("B", {k: 4 for k in keys[10:15]})
    _, _, handles = job.epoch("B", {k: 5 for k in keys[15:20]})  # compaction of the chain from epoch 2
    assert _written(handles, "full")[0]["catch_up_from"] == 2
    assert not any(h["epoch"] < 2 for h in job.committed["manifest"]["count"])  # epoch 1's delta is gone
    again, read, _ = job.epoch("A", {k: 6 for k in keys[20:25]})
    assert again is not a and read > 0  # rebuilt from the full snapshot (the state check is in ``epoch``)


def test_a_cache_whose_attempt_was_not_committed_rolls_back(tmp_path):
    job = Job(tmp_path / "chk", HashMapStateBackend(), max_chain=100)
    a = job.epoch("A", {"x": 1})[0]
    job.epoch("A", {"x": 2})
    job.retry_last_epoch()  # epoch 1 runs again on worker B, and B's attempt is the one committed
    retried = job.epoch("B", {"x": 5})[0]
    assert retried is not a
    again, read, _ = job.epoch("A", {"y": 1})  # A's parked epoch-1 attempt is undone, then B's delta applied
    assert again is a and read > 0 and job.state_of(again) == {"x": 5, "y": 1}


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
def test_a_catch_up_updates_and_deletes_what_the_cache_holds(tmp_path, backend):
    """Worker A's cache holds every key of its epoch; B changes some and clears others. A, catching up,
    reads B's values and none of the cleared keys, whatever its cache held before."""
    job = Job(tmp_path / "chk", backend(), max_chain=100)
    keys = [f"k{i:03d}" for i in range(40)]
    a = job.epoch("A", {k: 1 for k in keys})[0]
    job.epoch("B", {**{k: 2 for k in keys[:10]}, **{k: None for k in keys[10:20]}})
    again = job.epoch("A", {"k039": 3})[0]  # ``epoch`` checks A's state before this epoch's writes
    assert again is a
    assert job.state_of(a) == {**{k: 2 for k in keys[:10]}, **{k: 1 for k in keys[20:39]}, "k039": 3}
    state = a.runtime_context.get_state(COUNT)
    for key in keys[10:20]:  # read one by one: ``state_of`` lists the keys RocksDB holds, not the cache's
        a.backend.set_current_key(key, assign_to_key_group(key, MAX_PARALLELISM))
        assert state.value() is None, key


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
def test_a_worker_applies_the_epoch_another_worker_noted_while_it_waits_and_its_next_task_reads_nothing(
        tmp_path, backend):
    job = Job(tmp_path / "chk", backend(), max_chain=100)
    notes = tmp_path / "notes"
    keys = [f"k{i:03d}" for i in range(50)]
    a = job.epoch("A", {k: 1 for k in keys})[0]
    # Spark runs epoch 1 on worker B, which notes the delta it wrote (updates and deletes)
    job.epoch("B", {**{k: 2 for k in keys[:10]}, **{k: None for k in keys[10:20]}}, notes=notes)
    job.wait_for_next_task("A", notes)
    again, read, _ = job.epoch("A", {"k049": 3})  # ``epoch`` checks A's state before this epoch's writes
    assert again is a and read == 0
    assert job.state_of(a) == {**{k: 2 for k in keys[:10]}, **{k: 1 for k in keys[20:49]}, "k049": 3}


def test_a_worker_more_than_an_epoch_behind_catches_up_from_the_checkpoint_then_applies_the_note(tmp_path):
    job = Job(tmp_path / "chk", HashMapStateBackend(), max_chain=100)
    notes = tmp_path / "notes"
    a = job.epoch("A", {"x": 1, "y": 1})[0]
    job.epoch("B", {"x": 2})  # committed: A reads it from the checkpoint
    job.epoch("B", {"y": 3}, notes=notes)  # just written: A reads it from the note
    job.wait_for_next_task("A", notes)
    again, read, _ = job.epoch("A", {"z": 1})
    assert again is a and read == 0 and job.state_of(a) == {"x": 2, "y": 3, "z": 1}


@pytest.mark.parametrize("committed", [True, False], ids=["its-attempt-committed", "another-attempt-committed"])
def test_a_worker_confirms_its_own_epoch_while_it_waits_once_the_checkpoint_lists_its_files(tmp_path, committed):
    """After its task a worker watches for the epoch's checkpoint file; when it lists the files the
    task wrote, the worker writes the epoch's changes into RocksDB then, not when its next task starts.
    When the driver committed another attempt of the epoch, the next task rolls this one back."""
    import time

    job = Job(tmp_path / "ckpt", EmbeddedRocksDBStateBackend(), max_chain=8)
    job.epoch("A", {"x": 1, "y": 1})
    inst, _, handles = job.epoch("A", {"x": 2, "z": 3})
    waited = job.last_context
    if not committed:
        job.retry_last_epoch()
        job.epoch("B", {"x": 7})  # Spark's retry on B is the attempt the driver committed
    job.write_checkpoint_file()
    instances._INSTANCES = job.workers["A"]
    stored = len(list(inst.backend._db.keys()))  # x and y: z is still only in the worker's cache
    handoff.start(str(tmp_path / "notes"), waited, [inst], handles)
    deadline = time.monotonic() + 5
    while committed and inst.pending is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    handoff.wait()
    if committed:
        assert inst.pending is None and inst.version == waited.epoch
        assert len(list(inst.backend._db.keys())) == stored + 1  # z written into RocksDB
    else:
        assert inst.pending is not None and inst.version == waited.epoch - 1
        assert len(list(inst.backend._db.keys())) == stored
    again, read, _ = job.epoch("A", {})  # its state is the committed one (asserted in ``epoch``)
    assert again is inst and (read == 0) == committed


def test_an_applied_note_whose_attempt_was_not_committed_gets_the_instance_rebuilt(tmp_path):
    job = Job(tmp_path / "chk", HashMapStateBackend(), max_chain=100)
    notes = tmp_path / "notes"
    a = job.epoch("A", {"x": 1, "y": 1})[0]
    job.epoch("B", {"x": 7}, notes=notes)
    job.wait_for_next_task("A", notes)  # A applies B's attempt of epoch 1 ...
    job.retry_last_epoch()  # ... which the driver does not commit: epoch 1 runs again, and
    job.epoch("B", {"x": 9})  # another attempt of it is committed
    again, read, _ = job.epoch("A", {"y": 2})  # ``epoch`` checks A's state is the committed one: x is 9
    assert again is not a and read > 0
    assert job.state_of(again) == {"x": 9, "y": 2}


def _set_timers(inst, timers: list[tuple[str, int]], delete: bool = False) -> None:
    for key, timestamp in timers:
        inst.backend.set_current_key(key, assign_to_key_group(key, MAX_PARALLELISM))
        if delete:
            inst.timers.delete_event_time_timer(timestamp)
        else:
            inst.timers.register_event_time_timer(timestamp)


def _queue_entries(inst) -> int:
    """Entries in the event-time timer queue, stale ones included (``DueQueue``'s layout)."""
    entries = inst.timers._ensure_queues()[EVENT_TIME]._entries.values()
    return sum(1 if type(e) is tuple else len(e) - e[0] for e in entries)


def _fire(inst, watermark: int, fired: list) -> None:
    while (timestamp := inst.timers.pop_due(EVENT_TIME, watermark)) is not None:
        fired.append((timestamp, inst.backend.current_key))


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
@pytest.mark.parametrize("noted", [False, True], ids=["from-the-checkpoint", "from-a-note"])
def test_a_cache_caught_up_fires_the_timers_the_checkpoint_holds_each_once(tmp_path, backend, noted):
    """Worker A queued its timers for firing; worker B then sets new ones (and some A had already),
    deletes some and fires some. A, caught up from the checkpoint or from B's note, fires exactly the
    timers left, each once."""
    job = Job(tmp_path / "chk", backend(), max_chain=100)
    notes = tmp_path / "notes"
    keys = [f"k{i:02d}" for i in range(20)]
    fired_by_b, fired_by_a = [], []

    def on_a(inst):
        _set_timers(inst, [(k, 100) for k in keys] + [(k, 50) for k in keys[10:15]])
        _fire(inst, 0, [])  # nothing due yet: the queues are built

    def on_b(inst):
        _set_timers(inst, [(k, 200) for k in keys[:5]] + [(k, 100) for k in keys[:5]])
        _set_timers(inst, [(k, 100) for k in keys[5:10]], delete=True)
        _fire(inst, 50, fired_by_b)

    queued_before_firing = []

    def on_a_again(inst):
        queued_before_firing.append(_queue_entries(inst))
        _fire(inst, 1_000, fired_by_a)

    a = job.epoch("A", {}, work=on_a)[0]
    job.epoch("B", {}, notes=notes if noted else None, work=on_b)
    if noted:
        job.wait_for_next_task("A", notes)
    again, read, _ = job.epoch("A", {}, work=on_a_again)
    assert again is a and (read == 0) == noted
    # A's 25 entries, plus the 5 timers at 200 that B added; the heap backend knows which timers A
    # had queued already (RocksDB would pay a read per key to know it, and queues all of B's 15)
    assert queued_before_firing == [30 if backend is HashMapStateBackend else 40]
    assert sorted(fired_by_b) == [(50, k) for k in keys[10:15]]
    assert sorted(fired_by_a) == sorted([(100, k) for k in keys[:5] + keys[10:]] + [(200, k) for k in keys[:5]])


def test_no_note_is_left_for_an_epoch_after_a_rescale_whose_changes_are_only_in_full_snapshots(tmp_path):
    import dataclasses

    job = Job(tmp_path / "chk", HashMapStateBackend(), max_chain=100)
    notes = tmp_path / "notes"
    inst, _, handles = job.epoch("A", {"x": 1})
    handoff.leave_notes(str(notes), dataclasses.replace(job.last_context, full_all=True), [inst], handles, "t")
    assert not notes.exists()
    handoff.leave_notes(str(notes), job.last_context, [inst], handles, "t")
    assert len(list(notes.iterdir())) == 1


def test_spark_workers_note_the_deltas_they_write_where_the_other_workers_of_the_executor_look(workdir, env):
    """In a real local Spark session, the keyed subtasks' tasks leave notes in the application's Spark
    files folder, naming the epoch's delta files."""
    import json

    from pyspark import SparkFiles

    from keyspan.datastream.connectors.file_system import DiscardingSink

    env.set_max_records_per_epoch(100)
    env.from_collection([f"k{i % 40}" for i in range(400)]).key_by(lambda k: k) \
        .process(Tally()).uid("noted-counts").sink_to(DiscardingSink())
    env.execute("handoff-notes")
    state = reader.latest_keyed_state(run_options.current().metadata(), run_options.current().checkpoint_root(),
                                      "handoff-notes", "noted-counts")
    assert state["n"] == {f"k{i}": 10 for i in range(40)}
    folder = os.path.join(SparkFiles.getRootDirectory(), "keyspan-handoff")
    noted = [json.loads(path.read_text()) for path in Path(folder).glob("*.json")]
    deltas = [d for note in noted for d in note["deltas"] if d["uid"] == "noted-counts"]
    assert {d["subtask"] for d in deltas} == {0, 1}
    assert all(d["kind"] == "delta" and d["epoch"] == note["epoch"] for note in noted for d in note["deltas"])


class RecordsWhere(KeyedProcessFunction):
    """Appends the pid of the Python process that handles each record to a file."""

    def __init__(self, path):
        self.path = path

    def process_element(self, value, ctx):
        import os

        with open(self.path, "a") as f:
            f.write(f"{value['key']} {os.getpid()}\n")
        yield value


def _python_worker_pids() -> set[int]:
    """Every process forked from PySpark's worker daemon (and the daemon): they keep its command line, which
    names the worker module (``-m pyspark.daemon pyspark.worker``, or keyspan's daemon in its place)."""
    import os

    pids = set()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"pyspark.worker" in f.read():
                    pids.add(int(entry))
        except (OSError, ValueError):
            continue
    return pids


def test_workers_and_their_cached_state_outlive_a_gap_between_epochs_longer_than_sparks_idle_minute(workdir, env):
    """Spark stops an executor's idle Python workers once none of them ran a task for a minute: the
    operators a job caches in them would go too, and the next epoch would start new workers and reload
    its state. The records of an epoch that comes 75 s after the one before must land in workers that
    were alive before the gap."""
    import time

    from keyspan.common import WatermarkStrategy
    from keyspan.datastream.connectors.file_system import DiscardingSink, FileSource, StreamFormat
    from savepoint_helpers import BackgroundJob, stop_with_savepoint, wait_for_checkpoints

    folder = workdir / "in"
    folder.mkdir()
    where = workdir / "where.txt"
    (folder / "a.jsonl").write_text("".join(f'{{"key": "a{i}"}}\n' for i in range(20)))
    env.enable_checkpointing(200)
    source = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), str(folder)) \
        .monitor_continuously().build()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "in").key_by(lambda r: r["key"]) \
        .process(RecordsWhere(str(where))).uid("where").sink_to(DiscardingSink())
    job = BackgroundJob(env, "idle-gap")
    wait_for_checkpoints("idle-gap", 1, job=job)
    time.sleep(75)  # Spark's monitor stops workers idle for more than 60 s, checking every 10 s
    alive = _python_worker_pids()
    (folder / "b.jsonl").write_text("".join(f'{{"key": "b{i}"}}\n' for i in range(20)))
    deadline = time.time() + 60
    while sum(line.startswith("b") for line in where.read_text().splitlines()) < 20 and time.time() < deadline:
        time.sleep(0.2)
    stop_with_savepoint("idle-gap")
    job.join()
    after_gap = {int(line.split()[1]) for line in where.read_text().splitlines() if line.startswith("b")}
    assert after_gap and after_gap <= alive, (after_gap, alive)


class WhereSubtask(KeyedProcessFunction):
    """Each record comes back with the subtask that handled it, the Python process it ran in and the
    pool of workers that process belongs to (named in its environment)."""

    def open(self, runtime_context):
        self.subtask = runtime_context.get_index_of_this_subtask()
        self.n = runtime_context.get_state(ValueStateDescriptor("n"))

    def process_element(self, value, ctx):
        self.n.update((self.n.value() or 0) + 1)
        yield self.subtask, os.getpid(), value, self.n.value(), os.environ.get("KEYSPAN_WORKER_POOL")


def _pids_by_subtask(out) -> dict[int, set[int]]:
    pids = {}
    for subtask, pid, *_ in out:
        pids.setdefault(subtask, set()).add(pid)
    return pids


def _where_subtasks_ran(env, name: str) -> list:
    env.set_max_records_per_epoch(40)  # 10 epochs
    return list(env.from_collection([f"k{i % 30}" for i in range(400)]).key_by(lambda k: k)
                .process(WhereSubtask()).uid("where").execute_and_collect(name))


def test_each_subtask_of_the_last_keyed_stage_runs_in_a_pool_of_python_workers_of_its_own(workdir, env):
    """Spark gives a task to whichever Python worker of a pool is idle; the keyed stage's function is
    made once per subtask (two subtasks, two cores), each naming its own pool of workers, so a
    subtask's epochs never run in another subtask's workers (in a fresh Spark application, each pool
    has one worker: the process that holds the subtask's state; earlier tests of this session may
    have left a pool two). Results are the same with the setting off."""
    from keyspan.common import Configuration

    out = _where_subtasks_ran(env, "one-worker-per-subtask")
    pids = _pids_by_subtask(out)
    assert sorted(pids) == [0, 1]
    assert not pids[0] & pids[1], pids
    assert {(subtask, pool) for subtask, _, _, _, pool in out} == {(0, "0"), (1, "1")}
    assert {(key, n) for _, _, key, n, _ in out} == {(f"k{k}", n) for k in range(30) for n in range(1, 15 if k < 10 else 14)}

    env.configure(Configuration().set_string("keyspan.python-worker-per-subtask", "false"))
    assert not env.is_python_worker_per_subtask_enabled()
    again = _where_subtasks_ran(env, "any-worker")
    assert {pool for *_, pool in again} == {None}  # the stage's one function, in Spark's shared workers
    assert sorted((s, key, n) for s, _, key, n, _ in again) == sorted((s, key, n) for s, _, key, n, _ in out)


def test_more_subtasks_than_cores_share_as_many_pools_of_workers_as_an_executor_has_cores(workdir, env):
    """Four subtasks on two cores: subtasks 0 and 2 run in one pool of workers, 1 and 3 in another, so
    an executor does not start a Python worker per subtask. Each pool's workers never run the other
    pool's subtasks."""
    env.set_parallelism(4)
    out = _where_subtasks_ran(env, "pools-of-workers")
    pids = _pids_by_subtask(out)
    assert sorted(pids) == [0, 1, 2, 3]
    assert not (pids[0] | pids[2]) & (pids[1] | pids[3]), pids
    assert {(subtask, pool) for subtask, _, _, _, pool in out} == {(0, "0"), (1, "1"), (2, "0"), (3, "1")}
    assert {(key, n) for _, _, key, n, _ in out} == {(f"k{k}", n) for k in range(30) for n in range(1, 15 if k < 10 else 14)}


def _tagged_counter(tag: str):
    class Counter(KeyedProcessFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("n"))

        def process_element(self, value, ctx):
            n = (self.n.value() or 0) + 1
            self.n.update(n)
            yield f"{tag} {ctx.get_current_key()} {n}"

    return Counter


def test_a_job_changed_and_run_again_in_the_same_process_runs_its_new_code(workdir):
    """A notebook's loop: the job fails, the user edits its function and runs it again in the same
    process. The run resumes (same uids, same Spark log), and the Python workers still cache the
    operators of the failed attempt; those were built from the old function and must not be reused
    (they were, and every record after the restart went through the old code)."""
    from keyspan.common import Encoder
    from keyspan.datastream import StreamExecutionEnvironment
    from keyspan.datastream.connectors.file_system import FileSink
    from keyspan.runtime.executor import JobExecutionError

    out, flag = workdir / "out", workdir / "crash"

    def crash_at_85(value):
        if value[1] == 85 and flag.exists():
            raise RuntimeError("injected crash")
        return value

    def run(tag: str):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.set_max_records_per_epoch(10)
        (env.from_collection([(f"k{i % 4}", i) for i in range(120)]).uid("numbers").map(crash_at_85).uid("crash")
         .key_by(lambda r: r[0]).process(_tagged_counter(tag)()).uid("count")
         .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()).uid("sink"))
        env.execute("edited")

    flag.write_text("1")
    with pytest.raises(JobExecutionError, match="injected crash"):
        run("old")
    flag.unlink()
    before = {line for p in out.iterdir() if p.is_file() for line in p.read_text().splitlines()}
    run("new")
    lines = [line for p in out.iterdir() if p.is_file() for line in p.read_text().splitlines()]
    after = [line for line in lines if line not in before]
    assert before and all(line.startswith("old ") for line in before)
    assert after and all(line.startswith("new ") for line in after), sorted(after)[:5]
    counts = sorted((line.split()[1], int(line.split()[2])) for line in lines)
    assert counts == sorted((f"k{k}", n) for k in range(4) for n in range(1, 31))  # state restored: none lost or twice
