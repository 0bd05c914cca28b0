"""``CheckpointingMode`` as in ``pyflink.datastream.checkpointing_mode``."""


class CheckpointingMode:
    """keyspan's checkpoints are always exactly once (an epoch is an aligned cut); AT_LEAST_ONCE is
    accepted and gives the same, stronger guarantee."""

    EXACTLY_ONCE = "EXACTLY_ONCE"
    AT_LEAST_ONCE = "AT_LEAST_ONCE"
