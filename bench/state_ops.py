"""Keyed-state operations per second on one backend instance, without Spark: the cost of the state
classes themselves (plain and TTL; value, list, map, reducing), on the heap and RocksDB backends.

    python bench/state_ops.py [--keys 20000] [--rounds 3]

Each case sets the current key for every one of ``--keys`` keys and runs one read-modify-write
(value: value()+update(); list: add() then get() every 8th; map: get()+put(); reducing: add()),
then confirms the epoch; the best of ``--rounds`` rounds is printed in operations (keys) per second.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    keys = [(i, assign_to_key_group(i, MAX_P)) for i in range(args.keys)]
    print(f"| backend | state | plain ops/s | TTL ops/s |\n|---|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("heap", "rocksdb"):
            for kind in ("value", "list", "map", "reducing"):
                rates = []
                for ttl in (False, True):
                    if name == "heap":
                        backend = HeapKeyedStateBackend("bench", range(MAX_P))
                    else:
                        backend = EmbeddedRocksDBStateBackend().create_keyed_backend("bench", range(MAX_P), tmp)
                    rates.append(run(backend, kind, ttl, keys, args.rounds))
                    if name == "rocksdb":
                        backend.close()
                print(f"| {name} | {kind} | {rates[0]:,.0f} | {rates[1]:,.0f} |")


if __name__ == "__main__":
    main()
