"""What a source does with a record it cannot read (a poison record): the one mechanism every
source and format parser calls, with the raw bytes, where they came from and why they failed.

``ErrorPolicy.fail()`` (the default) stops the job with a short message naming the source, the
origin (file and line, or partition and offset), the reason and the first 200 bytes of the record;
``ErrorPolicy.skip()`` drops the record and counts it; ``ErrorPolicy.dead_letter(tag)`` also routes
it to the side output ``tag``, which the job reads with ``source_stream.get_side_output(tag)`` and
can write anywhere (e.g. a ``FileSink``: exactly-once like any other output).

A source keeps its policy in an ``error_policy`` attribute (the planner looks for it) and makes a
handler on the driver, ``poison = policy.handler(source_name)``; its reader (in a Spark task) writes::

    try:
        record = schema.parse(raw)                       # ParseError on a bad message
    except ParseError as exc:
        record = poison(raw, f"partition {p} offset {o}", str(exc))  # raises, or returns a DeadLetter
    records.append(record)

and the source's operator counts the ``DeadLetter`` items among its records and routes them."""

from __future__ import annotations

from keyspan.common.types import Row

PREVIEW_BYTES = 200
_FIELDS = ("source", "origin", "reason", "raw")


class PoisonRecordError(ValueError):
    """A source met a record it cannot read under the fail policy; the message is short and complete."""

    MARKER = "keyspan.PoisonRecordError: "


class DeadLetter:
    """A poison record travelling among a source's records until its operator routes it; ``row`` is
    what the dead-letter side output receives: ``Row(source, origin, reason, raw)`` (raw as bytes)."""

    __slots__ = ("row",)

    def __init__(self, source: str, origin: str, reason: str, raw: bytes):
        self.row = Row.from_values(_FIELDS, (source, origin, reason, raw))


class ErrorPolicy:
    """How a source treats records it cannot read: ``fail`` (default), ``skip`` or ``dead_letter(tag)``."""

    def __init__(self, mode: str, tag=None):
        self.mode = mode
        self.tag = tag

    @staticmethod
    def fail() -> "ErrorPolicy":
        return ErrorPolicy("fail")

    @staticmethod
    def skip() -> "ErrorPolicy":
        """Drop poison records (counted in the source's ``numRecordsInErrors`` metric), as PyFlink's
        ``ignore_parse_errors()`` does."""
        return ErrorPolicy("skip")

    @staticmethod
    def dead_letter(output_tag) -> "ErrorPolicy":
        """Drop poison records from the stream and send each, as ``Row(source, origin, reason, raw)``,
        to the side output ``output_tag`` of the source's stream."""
        if not getattr(output_tag, "tag_id", None):
            raise TypeError(f"ErrorPolicy.dead_letter needs an OutputTag, got {output_tag!r}")
        return ErrorPolicy("dead_letter", output_tag)

    @property
    def fails(self) -> bool:
        return self.mode == "fail"

    def key_selector(self, selector) -> "GuardedKeySelector":
        """``key_by(ErrorPolicy.skip().key_selector(fn))``: records whose key ``fn`` cannot extract, or
        whose key cannot be hashed, are dropped and counted (``numKeyErrors`` of the operator before
        the key_by) instead of failing the job."""
        if self.mode == "dead_letter":
            raise ValueError("a key selector's errors can fail or skip; to keep such records, send them "
                             "to a side output in a process function before key_by")
        return GuardedKeySelector(selector, self)

    def handler(self, source_name: str) -> "PoisonHandler":
        return PoisonHandler(self, source_name)

    def __repr__(self):
        return f"ErrorPolicy.{self.mode}({self.tag!r})" if self.tag else f"ErrorPolicy.{self.mode}()"


def preview(raw) -> str:
    """The first 200 bytes of a record, printable."""
    data = raw if isinstance(raw, bytes) else str(raw).encode("utf-8", "replace")
    text = repr(data[:PREVIEW_BYTES])
    return text + (f"… ({len(data)} bytes)" if len(data) > PREVIEW_BYTES else "")


class PoisonHandler:
    """``handler(raw, origin, reason)``: raises ``PoisonRecordError`` under the fail policy (the driver
    prints its message and writes the full trace to a log file under the workdir), else returns the
    record's ``DeadLetter``."""

    def __init__(self, policy: ErrorPolicy, source_name: str):
        self.policy = policy
        self.source_name = source_name

    def __call__(self, raw, origin: str, reason: str) -> DeadLetter:
        raw = raw if isinstance(raw, bytes) else str(raw).encode("utf-8", "replace")
        if self.policy.fails:
            raise PoisonRecordError(
                f"{PoisonRecordError.MARKER}source '{self.source_name}' cannot read the record at {origin}: "
                f"{reason}; record: {preview(raw)}. Fix or remove the record, or set an error policy on the "
                f"source (ErrorPolicy.skip() or ErrorPolicy.dead_letter(tag))")
        return DeadLetter(self.source_name, origin, reason, raw)


class GuardedKeySelector:
    """A key selector carrying the error policy its keyed exchange applies to key errors."""

    def __init__(self, selector, error_policy: ErrorPolicy):
        self.selector = getattr(selector, "get_key", selector)
        self.error_policy = error_policy

    def __call__(self, value):
        return self.selector(value)

    def get_key(self, value):
        return self.selector(value)
