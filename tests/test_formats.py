"""Formats under PyFlink's names and import paths: JSON and CSV row schemas round-trip typed ``Row``s,
follow PyFlink's builder options, and read files through a FileSource; NumberSequenceSource."""

from __future__ import annotations

import datetime
import decimal
import importlib

import pytest

from keyspan.common import Row, Types, WatermarkStrategy
from keyspan.common.serialization import ParseError, SimpleStringSchema

ORDER = Types.ROW_NAMED(
    ["id", "user", "amount", "paid", "price", "day", "tags", "address"],
    [Types.LONG(), Types.STRING(), Types.INT(), Types.BOOLEAN(), Types.DOUBLE(), Types.SQL_DATE(),
     Types.LIST(Types.STRING()), Types.ROW_NAMED(["city", "zip"], [Types.STRING(), Types.INT()])])


def test_pyflink_import_paths_resolve():
    names = {
        "keyspan.common.serialization": ["SimpleStringSchema", "JsonRowSerializationSchema", "Encoder",
                                         "JsonRowDeserializationSchema", "CsvRowSerializationSchema",
                                         "CsvRowDeserializationSchema", "SerializationSchema", "DeserializationSchema",
                                         "AvroRowSerializationSchema", "AvroRowDeserializationSchema"],
        "keyspan.datastream.formats.json": ["JsonRowSerializationSchema", "JsonRowDeserializationSchema"],
        "keyspan.datastream.formats.csv": ["CsvRowSerializationSchema", "CsvRowDeserializationSchema"],
        "keyspan.datastream.formats.parquet": ["ParquetBulkWriters"],
        "keyspan.datastream.formats.avro": ["AvroRowSerializationSchema", "AvroRowDeserializationSchema"],
        "keyspan.datastream.connectors": ["FileSource", "FileSink", "StreamFormat", "OutputFileConfig", "RollingPolicy",
                                          "BucketAssigner", "NumberSequenceSource", "FileSourceBuilder", "Source"],
        "keyspan.datastream.connectors.file_system": ["FileSource", "FileSink", "RollingPolicy", "BucketAssigner",
                                                      "OutputFileConfig", "StreamFormat", "BulkWriterFactory"],
        "keyspan.datastream.connectors.number_seq": ["NumberSequenceSource"],
    }
    for module, attrs in names.items():
        m = importlib.import_module(module)
        for attr in attrs:
            assert hasattr(m, attr), f"{module}.{attr}"


def _order():
    return Row(id=7, user="ann, \"the\" first", amount=3, paid=True, price=2.5, day=datetime.date(2024, 2, 29),
               tags=["a", "b"], address=Row(city="Oslo", zip=150))


def test_json_row_schemas_round_trip_typed_rows():
    from keyspan.datastream.formats.json import JsonRowDeserializationSchema, JsonRowSerializationSchema

    ser = JsonRowSerializationSchema.builder().with_type_info(ORDER).build()
    de = JsonRowDeserializationSchema.builder().type_info(ORDER).build()
    data = ser.serialize(_order())
    assert data.startswith(b'{"id":7,"user":"ann, \\"the\\" first","amount":3,')
    row = de.deserialize(data)
    assert row == _order() and row.user == "ann, \"the\" first" and row.address.city == "Oslo"
    assert row._fields == tuple(ORDER.get_field_names())
    # missing fields are None; unknown properties are ignored; numbers in strings are read
    assert de.deserialize(b'{"id": "8", "other": 1}') == Row(id=8, user=None, amount=None, paid=None, price=None,
                                                               day=None, tags=None, address=None)


def test_json_deserialization_options():
    from keyspan.datastream.formats.json import JsonRowDeserializationSchema

    row = Types.ROW_NAMED(["a", "b"], [Types.INT(), Types.STRING()])
    strict = JsonRowDeserializationSchema.builder().type_info(row).fail_on_missing_field().build()
    with pytest.raises(ParseError, match="field 'b' is missing"):
        strict.deserialize(b'{"a": 1}')
    with pytest.raises(ParseError, match="malformed JSON"):
        strict.deserialize(b'{"a": 1')
    with pytest.raises(ParseError, match="cannot read 'x' as INT"):
        strict.deserialize(b'{"a": "x", "b": "y"}')
    lenient = JsonRowDeserializationSchema.builder().type_info(row).ignore_parse_errors().build()
    assert lenient.deserialize(b'{"a": 1') is None
    assert lenient.deserialize(b'{"a": 1, "b": "x"}') == Row(a=1, b="x")
    from_schema = JsonRowDeserializationSchema.builder().json_schema(
        '{"type": "object", "properties": {"n": {"type": "integer"}, "when": {"type": "string", "format": "date"}}}'
    ).build()
    assert from_schema.deserialize(b'{"n": 3, "when": "2024-01-02"}') == Row(n=3, when=datetime.date(2024, 1, 2))


def test_csv_row_schemas_round_trip_typed_rows():
    from keyspan.datastream.formats.csv import CsvRowDeserializationSchema, CsvRowSerializationSchema

    flat = Types.ROW_NAMED(["id", "user", "amount", "paid", "price", "tags", "cost"],
                           [Types.LONG(), Types.STRING(), Types.INT(), Types.BOOLEAN(), Types.DOUBLE(),
                            Types.LIST(Types.STRING()), Types.BIG_DEC()])
    record = Row(id=7, user='ann, "the" first', amount=None, paid=False, price=2.5, tags=["a", "b"],
                 cost=decimal.Decimal("1.10"))
    ser = CsvRowSerializationSchema.Builder(flat).set_null_literal("NULL").build()
    data = ser.serialize(record)
    assert data == b'7,"ann, ""the"" first",NULL,false,2.5,a;b,1.10\n'
    de = CsvRowDeserializationSchema.Builder(flat).set_null_literal("NULL").build()
    assert de.deserialize(data) == record

    piped = CsvRowSerializationSchema.Builder(flat).set_field_delimiter("|").set_array_element_delimiter(",") \
        .disable_quote_character().set_line_delimiter("\r\n").build()
    line = piped.serialize(Row(id=1, user="bo", amount=2, paid=True, price=0.5, tags=["x"], cost=None))
    assert line == b"1|bo|2|true|0.5|x|\r\n"
    back = CsvRowDeserializationSchema.Builder(flat).set_field_delimiter("|").set_array_element_delimiter(",").build()
    assert back.deserialize(line) == Row(id=1, user="bo", amount=2, paid=True, price=0.5, tags=["x"], cost=None)


def test_csv_deserialization_errors_and_ignore():
    from keyspan.datastream.formats.csv import CsvRowDeserializationSchema

    row = Types.ROW_NAMED(["a", "b"], [Types.INT(), Types.STRING()])
    strict = CsvRowDeserializationSchema.Builder(row).set_allow_comments(True).build()
    with pytest.raises(ParseError, match="wrong field count: 2 fields expected but the row has 3"):
        strict.deserialize(b"1,x,y")
    assert strict.deserialize(b"# a comment") is None
    assert strict.deserialize(b",") == Row(a=None, b="")
    lenient = CsvRowDeserializationSchema.Builder(row).set_ignore_parse_errors(True).build()
    assert lenient.deserialize(b"1") is None
    assert lenient.deserialize(b"1,x") == Row(a=1, b="x")


def test_simple_string_schema_round_trip():
    schema = SimpleStringSchema()
    assert schema.deserialize(schema.serialize("grüße")) == "grüße"
    assert SimpleStringSchema("latin-1").serialize("é") == b"\xe9"
    with pytest.raises(ParseError, match="not UTF-8"):
        schema.deserialize(b"\xff")


def test_row_schema_needs_a_row_type():
    from keyspan.datastream.formats.json import JsonRowSerializationSchema

    with pytest.raises(TypeError, match="ROW_NAMED"):
        JsonRowSerializationSchema.builder().with_type_info(Types.INT()).build()
    with pytest.raises(TypeError, match="Typeinfo should be set"):
        JsonRowSerializationSchema.builder().build()


def test_file_source_reads_lines_with_a_row_schema(env, tmp_path):
    from keyspan.datastream.connectors import FileSource, StreamFormat
    from keyspan.datastream.formats.json import JsonRowDeserializationSchema, JsonRowSerializationSchema

    ser = JsonRowSerializationSchema.builder().with_type_info(ORDER).build()
    records = [Row(id=i, user=f"u{i % 3}", amount=i, paid=i % 2 == 0, price=i / 2, day=datetime.date(2024, 1, 1 + i),
                   tags=[str(i)], address=Row(city="c", zip=i)) for i in range(20)]
    folder = tmp_path / "orders"
    folder.mkdir()
    (folder / "part-0.jsonl").write_bytes(b"\n".join(ser.serialize(r) for r in records[:10]) + b"\n")
    (folder / "part-1.jsonl").write_bytes(b"\n".join(ser.serialize(r) for r in records[10:]) + b"\n")
    de = JsonRowDeserializationSchema.builder().type_info(ORDER).build()
    source = FileSource.for_record_stream_format(StreamFormat.line_format(de), str(folder)).build()
    got = env.from_source(source, WatermarkStrategy.no_watermarks(), "orders").execute_and_collect(limit=100)
    assert sorted(got, key=lambda r: r.id) == records


def test_number_sequence_source(env):
    from keyspan.datastream.connectors.number_seq import NumberSequenceSource

    ds = env.from_source(NumberSequenceSource(5, 5004), WatermarkStrategy.no_watermarks(), "seq")
    results = ds.map(lambda x: x * 2).execute_and_collect(limit=10000)
    assert sorted(results) == [x * 2 for x in range(5, 5005)]
    with pytest.raises(ValueError, match="end"):
        NumberSequenceSource(3, 2)


def test_avro_row_schemas_round_trip_typed_rows():
    from keyspan.datastream.formats.avro import AvroRowDeserializationSchema, AvroRowSerializationSchema

    schema = ('{"type": "record", "name": "Order", "fields": [{"name": "user", "type": "string"}, '
              '{"name": "amount", "type": "long"}, {"name": "tags", "type": {"type": "array", "items": "string"}}, '
              '{"name": "address", "type": ["null", {"type": "record", "name": "Address", '
              '"fields": [{"name": "city", "type": "string"}]}]}]}')
    record = Row(user="ann", amount=3, tags=["a"], address=Row(city="Oslo"))
    data = AvroRowSerializationSchema(avro_schema_string=schema).serialize(record)
    back = AvroRowDeserializationSchema(avro_schema_string=schema).deserialize(data)
    assert back == record and back.address.city == "Oslo"
    with pytest.raises(ParseError, match="Avro schema Order"):
        AvroRowDeserializationSchema(avro_schema_string=schema).deserialize(data[:3])
    with pytest.raises(ValueError, match="not supported by keyspan"):
        AvroRowSerializationSchema(record_class="com.example.Order")
