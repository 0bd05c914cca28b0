"""PyFlink's ``pyflink.datastream.connectors.dynamic_kafka`` wraps Flink's DynamicKafkaSource, which keyspan does not have."""

from keyspan.common.unsupported import INSTEAD_OF_DYNAMIC_KAFKA, unsupported_module

raise unsupported_module("keyspan.datastream.connectors.dynamic_kafka", INSTEAD_OF_DYNAMIC_KAFKA)
