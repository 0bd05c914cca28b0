"""``FileSource`` / ``FileSink`` under PyFlink's module path ``pyflink.datastream.connectors.file_system``."""

from keyspan.common.serialization import BulkWriterFactory
from keyspan.connectors.discarding_sink import DiscardingSink
from keyspan.connectors.file_compaction import FileCompactor, FileCompactStrategy
from keyspan.connectors.file_sink import (
    BucketAssigner,
    DefaultRollingPolicy,
    FileSink,
    OnCheckpointRollingPolicy,
    OutputFileConfig,
    RollingPolicy,
    StreamingFileSink,
)
from keyspan.connectors.file_source import (
    BulkFormat, FileEnumeratorProvider, FileSource, FileSplitAssignerProvider, StreamFormat,
)

FileSourceBuilder = FileSource.FileSourceBuilder

__all__ = ["BucketAssigner", "BulkFormat", "BulkWriterFactory", "DefaultRollingPolicy", "DiscardingSink", "FileCompactor",
           "FileCompactStrategy", "FileEnumeratorProvider", "FileSink", "FileSource", "FileSourceBuilder",
           "FileSplitAssignerProvider", "OnCheckpointRollingPolicy",
           "OutputFileConfig", "RollingPolicy", "StreamFormat", "StreamingFileSink"]
