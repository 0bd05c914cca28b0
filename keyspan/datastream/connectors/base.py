"""PyFlink's ``pyflink.datastream.connectors.base``: the bases of sources and sinks, and delivery guarantees."""

from keyspan.connectors.kafka.sink import DeliveryGuarantee
from keyspan.connectors.sinks import Sink
from keyspan.connectors.sources import KeyspanSource as Source

__all__ = ["DeliveryGuarantee", "Sink", "Source"]
