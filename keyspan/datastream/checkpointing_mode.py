"""``CheckpointingMode`` as in ``pyflink.datastream.checkpointing_mode``."""

from enum import Enum

__all__ = ["CheckpointingMode"]


class CheckpointingMode(Enum):
    """keyspan's checkpoints are always exactly once (an epoch is an aligned cut); AT_LEAST_ONCE is
    accepted and gives the same, stronger guarantee."""

    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1
