"""Operator (non-keyed) state: CheckpointedFunction with list, union list and broadcast state,
checkpointed every epoch, in savepoints, and redistributed as Flink does when the parallelism changes."""

from __future__ import annotations

import ast
import threading
from collections import Counter
from pathlib import Path

import pytest

from keyspan.checkpoint.manifest import next_manifest
from keyspan.checkpoint.metadata import MetadataStore
from keyspan.checkpoint.savepoint import load_savepoint
from keyspan.io.storage import Storage
from keyspan.common import Encoder
from keyspan.datastream import (
    CheckpointedFunction,
    FlatMapFunction,
    MapFunction,
    StreamExecutionEnvironment,
)
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from keyspan.runtime import options as run_options
from keyspan.runtime.planner import compile_graph
from keyspan.runtime.worker import state_io
from keyspan.state import operator as operator_state

from savepoint_helpers import stop_with_savepoint, wait_for_checkpoints


# --- redistribution, as Flink's RoundRobinOperatorStateRepartitioner ------------------------------------

def _snap(lists=None, unions=None, broadcast=None):
    s = operator_state.empty_snapshot()
    for name, values in (lists or {}).items():
        s["list"][name] = {"mode": operator_state.SPLIT, "values": list(values)}
    for name, values in (unions or {}).items():
        s["list"][name] = {"mode": operator_state.UNION, "values": list(values)}
    s["broadcast"].update(broadcast or {})
    return s


def _values(out, name):
    return [o["list"][name]["values"] for o in out]


def test_redistribution_even_split_union_and_broadcast():
    old = [_snap({"a": ["a0", "a1", "a2", "a3", "a4"], "b": [1, 2, 3, 4]}, {"u": ["x"]}, {"rules": {"max": 5}}),
           _snap({"a": ["a5", "a6", "a7"], "b": [5, 6, 7, 8]}, {"u": ["y", "z"]}, {"rules": {"max": 5}})]
    out = operator_state.redistribute(old, 3)
    # even split: contiguous parts in subtask order, sizes differing by at most one
    assert _values(out, "a") == [["a0", "a1", "a2"], ["a3", "a4", "a5"], ["a6", "a7"]]
    # the next state's larger parts start where the previous state's ended (Flink's rotation)
    assert _values(out, "b") == [[4, 5, 6], [7, 8], [1, 2, 3]]
    assert _values(out, "u") == [["x", "y", "z"]] * 3
    assert [o["broadcast"]["rules"] for o in out] == [{"max": 5}] * 3
    # scale in: every element exactly once
    one = operator_state.redistribute(old, 1)
    assert _values(one, "a") == [["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"]]
    # same parallelism: each subtask keeps its own list; union state is still unioned
    same = operator_state.redistribute(old, 2)
    assert _values(same, "a") == [["a0", "a1", "a2", "a3", "a4"], ["a5", "a6", "a7"]]
    assert _values(same, "u") == [["x", "y", "z"]] * 2
    # fewer elements than subtasks
    few = operator_state.redistribute([_snap({"a": [1]}), _snap({"a": [2]})], 3)
    assert _values(few, "a") == [[1], [2], []]


def test_operator_state_store_checks_modes_and_values():
    store = operator_state.DefaultOperatorStateStore("op", _snap({"a": [1, 2]}, {"u": [3]}))
    assert store.get_list_state(ListStateDescriptor("a")).get() == [1, 2]
    with pytest.raises(ValueError, match="redistribution mode"):
        store.get_union_list_state(ListStateDescriptor("a"))
    with pytest.raises(ValueError, match="redistribution mode"):
        store.get_list_state(ListStateDescriptor("u"))
    with pytest.raises(ValueError, match="None"):
        store.get_list_state(ListStateDescriptor("a")).add(None)
    with pytest.raises(TypeError):
        store.get_broadcast_state(ListStateDescriptor("m"))
    state = store.get_list_state(ListStateDescriptor("a"))
    for v in state.get():
        state.add(v * 10)  # get() is a copy: adding while iterating terminates
    bstate = store.get_broadcast_state(MapStateDescriptor("m"))
    bstate.put("k", 1)
    snapshot = store.snapshot()
    assert snapshot["list"]["a"]["values"] == [1, 2, 10, 20]
    assert snapshot["list"]["u"] == {"mode": "union", "values": [3]}  # restored, never asked for: kept
    assert snapshot["broadcast"] == {"m": {"k": 1}}


def test_manifest_keeps_the_newest_operator_state_per_subtask():
    def op(epoch, subtask, parallelism):
        return {"uid": "u", "kind": "operator", "epoch": epoch, "subtask": subtask, "parallelism": parallelism,
                "path": f"e{epoch}-s{subtask}", "bytes": 1}

    keyed = {"uid": "u", "kind": "delta", "epoch": 3, "kg": [0, 64], "path": "k3", "bytes": 1}
    m = next_manifest({}, [op(3, 0, 3), op(3, 1, 3), op(3, 2, 3), keyed])
    m = next_manifest(m, [op(4, 0, 2), op(4, 1, 2)])  # restored at parallelism 2
    assert sorted(h["path"] for h in m["u"]) == ["e4-s0", "e4-s1", "k3"]
    m = next_manifest(m, [op(5, 0, 2), op(5, 1, 2)])
    assert sorted(h["path"] for h in m["u"]) == ["e5-s0", "e5-s1", "k3"]


# --- a CheckpointedFunction on a non-keyed and on a keyed stream ------------------------------------------

class CountPerSubtask(FlatMapFunction, CheckpointedFunction):
    """Counts the records its subtask saw, in operator list state; records the call order."""

    def __init__(self):
        self.count = 0
        self.calls = []

    def initialize_state(self, context):
        self.calls.append("initialize_state")
        self.state = context.get_operator_state_store().get_list_state(ListStateDescriptor("count"))
        self.restored_from = context.get_restored_checkpoint_id()
        assert context.is_restored() == (self.restored_from is not None)
        assert context.get_keyed_state_store() is None
        self.count = sum(c for c, _ in self.state.get())

    def open(self, runtime_context):
        self.calls.append("open")
        self.subtask = runtime_context.get_index_of_this_subtask()

    def snapshot_state(self, context):
        self.state.update([(self.count, context.get_checkpoint_id())])

    def flat_map(self, value):
        self.count += 1
        yield value, self.subtask, tuple(self.calls)


class KeyedWithOperatorState(MapFunction, CheckpointedFunction):
    """Keyed state per key, and per subtask the keys it saw in union list state."""

    def initialize_state(self, context):
        self.keys_state = context.get_operator_state_store().get_union_list_state(ListStateDescriptor("keys"))
        self.keys = set()
        assert context.get_keyed_state_store() is not None

    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))

    def snapshot_state(self, context):
        self.keys_state.update(sorted(self.keys))

    def map(self, value):
        (number, subtask, calls) = value
        n = (self.seen.value() or 0) + 1
        self.seen.update(n)
        self.keys.add(number % 3)
        return number, subtask, calls, n


def _operator_states(job_id: str, uid: str) -> list[dict]:
    options = run_options.current()
    checkpoint = MetadataStore(options.metadata()).latest_checkpoint(job_id)
    handles = [h for h in checkpoint["manifest"][uid] if h["kind"] == "operator"]
    return checkpoint, state_io.load_operator_snapshots(Storage(options.checkpoint_root()).child(job_id), handles)


def test_checkpointed_functions_on_non_keyed_and_keyed_streams(env):
    env.set_max_records_per_epoch(10)
    numbers = list(range(30))
    counted = env.from_collection(numbers).uid("numbers").flat_map(CountPerSubtask()).uid("count")
    out = (counted.key_by(lambda r: r[0] % 3).map(KeyedWithOperatorState()).uid("keyed")
           .execute_and_collect("operator-state"))
    results = list(out)
    assert sorted(r[0] for r in results) == numbers
    # initialize_state runs before open, once per instance
    assert all(r[2] == ("initialize_state", "open") for r in results)
    # a non-keyed stateful operator runs at its own parallelism, not at the source's partition count
    assert {r[1] for r in results} == {0, 1}
    for k in range(3):
        assert sorted(r[3] for r in results if r[0] % 3 == k) == list(range(1, 11))  # keyed state

    checkpoint, states = _operator_states("operator-state", "count")
    assert checkpoint["epoch"] == 2
    assert len(states) == 2  # one file per subtask, replaced every epoch
    handles = [h for h in checkpoint["manifest"]["count"] if h["kind"] == "operator"]
    assert sorted((h["subtask"], h["epoch"]) for h in handles) == [(0, 2), (1, 2)]
    per_subtask = [s["list"]["count"]["values"] for s in states]
    assert all(v[0][1] == 2 for v in per_subtask)  # snapshot_state saw the epoch as checkpoint id
    assert sum(v[0][0] for v in per_subtask) == len(numbers)
    assert per_subtask == [[(Counter(r[1] for r in results)[i], 2)] for i in range(2)]
    _, keyed_states = _operator_states("operator-state", "keyed")
    assert sorted(k for s in keyed_states for k in s["list"]["keys"]["values"]) == [0, 1, 2]


class CountAndFailOnce(CountPerSubtask):
    """Fails the first time it sees ``poison``, after having counted the records before it."""

    def __init__(self, marker: str, poison: int):
        super().__init__()
        self.marker = marker
        self.poison = poison

    def flat_map(self, value):
        import os

        yield from super().flat_map(value)
        if value == self.poison and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("injected task failure")


def test_task_failure_mid_epoch_does_not_double_count_operator_state(env, workdir):
    env.set_max_records_per_epoch(10)
    marker = workdir / "failed-once"
    out = (env.from_collection(list(range(30))).flat_map(CountAndFailOnce(str(marker), poison=17)).uid("count")
           .execute_and_collect("fail-once", limit=1000))
    assert marker.exists(), "the failure was not injected"
    assert sorted(r[0] for r in out) == list(range(30))
    _, states = _operator_states("fail-once", "count")
    assert sum(s["list"]["count"]["values"][0][0] for s in states) == 30


def test_stateful_operator_after_a_source_gets_its_own_stage(env):
    src = env.from_collection([1, 2, 3])
    src.flat_map(CountPerSubtask()).set_parallelism(3).map(lambda x: x).set_parallelism(3).print()
    src.map(lambda x: x).print()
    plan = compile_graph(env._transformations, 2, 128)
    by_kind = {op.kind: stage for stage in plan.stages for op in stage.plan.ops}
    assert by_kind["flat_map"].source is None and by_kind["flat_map"].plan.parallelism == 3
    assert by_kind["source"].plan.exits[0].kind == "rebalance"
    assert [op.kind for op in by_kind["flat_map"].plan.ops] == ["flat_map", "map", "driver_sink"]
    # a stateless operator stays chained to the source
    assert [op.kind for op in by_kind["source"].plan.ops][:2] == ["source", "map"]


# --- seed 000: (partition, offset) pairs survive a savepoint and a rescale, each exactly once -----------

PARTITIONS = 4
OFFSETS = 30
RECORDS = [(p, o, f"payload-{p}-{o}") for o in range(OFFSETS) for p in range(PARTITIONS)]


class HighestOffsets(FlatMapFunction, CheckpointedFunction):
    """Tracks the highest offset per partition it has seen, as (partition, offset) pairs in operator
    list state (even split on rescale) and in union list state (every subtask gets all pairs)."""

    def __init__(self):
        self.offsets = {}
        self.report = None

    def initialize_state(self, context):
        store = context.get_operator_state_store()
        self.pairs = store.get_list_state(ListStateDescriptor("offsets"))
        self.all_pairs = store.get_union_list_state(ListStateDescriptor("all-offsets"))
        restored = list(self.pairs.get())
        for partition, offset in restored:
            self.offsets[partition] = max(offset, self.offsets.get(partition, -1))
        self.report = [context.get_restored_checkpoint_id(), restored, list(self.all_pairs.get())]

    def open(self, runtime_context):
        self.report = tuple(["restored", runtime_context.get_index_of_this_subtask(),
                             runtime_context.get_number_of_parallel_subtasks()] + self.report)

    def snapshot_state(self, context):
        pairs = sorted(self.offsets.items())
        self.pairs.update(pairs)
        self.all_pairs.update(pairs)

    def flat_map(self, value):
        if self.report is not None:
            yield self.report
            self.report = None
        partition, offset, _payload = value
        if offset > self.offsets.get(partition, -1):
            self.offsets[partition] = offset
        yield "seen", partition, offset


def _offsets_job(env: StreamExecutionEnvironment, out: Path, parallelism: int, per_epoch: int):
    env.set_parallelism(parallelism)
    env.set_max_records_per_epoch(per_epoch)
    (env.from_collection(RECORDS).uid("partitions")
        .flat_map(HighestOffsets()).uid("offsets")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()).uid("out"))


def _read_output(out: Path, max_epoch: int | None = None) -> list:
    records = []
    for path in sorted(out.iterdir()) if out.exists() else []:
        if not path.is_file() or (max_epoch is not None and int(path.name.split("-")[1]) > max_epoch):
            continue
        records.extend(ast.literal_eval(line) for line in path.read_text().splitlines())
    return records


def _run_in_background(env, name):
    box = {}

    def run():
        try:
            box["result"] = env.execute(name)
        except BaseException as exc:  # noqa: BLE001 — re-raised by the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def stop_with_savepoint_after(job_id: str, checkpoints: int, thread, box, timeout: float = 240) -> str:
    """Wait for ``checkpoints`` committed epochs, then stop the job with a savepoint; its location."""
    wait_for_checkpoints(job_id, checkpoints, timeout=timeout)
    location = stop_with_savepoint(job_id, timeout=timeout)
    thread.join(120)
    assert "error" not in box, box
    return location


def restore_and_run(workdir: Path, savepoint: str, build, name: str):
    run_options.install(run_options.RunOptions(workdir=str(workdir / ".keyspan"), savepoint_path=savepoint))
    try:
        env = StreamExecutionEnvironment.get_execution_environment()
        build(env)
        return env.execute(name)
    finally:
        run_options.install(run_options.RunOptions(workdir=str(workdir / ".keyspan")))


def test_offsets_in_operator_state_survive_savepoint_and_rescale(env, workdir):
    first_out = workdir / "out-p2"
    _offsets_job(env, first_out, parallelism=2, per_epoch=8)
    thread, box = _run_in_background(env, "offsets")
    location = stop_with_savepoint_after("offsets", 3, thread, box)

    savepoint = load_savepoint(location)
    epoch = savepoint["epoch"]
    handles = [h for h in savepoint["state"]["offsets"] if h["kind"] == "operator"]
    assert sorted(h["subtask"] for h in handles) == [0, 1] and {h["parallelism"] for h in handles} == {2}
    old = state_io.load_operator_snapshots(Storage(location), handles)
    saved_pairs = [pair for s in old for pair in s["list"]["offsets"]["values"]]
    assert saved_pairs == [pair for s in old for pair in s["list"]["all-offsets"]["values"]]
    assert len(saved_pairs) >= PARTITIONS  # every subtask has seen several partitions
    before = [r for r in _read_output(first_out, epoch) if r[0] == "seen"]
    assert len(before) == 8 * (epoch + 1)

    for parallelism in (3, 1):
        out = workdir / f"out-p{parallelism}"
        restore_and_run(workdir, location, lambda e: _offsets_job(e, out, parallelism, per_epoch=24), "offsets")
        results = _read_output(out)
        reports = {r[1]: r for r in results if r[0] == "restored" and r[3] == epoch}
        assert sorted(reports) == list(range(parallelism))
        assert all(r[2] == parallelism for r in reports.values())
        split = [reports[i][4] for i in range(parallelism)]
        # even split: every pair exactly once, in subtask order, part sizes differing by at most one
        assert [tuple(p) for part in split for p in part] == [tuple(p) for p in saved_pairs]
        assert max(map(len, split)) - min(map(len, split)) <= 1
        # union: every subtask gets all pairs
        assert all(sorted(map(tuple, reports[i][5])) == sorted(map(tuple, saved_pairs)) for i in range(parallelism))
        # the records: each exactly once across the stopped run and the restored one
        seen = Counter((r[1], r[2]) for r in before + [r for r in results if r[0] == "seen"])
        assert seen == Counter((p, o) for p, o, _ in RECORDS)
        # and the state at the end knows the last offset of every partition
        _, states = _operator_states("offsets", "offsets")
        assert len(states) == parallelism
        final = {}
        for s in states:
            for partition, offset in s["list"]["offsets"]["values"]:
                final[partition] = max(offset, final.get(partition, -1))
        assert final == {p: OFFSETS - 1 for p in range(PARTITIONS)}
