"""State backends with PyFlink's names (``pyflink.datastream.state_backend``).

PyFlink 1.x's legacy names map onto the two backends keyspan has: ``MemoryStateBackend`` and
``FsStateBackend`` onto the heap (``HashMapStateBackend``), ``RocksDBStateBackend`` onto RocksDB
(``EmbeddedRocksDBStateBackend``). A checkpoint directory given to them becomes the job's checkpoint
storage, as in Flink."""

from __future__ import annotations

from keyspan.state.backend import StateBackendSpec as StateBackend
from keyspan.state.heap import HashMapStateBackend
from keyspan.state.rocksdb import EmbeddedRocksDBStateBackend
from keyspan.state.rocksdb.backend import PredefinedOptions


class MemoryStateBackend(HashMapStateBackend):
    """Legacy name: the heap backend (Flink kept checkpoints in JobManager memory; keyspan writes files)."""

    def __init__(self, checkpoint_path: str | None = None, savepoint_path: str | None = None,
                 max_state_size: int | None = None, using_asynchronous_snapshots=None):
        super().__init__()
        self.checkpoint_path = checkpoint_path


class FsStateBackend(HashMapStateBackend):
    """Legacy name: the heap backend with checkpoints under ``checkpoint_directory_uri``."""

    def __init__(self, checkpoint_directory_uri: str | None = None, default_savepoint_directory_uri=None,
                 file_state_size_threshold=None, write_buffer_size=None, using_asynchronous_snapshots=None):
        super().__init__()
        self.checkpoint_path = checkpoint_directory_uri


class RocksDBStateBackend(EmbeddedRocksDBStateBackend):
    """Legacy name: the RocksDB backend with checkpoints under ``checkpoint_data_uri``."""

    def __init__(self, checkpoint_data_uri: str | None = None, enable_incremental_checkpointing=None,
                 checkpoint_stream_backend=None):
        super().__init__(enable_incremental_checkpointing)
        self.checkpoint_path = checkpoint_data_uri


class CustomStateBackend:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("not supported by keyspan: CustomStateBackend wraps a Java state backend; "
                                  "use HashMapStateBackend() or EmbeddedRocksDBStateBackend() instead")


__all__ = ["CustomStateBackend", "EmbeddedRocksDBStateBackend", "FsStateBackend", "HashMapStateBackend",
           "MemoryStateBackend", "PredefinedOptions", "RocksDBStateBackend", "StateBackend"]
