"""PyFlink's ``pyflink.datastream.connectors.elasticsearch`` wraps Flink's Elasticsearch sinks, which keyspan does not have."""

from keyspan.common.unsupported import INSTEAD_OF_A_SINK, unsupported_module

raise unsupported_module("keyspan.datastream.connectors.elasticsearch", INSTEAD_OF_A_SINK)
