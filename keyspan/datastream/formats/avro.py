"""PyFlink's ``pyflink.datastream.formats.avro``: Avro data files of generic records (Python dicts)
read with ``env.create_input(AvroInputFormat(path, schema))`` and written with
``FileSink.for_bulk_format(path, AvroBulkWriters.for_generic_record(schema))``; and the Avro row
schemas. Everything is read and written with fastavro."""

from __future__ import annotations

import io
import json

from keyspan.common.io import InputFormat
from keyspan.common.serialization import AvroRowDeserializationSchema, AvroRowSerializationSchema, BulkWriterFactory
from keyspan.common.typeinfo import TypeInformation
from keyspan.connectors.dead_letter import ErrorPolicy
from keyspan.connectors.file_source import BulkFormat, FileSource
from keyspan.datastream.utils import ResultTypeQueryable

__all__ = ["AvroSchema", "GenericRecordAvroTypeInfo", "AvroInputFormat", "AvroBulkWriters",
           "AvroRowDeserializationSchema", "AvroRowSerializationSchema"]


class AvroSchema:
    """A parsed Avro schema; ``str()`` gives its JSON."""

    def __init__(self, json_schema: str):
        import fastavro

        try:
            definition = json.loads(json_schema)
            self._parsed = fastavro.parse_schema(definition)
        except (ValueError, fastavro.schema.SchemaParseException) as exc:
            raise ValueError(f"not a valid Avro schema: {exc}") from None
        self._json = json.dumps(definition)

    def __str__(self) -> str:
        return self._json

    __repr__ = __str__

    @staticmethod
    def parse_string(json_schema: str) -> "AvroSchema":
        return AvroSchema(json_schema)

    @staticmethod
    def parse_file(file_path: str) -> "AvroSchema":
        with open(file_path, encoding="utf-8") as f:
            return AvroSchema(f.read())


class GenericRecordAvroTypeInfo(TypeInformation):
    """The type of a stream of Avro generic records (Python dicts of the schema's fields)."""

    def __init__(self, schema: AvroSchema):
        super().__init__(f"GenericRecord({schema._parsed.get('name', 'record')})")
        self._schema = schema


class _AvroFileFormat(BulkFormat):
    """Avro data files as dicts, resolved against the reader's schema."""

    def __init__(self, schema: AvroSchema):
        super().__init__("avro")
        self.schema = schema

    def produced_type(self):
        return GenericRecordAvroTypeInfo(self.schema)

    def parse(self, data: bytes, name: str = "<bytes>", poison=None) -> list:
        import fastavro

        if poison is None:
            poison = ErrorPolicy.fail().handler("format avro")
        try:
            return list(fastavro.reader(io.BytesIO(data), reader_schema=self.schema._parsed))
        except (ValueError, EOFError, fastavro.read.SchemaResolutionError) as exc:
            return [poison(data, name, f"not a readable Avro data file for the schema: {exc}")]


class AvroInputFormat(InputFormat, ResultTypeQueryable):
    """Avro data files under ``path`` (a file or a folder), read as generic records:
    ``env.create_input(AvroInputFormat(path, schema))``. A file keyspan cannot read fails the job,
    naming the file."""

    def __init__(self, path: str, schema: AvroSchema):
        self.path = path
        self.schema = schema

    def get_produced_type(self) -> GenericRecordAvroTypeInfo:
        return GenericRecordAvroTypeInfo(self.schema)

    def file_source(self) -> FileSource:
        """The bounded source ``create_input`` reads the files with."""
        return FileSource.for_bulk_file_format(_AvroFileFormat(self.schema), self.path).build()


class _AvroWriterFactory(BulkWriterFactory):
    def __init__(self, schema: AvroSchema):
        self.schema = schema

    def encode(self, records: list) -> bytes:
        import fastavro

        out = io.BytesIO()
        try:
            fastavro.writer(out, self.schema._parsed, records, validator=True)
        except fastavro.validation.ValidationError as exc:
            raise ValueError(f"AvroBulkWriters: a record does not match the Avro schema: {exc}") from None
        return out.getvalue()


class AvroBulkWriters:
    """``FileSink.for_bulk_format(path, AvroBulkWriters.for_generic_record(schema))``: records (dicts
    of the schema's fields) written as one Avro data file per part file."""

    @staticmethod
    def for_generic_record(schema: AvroSchema) -> BulkWriterFactory:
        if not isinstance(schema, AvroSchema):
            raise TypeError(f"AvroBulkWriters.for_generic_record needs an AvroSchema (AvroSchema.parse_string), "
                            f"got {type(schema).__name__}")
        return _AvroWriterFactory(schema)
