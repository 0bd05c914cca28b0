"""PyFlink's ``pyflink.datastream.formats.csv``: CSV files read by a ``FileSource``
(``CsvReaderFormat.for_schema``) and written by a ``FileSink`` (``CsvBulkWriters.for_schema``), both
described by a ``CsvSchema``; and the CSV row schemas (``keyspan.common.serialization``)."""

from __future__ import annotations

import copy
import csv
import decimal
import io

from keyspan.common.java_text import jackson_decimal, java_float
from keyspan.common.serialization import (
    BulkWriterFactory, CsvRowDeserializationSchema, CsvRowSerializationSchema, ParseError, from_text,
)
from keyspan.common.typeinfo import DecimalTypeInfo, ListTypeInfo, RowDataTypeInfo, Types
from keyspan.common.types import Row
from keyspan.connectors.dead_letter import ErrorPolicy
from keyspan.connectors.file_source import StreamFormat

__all__ = ["CsvSchema", "CsvSchemaBuilder", "CsvReaderFormat", "CsvBulkWriters", "CsvRowDeserializationSchema",
           "CsvRowSerializationSchema"]


class _Column:
    def __init__(self, name: str, type_info, array_separator: str | None = None):
        self.name = name
        self.type_info = type_info
        self.array_separator = array_separator  # array columns: their own separator (None: the schema's)


class CsvSchema:
    """The columns of a CSV file (name and type, in order) and how it is written: separators, quoting,
    escaping, the null literal, a header line."""

    def __init__(self, columns: list, options: dict):
        self._columns = columns
        self._options = options

    @staticmethod
    def builder() -> "CsvSchemaBuilder":
        return CsvSchemaBuilder()

    def get_type_info(self):
        """The records' type: ``Types.ROW_NAMED`` of the columns."""
        return Types.ROW_NAMED([c.name for c in self._columns], [c.type_info for c in self._columns])

    def size(self) -> int:
        return len(self._columns)

    def __len__(self) -> int:
        return self.size()

    def __str__(self) -> str:
        columns = ", ".join(f"{c.name}: {c.type_info}" for c in self._columns)
        return f"CsvSchema([{columns}], separator {self._options['column_separator']!r})"

    __repr__ = __str__

    def _separator_of(self, column: _Column) -> str:
        return self._options["array_element_separator"] if column.array_separator is None else column.array_separator

    def _dialect(self) -> dict:
        o = self._options
        return {"delimiter": o["column_separator"], "quotechar": o["quote_char"],
                "quoting": csv.QUOTE_MINIMAL if o["quote_char"] else csv.QUOTE_NONE,
                "escapechar": o["escape_char"], "doublequote": o["escape_char"] is None}


class CsvSchemaBuilder:
    """Builds a ``CsvSchema``: columns in file order, then the dialect."""

    def __init__(self):
        self._columns: list[_Column] = []
        self._options = {"column_separator": ",", "quote_char": '"', "escape_char": None, "null_value": None,
                         "array_element_separator": ";", "line_separator": "\n", "allow_comments": False,
                         "use_header": False, "strict_headers": False, "skip_first_data_row": False}

    def build(self) -> CsvSchema:
        return CsvSchema([copy.copy(c) for c in self._columns], dict(self._options))

    def add_array_column(self, name: str, separator: str = ";", element_type=None) -> "CsvSchemaBuilder":
        """An array column: its elements joined by ``separator``, of ``element_type`` (STRING by default)."""
        self._columns.append(_Column(name, Types.LIST(element_type or Types.STRING()), separator))
        return self

    def add_boolean_column(self, name: str) -> "CsvSchemaBuilder":
        self._columns.append(_Column(name, Types.BOOLEAN()))
        return self

    def add_number_column(self, name: str, number_type=None) -> "CsvSchemaBuilder":
        """A number column of ``number_type`` (``DataTypes.INT()``, ``Types.DOUBLE()``, …; BIGINT by default)."""
        self._columns.append(_Column(name, number_type or Types.LONG()))
        return self

    def add_string_column(self, name: str) -> "CsvSchemaBuilder":
        self._columns.append(_Column(name, Types.STRING()))
        return self

    def add_columns_from(self, schema: CsvSchema) -> "CsvSchemaBuilder":
        self._columns.extend(copy.copy(c) for c in schema._columns)
        return self

    def clear_columns(self) -> "CsvSchemaBuilder":
        self._columns.clear()
        return self

    def set_allow_comments(self, allow: bool = True) -> "CsvSchemaBuilder":
        """Lines starting with ``#`` are comments, skipped when reading."""
        self._options["allow_comments"] = allow
        return self

    def set_any_property_name(self, name: str) -> "CsvSchemaBuilder":
        """Accepted, no effect: every column of a keyspan CSV schema is declared."""
        return self

    def disable_array_element_separator(self) -> "CsvSchemaBuilder":
        self._options["array_element_separator"] = ""
        return self

    def remove_array_element_separator(self, index: int) -> "CsvSchemaBuilder":
        self._columns[index].array_separator = ""
        return self

    def set_array_element_separator(self, separator: str) -> "CsvSchemaBuilder":
        self._options["array_element_separator"] = separator
        return self

    def set_column_separator(self, char: str) -> "CsvSchemaBuilder":
        self._options["column_separator"] = _single_char(char, "Column separator")
        return self

    def disable_escape_char(self) -> "CsvSchemaBuilder":
        self._options["escape_char"] = None
        return self

    def set_escape_char(self, char: str) -> "CsvSchemaBuilder":
        self._options["escape_char"] = _single_char(char, "Escape char")
        return self

    def set_line_separator(self, separator: str) -> "CsvSchemaBuilder":
        """The line separator written (reading recognizes ``\\n``, ``\\r`` and ``\\r\\n``)."""
        self._options["line_separator"] = separator
        return self

    def set_null_value(self, null_value: str) -> "CsvSchemaBuilder":
        self._options["null_value"] = null_value
        return self

    def disable_quote_char(self) -> "CsvSchemaBuilder":
        self._options["quote_char"] = None
        return self

    def set_quote_char(self, char: str) -> "CsvSchemaBuilder":
        self._options["quote_char"] = _single_char(char, "Quote char")
        return self

    def set_skip_first_data_row(self, skip: bool = True) -> "CsvSchemaBuilder":
        self._options["skip_first_data_row"] = skip
        return self

    def set_strict_headers(self, strict: bool = True) -> "CsvSchemaBuilder":
        """With a header: its column names must be the schema's, in order."""
        self._options["strict_headers"] = strict
        return self

    def set_use_header(self, use: bool = True) -> "CsvSchemaBuilder":
        """Reading: the first line is a header, not a record. Writing: each file starts with one."""
        self._options["use_header"] = use
        return self

    def size(self) -> int:
        return len(self._columns)

    def __len__(self) -> int:
        return self.size()


def _single_char(char: str, what: str) -> str:
    if not isinstance(char, str) or len(char) != 1:
        raise ValueError(f"{what} must be a single char, got {char!r}")
    return char


class CsvReaderFormat(StreamFormat):
    """Reads CSV files as ``Row``s of the schema's columns (``FileSource.for_record_stream_format``).
    A quoted field may span lines. A row that cannot be read (a wrong number of fields, a value not
    of its column's type) goes to the source's error policy, named by file and line."""

    def __init__(self, schema: CsvSchema):
        super().__init__("csv_schema", {"schema": schema})
        self.schema = schema

    @staticmethod
    def for_schema(schema: CsvSchema) -> "CsvReaderFormat":
        if not isinstance(schema, CsvSchema):
            raise TypeError(f"CsvReaderFormat.for_schema needs a CsvSchema (CsvSchema.builder()...build()), "
                            f"got {type(schema).__name__}")
        return CsvReaderFormat(schema)

    @property
    def ignores_parse_errors(self) -> bool:
        return False

    def produced_type(self):
        """As in Flink, the reader gives internal rows (``RowData``) of the schema's columns."""
        row = self.schema.get_type_info()
        return RowDataTypeInfo(row.field_types, row.field_names)

    def parse(self, data: bytes, name: str = "<bytes>", poison=None) -> list:
        if poison is None:
            poison = ErrorPolicy.fail().handler("format csv")
        schema = self.schema
        options = schema._options
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return [poison(data, name, f"not UTF-8 text: {exc}")]
        lines = text.splitlines(keepends=True)
        line_at = [0, None]  # the numbers of the last line the reader took and of its record's first line

        def numbered():
            for number, line in enumerate(lines, 1):
                if options["allow_comments"] and line.lstrip().startswith("#"):
                    continue
                line_at[0] = number
                if line_at[1] is None:
                    line_at[1] = number
                yield line

        reader = csv.reader(numbered(), strict=True, **schema._dialect())
        names = [c.name for c in schema._columns]
        out = []
        header = options["use_header"]
        skip_data_row = options["skip_first_data_row"]
        while True:
            line_at[1] = None
            try:
                fields = next(reader)
            except StopIteration:
                return out
            except csv.Error as exc:
                first_line = line_at[1] or line_at[0]
                out.append(poison(lines[first_line - 1].encode(), f"{name} line {first_line}", f"malformed CSV: {exc}"))
                continue
            first_line = line_at[1]
            fields = fields or [""]  # a blank line is a row of one empty field, as Jackson reads it
            where = f"{name} line {first_line}"
            if header:
                header = False
                if options["strict_headers"] and [f.strip() for f in fields] != names:
                    out.append(poison("\n".join(fields).encode(), where,
                                      f"the header's columns {fields} are not the schema's {names}"))
                continue
            if skip_data_row:
                skip_data_row = False
                continue
            raw = "".join(lines[first_line - 1:line_at[0]]).encode()
            if len(fields) != len(names):
                out.append(poison(raw, where, f"wrong field count: {len(names)} fields expected but the row "
                                              f"has {len(fields)}"))
                continue
            try:
                out.append(Row.from_values(tuple(names), [self._value(f, c) for f, c in zip(fields, schema._columns)]))
            except ParseError as exc:
                out.append(poison(raw, where, str(exc)))

    def _value(self, text: str, column: _Column):
        """A field as Flink's CSV format reads it: the null value (when one is set, ``""`` included)
        is None in any column; without one an empty number is an error and an empty string stays
        empty. A boolean is whether the text is ``true`` (Java's ``Boolean.parseBoolean``). An array
        is never None: an empty field is ``[]``, an element equal to the null value is None."""
        null = self.schema._options["null_value"]
        t = column.type_info
        if isinstance(t, ListTypeInfo):
            if not text:
                return []
            separator = self.schema._separator_of(column)
            return [None if e == null else _csv_scalar(e, t.element_type, column.name)
                    for e in (text.split(separator) if separator else [text])]
        return None if text == null else _csv_scalar(text, t, column.name)


def _csv_scalar(text: str, t, name: str):
    return text.strip().lower() == "true" if t.name == "BOOLEAN" else from_text(text, t, name)


class _CsvBulkWriterFactory(BulkWriterFactory):
    """A part file of CSV lines (and a header first when the schema uses one)."""

    def __init__(self, schema: CsvSchema):
        self.schema = schema

    def encode(self, records: list) -> bytes:
        schema = self.schema
        options = schema._options
        out = io.StringIO()
        writer = csv.writer(out, lineterminator=options["line_separator"], **{
            **schema._dialect(), "quotechar": options["quote_char"] or '"'})
        columns = schema._columns
        if options["use_header"]:
            writer.writerow([c.name for c in columns])
        for record in records:
            values = ([getattr(record, c.name) for c in columns] if isinstance(record, Row) and record._fields
                      else list(record))
            if len(values) != len(columns):
                raise ValueError(f"CsvBulkWriters: a record of {len(values)} fields for a schema of {len(columns)} "
                                 f"columns: {record!r}")
            writer.writerow([self._text(v, c) for v, c in zip(values, columns)])
        return out.getvalue().encode("utf-8")

    def _text(self, value, column: _Column) -> str:
        null = self.schema._options["null_value"] or ""
        t = column.type_info
        if value is not None and isinstance(t, ListTypeInfo):
            return self.schema._separator_of(column).join(self._scalar(v, t.element_type, null) for v in value)
        return self._scalar(value, t, null)

    @staticmethod
    def _scalar(value, t, null: str) -> str:
        if value is None:
            return null
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float) or t.name in ("DOUBLE", "FLOAT"):
            return java_float(float(value), single=t.name == "FLOAT")  # as Jackson writes a Java number
        if isinstance(value, decimal.Decimal):
            value = t.fitted(value) if isinstance(t, DecimalTypeInfo) else value  # Flink keeps a DECIMAL(p, s) at its scale
            return null if value is None else jackson_decimal(value)  # None: more digits than the precision
        return str(value)


class CsvBulkWriters:
    """``FileSink.for_bulk_format(path, CsvBulkWriters.for_schema(schema))``: records (``Row``s of the
    schema's columns, by name, or tuples in column order) written as CSV."""

    @staticmethod
    def for_schema(schema: CsvSchema) -> BulkWriterFactory:
        if not isinstance(schema, CsvSchema):
            raise TypeError(f"CsvBulkWriters.for_schema needs a CsvSchema, got {type(schema).__name__}")
        return _CsvBulkWriterFactory(schema)
