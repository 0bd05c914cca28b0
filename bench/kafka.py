"""Kafka in → keyed running sum → Kafka out: throughput with AT_LEAST_ONCE and EXACTLY_ONCE, the
same job reading the same events from files, and end-to-end latency (event produced → its result
readable by a ``read_committed`` consumer).

    python bench/kafka.py [--events 200000] [--keys 1000] [--per-epoch 50000] [--rate 2000] [--seconds 20]

Starts its own broker (noida-db, keyspan's test extra) on loopback unless ``--bootstrap`` names one.
Throughput: a bounded job (``set_bounded(latest)``) over ``--events`` events in a 4-partition topic,
``--per-epoch`` events per epoch (= per checkpoint), parallelism 2; events/s = events ÷ wall time of
``execute()`` including the Spark job start (after a small unmeasured warm-up job that starts
Spark's Python workers). Output is checked: the last sum of every key is right.
Latency: an unbounded EXACTLY_ONCE job with a 200 ms trigger interval; a thread produces ``--rate``
events/s for ``--seconds`` s, each carrying its send time; a consumer (read_committed) takes the
difference to when it received the result. Reported p50/p99 over every event after a 5 s warm-up.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from keyspan.common import SimpleStringSchema  # noqa: E402
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment  # noqa: E402
from keyspan.datastream.connectors.base import DeliveryGuarantee  # noqa: E402
from keyspan.datastream.connectors.file_system import FileSink, FileSource, StreamFormat  # noqa: E402
from keyspan.datastream.connectors.kafka import (  # noqa: E402
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from keyspan.datastream.state import ValueStateDescriptor  # noqa: E402
from keyspan.common import Encoder  # noqa: E402
from keyspan.runtime import options  # noqa: E402


class RunningSum(KeyedProcessFunction):
    """Input "key,value,sent_ms" → output "key,total,sent_ms"."""

    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_element(self, value, ctx):
        key, v, sent = value.split(",")
        total = (self.total.value() or 0) + int(v)
        self.total.update(total)
        yield f"{key},{total},{sent}"


def start_broker(work: str) -> tuple[str, subprocess.Popen]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    binary = shutil.which("noida-db") or os.path.join(os.path.dirname(sys.executable), "noida-db")
    proc = subprocess.Popen([binary, "start", "--data-dir", os.path.join(work, "broker"), "--host", "127.0.0.1",
                             "--only", "kafka", "--kafka-port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # the broker is the launcher's child
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return f"127.0.0.1:{port}", proc
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("noida-db did not start")


def topic(bootstrap: str, name: str, partitions: int) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result()
    return name


def produce(bootstrap, name, lines) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for line in lines:
        while True:
            try:
                p.produce(name, key=line.split(",", 1)[0].encode(), value=line.encode())
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)


def events(n: int, keys: int, sent: int = 0) -> list[str]:
    return [f"k{i % keys},{i % 7},{sent}" for i in range(n)]


def sink(bootstrap, target, guarantee):
    return (KafkaSink.builder().set_bootstrap_servers(bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(target)
                                   .set_value_serialization_schema(SimpleStringSchema()).build())
            .set_delivery_guarantee(guarantee).set_transactional_id_prefix(f"bench-{target}").build())


def source(bootstrap, name, bounded=True):
    b = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(name)
         .set_value_only_deserializer(SimpleStringSchema()))
    return (b.set_bounded(KafkaOffsetsInitializer.latest()) if bounded else b).build()


def env_for(work, job, per_epoch) -> StreamExecutionEnvironment:
    options.install(options.RunOptions(workdir=os.path.join(work, job), fresh=True, progress=False))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_max_records_per_epoch(per_epoch)
    return env


def final_sums(bootstrap, target, n_events) -> dict:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{target}", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    md = c.list_topics(target, timeout=10).topics[target]
    c.assign([TopicPartition(target, p, 0) for p in md.partitions])
    sums, seen, idle = {}, 0, time.time()
    while seen < n_events and time.time() - idle < 10:
        for m in c.consume(10000, 0.5):
            if m.error() is None:
                key, total, _ = m.value().decode().split(",")
                sums[key] = max(sums.get(key, 0), int(total))
                seen += 1
                idle = time.time()
    c.close()
    return sums


def throughput(bootstrap, work, n, keys, per_epoch, guarantee) -> float:
    src, dst = topic(bootstrap, f"in-{guarantee.name}", 4), topic(bootstrap, f"out-{guarantee.name}", 4)
    produce(bootstrap, src, events(n, keys))
    env = env_for(work, f"kafka-{guarantee.name}", per_epoch)
    (env.from_source(source(bootstrap, src), None, "events").uid("events").key_by(lambda v: v.split(",", 1)[0])
        .process(RunningSum()).uid("sum").sink_to(sink(bootstrap, dst, guarantee)).uid("out"))
    start = time.perf_counter()
    env.execute(f"kafka-{guarantee.name}")
    seconds = time.perf_counter() - start
    expected = {}
    for line in events(n, keys):
        k, v, _ = line.split(",")
        expected[k] = expected.get(k, 0) + int(v)
    assert final_sums(bootstrap, dst, n) == expected, "the last running sum of some key is wrong"
    return n / seconds


def file_throughput(work, n, keys, per_epoch) -> float:
    directory = os.path.join(work, "files")
    os.makedirs(directory)
    lines = events(n, keys)
    files = max(1, n // per_epoch)
    for f in range(files):
        with open(os.path.join(directory, f"part-{f:04d}.txt"), "w") as out:
            out.write("\n".join(lines[f * per_epoch:(f + 1) * per_epoch]) + "\n")
    env = env_for(work, "file-source", per_epoch)
    src = FileSource.for_record_stream_format(StreamFormat.text_line_format(), directory) \
        .set_max_files_per_epoch(1).build()
    (env.from_source(src, None, "events").uid("events").key_by(lambda v: v.split(",", 1)[0])
        .process(RunningSum()).uid("sum")
        .sink_to(FileSink.for_row_format(os.path.join(work, "file-out"), Encoder.simple_string_encoder()).build())
        .uid("out"))
    start = time.perf_counter()
    env.execute("file-source")
    return n / (time.perf_counter() - start)


def latency(bootstrap, work, keys, rate, seconds, in_driver: int = 0) -> list[float]:
    job = f"kafka-latency-{in_driver}"
    src, dst = topic(bootstrap, f"{job}-in", 4), topic(bootstrap, f"{job}-out", 4)
    env = env_for(work, job, 100_000)
    env.enable_checkpointing(200)
    env.set_small_epochs_in_driver(in_driver)
    (env.from_source(source(bootstrap, src, bounded=False), None, "events").uid("events")
        .key_by(lambda v: v.split(",", 1)[0]).process(RunningSum()).uid("sum")
        .sink_to(sink(bootstrap, dst, DeliveryGuarantee.EXACTLY_ONCE)).uid("out"))
    runner = threading.Thread(target=lambda: env.execute(job), daemon=True)
    runner.start()
    produce(bootstrap, src, events(keys, keys, int(time.time() * 1000)))  # warm the job up
    time.sleep(20)
    stop = time.time() + seconds
    lat: list[float] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat-check", "auto.offset.reset": "latest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([dst])

    def feed():
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        i = 0
        while time.time() < stop:
            now = int(time.time() * 1000)
            p.produce(src, value=f"k{i % keys},1,{now}".encode())
            i += 1
            p.poll(0)
            time.sleep(1 / rate)
        p.flush(30)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    warm = time.time() + 5
    while time.time() < stop + 10:
        for m in consumer.consume(1000, 0.2):
            if m.error() is None and time.time() > warm:
                lat.append(time.time() * 1000 - int(m.value().decode().rsplit(",", 1)[1]))
    consumer.close()
    from keyspan.checkpoint.metadata import MetadataStore
    store = MetadataStore(options.current().metadata())
    api = store.get_job(job)["api_url"]
    import httpx

    from keyspan.rest.auth import auth_headers
    httpx.post(f"{api}/jobs/{job}/stop", json={"savepoint": False},
               headers=auth_headers(options.current().workdir), timeout=30)
    runner.join(120)
    return lat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--per-epoch", type=int, default=50_000)
    ap.add_argument("--rate", type=int, default=2_000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--bootstrap")
    ap.add_argument("--small-epochs-in-driver", type=int, nargs="+", default=[0], metavar="RECORDS",
                    help="measure the latency with env.set_small_epochs_in_driver(RECORDS), for each value given "
                         "(0: every epoch as Spark jobs)")
    ap.add_argument("--latency-only", action="store_true", help="skip the throughput runs")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="keyspan-kafka-bench-")
    broker = None
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            bootstrap, broker = start_broker(work)
        from keyspan.runtime.session import get_or_create_spark
        get_or_create_spark(2)
        # not measured: the first job of a process starts Spark's Python workers
        file_throughput(os.path.join(work, "warm-up"), min(args.events, 10_000), args.keys, args.per_epoch)
        if not args.latency_only:
            file_rate = file_throughput(work, args.events, args.keys, args.per_epoch)
            alo = throughput(bootstrap, work, args.events, args.keys, args.per_epoch, DeliveryGuarantee.AT_LEAST_ONCE)
            eo = throughput(bootstrap, work, args.events, args.keys, args.per_epoch, DeliveryGuarantee.EXACTLY_ONCE)
            print(f"\n{args.events:,} events, {args.keys:,} keys, {args.per_epoch:,} per epoch, parallelism 2")
            print(f"file source -> file sink (EXACTLY_ONCE)  {file_rate:>10,.0f} events/s")
            print(f"Kafka -> Kafka AT_LEAST_ONCE            {alo:>10,.0f} events/s")
            print(f"Kafka -> Kafka EXACTLY_ONCE             {eo:>10,.0f} events/s")
        for in_driver in args.small_epochs_in_driver:
            lat = latency(bootstrap, work, args.keys, args.rate, args.seconds, in_driver)
            mode = f", epochs of <= {in_driver:,} records in the driver" if in_driver else ""
            if lat:
                q = statistics.quantiles(lat, n=100)
                print(f"end-to-end latency EXACTLY_ONCE, 200 ms trigger, {args.rate}/s{mode}: p50 {q[49]:,.0f} ms  "
                      f"p95 {q[94]:,.0f} ms  p99 {q[98]:,.0f} ms  ({len(lat):,} events)", flush=True)
    finally:
        if broker is not None:
            os.killpg(broker.pid, signal.SIGTERM)
            broker.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
