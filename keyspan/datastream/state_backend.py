"""State backends with PyFlink's names (``pyflink.datastream.state_backend``)."""

from keyspan.state.heap import HashMapStateBackend

__all__ = ["HashMapStateBackend"]
