"""Kafka in and out with confluent-kafka inside Spark tasks: offsets in keyspan's checkpoints,
exactly-once output through Kafka transactions published after each checkpoint (docs/kafka.md)."""

from keyspan.connectors.kafka.legacy import FlinkKafkaConsumer, FlinkKafkaProducer, Semantic
from keyspan.connectors.kafka.sink import (
    DeliveryGuarantee,
    KafkaRecordSerializationSchema,
    KafkaRecordSerializationSchemaBuilder,
    KafkaSink,
    KafkaSinkBuilder,
    KafkaTopicSelector,
)
from keyspan.connectors.kafka.source import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaRecord,
    KafkaRecordDeserializationSchema,
    KafkaSource,
    KafkaSourceBuilder,
    KafkaTopicPartition,
)

__all__ = ["DeliveryGuarantee", "FlinkKafkaConsumer", "FlinkKafkaProducer", "KafkaOffsetResetStrategy",
           "KafkaOffsetsInitializer", "KafkaRecord", "KafkaRecordDeserializationSchema",
           "KafkaRecordSerializationSchema", "KafkaRecordSerializationSchemaBuilder", "KafkaSink", "KafkaSinkBuilder",
           "KafkaSource", "KafkaSourceBuilder", "KafkaTopicPartition", "KafkaTopicSelector", "Semantic"]
