"""Sinks whose records come back to the driver and are delivered after the epoch commits:
``print()``, ``execute_and_collect()`` and ``add_sink(SinkFunction)``."""

from __future__ import annotations

import datetime
import math
import sys
from decimal import Decimal

from keyspan.common.typeinfo import ListTypeInfo, MapTypeInfo, RowTypeInfo, TupleTypeInfo


class DriverSink:
    runs_in_task = False
    name = "Driver Sink"

    def deliver(self, records_by_subtask: dict[int, list], parallelism: int) -> None:
        raise NotImplementedError


class PrintSink(DriverSink):
    """Each record as PyFlink prints it: a stream of a declared type (``output_type``, ``type_info``)
    as Flink's Java sink shows the Java object (``+I[ann, 3]`` for a row, ``(ann,3)`` for a tuple,
    ``true`` for a boolean, ``null`` for None), any other stream as Python's ``str`` of the record."""

    name = "Print to Std. Out"

    def __init__(self, sink_identifier: str | None = None, type_info=None):
        self.sink_identifier = sink_identifier
        self.type_info = type_info

    def deliver(self, records_by_subtask, parallelism):
        out = sys.stdout
        t = self.type_info
        text = str if t is None or t.name == "PICKLED_BYTE_ARRAY" else (lambda record: _printed(record, t))
        for subtask in sorted(records_by_subtask):
            prefix = ""
            if self.sink_identifier:
                prefix = self.sink_identifier + (f":{subtask + 1}> " if parallelism > 1 else "> ")
            elif parallelism > 1:
                prefix = f"{subtask + 1}> "
            for record in records_by_subtask[subtask]:
                out.write(f"{prefix}{text(record)}\n")
        out.flush()


def _printed(record, t) -> str:
    try:
        return java_string(record, t)
    except (TypeError, ValueError):  # a record that does not have its declared shape is printed as it is
        return str(record)


def java_string(value, t) -> str:
    """``value`` of type ``t`` as the Java object Flink converts it to prints itself (``toString``)."""
    if value is None:
        return "null"
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
        return _java_float(float(value), single=name == "FLOAT")
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


def _java_float(x: float, single: bool) -> str:
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


class CollectSink(DriverSink):
    name = "Collect Sink"

    def __init__(self):
        self._results: list = []

    def deliver(self, records_by_subtask, parallelism):
        for subtask in sorted(records_by_subtask):
            self._results.extend(records_by_subtask[subtask])

    def results(self) -> list:
        return list(self._results)


class FunctionSink(DriverSink):
    def __init__(self, sink_function):
        self.sink_function = sink_function
        self.name = type(sink_function).__name__
        self._opened = False

    def deliver(self, records_by_subtask, parallelism):
        fn = self.sink_function
        if not self._opened:
            fn.open(None)
            self._opened = True
        for subtask in sorted(records_by_subtask):
            for record in records_by_subtask[subtask]:
                fn.invoke(record, None)


class CloseableIterator:
    """What PyFlink's ``execute_and_collect()`` returns: iterate it, or use it as a context manager."""

    def __init__(self, results: list):
        self._it = iter(results)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    next = __next__  # PyFlink's spelling of next(iterator): StopIteration at the end

    def close(self) -> None:
        self._it = iter(())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
