"""PyFlink's ``pyflink.datastream.formats.avro`` row schemas, written with fastavro."""

from keyspan.common.serialization import AvroRowDeserializationSchema, AvroRowSerializationSchema

__all__ = ["AvroRowDeserializationSchema", "AvroRowSerializationSchema"]
