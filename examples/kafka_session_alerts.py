"""Seed 003's session/alert job on Kafka: events come from a topic, alerts go to another.

Each event is a JSON object {"entity", "event", "seq"} (login, interaction, logout). A
KeyedProcessFunction keeps, per entity, whether it is logged in and how many events of each type it
saw, and raises an alert when an interaction comes without a login. The generated log is valid, so
every alert would be a false alert: with exactly-once state and an EXACTLY_ONCE sink a
``read_committed`` consumer of the alerts topic sees none, however often the job is killed,
restarted or rescaled (``keyspan rescale session-alerts-kafka --parallelism 3`` while it runs).

Walk-through: docs/kafka.md. Set KAFKA_BOOTSTRAP (default 127.0.0.1:9092); the topics
``session-events`` and ``session-alerts`` are created and the events produced when
``python examples/kafka_session_alerts.py --produce`` runs.

Run:  keyspan run examples/kafka_session_alerts.py
"""

from __future__ import annotations

import json
import os
import sys

from keyspan.common import SimpleStringSchema, Types
from keyspan.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from keyspan.datastream.connectors.base import DeliveryGuarantee
from keyspan.datastream.connectors.kafka import (
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from keyspan.datastream.state import MapStateDescriptor, ValueStateDescriptor

BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
EVENTS, ALERTS = "session-events", "session-alerts"


class SessionValidator(KeyedProcessFunction):
    """Checks each entity's event sequence: an interaction must come after a login."""

    def open(self, runtime_context: RuntimeContext):
        self.logged_in = runtime_context.get_state(ValueStateDescriptor("logged_in", Types.BOOLEAN()))
        self.counts = runtime_context.get_map_state(MapStateDescriptor("counts", Types.STRING(), Types.LONG()))

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        event = value["event"]
        self.counts.put(event, (self.counts.get(event) or 0) + 1)
        if event == "login":
            self.logged_in.update(True)
        elif event == "logout":
            self.logged_in.clear()
        elif not self.logged_in.value():
            yield json.dumps({"alert": "interaction without login", "entity": ctx.get_current_key(),
                              "seq": value["seq"], "seen": dict(self.counts.items())})


class JsonEvent:
    """Value deserializer: one JSON object per Kafka record."""

    def deserialize(self, data: bytes) -> dict:
        return json.loads(data)


def produce_events(entities: int = 2_000) -> int:
    """Create the topics (4 partitions) and produce seed 003's valid log, keyed by entity."""
    import tempfile

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    sys.path.insert(0, os.path.dirname(__file__))
    from session_alerts import generate_log

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    existing = admin.list_topics(timeout=10).topics
    new = [NewTopic(t, 4, 1) for t in (EVENTS, ALERTS) if t not in existing]
    for f in (admin.create_topics(new).values() if new else ()):
        f.result()
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 20})
    count = 0
    with tempfile.TemporaryDirectory() as tmp:
        generate_log(tmp, entities=entities, files=1)
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name)) as f:
                for line in f:
                    if line.strip():
                        entity = json.loads(line)["entity"]
                        while True:
                            try:
                                producer.produce(EVENTS, key=entity.encode(), value=line.strip().encode())
                                break
                            except BufferError:
                                producer.poll(0.05)
                        count += 1
    producer.flush(60)
    return count


def build(env: StreamExecutionEnvironment) -> None:
    source = (KafkaSource.builder().set_bootstrap_servers(BOOTSTRAP).set_topics(EVENTS)
              .set_group_id("session-alerts").set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_value_only_deserializer(JsonEvent()).build())
    sink = (KafkaSink.builder().set_bootstrap_servers(BOOTSTRAP)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(ALERTS)
                                   .set_value_serialization_schema(SimpleStringSchema()).build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .set_transactional_id_prefix("session-alerts").build())
    (env.from_source(source, None, "session events").uid("session-events")
        .key_by(lambda event: event["entity"])
        .process(SessionValidator()).uid("session-validator").name("validate sessions")
        .sink_to(sink).uid("alerts"))


def main():
    if "--produce" in sys.argv:
        print(f"produced {produce_events()} events to {EVENTS} on {BOOTSTRAP}")
        return
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(500)
    env.set_max_records_per_epoch(2_000)
    build(env)
    env.execute("session-alerts-kafka")


if __name__ == "__main__":
    main()
