"""Prompt TCP acknowledgements on the Python worker's connection to Spark's JVM.

Spark's JVM sends a task to its Python worker in several writes over loopback TCP, and Nagle's
algorithm holds each small write until the worker acknowledges the one before. Linux delays that
acknowledgement (up to 40 ms) on a connection that looks interactive, which a worker's does: it
answers each task right after reading it. Small epochs paid that wait in every Python task.
``TCP_QUICKACK`` makes the worker acknowledge at once; Linux clears it again as the connection goes
on, so a task sets it when it starts, at each input batch and when it ends. Over Unix domain sockets
(``spark.python.unix.domain.socket.enabled``), or off Linux, there is nothing to do.
"""

from __future__ import annotations

import os
import socket
import sys

_QUICKACK = getattr(socket, "TCP_QUICKACK", None)
_WORKER_MAIN = os.path.join("pyspark", "worker.py")


class PromptAcks:
    """The current task's connection to the JVM, acknowledging what it receives at once."""

    def __init__(self):
        self.connection = _jvm_connection() if _QUICKACK is not None else None
        self.now()

    def now(self) -> None:
        if self.connection is not None:
            try:
                self.connection.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
            except OSError:  # the connection is gone: the task is ending anyway
                self.close()

    def batches(self, batches):
        """``batches`` as they come, acknowledging each one's arrival."""
        for batch in batches:
            self.now()
            yield batch

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()  # a duplicate of the worker's descriptor: the connection stays open
            self.connection = None


def acknowledging(function):
    """``function``, an Arrow map-iterator UDF, with its task's connection acknowledging at once."""

    def run(batches):
        acks = PromptAcks()
        try:
            yield from function(acks.batches(batches))
            acks.now()
        finally:
            acks.close()

    return run


def _jvm_connection() -> socket.socket | None:
    """A duplicate of the TCP socket PySpark's ``worker.main(infile, outfile)`` up the stack reads
    the task from, or None (no such frame, or not TCP)."""
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "main"
                                     and frame.f_code.co_filename.endswith(_WORKER_MAIN)):
        frame = frame.f_back
    infile = frame.f_locals.get("infile") if frame is not None else None
    try:
        descriptor = os.dup(infile.fileno())
    except (AttributeError, OSError, ValueError):
        return None
    try:
        connection = socket.socket(fileno=descriptor)
    except OSError:  # not a socket
        os.close(descriptor)
        return None
    if connection.family in (socket.AF_INET, socket.AF_INET6) and connection.type == socket.SOCK_STREAM:
        return connection
    connection.close()
    return None
