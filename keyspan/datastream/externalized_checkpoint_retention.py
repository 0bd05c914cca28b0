"""``ExternalizedCheckpointRetention`` as in ``pyflink.datastream.externalized_checkpoint_retention``."""

from enum import Enum


class ExternalizedCheckpointRetention(Enum):
    """What happens to a job's checkpoints when it is cancelled. keyspan's checkpoints live in
    checkpoint storage and the metadata store whatever the setting (a restart resumes from them), so
    every value behaves as RETAIN_ON_CANCELLATION; ``keyspan checkpoints`` lists them and deleting a
    job's checkpoints is an explicit operation."""

    DELETE_ON_CANCELLATION = 0
    RETAIN_ON_CANCELLATION = 1
    NO_EXTERNALIZED_CHECKPOINTS = 2


ExternalizedCheckpointCleanup = ExternalizedCheckpointRetention  # PyFlink 1.x's name
