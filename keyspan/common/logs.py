"""The ``keyspan`` logger hierarchy: ``keyspan.runtime``, ``keyspan.rest``, … all below ``keyspan``,
one level for all (``--log-level`` / ``KEYSPAN_LOG_LEVEL``), Spark's log level following it."""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback

# Spark's WARN level is already chatty for a streaming job (e.g. every slow micro-batch), and its ERROR
# lines repeat a failing task's whole Java and Python trace, which keyspan reports itself in a few lines
# (the trace goes to a log file): keyspan's default INFO keeps Spark at FATAL, WARNING shows Spark's
# errors, DEBUG its warnings.
_SPARK_LEVELS = {"DEBUG": "WARN", "INFO": "FATAL", "WARNING": "ERROR", "ERROR": "ERROR", "CRITICAL": "FATAL"}


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(name if name.startswith("keyspan") else f"keyspan.{name}")


def configure(level: str | None = None) -> str:
    """Set the level of the ``keyspan`` loggers (a plain stderr handler unless one exists); returns the
    level Spark should use."""
    from keyspan.common.settings import load

    name = (level or load().log_level).upper()
    if name not in _SPARK_LEVELS:
        raise ValueError(f"log level '{level}' is not one of {', '.join(_SPARK_LEVELS)}")
    root = logging.getLogger("keyspan")
    root.setLevel(name)
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("keyspan: %(message)s"))
        root.addHandler(handler)
        root.propagate = False
    return _SPARK_LEVELS[name]


def quiet_java_bridge() -> None:
    """Mute the INFO lines of PySpark's Java bridge (py4j: "Callback Server Starting", "Received command
    c on object id p0"), as PyFlink mutes its own gateway's: a job that logs at INFO to stdout, as
    Flink's examples do, would print them among its results. A level set on ``py4j`` stays. py4j's
    trace of an error raised through it (a failed epoch) is dropped: keyspan reports that error itself,
    in a few lines, with the trace in its log file."""
    bridge = logging.getLogger("py4j")
    if bridge.level == logging.NOTSET:
        bridge.setLevel(logging.WARNING)
    for name in ("py4j.clientserver", "py4j.java_gateway"):
        logger = logging.getLogger(name)
        if _not_raised_through_bridge not in logger.filters:
            logger.addFilter(_not_raised_through_bridge)
    # py4j reports a JVM that stopped answering on the root logger, with a trace; the call then fails
    # and keyspan reports that (the trace goes to its log file)
    if _not_a_lost_jvm_report not in logging.getLogger().filters:
        logging.getLogger().addFilter(_not_a_lost_jvm_report)


def _not_a_lost_jvm_report(record: logging.LogRecord) -> bool:
    return not ("py4j" in record.pathname and str(record.msg).startswith("Exception while sending command"))


def _not_raised_through_bridge(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("There was an exception while executing the Python Proxy")


def spark_level() -> str:
    """Spark's log level for the configured keyspan level."""
    level = logging.getLevelName(logging.getLogger("keyspan").getEffectiveLevel())
    return _SPARK_LEVELS.get(level, "FATAL") if logging.getLogger("keyspan").handlers else "FATAL"


def write_failure_log(workdir: str, job: str, exc: BaseException) -> str:
    """Write the full trace of a failure (Spark's Java and Python traces included) to
    ``<workdir>/logs/<job>-<time>.log`` and return the path: the terminal gets a few lines only."""
    folder = os.path.join(os.path.abspath(workdir), "logs")
    os.makedirs(folder, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in job) or "keyspan"
    path = os.path.join(folder, f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log")
    with open(path, "a") as f:
        f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        for note in getattr(exc, "__notes__", ()):
            f.write(f"{note}\n")
    return path
