"""``NumberSequenceSource(start, end)``: the numbers start..end (both inclusive), bounded."""

from __future__ import annotations

from keyspan.connectors.sources import IndexedReader, KeyspanSource

_BATCH = 65536  # numbers per chunk a task yields


class NumberSequenceReader(IndexedReader):
    def __init__(self, start: int, count: int):
        super().__init__(count)
        self.start = start

    def read(self, partition):
        lo, hi = partition
        for first in range(lo, hi, _BATCH):
            yield list(range(self.start + first, self.start + min(hi, first + _BATCH)))


class NumberSequenceSource(KeyspanSource):
    """A bounded source of the longs ``start`` to ``end`` (both inclusive), split into as many
    sub-ranges as the epoch has source tasks; each sub-range is produced in order."""

    name = "Sequence Source"

    def __init__(self, start: int, end: int):
        if end < start:
            raise ValueError(f"NumberSequenceSource: end ({end}) must not be less than start ({start})")
        self.start = int(start)
        self.end = int(end)

    def fingerprint(self) -> str:
        return f"sequence:{self.start}:{self.end}"

    def estimated_bytes(self) -> int:
        return 8 * (self.end - self.start + 1)  # a long each, as Flink counts them

    def reader(self, storage, uid, name):
        return NumberSequenceReader(self.start, self.end - self.start + 1)
