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
    files, to ``checkpoint_path`` if given, else to the default checkpoint directory. The size limit
    is kept and read back; keyspan's checkpoints have none."""

    DEFAULT_MAX_STATE_SIZE = 5 * 1024 * 1024

    def __init__(self, checkpoint_path: str | None = None, max_state_size: int | None = None):
        super().__init__(checkpoint_path)
        self.max_state_size = self.DEFAULT_MAX_STATE_SIZE if max_state_size is None else int(max_state_size)

    def get_max_state_size(self) -> int:
        return self.max_state_size

    def get_savepoint_path(self) -> str | None:
        """None, as in Flink without ``state.savepoints.dir``: savepoints go where they are asked to."""
        return None


class FileSystemCheckpointStorage(CheckpointStorage):
    """Checkpoint files under ``checkpoint_path``. Flink's small-state threshold and write buffer size
    are kept and read back (Flink's defaults when not given); keyspan writes every state to files."""

    MAX_FILE_STATE_THRESHOLD = 1024 * 1024  # Flink's bound on the small-state threshold (1 MiB)

    def __init__(self, checkpoint_path: str, file_state_size_threshold: int | None = None,
                 write_buffer_size: int = -1):
        if checkpoint_path is None:
            raise ValueError("checkpoint_path must not be None")
        if file_state_size_threshold is not None and file_state_size_threshold > self.MAX_FILE_STATE_THRESHOLD:
            raise ValueError(f"The maximal file state size threshold is {self.MAX_FILE_STATE_THRESHOLD}, "
                             f"got {file_state_size_threshold}")
        super().__init__(checkpoint_path)
        self.file_state_size_threshold = file_state_size_threshold
        self.write_buffer_size = write_buffer_size

    def get_savepoint_path(self) -> str | None:
        return None

    def get_min_file_size_threshold(self) -> int:
        threshold = self.file_state_size_threshold
        return 20 * 1024 if threshold is None or threshold < 0 else int(threshold)

    def get_write_buffer_size(self) -> int:
        return 4096 if self.write_buffer_size is None or self.write_buffer_size < 0 else int(self.write_buffer_size)


class CustomCheckpointStorage(CheckpointStorage):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("not supported by keyspan: CustomCheckpointStorage wraps a Java class; "
                                  "use FileSystemCheckpointStorage(uri) or set_checkpoint_storage_dir(uri) instead")
