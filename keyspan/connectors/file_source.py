"""A file source over a directory of text, JSON-lines, CSV or Parquet files.

Offsets count files in name order, so an epoch is a set of whole files and replays exactly.
Bounded by default (the files present at start); ``monitor_continuously`` keeps picking up new
files, which must appear in increasing name order (as in Spark's and Flink's file sources).
"""

from __future__ import annotations

import io
import json
import os
import posixpath

import pyarrow as pa

from keyspan.io.storage import Storage
from keyspan.common.types import Row
from keyspan.connectors.sources import KeyspanSource, SourceReader, chunk_batch


class StreamFormat:
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

    def parse(self, data: bytes) -> list:
        if self.kind == "text":
            text = data.decode(self.options.get("charset", "UTF-8"))
            return text.splitlines()
        if self.kind == "jsonl":
            out = []
            for line in data.decode("utf-8").splitlines():
                if line.strip():
                    obj = json.loads(line)
                    out.append(Row.from_values(tuple(obj), tuple(obj.values())) if isinstance(obj, dict) else obj)
            return out
        if self.kind == "csv":
            from pyarrow import csv

            table = csv.read_csv(io.BytesIO(data),
                                 parse_options=csv.ParseOptions(delimiter=self.options.get("delimiter", ",")))
            return _rows(table)
        if self.kind == "parquet":
            import pyarrow.parquet as pq

            return _rows(pq.read_table(io.BytesIO(data)))
        raise ValueError(f"unknown file format {self.kind}")


def _rows(table: pa.Table) -> list:
    names = tuple(table.column_names)
    cols = [c.to_pylist() for c in table.columns]
    return [Row.from_values(names, values) for values in zip(*cols)]


class FileReader(SourceReader):
    unit = "files"

    def __init__(self, storage: Storage, fmt: StreamFormat, files: list[str] | None):
        self.storage = storage
        self.fmt = fmt
        self.files = files  # fixed list when bounded
        self.bounded = files is not None

    def _listing(self) -> list[str]:
        if self.files is not None:
            return self.files
        return [n for n in self.storage.list("") if not n.startswith((".", "_"))]

    def initial_offset(self):
        return {"files": 0}

    def backlog(self, offset):
        return len(self._listing()) - (offset or self.initial_offset())["files"]

    def end_offset(self):
        return {"files": len(self.files)} if self.files is not None else None

    def latest_offset(self, start, max_records):
        available = len(self._listing())
        return {"files": available if max_records is None else min(available, start["files"] + max_records)}

    def partitions(self, start, end, parallelism):
        """At most ``parallelism`` tasks, each reading a run of consecutive files: a Spark task per
        file would cost ~60 ms each when many small files arrive at once."""
        lo, hi = start["files"], end["files"]
        n = hi - lo
        if n <= 0:
            return []
        parts = min(parallelism, n)
        bounds = [lo + n * i // parts for i in range(parts + 1)]
        return [(bounds[i], bounds[i + 1]) for i in range(parts)]

    def read(self, partition):
        listing = self._listing()
        first, stop = partition
        for index in range(first, stop):
            name = listing[index]
            try:
                records = self.fmt.parse(self.storage.read(name))
            except Exception as exc:
                raise ValueError(f"file source: cannot read {self.storage.url(name)} as {self.fmt.kind}: {exc}") from exc
            yield chunk_batch(records)


class FileSource(KeyspanSource):
    name = "File Source"

    def __init__(self, fmt: StreamFormat, paths: tuple[str, ...], continuous: bool, max_files: int | None):
        if len(paths) != 1:
            raise ValueError("FileSource reads one directory (or file) path")
        self.fmt = fmt
        self.path = paths[0]
        self.bounded = not continuous
        self.max_per_epoch = max_files

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> "FileSource.FileSourceBuilder":
        return FileSource.FileSourceBuilder(stream_format, paths)

    class FileSourceBuilder:
        def __init__(self, fmt, paths):
            self._fmt = fmt
            self._paths = paths
            self._continuous = False
            self._max_files = None

        def set_max_files_per_epoch(self, files: int):
            """keyspan: read at most this many files per epoch (Spark's maxFilesPerTrigger)."""
            self._max_files = int(files)
            return self

        def monitor_continuously(self, discovery_interval=None):
            self._continuous = True
            return self

        def process_static_file_set(self):
            self._continuous = False
            return self

        def build(self) -> "FileSource":
            return FileSource(self._fmt, self._paths, self._continuous, self._max_files)

    def fingerprint(self) -> str:
        return f"files:{os.path.abspath(self.path) if '://' not in self.path else self.path}:{self.fmt.kind}"

    def reader(self, storage, uid):
        root = Storage(self.path)
        if root.fs.isfile(root.full_path("")):
            parent = Storage(posixpath.dirname(root.uri))
            return FileReader(parent, self.fmt, [posixpath.basename(root.uri)])
        if not root.fs.exists(root.full_path("")):
            raise FileNotFoundError(f"file source: {self.path} does not exist")
        files = [n for n in root.list("") if not n.startswith((".", "_"))] if self.bounded else None
        return FileReader(root, self.fmt, files)
