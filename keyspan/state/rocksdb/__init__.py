"""The embedded RocksDB keyed state backend: state on local disk (through ``rocksdict``), not in Python dicts.

Layout. Every RocksDB key starts with the key group (2 bytes, big-endian), then a state id
(2 bytes, big-endian, assigned per backend instance), then the user key serialized
deterministically (pickle protocol 5, memo off for composite keys). A map state stores one
RocksDB entry per map entry: the user key is length-prefixed (4 bytes, big-endian) and followed
by the serialized map key. So one key group is one contiguous key range, one state inside a key
group is a contiguous range, and one map is a contiguous range: snapshots and restores read and
write ranges, and a large map is never rewritten as a whole. A namespaced state (per-window
state) is laid out as a map whose map keys are the namespaces. Values are pickled
(``keyspan.io.serde``).

Epochs. Value, reducing and aggregating states without TTL keep the values of the keys an epoch
reads or writes as objects, keyed by user key (``RocksDBObjectCell``): a keyed stage fills this object
cache with sorted lookups per chunk of input records (``prefetch``), the epoch's writes wait there
until ``confirm`` hands them to RocksDB in one sorted write batch, ``rollback`` drops them, and the
epoch's delta is built from them without decoding. Mutable values are kept pickled (``_Frozen``), so
every read is a fresh copy, as RocksDB's reads are. Beyond ``_object_limit`` entries the written ones
are spilled to RocksDB through the undo log, and values whose pickle exceeds 4 KB take the byte cache.

Everything else (list states, TTL states, large values) goes through the byte cache and the undo log:
the first time an epoch touches an entry, its previous bytes (or "absent") go into an in-memory undo
log; ``rollback`` writes those bytes back, ``confirm`` forgets them. The byte cache maps RocksDB keys →
bytes: ``prefetch`` fills it too, writes wait there and go to RocksDB as one write batch per ~4 MB, and
the epoch's delta takes the touched values from it. It holds at most a quarter of the memory
configuration's fixed memory per slot (then it is flushed and emptied); it outlives a confirmed epoch
while at most half full and is emptied on rollback and whenever RocksDB is written directly. Memory is
proportional to what the epoch touched (the undo log, the written objects) plus those bounds, not to
the state.

Sections. ``changed_sections``/``all_sections``/``apply_section`` use the heap backend's canonical
format (key group → {state: ({user key: value}, [deleted user keys])}, a map state's value being
the whole dict), so checkpoints and savepoints move freely between the two backends. Since
sections don't say which state is a map, a state restored before it is registered is kept one
value per user key and is re-laid out entry by entry when it is registered as a map state.

TTL. A TTL-enabled value/reducing/aggregating state or map entry is stored as a 0x00 tag byte, the
last-access timestamp (8 bytes, signed big-endian) and the pickled value; pickles start with 0x80,
so stored bytes say which form they are in, and the TTL check (and the compaction-filter emulation)
reads the timestamp without unpickling. A TTL-enabled list is one pickled list of ``TtlValue``.
Sections carry ``TtlValue`` objects (``keyspan.state.ttl``), as the heap backend does.

The RocksDB directory is scratch space: it is deleted when the backend is closed or collected
or the process exits; durability comes from keyspan's checkpoints, as in Flink. Spark's Python
workers end with ``os._exit``, so the first backend a process opens also deletes the directories
left by dead processes of the same host.

Modules: ``layout`` (key and value bytes, views, batches), ``states`` (the cells the state kinds of
``keyspan.state.internal`` and ``keyspan.state.ttl`` run on), ``backend`` (registration, undo log,
TTL cleanup, epochs; ``EmbeddedRocksDBStateBackend``), ``snapshot`` (sections and restores),
``memory`` (``RocksDBMemoryConfiguration``), ``scratch`` (local directories).
"""

from keyspan.state.rocksdb.backend import EmbeddedRocksDBStateBackend, RocksDBKeyedStateBackend
from keyspan.state.rocksdb.layout import _Batch, decode_key, encode_key
from keyspan.state.rocksdb.memory import _SHARED_MEMORY, RocksDBMemoryConfiguration, parse_memory_size

__all__ = ["EmbeddedRocksDBStateBackend", "RocksDBKeyedStateBackend", "RocksDBMemoryConfiguration",
           "parse_memory_size", "encode_key", "decode_key"]
