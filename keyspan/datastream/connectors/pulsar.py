"""PyFlink's ``pyflink.datastream.connectors.pulsar`` wraps Flink's Pulsar source and sink, which keyspan does not have."""

from keyspan.common.unsupported import INSTEAD_OF_A_SINK, INSTEAD_OF_A_SOURCE, unsupported_module

raise unsupported_module("keyspan.datastream.connectors.pulsar", INSTEAD_OF_A_SOURCE + "; to write, " + INSTEAD_OF_A_SINK)
