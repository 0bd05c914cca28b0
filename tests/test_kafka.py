"""The Kafka connector against a real broker (noida-db on loopback) and a real local Spark."""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("confluent_kafka", reason="confluent-kafka (keyspan[kafka]) is not installed")

from kafka_util import add_partitions, new_topic, produce, read_all  # noqa: E402

from keyspan.common import SimpleStringSchema  # noqa: E402
from keyspan.datastream import KeyedProcessFunction  # noqa: E402
from keyspan.datastream.connectors.base import DeliveryGuarantee  # noqa: E402
from keyspan.datastream.connectors.kafka import (  # noqa: E402
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from keyspan.datastream.state import ValueStateDescriptor  # noqa: E402


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.n = runtime_context.get_state(ValueStateDescriptor("n"))

    def process_element(self, value, ctx):
        n = (self.n.value() or 0) + 1
        self.n.update(n)
        yield f"{ctx.get_current_key()}:{n}"


def _source(bootstrap, topic, start=None, bounded=True, group=None):
    b = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(topic)
         .set_value_only_deserializer(SimpleStringSchema()))
    if start is not None:
        b.set_starting_offsets(start)
    if group:
        b.set_group_id(group)
    if bounded:
        b.set_bounded(KafkaOffsetsInitializer.latest())
    return b.build()


def test_bounded_read_keyed_count_exactly_once_to_kafka(env, kafka_broker):
    src, dst = new_topic(kafka_broker, 3), new_topic(kafka_broker, 2)
    produce(kafka_broker, src, [(None, f"k{i % 7}") for i in range(300)], partition_of=lambda i: i % 3)
    env.set_max_records_per_epoch(70)
    sink = (KafkaSink.builder().set_bootstrap_servers(kafka_broker)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(dst)
                                   .set_value_serialization_schema(SimpleStringSchema()).build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_transactional_id_prefix(f"ks-{dst}").build())
    (env.from_source(_source(kafka_broker, src), None, "events").uid("events")
        .key_by(lambda v: v).process(Count()).uid("count").sink_to(sink).uid("out"))
    result = env.execute("kafka-bounded")
    assert result.epochs >= 5  # 300 records at 70 per epoch
    out = read_all(kafka_broker, dst)
    expected = {f"k{k}:{n}" for k in range(7) for n in range(1, 300 // 7 + (1 if k < 300 % 7 else 0) + 1)}
    assert sorted(out) == sorted(expected)
