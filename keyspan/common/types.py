"""``Row``: PyFlink's record type for rows, a tuple with optional field names, and its ``RowKind``."""

from __future__ import annotations

from enum import Enum
from functools import partial

try:  # the C accessor namedtuple uses: reads the tuple slot without calling __getitem__
    from _collections import _tuplegetter
except ImportError:  # pragma: no cover - other Python implementations
    def _tuplegetter(index, doc):
        return property(lambda self: tuple.__getitem__(self, index), doc=doc)


class RowKind(Enum):
    """The change a row stands for (PyFlink's ``RowKind``)."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def __str__(self):
        return ("+I", "-U", "+U", "-D")[self.value]


_KIND_SET = [False]  # whether a row of this process was given a kind: only then do chunks look for kinds


class Row(tuple):
    """``Row(1, 'a')`` or ``Row(id=1, name='a')``; fields by position and, when named, by name. A row's
    kind travels with it between operators; as for a tuple, it is not part of equality."""

    _fields: tuple[str, ...] | None = None
    _row_kind = RowKind.INSERT  # a row given another kind holds its own

    def __new__(cls, *args, **kwargs):
        if args and kwargs:
            raise ValueError("Row takes positional or keyword values, not both")
        if kwargs:
            row = tuple.__new__(named_row_class(tuple(kwargs)), kwargs.values())
            return row
        return tuple.__new__(cls, args)

    @classmethod
    def from_values(cls, fields, values):
        return tuple.__new__(named_row_class(tuple(fields)), values)

    def as_dict(self, recursive: bool = False) -> dict:
        if self._fields is None:
            raise TypeError("cannot convert a Row without field names to a dict")
        if not recursive:
            return dict(zip(self._fields, self))
        return {k: (v.as_dict(True) if isinstance(v, Row) and v._fields else v) for k, v in zip(self._fields, self)}

    def get_fields_by_names(self, names):
        d = self.as_dict()
        return [d[n] for n in names]

    def set_field_names(self, field_names) -> None:
        """Names this row's fields (the row becomes a Row of the named class of ``field_names``)."""
        if len(field_names) != len(self):
            raise ValueError(f"{len(field_names)} field names for a row of {len(self)} fields")
        self.__class__ = named_row_class(tuple(field_names))

    @staticmethod
    def of_kind(row_kind: RowKind, *args, **kwargs) -> "Row":
        row = Row(*args, **kwargs)
        row.set_row_kind(row_kind)
        return row

    def __contains__(self, item):
        """A named row holds its field names, an unnamed one its values (as in PyFlink)."""
        fields = self._fields
        return item in fields if fields is not None else tuple.__contains__(self, item)

    def __call__(self, *values) -> "Row":
        """``Person = Row("name", "age")`` then ``Person("Alice", 11)``: a row named by this row's values."""
        if len(values) > len(self):
            raise ValueError(f"cannot create a Row with fields {self!r}: expected {len(self)} values, got {values!r}")
        row = Row.from_values(tuple(self)[:len(values)], values)
        if self._row_kind is not RowKind.INSERT:
            row.set_row_kind(self._row_kind)
        return row

    def get_row_kind(self) -> RowKind:
        return self._row_kind

    def set_row_kind(self, row_kind: RowKind) -> None:
        if not isinstance(row_kind, RowKind):
            raise TypeError(f"a row kind is a RowKind (INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE), got {row_kind!r}")
        _KIND_SET[0] = True
        self._row_kind = row_kind

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        fields = type(self)._fields
        if fields is not None and item in fields:
            return self[fields.index(item)]
        raise AttributeError(f"Row has no field {item!r}")

    def __getitem__(self, item):
        if type(item) is int:
            return tuple.__getitem__(self, item)
        if isinstance(item, str):
            fields = type(self)._fields
            if fields is None or item not in fields:
                raise KeyError(item)
            return tuple.__getitem__(self, fields.index(item))
        return tuple.__getitem__(self, item)

    def __reduce__(self):
        if self._row_kind is not RowKind.INSERT:
            return (_row_of_kind, (self._fields, tuple(self), self._row_kind))
        if self._fields is not None:
            return (Row.from_values, (self._fields, tuple(self)))
        return (Row, tuple(self))

    def __repr__(self):
        if self._fields is not None:
            return "Row(" + ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self)) + ")"
        return "<Row(" + ", ".join(repr(v) for v in self) + ")>"  # PyFlink's form for a row without names


def _row_of_kind(fields, values, kind: RowKind) -> Row:
    row = Row(*values) if fields is None else Row.from_values(fields, values)
    row.set_row_kind(kind)
    return row


_ROW_CLASSES: dict[tuple[str, ...], type] = {}


def named_row_class(fields: tuple[str, ...]) -> type:
    """A Row subclass per field list, with fast attribute access by position."""
    cls = _ROW_CLASSES.get(fields)
    if cls is None:
        namespace = {"_fields": fields, "__slots__": ()}
        for i, name in enumerate(fields):
            if name.isidentifier() and not hasattr(tuple, name) and not name.startswith("_"):
                namespace[name] = _tuplegetter(i, name)
        cls = type("Row", (Row,), namespace)
        _ROW_CLASSES[fields] = cls
    return cls


def packed_rows(records: list):
    """A chunk of records as it is best pickled: when all are Rows of one named class (with all their
    fields), that class's field names and one list per field, so pickle runs at C speed over flat
    lists instead of calling ``Row.__reduce__`` once per record (and makes no tuple per record);
    unpickling gives the list of Rows back. Any other chunk, or one with a row of another kind than
    INSERT, is returned as it is."""
    if records:
        cls = type(records[0])
        if (issubclass(cls, Row) and cls._fields and set(map(type, records)) == {cls}
                and set(map(len, records)) == {len(cls._fields)}
                and not (_KIND_SET[0] and any(r._row_kind is not RowKind.INSERT for r in records))):
            return _Unpickled(rows_from_columns, (cls._fields, list(map(list, zip(*records)))))
    return records


class _Unpickled:
    """What pickles as the result of ``function(*args)``."""

    __slots__ = ("function", "args")

    def __init__(self, function, args: tuple):
        self.function = function
        self.args = args

    def __reduce__(self):
        return self.function, self.args


def rows_from_columns(fields: tuple[str, ...], columns) -> list:
    """Rows of the named class of ``fields``, one per position of the (equally long) ``columns``."""
    return list(map(partial(tuple.__new__, named_row_class(fields)), zip(*columns)))


def packed_values(mapping: dict):
    """A dict whose values are Rows of one named class, as it is best pickled: its keys in one list
    and its values as ``packed_rows``, so pickling runs at C speed (no ``Row.__reduce__`` per value)
    and stores each field name once; it unpickles to an equal dict, in the same order. Any other dict
    is returned as it is."""
    if len(mapping) > 1 and isinstance(next(iter(mapping.values())), Row):  # no copy of other states' values
        values = packed_rows(list(mapping.values()))
        if values.__class__ is _Unpickled:
            return _Unpickled(rows_by_key, (list(mapping), values))
    return mapping


def rows_by_key(keys: list, rows: list) -> dict:
    return dict(zip(keys, rows))


def rows_of_arrow(data) -> list:
    """A ``pyarrow`` table's or record batch's rows, as Rows of the named class of its column names."""
    return rows_from_columns(tuple(data.column_names), [c.to_pylist() for c in data.columns])
