"""PyFlink's ``pyflink.datastream.formats.csv``: CSV row schemas (``keyspan.common.serialization``)."""

from keyspan.common.serialization import CsvRowDeserializationSchema, CsvRowSerializationSchema

__all__ = ["CsvRowDeserializationSchema", "CsvRowSerializationSchema"]
