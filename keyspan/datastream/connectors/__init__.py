"""Connectors with PyFlink's module paths (``pyflink.datastream.connectors``), re-exporting the
names PyFlink's package installs: ``from keyspan.datastream.connectors import FileSink`` works as
``from pyflink.datastream.connectors import FileSink`` does."""

from keyspan.connectors.sources import KeyspanSource as Source
from keyspan.datastream.connectors.base import DeliveryGuarantee
from keyspan.datastream.connectors.file_system import (
    BucketAssigner,
    FileSink,
    FileSource,
    FileSourceBuilder,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
    StreamingFileSink,
)
from keyspan.datastream.connectors.number_seq import NumberSequenceSource

__all__ = ["BucketAssigner", "DeliveryGuarantee", "FileSink", "FileSource", "FileSourceBuilder", "NumberSequenceSource",
           "OutputFileConfig", "RollingPolicy", "Source", "StreamFormat", "StreamingFileSink"]
