"""PyFlink's ``pyflink.datastream.connectors.hybrid_source`` wraps Flink's HybridSource, which keyspan
does not have."""

from keyspan.common.unsupported import unsupported_module

raise unsupported_module(
    "keyspan.datastream.connectors.hybrid_source",
    "read the history with a FileSource and the live data with a KafkaSource, and union the "
    "two streams")
