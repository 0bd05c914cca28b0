"""PyFlink's ``pyflink.datastream.formats.json``: JSON row schemas (``keyspan.common.serialization``)."""

from keyspan.common.serialization import JsonRowDeserializationSchema, JsonRowSerializationSchema

__all__ = ["JsonRowDeserializationSchema", "JsonRowSerializationSchema"]
