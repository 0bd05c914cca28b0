"""The embedded RocksDB state backend: heap semantics for every state kind, revocable epochs, and
sections in the heap's canonical format (checkpoints restore across the two backends)."""

from __future__ import annotations

import os
import pickle
import random
import tempfile

import cloudpickle
import pytest

from keyspan.datastream import EmbeddedRocksDBStateBackend, KeyedProcessFunction
from keyspan.datastream.functions import AggregateFunction
from keyspan.state.api import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from keyspan.common.time import Time
from keyspan.common.types import Row
from keyspan.state.backend import encode_section
from keyspan.state.heap import HeapKeyedStateBackend
from keyspan.state.keygroups import assign_to_key_group
from keyspan.state.rocksdb import RocksDBKeyedStateBackend, encode_key
from keyspan.state.ttl import StateTtlConfig

MAX_P = 16


class Avg(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]


def _add(a, b):
    return a + b


DESCRIPTORS = {
    "v": lambda: ValueStateDescriptor("v"),
    "l": lambda: ListStateDescriptor("l"),
    "m": lambda: MapStateDescriptor("m"),
    "r": lambda: ReducingStateDescriptor("r", _add),
    "a": lambda: AggregatingStateDescriptor("a", Avg()),
}


@pytest.fixture
def make_rocks(tmp_path):
    made = []

    def make(key_groups=range(MAX_P)):
        b = EmbeddedRocksDBStateBackend().create_keyed_backend("op", key_groups, local_dir=str(tmp_path))
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def states(backend):
    return {name: backend.get_state(make()) for name, make in DESCRIPTORS.items()}


def at(backend, key):
    backend.set_current_key(key, assign_to_key_group(key, MAX_P))


def read_all(backend, st, keys):
    out = {}
    for key in keys:
        at(backend, key)
        out[key] = (st["v"].value(), list(st["l"].get()), sorted(st["m"].items(), key=repr), st["m"].is_empty(),
                    st["r"].get(), st["a"].get())
    return out


def norm(sections):
    """Sections compared by content: delete lists as sets."""
    return {kg: {name: (puts, sorted(deletes, key=repr)) for name, (puts, deletes) in sec.items()}
            for kg, sec in sections.items()}


def raw_entries(backend):
    return list(backend._db.keys())


# --- each state kind ------------------------------------------------------------------------------

def test_value_state(make_rocks):
    b = make_rocks()
    v = b.get_state(ValueStateDescriptor("v"))
    at(b, "k")
    assert v.value() is None
    v.update({"x": 1})
    assert v.value() == {"x": 1}
    at(b, "other")
    assert v.value() is None
    at(b, "k")
    v.update(None)
    assert v.value() is None
    v.update(0)
    assert v.value() == 0
    v.clear()
    assert v.value() is None
    assert raw_entries(b) == []


def test_list_state(make_rocks):
    b = make_rocks()
    lst = b.get_state(ListStateDescriptor("l"))
    at(b, 7)
    assert lst.get() == [] and list(lst) == []
    lst.add(1)
    lst.add_all([2, 3])
    lst.add_all([])
    assert lst.get() == [1, 2, 3]
    lst.get().append(99)  # a fresh list: mutating it changes no state
    assert list(lst) == [1, 2, 3]
    with pytest.raises(ValueError, match="cannot add None to list state 'l'"):
        lst.add(None)
    lst.update([5])
    assert lst.get() == [5]
    lst.update([])
    assert lst.get() == [] and raw_entries(b) == []
    lst.add(1)
    lst.clear()
    assert lst.get() == []


def test_map_state(make_rocks):
    b = make_rocks()
    m = b.get_state(MapStateDescriptor("m"))
    at(b, ("user", 1))
    assert m.is_empty() and m.items() == [] and m.get("a") is None and "a" not in m
    m.put("a", 1)
    m["b"] = None
    m.put_all({"c": 3, ("t", 1): [1, 2]})
    assert not m.is_empty()
    assert m.get("a") == 1 and m["c"] == 3 and m.get(("t", 1)) == [1, 2]
    assert "b" in m and m.contains("b") and m.get("b") is None
    assert dict(m.items()) == {"a": 1, "b": None, "c": 3, ("t", 1): [1, 2]}
    assert sorted(m.keys(), key=repr) == sorted(["a", "b", "c", ("t", 1)], key=repr)
    assert sorted(m.values(), key=repr) == sorted([1, None, 3, [1, 2]], key=repr)
    assert set(iter(m)) == {"a", "b", "c", ("t", 1)}
    # one RocksDB entry per map entry
    assert len(raw_entries(b)) == 4
    m.remove("missing")
    del m["a"]
    assert "a" not in m and len(raw_entries(b)) == 3
    at(b, ("user", 2))
    assert m.is_empty()
    m.put("a", "other user")
    at(b, ("user", 1))
    assert m.get("a") is None
    m.clear()
    assert m.is_empty() and len(raw_entries(b)) == 1
    at(b, ("user", 2))
    m.remove("a")
    assert m.is_empty() and raw_entries(b) == []


def test_map_put_writes_one_entry(make_rocks):
    b = make_rocks()
    m = b.get_state(MapStateDescriptor("m"))
    at(b, "big")
    m.put_all({i: "x" * 100 for i in range(200)})
    b.confirm()
    m.put(5, "changed")
    # the epoch touched one RocksDB entry (map key 5), not the user key's 200 entries
    (touched,) = b._undo_map
    assert touched.endswith(encode_key(5)) and len(raw_entries(b)) == 200
    assert b.changed_sections()[assign_to_key_group("big", MAX_P)]["m"][0]["big"][5] == "changed"


def test_reducing_and_aggregating_state(make_rocks):
    b = make_rocks()
    r = b.get_state(ReducingStateDescriptor("r", _add))
    a = b.get_state(AggregatingStateDescriptor("a", Avg()))
    at(b, "k")
    assert r.get() is None and a.get() is None
    for x in (1, 2, 6):
        r.add(x)
        a.add(x)
    assert r.get() == 9 and a.get() == 3.0
    r.clear()
    a.clear()
    assert r.get() is None and a.get() is None


def test_state_kind_conflict_names_both(make_rocks):
    b = make_rocks()
    b.get_state(ValueStateDescriptor("s"))
    with pytest.raises(ValueError, match="already registered as value state, cannot use it as map state"):
        b.get_state(MapStateDescriptor("s"))


def test_unpicklable_value_is_named(make_rocks):
    b = make_rocks()
    v = b.get_state(ValueStateDescriptor("v"))
    at(b, "k")
    with pytest.raises(TypeError, match="operator 'op': state 'v' key 'k'"):
        v.update(lambda: 1)
    assert v.value() is None


def test_user_keys_serialize_deterministically():
    s = "ab"
    other = "".join(["a", "b"])
    assert encode_key((s, s)) == encode_key((s, other))
    assert encode_key(-0.0) == encode_key(0.0)
    assert pickle.loads(encode_key(("a", 1, (2.5, None)))) == ("a", 1, (2.5, None))


# --- epochs ----------------------------------------------------------------------------------------

def _write_epoch(st, backend, keys, base):
    for i, key in enumerate(keys):
        at(backend, key)
        st["v"].update(base + i)
        st["l"].add(base + i)
        st["m"].put(base, i)
        st["r"].add(i)
        st["a"].add(i)


def test_confirm_and_rollback(make_rocks):
    b = make_rocks()
    st = states(b)
    keys = ["a", "b", 3, ("t", 4)]
    _write_epoch(st, b, keys, 10)
    b.confirm()
    assert not b.has_pending() and b.changed_sections() == {}
    confirmed = read_all(b, st, keys + ["new"])
    full = b.all_sections()

    _write_epoch(st, b, keys + ["new"], 20)
    at(b, "a")
    st["v"].clear()
    st["m"].clear()
    st["l"].update([])
    at(b, "b")
    st["m"].remove(10)
    st["m"].put_all({1: 1, 2: 2})
    assert b.has_pending()
    assert read_all(b, st, keys + ["new"]) != confirmed
    b.rollback()
    assert read_all(b, st, keys + ["new"]) == confirmed
    assert b.all_sections() == full
    assert b.changed_sections() == {}

    _write_epoch(st, b, ["b"], 30)
    b.confirm()
    b.rollback()  # nothing pending: no change
    at(b, "b")
    assert st["v"].value() == 30


def test_delta_and_full_sections_match_heap(make_rocks):
    rocks = make_rocks()
    heap = HeapKeyedStateBackend("op", range(MAX_P))
    sr, sh = states(rocks), states(heap)
    keys = ["a", "b", 3, ("t", 4), "gone"]
    for backend, st in ((rocks, sr), (heap, sh)):
        _write_epoch(st, backend, keys, 10)
        backend.confirm()
    for backend, st in ((rocks, sr), (heap, sh)):
        _write_epoch(st, backend, ["a", "new"], 20)
        at(backend, "gone")
        for s in st.values():
            s.clear()
        at(backend, "never")
        st["v"].update(None)  # touched but absent: a delete, as on heap
        at(backend, "b")
        st["m"].remove(10)
    delta = rocks.changed_sections()
    assert norm(delta) == norm(heap.changed_sections())
    kg_gone = assign_to_key_group("gone", MAX_P)
    assert "gone" in delta[kg_gone]["m"][1] and "gone" in delta[kg_gone]["v"][1]
    assert norm(rocks.all_sections()) == norm(heap.all_sections())
    # encoded: the same payloads decode to the same sections
    assert set(rocks.full_sections()) == set(heap.full_sections())
    for kg, payload in rocks.full_sections().items():
        assert pickle.loads(payload) == heap.all_sections()[kg]



def test_row_values_are_stored_packed_and_restore_alike(make_rocks):
    """Values that are Rows of one named class (``KeyedStream.sum``'s state) go to state files one list
    per field: the payload decodes to the same section, Row classes included, at a fraction of the
    bytes, and restores across the two backends."""
    rocks, heap = make_rocks(), HeapKeyedStateBackend("op", range(MAX_P))
    keys = [f"k{i}" for i in range(2000)]  # ~125 per key group, as in a job with 16,000 keys on 128 key groups
    for backend in (rocks, heap):
        v = backend.get_state(ValueStateDescriptor("v"))
        m = backend.get_state(MapStateDescriptor("m"))
        for i, key in enumerate(keys):
            at(backend, key)
            v.update(Row(key=key, total=i))
            m.put("row", Row(key=key, total=-i))
    for backend in (rocks, heap):
        sections = backend.all_sections()
        for kg, payload in backend.full_sections().items():
            decoded = pickle.loads(payload)
            assert decoded == sections[kg]
            for puts, _ in decoded.values():
                assert list(puts) == list(sections[kg]["v" if puts is decoded["v"][0] else "m"][0])
            row = next(iter(decoded["v"][0].values()))
            assert row._fields == ("key", "total") and row.total == decoded["v"][0][row.key].total
        rows = {kg: {"v": section["v"]} for kg, section in sections.items()}
        plain = sum(len(pickle.dumps(section, protocol=5)) for section in rows.values())
        assert sum(len(encode_section(section, "op", kg)) for kg, section in rows.items()) < plain * 0.6
    for source, target in ((rocks, HeapKeyedStateBackend("op", range(MAX_P))), (heap, make_rocks())):
        _restore(target, source)
        v = target.get_state(ValueStateDescriptor("v"))
        at(target, "k7")
        assert v.value() == Row(key="k7", total=7) and v.value()._fields == ("key", "total")


def test_unpicklable_field_of_a_row_is_named_at_the_checkpoint():
    heap = HeapKeyedStateBackend("op", range(MAX_P))
    v = heap.get_state(ValueStateDescriptor("v"))
    for key in ("a", "b", "c"):
        at(heap, key)
        v.update(Row(key=key, total=(lambda: 1) if key == "b" else 1))
    with pytest.raises(TypeError, match="operator 'op': state 'v' key 'b'"):
        heap.full_sections()

def _restore(target, source):
    for kg, payload in source.full_sections().items():
        target.restore_payload(kg, payload)


def test_cross_restore_rocksdb_to_heap_and_back(make_rocks):
    rocks = make_rocks()
    sr = states(rocks)
    keys = [f"k{i}" for i in range(20)] + [(i, "t") for i in range(5)]
    _write_epoch(sr, rocks, keys, 1)
    full = rocks.full_sections()
    rocks.confirm()
    _write_epoch(sr, rocks, keys[:7], 100)
    at(rocks, keys[3])
    sr["m"].clear()
    sr["v"].clear()
    delta = rocks.delta_sections()
    rocks.confirm()
    expected = read_all(rocks, sr, keys)

    # RocksDB checkpoint (full + delta) → heap
    heap = HeapKeyedStateBackend("op", range(MAX_P))
    for sections in (full, delta):
        for kg, payload in sections.items():
            heap.restore_payload(kg, payload)
    assert read_all(heap, states(heap), keys) == expected
    assert norm(heap.all_sections()) == norm(rocks.all_sections())

    # heap checkpoint → a fresh RocksDB; states registered only after the restore (as in a task)
    again = make_rocks()
    _restore(again, heap)
    assert norm(again.all_sections()) == norm(heap.all_sections())
    st = states(again)
    assert read_all(again, st, keys) == expected
    assert norm(again.all_sections()) == norm(heap.all_sections())
    assert again.key_count() == heap.key_count()
    # and it keeps working as a map, one entry per map entry
    at(again, keys[0])
    st["m"].put("fresh", 1)
    assert st["m"].get("fresh") == 1 and st["m"].get(1) == 0


def test_restore_into_registered_states_and_deltas_replace_maps(make_rocks):
    b = make_rocks()
    st = states(b)
    at(b, "k")
    st["m"].put_all({"old": 1, "keep": 2})
    st["v"].update(1)
    kg = assign_to_key_group("k", MAX_P)
    b.confirm()
    # a delta section replaces the whole map of a user key and deletes others
    b.apply_section(kg, {"m": ({"k": {"keep": 3, "new": 4}}, []), "v": ({}, ["k"])})
    assert dict(st["m"].items()) == {"keep": 3, "new": 4} and st["v"].value() is None
    b.apply_section(kg, {"m": ({}, ["k"])})
    assert st["m"].is_empty() and raw_entries(b) == []
    assert not b.has_pending()


def test_rescale_split_and_merge(make_rocks):
    whole = make_rocks(range(MAX_P))
    st = states(whole)
    keys = [f"k{i}" for i in range(40)]
    _write_epoch(st, whole, keys, 1)
    whole.confirm()
    expected = read_all(whole, st, keys)
    full = whole.full_sections()
    halves = [make_rocks(range(0, 8)), make_rocks(range(8, MAX_P))]
    for half in halves:
        for kg, payload in full.items():
            half.restore_payload(kg, payload)  # each keeps only its own key groups
    assert set(halves[0].all_sections()) | set(halves[1].all_sections()) == set(full)
    merged = make_rocks(range(MAX_P))
    for half in halves:
        st_half = states(half)
        mine = [k for k in keys if assign_to_key_group(k, MAX_P) in half.key_groups]
        assert read_all(half, st_half, mine) == {k: expected[k] for k in mine}
        _restore(merged, half)
    assert read_all(merged, states(merged), keys) == expected


def test_apply_section_ignores_foreign_key_groups(make_rocks):
    b = make_rocks(range(4, 8))
    b.apply_section(2, {"v": ({"x": 1}, [])})
    b.apply_section(8, {"v": ({"x": 1}, [])})
    assert b.all_sections() == {}
    b.apply_section(5, {"v": ({"x": 1}, [])})
    assert b.all_sections() == {5: {"v": ({"x": 1}, [])}}


def test_restored_map_with_wrong_shape_is_named(make_rocks):
    b = make_rocks()
    b.apply_section(3, {"m": ({"k": 5}, [])})
    with pytest.raises(TypeError, match="state 'm' was restored with a int for key 'k'"):
        b.get_state(MapStateDescriptor("m"))


def _value_descriptor(through: str) -> ValueStateDescriptor:
    """A value state kept in the object cache ("objects") or, with a TTL, in the byte cache ("bytes")."""
    d = ValueStateDescriptor("v")
    if through == "bytes":
        d.enable_time_to_live(StateTtlConfig.new_builder(Time.hours(1)).build())
    return d


@pytest.mark.parametrize("through", ["objects", "bytes"])
@pytest.mark.parametrize("limit,cache", [(None, None), (1, None), (1, 1), (None, "prefetch")],
                         ids=["buffered", "flushed-every-write", "no-cache", "prefetched"])
def test_epoch_writes_read_back_then_roll_back_or_commit(make_rocks, monkeypatch, limit, cache, through):
    """An epoch's value writes wait in the backend's object cache (value states without TTL) or byte
    cache (with TTL) — RocksDB itself unchanged — while reads see them; a rollback drops them, a delta
    and a confirm write them. With a 1-entry object cache or 1-byte buffer every write goes to RocksDB
    at once and the undo log alone must restore the epoch's start; with a 1-byte cache nothing stays
    cached; with the epoch's keys prefetched every read is served by the cache."""
    import keyspan.state.rocksdb.backend as rocks_backend

    if limit is not None:
        monkeypatch.setattr(rocks_backend, "_DIRTY_LIMIT", limit)
    b = make_rocks()
    if limit is not None:
        b._object_limit = limit
    if cache == 1:
        b._cache_limit = 1
    v = b.get_state(_value_descriptor(through))
    cached = (lambda: v._values) if through == "objects" else (lambda: b._cache)
    keys = ["a", "b", 3, ("t", 4), "gone"]
    for i, k in enumerate(keys):
        at(b, k)
        v.update(i)
    b.confirm()
    on_disk = sorted(b._db.items())
    if cache == "prefetch":
        b._drop_cache()
        v.trim() if through == "objects" else None
        b.prefetch([assign_to_key_group(k, MAX_P) for k in keys + ["new"]], keys + ["new"])
        assert len(cached()) == len(keys) + 1
    for k in keys:
        at(b, k)
        v.update(v.value() + 10)
        v.update(v.value() + 10)  # read back from the buffer, not from RocksDB
    at(b, "gone")
    v.clear()
    at(b, "new")
    v.update(99)
    assert [(at(b, k), v.value())[1] for k in keys + ["new"]] == [20, 21, 22, 23, None, 99]
    assert (sorted(b._db.items()) == on_disk) is (limit is None)
    b.rollback()
    assert sorted(b._db.items()) == on_disk
    assert [(at(b, k), v.value())[1] for k in keys + ["new"]] == [0, 1, 2, 3, 4, None]
    for k in keys:
        at(b, k)
        v.update(v.value() + 1)
    delta = norm(b.changed_sections())
    plain = (lambda p: p[0]) if through == "bytes" else (lambda p: p)  # sections carry TtlValues
    assert sorted(plain(p) for sec in delta.values() for p in sec["v"][0].values()) == [1, 2, 3, 4, 5]
    b.confirm()
    assert [(at(b, k), v.value())[1] for k in keys] == [1, 2, 3, 4, 5]


def test_object_cache_reads_are_copies_and_large_values_take_the_byte_cache(make_rocks):
    """Value states without TTL keep values as objects, yet behave as RocksDB's: a read is a copy
    the caller may change, a stored value does not follow later changes to the caller's object. A
    value whose pickle is larger than 4 KB goes through the byte cache instead; a key's newest value
    wins whichever cache holds it, in reads, deltas, rollbacks and after a confirm."""
    b = make_rocks()
    v = b.get_state(ValueStateDescriptor("v"))
    at(b, "k")
    kg = b.current_key_group
    v.update([1, 2])
    v.value().append(3)
    assert v.value() == [1, 2]
    mine = [5]
    v.update(mine)
    mine.append(6)
    assert v.value() == [5]
    b.confirm()
    big = "x" * 10_000
    v.update(big)
    assert "k" not in v._values and v.value() == big
    assert norm(b.changed_sections()) == {kg: {"v": ({"k": big}, [])}}
    b.rollback()
    assert v.value() == [5]
    v.update(big)
    b.confirm()
    v.update(7)  # small again: the object cache's value is newer than the byte cache's
    assert v.value() == 7 and norm(b.changed_sections()) == {kg: {"v": ({"k": 7}, [])}}
    b.rollback()
    assert v.value() == big
    v.update(7)
    b.confirm()
    v.trim()
    assert v.value() == 7 and b.all_sections() == {kg: {"v": ({"k": 7}, [])}}


def test_restored_large_values_are_read_from_rocksdb_not_the_object_cache(make_rocks):
    b = make_rocks()
    big = "y" * 10_000
    kg = assign_to_key_group("k", MAX_P)
    b.apply_section(kg, {"v": ({"k": big}, [])})
    v = b.get_state(ValueStateDescriptor("v"))
    b.prefetch([kg, kg], ["k", "k"])
    assert "k" not in v._values
    at(b, "k")
    assert v.value() == big and "k" not in v._values
    v.update(v.value() + "z")
    b.confirm()
    assert v.value() == big + "z" and b.all_sections() == {kg: {"v": ({"k": big + "z"}, [])}}


def _caught_up_section(rng, keys) -> dict:
    """Key group → section of another worker's epoch for some of ``keys``: numbers, a list (a mutable
    value) or deletes in the value state, sums and accumulators in the reducing and aggregating ones."""
    sections: dict = {}
    for key in rng.sample(keys, 6):
        section = sections.setdefault(assign_to_key_group(key, MAX_P), {})
        for name, value in (("v", rng.choice([rng.randrange(100), [rng.randrange(9)], None])),
                            ("r", rng.choice([rng.randrange(100), None])),
                            ("a", rng.choice([(rng.randrange(100), rng.randrange(1, 5)), None]))):
            puts, deletes = section.setdefault(name, ({}, []))
            deletes.append(key) if value is None else puts.__setitem__(key, value)
    return sections


@pytest.mark.parametrize("cache", ["default", "prefetch", "tiny"])
def test_random_operations_match_heap(make_rocks, cache):
    """Differential: the same random operations, epochs confirmed or rolled back at random, and now
    and then another worker's epoch caught up on; on RocksDB with the epoch's keys prefetched (read
    from the cache) or with a cache so small that it is flushed and emptied between operations."""
    rng = random.Random(7)
    kgs = range(3, 13)
    keys = [k for k in [*range(40), *(f"s{i}" for i in range(40)), *((i, "t") for i in range(20))]
            if assign_to_key_group(k, MAX_P) in kgs][:30]
    rocks, heap = make_rocks(kgs), HeapKeyedStateBackend("op", kgs)
    if cache == "tiny":
        rocks._cache_limit = 300
        rocks._object_limit = 2
    sr, sh = states(rocks), states(heap)

    def op():
        return rng.choice("vvlllmmmmra"), rng.randrange(9), rng.randrange(6)

    for epoch in range(25):
        ops = [(rng.choice(keys), op()) for _ in range(rng.randrange(1, 40))]
        if cache == "prefetch":
            rocks.prefetch([assign_to_key_group(k, MAX_P) for k, _ in ops], [k for k, _ in ops])
        for backend, st in ((rocks, sr), (heap, sh)):
            for key, (kind, action, x) in ops:
                at(backend, key)
                s = st[kind]
                if action == 0:
                    s.clear()
                elif kind == "v":
                    s.update(None if action == 1 else x)
                elif kind == "l":
                    (s.add(x) if action < 4 else s.add_all([x, x + 1]) if action < 6 else
                     s.update([] if action == 6 else [x]))
                elif kind == "m":
                    (s.put(x, action) if action < 4 else s.remove(x) if action < 7 else s.put_all({x: 1, x + 1: 2}))
                else:
                    s.add(x)
        assert norm(rocks.changed_sections()) == norm(heap.changed_sections()), epoch
        assert norm(rocks.all_sections()) == norm(heap.all_sections()), epoch  # the epoch's writes included
        roll = rng.random() < 0.3
        for backend in (rocks, heap):
            backend.rollback() if roll else backend.confirm()
        assert read_all(rocks, sr, keys) == read_all(heap, sh, keys), epoch
        if rng.random() < 0.3:
            for kg, section in _caught_up_section(rng, keys).items():
                payload = encode_section(section, "op", kg)
                rocks.restore_payload(kg, payload)
                heap.restore_payload(kg, payload)
            assert read_all(rocks, sr, keys) == read_all(heap, sh, keys), epoch
    assert norm(rocks.all_sections()) == norm(heap.all_sections())
    restored = make_rocks(kgs)
    _restore(restored, heap)
    assert read_all(restored, states(restored), keys) == read_all(heap, sh, keys)


# --- snapshots built one key group at a time -------------------------------------------------------

def _encoded(sections):
    return {kg: pickle.dumps(section, protocol=5) for kg, section in sections.items()}


def test_full_and_delta_sections_are_lazy_point_in_time_views(make_rocks):
    """full_sections/delta_sections encode one key group at a time as they are read (what
    statefile.write streams), yet they are snapshots: what the backend does afterwards (the next
    epoch's writes, a rollback) does not show in them, however often they are read."""
    from keyspan.state.backend import LazySections

    b = make_rocks()
    st = states(b)
    keys = [f"k{i}" for i in range(30)] + [(i, "t") for i in range(5)]
    _write_epoch(st, b, keys, 1)
    b.confirm()
    _write_epoch(st, b, keys[:6], 50)
    at(b, keys[7])
    st["m"].clear()
    st["v"].clear()
    expected_full = _encoded(b.all_sections())
    expected_delta = _encoded(b.changed_sections())
    full, delta = b.full_sections(), b.delta_sections()
    assert isinstance(full, LazySections) and isinstance(delta, LazySections)
    b.rollback()  # undoes the epoch: the views keep what they saw
    _write_epoch(st, b, keys[10:], 999)  # and a later epoch's writes
    at(b, "new key")
    st["v"].update(1)
    for _ in range(2):  # read again: the same snapshot
        assert dict(full.items()) == expected_full and dict(delta.items()) == expected_delta
    assert list(full) == sorted(expected_full) and len(full) == len(expected_full) and bool(full)
    kg = next(iter(expected_full))
    assert full[kg] == expected_full[kg] and kg in full and 999 not in full
    with pytest.raises(KeyError):
        full[999]
    b.confirm()
    assert not b.delta_sections() and len(b.delta_sections()) == 0


def test_full_snapshot_scans_one_key_group_at_a_time(make_rocks, monkeypatch):
    """The full snapshot builds each key group's section from a range scan of that key group alone
    and hands it on before building the next one."""
    b = make_rocks()
    v = b.get_state(ValueStateDescriptor("v"))
    for i in range(200):
        at(b, i)
        v.update(i)
    b.confirm()
    built = []
    real = RocksDBKeyedStateBackend._group_section

    def spy(keys, raws, names, horizons):
        built.append({(k[0] << 8) | k[1] for k in keys})
        return real(keys, raws, names, horizons)

    monkeypatch.setattr(RocksDBKeyedStateBackend, "_group_section", staticmethod(spy))
    full = b.full_sections()
    seen = []
    for kg, payload in full.items():
        seen.append(kg)
        assert built[-1] == {kg}  # only this key group's entries were read for it
        assert len(built) == len(seen) + sum(1 for g in built if not g)
    assert seen == sorted({assign_to_key_group(i, MAX_P) for i in range(200)})


def test_restore_writes_a_large_key_group_in_bounded_batches(make_rocks, monkeypatch):
    """restore_payload hands a key group to RocksDB in write batches of ~_Batch.LIMIT bytes, dropping
    values from the decoded section as it goes; apply_section leaves a caller's section alone."""
    from keyspan.state import rocksdb as rocks_module

    source = make_rocks()
    st = states(source)
    keys = [i for i in range(300) if assign_to_key_group(i, MAX_P) == 3]
    for i in keys:
        at(source, i)
        st["v"].update(bytes(1000))
        st["m"].put(i, bytes(500))
    source.confirm()
    payload = source.full_sections()[3]
    monkeypatch.setattr(rocks_module._Batch, "LIMIT", 10_000)
    target = make_rocks()
    writes = []
    monkeypatch.setattr(target, "_db", _Spy(target._db, writes))
    target.restore_payload(3, payload)
    assert len(writes) >= len(keys) * 1500 // 10_000 and all(w <= 10_000 + 2000 for w in writes[:-1])
    assert norm(target.all_sections()) == norm(source.all_sections())
    section = pickle.loads(payload)
    again = make_rocks()
    again.apply_section(3, section)
    assert section == pickle.loads(payload)  # not consumed
    assert norm(again.all_sections()) == norm(source.all_sections())


class _Spy:
    """A Rdict stand-in that records the size of every write batch."""

    def __init__(self, db, writes):
        self._db, self._writes = db, writes

    def write(self, wb):
        self._writes.append(wb.size_in_bytes())
        return self._db.write(wb)

    def __getattr__(self, name):
        return getattr(self._db, name)


def test_keys_of_scans_one_state_without_decoding_the_others(make_rocks, monkeypatch):
    """keys_of (timers, apply_to_keyed_state) reads the keys of one state only, as the heap backend
    lists them, instead of decoding every state's values."""
    from keyspan.state.backend import KeyedStateBackend

    b = make_rocks()
    st = states(b)
    keys = [f"k{i}" for i in range(40)] + [(i, "t") for i in range(5)]
    _write_epoch(st, b, keys, 1)
    at(b, keys[3])
    st["v"].clear()
    b.confirm()
    expected = {name: sorted(KeyedStateBackend.keys_of(b, name), key=repr) for name in DESCRIPTORS}
    monkeypatch.setattr(RocksDBKeyedStateBackend, "all_sections", None)  # must not be needed
    assert {name: sorted(b.keys_of(name), key=repr) for name in DESCRIPTORS} == expected
    assert len(expected["v"]) == len(keys) - 1 and len(expected["m"]) == len(keys)
    assert list(b.keys_of("unknown")) == []


def test_rocksdb_memory_is_bounded_by_the_memory_configuration(tmp_path):
    """One block cache and one write-buffer manager per process and memory configuration, sized as
    Flink sizes them; memtables are charged to the cache, so after writing far more than the budget
    the cache's usage stays within its capacity."""
    import rocksdict

    from keyspan.state.rocksdb import _SHARED_MEMORY, RocksDBMemoryConfiguration, parse_memory_size

    assert parse_memory_size("64mb") == parse_memory_size("64 m") == 64 << 20
    assert parse_memory_size(1000) == 1000 and parse_memory_size("1g") == 1 << 30
    for bad in ("lots", "-1mb", 0, "12 parsecs"):
        with pytest.raises(ValueError):
            parse_memory_size(bad)
    spec = EmbeddedRocksDBStateBackend()
    config = spec.get_memory_configuration()
    assert isinstance(config, RocksDBMemoryConfiguration)
    assert config.get_fixed_memory_per_slot() == 128 << 20 and config.get_write_buffer_ratio() == 0.5
    config.set_fixed_memory_per_slot("24mb")
    config.set_write_buffer_ratio(0.25)
    with pytest.raises(ValueError):
        config.set_write_buffer_ratio(1.5)
    cache_bytes, memtables, write_buffer = config.sizes()
    assert cache_bytes == int(24 * 2**20 * 2.75 / 3) and memtables == int(2 * 24 * 2**20 * 0.25 / 3)
    assert write_buffer == memtables // 2
    spec = pickle.loads(cloudpickle.dumps(spec))  # shipped to the workers with the job
    backends = [spec.create_keyed_backend("op", range(i * 4, i * 4 + 4), local_dir=str(tmp_path)) for i in range(3)]
    try:
        cache, manager = _SHARED_MEMORY[spec.get_memory_configuration()._key()]
        assert manager.get_buffer_size() == memtables
        rng = random.Random(3)
        for n, b in enumerate(backends):
            v = b.get_state(ValueStateDescriptor("v"))
            for i in range(1500):  # 3 × 1500 × 20 kB = 90 MB through 24 MB
                b.set_current_key((n, i), b.key_groups.start + i % 4)
                v.update(rng.randbytes(20_000))
                if i % 100 == 0:
                    b.confirm()
            b.confirm()
            assert cache.get_usage() <= cache_bytes * 1.1
        assert isinstance(cache, rocksdict.Cache)
    finally:
        for b in backends:
            b.close()


# --- the spec --------------------------------------------------------------------------------------

def test_spec_is_picklable_and_backend_lives_in_a_temp_dir():
    spec = EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True)
    assert spec.name == "rocksdb" and spec.is_incremental_checkpoints_enabled()
    spec = pickle.loads(cloudpickle.dumps(spec))
    backend = spec.create_keyed_backend("my/op", range(8, 16))
    try:
        assert isinstance(backend, RocksDBKeyedStateBackend)
        root = os.path.join(tempfile.gettempdir(), "keyspan-rocksdb", str(os.getpid()))
        assert os.path.dirname(backend.path) == root
        assert os.path.basename(backend.path).startswith("my_op-8-16-")
        assert os.path.isdir(backend.path)
    finally:
        backend.close()
    assert not os.path.exists(backend.path)


# --- through a job ---------------------------------------------------------------------------------

class RunningSum(KeyedProcessFunction):
    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))
        self.seen = runtime_context.get_map_state(MapStateDescriptor("seen"))

    def process_element(self, value, ctx):
        from pyspark import TaskContext

        tc = TaskContext.get()
        if value[1] == 17 and tc is not None and tc.attemptNumber() == 0:
            raise RuntimeError("injected failure: this attempt's changes must be rolled back")
        total = (self.total.value() or 0) + value[1]
        self.total.update(total)
        parity = value[1] % 2
        self.seen.put(parity, (self.seen.get(parity) or 0) + 1)
        yield ctx.get_current_key(), total, dict(self.seen.items()), type(self.total).__name__


def test_running_sum_job_on_rocksdb(env):
    env.set_state_backend(EmbeddedRocksDBStateBackend())
    env.set_max_records_per_epoch(6)
    data = [(f"k{i % 4}", i) for i in range(30)]
    result = env.from_collection(data).key_by(lambda r: r[0]).process(RunningSum()).execute_and_collect(limit=1000)
    totals, seen, want = {}, {}, []
    for k, v in data:
        totals[k] = totals.get(k, 0) + v
        counts = seen.setdefault(k, {})
        counts[v % 2] = counts.get(v % 2, 0) + 1
        want.append((k, totals[k], dict(counts), "RocksDBValueState"))
    assert sorted(map(repr, result)) == sorted(map(repr, want))
