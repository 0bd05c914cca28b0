"""Semantics of every keyed state type, through real jobs over several epochs.

Each job runs an interpreter: a record is ``(key, seq, ops)`` and the KeyedProcessFunction applies the
ops to its states and emits what it observed. A plain-Python model applies the same ops to dicts; the
job's output must equal the model's. Every key occurs at most once per epoch (epochs are
``set_max_records_per_epoch(len(KEYS))`` records), so the order of a key's records is the epoch order
whatever Spark does inside an epoch, and every record but the first of a key reads state that an
earlier epoch — possibly another worker process — wrote.
"""

from __future__ import annotations

import random

import pytest

from keyspan.common import Types
from keyspan.datastream import AggregateFunction, KeyedProcessFunction, ReduceFunction
from keyspan.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)

KEYS = ["alice", "bob", 7, -3, ("tuple", 1), ""]
EPOCHS = 5
ABSENT = "<absent>"


# --- user functions used by the states -------------------------------------------------------------

class MaxReduce(ReduceFunction):
    def reduce(self, value1, value2):
        return value1 if value1 >= value2 else value2


class Average(AggregateFunction):
    """The usual Flink pattern: a mutable accumulator updated in place."""

    def create_accumulator(self):
        return [0, 0]

    def add(self, value, accumulator):
        accumulator[0] += value
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator):
        return (accumulator[0], accumulator[1])

    def merge(self, acc_a, acc_b):
        return [acc_a[0] + acc_b[0], acc_a[1] + acc_b[1]]


def _descriptors():
    return {
        "value": ValueStateDescriptor("value", Types.PICKLED_BYTE_ARRAY()),
        "list": ListStateDescriptor("list", Types.LONG()),
        "map": MapStateDescriptor("map", Types.STRING(), Types.LONG()),
        "sum": ReducingStateDescriptor("sum", lambda a, b: a + b, Types.LONG()),
        "max": ReducingStateDescriptor("max", MaxReduce(), Types.LONG()),
        "avg": AggregatingStateDescriptor("avg", Average(), Types.PICKLED_BYTE_ARRAY()),
    }


def _get(runtime_context, name, descriptor):
    getter = {"value": runtime_context.get_state, "list": runtime_context.get_list_state,
              "map": runtime_context.get_map_state, "sum": runtime_context.get_reducing_state,
              "max": runtime_context.get_reducing_state, "avg": runtime_context.get_aggregating_state}[name]
    return getter(descriptor)


def _sorted(values):
    return sorted(values, key=repr)


class StateInterpreter(KeyedProcessFunction):
    def __init__(self, names):
        self.names = list(names)

    def open(self, runtime_context):
        descriptors = _descriptors()
        self.states = {n: _get(runtime_context, n, descriptors[n]) for n in self.names}
        # asking again for the same name gives the same state; another kind under that name is refused
        again = _get(runtime_context, self.names[0], descriptors[self.names[0]])
        self.same_object = again is self.states[self.names[0]]
        try:
            other = "list" if self.names[0] != "list" else "value"
            _get(runtime_context, other, type(descriptors[other])(self.names[0]))
            self.conflict = "accepted"
        except ValueError as exc:
            self.conflict = "refused" if self.names[0] in str(exc) else f"wrong message: {exc}"

    def process_element(self, value, ctx):
        key, seq, ops = value
        observed = [self._apply(op) for op in ops]
        yield ctx.get_current_key(), seq, observed, self.same_object, self.conflict

    def _apply(self, op):
        name, action, *args = op
        s = self.states[name]
        if name == "value":
            if action == "value":
                return s.value()
            if action == "update":
                return s.update(args[0])
            if action == "clear":
                return s.clear()
        elif name == "list":
            if action == "get":
                got = s.get()
                return None if got is None else list(got)
            if action == "iter":
                return list(s)
            if action == "add":
                return s.add(args[0])
            if action == "add_all":
                return s.add_all(args[0])
            if action == "update":
                return s.update(args[0])
            if action == "clear":
                return s.clear()
            if action == "add_none":
                try:
                    s.add(None)
                    return "accepted"
                except Exception:  # noqa: BLE001 — Flink refuses null elements
                    return "refused"
        elif name == "map":
            if action == "get":
                return s.get(args[0]) if s.contains(args[0]) else ABSENT
            if action == "getitem":
                return s[args[0]] if args[0] in s else ABSENT
            if action == "put":
                return s.put(args[0], args[1])
            if action == "setitem":
                s[args[0]] = args[1]
                return None
            if action == "put_all":
                return s.put_all(args[0])
            if action == "remove":
                return s.remove(args[0])
            if action == "delitem":
                del s[args[0]]
                return None
            if action == "contains":
                return s.contains(args[0])
            if action == "in":
                return args[0] in s
            if action == "keys":
                return _sorted(s.keys())
            if action == "iter":
                return _sorted(iter(s))
            if action == "values":
                return _sorted(s.values())
            if action == "items":
                return _sorted(s.items())
            if action == "is_empty":
                return s.is_empty()
            if action == "clear":
                return s.clear()
        else:  # reducing / aggregating
            if action == "get":
                return s.get()
            if action == "add":
                return s.add(args[0])
            if action == "clear":
                return s.clear()
        raise ValueError(f"unknown op {op!r}")


# --- the reference model ---------------------------------------------------------------------------

class Model:
    """Flink's state semantics over plain Python values, one instance per key."""

    def __init__(self):
        self.value = None
        self.list = []
        self.map = {}
        self.sum = None
        self.max = None
        self.avg = None  # (sum, count)

    def holds_state(self):
        return any(v not in (None, [], {}) for v in (self.value, self.list, self.map, self.sum, self.max, self.avg))

    def apply(self, op):
        name, action, *args = op
        if name == "value":
            if action == "value":
                return self.value
            if action == "update":
                self.value = args[0]  # update(None) is clear()
            elif action == "clear":
                self.value = None
            return None
        if name == "list":
            if action in ("get", "iter"):
                return list(self.list)
            if action == "add":
                self.list.append(args[0])
            elif action == "add_all":
                self.list.extend(args[0])
            elif action == "update":
                self.list = list(args[0])
            elif action == "clear":
                self.list = []
            elif action == "add_none":
                return "refused"
            return None
        if name == "map":
            m = self.map
            if action in ("get", "getitem"):
                return m.get(args[0], ABSENT)
            if action in ("put", "setitem"):
                m[args[0]] = args[1]
            elif action == "put_all":
                m.update(args[0])
            elif action in ("remove", "delitem"):
                m.pop(args[0], None)
            elif action in ("contains", "in"):
                return args[0] in m
            elif action in ("keys", "iter"):
                return _sorted(m)
            elif action == "values":
                return _sorted(m.values())
            elif action == "items":
                return _sorted(m.items())
            elif action == "is_empty":
                return not m
            elif action == "clear":
                m.clear()
            return None
        if action == "get":
            if name == "avg":
                return None if self.avg is None else self.avg
            return getattr(self, name)
        if action == "clear":
            setattr(self, name, None)
            return None
        if action == "add":
            v = args[0]
            current = getattr(self, name)
            if name == "sum":
                self.sum = v if current is None else current + v
            elif name == "max":
                self.max = v if current is None else max(current, v)
            else:
                self.avg = (v, 1) if current is None else (current[0] + v, current[1] + 1)
            return None
        raise ValueError(op)


# --- random programs ----------------------------------------------------------------------------

def _op(rng, name):
    v = rng.randint(-50, 50)
    mk = rng.choice("abcd")
    if name == "value":
        return rng.choice([("value", "value"), ("value", "value"), ("value", "update", v),
                           ("value", "update", rng.choice([f"s{v}", (v, "t"), {"n": v}, [v, v]])),
                           ("value", "update", None), ("value", "clear")])
    if name == "list":
        return rng.choice([("list", "get"), ("list", "get"), ("list", "iter"), ("list", "add", v),
                           ("list", "add", v), ("list", "add_all", [v, v + 1]), ("list", "add_all", []),
                           ("list", "update", [v, -v, 3]), ("list", "update", []), ("list", "clear"),
                           ("list", "add_none")])
    if name == "map":
        return rng.choice([("map", "get", mk), ("map", "getitem", mk), ("map", "put", mk, v),
                           ("map", "put", mk, v), ("map", "setitem", mk, v), ("map", "put", mk, None),
                           ("map", "put_all", {mk: v, rng.choice("abcd"): v + 1}), ("map", "remove", mk),
                           ("map", "delitem", mk), ("map", "contains", mk), ("map", "in", mk),
                           ("map", "keys"), ("map", "iter"), ("map", "values"), ("map", "items"),
                           ("map", "is_empty"), ("map", "clear")])
    return rng.choice([(name, "get"), (name, "get"), (name, "add", v), (name, "add", v), (name, "add", v),
                       (name, "clear")])


KINDS = {
    "value": ["value"],
    "list": ["list"],
    "map": ["map"],
    "reducing": ["sum", "max"],
    "aggregating": ["avg"],
    "mixed": ["value", "list", "map", "sum", "max", "avg"],
}


def _program(kind, seed):
    """EPOCHS epochs; in each, every key once (in a random order) with a few ops."""
    rng = random.Random(seed)
    names = KINDS[kind]
    records = []
    for _ in range(EPOCHS):
        for key in rng.sample(KEYS, len(KEYS)):
            ops = [_op(rng, rng.choice(names)) for _ in range(rng.randint(1, 6))]
            records.append((key, len(records), ops))
    return records


def _reference(records):
    """seq → (key, observations); also counts records that found state an earlier epoch left."""
    models = {}
    expected = {}
    carried = 0
    for key, seq, ops in records:
        model = models.get(repr(key))
        if model is None:
            model = models[repr(key)] = Model()
        elif model.holds_state():
            carried += 1
        expected[seq] = (key, [model.apply(op) for op in ops])
    return expected, carried


@pytest.mark.parametrize("kind", list(KINDS))
def test_state_semantics_match_reference_model(env, kind):
    env.set_max_records_per_epoch(len(KEYS))
    records = _program(kind, seed=f"state-{kind}")
    results = (env.from_collection(records)
               .key_by(lambda r: r[0])
               .process(StateInterpreter(KINDS[kind]))
               .execute_and_collect(limit=10_000))
    expected, carried = _reference(records)
    assert len(results) == len(records)
    got = {}
    for key, seq, observed, same_object, conflict in results:
        assert same_object is True
        assert conflict == "refused"
        got[seq] = (key, observed)  # key is ctx.get_current_key()
    assert set(got) == set(expected)
    for seq in sorted(expected):
        assert got[seq] == expected[seq], f"record {records[seq]}: got {got[seq]}, expected {expected[seq]}"
    # the program really carries state across epochs: many records start from state an earlier epoch left
    assert carried >= len(KEYS)


def test_program_covers_every_operation():
    """The random programs above (fixed seeds) use every operation of every state type."""
    used = {(op[0], op[1]) for kind in KINDS for _, _, ops in _program(kind, seed=f"state-{kind}") for op in ops}
    wanted = {("value", a) for a in ("value", "update", "clear")}
    wanted |= {("list", a) for a in ("get", "iter", "add", "add_all", "update", "clear", "add_none")}
    wanted |= {("map", a) for a in ("get", "getitem", "put", "setitem", "put_all", "remove", "delitem",
                                   "contains", "in", "keys", "iter", "values", "items", "is_empty", "clear")}
    wanted |= {(n, a) for n in ("sum", "max", "avg") for a in ("get", "add", "clear")}
    assert wanted <= used, wanted - used


def test_aggregate_function_merge_agrees_with_add():
    f = Average()
    values = [3, -1, 8, 8, 0, 5]
    whole = f.create_accumulator()
    for v in values:
        whole = f.add(v, whole)
    a, b = f.create_accumulator(), f.create_accumulator()
    for v in values[:2]:
        a = f.add(v, a)
    for v in values[2:]:
        b = f.add(v, b)
    assert f.get_result(f.merge(a, b)) == f.get_result(whole) == (sum(values), len(values))


# --- a stateful job that mixes states, written the ordinary way ---------------------------------------

class SessionStats(KeyedProcessFunction):
    """Per user: click count (value), last three pages (list), visits per page (map), total and
    longest duration (reducing), average duration (aggregating)."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.recent = runtime_context.get_list_state(ListStateDescriptor("recent", Types.STRING()))
        self.pages = runtime_context.get_map_state(MapStateDescriptor("pages", Types.STRING(), Types.LONG()))
        self.total = runtime_context.get_reducing_state(
            ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG()))
        self.longest = runtime_context.get_reducing_state(ReducingStateDescriptor("longest", MaxReduce()))
        self.avg = runtime_context.get_aggregating_state(AggregatingStateDescriptor("avg", Average()))

    def process_element(self, value, ctx):
        user, page, duration = value
        if page == "logout":  # forget everything about the user
            for s in (self.count, self.recent, self.pages, self.total, self.longest, self.avg):
                s.clear()
            yield ctx.get_current_key(), 0, [], [], None, None, None
            return
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        recent = list(self.recent.get()) + [page]
        self.recent.update(recent[-3:])
        self.pages.put(page, (self.pages.get(page) if self.pages.contains(page) else 0) + 1)
        self.total.add(duration)
        self.longest.add(duration)
        self.avg.add(duration)
        yield (ctx.get_current_key(), n, list(self.recent.get()), sorted(self.pages.items()), self.total.get(),
               self.longest.get(), self.avg.get())


def test_mixed_states_in_one_function(env):
    env.set_max_records_per_epoch(4)
    rng = random.Random(11)
    users = ["u1", "u2", "u3", "u4"]
    events = []
    for _ in range(6):  # each epoch: every user once
        for user in rng.sample(users, len(users)):
            page = rng.choice(["home", "cart", "search", "home", "logout"] if events else ["home"])
            events.append((user, page, rng.randint(1, 9)))
    results = (env.from_collection(events).key_by(lambda e: e[0]).process(SessionStats())
               .execute_and_collect(limit=1000))

    expected = []
    per_user = {}
    for user, page, duration in events:
        st = per_user.setdefault(user, {"n": 0, "recent": [], "pages": {}, "durations": []})
        if page == "logout":
            per_user[user] = {"n": 0, "recent": [], "pages": {}, "durations": []}
            expected.append((user, 0, [], [], None, None, None))
            continue
        st["n"] += 1
        st["recent"] = (st["recent"] + [page])[-3:]
        st["pages"][page] = st["pages"].get(page, 0) + 1
        st["durations"].append(duration)
        d = st["durations"]
        expected.append((user, st["n"], list(st["recent"]), sorted(st["pages"].items()), sum(d), max(d),
                         (sum(d), len(d))))
    assert sorted(map(repr, results)) == sorted(map(repr, expected))
    assert any(r[1] >= 3 for r in expected) and any(r[1] == 0 for r in expected)  # state lived, and was cleared


# --- rollback of an epoch restores state that user functions mutated in place ---------------------------

def test_rollback_restores_accumulators_mutated_in_place():
    """An epoch's changes are undone when another attempt's output is committed instead. A reduce or
    aggregate function may update the stored object in place (Flink's usual accumulator pattern); the
    undo log must still hold the pre-epoch value."""
    from keyspan.state.heap import HeapKeyedStateBackend

    backend = HeapKeyedStateBackend("op", range(0, 8))
    avg = backend.get_state(AggregatingStateDescriptor("avg", Average()))
    appended = backend.get_state(ReducingStateDescriptor("appended", lambda a, b: (a.extend(b), a)[1]))
    backend.set_current_key("k", 3)
    avg.add(2)
    appended.add([1])
    backend.confirm()  # epoch 1 committed
    avg.add(10)
    appended.add([2])
    assert avg.get() == (12, 2) and appended.get() == [1, 2]
    backend.rollback()  # epoch 2 is redone by another attempt
    assert avg.get() == (2, 1)
    assert appended.get() == [1]
    # and the redo sees exactly the committed state
    avg.add(4)
    assert avg.get() == (6, 2)
