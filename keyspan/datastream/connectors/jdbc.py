"""PyFlink's ``pyflink.datastream.connectors.jdbc``: ``JdbcSink`` writes exactly once (docs/jdbc.md)."""

from keyspan.connectors.jdbc import JdbcConnectionOptions, JdbcExecutionOptions, JdbcSink

__all__ = ["JdbcSink", "JdbcConnectionOptions", "JdbcExecutionOptions"]
