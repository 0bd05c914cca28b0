"""PyFlink's ``pyflink.datastream.connectors.cassandra`` wraps Flink's Cassandra sink, which keyspan does not have."""

from keyspan.common.unsupported import INSTEAD_OF_A_SINK, unsupported_module

raise unsupported_module("keyspan.datastream.connectors.cassandra", INSTEAD_OF_A_SINK)
