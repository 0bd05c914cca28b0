"""The Kafka source: partition offsets are keyspan source state.

An epoch's input is, per Kafka partition, the offset range [start, end) that the driver chose
(at most ``max_records_per_epoch`` records over all partitions). The offsets travel in Spark's
offset log and keyspan's checkpoint and savepoint as ``{"topic:partition": next offset}``, so a
restore at any parallelism reads exactly where the checkpoint ended: tasks are handed ranges of
partitions, never a fixed partition. Partitions that appear while the job runs are read from their
earliest offset. Offsets are committed back to the consumer group after each checkpoint only so
that monitoring tools see the progress; recovery never reads them. Each partition is a watermark
split (``KafkaReader.splits``): a task sends a partition's records in chunks of their own.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from enum import Enum

from keyspan.connectors.dead_letter import ErrorPolicy
from keyspan.connectors.kafka.clients import CLIENT_LOG, shared_consumer
from keyspan.connectors.sources import TICK, KeyspanSource, SourceReader, SourceRecordError, SplitChunk

READ_TIMEOUT_S = 60.0  # a partition range the broker does not deliver within this time fails the task


@dataclass(frozen=True)
class KafkaTopicPartition:
    """PyFlink's ``KafkaTopicPartition(topic, partition)``."""

    topic: str
    partition: int


class KafkaOffsetResetStrategy(Enum):
    LATEST = 0
    EARLIEST = 1
    NONE = 2


class KafkaOffsetsInitializer:
    """Where reading starts (or, for ``set_bounded``/``set_unbounded``, stops) in every partition."""

    def __init__(self, kind: str, value=None, reset: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE):
        self.kind = kind
        self.value = value
        self.reset = reset

    @staticmethod
    def earliest() -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer("earliest")

    @staticmethod
    def latest() -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer("latest")

    @staticmethod
    def committed_offsets(offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE
                          ) -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer("committed", reset=offset_reset_strategy)

    @staticmethod
    def timestamp(timestamp: int) -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer("timestamp", int(timestamp))

    @staticmethod
    def offsets(offsets: dict, offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.EARLIEST
                ) -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer("offsets", {(tp.topic, tp.partition): int(o) for tp, o in offsets.items()},
                                       offset_reset_strategy)

    def describe(self) -> str:
        return self.kind if self.value is None else f"{self.kind}({self.value})"


@dataclass(frozen=True)
class KafkaRecord:
    """A consumed record as a ``KafkaRecordDeserializationSchema`` sees it (Flink's ConsumerRecord)."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple  # ((name, bytes), ...)


class KafkaRecordDeserializationSchema:
    """Turns a whole ``KafkaRecord`` (key, value, headers, timestamp, position) into the job's record.
    Subclass and override ``deserialize``, or wrap a value schema with ``value_only``."""

    def deserialize(self, record: KafkaRecord):
        raise NotImplementedError

    @staticmethod
    def value_only(deserialization_schema) -> "KafkaRecordDeserializationSchema":
        return _ValueOnly(deserialization_schema)


class _ValueOnly(KafkaRecordDeserializationSchema):
    def __init__(self, schema):
        self.schema = schema
        # a keyspan schema's parse raises on a bad message, so the source's error policy decides
        self.read = getattr(schema, "parse", schema.deserialize)

    def deserialize(self, record: KafkaRecord):
        return self.read(record.value)

    def get_produced_type(self):
        produced = getattr(self.schema, "get_produced_type", None)
        return produced() if produced is not None else None


def _key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def _split_key(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


class KafkaReader(SourceReader):
    """Driver and task side of one KafkaSource (pickled into the Spark data source options)."""

    unit = "records"

    def __init__(self, source: "KafkaSource", stop: dict | None, poison):
        self.source = source
        self.stop = stop  # {"topic:partition": offset} where a bounded source ends
        self.bounded = source.bounded
        self.poison = poison  # the source's PoisonHandler: fail, skip or dead-letter a malformed record

    # -- the broker --------------------------------------------------------------------------------
    def _config(self, **extra) -> dict:
        s = self.source
        config = {k: v for k, v in s.properties.items() if k not in ("partition.discovery.interval.ms",
                                                                    "commit.offsets.on.checkpoint")}
        config.update({"bootstrap.servers": s.bootstrap_servers, "enable.auto.commit": False,
                       "group.id": s.group_id or "keyspan-reader", "logger": CLIENT_LOG})
        config.update(extra)
        return config

    def _metadata_consumer(self):
        return shared_consumer(self._config())

    def _ask_brokers(self, request):
        """A request to the cluster from the driver; no answer fails naming the source and its servers."""
        from confluent_kafka import KafkaException

        try:
            return request(self._metadata_consumer())
        except KafkaException as exc:
            said = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
            raise SourceRecordError(
                f"source '{self.poison.source_name}': no answer from Kafka at {self.source.bootstrap_servers} ({said}); "
                "check that the brokers run and that set_bootstrap_servers(...) names them") from None

    def _partitions(self) -> list[str]:
        s = self.source
        if s.partitions:
            return sorted(_key(tp.topic, tp.partition) for tp in s.partitions)
        md = self._ask_brokers(lambda c: c.list_topics(timeout=10))
        if s.pattern is not None:
            topics = [t for t in md.topics if re.fullmatch(s.pattern, t) and not t.startswith("__")]
        else:
            topics = list(s.topics)
            missing = [t for t in topics if t not in md.topics or md.topics[t].error is not None]
            if missing:
                raise SourceRecordError(f"source '{self.poison.source_name}': topic(s) {', '.join(missing)} do not exist on "
                                        f"{s.bootstrap_servers}; create them or use set_topic_pattern(...)")
        return sorted(_key(t, p) for t in topics for p in md.topics[t].partitions)

    def _watermarks(self, keys) -> dict[str, tuple[int, int]]:
        from confluent_kafka import TopicPartition

        def ask(c):
            return {k: c.get_watermark_offsets(TopicPartition(*_split_key(k)), timeout=10, cached=False) for k in keys}
        return self._ask_brokers(ask)

    def resolve(self, init: KafkaOffsetsInitializer, keys: list[str]) -> dict[str, int]:
        """The offsets an initializer names for these partitions (on the driver)."""
        from confluent_kafka import TopicPartition

        marks = self._watermarks(keys)
        if init.kind == "earliest":
            return {k: marks[k][0] for k in keys}
        if init.kind == "latest":
            return {k: marks[k][1] for k in keys}
        reset = init.reset
        if init.kind == "timestamp":
            tps = [TopicPartition(*_split_key(k), init.value) for k in keys]
            found = self._ask_brokers(lambda c: c.offsets_for_times(tps, timeout=10))
            # no record at or after the timestamp: start at the end, as Flink does
            return {k: tp.offset if tp.offset >= 0 else marks[k][1] for k, tp in zip(keys, found)}
        if init.kind == "offsets":
            named = {_key(*tp): o for tp, o in init.value.items()}
            wanted = {k: named.get(k, -1) for k in keys}
        elif init.kind == "committed":
            if not self.source.group_id:
                raise SourceRecordError(f"source '{self.poison.source_name}': committed_offsets() needs set_group_id(...)")
            tps = [TopicPartition(*_split_key(k)) for k in keys]
            wanted = {k: tp.offset for k, tp in zip(keys, self._ask_brokers(lambda c: c.committed(tps, timeout=10)))}
        else:
            raise ValueError(f"unknown offsets initializer {init.kind}")
        out = {}
        for k, o in wanted.items():
            lo, hi = marks[k]
            if lo <= o <= hi:
                out[k] = o
            elif reset == KafkaOffsetResetStrategy.EARLIEST:
                out[k] = lo
            elif reset == KafkaOffsetResetStrategy.LATEST:
                out[k] = hi
            else:
                raise SourceRecordError(f"source '{self.poison.source_name}': no valid {init.describe()} offset for "
                                 f"partition {k} (offset {o}, available {lo}..{hi}); pass an offset reset strategy, "
                                 "e.g. committed_offsets(KafkaOffsetResetStrategy.EARLIEST)")
        return out

    # -- the driver: offsets of each epoch ---------------------------------------------------------------
    def initial_offset(self) -> dict:
        return self.resolve(self.source.starting_offsets, self._partitions())

    def end_offset(self):
        return self.stop if self.source.bounded else None

    def exhausted(self, offset) -> bool:
        if not self.source.bounded or offset is None:
            return False
        return all(offset.get(k, 0) >= v for k, v in self.stop.items())

    def splits(self, offset) -> list[str] | None:
        """Each partition is a watermark split (Flink's per-partition watermarks): those the epoch's
        offsets hold, less any that reached its stopping offset (finished, it holds nothing back)."""
        if offset is None:
            return None
        stop = self.stop or {}
        return sorted(k for k, o in offset.items() if k != TICK and not (k in stop and o >= stop[k]))

    def _available(self, start: dict) -> dict[str, tuple[int, int]]:
        """Per partition: (first offset to read, offset to read up to)."""
        if self.stop is not None:
            keys = sorted(self.stop)
            return {k: (start.get(k, 0), max(start.get(k, 0), self.stop[k])) for k in keys}
        keys = sorted(set(self._partitions()) | {k for k in start if k != "tick"})
        marks = self._watermarks(keys)
        # a partition first seen now starts at its earliest offset
        return {k: (start[k] if k in start else marks[k][0], max(marks[k][1], start.get(k, 0))) for k in keys}

    def backlog(self, offset):
        try:
            return sum(hi - lo for lo, hi in self._available(offset or {}).values())
        except Exception:  # noqa: BLE001 — only a progress figure; the broker may be away
            return None

    def latest_offset(self, start: dict, max_records: int | None) -> dict:
        avail = self._available(start)
        end = {k: hi for k, (_, hi) in avail.items()}
        if max_records is None:
            return end
        # admission control: share the epoch's budget fairly over the partitions with a backlog
        pos = {k: lo for k, (lo, _) in avail.items()}
        budget = max_records
        pending = [k for k in avail if end[k] > pos[k]]
        while budget > 0 and pending:
            share = max(1, budget // len(pending))
            for k in list(pending):
                take = min(share, end[k] - pos[k], budget)
                pos[k] += take
                budget -= take
                if pos[k] >= end[k]:
                    pending.remove(k)
                if budget == 0:
                    break
        return pos

    def partitions(self, start: dict, end: dict, parallelism: int) -> list:
        ranges = [(k, start.get(k, 0) if k in start else None, hi) for k, hi in sorted(end.items()) if k != "tick"]
        ranges = [(k, lo, hi) for k, lo, hi in ranges if lo is None or hi > lo]
        if not ranges:
            return []
        parts = min(parallelism, len(ranges))
        return [ranges[i::parts] for i in range(parts)]

    def most_records(self, partitions):
        """Offsets count records, and transaction markers or compaction only make fewer of them; a
        range from a partition's beginning (no start offset) is unknown until read."""
        ranges = [r for part in partitions for r in part]
        return None if any(lo is None for _, lo, _ in ranges) else sum(hi - lo for _, lo, hi in ranges)

    def checkpointed(self, offset: dict) -> None:
        """After each checkpoint: tell the consumer group, for monitoring tools only."""
        s = self.source
        if not (s.group_id and s.commit_offsets_on_checkpoint):
            return
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(*_split_key(k), o) for k, o in offset.items()]
        try:
            self._metadata_consumer().commit(offsets=tps, asynchronous=False)
        except Exception as exc:  # noqa: BLE001 — monitoring only: never fail the job for it
            print(f"keyspan: source '{self.poison.source_name}': could not commit offsets to group {s.group_id}: {exc}",
                  file=sys.stderr)

    # -- a task: read the ranges -----------------------------------------------------------------------
    def read(self, partition):
        from confluent_kafka import KafkaError, TopicPartition

        # a task reads known ranges and lets go: the broker need not hold an empty fetch for long
        consumer = shared_consumer({"fetch.wait.max.ms": 20, **self._config(**{"auto.offset.reset": "earliest",
                                                                              "enable.partition.eof": True})})
        todo = {}  # (topic, partition) → offset to read up to
        first = {}  # (topic, partition) → first offset to read
        next_offset = {}  # (topic, partition) → offset after the last record read
        assign = []
        for k, lo, hi in partition:
            topic, p = _split_key(k)
            todo[(topic, p)] = hi
            first[(topic, p)] = lo or 0
            assign.append(TopicPartition(topic, p, lo if lo is not None else -2))  # -2: the beginning
        deserialize = self.source.deserializer.deserialize
        chunks: dict = {}  # (topic, partition) → (records, timestamps): a partition is a watermark split
        consumer.assign(assign)
        deadline = time.monotonic() + READ_TIMEOUT_S
        try:
            while todo:
                # ask for what is left (transaction markers make it a little less): returns as soon as it arrived
                left = sum(todo.values()) - sum(next_offset.get(tp, lo) for tp, lo in first.items() if tp in todo)
                msgs = consumer.consume(num_messages=max(1, min(10000, left)), timeout=0.2)
                for m in msgs:
                    err = m.error()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        raise SourceRecordError(f"source '{self.poison.source_name}': reading topic {m.topic()} "
                                                f"partition {m.partition()} failed: {err}")
                    tp = (m.topic(), m.partition())
                    hi = todo.get(tp)
                    if hi is None or err is not None:
                        continue
                    offset = m.offset()
                    if offset >= hi:
                        self._done(consumer, todo, tp)
                        continue
                    next_offset[tp] = offset + 1
                    record = self._deserialize(deserialize, m)
                    if record is not None:  # None: the schema itself ignores the message
                        records, stamps = chunks.setdefault(tp, ([], []))
                        records.append(record)
                        kind, ts = m.timestamp()
                        stamps.append(ts if kind != 0 else None)
                    if offset >= hi - 1:
                        self._done(consumer, todo, tp)
                # transaction markers occupy offsets without records: the position tells where we are
                for tp in list(todo):
                    pos = consumer.position([TopicPartition(*tp)])[0].offset
                    if pos >= todo[tp]:
                        self._done(consumer, todo, tp)
                if todo and time.monotonic() > deadline:
                    left = ", ".join(f"{t}:{p} up to offset {hi}" for (t, p), hi in todo.items())
                    raise SourceRecordError(f"source '{self.poison.source_name}': the broker at "
                                            f"{self.source.bootstrap_servers} did not deliver {left} within "
                                            f"{READ_TIMEOUT_S:.0f} s; is it reachable, and were records deleted?")
        finally:
            consumer.unassign()  # an assigned consumer keeps fetching in the background
        for tp, (records, stamps) in chunks.items():
            yield SplitChunk(records, stamps, _key(*tp))

    @staticmethod
    def _done(consumer, todo, tp):
        from confluent_kafka import TopicPartition

        if todo.pop(tp, None) is not None:
            consumer.incremental_unassign([TopicPartition(*tp)])

    def _deserialize(self, deserialize, m):
        """The one place a malformed record surfaces: the source's error policy fails the job naming
        topic, partition and offset, skips the record, or sends it to the dead-letter output."""
        try:
            if isinstance(self.source.deserializer, _ValueOnly):
                return deserialize(KafkaRecord(m.topic(), m.partition(), m.offset(), None, None, m.value(), ()))
            kind, ts = m.timestamp()
            return deserialize(KafkaRecord(m.topic(), m.partition(), m.offset(), ts if kind != 0 else None,
                                           m.key(), m.value(), tuple(m.headers() or ())))
        except Exception as exc:  # noqa: BLE001 — any deserializer failure is the record's
            return self.poison(m.value() or b"", f"topic {m.topic()} partition {m.partition()} offset {m.offset()}",
                               f"{type(exc).__name__}: {exc}")


def require_client() -> None:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        raise ImportError("keyspan's Kafka connector needs confluent-kafka: pip install 'keyspan[kafka]'") from None


class KafkaSource(KeyspanSource):
    """PyFlink's ``KafkaSource``: build with ``KafkaSource.builder()``, use with ``env.from_source``."""

    def __init__(self, b: "KafkaSourceBuilder"):
        require_client()
        if not b._properties.get("bootstrap.servers"):
            raise ValueError("KafkaSource needs set_bootstrap_servers(...) (or the property 'bootstrap.servers')")
        if not (b._topics or b._pattern or b._partitions):
            raise ValueError("KafkaSource needs set_topics(...), set_topic_pattern(...) or set_partitions(...)")
        if b._deserializer is None:
            raise ValueError("KafkaSource needs set_value_only_deserializer(...) or set_deserializer(...)")
        self.bootstrap_servers = b._properties["bootstrap.servers"]
        self.topics = tuple(b._topics)
        self.pattern = b._pattern
        self.partitions = tuple(sorted(b._partitions, key=lambda tp: (tp.topic, tp.partition)))
        self.group_id = b._properties.get("group.id")
        self.starting_offsets = b._starting
        self.stopping_offsets = b._stopping
        self.bounded = b._bounded
        self.deserializer = b._deserializer
        ignores = getattr(getattr(b._deserializer, "schema", None), "ignore_parse_errors", False)
        self.error_policy = b._error_policy or (ErrorPolicy.skip() if ignores else ErrorPolicy.fail())
        self.properties = dict(b._properties)
        self.commit_offsets_on_checkpoint = str(
            self.properties.get("commit.offsets.on.checkpoint", "true")).lower() == "true"

    @staticmethod
    def builder() -> "KafkaSourceBuilder":
        return KafkaSourceBuilder()

    def get_produced_type(self):
        """The records' type, as the deserializer declares it (``from_source`` gives it to the stream)."""
        produced = getattr(self.deserializer, "get_produced_type", None)
        return produced() if produced is not None else None

    def fingerprint(self) -> str:
        what = self.topics or self.pattern or [f"{tp.topic}:{tp.partition}" for tp in self.partitions]
        return f"kafka:{what}"

    def reader(self, storage, uid, name):
        reader = KafkaReader(self, None, self.error_policy.handler(name))
        if self.stopping_offsets is not None:
            keys = reader._partitions()
            reader.stop = reader.resolve(self.stopping_offsets, keys)
        return reader


class KafkaSourceBuilder:
    """As Flink's, ``set_bootstrap_servers`` and ``set_group_id`` set the properties ``bootstrap.servers``
    and ``group.id``: the last call that sets one wins, whichever of the setters it is."""

    def __init__(self):
        self._topics: list[str] = []
        self._pattern = None
        self._partitions: set = set()
        self._starting = KafkaOffsetsInitializer.earliest()
        self._stopping = None
        self._bounded = False
        self._deserializer = None
        self._error_policy = None
        self._properties: dict = {}

    def set_bootstrap_servers(self, bootstrap_servers: str) -> "KafkaSourceBuilder":
        return self.set_property("bootstrap.servers", bootstrap_servers)

    def set_group_id(self, group_id: str) -> "KafkaSourceBuilder":
        return self.set_property("group.id", group_id)

    def set_topics(self, *topics: str) -> "KafkaSourceBuilder":
        self._topics = [t for ts in topics for t in ([ts] if isinstance(ts, str) else ts)]
        return self

    def set_topic_pattern(self, topic_pattern: str) -> "KafkaSourceBuilder":
        self._pattern = topic_pattern
        return self

    def set_partitions(self, partitions) -> "KafkaSourceBuilder":
        self._partitions = set(partitions)
        return self

    def set_starting_offsets(self, starting_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        self._starting = starting_offsets_initializer
        return self

    def set_unbounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        """Stop at these offsets (resolved when the job starts) but stay an unbounded job."""
        self._stopping = stopping_offsets_initializer
        self._bounded = False
        return self

    def set_bounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        """Read up to these offsets (resolved when the job starts), then finish the job."""
        self._stopping = stopping_offsets_initializer
        self._bounded = True
        return self

    def set_value_only_deserializer(self, deserialization_schema) -> "KafkaSourceBuilder":
        self._deserializer = _ValueOnly(deserialization_schema)
        return self

    def set_error_policy(self, error_policy: ErrorPolicy) -> "KafkaSourceBuilder":
        """keyspan: what a record the deserializer cannot read does: ``ErrorPolicy.fail()`` (the default;
        ``skip()`` when the value schema ignores parse errors), ``skip()`` or ``dead_letter(tag)``."""
        if not isinstance(error_policy, ErrorPolicy):
            raise TypeError(f"set_error_policy needs an ErrorPolicy, got {error_policy!r}")
        self._error_policy = error_policy
        return self

    def set_deserializer(self, record_deserializer: KafkaRecordDeserializationSchema) -> "KafkaSourceBuilder":
        """keyspan/Flink Java: deserialize the whole record (key, value, headers, timestamp)."""
        self._deserializer = record_deserializer
        return self

    def set_client_id_prefix(self, prefix: str) -> "KafkaSourceBuilder":
        self._properties["client.id"] = prefix
        return self

    def set_property(self, key: str, value: str) -> "KafkaSourceBuilder":
        self._properties[key] = value
        return self

    def set_properties(self, props: dict) -> "KafkaSourceBuilder":
        self._properties.update(props)
        return self

    def build(self) -> KafkaSource:
        return KafkaSource(self)
