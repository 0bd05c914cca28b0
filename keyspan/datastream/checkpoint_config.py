"""``CheckpointConfig``: how often epochs are checkpointed and how checkpoints are kept."""

from __future__ import annotations


from keyspan.datastream.checkpointing_mode import CheckpointingMode
from keyspan.datastream.externalized_checkpoint_retention import (
    ExternalizedCheckpointCleanup,
    ExternalizedCheckpointRetention,
)

__all__ = ["CheckpointConfig", "CheckpointingMode", "ExternalizedCheckpointCleanup", "ExternalizedCheckpointRetention"]


class CheckpointConfig:
    def __init__(self):
        self.interval_ms = 0
        self.enabled = False
        self.mode = CheckpointingMode.EXACTLY_ONCE
        self.storage_uri: str | None = None
        self._storage = None  # the CheckpointStorage object set, returned as it was given
        self.storage_options: dict = {}
        self.num_retained = 3
        self.tolerable_failures = 0
        self.max_concurrent = 1
        self.max_delta_chain = 32
        self.min_pause_ms = 0
        self.timeout_ms = 10 * 60 * 1000
        self.retention = ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
        self.unaligned = False
        self.force_unaligned = False

    def is_checkpointing_enabled(self) -> bool:
        return self.enabled

    def get_checkpoint_interval(self) -> int:
        return self.interval_ms

    def set_checkpoint_interval(self, checkpoint_interval: int) -> "CheckpointConfig":
        if checkpoint_interval < 0:
            raise ValueError("checkpoint interval must be >= 0 ms")
        self.interval_ms = int(checkpoint_interval)
        self.enabled = True
        return self

    def get_checkpointing_mode(self):
        return self.mode

    def set_checkpointing_mode(self, checkpointing_mode: CheckpointingMode) -> "CheckpointConfig":
        """Accepted for either mode: an epoch's checkpoint is an aligned cut, so always exactly once."""
        if isinstance(checkpointing_mode, str) and checkpointing_mode.upper() in CheckpointingMode.__members__:
            checkpointing_mode = CheckpointingMode[checkpointing_mode.upper()]  # the configuration key's form
        if not isinstance(checkpointing_mode, CheckpointingMode):
            raise TypeError(f"set_checkpointing_mode takes CheckpointingMode.EXACTLY_ONCE or "
                            f"CheckpointingMode.AT_LEAST_ONCE, not {checkpointing_mode!r}")
        self.mode = checkpointing_mode
        return self

    def set_checkpoint_storage_dir(self, checkpoint_path: str) -> "CheckpointConfig":
        self.storage_uri = checkpoint_path
        return self

    def set_checkpoint_storage(self, storage) -> "CheckpointConfig":
        """A ``CheckpointStorage`` (``FileSystemCheckpointStorage(uri)``) or a URI string."""
        path = storage if isinstance(storage, str) else getattr(storage, "checkpoint_path", None)
        if path is not None:
            self.storage_uri = path
        self._storage = None if isinstance(storage, str) else storage
        return self

    def get_checkpoint_storage(self):
        from keyspan.datastream.checkpoint_storage import FileSystemCheckpointStorage

        storage = self._storage
        if storage is not None and storage.get_checkpoint_path() in (None, self.storage_uri):
            return storage
        return FileSystemCheckpointStorage(self.storage_uri) if self.storage_uri else None

    def set_min_pause_between_checkpoints(self, min_pause_between_checkpoints: int) -> "CheckpointConfig":
        """The least time between the starts of two epochs, in ms: the epoch trigger interval is
        raised to it (every epoch is a checkpoint, so pausing checkpoints means pausing epochs)."""
        if min_pause_between_checkpoints < 0:
            raise ValueError("min pause between checkpoints must be >= 0 ms")
        self.min_pause_ms = int(min_pause_between_checkpoints)
        return self

    def get_min_pause_between_checkpoints(self) -> int:
        return self.min_pause_ms

    def set_checkpoint_timeout(self, checkpoint_timeout: int) -> "CheckpointConfig":
        """Recorded; an epoch that cannot write its checkpoint fails and runs again (see
        ``set_tolerable_checkpoint_failure_number``) rather than timing out."""
        if checkpoint_timeout < 1:
            raise ValueError("checkpoint timeout must be >= 1 ms")
        self.timeout_ms = int(checkpoint_timeout)
        return self

    def get_checkpoint_timeout(self) -> int:
        return self.timeout_ms

    def set_externalized_checkpoint_retention(self, retention_mode) -> "CheckpointConfig":
        """Recorded: keyspan always keeps a cancelled job's checkpoints (see ExternalizedCheckpointRetention)."""
        self.retention = retention_mode
        return self

    def enable_externalized_checkpoints(self, cleanup_mode) -> "CheckpointConfig":
        return self.set_externalized_checkpoint_retention(cleanup_mode)

    def get_externalized_checkpoint_retention(self):
        return self.retention

    def get_externalized_checkpoint_cleanup(self):
        return self.retention

    def is_externalized_checkpoints_enabled(self) -> bool:
        return self.retention != ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> "CheckpointConfig":
        """Accepted; not needed: an epoch boundary is a cut with no in-flight records to align."""
        self.unaligned = bool(enabled)
        return self

    def disable_unaligned_checkpoints(self) -> "CheckpointConfig":
        return self.enable_unaligned_checkpoints(False)

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self.unaligned

    def set_force_unaligned_checkpoints(self, force_unaligned_checkpoints: bool = True) -> "CheckpointConfig":
        """Accepted, as ``enable_unaligned_checkpoints``."""
        self.force_unaligned = bool(force_unaligned_checkpoints)
        return self

    def is_force_unaligned_checkpoints(self) -> bool:
        return self.force_unaligned

    def set_aligned_checkpoint_timeout(self, alignment_timeout) -> "CheckpointConfig":
        """Accepted: there is no barrier alignment to time out."""
        return self

    def get_aligned_checkpoint_timeout(self):
        from keyspan.common.time import Duration

        return Duration.of_millis(0)

    set_alignment_timeout = set_aligned_checkpoint_timeout
    get_alignment_timeout = get_aligned_checkpoint_timeout

    def set_fail_on_checkpointing_errors(self, fail_on_checkpointing_errors: bool) -> "CheckpointConfig":
        """Flink 1.x's switch: True fails the job on the first failed checkpoint (tolerable failures 0)."""
        if fail_on_checkpointing_errors:
            self.tolerable_failures = 0
        elif self.tolerable_failures == 0:
            self.tolerable_failures = 2**31 - 1
        return self

    def is_fail_on_checkpointing_errors(self) -> bool:
        return self.tolerable_failures == 0

    def get_checkpoint_storage_dir(self) -> str | None:
        return self.storage_uri

    def set_checkpoint_storage_options(self, storage_options: dict) -> "CheckpointConfig":
        """keyspan: options for the fsspec file system of the checkpoint storage dir (for ``s3://``,
        s3fs's ``key``, ``secret``, ``endpoint_url``, ``client_kwargs``, ``config_kwargs``, ...).
        They travel with every Spark task; credentials are better left to the environment or an
        instance role where the executors can get them (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...)."""
        if not isinstance(storage_options, dict):
            raise TypeError("checkpoint storage options must be a dict")
        self.storage_options = dict(storage_options)
        return self

    def get_checkpoint_storage_options(self) -> dict:
        return dict(self.storage_options)

    def set_tolerable_checkpoint_failure_number(self, tolerable_checkpoint_failure_number: int) -> "CheckpointConfig":
        self.tolerable_failures = int(tolerable_checkpoint_failure_number)
        return self

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return self.tolerable_failures

    def set_max_concurrent_checkpoints(self, max_concurrent_checkpoints: int) -> "CheckpointConfig":
        """A limit, as in Flink: keyspan checkpoints its epochs one at a time, in order, which any limit
        of at least one allows."""
        if max_concurrent_checkpoints < 1:
            raise ValueError("max concurrent checkpoints must be >= 1")
        self.max_concurrent = int(max_concurrent_checkpoints)
        return self

    def get_max_concurrent_checkpoints(self) -> int:
        return self.max_concurrent

    def set_num_retained_checkpoints(self, number: int) -> "CheckpointConfig":
        """keyspan: how many completed checkpoints keep their files (Flink's state.checkpoints.num-retained)."""
        if number < 1:
            raise ValueError("at least one checkpoint must be retained")
        self.num_retained = int(number)
        return self

    def get_num_retained_checkpoints(self) -> int:
        return self.num_retained

    def set_max_delta_chain(self, deltas: int) -> "CheckpointConfig":
        """keyspan: a subtask writes a full snapshot of its key groups once the delta files since its
        last full snapshot outweigh it, or number this many — so a restore reads a bounded chain."""
        if deltas < 1:
            raise ValueError("the delta chain must allow at least one delta")
        self.max_delta_chain = int(deltas)
        return self
