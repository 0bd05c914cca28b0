"""A record as PyFlink reads it back from Java (``execute_and_collect``, and ``print()`` of rows).

PyFlink collects a stream of a declared type (``output_type=``, ``type_info=``) as Java objects and
converts each back by that type (``pyflink.datastream.utils.pickled_bytes_to_python_obj``): a row
comes back named by its type (``Row(f0=..., f1=...)`` for ``Types.ROW``), a tuple as a tuple, a
``FLOAT`` with single precision, a ``SQL_TIME`` in whole seconds, arrays as lists (a
``PRIMITIVE_ARRAY(BYTE)``'s bytes as Java's signed bytes). A stream without a declared type comes
back as the Python object itself. Its Python functions receive a ``SQL_TIME`` or ``SQL_TIMESTAMP``
in whole milliseconds, the precision of the types' serializers.

PyFlink's ``print()`` turns a stream of rows into text in Python, from the values its Python
functions receive: the same, except that a ``FLOAT`` is the full double of the single-precision
number and bytes stay bytes."""

from __future__ import annotations

import datetime
import math
from functools import partial

from keyspan.common.java_text import java_float, single_precision
from keyspan.common.typeinfo import ListTypeInfo, MapTypeInfo, RowTypeInfo, TupleTypeInfo
from keyspan.common.types import Row


def collected_value(value, t):
    """``value`` of type ``t`` as PyFlink's ``execute_and_collect`` returns it; a value that does not
    have its declared shape comes back as it is."""
    return value if t is None else _as_declared(value, t, received=False)


def _as_declared(value, t, received: bool):
    if value is None:
        return value
    try:
        return _converted(value, t, received)
    except (TypeError, ValueError):
        return value


def printed_row(row, t: RowTypeInfo, as_returned: bool = False) -> str:
    """A record of a stream of rows as PyFlink's ``print()`` writes it (``+I[ann,3,True,None]``): the
    row as its type's serializer gives it back, or ``as_returned`` by the function before the print
    (``PrintSink.with_rows_as_returned``); a record that is not a row of ``t``'s shape is written as
    Python's ``str``."""
    if not (as_returned and isinstance(row, Row)):
        try:
            row = _converted(row, t, received=True)
        except (TypeError, ValueError):
            return str(row)
    return f"{row.get_row_kind()}[{','.join(map(str, row))}]"


def _float_as_collected(value: float) -> float:
    """PyFlink reads Java's ``Float.toString`` back."""
    return float(java_float(value, single=True)) if math.isfinite(value) else value


def received_form(t):
    """A function giving a value of declared type ``t`` as PyFlink's Python functions receive it once
    it crossed an exchange (serialized by its type: a row named by the type, a ``FLOAT`` in single
    precision); None where the type changes nothing. A value without the declared shape passes as it is."""
    return partial(_as_declared, t=t, received=True) if _reshapes(t) else None


def received_key_form(t):
    """``received_form`` for a keyed operator's key of key_by's ``key_type``. A list key reaches
    state as a tuple (a list cannot key a dict), so a key of a list type is handed back as a list."""
    return partial(_as_declared, t=t, received=True) if _reshapes(t, lists=True) else None


def _reshapes(t, lists: bool = False) -> bool:
    """Whether a value of type ``t`` comes back in another form; ``lists``: a list counts (a key's
    list was kept as a tuple)."""
    if isinstance(t, RowTypeInfo):
        return True
    if isinstance(t, TupleTypeInfo):
        return any(_reshapes(f, lists) for f in t.field_types)
    if isinstance(t, ListTypeInfo):
        return lists or _reshapes(t.element_type, lists)
    if isinstance(t, MapTypeInfo):
        return _reshapes(t.key_type, lists) or _reshapes(t.value_type, lists)
    return getattr(t, "name", None) in _RESHAPED_BASIC


_RESHAPED_BASIC = ("FLOAT", "SQL_TIME", "SQL_TIMESTAMP")


def _in_millis(value):
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def _converted(value, t, received: bool):
    """``value`` as PyFlink's Python functions receive it (``received``) or as it collects it."""
    if isinstance(t, RowTypeInfo):
        if not isinstance(value, (tuple, list)):
            raise TypeError("not a row")
        fields = getattr(value, "_fields", None)
        if fields is not None and list(fields) != t.field_names:  # PyFlink writes a named row by the type's names
            value = [value[fields.index(name)] for name in t.field_names]
        elif len(value) != len(t.field_types):
            raise ValueError("a row of another arity")
        row = Row.from_values(t.field_names, [_converted_or_none(v, ft, received) for v, ft in zip(value, t.field_types)])
        kind = getattr(value, "_row_kind", None)
        if kind is not None and kind is not Row._row_kind:
            row.set_row_kind(kind)
        return row
    if isinstance(t, TupleTypeInfo):
        return tuple(_converted_or_none(v, ft, received) for v, ft in zip(value, t.field_types, strict=True))
    if isinstance(value, (bytes, bytearray)) and isinstance(t, ListTypeInfo):
        return value if received else [b - 256 if b > 127 else b for b in value]  # Java's bytes are signed
    if isinstance(t, ListTypeInfo):
        return [_converted_or_none(v, t.element_type, received) for v in value]
    if isinstance(t, MapTypeInfo):
        return {_converted_or_none(k, t.key_type, received): _converted_or_none(v, t.value_type, received)
                for k, v in value.items()}
    if getattr(t, "name", None) == "FLOAT" and isinstance(value, float):
        return single_precision(value) if received else _float_as_collected(value)
    name = getattr(t, "name", None)
    if name == "SQL_TIME" and isinstance(value, datetime.time):
        return _in_millis(value) if received else value.replace(microsecond=0)
    if name == "SQL_TIMESTAMP" and isinstance(value, datetime.datetime):
        return _in_millis(value)
    return value


def _converted_or_none(value, t, received):
    return None if value is None else _converted(value, t, received)
