"""A record as PyFlink reads it back from Java (``execute_and_collect``).

PyFlink collects a stream of a declared type (``output_type=``, ``type_info=``) as Java objects and
converts each back by that type (``pyflink.datastream.utils.pickled_bytes_to_python_obj``): a row
comes back named by its type (``Row(f0=..., f1=...)`` for ``Types.ROW``), a tuple as a tuple, a
``FLOAT`` with single precision, arrays as lists. A stream without a declared type comes back as the
Python object itself."""

from __future__ import annotations

import math

from keyspan.common.java_text import java_float
from keyspan.common.typeinfo import ListTypeInfo, MapTypeInfo, RowTypeInfo, TupleTypeInfo
from keyspan.common.types import Row


def collected_value(value, t):
    """``value`` of type ``t`` as PyFlink's ``execute_and_collect`` returns it; a value that does not
    have its declared shape comes back as it is."""
    if t is None or value is None:
        return value
    try:
        return _converted(value, t)
    except (TypeError, ValueError):
        return value


def _converted(value, t):
    if isinstance(t, RowTypeInfo):
        fields = getattr(value, "_fields", None)
        if fields is not None and list(fields) != t.field_names:  # PyFlink writes a named row by the type's names
            value = [value[fields.index(name)] for name in t.field_names]
        elif len(value) != len(t.field_types):
            raise ValueError("a row of another arity")
        row = Row.from_values(t.field_names, map(_converted_or_none, value, t.field_types))
        kind = getattr(value, "_row_kind", None)
        if kind is not None and kind is not Row._row_kind:
            row.set_row_kind(kind)
        return row
    if isinstance(t, TupleTypeInfo):
        return tuple(map(_converted_or_none, value, t.field_types))
    if isinstance(t, ListTypeInfo):
        return [_converted_or_none(v, t.element_type) for v in value]
    if isinstance(t, MapTypeInfo):
        return {_converted_or_none(k, t.key_type): _converted_or_none(v, t.value_type) for k, v in value.items()}
    if getattr(t, "name", None) == "FLOAT" and isinstance(value, float) and math.isfinite(value):
        return float(java_float(value, single=True))  # PyFlink reads Java's Float.toString back
    return value


def _converted_or_none(value, t):
    return None if value is None else _converted(value, t)
