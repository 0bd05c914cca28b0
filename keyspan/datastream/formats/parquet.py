"""PyFlink's ``pyflink.datastream.formats.parquet``: ``ParquetBulkWriters.for_row_type`` for
``FileSink.for_bulk_format``, written with pyarrow (one Parquet file per part file), and
``ParquetColumnarRowInputFormat`` for ``FileSource.for_bulk_file_format``, read with pyarrow."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from keyspan.common.typeinfo import ListTypeInfo, MapTypeInfo, RowTypeInfo
from keyspan.common.types import Row, named_row_class
from keyspan.connectors.dead_letter import ErrorPolicy
from keyspan.connectors.file_sink import BulkWriterFactory
from keyspan.connectors.file_source import BulkFormat

__all__ = ["ParquetBulkWriters", "ParquetColumnarRowInputFormat"]


def arrow_type(t, where: str = "row type"):
    """The Arrow type of a keyspan ``TypeInformation``."""
    if isinstance(t, RowTypeInfo):
        return pa.struct([pa.field(n, arrow_type(ft, f"field '{n}'")) for n, ft in zip(t.field_names, t.field_types)])
    if isinstance(t, ListTypeInfo):
        return pa.list_(arrow_type(t.element_type, where))
    if isinstance(t, MapTypeInfo):
        return pa.map_(arrow_type(t.key_type, where), arrow_type(t.value_type, where))
    if t.name == "BIG_DEC":
        return pa.decimal128(38, 18)
    if t.arrow_type is None:
        raise TypeError(f"ParquetBulkWriters: {where} has type {t!r}, which has no Parquet column type")
    return t.arrow_type


class _ParquetRowWriterFactory(BulkWriterFactory):
    def __init__(self, row_type: RowTypeInfo, utc_timestamp: bool):
        if not isinstance(row_type, RowTypeInfo):
            raise TypeError(f"ParquetBulkWriters.for_row_type needs Types.ROW_NAMED([...], [...]), got {row_type!r}")
        self.row_type = row_type
        schema = arrow_type(row_type)
        if utc_timestamp:
            schema = pa.struct([pa.field(f.name, pa.timestamp(f.type.unit, "UTC") if pa.types.is_timestamp(f.type)
                                         else f.type) for f in schema])
        self.schema = pa.schema(list(schema))

    def encode(self, records: list) -> bytes:
        return self.encode_pieces([records])

    def encode_pieces(self, pieces: list) -> bytes:
        tables = [self._table(p) for p in pieces]
        out = io.BytesIO()
        pq.write_table(tables[0] if len(tables) == 1 else pa.concat_tables(tables), out)
        return out.getvalue()

    def _table(self, piece) -> pa.Table:
        names = self.row_type.field_names
        if isinstance(piece, list):
            columns = list(zip(*(_values(r, names) for r in piece))) if piece else [[] for _ in names]
            return pa.table([pa.array(list(c), f.type) for c, f in zip(columns, self.schema)], schema=self.schema)
        given = piece.schema.names
        return pa.table([_column(piece.column(f.name), f.type) if f.name in given else pa.nulls(piece.num_rows, f.type)
                         for f in self.schema], schema=self.schema)

    def get_row_type(self) -> RowTypeInfo:
        return self.row_type


def _column(column: pa.Array, type_: pa.DataType) -> pa.Array:
    """An Arrow column as the row type's column: the values records of it would give."""
    if column.type == type_:
        return column
    numbers = (pa.types.is_integer, pa.types.is_floating)
    if any(t(column.type) for t in numbers) and any(t(type_) for t in numbers):
        try:
            return column.cast(type_)  # as Python numbers would convert, or it raises: then through Python
        except pa.ArrowException:
            pass
    return pa.array(column.to_pylist(), type_)


def _values(record, names) -> tuple:
    if isinstance(record, Row) and record._fields is not None:
        d = record.as_dict()
        return tuple(d.get(n) for n in names)
    if isinstance(record, dict):
        return tuple(record.get(n) for n in names)
    return tuple(record)


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
        try:
            table = pq.read_table(io.BytesIO(data))
        except (pa.ArrowException, OSError) as exc:
            return [poison(data, name, f"not a readable Parquet file: {exc}")]
        columns = {c if self.is_case_sensitive else c.lower(): c for c in table.column_names}
        names = tuple(self.row_type.field_names)
        values = []
        for field in names:
            column = columns.get(field if self.is_case_sensitive else field.lower())
            values.append(table.column(column).to_pylist() if column is not None else [None] * table.num_rows)
        cls, new = named_row_class(names), tuple.__new__
        return [new(cls, row) for row in zip(*values)]
