"""The key-group state file: one section per key group, an index at the end.

A checkpoint or savepoint file holds the state one subtask wrote, split by key group, so a
subtask restoring at another parallelism reads only the byte ranges of the key groups it now
owns. The format is backend-neutral (pickled Python values), which keeps savepoints canonical.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct

from keyspan.io.storage import Storage

MAGIC = b"KSKG1\n"
_TAIL = struct.Struct("<Q6s")
TAIL_MAGIC = b"\nKSKG1"


class CorruptStateFile(IOError):
    pass


def _entries(sections):
    """(key group, payload bytes or ``write(file)`` function) in ascending key-group order: a dict
    is sorted; a backend's ``LazySections`` offers ``dump_items`` (each section pickled straight
    into the file); any other mapping or iterable of pairs must be in order already."""
    if isinstance(sections, dict):
        return sorted(sections.items())
    if hasattr(sections, "dump_items"):
        return sections.dump_items()
    return sections.items() if hasattr(sections, "items") else sections


class _Out:
    """Counts and hashes what goes into the file."""

    __slots__ = ("_write", "_digest", "offset")

    def __init__(self, f):
        self._write = f.write
        self._digest = hashlib.sha256()
        self.offset = 0

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        self._digest.update(data)
        self._write(data)
        self.offset += n
        return n


def _write_file(f, sections, meta: dict | None) -> dict:
    """Write the whole state file into the binary file ``f``, one section at a time; return its
    size and sha256."""
    out = _Out(f)
    out.write(MAGIC)
    index = {}
    last = None
    for kg, piece in _entries(sections):
        kg = int(kg)
        if last is not None and kg <= last:
            raise ValueError(f"state file sections must come in ascending key-group order: {kg} after {last}")
        last = kg
        start = out.offset
        if callable(piece):
            piece(out)
        else:
            out.write(piece)
        piece = None  # not kept while the next section is built
        index[str(kg)] = [start, out.offset - start]
    footer = json.dumps({"groups": index, "meta": meta or {}}, sort_keys=True).encode()
    out.write(footer)
    out.write(_TAIL.pack(len(footer), TAIL_MAGIC))
    return {"bytes": out.offset, "sha256": out._digest.hexdigest()}


def encode(sections, meta: dict | None = None) -> bytes:
    """Sections (key group → payload) in key-group order, so a contiguous range is one read."""
    buf = io.BytesIO()
    _write_file(buf, sections, meta)
    return buf.getvalue()


def write(storage: Storage, rel: str, sections, meta: dict | None = None, sync: bool = True) -> dict:
    """Write atomically; returns size and checksum for the handle. ``sync`` False: not fsynced on a
    local file system until someone calls ``Storage.sync_files`` (a checkpoint's commit does).

    ``sections``: a dict or mapping key group → payload bytes, or an iterable of (key group,
    payload) pairs in ascending key-group order. The file is written as the sections come
    (``Storage.write_with``): a backend's ``LazySections`` builds one key group's section at a time
    and pickles it straight into the file, so memory holds about one decoded key group, never the
    file. A local write that fails with a transient error is tried again if ``sections`` can be
    read again (a mapping)."""
    result: dict = {}

    def produce(f):
        result.update(_write_file(f, sections, meta))

    storage.write_with(rel, produce, retry=isinstance(sections, dict) or hasattr(sections, "items"), sync=sync)
    return {"path": rel, "bytes": result["bytes"], "sha256": result["sha256"]}


OPERATOR_SECTION = -1  # an operator-state file's one section: outside every key-group range, so keyed readers skip it


def write_section(storage: Storage, rel: str, payload: bytes, meta: dict | None = None, sync: bool = True) -> dict:
    """A file with one section that is no key group (an operator subtask's whole operator state)."""
    return write(storage, rel, {OPERATOR_SECTION: payload}, meta=meta, sync=sync)


def read_section(storage: Storage, rel: str, stats: "ReadStats | None" = None) -> bytes | None:
    for _section, payload in read_key_groups(storage, rel, range(OPERATOR_SECTION, OPERATOR_SECTION + 1), stats):
        return payload
    return None


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


READ_CHUNK = 8 << 20  # restores read neighbouring key groups together up to this many bytes


def read_key_groups(storage: Storage, rel: str, key_groups: range, stats: ReadStats | None = None,
                    chunk: int | None = None):
    """Yield (key_group, payload) for the wanted key groups, reading only their byte span: the
    footer, then neighbouring sections together in reads of up to ``chunk`` bytes (default
    ``READ_CHUNK``; a larger section is one read of its own), so a restore holds about one read's
    worth of the file, never the subtask's whole state."""
    chunk = READ_CHUNK if chunk is None else chunk
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
    wanted = [(off, ln, int(kg)) for kg, (off, ln) in footer["groups"].items() if int(kg) in key_groups]
    if stats is not None:
        stats.bytes_read += _TAIL.size + footer_len
        stats.files += 1
    if not wanted:
        return
    wanted.sort()
    runs: list[list] = []  # [start, end, [(kg, off, ln), ...]]: adjacent sections read together
    for off, ln, kg in wanted:
        if runs and runs[-1][1] == off and off + ln - runs[-1][0] <= chunk:
            runs[-1][1] = off + ln
            runs[-1][2].append((kg, off, ln))
        else:
            runs.append([off, off + ln, [(kg, off, ln)]])
    for lo, hi, members in runs:
        span = storage.read(rel, lo, hi - lo)
        if len(span) != hi - lo:  # a ranged read of an object store stops short at a truncated object
            raise CorruptStateFile(f"state file {storage.url(rel)} is truncated: key groups need bytes {lo}-{hi}, "
                                   f"got {len(span)}")
        if stats is not None:
            stats.bytes_read += hi - lo
        if len(members) == 1:
            yield members[0][0], span
        else:
            for kg, off, ln in members:
                yield kg, span[off - lo : off - lo + ln]
        del span


def verify(storage: Storage, rel: str, expected_sha256: str) -> None:
    """Refuse a missing or altered file, naming it."""
    if not storage.exists(rel):
        raise CorruptStateFile(f"state file {storage.url(rel)} is missing")
    h = hashlib.sha256()
    for piece in storage.iter_read(rel):
        h.update(piece)
    digest = h.hexdigest()
    if digest != expected_sha256:
        raise CorruptStateFile(
            f"state file {storage.url(rel)} is corrupt: checksum {digest[:12]}… does not match "
            f"the recorded {expected_sha256[:12]}…"
        )
