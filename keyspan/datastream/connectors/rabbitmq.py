"""PyFlink's ``pyflink.datastream.connectors.rabbitmq`` wraps Flink's RabbitMQ source and sink, which keyspan does not have."""

from keyspan.common.unsupported import INSTEAD_OF_A_SINK, INSTEAD_OF_A_SOURCE, unsupported_module

raise unsupported_module("keyspan.datastream.connectors.rabbitmq", INSTEAD_OF_A_SOURCE + "; to write, " + INSTEAD_OF_A_SINK)
