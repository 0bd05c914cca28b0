"""PyFlink's ``pyflink.datastream.formats.parquet``: ``ParquetBulkWriters.for_row_type`` for
``FileSink.for_bulk_format``, written with pyarrow (one Parquet file per part file),
``ParquetColumnarRowInputFormat`` for ``FileSource.for_bulk_file_format``, read with pyarrow, and
Avro generic records in Parquet files (``AvroParquetReaders``, ``AvroParquetWriters``)."""

from __future__ import annotations

import copy
import io

import pyarrow as pa
import pyarrow.parquet as pq

from keyspan.common.serialization import BulkWriterFactory
from keyspan.common.typeinfo import RowTypeInfo
from keyspan.common.types import named_row_class
from keyspan.connectors.dead_letter import ErrorPolicy
from keyspan.connectors.file_source import BulkFormat, StreamFormat, read_parquet
from keyspan.datastream.formats.arrow_rows import ArrowRowWriterFactory
from keyspan.datastream.formats.avro import AvroSchema, GenericRecordAvroTypeInfo

__all__ = ["ParquetBulkWriters", "ParquetColumnarRowInputFormat", "AvroParquetReaders", "AvroParquetWriters"]


class _ParquetRowWriterFactory(ArrowRowWriterFactory):
    builder = "ParquetBulkWriters.for_row_type"

    def write_table(self, table: pa.Table, out) -> None:
        pq.write_table(table, out)


class ParquetBulkWriters:
    @staticmethod
    def for_row_type(row_type, hadoop_config=None, utc_timestamp: bool = False) -> BulkWriterFactory:
        """Rows of ``row_type`` (``Types.ROW_NAMED``) as Parquet files; ``hadoop_config`` is accepted
        and ignored (pyarrow writes the files)."""
        return _ParquetRowWriterFactory(row_type, utc_timestamp)


class ParquetColumnarRowInputFormat(BulkFormat):
    """Reads Parquet files as ``Row``s of ``row_type``'s fields (``DataTypes.ROW([...])`` or
    ``Types.ROW_NAMED``), taken from the file's columns by name; a field the file lacks is None. The
    stream's type is ``row_type``. ``hadoop_config``, ``batch_size`` and ``is_utc_timestamp`` are
    accepted: pyarrow reads the file whole, and timestamps as the file stores them."""

    def __init__(self, row_type, hadoop_config=None, batch_size: int = 2048, is_utc_timestamp: bool = False,
                 is_case_sensitive: bool = True):
        if not isinstance(row_type, RowTypeInfo) or not row_type.field_names:
            raise TypeError(f"ParquetColumnarRowInputFormat needs a row type of named fields (DataTypes.ROW([...]) or "
                            f"Types.ROW_NAMED([...], [...])), got {row_type!r}")
        super().__init__("parquet_columns")
        self.row_type = row_type
        self.is_case_sensitive = is_case_sensitive

    def produced_type(self):
        return self.row_type

    def parse(self, data: bytes, name: str = "<bytes>", poison=None) -> list:
        if poison is None:
            poison = ErrorPolicy.fail().handler("format parquet")
        table, bad = read_parquet(data, name, poison)
        if table is None:
            return bad
        columns = {c if self.is_case_sensitive else c.lower(): c for c in table.column_names}
        names = tuple(self.row_type.field_names)
        values = []
        for field in names:
            column = columns.get(field if self.is_case_sensitive else field.lower())
            values.append(table.column(column).to_pylist() if column is not None else [None] * table.num_rows)
        cls, new = named_row_class(names), tuple.__new__
        return [new(cls, row) for row in zip(*values)]


# --- Avro generic records in Parquet files -------------------------------------------------------

_AVRO_PRIMITIVES = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
                    "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string()}
_AVRO_LOGICAL = {"date": pa.date32(), "time-millis": pa.time32("ms"), "time-micros": pa.time64("us"),
                 "timestamp-millis": pa.timestamp("ms", "UTC"), "timestamp-micros": pa.timestamp("us", "UTC"),
                 "local-timestamp-millis": pa.timestamp("ms"), "local-timestamp-micros": pa.timestamp("us")}


def _avro_field(name: str, node, named: dict, where: str) -> pa.Field:
    """The Parquet column of an Avro type (a union with null is a nullable column), as parquet-avro
    maps them: records are groups, arrays lists, maps string-keyed maps, enums strings."""
    nullable = False
    if isinstance(node, list):
        branches = [b for b in node if b != "null"]
        if len(branches) != 1:
            raise TypeError(f"AvroParquetWriters: {where} is the union {node}; only a type, or a type and null, "
                            f"has a Parquet column type")
        node, nullable = branches[0], len(branches) < len(node)
    if isinstance(node, str):
        if node in _AVRO_PRIMITIVES:
            return pa.field(name, _AVRO_PRIMITIVES[node], nullable or node == "null")
        return _avro_field(name, named[node], named, where).with_nullable(nullable)
    kind, logical = node["type"], node.get("logicalType")
    if logical == "decimal":
        precision = node["precision"]
        type_ = (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, node.get("scale", 0))
    elif logical in _AVRO_LOGICAL:
        type_ = _AVRO_LOGICAL[logical]
    elif kind == "record":
        named[node["name"]] = node
        type_ = pa.struct([_avro_field(f["name"], f["type"], named, f"field '{f['name']}' of {node['name']}")
                           for f in node["fields"]])
    elif kind == "enum":
        named[node["name"]] = node
        type_ = pa.string()
    elif kind == "fixed":
        named[node["name"]] = node
        type_ = pa.binary(node["size"])
    elif kind == "array":
        type_ = pa.list_(_avro_field("element", node["items"], named, f"the items of {where}"))
    elif kind == "map":
        type_ = pa.map_(pa.string(), _avro_field("value", node["values"], named, f"the values of {where}"))
    else:
        return _avro_field(name, kind, named, where).with_nullable(nullable)
    return pa.field(name, type_, nullable)


def _avro_arrow_schema(schema: AvroSchema, who: str) -> pa.Schema:
    parsed = schema._parsed
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise TypeError(f"{who} needs an Avro record schema, got {schema}")
    fields = _avro_field("record", parsed, {}, f"record {parsed['name']}").type
    # parquet-avro keeps the writer's schema under this key, so Java's AvroParquetReader reads it back as is
    return pa.schema(list(fields), metadata={"parquet.avro.schema": str(schema), "writer.model.name": "avro"})


class _AvroParquetFormat(StreamFormat):
    """Parquet files as Avro generic records (dicts of the schema's fields), taken from the file's
    columns by name; a field the file lacks gets its default, or the file is a bad record."""

    def __init__(self, schema: AvroSchema):
        super().__init__("avro_parquet")
        self.schema = schema

    def produced_type(self):
        return GenericRecordAvroTypeInfo(self.schema)

    def parse(self, data: bytes, name: str = "<bytes>", poison=None) -> list:
        if poison is None:
            poison = ErrorPolicy.fail().handler("format avro_parquet")
        table, bad = read_parquet(data, name, poison)
        if table is None:
            return bad
        fields, values = self.schema._parsed["fields"], []
        for field in fields:
            if field["name"] in table.column_names:
                values.append(table.column(field["name"]).to_pylist(maps_as_pydicts="strict"))
            elif "default" in field:
                values.append([copy.deepcopy(field["default"]) for _ in range(table.num_rows)])
            else:
                return [poison(data, name, f"the file has no column for the Avro field '{field['name']}', "
                                           f"which has no default")]
        names = [f["name"] for f in fields]
        return [dict(zip(names, row)) for row in zip(*values)]


class AvroParquetReaders:
    @staticmethod
    def for_generic_record(schema: AvroSchema) -> StreamFormat:
        """``FileSource.for_record_stream_format(AvroParquetReaders.for_generic_record(schema), path)``:
        Parquet files read as Avro generic records of ``schema``."""
        if not isinstance(schema, AvroSchema):
            raise TypeError(f"AvroParquetReaders.for_generic_record needs an AvroSchema, got {type(schema).__name__}")
        _avro_arrow_schema(schema, "AvroParquetReaders.for_generic_record")
        return _AvroParquetFormat(schema)


class _AvroParquetWriterFactory(BulkWriterFactory):
    def __init__(self, schema: AvroSchema):
        self.schema = schema
        self.arrow_schema = _avro_arrow_schema(schema, "AvroParquetWriters.for_generic_record")

    def encode(self, records: list) -> bytes:
        import fastavro.validation

        try:
            fastavro.validation.validate_many(records, self.schema._parsed, raise_errors=True)
        except fastavro.validation.ValidationError as exc:
            raise ValueError(f"AvroParquetWriters: a record does not match the Avro schema: {exc}") from None
        out = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(records, schema=self.arrow_schema), out)
        return out.getvalue()


class AvroParquetWriters:
    @staticmethod
    def for_generic_record(schema: AvroSchema) -> BulkWriterFactory:
        """``FileSink.for_bulk_format(path, AvroParquetWriters.for_generic_record(schema))``: records
        (dicts of the schema's fields) written as one Parquet file per part file."""
        if not isinstance(schema, AvroSchema):
            raise TypeError(f"AvroParquetWriters.for_generic_record needs an AvroSchema, got {type(schema).__name__}")
        return _AvroParquetWriterFactory(schema)
