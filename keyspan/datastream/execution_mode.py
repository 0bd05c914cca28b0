"""``RuntimeExecutionMode`` as in ``pyflink.datastream.execution_mode``."""

from enum import Enum


class RuntimeExecutionMode(Enum):
    """STREAMING: epochs of at most ``set_max_records_per_epoch`` records, checkpointed one by one.
    BATCH: a bounded job reads all of its input in one epoch (every source's per-epoch limit is
    lifted); the results are the same as STREAMING's, event-time timers fire at the end of input.
    AUTOMATIC: BATCH when every source is bounded, else STREAMING."""

    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2
