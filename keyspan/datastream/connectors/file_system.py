"""``FileSource`` / ``FileSink`` under PyFlink's module path ``pyflink.datastream.connectors.file_system``."""

from keyspan.connectors.file_sink import FileSink, OutputFileConfig
from keyspan.connectors.discarding_sink import DiscardingSink
from keyspan.connectors.file_source import FileSource, StreamFormat

__all__ = ["DiscardingSink", "FileSink", "FileSource", "OutputFileConfig", "StreamFormat"]
