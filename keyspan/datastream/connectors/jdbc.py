"""PyFlink's ``pyflink.datastream.connectors.jdbc`` wraps Flink's JDBC sink, which keyspan does not have."""

from keyspan.common.unsupported import INSTEAD_OF_A_SINK, unsupported_module

raise unsupported_module("keyspan.datastream.connectors.jdbc", INSTEAD_OF_A_SINK)
