"""Checkpoint storage names as in ``pyflink.datastream.checkpoint_storage``: where checkpoint files
go. Any URI keyspan's storage reads (``file://``, ``s3://``, ``hdfs://``...) works."""

from __future__ import annotations


class CheckpointStorage:
    """Where checkpoints are written; ``None`` keeps the default (the run's workdir)."""

    def __init__(self, checkpoint_path: str | None = None):
        self.checkpoint_path = checkpoint_path

    def get_checkpoint_path(self) -> str | None:
        return self.checkpoint_path


class JobManagerCheckpointStorage(CheckpointStorage):
    """Flink keeps these checkpoints in the JobManager's memory; keyspan always writes checkpoint
    files, to ``checkpoint_path`` if given, else to the default checkpoint directory."""

    def __init__(self, checkpoint_path: str | None = None, max_state_size: int | None = None):
        super().__init__(checkpoint_path)


class FileSystemCheckpointStorage(CheckpointStorage):
    def __init__(self, checkpoint_path: str, file_state_size_threshold: int | None = None,
                 write_buffer_size: int | None = None):
        super().__init__(checkpoint_path)


class CustomCheckpointStorage(CheckpointStorage):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("not supported by keyspan: CustomCheckpointStorage wraps a Java class; "
                                  "use FileSystemCheckpointStorage(uri) or set_checkpoint_storage_dir(uri) instead")
