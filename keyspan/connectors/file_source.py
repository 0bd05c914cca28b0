"""A file source over a directory of text, JSON-lines, CSV or Parquet files, or lines read by a
deserialization schema. Records a format cannot read follow the source's ``ErrorPolicy``.

Offsets count files in the order the source first saw them, so an epoch is a set of whole files
and replays exactly. Bounded by default (the files present at start, in name order);
``monitor_continuously`` keeps picking up new files whatever their names, each read once, as Flink's
and Spark's file sources do. A stream format reads a compressed file (``.gz``, ``.bz2``, ``.xz``,
``.deflate``) decompressed, as Flink's ``StandardDeCompressors`` do.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import os
import lzma
import posixpath
import zlib

import pyarrow as pa

from keyspan.io.storage import Storage
from keyspan.common.typeinfo import Types
from keyspan.common.types import Row, rows_of_arrow
from keyspan.common.serialization import ParseError
from keyspan.connectors.dead_letter import ErrorPolicy
from keyspan.connectors.sources import KeyspanSource, SourceReader, split_range


class StreamFormat:
    """How a file's bytes become records. Every format reads record by record where it can, so a
    record it cannot read goes to the source's error policy with its file and line."""

    def __init__(self, kind: str, options: dict | None = None):
        self.kind = kind
        self.options = options or {}

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> "StreamFormat":
        return StreamFormat("text", {"charset": charset_name})

    @staticmethod
    def json_lines_format() -> "StreamFormat":
        """keyspan: one JSON object per line, read as a ``Row`` with the object's keys as fields."""
        return StreamFormat("jsonl")

    @staticmethod
    def csv_format(delimiter: str = ",") -> "StreamFormat":
        """keyspan: CSV with a header line; records are ``Row`` objects."""
        return StreamFormat("csv", {"delimiter": delimiter})

    @staticmethod
    def parquet_format() -> "StreamFormat":
        """keyspan: Parquet files; records are ``Row`` objects."""
        return StreamFormat("parquet")

    @staticmethod
    def line_format(deserialization_schema) -> "StreamFormat":
        """keyspan: every line of a file is one message for ``deserialization_schema`` (e.g. a
        ``JsonRowDeserializationSchema`` or ``CsvRowDeserializationSchema``); a line it cannot read
        follows the source's error policy (the schema's ``ignore_parse_errors`` means skip)."""
        if not hasattr(deserialization_schema, "parse"):
            raise TypeError(f"line_format needs a keyspan DeserializationSchema, got {deserialization_schema!r}")
        return StreamFormat("lines", {"schema": deserialization_schema})

    @property
    def ignores_parse_errors(self) -> bool:
        schema = self.options.get("schema")
        return bool(schema is not None and schema.ignore_parse_errors)

    def produced_type(self):
        """The records' declared type, when the format declares one (None: Python objects)."""
        if self.kind == "text":
            return Types.STRING()
        schema = self.options.get("schema")
        return schema.get_produced_type() if schema is not None and hasattr(schema, "get_produced_type") else None

    def parse(self, data: bytes, name: str = "<bytes>", poison=None) -> list:
        """The records of one file named ``name``; ``poison(raw, origin, reason)`` (a source's
        ``PoisonHandler``) gets every record that cannot be read and returns what to emit instead."""
        if poison is None:
            poison = ErrorPolicy.fail().handler(f"format {self.kind}")
        if self.kind in ("text", "jsonl", "lines"):
            return self._parse_lines(data, name, poison)
        if self.kind == "csv":
            return self._parse_csv(data, name, poison)
        if self.kind == "parquet":
            table, bad = read_parquet(data, name, poison)
            return bad if table is None else rows_of_arrow(table)
        raise ValueError(f"unknown file format {self.kind}")

    def _parse_lines(self, data: bytes, name: str, poison) -> list:
        charset = self.options.get("charset", "UTF-8")
        schema = self.options.get("schema")
        out = []
        for number, line in enumerate(data.splitlines(), 1):
            try:
                if self.kind == "text":
                    out.append(line.decode(charset))
                    continue
                if not line.strip():
                    continue
                if schema is not None:
                    record = schema.parse(line)
                    if record is not None:
                        out.append(record)
                    continue
                obj = json.loads(line)
                out.append(Row.from_values(tuple(obj), tuple(obj.values())) if isinstance(obj, dict) else obj)
            except (ValueError, UnicodeDecodeError) as exc:  # ParseError and JSONDecodeError are ValueErrors
                reason = str(exc) if isinstance(exc, ParseError) else f"{_what(self.kind)}: {exc}"
                out.append(poison(line, f"{name} line {number}", reason))
        return out

    def _parse_csv(self, data: bytes, name: str, poison) -> list:
        """pyarrow reads the file; a row with another field count than the header goes to ``poison``."""
        from pyarrow import csv

        bad: list = []
        failure: list = []
        lines: dict[str, list[int]] = {}  # pyarrow does not always know a row's number: find its line

        def line_of(text: str):
            if not lines:
                for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                    lines.setdefault(line, []).append(number)
            numbers = lines.get(text)
            return numbers.pop(0) if numbers else None

        def invalid_row(row):
            number = row.number if row.number is not None else line_of(row.text)
            where = f"{name} line {number}" if number is not None else name
            try:
                bad.append(poison(row.text.encode(), where, f"wrong field count: {row.expected_columns} fields "
                                                            f"expected but the row has {row.actual_columns}"))
            except Exception as exc:  # noqa: BLE001 — the fail policy's error, raised after pyarrow stops
                failure.append(exc)
                return "error"
            return "skip"

        options = csv.ParseOptions(delimiter=self.options.get("delimiter", ","), invalid_row_handler=invalid_row)
        try:
            table = csv.read_csv(io.BytesIO(data), parse_options=options)
        except pa.ArrowException as exc:
            if failure:
                raise failure[0] from None
            return [poison(data, name, f"not readable as CSV: {exc}")]
        return rows_of_arrow(table) + bad


def read_parquet(data: bytes, name: str, poison) -> tuple[pa.Table | None, list]:
    """A Parquet file's table, or None and what ``poison`` gives for a file that is not one."""
    import pyarrow.parquet as pq

    try:
        return pq.read_table(io.BytesIO(data)), []
    except (pa.ArrowException, OSError) as exc:
        return None, [poison(data, name, f"not a readable Parquet file: {exc}")]


class FileEnumeratorProvider:
    """Which files under a ``FileSource``'s paths it reads. Both of Flink's default enumerators read
    every file in the paths' subfolders, except those named ``.*`` or ``_*``; keyspan does the same
    with either, and reads each file whole (a file is never split among tasks)."""

    def __init__(self, splittable: bool):
        self.splittable = splittable

    @staticmethod
    def default_splittable_file_enumerator() -> "FileEnumeratorProvider":
        return FileEnumeratorProvider(True)

    @staticmethod
    def default_non_splittable_file_enumerator() -> "FileEnumeratorProvider":
        return FileEnumeratorProvider(False)


class FileSplitAssignerProvider:
    """Which task reads which file: keyspan hands each task a run of consecutive files, one Spark task
    per reading subtask (Spark places the tasks)."""

    @staticmethod
    def locality_aware_split_assigner() -> "FileSplitAssignerProvider":
        return FileSplitAssignerProvider()


class BulkFormat(StreamFormat):
    """A format that reads a whole file at once (``FileSource.for_bulk_file_format``), e.g. PyFlink's
    ``ParquetColumnarRowInputFormat``."""


def _what(kind: str) -> str:
    return {"jsonl": "malformed JSON", "text": "undecodable text"}.get(kind, "unreadable record")


# a stream format reads these files decompressed, chosen by the name's ending (Flink's StandardDeCompressors)
_DECOMPRESSORS = {".deflate": ("deflate", zlib.decompress), ".gz": ("gzip", gzip.decompress),
                  ".gzip": ("gzip", gzip.decompress), ".bz2": ("bzip2", bz2.decompress), ".xz": ("xz", lzma.decompress)}


def _decompressed(data: bytes, name: str) -> bytes | str:
    """The file's bytes, decompressed if its name says it is compressed; a str: why it cannot be."""
    for ending, (kind, decompress) in _DECOMPRESSORS.items():
        if name.endswith(ending):
            try:
                return decompress(data)
            except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
                return f"not a readable {kind} file: {exc}"
    return data


def _visible_files(folder: Storage) -> list[str]:
    """The files a source reads under the folder, in its subfolders too (as Flink's file enumerators
    do): a file or folder whose name starts with "." or "_" is being written, or is not data."""
    return [path for path in folder.files_under("")
            if not any(part.startswith((".", "_")) for part in path.split("/"))]


def _listed(roots: list[tuple[Storage, str | None]]) -> list[str]:
    """Every file under a source's paths. With several paths a name starts with its path's position
    (``1/part-0``); with one it is the file's name under the path, as it always was."""
    names = []
    for i, (root, only) in enumerate(roots):
        found = ([only] if root.exists(only) else []) if only is not None else _visible_files(root)
        names.extend(found if len(roots) == 1 else [f"{i}/{name}" for name in found])
    return names


class FileReader(SourceReader):
    """Reads a fixed list of files (bounded), or each file that appears in a directory once
    (continuous). An offset counts files in the order the source first saw them. A continuous source
    keeps that order in its discovery log, in the job's checkpoint storage: one JSON list of names
    per discovery, named by the position of its first file. A file joins the end of the log when it
    is first listed, whatever its name, so an offset always means the same files, a checkpoint's
    epoch replays exactly, and a file whose name sorts before one already read is still read (counting
    files in name order would shift every offset and read an old file again instead)."""

    unit = "files"

    def __init__(self, roots: list[tuple[Storage, str | None]], fmt: StreamFormat, files: list[str] | None,
                 poison, log: Storage | None = None):
        self.roots = roots  # per path of the source: its folder, and the file's name when the path is a file
        self.fmt = fmt
        self.files = files  # fixed list when bounded
        self.bounded = files is not None
        self.poison = poison  # the source's PoisonHandler
        self.log = log  # continuous: the discovery log's folder
        self._seen: list[str] = []  # the discovery log as far as this process read it
        self._seen_set: set[str] = set()

    def __getstate__(self):
        return {**self.__dict__, "_seen": [], "_seen_set": set()}  # each process reads the log itself

    def _listing(self) -> list[str]:
        return _listed(self.roots)

    def _locate(self, name: str) -> tuple[Storage, str]:
        if len(self.roots) == 1:
            return self.roots[0][0], name
        i, rest = name.split("/", 1)
        return self.roots[int(i)][0], rest

    def _remember(self, names: list[str]) -> None:
        self._seen.extend(names)
        self._seen_set.update(names)

    def _known(self) -> list[str]:
        """The files in the order first seen: the bounded list, or the discovery log read to its end."""
        if self.files is not None:
            return self.files
        while self.log.exists(segment := f"{len(self._seen):012d}.json"):  # the entries other processes added
            self._remember(json.loads(self.log.read(segment)))
        return self._seen

    def _discover(self) -> list[str]:
        """``_known`` with the files listed for the first time appended (in name order among themselves).
        Only the stream's own offset planning writes the log, before Spark records the offset."""
        known = self._known()
        if self.files is None:
            new = sorted(n for n in self._listing() if n not in self._seen_set)
            if new:
                self.log.write(f"{len(known):012d}.json", json.dumps(new).encode())
                self._remember(new)
        return known

    def savepoint_state(self, offset):
        """The files an offset counts, in the order read: the discovery log stays with the job's checkpoints."""
        if self.files is not None:
            return None
        return self._known()[:(offset or self.initial_offset())["files"]]

    def restore_state(self, state) -> None:
        """The log's first entry (a restore starts with the job's checkpoint storage empty)."""
        if not self._known():
            self.log.write(f"{0:012d}.json", json.dumps(state).encode())

    def initial_offset(self):
        return {"files": 0}

    def backlog(self, offset):
        known = self._known()
        unseen = 0 if self.files is not None else sum(1 for n in self._listing() if n not in self._seen_set)
        return len(known) + unseen - (offset or self.initial_offset())["files"]

    def end_offset(self):
        return {"files": len(self.files)} if self.files is not None else None

    def latest_offset(self, start, max_records):
        available = len(self._discover())
        return {"files": available if max_records is None else min(available, start["files"] + max_records)}

    def partitions(self, start, end, parallelism):
        """At most ``parallelism`` tasks, each reading a run of consecutive files (their names): a Spark
        task per file would cost ~60 ms each when many small files arrive at once."""
        known = self._known()
        if end["files"] > len(known):
            paths = ", ".join(root.uri for root, _ in self.roots)
            raise RuntimeError(f"file source {paths}: the epoch ends at file {end['files']}, but its discovery log "
                               f"{self.log.uri} lists {len(known)} files; run the job with --fresh to read the "
                               "directory from its start")
        return [known[lo:hi] for lo, hi in split_range(start["files"], end["files"], parallelism)]

    def most_bytes(self, partitions):
        total = 0
        for name in (name for partition in partitions for name in partition):
            root, path = self._locate(name)
            total += root.size(path)
        return total

    def read(self, partition):
        for name in partition:
            root, path = self._locate(name)
            raw, url = root.read(path), root.url(path)
            data = raw if isinstance(self.fmt, BulkFormat) else _decompressed(raw, name)
            if isinstance(data, str):
                yield [self.poison(raw, url, data)]
            else:
                yield self.fmt.parse(data, url, self.poison)


class FileSource(KeyspanSource):
    def __init__(self, fmt: StreamFormat, paths: tuple[str, ...], continuous: bool, max_files: int | None,
                 error_policy: ErrorPolicy | None = None):
        if not paths:
            raise ValueError("FileSource needs at least one path (a directory or a file)")
        self.fmt = fmt
        self.paths = tuple(paths)
        self.bounded = not continuous
        self.max_per_epoch = max_files
        # a schema's ignore_parse_errors() drops bad records, as in PyFlink, unless the source says more
        self.error_policy = error_policy or (ErrorPolicy.skip() if fmt.ignores_parse_errors else ErrorPolicy.fail())

    def get_produced_type(self):
        """The type of the records the format reads (``from_source`` gives it to the stream)."""
        return self.fmt.produced_type()

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> "FileSource.FileSourceBuilder":
        return FileSource.FileSourceBuilder(stream_format, paths)

    @staticmethod
    def for_bulk_file_format(bulk_format: BulkFormat, *paths: str) -> "FileSource.FileSourceBuilder":
        if not isinstance(bulk_format, BulkFormat):
            raise TypeError(f"for_bulk_file_format needs a BulkFormat (ParquetColumnarRowInputFormat), "
                            f"got {type(bulk_format).__name__}")
        return FileSource.FileSourceBuilder(bulk_format, paths)

    class FileSourceBuilder:
        def __init__(self, fmt, paths):
            self._fmt = fmt
            self._paths = paths
            self._continuous = False
            self._max_files = None
            self._error_policy = None

        def set_error_policy(self, error_policy: ErrorPolicy):
            """keyspan: what to do with a record the format cannot read — ``ErrorPolicy.fail()``
            (default), ``.skip()`` or ``.dead_letter(output_tag)`` (see keyspan.connectors.dead_letter)."""
            if not isinstance(error_policy, ErrorPolicy):
                raise TypeError(f"set_error_policy needs an ErrorPolicy, got {error_policy!r}")
            self._error_policy = error_policy
            return self

        def set_max_files_per_epoch(self, files: int):
            """keyspan: read at most this many files per epoch (Spark's maxFilesPerTrigger)."""
            self._max_files = int(files)
            return self

        def set_file_enumerator(self, file_enumerator: FileEnumeratorProvider):
            """Accepted: keyspan reads every visible file under the paths, as Flink's default enumerators do."""
            if not isinstance(file_enumerator, FileEnumeratorProvider):
                raise TypeError(f"set_file_enumerator needs a FileEnumeratorProvider, got {file_enumerator!r}")
            return self

        def set_split_assigner(self, split_assigner: FileSplitAssignerProvider):
            """Accepted: each reading task takes a run of consecutive files."""
            if not isinstance(split_assigner, FileSplitAssignerProvider):
                raise TypeError(f"set_split_assigner needs a FileSplitAssignerProvider, got {split_assigner!r}")
            return self

        def monitor_continuously(self, discovery_interval=None):
            self._continuous = True
            return self

        def process_static_file_set(self):
            self._continuous = False
            return self

        def build(self) -> "FileSource":
            return FileSource(self._fmt, self._paths, self._continuous, self._max_files, self._error_policy)

    @property
    def keeps_state(self) -> bool:
        return not self.bounded  # the discovery log

    def fingerprint(self) -> str:
        paths = ",".join(os.path.abspath(p) if "://" not in p else p for p in self.paths)
        return f"files:{paths}:{self.fmt.kind}"

    def estimated_bytes(self) -> int | None:
        try:
            return sum(root.fs.du(root.full_path("")) for root in map(Storage, self.paths))
        except (OSError, ValueError):
            return None  # the reader says what is wrong with the path

    def reader(self, storage, uid, name):
        roots = []
        for path in self.paths:
            root = Storage(path)
            if root.fs.isfile(root.full_path("")):
                roots.append((Storage(posixpath.dirname(root.uri)), posixpath.basename(root.uri)))
            elif root.fs.exists(root.full_path("")):
                roots.append((root, None))
            else:
                raise FileNotFoundError(f"file source: {path} does not exist")
        poison = self.error_policy.handler(name)
        if self.bounded or all(only is not None for _, only in roots):  # files alone: nothing new can appear
            return FileReader(roots, self.fmt, _listed(roots), poison)
        log = storage.child(f"sources/{uid}-{hashlib.sha256(self.fingerprint().encode()).hexdigest()[:16]}-files")
        return FileReader(roots, self.fmt, None, poison, log)
