"""State backends with PyFlink's names (``pyflink.datastream.state_backend``)."""

from keyspan.state.heap import HashMapStateBackend
from keyspan.state.rocksdb import EmbeddedRocksDBStateBackend

__all__ = ["EmbeddedRocksDBStateBackend", "HashMapStateBackend"]
