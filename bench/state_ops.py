"""Keyed-state operations per second on one backend instance, without Spark: the cost of the state
classes themselves (plain and TTL; value, list, map, reducing), on the heap and RocksDB backends.

    python bench/state_ops.py [--keys 20000] [--rounds 3]

Each case sets the current key for every one of ``--keys`` keys and runs one read-modify-write
(value: value()+update(); list: add() then get() every 8th; map: get()+put(); reducing: add()),
then confirms the epoch; the best of ``--rounds`` rounds is printed in operations (keys) per second.

    python bench/state_ops.py --epochs 1000000   # a subtask's epochs, as a Spark task runs them

``--epochs N``: one subtask (key groups 0–63 of 128) runs 10 epochs of the records it would get from
2·N events on N uniform random keys: per 10 k-record chunk the backend's ``prefetch`` (RocksDB:
sorted lookups), then a ``ValueState`` read-modify-write per record; per epoch the delta snapshot
(every section encoded) and ``confirm``. Printed: CPU seconds of this thread per phase, on each
backend (RocksDB's background flushes and compactions run on other threads and are not counted).

    python bench/state_ops.py --restore 400000   # a RocksDB full snapshot of that many keys restored

``--restore N``: a ``ValueState`` of N keys in key groups 0–63 is snapshotted whole and restored into
a new RocksDB backend, three times; CPU seconds of this thread per restore.

    python bench/state_ops.py --timers 5000   # a subtask's timer queues rebuilt from its timer state

``--timers N``: N keys in key groups 0–63 with two event-time timers each; the timer queues are rebuilt
from the timer state (as after a restore, a rollback or another worker's epoch) on each backend;
the best of five, in CPU milliseconds of this thread.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keyspan.common.time import Time  # noqa: E402
from keyspan.state.api import (  # noqa: E402
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from keyspan.state.heap import HeapKeyedStateBackend  # noqa: E402
from keyspan.state.keygroups import assign_to_key_group  # noqa: E402
from keyspan.state.rocksdb import EmbeddedRocksDBStateBackend  # noqa: E402
from keyspan.state.ttl import StateTtlConfig  # noqa: E402

MAX_P = 128


def _descriptor(kind: str, ttl: bool):
    d = {"value": lambda: ValueStateDescriptor("s"), "list": lambda: ListStateDescriptor("s"),
         "map": lambda: MapStateDescriptor("s"), "reducing": lambda: ReducingStateDescriptor("s", lambda a, b: a + b)}[kind]()
    if ttl:
        d.enable_time_to_live(StateTtlConfig.new_builder(Time.hours(1)).build())
    return d


def _op(kind: str, state):
    if kind == "value":
        return lambda i: state.update((state.value() or 0) + i)
    if kind == "list":
        return lambda i: state.add(i) if i % 8 else state.get()
    if kind == "map":
        return lambda i: state.put(i % 4, (state.get(i % 4) or 0) + i)
    return lambda i: state.add(i)


def _backend(name: str, key_groups: range, directory: str):
    if name == "heap":
        return HeapKeyedStateBackend("bench", key_groups)
    return EmbeddedRocksDBStateBackend().create_keyed_backend("bench", key_groups, directory)


def run(backend, kind: str, ttl: bool, keys: list, rounds: int) -> float:
    state = backend.get_state(_descriptor(kind, ttl))
    op = _op(kind, state)
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        for key, kg in keys:
            backend.current_key = key
            backend.current_key_group = kg
            op(key)
        backend.confirm()
        best = max(best, len(keys) / (time.perf_counter() - start))
    return best


def epochs(backend, keys: list, groups: list) -> dict:
    """CPU seconds per phase of 10 epochs of one subtask's records (see ``--epochs``)."""
    state = backend.get_state(ValueStateDescriptor("s"))
    prefetch = getattr(backend, "prefetch", None)
    clock = time.thread_time
    spent = dict.fromkeys(("prefetch", "records", "snapshot", "confirm"), 0.0)
    per_epoch = len(keys) // 10
    for epoch in range(10):
        end = (epoch + 1) * per_epoch
        for lo in range(epoch * per_epoch, end, 10_000):
            ks, gs = keys[lo:min(lo + 10_000, end)], groups[lo:min(lo + 10_000, end)]
            t = clock()
            if prefetch is not None:
                prefetch(gs, ks)
            spent["prefetch"] += clock() - t
            t = clock()
            for key, kg in zip(ks, gs):
                backend.current_key = key
                backend.current_key_group = kg
                state.update((state.value() or 0) + 1)
            spent["records"] += clock() - t
        t = clock()
        sections = backend.delta_sections()
        for kg in sections:
            sections[kg]
        spent["snapshot"] += clock() - t
        t = clock()
        backend.confirm()
        spent["confirm"] += clock() - t
    return spent


def run_epochs(n_keys: int) -> None:
    import random

    rng = random.Random(1)
    events = [rng.randrange(n_keys) for _ in range(2 * n_keys)]
    group_of = {k: assign_to_key_group(k, MAX_P) for k in set(events)}
    keys = [k for k in events if group_of[k] < MAX_P // 2]
    groups = [group_of[k] for k in keys]
    print(f"{len(keys):,} records of one subtask, {n_keys:,} keys, 10 epochs (CPU seconds of this thread)")
    print("| backend | prefetch | records | snapshot | confirm | total | records/CPU-s |\n|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("heap", "rocksdb"):
            backend = _backend(name, range(MAX_P // 2), tmp)
            spent = epochs(backend, keys, groups)
            total = sum(spent.values())
            print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in spent.values())
                  + f" | {total:.2f} | {len(keys) / total:,.0f} |", flush=True)
            if name == "rocksdb":
                backend.close()


def run_restore(n_keys: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source = _backend("rocksdb", range(MAX_P // 2), tmp)
        state = source.get_state(ValueStateDescriptor("s"))
        key = written = 0
        while written < n_keys:
            kg = assign_to_key_group(key, MAX_P)
            if kg < MAX_P // 2:
                source.current_key, source.current_key_group = key, kg
                state.update(key % 1000)
                written += 1
            key += 1
        source.confirm()
        payloads = list(source.full_sections().items())
        source.close()
        print(f"{n_keys:,} keys, {sum(map(len, (p for _, p in payloads))):,} bytes of full snapshot")
        for _ in range(3):
            target = _backend("rocksdb", range(MAX_P // 2), tmp)
            target.get_state(ValueStateDescriptor("s"))
            start = time.thread_time()
            for kg, payload in payloads:
                target.restore_payload(kg, payload)
            print(f"restored in {time.thread_time() - start:.2f} CPU-s", flush=True)
            target.close()


def run_timers(n_keys: int) -> None:
    """Rebuilding a subtask's timer queues from its timer state (after a restore, a rollback, or
    another worker's epoch applied): ``n_keys`` keys of key groups 0–63, two event-time timers each."""
    from keyspan.runtime.worker.timers import TimerService

    with tempfile.TemporaryDirectory() as tmp:
        for name in ("heap", "rocksdb"):
            backend = _backend(name, range(MAX_P // 2), tmp)
            timers = TimerService(backend)
            registered = key = 0
            while registered < n_keys:
                kg = assign_to_key_group(key, MAX_P)
                if kg < MAX_P // 2:
                    backend.current_key, backend.current_key_group = key, kg
                    timers.register_event_time_timer(60_000)
                    timers.register_event_time_timer(120_000)
                    registered += 1
                key += 1
            backend.confirm()
            best = float("inf")
            for _ in range(5):
                start = time.thread_time()
                timers.rebuild()
                best = min(best, time.thread_time() - start)
            print(f"{name:<8} {2 * n_keys:,} timers: queues rebuilt in {best * 1000:.2f} CPU-ms (best of 5), "
                  f"{2 * n_keys / best:,.0f} timers/CPU-s", flush=True)
            if name == "rocksdb":
                backend.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, metavar="KEYS", help="run a subtask's epochs over KEYS keys instead")
    ap.add_argument("--restore", type=int, metavar="KEYS", help="restore a RocksDB full snapshot of KEYS keys instead")
    ap.add_argument("--timers", type=int, metavar="KEYS", help="rebuild the timer queues of KEYS keys instead")
    args = ap.parse_args()
    if args.timers:
        run_timers(args.timers)
        return
    if args.restore:
        run_restore(args.restore)
        return
    if args.epochs:
        run_epochs(args.epochs)
        return
    keys = [(i, assign_to_key_group(i, MAX_P)) for i in range(args.keys)]
    print("| backend | state | plain ops/s | TTL ops/s |\n|---|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("heap", "rocksdb"):
            for kind in ("value", "list", "map", "reducing"):
                rates = []
                for ttl in (False, True):
                    backend = _backend(name, range(MAX_P), tmp)
                    rates.append(run(backend, kind, ttl, keys, args.rounds))
                    if name == "rocksdb":
                        backend.close()
                print(f"| {name} | {kind} | {rates[0]:,.0f} | {rates[1]:,.0f} |")


if __name__ == "__main__":
    main()
