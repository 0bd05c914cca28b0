"""Serialization schemas and encoders (``pyflink.common.serialization``).

A ``DeserializationSchema`` turns one message (a line of a file, a Kafka record value) into a record
with ``deserialize(bytes)``; a ``SerializationSchema`` turns a record into bytes with
``serialize(value)``. The row schemas produce and take ``Row`` records typed by a
``Types.ROW_NAMED(...)``, as PyFlink's JSON and CSV row schemas do. Sources call ``parse(bytes)``,
which raises ``ParseError`` on a bad message, so that the source's error policy (fail, skip,
dead-letter output) decides what happens to it; ``deserialize`` follows the schema's own
``ignore_parse_errors`` setting and returns None for a message it ignores (PyFlink drops it)."""

from __future__ import annotations

import base64
import csv
import datetime
import decimal
import io
import json

from keyspan.common.java_text import single_precision, text_of
from keyspan.common.typeinfo import DecimalTypeInfo, ListTypeInfo, MapTypeInfo, RowTypeInfo, TupleTypeInfo, TypeInformation, Types
from keyspan.common.types import Row


class ParseError(ValueError):
    """A message a deserialization schema cannot turn into a record; the text says why."""


class SerializationSchema:
    """Turns a record into the bytes of one message."""

    def serialize(self, value) -> bytes:
        raise NotImplementedError


class DeserializationSchema:
    """Turns the bytes of one message into a record."""

    ignore_parse_errors = False

    def parse(self, message: bytes):
        """The record, or ``ParseError`` saying why the message is not one."""
        raise NotImplementedError

    def deserialize(self, message: bytes):
        try:
            return self.parse(message)
        except ParseError:
            if self.ignore_parse_errors:
                return None
            raise

    def get_produced_type(self):
        return getattr(self, "type_info", None)


class Encoder:
    """Turns a record into the bytes of one line of a row-format file."""

    def __init__(self, encode):
        self._encode = encode

    def encode(self, value) -> bytes:
        return self._encode(value)

    def for_type(self, type_info) -> "Encoder":
        """This encoder for a stream of ``type_info``: the same one, unless its bytes depend on the type."""
        return self

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> "Encoder":
        return SimpleStringEncoder(charset_name)


class SimpleStringEncoder(Encoder):
    """Each record as a line of text, as Flink's ``SimpleStringEncoder`` writes the Java object of a
    stream of a declared type (``+I[ann, 3]`` for a row); Python's ``str`` of any other record."""

    def __init__(self, charset_name: str = "UTF-8", type_info=None):
        super().__init__(None)
        self.charset_name = charset_name
        self._text = text_of(type_info)

    def encode(self, value) -> bytes:
        return (self._text(value) + "\n").encode(self.charset_name)

    def for_type(self, type_info) -> "Encoder":
        return SimpleStringEncoder(self.charset_name, type_info)


class BulkWriterFactory:
    """Writes a whole part file at once from its records (``FileSink.for_bulk_format``);
    ``encode(records)`` returns the file's bytes. A factory that also has ``encode_pieces(pieces)``
    takes a part file as pieces in order, each a list of records or a ``pyarrow.RecordBatch`` of them
    (a columnar operator's output, see docs/aggregations.md)."""

    def encode(self, records: list) -> bytes:
        raise NotImplementedError


class RowDataBulkWriterFactory(BulkWriterFactory):
    """A bulk writer of rows of a declared row type (Parquet's and ORC's)."""

    def __init__(self, row_type: RowTypeInfo):
        self.row_type = row_type

    def get_row_type(self) -> RowTypeInfo:
        return self.row_type


class SimpleStringSchema(SerializationSchema, DeserializationSchema):
    """Strings as bytes in ``charset`` (UTF-8 by default)."""

    def __init__(self, charset: str = "UTF-8"):
        self.charset = charset

    def serialize(self, value) -> bytes:
        return str(value).encode(self.charset)

    def get_produced_type(self):
        return Types.STRING()

    def parse(self, message: bytes) -> str:
        try:
            return message.decode(self.charset)
        except UnicodeDecodeError as exc:
            raise ParseError(f"not {self.charset} text: {exc}") from None


class ByteArraySchema(SerializationSchema, DeserializationSchema):
    """Messages as they are: ``bytes`` in, ``bytes`` out."""

    def serialize(self, value) -> bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"ByteArraySchema serializes bytes, got {type(value).__name__}: {value!r}")
        return bytes(value)

    def parse(self, message: bytes) -> bytes:
        return bytes(message)

    def get_produced_type(self):
        return Types.PRIMITIVE_ARRAY(Types.BYTE())


class RowFieldExtractorSchema(SerializationSchema):
    """The field at ``field_index`` of a row, which must already be bytes, as the message: e.g. a Kafka
    record's key (``set_key_serialization_schema(RowFieldExtractorSchema(0))``). A None field gives
    no bytes (a Kafka record without a key)."""

    def __init__(self, field_index: int):
        if field_index < 0:
            raise ValueError(f"Field index must be non-negative, got: {field_index}")
        self.field_index = field_index

    def serialize(self, value) -> bytes | None:
        try:
            field = value[self.field_index]
        except (IndexError, TypeError):
            raise ValueError(f"RowFieldExtractorSchema: the record has no field {self.field_index}: {value!r}") from None
        if field is None or isinstance(field, bytes):
            return field
        raise TypeError(f"RowFieldExtractorSchema: field {self.field_index} must be bytes (convert it before the "
                        f"sink), got {type(field).__name__}: {field!r}")


# --- values by type ------------------------------------------------------------------------------

_INTS = {"BYTE", "SHORT", "INT", "LONG", "BIG_INT"}
_FLOATS = {"FLOAT", "DOUBLE"}
_STRINGS = {"STRING", "CHAR"}


def _row_type(type_info, who: str) -> RowTypeInfo:
    if not isinstance(type_info, RowTypeInfo):
        raise TypeError(f"{who} needs a row type (Types.ROW_NAMED([...], [...])), got {type_info!r}")
    return type_info


def from_text(text: str, t: TypeInformation, name: str):
    """A value of type ``t`` read from text (CSV fields; JSON strings where a number is declared)."""
    kind = t.name
    try:
        if kind in _STRINGS:
            return text
        if kind in _INTS:
            return int(text.strip())
        if kind == "FLOAT":  # Java parses a float: Python gets the single-precision number
            return single_precision(float(text.strip()))
        if kind == "DOUBLE":
            return float(text.strip())
        if kind == "BOOLEAN":
            low = text.strip().lower()
            if low not in ("true", "false"):
                raise ValueError(f"'{text}' is not true or false")
            return low == "true"
        if kind == "BIG_DEC":
            value = decimal.Decimal(text.strip())
            return t.fitted(value) if isinstance(t, DecimalTypeInfo) else value
        if kind == "SQL_DATE":
            return datetime.date.fromisoformat(text.strip())
        if kind == "SQL_TIMESTAMP":
            return datetime.datetime.fromisoformat(text.strip())
        if kind == "SQL_TIME":
            return datetime.time.fromisoformat(text.strip())
        if kind == "PRIMITIVE_ARRAY" or kind.startswith("BYTES"):
            return base64.b64decode(text)
    except (ValueError, ArithmeticError) as exc:
        raise ParseError(f"field '{name}': cannot read {text!r} as {kind}: {exc}") from None
    raise ParseError(f"field '{name}': type {kind} cannot be read from text")


def csv_field(text: str, t: TypeInformation, name: str, null_literal: str, array_separator: str):
    """A CSV field of type ``t``: None for the null literal (and for an empty field of a non-string
    type); for a list type, the elements between ``array_separator``s (the whole field without one)."""
    if text == null_literal and (null_literal or t.name not in _STRINGS):
        return None
    if isinstance(t, ListTypeInfo):
        if not text:
            return []
        parts = text.split(array_separator) if array_separator else [text]
        return [None if e == null_literal else from_text(e, t.element_type, name) for e in parts]
    return from_text(text, t, name)


def _from_json(value, t: TypeInformation, name: str, fail_on_missing: bool):
    if value is None:
        return None
    if isinstance(t, RowTypeInfo):
        if not isinstance(value, dict):
            raise ParseError(f"field '{name}': expected a JSON object, got {type(value).__name__}")
        return _json_row(value, t, fail_on_missing, prefix=f"{name}.")
    if isinstance(t, ListTypeInfo):
        if not isinstance(value, list):
            raise ParseError(f"field '{name}': expected a JSON array, got {type(value).__name__}")
        return [_from_json(v, t.element_type, f"{name}[]", fail_on_missing) for v in value]
    if isinstance(t, TupleTypeInfo):
        if not isinstance(value, list) or len(value) != len(t.field_types):
            raise ParseError(f"field '{name}': expected an array of {len(t.field_types)} values")
        return tuple(_from_json(v, ft, f"{name}[{i}]", fail_on_missing) for i, (v, ft) in enumerate(zip(value, t.field_types)))
    if isinstance(t, MapTypeInfo):
        if not isinstance(value, dict):
            raise ParseError(f"field '{name}': expected a JSON object, got {type(value).__name__}")
        return {k: _from_json(v, t.value_type, f"{name}.{k}", fail_on_missing) for k, v in value.items()}
    kind = t.name
    if kind in _STRINGS:
        return value if isinstance(value, str) else json.dumps(value)
    if isinstance(value, str):
        return from_text(value, t, name)
    if kind == "BOOLEAN" and isinstance(value, bool):
        return value
    if kind in _INTS and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind in _INTS and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind in _FLOATS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return single_precision(float(value)) if kind == "FLOAT" else float(value)
    if kind == "BIG_DEC" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return from_text(str(value), t, name)
    if kind == "PICKLED_BYTE_ARRAY":
        return value
    raise ParseError(f"field '{name}': expected {kind}, got {json.dumps(value)[:50]}")


def _json_row(obj: dict, t: RowTypeInfo, fail_on_missing: bool, prefix: str = "") -> Row:
    values = []
    for name, ft in zip(t.field_names, t.field_types):
        if name not in obj:
            if fail_on_missing:
                raise ParseError(f"field '{prefix}{name}' is missing")
            values.append(None)
            continue
        values.append(_from_json(obj[name], ft, prefix + name, fail_on_missing))
    return Row.from_values(t.field_names, values)


def _to_json(value, t: TypeInformation | None):
    if value is None:
        return None
    if isinstance(t, RowTypeInfo):
        return {n: _to_json(v, ft) for n, ft, v in zip(t.field_names, t.field_types, _row_values(value, t))}
    if isinstance(t, ListTypeInfo):
        return [_to_json(v, t.element_type) for v in value]
    if isinstance(t, TupleTypeInfo):
        return [_to_json(v, ft) for v, ft in zip(value, t.field_types)]
    if isinstance(t, MapTypeInfo):
        return {str(k): _to_json(v, t.value_type) for k, v in value.items()}
    return _scalar(value)


def _scalar(value):
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def _row_values(value, t: RowTypeInfo) -> list:
    """The values of a record in the row type's field order: a named Row by name, else by position."""
    if isinstance(value, dict):
        return [value.get(n) for n in t.field_names]
    if isinstance(value, Row) and value._fields is not None:
        d = value.as_dict()
        return [d.get(n) for n in t.field_names]
    if len(value) != len(t.field_names):
        raise ValueError(f"record {value!r} has {len(value)} fields, the row type {t!r} has {len(t.field_names)}")
    return list(value)


# --- JSON ------------------------------------------------------------------------------------------

class JsonRowDeserializationSchema(DeserializationSchema):
    """One JSON object per message → a ``Row`` with the row type's fields (missing fields are None
    unless ``fail_on_missing_field()``; unknown properties are ignored)."""

    def __init__(self, type_info, fail_on_missing_field: bool = False, ignore_parse_errors: bool = False):
        self.type_info = _row_type(type_info, "JsonRowDeserializationSchema")
        self.fail_on_missing_field = fail_on_missing_field
        self.ignore_parse_errors = ignore_parse_errors

    @staticmethod
    def builder() -> "JsonRowDeserializationSchema.Builder":
        return JsonRowDeserializationSchema.Builder()

    def parse(self, message: bytes) -> Row:
        try:
            obj = json.loads(message)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ParseError(f"malformed JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise ParseError(f"expected a JSON object, got {type(obj).__name__}")
        return _json_row(obj, self.type_info, self.fail_on_missing_field)

    class Builder:
        def __init__(self):
            self._type_info = None
            self._fail_on_missing_field = False
            self._ignore_parse_errors = False

        def type_info(self, type_info):
            self._type_info = type_info
            return self

        def json_schema(self, json_schema: str):
            """The row type from a JSON schema (``type: object`` with ``properties``)."""
            if json_schema is None:
                raise TypeError("The json_schema must not be None.")
            self._type_info = _type_from_json_schema(json.loads(json_schema), "root")
            return self

        def fail_on_missing_field(self):
            self._fail_on_missing_field = True
            return self

        def ignore_parse_errors(self):
            self._ignore_parse_errors = True
            return self

        def build(self) -> "JsonRowDeserializationSchema":
            if self._type_info is None:
                raise TypeError("Typeinfo should be set (builder().type_info(...) or .json_schema(...)).")
            return JsonRowDeserializationSchema(self._type_info, self._fail_on_missing_field,
                                                self._ignore_parse_errors)


class JsonRowSerializationSchema(SerializationSchema):
    """A ``Row`` → one compact JSON object with the row type's field names."""

    def __init__(self, type_info):
        self.type_info = _row_type(type_info, "JsonRowSerializationSchema")

    @staticmethod
    def builder() -> "JsonRowSerializationSchema.Builder":
        return JsonRowSerializationSchema.Builder()

    def serialize(self, value) -> bytes:
        return json.dumps(_to_json(value, self.type_info), separators=(",", ":"), ensure_ascii=False).encode()

    class Builder:
        def __init__(self):
            self._type_info = None

        def with_type_info(self, type_info):
            self._type_info = type_info
            return self

        def build(self) -> "JsonRowSerializationSchema":
            if self._type_info is None:
                raise TypeError("Typeinfo should be set.")
            return JsonRowSerializationSchema(self._type_info)


def _type_from_json_schema(node: dict, name: str) -> TypeInformation:
    from keyspan.common.typeinfo import Types

    kind = node.get("type")
    if isinstance(kind, list):  # ["string", "null"]
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = node.get("properties", {})
        return Types.ROW_NAMED(list(props), [_type_from_json_schema(v, k) for k, v in props.items()])
    if kind == "array":
        return Types.LIST(_type_from_json_schema(node.get("items", {"type": "string"}), name))
    simple = {"string": Types.STRING, "integer": Types.LONG, "number": Types.DOUBLE, "boolean": Types.BOOLEAN}
    if kind in simple:
        fmt = node.get("format")
        if kind == "string" and fmt == "date":
            return Types.SQL_DATE()
        if kind == "string" and fmt == "date-time":
            return Types.SQL_TIMESTAMP()
        return simple[kind]()
    raise ValueError(f"JSON schema: property '{name}' has a type keyspan cannot map: {kind!r}")


# --- CSV -------------------------------------------------------------------------------------------

class _CsvDialect:
    def __init__(self):
        self.field_delimiter = ","
        self.array_element_delimiter = ";"
        self.quote_character = '"'
        self.escape_character = None
        self.null_literal = ""
        self.allow_comments = False
        self.line_delimiter = "\n"


class _CsvDialectBuilder:
    """The dialect setters PyFlink's two CSV row schema builders share."""

    def __init__(self, type_info, schema_name: str):
        if type_info is None:
            raise TypeError("Type information must not be None")
        self._type_info = _row_type(type_info, schema_name)
        self._dialect = _CsvDialect()

    def set_field_delimiter(self, delimiter: str):
        self._dialect.field_delimiter = delimiter
        return self

    def set_array_element_delimiter(self, delimiter: str):
        self._dialect.array_element_delimiter = delimiter
        return self

    def set_quote_character(self, c: str):
        self._dialect.quote_character = c
        return self

    def set_escape_character(self, c: str):
        self._dialect.escape_character = c
        return self

    def set_null_literal(self, null_literal: str):
        self._dialect.null_literal = null_literal
        return self


class CsvRowDeserializationSchema(DeserializationSchema):
    """One CSV line per message → a ``Row``: exactly as many fields as the row type has (another
    count is a parse error), empty fields (or the null literal) of non-string types are None."""

    def __init__(self, type_info, dialect: _CsvDialect, ignore_parse_errors: bool):
        self.type_info = _row_type(type_info, "CsvRowDeserializationSchema")
        self.dialect = dialect
        self.ignore_parse_errors = ignore_parse_errors

    def parse(self, message: bytes):
        d = self.dialect
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(f"not UTF-8 text: {exc}") from None
        text = text.rstrip("\r\n")
        if d.allow_comments and text.lstrip().startswith("#"):
            return None
        try:
            rows = list(csv.reader(io.StringIO(text), delimiter=d.field_delimiter, quotechar=d.quote_character or None,
                                   escapechar=d.escape_character, quoting=csv.QUOTE_MINIMAL if d.quote_character
                                   else csv.QUOTE_NONE, strict=True))
        except csv.Error as exc:
            raise ParseError(f"malformed CSV: {exc}") from None
        fields = rows[0] if rows else []
        names, types = self.type_info.field_names, self.type_info.field_types
        if len(fields) != len(names):
            raise ParseError(f"wrong field count: {len(names)} fields expected but the row has {len(fields)}")
        return Row.from_values(names, [self._value(f, t, n) for f, t, n in zip(fields, types, names)])

    def _value(self, text: str, t: TypeInformation, name: str):
        return csv_field(text, t, name, self.dialect.null_literal, self.dialect.array_element_delimiter)

    class Builder(_CsvDialectBuilder):
        def __init__(self, type_info):
            super().__init__(type_info, "CsvRowDeserializationSchema")
            self._ignore_parse_errors = False

        def set_allow_comments(self, allow_comments: bool):
            self._dialect.allow_comments = allow_comments
            return self

        def set_ignore_parse_errors(self, ignore_parse_errors: bool):
            self._ignore_parse_errors = ignore_parse_errors
            return self

        def build(self) -> "CsvRowDeserializationSchema":
            return CsvRowDeserializationSchema(self._type_info, self._dialect, self._ignore_parse_errors)


class CsvRowSerializationSchema(SerializationSchema):
    """A ``Row`` → one CSV line (ending with the line delimiter, ``\\n`` by default)."""

    def __init__(self, type_info, dialect: _CsvDialect):
        self.type_info = _row_type(type_info, "CsvRowSerializationSchema")
        self.dialect = dialect

    def serialize(self, value) -> bytes:
        d = self.dialect
        out = io.StringIO()
        writer = csv.writer(out, delimiter=d.field_delimiter, quotechar=d.quote_character or '"',
                            escapechar=d.escape_character, lineterminator=d.line_delimiter,
                            quoting=csv.QUOTE_MINIMAL if d.quote_character else csv.QUOTE_NONE)
        writer.writerow([self._text(v, t) for v, t in zip(_row_values(value, self.type_info), self.type_info.field_types)])
        return out.getvalue().encode("utf-8")

    def _text(self, value, t) -> str:
        if value is None:
            return self.dialect.null_literal
        if isinstance(t, ListTypeInfo):
            return self.dialect.array_element_delimiter.join(
                self.dialect.null_literal if v is None else str(_scalar(v)) for v in value)
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value) if isinstance(value, decimal.Decimal) else str(_scalar(value))

    class Builder(_CsvDialectBuilder):
        def __init__(self, type_info):
            super().__init__(type_info, "CsvRowSerializationSchema")

        def set_line_delimiter(self, delimiter: str):
            self._dialect.line_delimiter = delimiter
            return self

        def disable_quote_character(self):
            self._dialect.quote_character = None
            return self

        def build(self) -> "CsvRowSerializationSchema":
            return CsvRowSerializationSchema(self._type_info, self._dialect)


# --- Avro ------------------------------------------------------------------------------------------

def _avro_schema(record_class, avro_schema_string, who: str):
    if record_class is not None:
        raise ValueError(f"not supported by keyspan: {who}(record_class=...) names a Java class; use "
                         f"{who}(avro_schema_string=...) with the record's Avro schema (JSON) instead")
    if avro_schema_string is None:
        raise TypeError("record_class or avro_schema_string should be specified.")
    import fastavro

    schema = fastavro.parse_schema(json.loads(avro_schema_string))
    if schema.get("type") != "record":
        raise ValueError(f"{who}: the Avro schema must be a record, got {schema.get('type')!r}")
    return schema


def _avro_branch(schema, named: dict, fits):
    """The schema itself, a named type it refers to, or in a union the first branch ``fits`` accepts."""
    if isinstance(schema, str):
        return named.get(schema, schema)
    if isinstance(schema, list):
        return next((b for b in (named.get(b, b) if isinstance(b, str) else b for b in schema) if fits(b)), None)
    return schema


def _avro_kind(schema) -> str | None:
    return schema.get("type") if isinstance(schema, dict) else None


_AVRO_TYPES = {"string": Types.STRING, "enum": Types.STRING, "int": Types.INT, "long": Types.LONG,
               "float": Types.FLOAT, "double": Types.DOUBLE, "boolean": Types.BOOLEAN, "null": Types.PICKLED_BYTE_ARRAY,
               "bytes": lambda: Types.PRIMITIVE_ARRAY(Types.BYTE()), "fixed": lambda: Types.PRIMITIVE_ARRAY(Types.BYTE())}
_AVRO_LOGICAL_TYPES = {"date": Types.SQL_DATE, "time-millis": Types.SQL_TIME, "timestamp-millis": Types.SQL_TIMESTAMP,
                       "timestamp-micros": Types.SQL_TIMESTAMP, "decimal": Types.BIG_DEC}


def _avro_type_info(schema, named: dict) -> TypeInformation:
    """The type Flink gives the records an Avro schema describes (its AvroSchemaConverter): a record is
    a named row, an array an object array, a map one keyed by strings, a nullable type that type."""
    if isinstance(schema, str):
        return _avro_type_info(named[schema], named) if schema in named else _AVRO_TYPES[schema]()
    if isinstance(schema, list):
        types = [b for b in schema if b != "null"]
        return _avro_type_info(types[0], named) if len(types) == 1 else Types.PICKLED_BYTE_ARRAY()
    kind = schema["type"]
    if schema.get("logicalType") in _AVRO_LOGICAL_TYPES:
        return _AVRO_LOGICAL_TYPES[schema["logicalType"]]()
    if kind == "record":
        return Types.ROW_NAMED([f["name"] for f in schema["fields"]],
                               [_avro_type_info(f["type"], named) for f in schema["fields"]])
    if kind == "array":
        return Types.OBJECT_ARRAY(_avro_type_info(schema["items"], named))
    if kind == "map":
        return Types.MAP(Types.STRING(), _avro_type_info(schema["values"], named))
    return _avro_type_info(kind, named)


def _avro_to_row(value, schema, named: dict):
    """A decoded Avro value as PyFlink gives it: a record as a ``Row`` named by its fields, a map as a
    dict, an array as a list."""
    if isinstance(value, dict):
        t = _avro_branch(schema, named, lambda b: _avro_kind(b) in ("record", "map")
                         and (_avro_kind(b) == "map" or {f["name"] for f in b["fields"]} == set(value)))
        if _avro_kind(t) == "map":
            return {k: _avro_to_row(v, t["values"], named) for k, v in value.items()}
        if _avro_kind(t) == "record":
            return Row.from_values(tuple(f["name"] for f in t["fields"]),
                                   tuple(_avro_to_row(value[f["name"]], f["type"], named) for f in t["fields"]))
    elif isinstance(value, list):
        t = _avro_branch(schema, named, lambda b: _avro_kind(b) == "array")
        if t is not None:
            return [_avro_to_row(v, t["items"], named) for v in value]
    return value


def _row_to_avro(value, schema, named: dict):
    """As Flink's AvroRowSerializationSchema: a row's fields fill the record's fields by position (the
    row's own field names are not read), in nested records, arrays, maps and unions alike."""
    if isinstance(value, dict):
        t = _avro_branch(schema, named, lambda b: _avro_kind(b) in ("map", "record"))
        if _avro_kind(t) == "map":
            return {k: _row_to_avro(v, t["values"], named) for k, v in value.items()}
        if _avro_kind(t) == "record":
            return {f["name"]: _row_to_avro(value.get(f["name"]), f["type"], named) for f in t["fields"]}
    elif isinstance(value, (tuple, list)):  # a Row, a tuple, or a list: an array or a record's fields
        kinds = ("record",) if isinstance(value, tuple) else ("array", "record")
        t = _avro_branch(schema, named, lambda b: _avro_kind(b) in kinds)
        if _avro_kind(t) == "array":
            return [_row_to_avro(v, t["items"], named) for v in value]
        if _avro_kind(t) == "record":
            return {f["name"]: _row_to_avro(v, f["type"], named) for f, v in zip(t["fields"], value)}
    return value


class AvroRowDeserializationSchema(DeserializationSchema):
    """Avro binary (one record, no container header, as Flink's) → a ``Row`` named by the schema's
    fields (nested records are nested ``Row``s). Written with fastavro."""

    def __init__(self, record_class: str = None, avro_schema_string: str = None):
        self.schema = _avro_schema(record_class, avro_schema_string, "AvroRowDeserializationSchema")
        self.type_info = _avro_type_info(self.schema, self.schema["__named_schemas"])

    def parse(self, message: bytes) -> Row:
        import fastavro

        try:
            record = fastavro.schemaless_reader(io.BytesIO(message), self.schema, None)
            return _avro_to_row(record, self.schema, self.schema["__named_schemas"])
        except (EOFError, ValueError, TypeError, IndexError, UnicodeDecodeError) as exc:
            raise ParseError(f"not a record of Avro schema {self.schema.get('name')}: {type(exc).__name__}: {exc}") \
                from None


class AvroRowSerializationSchema(SerializationSchema):
    """A ``Row`` (its fields by position, as in Flink) → Avro binary, one record without container header."""

    def __init__(self, record_class: str = None, avro_schema_string: str = None):
        self.schema = _avro_schema(record_class, avro_schema_string, "AvroRowSerializationSchema")

    def serialize(self, value) -> bytes:
        import fastavro

        out = io.BytesIO()
        fastavro.schemaless_writer(out, self.schema, _row_to_avro(value, self.schema, self.schema["__named_schemas"]))
        return out.getvalue()
