"""Broadcast state: a low-rate stream of rules broadcast to a high-rate stream of transactions
(seed 001), keyed and non-keyed; broadcast elements of an epoch are processed before its other
elements in every subtask; the state is checkpointed, in savepoints, and copied to new subtasks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from keyspan.checkpoint.metadata import MetadataStore
from keyspan.checkpoint.reader import read_keyed_state
from keyspan.io.storage import Storage
from keyspan.common import Encoder
from keyspan.connectors.sources import CollectionSource
from keyspan.datastream import (
    BroadcastProcessFunction,
    BroadcastStream,
    KeyedBroadcastProcessFunction,
    StreamExecutionEnvironment,
)
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.state import MapStateDescriptor, ValueStateDescriptor
from keyspan.runtime import options as run_options
from keyspan.runtime.worker import state_io
from keyspan.state.keygroups import assign_to_key_group, compute_operator_index_for_key_group

from test_operator_state import _run_in_background, restore_and_run, stop_with_savepoint_after

RULES = MapStateDescriptor("rules")
RULE_UPDATES = [("max_amount", 150), ("max_amount", 100), ("max_amount", 60)]
ACCOUNTS = 12
TX_PER_EPOCH = 20
TRANSACTIONS = [(f"acct-{i % ACCOUNTS:02d}", (i * 37) % 200, i) for i in range(240)]


class FlagLargeTransactions(KeyedBroadcastProcessFunction):
    """Flags a transaction over the current ``max_amount`` rule; counts transactions per account."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.subtask = runtime_context.get_index_of_this_subtask()

    def process_element(self, value, ctx):
        account, amount, tx_id = value
        assert ctx.get_current_key() == account
        rules = ctx.get_broadcast_state(RULES)
        limit = rules.get("max_amount")
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield "tx", tx_id, account, amount, limit, amount > limit, n

    def process_broadcast_element(self, value, ctx):
        name, limit = value
        ctx.get_broadcast_state(RULES).put(name, limit)
        accounts = []
        ctx.apply_to_keyed_state(ValueStateDescriptor("count"), lambda key, state: accounts.append(key))
        yield "rule", name, limit, self.subtask, len(accounts)


class ScaleByRule(BroadcastProcessFunction):
    """Non-keyed: the broadcast state is read-only on the data side, and only declared states exist."""

    def process_element(self, value, ctx):
        state = ctx.get_broadcast_state(RULES)
        checks = (not hasattr(state, "put"), _raises(state.clear), _raises(lambda: ctx.get_broadcast_state(
            MapStateDescriptor("undeclared"))))
        yield "scaled", value[2], value[1] * 1000 // state.get("max_amount"), checks

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(*value)
        return None


def _raises(fn) -> bool:
    try:
        fn()
    except Exception:  # noqa: BLE001
        return True
    return False


def _rules_source(env):
    source = CollectionSource(RULE_UPDATES)
    source.max_per_epoch = 1  # a low-rate stream: one rule update per epoch
    return env.from_source(source, source_name="rules").uid("rules")


def _limit_for(tx_id: int) -> int:
    """Epoch e holds rule update e and transactions [e·20, e·20+20); the rule applies to all of them."""
    return RULE_UPDATES[min(tx_id // TX_PER_EPOCH, len(RULE_UPDATES) - 1)][1]


def _owner(account: str, parallelism: int) -> int:
    return compute_operator_index_for_key_group(128, parallelism, assign_to_key_group(account, 128))


def _tx_reference(transactions):
    counts, out = {}, []
    for account, amount, tx_id in transactions:
        counts[account] = counts.get(account, 0) + 1
        limit = _limit_for(tx_id)
        out.append(("tx", tx_id, account, amount, limit, amount > limit, counts[account]))
    return out


@pytest.mark.parametrize("in_driver", [0, 1000], ids=["spark-jobs", "epochs-in-driver"])
def test_rules_broadcast_to_keyed_and_non_keyed_transactions(env, in_driver):
    """Also with every epoch run in the driver, which orders each subtask's input itself."""
    env.set_max_records_per_epoch(TX_PER_EPOCH)
    env.set_small_epochs_in_driver(in_driver)
    data = TRANSACTIONS[:4 * TX_PER_EPOCH]
    broadcast = _rules_source(env).broadcast(RULES)
    assert isinstance(broadcast, BroadcastStream)
    transactions = env.from_collection(data).uid("transactions")
    flagged = transactions.key_by(lambda t: t[0]).connect(broadcast).process(FlagLargeTransactions()).uid("flag")
    scaled = transactions.connect(broadcast).process(ScaleByRule()).uid("scale").set_parallelism(3)
    results = flagged.union(scaled).execute_and_collect("rules")

    results = list(results)
    assert sorted(r for r in results if r[0] == "tx") == sorted(_tx_reference(data))
    assert sorted(r for r in results if r[0] == "scaled") == sorted(
        ("scaled", i, amount * 1000 // _limit_for(i), (True, True, True)) for _, amount, i in data)
    # every subtask received every rule update, before the transactions of its epoch
    rules = [r for r in results if r[0] == "rule"]
    assert sorted((r[1], r[2], r[3]) for r in rules) == sorted(
        (name, limit, s) for name, limit in RULE_UPDATES for s in range(2))
    for epoch, (_name, limit) in enumerate(RULE_UPDATES):
        accounts_before = len({t[0] for t in data[:epoch * TX_PER_EPOCH]})
        assert sum(r[4] for r in rules if r[2] == limit) == accounts_before  # apply_to_keyed_state

    # the broadcast state is in every subtask's checkpointed operator state
    options = run_options.current()
    checkpoint = MetadataStore(options.metadata()).latest_checkpoint("rules")
    storage = Storage(options.checkpoint_root()).child("rules")
    for uid, parallelism in (("flag", 2), ("scale", 3)):
        handles = [h for h in checkpoint["manifest"][uid] if h["kind"] == "operator"]
        states = state_io.load_operator_snapshots(storage, handles)
        assert [s["broadcast"] for s in states] == [{"rules": {"max_amount": 60}}] * parallelism
    # keyed state next to operator state in the same operator's checkpoint files
    counts = read_keyed_state(storage, checkpoint["manifest"], "flag", 128)["count"]
    assert counts == {a: sum(1 for t in data if t[0] == a) for a in {t[0] for t in data}}


def test_broadcast_api_checks_its_arguments(env):
    ds = env.from_collection([1, 2])
    with pytest.raises(TypeError):
        ds.broadcast(ValueStateDescriptor("not-a-map"))
    assert not isinstance(ds.broadcast(), BroadcastStream)  # broadcast partitioning (issue 14)
    with pytest.raises(TypeError, match="DataStream or a BroadcastStream"):
        ds.connect([1])
    with pytest.raises(Exception, match="KeyedStream"):
        ds.key_by(lambda x: x).broadcast(RULES)
    with pytest.raises(TypeError, match="KeyedBroadcastProcessFunction"):
        ds.key_by(lambda x: x).connect(ds.broadcast(RULES)).process(ScaleByRule())
    with pytest.raises(TypeError, match="BroadcastProcessFunction"):
        ds.connect(ds.broadcast(RULES)).process(FlagLargeTransactions())


# --- the broadcast state survives a savepoint and is copied to new subtasks on rescale ------------------

def _rules_job(env: StreamExecutionEnvironment, out: Path, parallelism: int):
    env.set_parallelism(parallelism)
    env.set_max_records_per_epoch(TX_PER_EPOCH)
    broadcast = _rules_source(env).broadcast(RULES)
    (env.from_collection(TRANSACTIONS).uid("transactions")
        .key_by(lambda t: t[0]).connect(broadcast).process(FlagLargeTransactions()).uid("flag")
        .filter(lambda r: r[0] == "tx").uid("only-tx")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()).uid("out"))


def _read(out: Path, max_epoch: int | None = None) -> list:
    records = []
    for path in sorted(out.iterdir()) if out.exists() else []:
        if path.is_file() and (max_epoch is None or int(path.name.split("-")[1]) <= max_epoch):
            records.extend(ast.literal_eval(line) for line in path.read_text().splitlines())
    return records


def test_broadcast_state_survives_savepoint_and_rescale(env, workdir):
    # at parallelism 3 some accounts live on the new subtask 2, which only gets the rules from the savepoint
    assert any(_owner(f"acct-{a:02d}", 3) == 2 for a in range(ACCOUNTS))
    first = workdir / "out-p2"
    _rules_job(env, first, 2)
    thread, box = _run_in_background(env, "rules-rescale")
    location = stop_with_savepoint_after("rules-rescale", len(RULE_UPDATES), thread, box)
    from keyspan.checkpoint.savepoint import load_savepoint

    epoch = load_savepoint(location)["epoch"]
    assert epoch >= len(RULE_UPDATES) - 1  # every rule update is in the savepoint, none comes after it

    second = workdir / "out-p3"
    restore_and_run(workdir, location, lambda e: _rules_job(e, second, 3), "rules-rescale")
    restored = _read(second)
    assert any(_owner(r[2], 3) == 2 for r in restored)  # the new subtask flagged with the restored rules
    assert sorted(_read(first, epoch) + restored) == sorted(_tx_reference(TRANSACTIONS))
    options = run_options.current()
    checkpoint = MetadataStore(options.metadata()).latest_checkpoint("rules-rescale")
    handles = [h for h in checkpoint["manifest"]["flag"] if h["kind"] == "operator"]
    states = state_io.load_operator_snapshots(Storage(options.checkpoint_root()).child("rules-rescale"), handles)
    assert [s["broadcast"] for s in states] == [{"rules": {"max_amount": 60}}] * 3
