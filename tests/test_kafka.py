"""The Kafka connector against a real broker (noida-db on loopback) and a real local Spark."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

pytest.importorskip("confluent_kafka", reason="confluent-kafka (keyspan[kafka]) is not installed")

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from kafka_util import add_partitions, new_topic, produce, read_all  # noqa: E402
from savepoint_helpers import BackgroundJob, stop_with_savepoint, use_options  # noqa: E402

from keyspan.checkpoint.savepoint import load_savepoint  # noqa: E402
from keyspan.common import WatermarkStrategy  # noqa: E402
from keyspan.datastream import ProcessFunction, StreamExecutionEnvironment  # noqa: E402
from keyspan.runtime.executor import JobExecutionError  # noqa: E402

from keyspan.common import SimpleStringSchema  # noqa: E402
from keyspan.datastream import KeyedProcessFunction  # noqa: E402
from keyspan.datastream.connectors.base import DeliveryGuarantee  # noqa: E402
from keyspan.datastream.connectors.kafka import (  # noqa: E402
    FlinkKafkaConsumer,
    FlinkKafkaProducer,
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
    Semantic,
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


@pytest.mark.parametrize("in_driver", [0, 1000], ids=["spark-jobs", "epochs-in-driver"])
def test_bounded_read_keyed_count_exactly_once_to_kafka(env, kafka_broker, in_driver):
    """Also with every epoch run in the driver: it reads the topic and writes the transactions itself."""
    src, dst = new_topic(kafka_broker, 3), new_topic(kafka_broker, 2)
    produce(kafka_broker, src, [(None, f"k{i % 7}") for i in range(300)], partition_of=lambda i: i % 3)
    env.set_max_records_per_epoch(70)
    env.set_small_epochs_in_driver(in_driver)
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


def _wait_output(bootstrap, topic, count, job=None, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if job is not None and not job.thread.is_alive():
            job.join()
            raise AssertionError("job ended early")
        out = read_all(bootstrap, topic, quiet_s=0.3)
        if len(out) >= count:
            return out
        time.sleep(1)
    raise TimeoutError(f"{topic}: fewer than {count} records after {timeout} s")


def _counting_job(env, bootstrap, src, dst, group=None):
    sink = (KafkaSink.builder().set_bootstrap_servers(bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(dst)
                                   .set_value_serialization_schema(SimpleStringSchema()).build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_transactional_id_prefix(f"ks-{dst}").build())
    (env.from_source(_source(bootstrap, src, bounded=False, group=group), None, "events").uid("events")
        .key_by(lambda v: v).process(Count()).uid("count").sink_to(sink).uid("out"))


def test_savepoint_restore_at_another_parallelism_4_partitions(env, kafka_broker):
    """Offsets of a 4-partition topic live in the savepoint; restored at parallelism 3 the job reads on
    exactly where it stopped in every partition: nothing lost, nothing read twice."""
    src, dst = new_topic(kafka_broker, 4), new_topic(kafka_broker, 2)
    keys = [f"k{i:02d}" for i in range(12)]
    produce(kafka_broker, src, [(None, keys[i % 12]) for i in range(240)], partition_of=lambda i: i % 4)
    env.set_max_records_per_epoch(100)
    _counting_job(env, kafka_broker, src, dst, group="rescaler")
    job = BackgroundJob(env, "kafka-rescale")
    _wait_output(kafka_broker, dst, 240, job)
    path = stop_with_savepoint("kafka-rescale")
    job.join()
    offsets = load_savepoint(path)["source_offsets"]["0"]
    assert {k: v for k, v in offsets.items() if k != "tick"} == {f"{src}:{p}": 60 for p in range(4)}

    produce(kafka_broker, src, [(None, keys[i % 12]) for i in range(240, 480)], partition_of=lambda i: i % 4)
    env2 = StreamExecutionEnvironment.get_execution_environment()
    env2.set_parallelism(3)
    env2.set_max_records_per_epoch(100)
    _counting_job(env2, kafka_broker, src, dst, group="rescaler")
    use_options(savepoint_path=path)
    job = BackgroundJob(env2, "kafka-rescale")
    out = _wait_output(kafka_broker, dst, 480, job)
    stop_with_savepoint("kafka-rescale")
    job.join()
    assert Counter(out) == Counter(f"{k}:{n}" for k in keys for n in range(1, 41))
    # offsets went back to the consumer group after each checkpoint, for monitoring tools
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka_broker, "group.id": "rescaler"})
    try:
        assert [tp.offset for tp in c.committed([TopicPartition(src, p) for p in range(4)], timeout=10)] == [120] * 4
    finally:
        c.close()


def test_partition_added_while_running_is_read_from_its_start(env, kafka_broker):
    src, dst = new_topic(kafka_broker, 2), new_topic(kafka_broker, 1)
    produce(kafka_broker, src, [(None, f"a{i % 5}") for i in range(100)], partition_of=lambda i: i % 2)
    _counting_job(env, kafka_broker, src, dst)
    job = BackgroundJob(env, "kafka-grow")
    _wait_output(kafka_broker, dst, 100, job)
    add_partitions(kafka_broker, src, 3)
    produce(kafka_broker, src, [(None, "new") for _ in range(30)], partition_of=lambda i: 2)
    out = _wait_output(kafka_broker, dst, 130, job)
    stop_with_savepoint("kafka-grow")
    job.join()
    assert Counter(out) == Counter([f"a{k}:{n}" for k in range(5) for n in range(1, 21)] +
                                   [f"new:{n}" for n in range(1, 31)])


def test_starting_offsets_earliest_latest_committed_timestamp(env, kafka_broker):
    from confluent_kafka import Consumer, TopicPartition

    topic = new_topic(kafka_broker, 2)
    base = (int(time.time()) - 3600) * 1000  # an hour ago: older records fall to the broker's retention
    produce(kafka_broker, topic, [(None, f"v{i}") for i in range(20)], partition_of=lambda i: i % 2,
            timestamp_of=lambda i: base + i * 1000)
    group = f"g-{topic}"
    c = Consumer({"bootstrap.servers": kafka_broker, "group.id": group})
    c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)  # partition 1: nothing committed
    c.close()

    def start(init):
        src = _source(kafka_broker, topic, init, group=group)
        return src.reader(None, "u", "offsets").initial_offset()

    assert start(KafkaOffsetsInitializer.earliest()) == {f"{topic}:0": 0, f"{topic}:1": 0}
    assert start(KafkaOffsetsInitializer.latest()) == {f"{topic}:0": 10, f"{topic}:1": 10}
    assert start(KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.EARLIEST)) == {
        f"{topic}:0": 4, f"{topic}:1": 0}
    with pytest.raises(ValueError, match="no valid committed offset"):
        start(KafkaOffsetsInitializer.committed_offsets())
    # record i has timestamp base + i s: i = 12.. (offset 6 on in both partitions) are at or after base + 12 s
    assert start(KafkaOffsetsInitializer.timestamp(base + 12_000)) == {f"{topic}:0": 6, f"{topic}:1": 6}

    # the same through a job, which also sees Kafka's record timestamps as event timestamps
    class Stamp(ProcessFunction):
        def process_element(self, value, ctx):
            yield (value, ctx.timestamp())

    src = _source(kafka_broker, topic, KafkaOffsetsInitializer.timestamp(base + 12_000))
    got = sorted(env.from_source(src, WatermarkStrategy.for_monotonous_timestamps(), "ts").process(Stamp())
                 .execute_and_collect())
    assert got == sorted((f"v{i}", base + i * 1000) for i in range(12, 20))


@pytest.mark.parametrize("in_driver", [0, 1000], ids=["spark-jobs", "epochs-in-driver"])
def test_malformed_record_fails_with_topic_partition_and_offset(env, kafka_broker, in_driver):
    """In the driver the record fails the epoch there, which then runs (and fails) as Spark jobs."""
    env.set_small_epochs_in_driver(in_driver)
    class JsonValue:
        def deserialize(self, data: bytes):
            return json.loads(data)["k"]

    topic = new_topic(kafka_broker, 2)
    produce(kafka_broker, topic, [(None, json.dumps({"k": i})) for i in range(6)], partition_of=lambda i: 0)
    produce(kafka_broker, topic, [(None, "{not json")], partition_of=lambda i: 1)
    src = (KafkaSource.builder().set_bootstrap_servers(kafka_broker).set_topics(topic)
           .set_value_only_deserializer(JsonValue()).set_bounded(KafkaOffsetsInitializer.latest()).build())
    env.from_source(src, None, "json events").print()
    with pytest.raises(JobExecutionError) as err:
        env.execute("kafka-malformed")
    text = str(err.value)
    assert f"topic {topic} partition 1 offset 0" in text and "JSONDecodeError" in text
    assert len(text) < 700 and "Traceback" not in text


def _refusing_address() -> str:
    """A loopback address where nothing listens: connections to it are refused."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_a_cluster_that_does_not_answer_fails_the_job_naming_source_and_servers(env):
    address = _refusing_address()
    env.from_source(_source(address, "events", bounded=False), None, "order events").uid("events").print()
    with pytest.raises(JobExecutionError) as err:
        env.execute("kafka-unreachable")
    text = str(err.value)
    assert (f"source 'order events': no answer from Kafka at {address}" in text
            and "check that the brokers run" in text and "Traceback" not in text and len(text) < 700), text


def test_librdkafka_s_retries_of_an_unreachable_broker_are_logged_once():
    """librdkafka reports every failed reconnect; keyspan's log passes the same message once a minute."""
    import logging

    from keyspan.connectors.kafka.clients import CLIENT_LOG

    seen = []
    handler = logging.Handler()
    handler.emit = seen.append
    CLIENT_LOG.addHandler(handler)
    address = _refusing_address()
    consumer = Consumer({"bootstrap.servers": address, "group.id": "unreachable", "logger": CLIENT_LOG,
                         "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 20})
    try:
        deadline = time.time() + 3
        while time.time() < deadline:
            consumer.poll(0.1)  # delivers librdkafka's log lines to CLIENT_LOG
    finally:
        consumer.close()
        CLIENT_LOG.removeHandler(handler)
    refused = [r for r in seen if f"Connect to ipv4#{address} failed" in r.getMessage()]
    assert len(refused) == 1, [r.getMessage() for r in refused]


@pytest.mark.parametrize("in_driver", [0, 1000], ids=["spark-jobs", "epochs-in-driver"])
def test_malformed_records_go_to_the_dead_letter_output_and_the_job_goes_on(env, kafka_broker, in_driver):
    env.set_small_epochs_in_driver(in_driver)
    from keyspan.common import Types
    from keyspan.connectors.dead_letter import ErrorPolicy
    from keyspan.datastream import OutputTag
    from keyspan.datastream.formats.json import JsonRowDeserializationSchema

    topic = new_topic(kafka_broker, 2)
    produce(kafka_broker, topic, [(None, json.dumps({"user": u, "amount": a}))
                                  for u, a in [("ann", 1), ("bob", 2), ("ann", 10)]], partition_of=lambda i: 0)
    produce(kafka_broker, topic, [(None, '{"user": "cy", "amo'), (None, json.dumps({"user": "cy", "amount": 5}))],
            partition_of=lambda i: 1)
    schema = JsonRowDeserializationSchema.builder().type_info(
        Types.ROW_NAMED(["user", "amount"], [Types.STRING(), Types.INT()])).build()
    bad = OutputTag("bad-records")
    src = (KafkaSource.builder().set_bootstrap_servers(kafka_broker).set_topics(topic)
           .set_value_only_deserializer(schema).set_error_policy(ErrorPolicy.dead_letter(bad))
           .set_bounded(KafkaOffsetsInitializer.latest()).build())
    ds = env.from_source(src, None, "payments")
    sums = ds.map(lambda r: (r.user, r.amount)).key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
    dead = ds.get_side_output(bad).map(lambda d: ("dead", d.origin, d.reason, d.raw))
    results = list(sums.union(dead).execute_and_collect("kafka-dead-letters", limit=1000))
    finals = {}
    for r in results:
        if r[0] != "dead":
            finals[r[0]] = max(finals.get(r[0], 0), r[1])
    assert finals == {"ann": 11, "bob": 2, "cy": 5}
    assert [r[1:] for r in results if r[0] == "dead"] == [
        (f"topic {topic} partition 1 offset 0", next(r[2] for r in results if r[0] == "dead"), b'{"user": "cy", "amo')]
    assert "malformed JSON" in next(r[2] for r in results if r[0] == "dead")


def test_bootstrap_servers_and_group_id_given_as_properties(env, kafka_broker):
    """As Flink's examples/datastream/connectors/kafka_*_format.py build their source: servers and group
    in set_properties(...). As in Flink, the setters are properties too: the last one given wins."""
    topic = new_topic(kafka_broker, 1)
    produce(kafka_broker, topic, [(None, f"r{i}") for i in range(5)])
    group = f"props-{topic}"
    src = (KafkaSource.builder().set_bootstrap_servers("127.0.0.1:1").set_group_id("overridden").set_topics(topic)
           .set_properties({"bootstrap.servers": kafka_broker, "group.id": group})
           .set_value_only_deserializer(SimpleStringSchema()).set_bounded(KafkaOffsetsInitializer.latest()).build())
    assert sorted(env.from_source(src, None, "props").execute_and_collect("kafka-props")) == [f"r{i}" for i in range(5)]
    check = Consumer({"bootstrap.servers": kafka_broker, "group.id": group})
    try:  # the offsets were committed for the group the properties named
        assert check.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 5
    finally:
        check.close()
    with pytest.raises(ValueError, match="bootstrap.servers"):
        KafkaSource.builder().set_topics(topic).set_value_only_deserializer(SimpleStringSchema()).build()


AVRO_RECORD = ('{"type": "record", "name": "TestRecord", "fields": [{"name": "id", "type": "int"}, '
               '{"name": "name", "type": "string"}]}')


def test_avro_rows_written_and_read_back_as_flink_s_kafka_avro_example_does(env, kafka_broker, capsys):
    """Flink's examples/datastream/connectors/kafka_avro_format.py: rows of Types.ROW (fields f0, f1) fill
    the Avro record by position; read back, the stream has the schema's row type and prints as PyFlink's."""
    from keyspan.common import Types
    from keyspan.datastream.formats.avro import AvroRowDeserializationSchema, AvroRowSerializationSchema

    env.set_parallelism(1)
    topic = new_topic(kafka_broker, 1)
    rows = env.from_collection([(1, "hi"), (2, "hello")], type_info=Types.ROW([Types.INT(), Types.STRING()]))
    rows.sink_to(KafkaSink.builder().set_bootstrap_servers(kafka_broker).set_record_serializer(
        KafkaRecordSerializationSchema.builder().set_topic(topic)
        .set_value_serialization_schema(AvroRowSerializationSchema(avro_schema_string=AVRO_RECORD)).build()).build())
    env.execute("kafka-avro-write")
    src = (KafkaSource.builder().set_bootstrap_servers(kafka_broker).set_topics(topic)
           .set_value_only_deserializer(AvroRowDeserializationSchema(avro_schema_string=AVRO_RECORD))
           .set_bounded(KafkaOffsetsInitializer.latest()).build())
    read = env.from_source(src, None, "avro")
    assert read.get_type() == Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])
    capsys.readouterr()
    read.print()
    env.execute("kafka-avro-read")
    assert capsys.readouterr().out.splitlines() == ["+I[1,hi]", "+I[2,hello]"]


def test_legacy_consumer_and_producer_at_least_once(env, kafka_broker):
    src, dst = new_topic(kafka_broker, 2), new_topic(kafka_broker, 1)
    produce(kafka_broker, src, [(None, f"w{i}") for i in range(40)], partition_of=lambda i: i % 2)
    consumer = FlinkKafkaConsumer(src, SimpleStringSchema(), {"bootstrap.servers": kafka_broker,
                                                             "group.id": f"legacy-{src}"}).set_start_from_earliest()
    producer = FlinkKafkaProducer(dst, SimpleStringSchema(), {"bootstrap.servers": kafka_broker},
                                  semantic=Semantic.AT_LEAST_ONCE)
    env.add_source(consumer).map(lambda v: v.upper()).add_sink(producer)
    job = BackgroundJob(env, "kafka-legacy")
    out = _wait_output(kafka_broker, dst, 40, job)
    stop_with_savepoint("kafka-legacy")
    job.join()
    assert set(out) == {f"W{i}" for i in range(40)}  # at least once: duplicates would be allowed, loss not


def test_the_process_closes_its_kafka_clients_when_it_exits(kafka_broker, tmp_path):
    """Clients kept for reuse are closed from ``atexit``, not left to the interpreter's teardown (where
    librdkafka's callbacks would reach a half-finalized Python)."""
    import subprocess
    import sys

    probe = tmp_path / "probe.py"
    probe.write_text(f"""
import atexit, sys


def closed():  # registered before keyspan's own handler, so it runs after it
    try:
        consumer.assignment()
    except RuntimeError:
        return True
    return False


atexit.register(lambda: print("consumer closed" if closed() else "consumer open"))
from keyspan.connectors.kafka.clients import shared_consumer, shared_producer

consumer = shared_consumer({{"bootstrap.servers": "{kafka_broker}", "group.id": "probe"}})
consumer.list_topics(timeout=10)
producer = shared_producer({{"bootstrap.servers": "{kafka_broker}"}})
assert shared_consumer({{"bootstrap.servers": "{kafka_broker}", "group.id": "probe"}}) is consumer
""")
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "consumer closed"
