"""PyFlink's legacy Kafka names, ``FlinkKafkaConsumer`` and ``FlinkKafkaProducer``, on top of
``KafkaSource`` and ``KafkaSink`` (same offsets in checkpoints, same delivery guarantees)."""

from __future__ import annotations

from enum import Enum

from keyspan.connectors.kafka.sink import DeliveryGuarantee, KafkaRecordSerializationSchema, KafkaSink
from keyspan.connectors.kafka.source import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaSource,
    KafkaSourceBuilder,
)


class FlinkKafkaConsumer(KafkaSource):
    """``FlinkKafkaConsumer(topics, deserialization_schema, properties)``: reads from the group's
    committed offsets by default (``auto.offset.reset`` where there are none), as Flink's does; use
    with ``env.add_source(consumer)``."""

    def __init__(self, topics, deserialization_schema, properties: dict):
        builder = KafkaSourceBuilder().set_properties(properties)
        builder.set_topics(*([topics] if isinstance(topics, str) else topics))
        builder.set_value_only_deserializer(deserialization_schema)
        reset = str(properties.get("auto.offset.reset", "latest")).lower()
        builder.set_starting_offsets(KafkaOffsetsInitializer.committed_offsets(
            KafkaOffsetResetStrategy.EARLIEST if reset in ("earliest", "smallest") else KafkaOffsetResetStrategy.LATEST))
        super().__init__(builder)

    def set_commit_offsets_on_checkpoints(self, commit_on_checkpoints: bool) -> "FlinkKafkaConsumer":
        self.commit_offsets_on_checkpoint = bool(commit_on_checkpoints)
        return self

    def set_start_from_earliest(self) -> "FlinkKafkaConsumer":
        self.starting_offsets = KafkaOffsetsInitializer.earliest()
        return self

    def set_start_from_latest(self) -> "FlinkKafkaConsumer":
        self.starting_offsets = KafkaOffsetsInitializer.latest()
        return self

    def set_start_from_timestamp(self, startup_offsets_timestamp: int) -> "FlinkKafkaConsumer":
        self.starting_offsets = KafkaOffsetsInitializer.timestamp(startup_offsets_timestamp)
        return self

    def set_start_from_group_offsets(self) -> "FlinkKafkaConsumer":
        self.starting_offsets = KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.LATEST)
        return self

    def disable_filter_restored_partitions_with_subscribed_topics(self) -> "FlinkKafkaConsumer":
        return self


class Semantic(Enum):
    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1
    NONE = 2


class FlinkKafkaProducer(KafkaSink):
    """``FlinkKafkaProducer(topic, serialization_schema, producer_config, semantic=...)``: a KafkaSink
    writing values to one topic; use with ``ds.add_sink(producer)``. EXACTLY_ONCE takes its
    transactional id prefix from ``transactional.id`` in the config, else ``keyspan-<topic>``."""

    def __init__(self, topic: str, serialization_schema, producer_config: dict, kafka_producer_pool_size: int = 5,
                 semantic: Semantic = Semantic.AT_LEAST_ONCE):
        config = dict(producer_config)
        servers = config.pop("bootstrap.servers", None)
        if not servers:
            raise ValueError("FlinkKafkaProducer needs 'bootstrap.servers' in producer_config")
        prefix = config.pop("transactional.id", None) or f"keyspan-{topic}"
        super().__init__(servers, KafkaRecordSerializationSchema(topic, None, None, serialization_schema),
                         DeliveryGuarantee[semantic.name], prefix, config)

    def set_log_failures_only(self, log_failures_only: bool) -> "FlinkKafkaProducer":
        return self

    def set_flush_on_checkpoint(self, flush_on_checkpoint: bool) -> "FlinkKafkaProducer":
        return self

    def set_write_timestamp_to_kafka(self, write_timestamp_to_kafka: bool) -> "FlinkKafkaProducer":
        return self

    def ignore_failures_after_transaction_timeout(self) -> "FlinkKafkaProducer":
        return self
