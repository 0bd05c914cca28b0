"""Records of a declared row type as Arrow tables: the half that the Parquet and ORC bulk writers
share. Each writer only says how a table becomes a file's bytes (``write_table``)."""

from __future__ import annotations

import io

import pyarrow as pa

from keyspan.common.serialization import RowDataBulkWriterFactory
from keyspan.common.typeinfo import ListTypeInfo, MapTypeInfo, RowTypeInfo
from keyspan.common.types import Row


def arrow_type(t, builder: str, where: str = "row type"):
    """The Arrow type of a keyspan ``TypeInformation``."""
    if isinstance(t, RowTypeInfo):
        return pa.struct([pa.field(n, arrow_type(ft, builder, f"field '{n}'"))
                          for n, ft in zip(t.field_names, t.field_types)])
    if isinstance(t, ListTypeInfo):
        return pa.list_(arrow_type(t.element_type, builder, where))
    if isinstance(t, MapTypeInfo):
        return pa.map_(arrow_type(t.key_type, builder, where), arrow_type(t.value_type, builder, where))
    if t.name == "BIG_DEC":
        return pa.decimal128(38, 18)
    if t.arrow_type is None:
        raise TypeError(f"{builder}: {where} has type {t!r}, which has no column type in the file")
    return t.arrow_type


class ArrowRowWriterFactory(RowDataBulkWriterFactory):
    """Rows of ``row_type`` (``Types.ROW_NAMED`` or ``DataTypes.ROW``) as one file per part file;
    records may be ``Row``s, dicts or tuples in the row's field order."""

    builder = "ArrowRowWriterFactory"

    def __init__(self, row_type: RowTypeInfo, utc_timestamp: bool = False):
        if not isinstance(row_type, RowTypeInfo):
            raise TypeError(f"{self.builder} needs Types.ROW_NAMED([...], [...]) or DataTypes.ROW([...]), "
                            f"got {row_type!r}")
        super().__init__(row_type)
        schema = arrow_type(row_type, self.builder)
        if utc_timestamp:
            schema = pa.struct([pa.field(f.name, pa.timestamp(f.type.unit, "UTC") if pa.types.is_timestamp(f.type)
                                         else f.type) for f in schema])
        self.schema = pa.schema(list(schema))

    def write_table(self, table: pa.Table, out) -> None:
        raise NotImplementedError

    def encode(self, records: list) -> bytes:
        return self.encode_pieces([records])

    def encode_pieces(self, pieces: list) -> bytes:
        tables = [self._table(p) for p in pieces]
        out = io.BytesIO()
        self.write_table(tables[0] if len(tables) == 1 else pa.concat_tables(tables), out)
        return out.getvalue()

    def _table(self, piece) -> pa.Table:
        names = self.row_type.field_names
        if isinstance(piece, list):
            columns = list(zip(*(_values(r, names) for r in piece))) if piece else [[] for _ in names]
            return pa.table([pa.array(list(c), f.type) for c, f in zip(columns, self.schema)], schema=self.schema)
        given = piece.schema.names
        return pa.table([_column(piece.column(f.name), f.type) if f.name in given else pa.nulls(piece.num_rows, f.type)
                         for f in self.schema], schema=self.schema)


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
