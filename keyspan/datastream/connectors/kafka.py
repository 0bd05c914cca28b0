"""PyFlink's ``pyflink.datastream.connectors.kafka``: ``KafkaSource``, ``KafkaSink`` and the legacy
``FlinkKafkaConsumer``/``FlinkKafkaProducer`` (see docs/kafka.md for what each guarantees)."""

from keyspan.connectors.kafka import (
    FlinkKafkaConsumer,
    FlinkKafkaProducer,
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaRecord,
    KafkaRecordDeserializationSchema,
    KafkaRecordSerializationSchema,
    KafkaRecordSerializationSchemaBuilder,
    KafkaSink,
    KafkaSinkBuilder,
    KafkaSource,
    KafkaSourceBuilder,
    KafkaTopicPartition,
    KafkaTopicSelector,
    Semantic,
)
from keyspan.connectors.kafka.sink import DeliveryGuarantee

__all__ = ["DeliveryGuarantee", "FlinkKafkaConsumer", "FlinkKafkaProducer", "KafkaOffsetResetStrategy",
           "KafkaOffsetsInitializer", "KafkaRecord", "KafkaRecordDeserializationSchema",
           "KafkaRecordSerializationSchema", "KafkaRecordSerializationSchemaBuilder", "KafkaSink", "KafkaSinkBuilder",
           "KafkaSource", "KafkaSourceBuilder", "KafkaTopicPartition", "KafkaTopicSelector", "Semantic"]
