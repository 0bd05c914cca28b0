"""A job for Kafka crash tests: per-key counts from a Kafka topic to another topic, EXACTLY_ONCE.

Every output line is "key:n" — the n-th record of its key — so the expected output is known from the
input alone, whatever the epochs and the crashes."""

import os

from keyspan.common import SimpleStringSchema
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.base import DeliveryGuarantee
from keyspan.datastream.connectors.kafka import (
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from keyspan.datastream.state import ValueStateDescriptor

BOOTSTRAP = os.environ["KAFKA_JOB_BOOTSTRAP"]
SOURCE = os.environ["KAFKA_JOB_SOURCE"]
TARGET = os.environ["KAFKA_JOB_TARGET"]
PER_EPOCH = int(os.environ.get("KAFKA_JOB_PER_EPOCH", "100"))


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.n = runtime_context.get_state(ValueStateDescriptor("n"))

    def process_element(self, value, ctx):
        n = (self.n.value() or 0) + 1
        self.n.update(n)
        yield f"{ctx.get_current_key()}:{n}"


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.set_max_records_per_epoch(PER_EPOCH)
source = (KafkaSource.builder().set_bootstrap_servers(BOOTSTRAP).set_topics(SOURCE).set_group_id("kafka-counting")
          .set_value_only_deserializer(SimpleStringSchema()).set_bounded(KafkaOffsetsInitializer.latest()).build())
sink = (KafkaSink.builder().set_bootstrap_servers(BOOTSTRAP)
        .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(TARGET)
                               .set_value_serialization_schema(SimpleStringSchema()).build())
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .set_transactional_id_prefix(f"kafka-counting-{TARGET}").build())
(env.from_source(source, None, "events").uid("events")
    .key_by(lambda v: v).process(Count()).uid("count").name("count per key")
    .sink_to(sink).uid("out"))
env.execute("kafka-counting")
