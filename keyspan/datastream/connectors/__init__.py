"""Connectors with PyFlink's module paths (``pyflink.datastream.connectors``), re-exporting the
names PyFlink's package installs: ``from keyspan.datastream.connectors import FileSink`` works as
``from pyflink.datastream.connectors import FileSink`` does."""

from keyspan.common.unsupported import INSTEAD_OF_A_SINK, INSTEAD_OF_A_SOURCE, INSTEAD_OF_DYNAMIC_KAFKA
from keyspan.common.unsupported import module_getattr as _module_getattr
from keyspan.datastream.connectors.base import DeliveryGuarantee, Sink, Source
from keyspan.datastream.connectors.file_system import (
    BucketAssigner,
    FileEnumeratorProvider,
    FileSink,
    FileSource,
    FileSourceBuilder,
    FileSplitAssignerProvider,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
    StreamingFileSink,
)
from keyspan.datastream.connectors.jdbc import JdbcConnectionOptions, JdbcExecutionOptions, JdbcSink
from keyspan.datastream.connectors.kafka import (
    FlinkKafkaConsumer, FlinkKafkaProducer, KafkaRecordDeserializationSchema, KafkaSource, Semantic,
)
from keyspan.datastream.connectors.number_seq import NumberSequenceSource

__all__ = ["BucketAssigner", "DeliveryGuarantee", "FileEnumeratorProvider", "FileSink", "FileSource", "FileSourceBuilder",
           "FileSplitAssignerProvider", "FlinkKafkaConsumer", "FlinkKafkaProducer", "JdbcConnectionOptions",
           "JdbcExecutionOptions", "JdbcSink", "KafkaRecordDeserializationSchema", "KafkaSource", "NumberSequenceSource",
           "OutputFileConfig", "RollingPolicy", "Semantic", "Sink", "Source", "StreamFormat", "StreamingFileSink"]

# the connectors PyFlink installs here that keyspan does not have
__getattr__ = _module_getattr("keyspan.datastream.connectors", {
    **dict.fromkeys(["PulsarSource", "PulsarSourceBuilder", "StartCursor", "StopCursor", "RMQSource",
                     "RMQConnectionConfig"], INSTEAD_OF_A_SOURCE),
    "RMQSink": INSTEAD_OF_A_SINK,
    **dict.fromkeys(["DynamicKafkaSource", "DynamicKafkaSourceBuilder", "KafkaMetadataService",
                     "KafkaStreamSetSubscriber", "KafkaStreamSubscriber",
                     "StreamPatternSubscriber", "SingleClusterTopicMetadataService"],
                    INSTEAD_OF_DYNAMIC_KAFKA),
})
