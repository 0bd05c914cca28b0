"""``NumberSequenceSource(start, end)``: the numbers start..end (both inclusive), bounded; the
offset is how many numbers were read, so an epoch replays exactly."""

from __future__ import annotations

from keyspan.connectors.sources import KeyspanSource, SourceReader, chunk_batch

_BATCH = 65536  # numbers per Arrow batch a task yields


class NumberSequenceReader(SourceReader):
    def __init__(self, start: int, count: int):
        self.start = start
        self.count = count

    def end_offset(self):
        return {"index": self.count}

    def backlog(self, offset):
        return self.count - (offset or self.initial_offset())["index"]

    def latest_offset(self, start, max_records):
        pos = start["index"]
        return {"index": self.count if max_records is None else min(self.count, pos + max_records)}

    def partitions(self, start, end, parallelism):
        lo, hi = start["index"], end["index"]
        n = hi - lo
        if n <= 0:
            return []
        parts = min(parallelism, n)
        bounds = [lo + n * i // parts for i in range(parts + 1)]
        return [(bounds[i], bounds[i + 1]) for i in range(parts)]

    def read(self, partition):
        lo, hi = partition
        for first in range(lo, hi, _BATCH):
            yield chunk_batch(list(range(self.start + first, self.start + min(hi, first + _BATCH))))


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

    def reader(self, storage, uid):
        return NumberSequenceReader(self.start, self.end - self.start + 1)
