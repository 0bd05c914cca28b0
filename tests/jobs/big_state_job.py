"""A job whose keyed state is far larger than the memory its Spark Python workers may use:
BIG_STATE_KEYS keys, each keeping BIG_STATE_VALUE_BYTES of incompressible bytes in ValueState
(``value_of(key)``: derived from the key, so a reader can check every value), BIG_STATE_PER_EPOCH
keys per epoch, BIG_STATE_PARALLELISM subtasks of the keyed operator (default 1: one worker holds
the whole state). BIG_STATE_BACKEND = rocksdb | heap; BIG_STATE_ROCKSDB_MEMORY sets RocksDB's
memory per worker (``get_memory_configuration().set_fixed_memory_per_slot``), BIG_STATE_ROCKSDB_DIR
where its files go; BIG_STATE_MAX_PARALLELISM and BIG_STATE_RETAINED (checkpoints kept) when set.

The cap itself is applied from outside (tests/worker_memory_cap.py watches the workers' resident
memory), so the job runs on keyspan's ordinary local SparkSession (local[2]: a task that fails —
a worker killed for exceeding the cap — fails the job, no retries).
"""

import os
import random

from keyspan.datastream import (EmbeddedRocksDBStateBackend, HashMapStateBackend, KeyedProcessFunction,
                                StreamExecutionEnvironment)
from keyspan.datastream.connectors.file_system import DiscardingSink
from keyspan.datastream.state import ValueStateDescriptor

KEYS = int(os.environ.get("BIG_STATE_KEYS", "4000"))
VALUE_BYTES = int(os.environ.get("BIG_STATE_VALUE_BYTES", "100000"))
PER_EPOCH = int(os.environ.get("BIG_STATE_PER_EPOCH", "250"))
BACKEND = os.environ.get("BIG_STATE_BACKEND", "rocksdb")
ROCKSDB_MEMORY = os.environ.get("BIG_STATE_ROCKSDB_MEMORY", "")
PARALLELISM = int(os.environ.get("BIG_STATE_PARALLELISM", "1"))
ROCKSDB_DIR = os.environ.get("BIG_STATE_ROCKSDB_DIR", "")  # where RocksDB keeps its files (default: temp dir)
MAX_PARALLELISM = int(os.environ.get("BIG_STATE_MAX_PARALLELISM", "0"))  # 0: keyspan's default (128)
RETAINED = int(os.environ.get("BIG_STATE_RETAINED", "0"))  # checkpoints kept (0: default 3)

_POOL: list = []


def value_of(key: int, size: int = VALUE_BYTES) -> bytes:
    """The value kept for a key: the key (8 bytes), then ``size`` - 8 bytes of a fixed 8 MB block of
    pseudo-random bytes from a key-dependent offset — incompressible within a value, different for
    every key, and cheap (generating 100 kB with ``random`` costs 0.4 ms; slicing costs µs)."""
    if not _POOL:
        _POOL.append(random.Random(20261122).randbytes(8 << 20))
    pool = _POOL[0]
    n = size - 8
    if n > len(pool):
        raise ValueError(f"values of more than {len(pool) + 8} bytes are not supported")
    off = (key * 7919) % (len(pool) - n + 1)
    return key.to_bytes(8, "little", signed=True) + pool[off:off + n]


class Keep(KeyedProcessFunction):
    def open(self, runtime_context):
        self.value = runtime_context.get_state(ValueStateDescriptor("value"))

    def process_element(self, key, ctx):
        self.value.update(value_of(key))
        yield key


def backend():
    if BACKEND == "heap":
        return HashMapStateBackend()
    spec = EmbeddedRocksDBStateBackend()
    if ROCKSDB_MEMORY:
        spec.get_memory_configuration().set_fixed_memory_per_slot(ROCKSDB_MEMORY)
    if ROCKSDB_DIR:
        spec.set_db_storage_paths(ROCKSDB_DIR)
    return spec


if __name__ == "__main__":
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(PARALLELISM)
    if MAX_PARALLELISM:
        env.set_max_parallelism(MAX_PARALLELISM)
    if RETAINED:
        env.get_checkpoint_config().set_num_retained_checkpoints(RETAINED)
    env.set_max_records_per_epoch(PER_EPOCH)
    env.set_state_backend(backend())
    (env.from_collection(list(range(KEYS))).uid("keys")
        .key_by(lambda k: k)
        .process(Keep()).uid("keep")
        .sink_to(DiscardingSink()).uid("out"))
    env.execute("big-state")
