"""``NumberSequenceSource`` under PyFlink's module path ``pyflink.datastream.connectors.number_seq``."""

from keyspan.connectors.number_seq import NumberSequenceSource

__all__ = ["NumberSequenceSource"]
