"""RocksDB's memory budget per Python worker: Flink's ``RocksDBMemoryConfiguration`` and the shared
block cache and write-buffer manager that enforce it."""

from __future__ import annotations

import re

_UNITS = {"": 1, "b": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "kibibytes": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mebibytes": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gibibytes": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tebibytes": 1 << 40}


def parse_memory_size(size) -> int:
    """Bytes from an int or a Flink ``MemorySize`` string ("64mb", "64 m", "1g", "512kb"; powers of 1024)."""
    if isinstance(size, bool):
        raise TypeError("a memory size is a number of bytes or a string such as '64mb'")
    if isinstance(size, int):
        n = size
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(size))
        if m is None or m.group(2).lower() not in _UNITS:
            raise ValueError(f"cannot parse memory size {size!r} (examples: 64mb, 1g, 512kb, 1048576)")
        n = int(m.group(1)) * _UNITS[m.group(2).lower()]
    if n <= 0:
        raise ValueError(f"memory size must be positive, got {size!r}")
    return n


class RocksDBMemoryConfiguration:
    """How much memory RocksDB may use in one Python worker (Flink's ``RocksDBMemoryConfiguration``,
    from ``EmbeddedRocksDBStateBackend.get_memory_configuration()``; Flink's options
    ``state.backend.rocksdb.memory.fixed-per-slot`` and ``...memory.write-buffer-ratio``).

    A Spark Python worker runs one task at a time, so it is keyspan's "slot": every RocksDB instance
    the worker opens (one per operator and key-group range, kept across epochs) shares one LRU block
    cache and one write-buffer manager that charges memtables to that cache, sized as Flink sizes
    them from ``fixed_memory_per_slot`` M and ``write_buffer_ratio`` r: cache capacity M·(3−r)/3,
    memtable budget 2·M·r/3, each instance's write buffer at most half of that; index and filter
    blocks live in the cache. So RocksDB's own memory (block cache + memtables) stays about M per
    worker however large the state and however many instances (RocksDB iterators, compactions and
    the allocator's slack come on top; the cache limit is not strict). Default: 128 MiB, ratio 0.5.
    """

    DEFAULT_FIXED_MEMORY_PER_SLOT = 128 << 20
    DEFAULT_WRITE_BUFFER_RATIO = 0.5

    def __init__(self):
        self._fixed = self.DEFAULT_FIXED_MEMORY_PER_SLOT
        self._ratio = self.DEFAULT_WRITE_BUFFER_RATIO

    def set_fixed_memory_per_slot(self, size) -> None:
        """Bytes (an int) or a size string ("64mb", "1g") for all RocksDB instances of one worker."""
        self._fixed = parse_memory_size(size)

    def get_fixed_memory_per_slot(self) -> int:
        return self._fixed

    def set_write_buffer_ratio(self, ratio: float) -> None:
        """The share of the memory for memtables (write buffers), strictly between 0 and 1."""
        ratio = float(ratio)
        if not 0 < ratio < 1:
            raise ValueError(f"write buffer ratio must be in (0, 1), got {ratio}")
        self._ratio = ratio

    def get_write_buffer_ratio(self) -> float:
        return self._ratio

    def sizes(self) -> tuple[int, int, int]:
        """(block cache capacity, memtable budget, write buffer size per instance) in bytes."""
        m, r = self._fixed, self._ratio
        cache = int(m * (3 - r) / 3)
        memtables = max(1 << 20, int(2 * m * r / 3))
        return cache, memtables, max(256 << 10, min(64 << 20, memtables // 2))

    def _key(self) -> tuple:
        return (self._fixed, self._ratio)

    def __repr__(self):
        return (f"RocksDBMemoryConfiguration(fixed_memory_per_slot={self._fixed}, "
                f"write_buffer_ratio={self._ratio})")


_SHARED_MEMORY: dict[tuple, tuple] = {}  # per process: configuration → (cache, write buffer manager)


def _bound_memory(rocksdict, options, memory: RocksDBMemoryConfiguration) -> None:
    """Give ``options`` the process's shared block cache and write-buffer manager for ``memory``."""
    cache_bytes, memtable_bytes, write_buffer = memory.sizes()
    shared = _SHARED_MEMORY.get(memory._key())
    if shared is None:
        cache = rocksdict.Cache(cache_bytes)
        manager = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(memtable_bytes, False, cache)
        shared = _SHARED_MEMORY[memory._key()] = (cache, manager)
    cache, manager = shared
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    # Bloom filters on whole keys, in files (10 bits a key) and memtables (a tenth of the write
    # buffer): a point lookup skips the files and memtables that cannot hold its key. Measured on
    # 500 k keys, 95 k sorted lookups: hits 40 % and misses 70 % cheaper; range scans are unaffected.
    table.set_bloom_filter(10, False)
    options.set_memtable_prefix_bloom_ratio(0.1)
    options.set_memtable_whole_key_filtering(True)
    options.set_block_based_table_factory(table)
    options.set_write_buffer_manager(manager)
    options.set_write_buffer_size(write_buffer)
    options.set_max_write_buffer_number(2)
