"""PyFlink's ``pyflink.datastream.connectors.base``."""

from keyspan.connectors.kafka.sink import DeliveryGuarantee

__all__ = ["DeliveryGuarantee"]
