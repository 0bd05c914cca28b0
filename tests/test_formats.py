"""Formats under PyFlink's names and import paths: JSON and CSV row schemas round-trip typed ``Row``s,
follow PyFlink's builder options, and read files through a FileSource; NumberSequenceSource."""

from __future__ import annotations

import datetime
import decimal
import importlib
import json

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
                                         "AvroRowSerializationSchema", "AvroRowDeserializationSchema",
                                         "ByteArraySchema", "RowFieldExtractorSchema", "BulkWriterFactory",
                                         "RowDataBulkWriterFactory"],
        "keyspan.common": ["ByteArraySchema", "SimpleStringSchema", "Encoder"],
        "keyspan.datastream.formats.json": ["JsonRowSerializationSchema", "JsonRowDeserializationSchema"],
        "keyspan.datastream.formats.csv": ["CsvRowSerializationSchema", "CsvRowDeserializationSchema", "CsvSchema",
                                           "CsvSchemaBuilder", "CsvReaderFormat", "CsvBulkWriters"],
        "keyspan.table": ["DataTypes"],
        "keyspan.table.types": ["DataTypes"],
        "keyspan.datastream.formats.parquet": ["ParquetBulkWriters", "ParquetColumnarRowInputFormat", "AvroParquetReaders",
                                               "AvroParquetWriters"],
        "keyspan.datastream.formats.orc": ["OrcBulkWriters"],
        "keyspan.datastream.formats.avro": ["AvroRowSerializationSchema", "AvroRowDeserializationSchema", "AvroSchema",
                                            "GenericRecordAvroTypeInfo", "AvroInputFormat", "AvroBulkWriters"],
        "keyspan.datastream.connectors": ["FileSource", "FileSink", "StreamFormat", "OutputFileConfig", "RollingPolicy",
                                          "BucketAssigner", "NumberSequenceSource", "FileSourceBuilder", "Source",
                                          "FileEnumeratorProvider", "FileSplitAssignerProvider"],
        "keyspan.datastream.connectors.file_system": ["FileSource", "FileSink", "RollingPolicy", "BucketAssigner",
                                                      "OutputFileConfig", "StreamFormat", "BulkWriterFactory",
                                                      "FileCompactor", "FileCompactStrategy", "FileEnumeratorProvider",
                                                      "FileSplitAssignerProvider"],
        "keyspan.common.io": ["InputFormat"],
        "keyspan.datastream.utils": ["ResultTypeQueryable"],
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


def test_byte_array_and_row_field_extractor_schemas_pass_bytes_as_they_are():
    from keyspan.common import ByteArraySchema
    from keyspan.common.serialization import RowFieldExtractorSchema

    raw = ByteArraySchema()
    assert raw.serialize(b"\x00\xff") == b"\x00\xff" and raw.deserialize(b"\x01") == b"\x01"
    assert raw.get_produced_type() == Types.PRIMITIVE_ARRAY(Types.BYTE())
    with pytest.raises(TypeError, match="ByteArraySchema serializes bytes, got str"):
        raw.serialize("text")
    key, value = RowFieldExtractorSchema(0), RowFieldExtractorSchema(1)
    assert (key.serialize(Row(b"k", b"v")), value.serialize(Row(b"k", b"v"))) == (b"k", b"v")
    assert key.serialize(Row(None, b"v")) is None  # no key
    with pytest.raises(TypeError, match="field 1 must be bytes.*str"):
        value.serialize(Row(b"k", "v"))
    with pytest.raises(ValueError, match="no field 2"):
        RowFieldExtractorSchema(2).serialize(Row(b"k", b"v"))
    with pytest.raises(ValueError, match="non-negative"):
        RowFieldExtractorSchema(-1)


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
    orders = env.from_source(source, WatermarkStrategy.no_watermarks(), "orders")
    assert orders.get_type() == ORDER  # the schema's type, as a Flink source declares its produced type
    got = orders.execute_and_collect(limit=100)
    assert sorted(got, key=lambda r: r.id) == records


def test_a_source_gives_its_stream_the_type_its_format_or_deserializer_produces(env, tmp_path):
    from keyspan.datastream.connectors import FileSource, StreamFormat
    from keyspan.datastream.connectors.kafka import KafkaSource
    from keyspan.datastream.formats.json import JsonRowDeserializationSchema

    def kafka(deserializer):
        source = KafkaSource.builder().set_bootstrap_servers("127.0.0.1:1").set_topics("t") \
            .set_value_only_deserializer(deserializer).build()
        return env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka").get_type()

    assert kafka(JsonRowDeserializationSchema.builder().type_info(ORDER).build()) == ORDER
    assert kafka(SimpleStringSchema()) == Types.STRING()
    text = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).build()
    assert env.from_source(text, WatermarkStrategy.no_watermarks(), "text").get_type() == Types.STRING()
    jsonl = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), str(tmp_path)).build()
    assert env.from_source(jsonl, WatermarkStrategy.no_watermarks(), "jsonl").get_type() is None
    declared = Types.ROW_NAMED(["id"], [Types.LONG()])
    assert env.from_source(jsonl, WatermarkStrategy.no_watermarks(), "jsonl", type_info=declared).get_type() == declared


def _csv_schema():
    from keyspan.datastream.formats.csv import CsvSchema
    from keyspan.table import DataTypes

    return (CsvSchema.builder()
            .add_number_column("id", number_type=DataTypes.INT())
            .add_string_column("name")
            .add_array_column("tags", ",", element_type=DataTypes.STRING())
            .add_number_column("score", number_type=DataTypes.DOUBLE())
            .add_boolean_column("ok")
            .set_column_separator("|")
            .set_null_value("NULL")
            .set_use_header()
            .set_strict_headers()
            .build())


def test_csv_reader_format_reads_empty_fields_and_the_null_value_as_flink_does(env, tmp_path):
    """Every expected row is what PyFlink 2.3 read from the same files. Without a null value an empty
    string stays empty, an empty boolean is false (so is any text but ``true``), an empty number is
    an error and a blank line is a row of one field; with one (``""`` too) a field equal to it is None
    in any column. An array is never None: an empty field is ``[]``, an element equal to the null
    value is None."""
    from keyspan.connectors.dead_letter import ErrorPolicy
    from keyspan.datastream import OutputTag
    from keyspan.datastream.connectors import FileSource
    from keyspan.datastream.formats.csv import CsvReaderFormat, CsvSchema
    from keyspan.table import DataTypes

    def read(text: str, null=None):
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.csv"
        path.write_text("b,i,s,tags\n" + text)
        builder = CsvSchema.builder().add_boolean_column("b").add_number_column("i", number_type=DataTypes.INT()) \
            .add_string_column("s").add_array_column("tags", separator=";", element_type=DataTypes.STRING()) \
            .set_use_header()
        if null is not None:
            builder.set_null_value(null)
        bad = OutputTag("bad")
        source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(builder.build()), str(path)) \
            .set_error_policy(ErrorPolicy.dead_letter(bad)).build()
        rows = env.set_parallelism(1).from_source(source, WatermarkStrategy.no_watermarks(), "csv")
        got = list(rows.union(rows.get_side_output(bad).map(lambda d: d.reason)).execute_and_collect())
        return [r for r in got if isinstance(r, Row)], sorted(r for r in got if not isinstance(r, Row))

    rows, errors = read("true,1,,a;;b\n,2,x,\nyes,3,y,c\ntrue,,z,d\n\n")
    assert rows == [Row(b=True, i=1, s="", tags=["a", "", "b"]), Row(b=False, i=2, s="x", tags=[]),
                    Row(b=False, i=3, s="y", tags=["c"])]
    assert [e.split(":")[0] for e in errors] == ["field 'i'", "wrong field count"]
    rows, errors = read('true,4,"",\nfalse,5,w,e;;f\n,6,v,g\n,,u,NULL\n', null="")
    assert rows == [Row(b=True, i=4, s=None, tags=[]), Row(b=False, i=5, s="w", tags=["e", None, "f"]),
                    Row(b=None, i=6, s="v", tags=["g"]), Row(b=None, i=None, s="u", tags=["NULL"])] and not errors
    rows, _ = read("true,7,NULL,NULL\n", null="NULL")
    assert rows == [Row(b=True, i=7, s=None, tags=[None])]


def test_csv_reader_format_reads_a_schema_s_typed_rows_and_sends_bad_rows_to_the_error_policy(env, tmp_path):
    """PyFlink's CsvReaderFormat: a header, typed columns, arrays, quoted fields over two lines, the
    null literal; a row of the wrong width or type goes to the source's error policy, by file and line."""
    from keyspan.connectors.dead_letter import ErrorPolicy
    from keyspan.datastream import OutputTag
    from keyspan.datastream.connectors import FileSource
    from keyspan.datastream.formats.csv import CsvReaderFormat

    schema = _csv_schema()
    assert len(schema) == 5
    folder = tmp_path / "people"
    folder.mkdir()
    (folder / "a.csv").write_text('id|name|tags|score|ok\n'
                                  '1|ann|x,y|1.5|true\n'
                                  '2|"bob\nthe builder"|NULL|NULL|false\n'
                                  '3|carl||2e3|TRUE\n'
                                  '4|dan|z|not a number|true\n'
                                  '5|eve\n')
    bad = OutputTag("bad")
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(folder)) \
        .set_error_policy(ErrorPolicy.dead_letter(bad)).build()
    people = env.set_parallelism(1).from_source(source, WatermarkStrategy.no_watermarks(), "people")
    assert people.get_type() == Types.ROW_NAMED(["id", "name", "tags", "score", "ok"], [
        Types.INT(), Types.STRING(), Types.LIST(Types.STRING()), Types.DOUBLE(), Types.BOOLEAN()])
    errors = people.get_side_output(bad).map(lambda d: (d.origin, d.reason.split(":")[0]))
    got = people.union(errors).execute_and_collect(limit=10)
    rows = sorted((r for r in got if isinstance(r, Row)), key=lambda r: r.id)
    assert rows == [Row(id=1, name="ann", tags=["x", "y"], score=1.5, ok=True),
                    Row(id=2, name="bob\nthe builder", tags=[None], score=None, ok=False),
                    Row(id=3, name="carl", tags=[], score=2000.0, ok=True)]
    assert sorted(r for r in got if not isinstance(r, Row)) == [
        (f"file://{folder}/a.csv line 6", "field 'score'"), (f"file://{folder}/a.csv line 7", "wrong field count")]


def test_a_csv_reader_s_rows_print_as_flink_s_internal_rows_and_reach_functions_as_rows(env, tmp_path, capsys):
    """Checked against PyFlink 2.3: CsvReaderFormat gives Java RowData, which print() shows as Java does;
    a Python function gets a named Row."""
    from keyspan.datastream.connectors import FileSource
    from keyspan.datastream.formats.csv import CsvReaderFormat, CsvSchema
    from keyspan.table import DataTypes

    path = tmp_path / "in.csv"
    path.write_text("ann,3,true\nbob,5,false\n")
    schema = CsvSchema.builder().add_string_column("name").add_number_column("n", number_type=DataTypes.INT()) \
        .add_boolean_column("ok").build()
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(path)).build()
    rows = env.set_parallelism(1).from_source(source, WatermarkStrategy.no_watermarks(), "csv")
    rows.print()
    rows.map(lambda r: str(r)).print("str")
    capsys.readouterr()
    env.execute("csv-print")
    assert sorted(capsys.readouterr().out.splitlines()) == [
        "+I(ann,3,true)", "+I(bob,5,false)", "str> Row(name='ann', n=3, ok=True)", "str> Row(name='bob', n=5, ok=False)"]


def test_csv_bulk_writer_writes_what_the_reader_reads_back(env, tmp_path):
    from keyspan.datastream.connectors import FileSink, FileSource
    from keyspan.datastream.formats.csv import CsvBulkWriters, CsvReaderFormat

    schema = _csv_schema()
    records = [Row(id=i, name=f"n|{i}" if i % 2 else f'say "{i}"', tags=[str(i), "t"] if i % 3 else [],
                   score=None if i == 4 else i * 1e7, ok=i % 2 == 0) for i in range(8)]
    out = tmp_path / "out"
    env.set_parallelism(2).from_collection(records, type_info=schema.get_type_info()) \
        .sink_to(FileSink.for_bulk_format(str(out), CsvBulkWriters.for_schema(schema)).build())
    env.execute("csv-out")
    parts = [p for p in out.iterdir() if p.is_file()]
    assert parts and all(p.read_text().startswith("id|name|tags|score|ok\n") for p in parts)
    assert "|1.0E7|" in "".join(p.read_text() for p in parts)  # numbers as Java writes them
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(out)).build()
    back = env.from_source(source, WatermarkStrategy.no_watermarks(), "back").execute_and_collect(limit=100)
    assert sorted(back, key=lambda r: r.id) == records


def test_csv_decimal_and_float_columns_hold_what_flink_keeps(env, tmp_path):
    """Checked against PyFlink 2.3 on the same files: a ``DECIMAL(10, 2)`` column is read at its scale,
    rounded half up, and as None past its precision; a ``FLOAT`` is the single-precision number. The
    writer keeps a decimal at its column's scale and writes it as Jackson does, trailing zeros
    stripped (``1E+2`` for 100)."""
    from keyspan.datastream.connectors import FileSink, FileSource
    from keyspan.datastream.formats.csv import CsvBulkWriters, CsvReaderFormat, CsvSchema
    from keyspan.table import DataTypes

    schema = CsvSchema.builder().add_number_column("d", number_type=DataTypes.DECIMAL(10, 2)) \
        .add_number_column("f", number_type=DataTypes.FLOAT()).build()
    path = tmp_path / "in.csv"
    path.write_text("1.5,0.1\n100,1e-7\n1.555,2.5\n-1.555,3\n99999999.995,0\n")
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(path)).build()
    rows = env.set_parallelism(1).from_source(source, WatermarkStrategy.no_watermarks(), "csv")
    got = rows.map(lambda r: (r.d, r.f)).execute_and_collect()
    D = decimal.Decimal
    assert [(str(d) if d is not None else None, f) for d, f in got] == [
        ("1.50", 0.10000000149011612), ("100.00", 1.0000000116860974e-07), ("1.56", 2.5), ("-1.56", 3.0), (None, 0.0)]

    out = tmp_path / "out"
    values = [D("1.50"), D("100"), D("-0.00"), D("1.555"), D("12345678.90"), D("99999999.995")]
    env.from_collection([Row(d=v, f=1.0) for v in values], type_info=Types.ROW_NAMED(["d", "f"], [Types.BIG_DEC(), Types.FLOAT()])) \
        .sink_to(FileSink.for_bulk_format(str(out), CsvBulkWriters.for_schema(schema)).build())
    env.execute("csv-decimals")
    written = "".join(p.read_text() for p in out.iterdir() if p.is_file())
    assert written.splitlines() == ["1.5,1.0", "1E+2,1.0", "0,1.0", "1.56,1.0", "12345678.9,1.0", ",1.0"]


def test_csv_schema_checks_its_dialect():
    from keyspan.datastream.formats.csv import CsvBulkWriters, CsvReaderFormat, CsvSchema

    with pytest.raises(ValueError, match="Column separator must be a single char"):
        CsvSchema.builder().set_column_separator("||")
    with pytest.raises(TypeError, match="needs a CsvSchema"):
        CsvReaderFormat.for_schema("id,name")
    with pytest.raises(TypeError, match="needs a CsvSchema"):
        CsvBulkWriters.for_schema(None)
    base = CsvSchema.builder().add_string_column("a").build()
    both = CsvSchema.builder().add_columns_from(base).add_number_column("b").build()
    assert both.get_type_info() == Types.ROW_NAMED(["a", "b"], [Types.STRING(), Types.LONG()])
    assert CsvSchema.builder().add_columns_from(both).clear_columns().size() == 0


USER_AVRO = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}, {"name": "visits", "type": {"type": "array", "items": "long"}},
    {"name": "email", "type": ["null", "string"], "default": None}]})


def test_avro_generic_records_written_by_the_bulk_writer_are_read_by_create_input(env, tmp_path):
    import fastavro

    from keyspan.datastream.connectors import FileSink
    from keyspan.datastream.formats.avro import (
        AvroBulkWriters, AvroInputFormat, AvroSchema, GenericRecordAvroTypeInfo,
    )
    from keyspan.runtime.executor import JobExecutionError

    schema = AvroSchema.parse_string(USER_AVRO)
    assert json.loads(str(schema))["name"] == "User"
    users = [{"name": f"u{i}", "visits": list(range(i)), "email": None if i % 2 else f"u{i}@x"} for i in range(12)]
    out = tmp_path / "avro"
    env.from_collection(users).map(lambda e: e, output_type=GenericRecordAvroTypeInfo(schema)) \
        .sink_to(FileSink.for_bulk_format(str(out), AvroBulkWriters.for_generic_record(schema)).build())
    env.execute("avro-out")
    files = [p for p in out.iterdir() if p.is_file()]
    with open(files[0], "rb") as f:
        assert fastavro.reader(f).writer_schema["name"] == "User"  # a real Avro data file
    from keyspan.common.io import InputFormat
    from keyspan.datastream.utils import ResultTypeQueryable

    assert isinstance(AvroInputFormat(str(out), schema), (InputFormat, ResultTypeQueryable))
    stream = env.create_input(AvroInputFormat(str(out), schema))
    assert stream.get_type() == GenericRecordAvroTypeInfo(schema)
    assert sorted(stream.execute_and_collect(limit=100), key=lambda u: int(u["name"][1:])) == users

    env.from_collection([{"name": "bad", "visits": "not a list"}]).name("users").sink_to(
        FileSink.for_bulk_format(str(tmp_path / "bad"), AvroBulkWriters.for_generic_record(schema)).build())
    with pytest.raises(JobExecutionError, match="does not match the Avro schema"):
        env.execute("avro-bad")
    with pytest.raises(NotImplementedError, match="not supported by keyspan: create_input"):
        env.create_input(object())


ORDER_AVRO = json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
    {"name": "attrs", "type": {"type": "map", "values": "string"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "first", "type": ["null", "shop.Item"], "default": None}]})


def test_avro_generic_records_in_parquet_files_round_trip(env, tmp_path):
    """AvroParquetWriters.for_generic_record writes Parquet that pyarrow reads with the Avro schema's
    columns; AvroParquetReaders.for_generic_record reads the files back as the same dicts, fills a field
    the files lack from its default, and names the file when a field has neither column nor default."""
    import pyarrow.parquet as pq

    from keyspan.datastream.connectors import FileSink, FileSource
    from keyspan.datastream.formats.avro import AvroSchema, GenericRecordAvroTypeInfo
    from keyspan.datastream.formats.parquet import AvroParquetReaders, AvroParquetWriters
    from keyspan.runtime.executor import JobExecutionError

    schema = AvroSchema.parse_string(ORDER_AVRO)
    at = datetime.datetime(2026, 12, 2, 9, 30, tzinfo=datetime.timezone.utc)
    orders = [{"id": i, "items": [{"sku": f"s{j}", "qty": j} for j in range(i % 3)], "attrs": {"shop": f"n{i % 2}"},
               "status": "PAID" if i % 2 else "NEW", "at": at + datetime.timedelta(minutes=i),
               "price": decimal.Decimal(f"{i}.25"), "first": {"sku": "s0", "qty": 0} if i % 3 else None}
              for i in range(20)]
    out = tmp_path / "orders"
    env.from_collection(orders).map(lambda e: e, output_type=GenericRecordAvroTypeInfo(schema)) \
        .sink_to(FileSink.for_bulk_format(str(out), AvroParquetWriters.for_generic_record(schema)).build())
    env.execute("avro-parquet-out")
    files = [p for p in out.iterdir() if p.is_file()]
    table = pq.read_table(files[0])
    assert str(table.schema.field("price").type) == "decimal128(10, 2)" and table.schema.field("status").type == "string"
    assert json.loads(table.schema.metadata[b"parquet.avro.schema"])["name"] == "Order"

    source = FileSource.for_record_stream_format(AvroParquetReaders.for_generic_record(schema), str(out)).build()
    stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "orders")
    assert stream.get_type() == GenericRecordAvroTypeInfo(schema)
    assert sorted(stream.execute_and_collect(limit=100), key=lambda o: o["id"]) == orders

    evolved = AvroSchema.parse_string(json.dumps({"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"}, {"name": "channel", "type": "string", "default": "web"}]}))
    source = FileSource.for_record_stream_format(AvroParquetReaders.for_generic_record(evolved), str(out)).build()
    assert sorted(env.from_source(source, WatermarkStrategy.no_watermarks(), "evolved").execute_and_collect(limit=100),
                  key=lambda o: o["id"]) == [{"id": i, "channel": "web"} for i in range(20)]

    missing = AvroSchema.parse_string(json.dumps({"type": "record", "name": "Order", "fields": [
        {"name": "coupon", "type": "string"}]}))
    source = FileSource.for_record_stream_format(AvroParquetReaders.for_generic_record(missing), str(out)).build()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "coupons").print()
    with pytest.raises(JobExecutionError, match=r"orders/part-.*no column for the Avro field 'coupon'"):
        env.execute("avro-parquet-missing-field")

    env.from_collection([{"id": "not a long"}]).sink_to(
        FileSink.for_bulk_format(str(tmp_path / "bad"), AvroParquetWriters.for_generic_record(schema)).build())
    with pytest.raises(JobExecutionError, match="does not match the Avro schema"):
        env.execute("avro-parquet-bad")
    with pytest.raises(TypeError, match=r"union \['null', 'string', 'long'\]"):
        AvroParquetWriters.for_generic_record(AvroSchema.parse_string(json.dumps({"type": "record", "name": "U", "fields": [
            {"name": "either", "type": ["null", "string", "long"]}]})))


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
    # as in Flink, a row fills the record by position: the fields of Types.ROW([...]) are named f0, f1, ...
    positional = Row(f0="bob", f1=4, f2=[], f3=("Rome",))
    assert AvroRowDeserializationSchema(avro_schema_string=schema).deserialize(
        AvroRowSerializationSchema(avro_schema_string=schema).serialize(positional)) == \
        Row(user="bob", amount=4, tags=[], address=Row(city="Rome"))
    counts = ('{"type": "record", "name": "Counts", "fields": [{"name": "by_word", "type": {"type": "map", '
              '"values": "long"}}]}')
    back = AvroRowDeserializationSchema(avro_schema_string=counts).deserialize(
        AvroRowSerializationSchema(avro_schema_string=counts).serialize(Row({"hi": 2})))
    assert back.by_word == {"hi": 2}  # an Avro map comes back as a dict, as in PyFlink
    # the records' type, as Flink's AvroSchemaConverter gives it (a stream of it prints as rows do)
    assert AvroRowDeserializationSchema(avro_schema_string=schema).get_produced_type() == Types.ROW_NAMED(
        ["user", "amount", "tags", "address"],
        [Types.STRING(), Types.LONG(), Types.OBJECT_ARRAY(Types.STRING()), Types.ROW_NAMED(["city"], [Types.STRING()])])
    with pytest.raises(ParseError, match="Avro schema Order"):
        AvroRowDeserializationSchema(avro_schema_string=schema).deserialize(data[:3])
    with pytest.raises(ValueError, match="not supported by keyspan"):
        AvroRowSerializationSchema(record_class="com.example.Order")
