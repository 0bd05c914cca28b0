"""Python's cyclic garbage collector while workers stream records (keyspan.common.garbage): tasks and
source readers run with the worker's earlier objects frozen and rarer young collections; cycles are
still collected, Python's own thresholds come back however the task ends, and frozen objects go back
to the collector once the worker grew by a quarter (Python's own rule for full collections)."""

from __future__ import annotations

import gc
import os
import sys
import weakref

import pytest

from keyspan.common import garbage
from keyspan.connectors.sources import IndexedReader, KeyspanSource
from keyspan.datastream import MapFunction


class _Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the cyclic collector can free it


@pytest.fixture(autouse=True)
def unfrozen():
    """Each test starts with nothing frozen and no size of the worker noted."""
    gc.unfreeze()
    garbage._smallest = None
    yield
    gc.unfreeze()
    garbage._smallest = None


def _task_leaving_alive(n: int) -> list:
    """A task that leaves ``n`` new containers alive."""
    with garbage.streaming_records():
        return [[] for _ in range(n)]


def test_settings_apply_while_records_stream_and_come_back_after():
    before = gc.get_threshold()
    with garbage.streaming_records():
        assert gc.get_threshold()[0] == garbage.YOUNG_COLLECTION_EVERY
        assert gc.get_threshold()[1:] == before[1:]
        assert gc.get_freeze_count() > 0  # what existed before is left out of collections
    assert gc.get_threshold() == before


def test_a_failing_task_restores_the_settings():
    before = gc.get_threshold()
    with pytest.raises(ValueError):
        with garbage.streaming_records():
            raise ValueError("a user function failed")
    assert gc.get_threshold() == before


def test_interleaved_tasks_restore_the_settings_when_the_last_one_ends():
    before = gc.get_threshold()

    def task():
        with garbage.streaming_records():
            yield

    first, second = task(), task()
    next(first)
    next(second)
    for rest in (first, second):  # the first to start ends first: the second still streams
        assert gc.get_threshold()[0] == garbage.YOUNG_COLLECTION_EVERY
        next(rest, None)  # runs to its end
    assert gc.get_threshold() == before


def test_objects_stay_frozen_across_tasks_until_they_grew_by_a_quarter():
    """Unfreezing after every task made Python's next full collection walk the worker's whole state
    before the task could end; frozen objects now go back to the collector once the worker's objects
    (its allocator's blocks) outnumber the fewest at a task's end since then by a quarter, and only then
    are cycles among them freed."""
    cycle = _Node()
    orphan = weakref.ref(cycle)
    with garbage.streaming_records():  # the cycle exists before the task: frozen
        pass
    del cycle
    fewest = sys.getallocatedblocks()
    kept = []
    for task in range(20):  # tasks that each leave a little more alive: a twentieth of the quarter
        gc.collect()
        assert orphan() is not None and gc.get_freeze_count() > 0, task  # left out of every collection
        kept.append(_task_leaving_alive(int(fewest * garbage.GROWTH_BEFORE_UNFREEZE / 25)))
    assert gc.get_freeze_count() > 0
    kept.append(_task_leaving_alive(int(fewest * garbage.GROWTH_BEFORE_UNFREEZE / 4)))  # past the quarter
    assert gc.get_freeze_count() == 0  # that task hands every frozen object back
    gc.collect()
    assert orphan() is None


def test_fewer_objects_lower_the_mark():
    """Objects freed by reference counting (state a task dropped) lower the count the growth is measured
    from: a worker whose state shrank does not wait for it to grow back past its old size."""
    with garbage.streaming_records():
        pass
    base = sys.getallocatedblocks()
    big = _task_leaving_alive(base // 2)
    with garbage.streaming_records():
        pass
    assert sys.getallocatedblocks() > base * 1.4  # the mark now counts the big state
    del big  # freed at once, frozen or not
    with garbage.streaming_records():
        pass
    assert sys.getallocatedblocks() < base * 1.1
    _task_leaving_alive(int(base * garbage.GROWTH_BEFORE_UNFREEZE * 1.2))
    assert gc.get_freeze_count() == 0  # past a quarter more than the lowered mark, far below the old one


def test_a_cycle_holding_a_large_buffer_goes_back_once_resident_memory_grew_by_a_quarter():
    """The allocator does not count large buffers (bytes, Arrow batches, NumPy arrays): a cycle holding
    one still counts through the worker's resident memory."""
    with garbage.streaming_records():
        pass
    blocks, resident = garbage.worker_size()
    with garbage.streaming_records():
        node = _Node()
        node.buffer = b"x" * int(resident * os.sysconf("SC_PAGE_SIZE") * garbage.GROWTH_BEFORE_UNFREEZE * 1.5)
        held = weakref.ref(node)
        del node
    assert garbage.worker_size()[0] < blocks * (1 + garbage.GROWTH_BEFORE_UNFREEZE)  # few new objects
    assert gc.get_freeze_count() == 0  # handed back: resident memory grew by more than a quarter
    gc.collect()
    assert held() is None


def test_what_a_task_leaves_alive_is_frozen_at_its_end():
    """Back at Python's thresholds after a task, the first collection would walk all the state the task
    added before the task could report; it is frozen with the rest and handed back with it."""
    with garbage.streaming_records():
        left = weakref.ref(_Node())  # a cycle no young collection saw during the task
    gc.collect()
    assert left() is not None  # frozen at the task's end, so no collection walked it
    _task_leaving_alive(int(sys.getallocatedblocks() * garbage.GROWTH_BEFORE_UNFREEZE) + 1_000)
    gc.collect()
    assert left() is None


def test_cycles_made_while_records_stream_are_still_collected():
    with garbage.streaming_records():
        cycle = weakref.ref(_Node())
        assert cycle() is not None  # garbage, but only a collection can free it
        kept = []
        for _ in range(3 * garbage.YOUNG_COLLECTION_EVERY):  # live containers past the young threshold
            kept.append([])
            if cycle() is None:
                break
        assert cycle() is None


class _CollectorSettings(MapFunction):
    def map(self, value):
        return value, gc.get_threshold()[0], gc.get_freeze_count() > 0


def test_a_jobs_tasks_run_with_the_streaming_settings(env):
    out = env.from_collection(list(range(5))).map(_CollectorSettings()).execute_and_collect(limit=10)
    assert sorted(v for v, _, _ in out) == list(range(5))
    assert {(threshold, frozen) for _, threshold, frozen in out} == {(garbage.YOUNG_COLLECTION_EVERY, True)}


class _SettingsReader(IndexedReader):
    """Reads, for each of its records, the collector's settings at the moment it reads it."""

    def read(self, partition):
        lo, hi = partition
        yield [(i, gc.get_threshold()[0], gc.get_freeze_count() > 0) for i in range(lo, hi)]


class _SettingsSource(KeyspanSource):
    name = "Collector Settings"

    def fingerprint(self):
        return "collector-settings"

    def reader(self, storage, uid, name):
        return _SettingsReader(4)


def test_a_source_reads_with_the_streaming_settings(env):
    """A source's stage reads its input partitions in its own tasks, under the same settings."""
    out = env.from_source(_SettingsSource(), source_name="settings").execute_and_collect(limit=10)
    assert sorted(i for i, _, _ in out) == list(range(4))
    assert {(threshold, frozen) for _, threshold, frozen in out} == {(garbage.YOUNG_COLLECTION_EVERY, True)}
