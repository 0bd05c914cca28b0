"""Helpers of the Kafka tests: topics, producing, and reading back like a downstream consumer."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic


def new_topic(bootstrap: str, partitions: int, name: str | None = None) -> str:
    name = name or f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures resolve
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result()
    return name


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_partitions([NewPartitions(topic, total)]).values():
        f.result()


def produce(bootstrap: str, topic: str, records, partition_of=None, timestamp_of=None) -> None:
    """``records``: (key, value) strings; the partition is ``partition_of(i)`` (default: by key)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, (key, value) in enumerate(records):
        kwargs = {}
        if partition_of is not None:
            kwargs["partition"] = partition_of(i)
        if timestamp_of is not None:
            kwargs["timestamp"] = timestamp_of(i)
        while True:
            try:
                p.produce(topic, key=None if key is None else key.encode(),
                          value=value if isinstance(value, bytes) else value.encode(), **kwargs)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(30) == 0


def read_all(bootstrap: str, topic: str, committed_only: bool = True, quiet_s: float = 1.5,
             timeout: float = 60) -> list[str]:
    """Every value in the topic, as a downstream consumer sees it (``read_committed`` by default).
    Short-lived: an idle polling consumer costs the test broker a core."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed" if committed_only else "read_uncommitted",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    md = c.list_topics(topic, timeout=10)
    tps = [TopicPartition(topic, p, 0) for p in md.topics[topic].partitions]
    ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
    c.assign(tps)
    out = []
    deadline = time.time() + timeout
    last = time.time()
    try:
        while time.time() < deadline:
            msgs = c.consume(1000, 0.3)
            for m in msgs:
                if m.error() is None:
                    out.append(m.value().decode())
                    last = time.time()
            pos = {tp.partition: tp.offset for tp in c.position(tps)}
            if all(pos[p] >= ends[p] for p in ends) and time.time() - last > 0.2:
                break
            if not msgs and time.time() - last > quiet_s and all(pos[p] >= 0 for p in ends):
                break
    finally:
        c.close()
    return out
