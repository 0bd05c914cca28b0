"""A transactional row-format file sink (``FileSink.for_row_format``), exactly-once by two phases:
each task stages its epoch output under ``.staging/``; the driver renames staged files to their
final names only after the epoch's checkpoint committed. Renaming is idempotent, so publishing
again after a crash neither loses nor duplicates a file — also on an object store (``s3://``),
where a rename is a copy and a delete: publishing again after a crash between the two copies the
staged file over the identical final one and then deletes it.

The base path is any URI the checkpoint ``Storage`` supports; ``storage_options`` (a keyspan
extension) configure its fsspec file system, e.g. s3fs's ``endpoint_url``/``key``/``secret``."""

from __future__ import annotations

import posixpath

from keyspan.io.storage import Storage
from keyspan.common.serialization import Encoder

STAGING = ".staging"


class OutputFileConfig:
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
            self._prefix = "part"
            self._suffix = ""

        def with_part_prefix(self, prefix: str):
            self._prefix = prefix
            return self

        def with_part_suffix(self, suffix: str):
            self._suffix = suffix
            return self

        def build(self) -> "OutputFileConfig":
            return OutputFileConfig(self._prefix, self._suffix)


class FileSink:
    name = "File Sink"
    runs_in_task = True

    def __init__(self, base_path: str, encoder: Encoder, output_file_config: OutputFileConfig | None = None,
                 storage_options: dict | None = None):
        self.base_path = base_path
        self.encoder = encoder
        self.output_file_config = output_file_config or OutputFileConfig()
        self.storage_options = dict(storage_options or {})

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder) -> "FileSink.RowFormatBuilder":
        return FileSink.RowFormatBuilder(base_path, encoder)

    class RowFormatBuilder:
        def __init__(self, base_path: str, encoder: Encoder):
            self._base_path = base_path
            self._encoder = encoder
            self._config = OutputFileConfig()
            self._storage_options: dict = {}

        def with_output_file_config(self, output_file_config: OutputFileConfig):
            self._config = output_file_config
            return self

        def with_bucket_assigner(self, _assigner):
            return self

        def with_rolling_policy(self, _policy):
            return self

        def with_storage_options(self, storage_options: dict):
            """keyspan: options for the base path's fsspec file system (e.g. s3fs's ``endpoint_url``,
            ``key``, ``secret``); without them the environment configures it (``AWS_*`` variables)."""
            self._storage_options = dict(storage_options)
            return self

        def build(self) -> "FileSink":
            return FileSink(self._base_path, self._encoder, self._config, self._storage_options)

    def storage(self) -> Storage:
        return Storage(self.base_path, self.storage_options)

    def create_writer(self, subtask: int, epoch: int, token: str) -> "FileSinkWriter":
        return FileSinkWriter(self, subtask, epoch, token)

    def final_name(self, epoch: int, subtask: int) -> str:
        cfg = self.output_file_config
        return f"{cfg.part_prefix}-{epoch:010d}-{subtask:04d}{cfg.part_suffix}"

    def publish(self, handles: list[dict]) -> None:
        storage = self.storage()
        for h in handles:
            if storage.exists(h["staged"]):
                storage.rename(h["staged"], h["final"])
            elif not storage.exists(h["final"]):
                raise IOError(f"file sink '{self.base_path}': staged output {h['staged']} of a committed "
                              "epoch is missing and was never published")

    def discard(self, handles: list[dict]) -> None:
        storage = self.storage()
        for h in handles:
            storage.delete(h["staged"])


class FileSinkWriter:
    def __init__(self, sink: FileSink, subtask: int, epoch: int, token: str):
        self._encode = sink.encoder.encode
        self._sink = sink
        self._subtask = subtask
        self._epoch = epoch
        self._token = token
        self._parts: list[bytes] = []

    def write(self, value) -> None:
        self._parts.append(self._encode(value))

    def finish(self) -> dict | None:
        if not self._parts:
            return None
        staged = posixpath.join(STAGING, f"e{self._epoch:010d}-s{self._subtask:04d}-{self._token}")
        self._sink.storage().write(staged, b"".join(self._parts))
        return {"staged": staged, "final": self._sink.final_name(self._epoch, self._subtask)}
