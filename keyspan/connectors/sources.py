"""Sources. keyspan's own sources advance through one Spark Python streaming data source ("keyspan")
whose offsets are plain JSON positions, so an epoch's input is replayable from the offsets a
checkpoint records. Spark only keeps their offsets: each epoch, the driver plans the input
partitions between two offsets and the source's stage reads them in its own tasks (``SourceReader.read``),
so records never pass through a data source worker and the JVM before the stage sees them.
``from_spark`` wraps any Spark streaming DataFrame instead."""

from __future__ import annotations

import base64
import hashlib
import sys
from typing import Iterator, NamedTuple

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from keyspan.io.storage import Storage
from keyspan.common.java_values import received_form
from keyspan.common.typeinfo import RowTypeInfo
from keyspan.common.types import Row
from keyspan.io import serde

TICK = "tick"  # an offset field that only advances to make Spark run an epoch without new records
PAYLOAD_SCHEMA = "payload binary"  # the offset stream's schema: Spark never reads its rows (``_StreamReader.read``)


class SplitChunk(NamedTuple):
    """Records of one split (a Kafka partition) with the event timestamps the source gave them: the
    split then has its own watermark (``SourceReader.splits``)."""

    records: list
    stamps: list
    split: str


class SourceRecordError(ValueError):
    """Input a source cannot read (a malformed record, a missing topic): the message names the source
    and where the input is (file, or topic/partition/offset), and the job fails with just that line."""

    MARKER = "keyspan.SourceRecordError: "

    def __init__(self, message: str):
        super().__init__(self.MARKER + message)


class SourceReader:
    """Driver- and executor-side logic of one keyspan source; pickled into the data source options."""

    bounded = True
    unit = "records"  # what the per-epoch limit counts: records or files

    def initial_offset(self) -> dict:
        return {"index": 0}

    def end_offset(self) -> dict | None:
        """The last offset of a bounded source (None while unbounded)."""
        raise NotImplementedError

    def latest_offset(self, start: dict, max_records: int | None) -> dict:
        raise NotImplementedError

    def partitions(self, start: dict, end: dict, parallelism: int) -> list:
        raise NotImplementedError

    def read(self, partition) -> Iterator:
        """The records of one partition, in chunks: lists of records, or ``SplitChunk``s. The stage that
        reads them sends its output on after each chunk: a chunk is a file, a fetch, a slice of a range."""
        raise NotImplementedError

    def most_records(self, partitions: list) -> int | None:
        """At most how many records ``partitions`` hold, when their offsets tell (None: only reading
        them tells): the driver then knows an epoch is too large to run itself without reading it."""
        return None

    def most_bytes(self, partitions: list) -> int | None:
        """How many bytes ``partitions`` take where they are stored, if cheap to know (None: unknown):
        the driver reads no large file to count its records."""
        return None

    def backlog(self, offset: dict | None) -> int | None:
        """How many of the reader's units (records, files) are not read yet at ``offset``, if it knows."""
        return None

    def exhausted(self, offset: dict | None) -> bool:
        end = self.end_offset()
        return end is not None and offset is not None and _without_tick(offset) == end

    def splits(self, offset: dict | None) -> list[str] | None:
        """The names of the splits the source reads in the epoch that ends at ``offset``, when its
        chunks name their split (``SplitChunk``) so each gets its own watermark; None:
        the source is one split."""
        return None

    def savepoint_state(self, offset: dict | None):
        """What a savepoint carries beside ``offset`` when the reader keeps more than its offsets in the
        job's checkpoint storage (JSON; None: the offset says it all). Savepoints copy nothing of that
        storage, and a restore from one starts the job's checkpoint storage afresh."""
        return None

    def restore_state(self, state) -> None:
        """Put ``savepoint_state`` back into the job's checkpoint storage, before the first epoch after
        a restore from the savepoint."""

    def checkpointed(self, offset: dict) -> None:
        """Called on the driver right after a checkpoint with the reader at ``offset`` committed
        (e.g. to report progress outside keyspan); never needed for recovery."""


class KeyspanSource:
    """A source the user builds on the driver; ``reader`` makes the picklable SourceReader."""

    input_format = "chunks"  # its records reach the job as pickled chunks
    restorable = True  # its offsets live in keyspan's checkpoints: savepoints and rescaling work
    bounded = True
    watermark_strategy = None
    max_per_epoch: int | None = None  # a source's own per-epoch limit, in its reader's unit
    keeps_state = False  # its reader keeps more than offsets in the job's checkpoint storage (savepoint_state)

    def reader(self, storage: Storage, uid: str, name: str) -> SourceReader:
        """``name``: the name the job gave the source (``from_source``), which its messages and dead
        letters use."""
        raise NotImplementedError

    def estimated_bytes(self) -> int | None:
        """About how many bytes a bounded input holds (None: unknown); BATCH mode sets the parallelism
        of the operators behind an exchange by it (``keyspan.runtime.planner.AdaptiveBatch``)."""
        return None

    def fingerprint(self) -> str:
        """Identifies the input, so a checkpoint's offsets are never applied to other data."""
        raise NotImplementedError


def split_range(lo: int, hi: int, parallelism: int) -> list[tuple[int, int]]:
    """[lo, hi) in at most ``parallelism`` consecutive runs of near-equal size (no empty run)."""
    n = hi - lo
    if n <= 0:
        return []
    parts = min(parallelism, n)
    bounds = [lo + n * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


class IndexedReader(SourceReader):
    """A bounded input of ``total`` records addressed by position: the offset is how many were read,
    so an epoch's range replays exactly."""

    def __init__(self, total: int):
        self.total = total

    def end_offset(self):
        return {"index": self.total}

    def backlog(self, offset):
        return self.total - (offset or self.initial_offset())["index"]

    def latest_offset(self, start, max_records):
        pos = start["index"]
        return {"index": self.total if max_records is None else min(self.total, pos + max_records)}

    def partitions(self, start, end, parallelism):
        return split_range(start["index"], end["index"], parallelism)

    def most_records(self, partitions):
        return sum(hi - lo for lo, hi in partitions)


class CollectionReader(IndexedReader):
    def __init__(self, storage: Storage, path: str, total: int):
        super().__init__(total)
        self.storage = storage
        self.path = path

    def read(self, partition):
        records = _load_cached(self.storage, self.path)
        lo, hi = partition
        yield records[lo:hi]


_LOADED: dict[str, list] = {}


def _load_cached(storage: Storage, path: str) -> list:
    key = storage.url(path)
    data = _LOADED.get(key)
    if data is None:
        data = _LOADED[key] = serde.loads_code(storage.read(path))
    return data


class CollectionSource(KeyspanSource):
    name = "Collection Source"
    non_parallel = True  # as Flink's: in BATCH mode one subtask reads it (STREAMING splits it, as it always did)

    def __init__(self, collection: list, type_info=None):
        self.type_info = type_info
        if isinstance(type_info, RowTypeInfo):
            names = type_info.get_field_names()
            collection = [_row_of_type(r, names) if isinstance(r, (tuple, list)) else r for r in collection]
        as_received = received_form(type_info)
        if as_received is not None:  # PyFlink's Java source hands each record to Python serialized by its type
            collection = [as_received(r) for r in collection]
        self.collection = collection
        self._pickled: bytes | None = None

    def __getstate__(self):
        return {**self.__dict__, "_pickled": None}

    def pickled(self) -> bytes:
        """The collection pickled, as fingerprinted and sized (classes by name, so the same each run)."""
        if self._pickled is None:
            self._pickled = serde.dumps(self.collection)
        return self._pickled

    def fingerprint(self) -> str:
        return "collection:" + hashlib.sha256(self.pickled()).hexdigest()

    def estimated_bytes(self) -> int:
        return len(self.pickled())

    def reader(self, storage, uid, name):
        data = self.pickled()
        path = f"sources/{uid}-{hashlib.sha256(data).hexdigest()[:16]}.pkl"
        if not storage.exists(path):  # the job file's classes by value, as its functions travel
            storage.write(path, serde.dumps_function(self.collection) if b"__main__" in data else data)
        return CollectionReader(storage, path, len(self.collection))


def _row_of_type(record, names: list) -> Row:
    """A collection's record as a row of its declared type: a named row by the type's names (as
    PyFlink writes it), a tuple or list by position."""
    fields = getattr(record, "_fields", None)
    if fields is None or list(fields) == list(names):
        row = Row.from_values(names, record)
    else:
        missing = [n for n in names if n not in fields]
        if missing:
            raise ValueError(f"from_collection: the record {record!r} has no field {missing[0]!r} of its declared type "
                             f"(fields {names}); name its fields as the type does, or pass a tuple")
        row = Row.from_values(names, record.get_fields_by_names(names))
    if isinstance(record, Row) and record.get_row_kind() is not row.get_row_kind():
        row.set_row_kind(record.get_row_kind())
    return row


class SparkSource:
    """Wraps a Spark streaming DataFrame: records are ``Row`` objects with its column names.
    ``bounded`` runs it with Spark's available-now trigger: all data present at start, then stop."""

    watermark_strategy = None
    name = "Spark Source"
    input_format = "typed"  # Spark columns, read as Row records
    restorable = False  # its offsets live in Spark's own offset log of one run

    def __init__(self, dataframe, bounded: bool = False):
        self.dataframe = dataframe
        self.bounded = bounded

    def fingerprint(self) -> str:
        return "spark:" + self.dataframe.schema.simpleString()


# --- the Spark Python data source -------------------------------------------------------------

def encode_reader(reader: SourceReader) -> str:
    serde.ship_user_modules_within(reader)
    return base64.b64encode(serde.dumps_function(reader)).decode()


def _decode_reader(options) -> SourceReader:
    return serde.loads_code(base64.b64decode(options["reader"]))


SPARK_SOURCE_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"


def _quiet_when_spark_hangs_up() -> None:
    """In the process Spark runs a stream reader in: a query stopped while it waits for a call closes
    that process's socket, and PySpark's runner then dies of the closed socket with a traceback on the
    driver's terminal, though nothing failed. Make that one end quiet; any other error still prints."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(spec, "name", None) != SPARK_SOURCE_RUNNER:
        return
    shown = sys.excepthook

    def hook(kind, value, tb):
        if not issubclass(kind, (EOFError, ConnectionError)):
            shown(kind, value, tb)

    sys.excepthook = hook


class KeyspanDataSource(DataSource):
    @classmethod
    def name(cls):
        return "keyspan"

    def schema(self):
        return PAYLOAD_SCHEMA

    def streamReader(self, schema):
        _quiet_when_spark_hangs_up()
        return _StreamReader(_decode_reader(self.options), dict(self.options))


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, reader: SourceReader, options: dict):
        self.reader = reader
        self.max_records = int(options["max_records"]) if options.get("max_records") else None
        self.start = _json_option(options.get("start_offset"))
        self.wake_file = options.get("wake_file")
        self.replay = _json_option(options.get("replay_ends")) or []

    def initialOffset(self):
        return self.start or self.reader.initial_offset()

    def getDefaultReadLimit(self):
        if not self.max_records:
            return ReadAllAvailable()
        return ReadMaxFiles(self.max_records) if self.reader.unit == "files" else ReadMaxRows(self.max_records)

    def latestOffset(self, start, limit):
        pinned = self._replayed_end(start)
        if pinned is not None:
            return pinned
        if isinstance(limit, ReadMaxRows):
            end = self.reader.latest_offset(start, limit.max_rows)
        elif isinstance(limit, ReadMaxFiles):
            end = self.reader.latest_offset(start, limit.max_files)
        else:
            end = self.reader.latest_offset(start, None)
        if end != _without_tick(start):
            return end
        if self.wake_file and _wake_due(self.wake_file):
            # no new records, but processing-time timers or idle-split timeouts are due: an empty epoch
            return {**end, TICK: start.get(TICK, 0) + 1}
        return start

    def _replayed_end(self, start):
        """While replaying epochs of a checkpoint that could not be restored, each epoch ends where the
        original one did, so a replayed epoch has the same records (and the same output files)."""
        if not self.replay:
            return None
        at = max((i + 1 for i, end in enumerate(self.replay) if end == start), default=0)
        if at == 0 and start != self.initialOffset():
            return None
        return next((end for end in self.replay[at:] if end != start), None)

    def prepareForTriggerAvailableNow(self):
        """Bounded sources never read past their end, so there is no target to record."""

    def partitions(self, start, end):
        """None for Spark to read: the driver plans the epoch's input partitions between the same offsets
        (``SparkStages.input_partitions``) and the source's stage reads them."""
        return []

    def read(self, partition):
        raise RuntimeError("keyspan reads its sources in the source stages of each epoch; this stream only "
                           "advances their offsets, and its rows are not meant to be read")

    def commit(self, end):
        pass


def _without_tick(offset: dict) -> dict:
    return {k: v for k, v in offset.items() if k != TICK}


def _wake_due(path: str) -> bool:
    """The driver writes the wall-clock time (ms) at which the job next needs an epoch."""
    import json
    import time

    try:
        with open(path) as f:
            wake_at = json.load(f)["wake_at"]
    except (OSError, ValueError, KeyError):
        return False
    return wake_at is not None and time.time() * 1000 >= wake_at


def _json_option(value):
    import json

    return json.loads(value) if value else None


_REGISTERED: set[int] = set()


def register_data_source(spark) -> None:
    if id(spark) not in _REGISTERED:
        spark.dataSource.register(KeyspanDataSource)
        _REGISTERED.add(id(spark))


def source_dataframe(spark, reader: SourceReader, max_records: int | None, start_offset: dict | None,
                     wake_file: str | None = None, replay_ends: list | None = None):
    import json

    register_data_source(spark)
    r = spark.readStream.format("keyspan").option("reader", encode_reader(reader))
    if wake_file:
        r = r.option("wake_file", wake_file)
    if max_records:
        r = r.option("max_records", str(max_records))
    if start_offset is not None:
        r = r.option("start_offset", json.dumps(start_offset))
    if replay_ends:
        r = r.option("replay_ends", json.dumps(replay_ends))
    return r.load()
