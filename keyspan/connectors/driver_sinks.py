"""Sinks whose records come back to the driver and are delivered after the epoch commits:
``print()``, ``execute_and_collect()`` and ``add_sink(SinkFunction)``."""

from __future__ import annotations

import sys
from functools import partial

from keyspan.common.java_text import text_of
from keyspan.common.java_values import collected_value, printed_row
from keyspan.common.typeinfo import RowDataTypeInfo, RowTypeInfo


class DriverSink:
    runs_in_task = False
    name = "Driver Sink"

    def deliver(self, records_by_subtask: dict[int, list], parallelism: int) -> None:
        raise NotImplementedError


class PrintSink(DriverSink):
    """Each record as PyFlink prints it: a stream of rows as PyFlink's Python text of each row
    (``+I[ann,3,True,None]``), a stream of another declared type (``output_type``, ``type_info``) as
    Flink's Java sink shows the Java object (``(ann,3)`` for a tuple, ``true`` for a boolean), any
    other stream as Python's ``str`` of the record."""

    name = "Print to Std. Out"

    def __init__(self, sink_identifier: str | None = None, type_info=None):
        self.sink_identifier = sink_identifier
        self.type_info = type_info
        self.rows_as_returned = False

    def for_input_type(self, type_info) -> "PrintSink":
        return PrintSink(self.sink_identifier, type_info)

    def with_rows_as_returned(self) -> "PrintSink":
        """This sink printing each row as the function before it returned it: PyFlink turns rows into
        text in a Python map that it fuses with the operator before it when it can, and the row then
        skips the declared type's serializer (a ``FLOAT`` keeps its double value, a nested row its own repr)."""
        sink = PrintSink(self.sink_identifier, self.type_info)
        sink.rows_as_returned = True
        return sink

    def deliver(self, records_by_subtask, parallelism):
        out = sys.stdout
        t = self.type_info
        rows = isinstance(t, RowTypeInfo) and not isinstance(t, RowDataTypeInfo)  # RowData prints as Java's
        text = partial(printed_row, t=t, as_returned=self.rows_as_returned) if rows else text_of(t)
        for subtask in sorted(records_by_subtask):
            prefix = ""
            if self.sink_identifier:
                prefix = self.sink_identifier + (f":{subtask + 1}> " if parallelism > 1 else "> ")
            elif parallelism > 1:
                prefix = f"{subtask + 1}> "
            for record in records_by_subtask[subtask]:
                out.write(f"{prefix}{text(record)}\n")
        out.flush()


class CollectSink(DriverSink):
    """What ``execute_and_collect`` returns: each record of a stream of a declared type as PyFlink
    reads it back from Java (``keyspan.common.java_values``), any other as it is."""

    name = "Collect Sink"

    def __init__(self, type_info=None):
        self._results: list = []
        self.type_info = type_info

    def deliver(self, records_by_subtask, parallelism):
        t = self.type_info
        for subtask in sorted(records_by_subtask):
            records = records_by_subtask[subtask]
            self._results.extend(records if t is None else (collected_value(r, t) for r in records))

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
