"""A transactional file sink (``FileSink.for_row_format`` / ``for_bulk_format``), exactly-once by two
phases: each task stages its epoch's part files under ``.staging/``; the driver renames them to their
final names only after the epoch's checkpoint committed. Renaming is idempotent, so publishing again
after a crash neither loses nor duplicates a file — also on an object store (``s3://``), where a
rename is a copy and a delete: publishing again after a crash between the two copies the staged file
over the identical final one and then deletes it.

Layout, as Flink's: ``<base>/<bucket id>/<prefix>-<epoch>-<subtask>[-<n>]<suffix>``. The bucket
assigner decides a bucket per record (default: the base path itself); the rolling policy closes a
part file when it reaches ``part_size`` bytes or has been open ``rollover_interval`` ms, and every
part file closes at the end of its epoch (the checkpoint), when it becomes visible.

The base path is any URI the checkpoint ``Storage`` supports; ``storage_options`` (a keyspan
extension) configure its fsspec file system, e.g. s3fs's ``endpoint_url``/``key``/``secret``."""

from __future__ import annotations

import copy
import posixpath
import re
import time
from datetime import datetime

from keyspan.connectors.sinks import Sink
from keyspan.io.storage import Storage
from keyspan.common.serialization import BulkWriterFactory, Encoder
from keyspan.connectors.file_compaction import Compaction, FileCompactor, FileCompactStrategy

STAGING = ".staging"


class OutputFileConfig:
    """Part file name prefix and suffix: ``<prefix>-<epoch>-<subtask>[-<n>]<suffix>``."""

    def __init__(self, part_prefix: str = "part", part_suffix: str = ""):
        self.part_prefix = part_prefix
        self.part_suffix = part_suffix

    @staticmethod
    def builder() -> "OutputFileConfig.OutputFileConfigBuilder":
        return OutputFileConfig.OutputFileConfigBuilder()

    def get_part_prefix(self) -> str:
        return self.part_prefix

    def get_part_suffix(self) -> str:
        return self.part_suffix

    class OutputFileConfigBuilder:
        def __init__(self):
            self.part_prefix = "part"
            self.part_suffix = ""

        def with_part_prefix(self, prefix: str):
            self.part_prefix = prefix
            return self

        def with_part_suffix(self, suffix: str):
            self.part_suffix = suffix
            return self

        def build(self) -> "OutputFileConfig":
            return OutputFileConfig(self.part_prefix, self.part_suffix)


# --- bucket assigners ------------------------------------------------------------------------------

_JAVA_DATE_TOKENS = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S",
                     "DDD": "%j", "EEE": "%a", "MMM": "%b"}
_JAVA_DATE_PATTERN = re.compile("'([^']*)'|" + "|".join(sorted(map(re.escape, _JAVA_DATE_TOKENS), key=len, reverse=True)))


def java_date_format(pattern: str) -> str:
    """A Java ``DateTimeFormatter`` pattern (``yyyy-MM-dd--HH``) as a ``strftime`` format."""
    def token(m):
        if m.group(1) is not None:
            return m.group(1).replace("%", "%%")
        return _JAVA_DATE_TOKENS[m.group(0)]

    out, pos = [], 0
    for m in _JAVA_DATE_PATTERN.finditer(pattern):
        out.append(pattern[pos:m.start()].replace("%", "%%"))
        out.append(token(m))
        pos = m.end()
    out.append(pattern[pos:].replace("%", "%%"))
    return "".join(out)


class BucketAssigner:
    """Decides the bucket (a sub-directory of the base path) of each record. Subclass it and implement
    ``get_bucket_id(element, context)`` for buckets by content (a keyspan extension); ``context``
    has ``current_processing_time()``."""

    def get_bucket_id(self, element, context) -> str:
        raise NotImplementedError

    @staticmethod
    def base_path_bucket_assigner() -> "BucketAssigner":
        """Every record in the base path itself."""
        return BasePathBucketAssigner()

    @staticmethod
    def date_time_bucket_assigner(format_str: str = "yyyy-MM-dd--HH", timezone_id: str | None = None):
        """Buckets by the wall-clock time a record is written, formatted with a Java date pattern
        (``yyyy-MM-dd--HH``: one bucket per hour), in ``timezone_id`` (default: the local zone)."""
        return DateTimeBucketAssigner(format_str, timezone_id)


class BasePathBucketAssigner(BucketAssigner):
    def get_bucket_id(self, element, context) -> str:
        return ""


class DateTimeBucketAssigner(BucketAssigner):
    def __init__(self, format_str: str = "yyyy-MM-dd--HH", timezone_id: str | None = None):
        self.format_str = format_str
        self.timezone_id = timezone_id
        self._strftime = java_date_format(format_str)
        if timezone_id is not None:
            _zone(timezone_id)  # a bad zone fails here, on the driver

    def get_bucket_id(self, element, context) -> str:
        zone = _zone(self.timezone_id) if self.timezone_id else None
        moment = datetime.fromtimestamp(context.current_processing_time() / 1000, zone)
        return moment.strftime(self._strftime)


def _zone(timezone_id: str):
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(timezone_id)
    except (ZoneInfoNotFoundError, ValueError):
        m = re.fullmatch(r"(?:GMT|UTC)?([+-])(\d{1,2}):?(\d{2})?", timezone_id)
        if not m:
            raise ValueError(f"date_time_bucket_assigner: unknown time zone '{timezone_id}' (use an IANA name "
                             "such as 'America/Los_Angeles' or an offset such as 'GMT-08:00')") from None
        from datetime import timedelta, timezone

        minutes = int(m.group(2)) * 60 + int(m.group(3) or 0)
        return timezone(timedelta(minutes=minutes if m.group(1) == "+" else -minutes))


class BucketContext:
    """What a bucket assigner may ask about the record being written."""

    def current_processing_time(self) -> int:
        return int(time.time() * 1000)


# --- rolling policies ------------------------------------------------------------------------------

class RollingPolicy:
    """When an open part file closes and the next one starts. Every part file also closes at the end
    of its epoch, since output becomes visible only when the epoch's checkpoint commits."""

    part_size: int | None = None
    rollover_interval: int | None = None

    def should_roll(self, size: int, opened_ms: int, now_ms: int) -> bool:
        return False

    @staticmethod
    def default_rolling_policy(part_size: int = 1024 * 1024 * 128, rollover_interval: int = 60 * 1000,
                               inactivity_interval: int = 60 * 1000) -> "DefaultRollingPolicy":
        return DefaultRollingPolicy(part_size, rollover_interval, inactivity_interval)

    @staticmethod
    def on_checkpoint_rolling_policy() -> "OnCheckpointRollingPolicy":
        return OnCheckpointRollingPolicy()


class DefaultRollingPolicy(RollingPolicy):
    """Rolls before a record when the part file holds ``part_size`` bytes or more, or has been open
    ``rollover_interval`` ms. ``inactivity_interval`` is accepted: a part file never outlives its epoch."""

    def __init__(self, part_size: int, rollover_interval: int, inactivity_interval: int):
        if part_size <= 0 or rollover_interval <= 0 or inactivity_interval <= 0:
            raise ValueError("default_rolling_policy: part_size, rollover_interval and inactivity_interval "
                             "must be positive")
        self.part_size = part_size
        self.rollover_interval = rollover_interval
        self.inactivity_interval = inactivity_interval

    def should_roll(self, size, opened_ms, now_ms):
        return size >= self.part_size or now_ms - opened_ms >= self.rollover_interval


class OnCheckpointRollingPolicy(RollingPolicy):
    """One part file per bucket, subtask and epoch."""


# --- writers of one part file ----------------------------------------------------------------------

class _RowPart:
    def __init__(self, encoder: Encoder):
        self._encode = encoder.encode
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, value):
        data = self._encode(value)
        self.parts.append(data)
        self.size += len(data)

    def close(self) -> bytes:
        return b"".join(self.parts)


class _BulkPart:
    def __init__(self, factory: BulkWriterFactory):
        self._factory = factory
        self.records: list = []
        self.batches: list = []  # (records written before it, Arrow batch), in order
        self.size = 0  # unknown until written: bulk formats roll on checkpoints only

    def add(self, value):
        self.records.append(value)

    def add_columns(self, batch):
        self.batches.append((len(self.records), batch))

    def close(self) -> bytes:
        if not self.batches:
            return self._factory.encode(self.records)
        pieces, done = [], 0
        for before, batch in self.batches:
            if before > done:
                pieces.append(self.records[done:before])
                done = before
            pieces.append(batch)
        if done < len(self.records):
            pieces.append(self.records[done:])
        return self._factory.encode_pieces(pieces)


# --- the sink --------------------------------------------------------------------------------------

class FileSink(Sink):
    name = "File Sink"

    def __init__(self, base_path: str, encoder: Encoder | None = None, output_file_config: OutputFileConfig | None = None,
                 storage_options: dict | None = None, bucket_assigner: BucketAssigner | None = None,
                 rolling_policy: RollingPolicy | None = None, bulk_writer: BulkWriterFactory | None = None,
                 compaction: tuple[FileCompactStrategy, FileCompactor] | None = None):
        self.base_path = base_path
        self.compaction = compaction
        self.encoder = encoder
        self.bulk_writer = bulk_writer
        self.output_file_config = output_file_config or OutputFileConfig()
        self.storage_options = dict(storage_options or {})
        self.bucket_assigner = bucket_assigner or BasePathBucketAssigner()
        # Flink's defaults: row formats roll by size and age, bulk formats on checkpoints
        self.rolling_policy = rolling_policy or (OnCheckpointRollingPolicy() if bulk_writer is not None
                                                 else RollingPolicy.default_rolling_policy())

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder) -> "FileSink.RowFormatBuilder":
        return FileSink.RowFormatBuilder(base_path, encoder)

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: BulkWriterFactory) -> "FileSink.BulkFormatBuilder":
        return FileSink.BulkFormatBuilder(base_path, writer_factory)

    class BaseBuilder:
        def __init__(self, base_path: str):
            self._base_path = base_path
            self._config = OutputFileConfig()
            self._storage_options: dict = {}
            self._assigner = None
            self._policy = None
            self._compaction = None

        def with_output_file_config(self, output_file_config: OutputFileConfig):
            self._config = output_file_config
            return self

        def with_bucket_assigner(self, bucket_assigner: BucketAssigner):
            if not isinstance(bucket_assigner, BucketAssigner):
                raise TypeError(f"with_bucket_assigner needs a BucketAssigner, got {bucket_assigner!r}")
            self._assigner = bucket_assigner
            return self

        def with_bucket_check_interval(self, interval: int):
            """Accepted: part files are checked for rolling on every record and closed at every epoch."""
            return self

        def with_storage_options(self, storage_options: dict):
            """keyspan: options for the base path's fsspec file system (e.g. s3fs's ``endpoint_url``,
            ``key``, ``secret``); without them the environment configures it (``AWS_*`` variables)."""
            self._storage_options = dict(storage_options)
            return self

        def enable_compact(self, strategy: FileCompactStrategy, compactor: FileCompactor):
            """Join small part files: committed part files wait hidden until ``strategy`` fires for
            their bucket, then become one file (see keyspan.connectors.file_compaction)."""
            if not isinstance(strategy, FileCompactStrategy) or not isinstance(compactor, FileCompactor):
                raise TypeError("enable_compact needs a FileCompactStrategy (FileCompactStrategy.builder()...build()) "
                                f"and a FileCompactor, got {strategy!r} and {compactor!r}")
            self._compaction = (strategy, compactor)
            return self

        def disable_compact(self):
            self._compaction = None
            return self

    class RowFormatBuilder(BaseBuilder):
        def __init__(self, base_path: str, encoder: Encoder):
            super().__init__(base_path)
            self._encoder = encoder

        def with_rolling_policy(self, rolling_policy: RollingPolicy):
            if not isinstance(rolling_policy, RollingPolicy):
                raise TypeError(f"with_rolling_policy needs a RollingPolicy, got {rolling_policy!r}")
            self._policy = rolling_policy
            return self

        def build(self) -> "FileSink":
            return FileSink(self._base_path, self._encoder, self._config, self._storage_options, self._assigner,
                            self._policy, compaction=self._compaction)

    class BulkFormatBuilder(BaseBuilder):
        def __init__(self, base_path: str, writer_factory: BulkWriterFactory):
            super().__init__(base_path)
            if not isinstance(writer_factory, BulkWriterFactory):
                raise TypeError(f"for_bulk_format needs a BulkWriterFactory (e.g. ParquetBulkWriters.for_row_type), "
                                f"got {writer_factory!r}")
            self._factory = writer_factory

        def with_rolling_policy(self, rolling_policy: RollingPolicy):
            if not isinstance(rolling_policy, OnCheckpointRollingPolicy):
                raise TypeError("a bulk-format FileSink rolls on checkpoints only: use "
                                "RollingPolicy.on_checkpoint_rolling_policy()")
            self._policy = rolling_policy
            return self

        def enable_compact(self, strategy: FileCompactStrategy, compactor: FileCompactor):
            if isinstance(compactor, FileCompactor) and compactor.joins:
                raise TypeError("concat_file_compactor joins files byte by byte, which breaks a bulk format's files "
                                "(Parquet, ORC, Avro): use FileCompactor.identical_file_compactor(), or no compaction")
            return super().enable_compact(strategy, compactor)

        def build(self) -> "FileSink":
            return FileSink(self._base_path, None, self._config, self._storage_options, self._assigner,
                            self._policy, bulk_writer=self._factory, compaction=self._compaction)

    def for_input_type(self, type_info) -> "FileSink":
        """This sink for a stream of ``type_info`` (``sink_to``): a row format may write by the type."""
        if self.encoder is None:
            return self
        typed = copy.copy(self)
        typed.encoder = self.encoder.for_type(type_info)
        return typed

    def storage(self) -> Storage:
        return Storage(self.base_path, self.storage_options)

    def create_writer(self, subtask: int, epoch: int, token: str) -> "FileSinkWriter":
        return FileSinkWriter(self, subtask, epoch, token)

    def final_name(self, bucket: str, epoch: int, subtask: int, n: int = 0) -> str:
        cfg = self.output_file_config
        rolled = f"-{n}" if n else ""
        return posixpath.join(bucket, f"{cfg.part_prefix}-{epoch:010d}-{subtask:04d}{rolled}{cfg.part_suffix}")

    def new_part(self):
        return _BulkPart(self.bulk_writer) if self.bulk_writer is not None else _RowPart(self.encoder)

    @property
    def compacts(self) -> bool:
        return self.compaction is not None

    def sync_staged(self, handles: list[dict]) -> None:
        self.storage().sync_files([h["staged"] for h in handles])

    def publish(self, handles: list[dict]) -> None:
        if self.compaction is not None:
            self._compaction().add(handles)
            return
        storage = self.storage()
        for h in handles:
            if storage.exists(h["staged"]):
                storage.rename(h["staged"], h["final"])
            elif not storage.exists(h["final"]):
                raise IOError(f"file sink '{self.base_path}': staged output {h['staged']} of a committed "
                              "epoch is missing and was never published")

    def checkpoint_committed(self, epoch: int) -> None:
        if self.compaction is not None:
            self._compaction().compact_due(epoch)

    def end_of_input(self) -> None:
        if self.compaction is not None:
            self._compaction().compact_all()

    def _compaction(self) -> Compaction:
        return Compaction(self.storage(), *self.compaction)

    def discard(self, handles: list[dict]) -> None:
        storage = self.storage()
        for h in handles:
            storage.delete(h["staged"])


class StreamingFileSink(FileSink):
    """PyFlink's legacy file sink, used with ``add_sink``: the same sink as ``FileSink``, built the
    same way, exactly-once the same way."""

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder) -> "StreamingFileSink.DefaultRowFormatBuilder":
        return StreamingFileSink.DefaultRowFormatBuilder(base_path, encoder)

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: BulkWriterFactory) -> "StreamingFileSink.DefaultBulkFormatBuilder":
        return StreamingFileSink.DefaultBulkFormatBuilder(base_path, writer_factory)

    class DefaultRowFormatBuilder(FileSink.RowFormatBuilder):
        def with_rolling_policy(self, policy: RollingPolicy):
            return super().with_rolling_policy(policy)

    class DefaultBulkFormatBuilder(FileSink.BulkFormatBuilder):
        def with_rolling_policy(self, policy: RollingPolicy):
            return super().with_rolling_policy(policy)


class FileSinkWriter:
    """One subtask's output of one epoch: an open part file per bucket, staged as it rolls."""

    def __init__(self, sink: FileSink, subtask: int, epoch: int, token: str):
        self._sink = sink
        self._subtask = subtask
        self._epoch = epoch
        self._token = token
        self._assign = sink.bucket_assigner.get_bucket_id
        self._context = BucketContext()
        self._policy = sink.rolling_policy
        self._rolls = type(self._policy).should_roll is not RollingPolicy.should_roll
        self._open: dict[str, tuple] = {}  # bucket → (part, opened at ms)
        self._counts: dict[str, int] = {}  # bucket → part files started this epoch
        self._handles: list[dict] = []
        if (hasattr(sink.bulk_writer, "encode_pieces") and not self._rolls
                and type(sink.bucket_assigner) in (BasePathBucketAssigner, DateTimeBucketAssigner)):
            self.write_columns = self._write_columns  # no record's content decides its bucket or part

    def write(self, value) -> None:
        self._part(self._assign(value, self._context)).add(value)

    def _write_columns(self, batch) -> None:
        self._part(self._assign(None, self._context)).add_columns(batch)

    def _part(self, bucket: str):
        current = self._open.get(bucket)
        if current is not None and self._rolls:
            now = int(time.time() * 1000)
            if self._policy.should_roll(current[0].size, current[1], now):
                self._close(bucket)
                current = None
        if current is None:
            current = self._open[bucket] = (self._sink.new_part(), int(time.time() * 1000))
        return current[0]

    def _close(self, bucket: str) -> None:
        part, _ = self._open.pop(bucket)
        n = self._counts.get(bucket, 0)
        self._counts[bucket] = n + 1
        staged = posixpath.join(STAGING, f"e{self._epoch:010d}-s{self._subtask:04d}-{self._token}"
                                + (f"-{len(self._handles)}" if self._handles else ""))
        self._sink.storage().write(staged, part.close(), sync=False)  # the commit syncs it (sync_staged)
        self._handles.append({"staged": staged, "final": self._sink.final_name(bucket, self._epoch, self._subtask, n),
                              "epoch": self._epoch})

    def finish(self) -> list[dict]:
        """The staged part files of this epoch (published when its checkpoint commits)."""
        for bucket in list(self._open):
            self._close(bucket)
        return self._handles
