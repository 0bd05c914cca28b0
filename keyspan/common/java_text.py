"""A record as the Java object Flink converts it to prints itself (``toString``).

PyFlink hands a stream of a declared type (``output_type=``, ``type_info=``) to Java sinks as Java
objects, so a ``FileSink`` with ``Encoder.simple_string_encoder()`` writes a row as ``+I[ann, 3]``,
and it and ``print()`` write a tuple as ``(ann,3)``, a boolean as ``true``; a stream without a
declared type reaches them as Python's ``str`` of the record. (``print()`` turns rows into text in
Python: ``keyspan.common.java_values.printed_row``.)"""

from __future__ import annotations

import datetime
import math
import struct
from decimal import Context, Decimal
from functools import partial

from keyspan.common.typeinfo import ListTypeInfo, MapTypeInfo, RowDataTypeInfo, RowTypeInfo, TupleTypeInfo


def text_of(type_info):
    """The function that writes a record of a stream of ``type_info`` as text."""
    if type_info is None or type_info.name == "PICKLED_BYTE_ARRAY":
        return str
    return partial(_declared, t=type_info)  # a sink's encoder travels to its tasks pickled


def _declared(record, t) -> str:
    try:
        return java_string(record, t)
    except (TypeError, ValueError):  # a record that does not have its declared shape is written as it is
        return str(record)


def java_string(value, t) -> str:
    """``value`` of type ``t`` as the Java object Flink converts it to prints itself (``toString``)."""
    if value is None:
        return "null"
    if isinstance(t, RowDataTypeInfo):
        kind = getattr(value, "_row_kind", None)
        return f"{kind or '+I'}(" + ",".join(map(java_string, value, t.field_types)) + ")"
    if isinstance(t, RowTypeInfo):
        kind = getattr(value, "_row_kind", None)
        return f"{kind or '+I'}[" + ", ".join(map(java_string, value, t.field_types)) + "]"
    if isinstance(t, TupleTypeInfo):
        return "(" + ",".join(map(java_string, value, t.field_types)) + ")"
    if isinstance(t, ListTypeInfo):
        return "[" + ", ".join(java_string(v, t.element_type) for v in value) + "]"
    if isinstance(t, MapTypeInfo):
        return "{" + ", ".join(f"{java_string(k, t.key_type)}={java_string(v, t.value_type)}"
                               for k, v in value.items()) + "}"
    name = getattr(t, "name", None)
    if name == "BOOLEAN":
        return "true" if value else "false"
    if name in ("DOUBLE", "FLOAT") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return java_float(float(value), single=name == "FLOAT")
    if name == "SQL_TIMESTAMP" and isinstance(value, datetime.datetime):
        fraction = f"{value.microsecond:06d}".rstrip("0") or "0"  # java.sql.Timestamp: at least one digit
        return value.strftime("%Y-%m-%d %H:%M:%S.") + fraction
    if name == "SQL_TIME" and isinstance(value, datetime.time):
        return value.strftime("%H:%M:%S")  # java.sql.Time: whole seconds
    if name == "INSTANT" and hasattr(value, "nanos"):  # java.time.Instant: ISO-8601 in UTC, fraction in 3-digit groups
        stamp = datetime.datetime.fromtimestamp(value.seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        digits = next(n for n in (3, 6, 9) if value.nanos % 10 ** (9 - n) == 0)
        return stamp + (f".{value.nanos:09d}"[:digits + 1] if value.nanos else "") + "Z"
    return str(value)


def single_precision(value: float) -> float:
    """A Java ``float`` widened to a double: what a Python function gets for a ``FLOAT`` value."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:  # beyond a float's range, as Java's cast gives
        return math.copysign(math.inf, value)


def jackson_decimal(value: Decimal) -> str:
    """A ``BigDecimal`` as Flink's Jackson writes it: trailing zeros stripped (1.50 as 1.5, 100 as 1E+2)."""
    return "0" if value.is_zero() else str(value.normalize(Context(prec=max(1, len(value.as_tuple().digits)))))


def java_float(x: float, single: bool) -> str:
    """Java's ``Double.toString`` (``Float.toString`` when ``single``): the shortest digits that read
    back as the same number, plain from 10^-3 to 10^7, otherwise as ``d.dddE±n``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1, x) < 0 else "0.0"
    if single:
        import numpy as np

        shortest = np.format_float_positional(np.float32(x), unique=True, trim="0")
    else:
        shortest = repr(x)
    sign, digits, exponent = Decimal(shortest).normalize().as_tuple()
    text = "".join(map(str, digits))
    magnitude = exponent + len(text) - 1  # the power of ten of the first digit
    minus = "-" if sign else ""
    if -3 <= magnitude < 7:
        if magnitude < 0:
            return f"{minus}0.{'0' * (-magnitude - 1)}{text}"
        whole, fraction = text[:magnitude + 1].ljust(magnitude + 1, "0"), text[magnitude + 1:]
        return f"{minus}{whole}.{fraction or '0'}"
    return f"{minus}{text[0]}.{text[1:] or '0'}E{magnitude}"
