"""The Kafka sink, with Flink's three delivery guarantees.

* ``EXACTLY_ONCE`` — two phases, like keyspan's file sink. Each task stages its epoch's records in the
  job's checkpoint storage; after the epoch's checkpoint commits, the driver publishes them in one Kafka
  transaction (transactional id ``<prefix>-publisher``, stable across restarts) that also commits the
  epoch number as the offset of a marker partition in the consumer group ``<prefix>.keyspan-published``.
  Both become visible together or not at all, so after a crash the restarted driver reads the marker and
  skips epochs that were already published: every record reaches ``read_committed`` consumers once.
  Opening the transactional producer again aborts a transaction a killed driver left open.
* ``AT_LEAST_ONCE`` — tasks produce while they run and wait for every acknowledgement before the
  epoch can commit; a retried or replayed epoch produces again (duplicates, no loss).
* ``NONE`` — tasks produce and do not wait for acknowledgements.
"""

from __future__ import annotations

import posixpath
import sys
from enum import Enum

from keyspan.connectors.kafka.clients import CLIENT_LOG, owned, release, shared_producer
from keyspan.connectors.sinks import StagingSink, StagingWriter, clean_up_to, incarnation, staged_records
from keyspan.io.storage import safe_name

STAGING = "kafka-staging"


class DeliveryGuarantee(Enum):
    """PyFlink's ``pyflink.datastream.connectors.base.DeliveryGuarantee``."""

    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1
    NONE = 2


class KafkaTopicSelector:
    """Picks the topic of each record (``apply``)."""

    def apply(self, data) -> str:
        raise NotImplementedError


class KafkaRecordSerializationSchema:
    """Turns a record into (topic, key bytes, value bytes)."""

    def __init__(self, topic, topic_selector, key_schema, value_schema):
        self.topic = topic
        self.topic_selector = topic_selector
        self.key_schema = key_schema
        self.value_schema = value_schema

    @staticmethod
    def builder() -> "KafkaRecordSerializationSchemaBuilder":
        return KafkaRecordSerializationSchemaBuilder()

    def serialize(self, element) -> tuple[str, bytes | None, bytes]:
        topic = self.topic if self.topic_selector is None else self.topic_selector.apply(element)
        key = self.key_schema.serialize(element) if self.key_schema is not None else None
        return topic, key, self.value_schema.serialize(element)


class KafkaRecordSerializationSchemaBuilder:
    def __init__(self):
        self._topic = None
        self._selector = None
        self._key = None
        self._value = None

    def set_topic(self, topic: str) -> "KafkaRecordSerializationSchemaBuilder":
        self._topic, self._selector = topic, None
        return self

    def set_topic_selector(self, topic_selector) -> "KafkaRecordSerializationSchemaBuilder":
        if not isinstance(topic_selector, KafkaTopicSelector) and not callable(topic_selector):
            raise TypeError("topic_selector must be KafkaTopicSelector or a callable")
        if not isinstance(topic_selector, KafkaTopicSelector):
            fn = topic_selector
            topic_selector = type("TopicSelectorFunctionAdapter", (KafkaTopicSelector,), {"apply": lambda s, d: fn(d)})()
        self._selector, self._topic = topic_selector, None
        return self

    def set_key_serialization_schema(self, key_serialization_schema) -> "KafkaRecordSerializationSchemaBuilder":
        self._key = key_serialization_schema
        return self

    def set_value_serialization_schema(self, value_serialization_schema) -> "KafkaRecordSerializationSchemaBuilder":
        self._value = value_serialization_schema
        return self

    def build(self) -> KafkaRecordSerializationSchema:
        if self._value is None:
            raise ValueError("KafkaRecordSerializationSchema needs set_value_serialization_schema(...)")
        if self._topic is None and self._selector is None:
            raise ValueError("KafkaRecordSerializationSchema needs set_topic(...) or set_topic_selector(...)")
        return KafkaRecordSerializationSchema(self._topic, self._selector, self._key, self._value)


def _produce(producer, topic, key, value, on_delivery=None):
    while True:
        try:
            producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
            return
        except BufferError:  # the local queue is full: let deliveries drain
            producer.poll(0.05)


class KafkaSink(StagingSink):
    """PyFlink's ``KafkaSink``: build with ``KafkaSink.builder()``, use with ``ds.sink_to(sink)``."""

    name = "Kafka Sink"

    def __init__(self, bootstrap_servers: str, serializer: KafkaRecordSerializationSchema,
                 guarantee: DeliveryGuarantee, transactional_id_prefix: str, properties: dict):
        from keyspan.connectors.kafka.source import require_client

        require_client()
        self.bootstrap_servers = bootstrap_servers
        self.serializer = serializer
        self.delivery_guarantee = guarantee
        self.transactional_id_prefix = transactional_id_prefix
        self.properties = dict(properties)
        self.staging = None  # the job's checkpoint storage (EXACTLY_ONCE stages there)
        self._publisher = None  # driver side: the transactional producer and the published epoch

    @staticmethod
    def builder() -> "KafkaSinkBuilder":
        return KafkaSinkBuilder()

    def use_checkpoint_storage(self, storage, uid: str) -> None:
        """The runtime hands the job's checkpoint storage to the sink (tasks and driver alike); the
        staging folder is named by the transactional id prefix, which also names the published marker."""
        self.staging = storage.child(posixpath.join(STAGING, safe_name(self.transactional_id_prefix)))

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_publisher"] = None
        return state

    def _config(self, **extra) -> dict:
        config = dict(self.properties)
        config["bootstrap.servers"] = self.bootstrap_servers
        config["logger"] = CLIENT_LOG
        config.update(extra)
        return config

    # -- tasks -----------------------------------------------------------------------------------------
    def create_writer(self, subtask: int, epoch: int, token: str):
        if self.delivery_guarantee == DeliveryGuarantee.EXACTLY_ONCE:
            return StagingWriter(self.staging, self.serializer.serialize, subtask, epoch, token, "kafka sink")
        return _DirectWriter(self, subtask)

    # -- the driver, after the checkpoint committed ---------------------------------------------------------
    @property
    def marker_group(self) -> str:
        return f"{self.transactional_id_prefix}.keyspan-published"

    @property
    def marker_topic(self) -> str:
        """The partition whose committed offset (in ``marker_group``) records the published epoch."""
        return self.serializer.topic or f"{self.transactional_id_prefix}.keyspan-published"

    def _open_publisher(self):
        from confluent_kafka import Consumer, Producer, TopicPartition

        producer = owned(Producer(self._config(**{"transactional.id": f"{self.transactional_id_prefix}-publisher",
                                                  "enable.idempotence": True})))
        producer.init_transactions(30)  # fences a killed driver's producer and aborts its open transaction
        group = owned(Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": self.marker_group,
                                "enable.auto.commit": False, "logger": CLIENT_LOG}))
        life = incarnation(self.staging)
        mark = group.committed([TopicPartition(self.marker_topic, 0)], timeout=30)[0]
        published = mark.offset - 1 if mark.offset >= 0 and mark.metadata == life else -1
        self._publisher = [producer, group, published, life]
        return self._publisher

    def publish(self, handles: list[dict]) -> None:
        if not handles:
            return
        from confluent_kafka import TopicPartition

        producer, group, published, life = self._publisher or self._open_publisher()
        epoch = handles[0]["epoch"]
        if epoch > published:
            producer.begin_transaction()
            try:
                for topic, key, value in staged_records(self.staging, handles):
                    _produce(producer, topic, key, value)
                producer.send_offsets_to_transaction([TopicPartition(self.marker_topic, 0, epoch + 1,
                                                                     metadata=life)],
                                                     group.consumer_group_metadata(), 60)
                producer.commit_transaction(120)
            except BaseException:
                self._abort(producer)
                raise
            self._publisher[2] = epoch
        clean_up_to(self.staging, epoch)

    def _abort(self, producer) -> None:
        try:
            producer.abort_transaction(30)
        except Exception as exc:  # noqa: BLE001 — the next init_transactions aborts it anyway
            print(f"keyspan: kafka sink: aborting the transaction failed: {exc}", file=sys.stderr)
        if self._publisher is not None:
            release(*self._publisher[:2])  # the next publish opens them again, fencing this producer
        self._publisher = None


NONE_FLUSH_S = 30  # how long a NONE epoch waits for its records to leave; what is left may be lost


class _DirectWriter:
    """AT_LEAST_ONCE / NONE: produce while the task runs, and hand every record to the broker before the
    task ends; AT_LEAST_ONCE fails the epoch when one was not acknowledged, NONE does not. (Flink's NONE
    flushes at the end of input: a bounded job's output is in the topic when ``execute()`` returns,
    so a job started next reads it. An epoch cannot tell it is the last, so every epoch flushes.)"""

    def __init__(self, sink: KafkaSink, subtask: int):
        self.sink = sink
        self.serialize = sink.serializer.serialize
        self.producer = shared_producer(sink._config(**{"enable.idempotence": True, "linger.ms": 5}))
        self.errors: list = []
        self.wait = sink.delivery_guarantee == DeliveryGuarantee.AT_LEAST_ONCE
        self.on_delivery = self._delivered if self.wait else None

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(f"topic {msg.topic()}: {err}")

    def write(self, value) -> None:
        topic, key, data = self.serialize(value)
        _produce(self.producer, topic, key, data, self.on_delivery)

    def finish(self) -> None:
        left = self.producer.flush(120 if self.wait else NONE_FLUSH_S)
        if self.wait and (left or self.errors):
            raise IOError(f"kafka sink: {left} record(s) not acknowledged by {self.sink.bootstrap_servers} and "
                          f"{len(self.errors)} failed ({'; '.join(self.errors[:3])}); the epoch runs again")
        return None


class KafkaSinkBuilder:
    """As Flink's (and ``KafkaSourceBuilder``), ``set_bootstrap_servers`` sets the property
    ``bootstrap.servers``: the last call that sets it wins."""

    def __init__(self):
        self._serializer = None
        self._guarantee = DeliveryGuarantee.NONE
        self._prefix = "kafka-sink"
        self._properties: dict = {}

    def set_bootstrap_servers(self, bootstrap_servers: str) -> "KafkaSinkBuilder":
        return self.set_property("bootstrap.servers", bootstrap_servers)

    def set_delivery_guarantee(self, delivery_guarantee: DeliveryGuarantee) -> "KafkaSinkBuilder":
        self._guarantee = delivery_guarantee
        return self

    def set_transactional_id_prefix(self, transactional_id_prefix: str) -> "KafkaSinkBuilder":
        """Keep it stable across restarts and unique per job on the cluster: EXACTLY_ONCE recognises what
        was already published by it."""
        self._prefix = transactional_id_prefix
        return self

    def set_record_serializer(self, record_serializer: KafkaRecordSerializationSchema) -> "KafkaSinkBuilder":
        self._serializer = record_serializer
        return self

    def set_property(self, key: str, value: str) -> "KafkaSinkBuilder":
        self._properties[key] = value
        return self

    def set_properties(self, props: dict) -> "KafkaSinkBuilder":
        """keyspan: several producer properties at once."""
        self._properties.update(props)
        return self

    def build(self) -> KafkaSink:
        servers = self._properties.get("bootstrap.servers")
        if not servers:
            raise ValueError("KafkaSink needs set_bootstrap_servers(...) (or the property 'bootstrap.servers')")
        if self._serializer is None:
            raise ValueError("KafkaSink needs set_record_serializer(...)")
        return KafkaSink(servers, self._serializer, self._guarantee, self._prefix, self._properties)
