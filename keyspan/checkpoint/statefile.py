"""The key-group state file: one section per key group, an index at the end.

A checkpoint or savepoint file holds the state one subtask wrote, split by key group, so a
subtask restoring at another parallelism reads only the byte ranges of the key groups it now
owns. The format is backend-neutral (pickled Python values), which keeps savepoints canonical.
"""

from __future__ import annotations

import hashlib
import json
import struct

from keyspan.checkpoint.storage import Storage

MAGIC = b"KSKG1\n"
_TAIL = struct.Struct("<Q6s")
TAIL_MAGIC = b"\nKSKG1"


class CorruptStateFile(IOError):
    pass


def encode(sections: dict[int, bytes], meta: dict | None = None) -> bytes:
    """Sections (key group → payload) in key-group order, so a contiguous range is one read."""
    parts = [MAGIC]
    offset = len(MAGIC)
    index = {}
    for kg in sorted(sections):
        payload = sections[kg]
        index[str(kg)] = [offset, len(payload)]
        parts.append(payload)
        offset += len(payload)
    footer = json.dumps({"groups": index, "meta": meta or {}}, sort_keys=True).encode()
    parts.append(footer)
    parts.append(_TAIL.pack(len(footer), TAIL_MAGIC))
    return b"".join(parts)


def write(storage: Storage, rel: str, sections: dict[int, bytes], meta: dict | None = None) -> dict:
    """Write atomically; returns size and checksum for the handle."""
    data = encode(sections, meta)
    storage.write(rel, data)
    return {"path": rel, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def resolve(storage: Storage, path: str) -> tuple[Storage, str]:
    """A handle's path is relative to the job's storage, or an absolute URL (a restored savepoint's file)."""
    if "://" in path:
        parent, name = path.rsplit("/", 1)
        return storage.at(parent), name
    return storage, path


class ReadStats:
    """Bytes read per restore, so tests and benchmarks can check a subtask reads only its share."""

    def __init__(self):
        self.bytes_read = 0
        self.files = 0


def read_key_groups(storage: Storage, rel: str, key_groups: range, stats: ReadStats | None = None):
    """Yield (key_group, payload) for the wanted key groups, reading only their byte span."""
    storage, rel = resolve(storage, rel)
    size = storage.size(rel)
    if size < len(MAGIC) + _TAIL.size:
        raise CorruptStateFile(f"state file {storage.url(rel)} is truncated ({size} bytes)")
    tail = storage.read(rel, size - _TAIL.size, _TAIL.size)
    footer_len, magic = _TAIL.unpack(tail)
    if magic != TAIL_MAGIC:
        raise CorruptStateFile(f"state file {storage.url(rel)} has no valid footer")
    footer_start = size - _TAIL.size - footer_len
    footer = json.loads(storage.read(rel, footer_start, footer_len))
    wanted = [(int(kg), off, ln) for kg, (off, ln) in footer["groups"].items() if int(kg) in key_groups]
    if stats is not None:
        stats.bytes_read += _TAIL.size + footer_len
        stats.files += 1
    if not wanted:
        return
    wanted.sort()
    lo = wanted[0][1]
    hi = max(off + ln for _, off, ln in wanted)
    span = storage.read(rel, lo, hi - lo)
    if len(span) != hi - lo:  # a ranged read of an object store stops short at a truncated object
        raise CorruptStateFile(f"state file {storage.url(rel)} is truncated: key groups need bytes {lo}-{hi}, "
                               f"got {len(span)}")
    if stats is not None:
        stats.bytes_read += hi - lo
    for kg, off, ln in wanted:
        yield kg, span[off - lo : off - lo + ln]


def verify(storage: Storage, rel: str, expected_sha256: str) -> None:
    """Refuse a missing or altered file, naming it."""
    if not storage.exists(rel):
        raise CorruptStateFile(f"state file {storage.url(rel)} is missing")
    digest = hashlib.sha256(storage.read(rel)).hexdigest()
    if digest != expected_sha256:
        raise CorruptStateFile(
            f"state file {storage.url(rel)} is corrupt: checksum {digest[:12]}… does not match "
            f"the recorded {expected_sha256[:12]}…"
        )
