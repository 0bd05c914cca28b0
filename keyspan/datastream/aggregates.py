"""Aggregations keyspan knows, so it can run them columnar (docs/aggregations.md).

* ``RollingAggregation`` is what ``KeyedStream.sum/min/max/min_by/max_by`` reduce with (Flink's built-in
  streaming aggregations). Because its meaning is known, the runtime computes a whole chunk of records
  at once (grouped cumulative sums and minima) instead of calling Python once per record.
* ``Sum``, ``Count``, ``Min``, ``Max``, ``Avg``, ``First``, ``Last`` are ``AggregateFunction``s for
  ``window(...).aggregate(...)``; ``BatchAggregateFunction`` is their base and the way to write your
  own aggregate over Arrow record batches (``add_batch``).

Every one of them is an ordinary PyFlink function too (``reduce`` / ``add`` / ``merge``): the
per-record path runs them unchanged where the columnar path does not apply, and both keep the same
value in state, so checkpoints and savepoints do not depend on which path ran.
"""

from __future__ import annotations

import operator
from typing import Union

import numpy as np

from keyspan.common.types import Row, named_row_class, rows_of_arrow
from keyspan.datastream.functions import AggregateFunction, ReduceFunction

__all__ = ["RollingAggregation", "BatchAggregateFunction", "Sum", "Count", "Min", "Max", "Avg", "First", "Last",
           "field_getter", "replace_field", "segments"]

Field = Union[int, str, None]


_item = tuple.__getitem__


def field_getter(position: Field):
    """Reads field ``position`` (index or name) of a record; ``None`` reads the whole record."""
    if position is None:
        return lambda v: v
    if isinstance(position, str):
        name_of = operator.attrgetter(position)
        return lambda v: v[position] if isinstance(v, dict) else name_of(v)
    return operator.itemgetter(position)


def replace_field(value, position, new):
    """``value`` with field ``position`` set to ``new`` (the record's own type is kept)."""
    if isinstance(value, Row) and value._fields is not None:
        idx = value._fields.index(position) if isinstance(position, str) else position
        values = list(value)
        values[idx] = new
        return Row.from_values(value._fields, values)
    if isinstance(value, (tuple, list)):
        values = list(value)
        values[position] = new
        return type(value)(values) if not isinstance(value, Row) else Row(*values)
    if isinstance(value, dict):
        return {**value, position: new}
    raise TypeError(f"cannot aggregate field {position!r} of a {type(value).__name__}")


class RollingAggregation(ReduceFunction):
    """Flink's built-in streaming aggregations: ``sum``/``min``/``max`` keep the first record's other
    fields, ``min_by``/``max_by`` keep the whole winning record (the first one on ties)."""

    KINDS = ("sum", "min", "max", "min_by", "max_by")

    def __init__(self, kind: str, position: Field):
        if kind not in self.KINDS:
            raise ValueError(f"unknown aggregation {kind!r}; one of {', '.join(self.KINDS)}")
        self.kind = kind
        self.position = position
        self._get = field_getter(position)
        self._field_at: dict[type, int | None] = {}  # named Row class → the field's index (None: not one)

    def __getstate__(self):
        return {"kind": self.kind, "position": self.position}

    def __setstate__(self, state):
        self.__init__(state["kind"], state["position"])

    def _index_in(self, cls) -> int | None:
        """The field's index in records of ``cls`` when that is a named Row class holding it."""
        fields = cls._fields if issubclass(cls, Row) else None
        if fields is None or named_row_class(fields) is not cls:
            return None
        if isinstance(self.position, str):
            return fields.index(self.position) if self.position in fields else None
        return self.position if -len(fields) <= self.position < len(fields) else None

    def reduce(self, acc, value):
        kind = self.kind
        cls = type(acc)
        if cls is type(value) and kind in ("sum", "min", "max"):
            at = self._field_at.get(cls, -1)
            if at == -1:
                at = self._field_at[cls] = self._index_in(cls)
            if at is not None:  # a named Row: the common case, without the general path's checks
                a, b = _item(acc, at), _item(value, at)  # tuple's own indexing: Row's accepts names too
                values = list(acc)
                values[at] = a + b if kind == "sum" else min(a, b) if kind == "min" else max(a, b)
                return tuple.__new__(cls, values)
        if not isinstance(acc, (tuple, list, dict)):
            a, b = acc, value
        else:
            a, b = self._get(acc), self._get(value)
        if kind == "min_by":
            return value if b < a else acc
        if kind == "max_by":
            return value if b > a else acc
        new = a + b if kind == "sum" else min(a, b) if kind == "min" else max(a, b)
        return new if not isinstance(acc, (tuple, list, dict)) else replace_field(acc, self.position, new)

    __call__ = reduce


class BatchAggregateFunction(AggregateFunction):
    """An ``AggregateFunction`` that can also take many records at once.

    Override ``add_batch(accumulator, batch)`` — ``batch`` is a ``pyarrow.RecordBatch`` of one key's
    records for one window, one column per field (a ``Row``'s field names, ``f0``, ``f1``, … for
    tuples, ``f0`` for plain values) — and return the new accumulator. ``add`` (one record) is derived
    from it; ``merge`` combines two accumulators, the earlier first, and is required. The windowed
    fast path pre-aggregates each epoch's records per key and window with ``add_batch`` and merges the
    result into the window's state with ``merge``.
    """

    commutative = False  # True: the order records are added in never changes the result
    merge_keeps_arguments = False  # True: merge changes neither accumulator, so state need not copy one first

    def add_batch(self, accumulator, batch):
        raise NotImplementedError(f"{type(self).__name__} does not implement add_batch")

    def add(self, value, accumulator):
        return self.add_batch(accumulator, record_batch([value]))

    def accumulate_groups(self, records: list, group_ids, n_groups: int) -> list:
        """One accumulator per group of ``records`` (``group_ids[i]`` is record i's group, in
        0..n_groups-1; a group's records keep their order). Built-ins override this with NumPy."""
        return self.accumulate_columns(record_batch(records), group_ids, n_groups)

    def accumulate_columns(self, batch, group_ids, n_groups: int) -> list:
        """``accumulate_groups`` over records that are already a ``pyarrow.RecordBatch`` (a Spark
        source's columns): ``add_batch`` per group, unless a built-in does better."""
        order, bounds = segments(group_ids, n_groups)
        return [self.add_batch(self.create_accumulator(), batch.take(order[bounds[g]:bounds[g + 1]]))
                for g in range(n_groups)]


def record_batch(records: list):
    """Records as a ``pyarrow.RecordBatch``: a Row's field names, ``f0``… for tuples and plain values."""
    import pyarrow as pa

    first = records[0]
    if isinstance(first, Row) and first._fields is not None:
        names = list(first._fields)
    elif isinstance(first, (tuple, list)):
        names = [f"f{i}" for i in range(len(first))]
    else:
        return pa.RecordBatch.from_arrays([pa.array(records)], ["f0"])
    return pa.RecordBatch.from_arrays([pa.array(list(col)) for col in zip(*records)], names)


def _numeric_column(records: list, get):
    """The field as a NumPy array when every value is an int (in the int64 range) or every one a
    float without NaN; else None (the caller then adds record by record, as Python would)."""
    values = list(map(get, records))
    kinds = set(map(type, values))
    if kinds == {int}:
        if max(values) >= 2 ** 62 // len(values) or min(values) <= -(2 ** 62) // len(values):
            return None  # the sums might leave int64: Python's ints do not
        return np.array(values, dtype=np.int64)
    if kinds == {float}:
        arr = np.array(values, dtype=np.float64)
        return None if np.isnan(arr).any() else arr
    return None


def _arrow_numeric(column):
    """An Arrow column as ``_numeric_column`` would take its Python values: int64 (integers, sums
    cannot leave int64) or float64 (no NaN), no nulls; else None."""
    import pyarrow as pa

    if column.null_count or not len(column):
        return None
    if pa.types.is_integer(column.type) and column.type != pa.uint64():
        values = column.to_numpy().astype(np.int64)
        limit = 2 ** 62 // len(values)
        return None if values.max() >= limit or values.min() <= -limit else values
    if pa.types.is_floating(column.type):
        values = column.to_numpy().astype(np.float64)
        return None if np.isnan(values).any() else values
    return None


def segments(group_ids, n_groups: int):
    """Indices sorted by group (stable) and each group's bounds in that order."""
    order = np.argsort(group_ids, kind="stable")
    bounds = np.searchsorted(group_ids[order], np.arange(n_groups + 1))
    return order, bounds


def _identity(ufunc, dtype):
    """The value a group's reduction by ``ufunc`` starts from: 0 for a sum, the type's largest
    (smallest) value for a minimum (maximum)."""
    if ufunc is np.add:
        return 0
    floats = dtype.kind == "f"
    if ufunc is np.minimum:
        return np.inf if floats else np.iinfo(dtype).max
    return -np.inf if floats else np.iinfo(dtype).min


class _FieldAggregate(BatchAggregateFunction):
    """A built-in aggregate of one field (``field`` = index or name; ``None``: the record itself)."""

    def __init__(self, field: Field = None):
        self.field = field
        self._get = field_getter(field)

    def __getstate__(self):
        return {"field": self.field}

    def __setstate__(self, state):
        self.__init__(state["field"])

    def __repr__(self):
        return f"{type(self).__name__}({'' if self.field is None else repr(self.field)})"

    @property
    def merge_keeps_arguments(self) -> bool:
        """The built-in ``merge`` returns a new accumulator or one of its arguments, never changing
        either: state may merge into a stored accumulator without copying it for the undo log first."""
        return self._adds_as_builtin()

    def add_batch(self, accumulator, batch):
        column = batch.column(self._column_index(batch))
        for value in column.to_pylist():
            accumulator = self.add_value(value, accumulator)
        return accumulator

    def _column_index(self, batch) -> int:
        if self.field is None:
            return 0
        return batch.schema.get_field_index(self.field) if isinstance(self.field, str) else self.field

    def add(self, value, accumulator):
        return self.add_value(self._get(value), accumulator)

    def add_value(self, value, accumulator):
        raise NotImplementedError

    def accumulate_groups(self, records, group_ids, n_groups):
        fast = self._grouped(records, group_ids, n_groups) if self._adds_as_builtin() else None
        if fast is not None:
            return fast
        accs = [self.create_accumulator() for _ in range(n_groups)]  # the per-record path's arithmetic
        add, get = self.add_value, self._get
        for r, g in zip(records, group_ids.tolist()):
            accs[g] = add(get(r), accs[g])
        return accs

    def accumulate_columns(self, batch, group_ids, n_groups):
        fast = self._grouped_columns(batch, group_ids, n_groups) if self._adds_as_builtin() else None
        return fast if fast is not None else self.accumulate_groups(rows_of_arrow(batch), group_ids, n_groups)

    def _grouped(self, records, group_ids, n_groups):
        """The built-in's accumulators of every group at once, None when the field is not numeric."""
        column = _numeric_column(records, self._get) if self._ufunc is not None else None
        return None if column is None else self._reduced(column, group_ids, n_groups)

    def _grouped_columns(self, batch, group_ids, n_groups):
        """``_grouped`` of Arrow columns."""
        column = (_arrow_numeric(batch.column(self._column_index(batch)))
                  if self._ufunc is not None and self.field is not None else None)
        return None if column is None else self._reduced(column, group_ids, n_groups)

    def _reduced(self, column, group_ids, n_groups):
        """Each group's reduction, the rows taken in arrival order (``ufunc.at``: one pass, no sort;
        a float sum adds up in the per-record path's order)."""
        reduced = np.full(n_groups, _identity(self._ufunc, column.dtype), dtype=column.dtype)
        self._ufunc.at(reduced, group_ids, column)
        return self._from_reduced(reduced.tolist(), group_ids, n_groups)

    _ufunc = None

    def _from_reduced(self, reduced: list, group_ids, n_groups: int) -> list:
        return reduced

    def _adds_as_builtin(self) -> bool:
        """Whether records accumulate as in the built-in this class derives from, so that its NumPy form
        applies: a subclass that changes only ``get_result`` keeps it; one that changes how records add
        up (``add_value``, ``merge``, …) has each record added by its own method."""
        cls = type(self)
        known = _ADDS_AS_BUILTIN.get(cls)
        if known is None:
            builtin = next(c for c in cls.__mro__ if c.__module__ == __name__)
            known = _ADDS_AS_BUILTIN[cls] = all(getattr(cls, name) is getattr(builtin, name) for name in _ACCUMULATING)
        return known


_ACCUMULATING = ("create_accumulator", "add", "add_value", "add_batch", "merge", "accumulate_groups",
                 "accumulate_columns", "_grouped", "_grouped_columns", "_reduced", "_from_reduced", "_column_index")
_ADDS_AS_BUILTIN: dict[type, bool] = {}


class Sum(_FieldAggregate):
    """The sum of a numeric field."""

    commutative = True
    _ufunc = np.add

    def create_accumulator(self):
        return 0

    def add_value(self, value, accumulator):
        return accumulator + value

    def get_result(self, accumulator):
        return accumulator

    def merge(self, acc_a, acc_b):
        return acc_a + acc_b


class Count(_FieldAggregate):
    """The number of records."""

    commutative = True

    def create_accumulator(self):
        return 0

    def add_value(self, value, accumulator):
        return accumulator + 1

    def get_result(self, accumulator):
        return accumulator

    def merge(self, acc_a, acc_b):
        return acc_a + acc_b

    def _grouped(self, records, group_ids, n_groups):
        return np.bincount(group_ids, minlength=n_groups).tolist()

    def _grouped_columns(self, batch, group_ids, n_groups):
        return self._grouped(None, group_ids, n_groups)


class _Extremum(_FieldAggregate):
    commutative = True

    def create_accumulator(self):
        return None

    def get_result(self, accumulator):
        return accumulator

    def merge(self, acc_a, acc_b):
        if acc_a is None:
            return acc_b
        return acc_a if acc_b is None else self.add_value(acc_b, acc_a)


class Min(_Extremum):
    """The smallest value of a field."""

    _ufunc = np.minimum

    def add_value(self, value, accumulator):
        return value if accumulator is None else min(accumulator, value)


class Max(_Extremum):
    """The largest value of a field."""

    _ufunc = np.maximum

    def add_value(self, value, accumulator):
        return value if accumulator is None else max(accumulator, value)


class Avg(_FieldAggregate):
    """The mean of a numeric field (the accumulator is ``(sum, count)``)."""

    commutative = True
    _ufunc = np.add

    def create_accumulator(self):
        return (0, 0)

    def add_value(self, value, accumulator):
        return accumulator[0] + value, accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1] if accumulator[1] else None

    def merge(self, acc_a, acc_b):
        return acc_a[0] + acc_b[0], acc_a[1] + acc_b[1]

    def _from_reduced(self, reduced, group_ids, n_groups):
        return list(zip(reduced, np.bincount(group_ids, minlength=n_groups).tolist()))


class First(_FieldAggregate):
    """The field (or, without ``field``, the record) of the first record in arrival order."""

    def create_accumulator(self):
        return None

    def add_value(self, value, accumulator):
        return (value,) if accumulator is None else accumulator

    def get_result(self, accumulator):
        return None if accumulator is None else accumulator[0]

    def merge(self, acc_a, acc_b):
        return acc_b if acc_a is None else acc_a

    def _grouped(self, records, group_ids, n_groups):
        _, firsts = np.unique(group_ids, return_index=True)
        get = self._get
        return [(get(records[i]),) for i in firsts.tolist()]


class Last(_FieldAggregate):
    """The field (or, without ``field``, the record) of the last record in arrival order."""

    def create_accumulator(self):
        return None

    def add_value(self, value, accumulator):
        return (value,)

    def get_result(self, accumulator):
        return None if accumulator is None else accumulator[0]

    def merge(self, acc_a, acc_b):
        return acc_a if acc_b is None else acc_b

    def _grouped(self, records, group_ids, n_groups):
        _, lasts = np.unique(group_ids[::-1], return_index=True)
        get = self._get
        n = len(records)
        return [(get(records[n - 1 - i]),) for i in lasts.tolist()]
