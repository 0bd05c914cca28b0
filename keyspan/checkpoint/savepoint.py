"""Savepoints: user-owned, self-contained, canonical copies of a committed checkpoint.

A savepoint directory holds ``_metadata.json`` and a copy of every state file the checkpoint's
manifest lists, in the backend-neutral key-group format, with checksums. Nothing in it points
back at the job's checkpoint storage, so it can be copied anywhere and restored on any backend,
at any parallelism up to the max parallelism it records. keyspan never deletes a savepoint.
"""

from __future__ import annotations

import json
import posixpath
import time
import uuid

from keyspan.checkpoint import integrity, statefile
from keyspan.checkpoint.handles import is_catch_up
from keyspan.io.storage import Storage, safe_name

FORMAT = "keyspan-savepoint/1"
METADATA = "_metadata.json"


class SavepointError(ValueError):
    """A savepoint that cannot be restored; the message names the file or operator."""


def default_target(workdir_savepoints: str, job_id: str, epoch: int) -> str:
    return posixpath.join(workdir_savepoints, job_id, f"savepoint-{epoch:010d}-{uuid.uuid4().hex[:6]}")


def write_savepoint(job_storage: Storage, checkpoint: dict, target_uri: str, *, job_name: str,
                    job_file_bytes: bytes | None, extra: dict | None = None, key: bytes | None = None) -> str:
    """Copy the checkpoint's state files a restore reads into ``target_uri`` and write the metadata
    last, so a half-written savepoint has no ``_metadata.json`` and is never mistaken for a complete one."""
    target = Storage(target_uri)
    state: dict[str, list[dict]] = {}
    for uid, handles in checkpoint["manifest"].items():
        copied = []
        for h in (h for h in handles if not is_catch_up(h)):
            src_storage, src_rel = statefile.resolve(job_storage, h["path"])
            rel = posixpath.join("state", safe_name(uid), posixpath.basename(src_rel))
            src_storage.copy_file(src_rel, target, rel)  # in pieces: a large state file is never held whole
            copied.append({**h, "path": rel})
        state[uid] = copied
    metadata = _metadata(checkpoint, state, job_name, extra)
    if job_file_bytes is not None:
        target.write("job.py", job_file_bytes)
        metadata["job_file"] = "job.py"
    _write_metadata(target, metadata, key)
    return target.uri


ABANDONED = "abandoned"  # beside the job's checkpoints: records of those a fall back took out of its history


def checkpoint_dir(epoch: int) -> str:
    """Where a retained checkpoint's ``_metadata.json`` lives, relative to the job's checkpoint storage."""
    return f"chk-{epoch:010d}"


def write_checkpoint_metadata(job_storage: Storage, checkpoint: dict, *, job_name: str,
                              key: bytes | None) -> None:
    """Make a committed checkpoint self-contained (Flink's retained checkpoint): its ``_metadata.json``,
    in the savepoint format, lists the state files by their paths under the job's checkpoint storage
    (``state_root`` ".."), so ``keyspan run -s <storage>/<job>/chk-N`` restores it without the
    metadata store, also after the job's checkpoint folder was copied elsewhere."""
    metadata = _metadata(checkpoint, checkpoint["manifest"], job_name, {"state_root": ".."})
    _write_metadata(job_storage.child(checkpoint_dir(checkpoint["epoch"])), metadata, key)


def _metadata(checkpoint: dict, state: dict, job_name: str, extra: dict | None) -> dict:
    return {
        "format": FORMAT,
        "job_id": checkpoint["job_id"],
        "job_name": job_name,
        "epoch": checkpoint["epoch"],
        "created_at": time.time(),
        "max_parallelism": checkpoint["max_parallelism"],
        "parallelism": checkpoint["parallelism"],
        "code_version": checkpoint.get("code_version"),
        "restored_from": checkpoint.get("restored_from"),
        "source_offsets": checkpoint["source_offsets"],
        "sources": checkpoint.get("sources"),
        "operators": checkpoint["operators"],
        "event_time": checkpoint.get("event_time") or {},
        "state": state,
        **(extra or {}),
    }


def _write_metadata(target: Storage, metadata: dict, key: bytes | None) -> None:
    if key is not None:
        metadata = integrity.sign(metadata, key)
    target.write(METADATA, json.dumps(metadata, indent=1, sort_keys=True).encode())


def load_savepoint(uri: str, verify: bool = True, key: bytes | None = None) -> dict:
    """Read and validate a savepoint (or retained checkpoint) before anything in it is unpickled:
    its metadata signed with ``key`` (when given), every file present with its recorded checksum."""
    storage = Storage(uri)
    if not storage.exists(METADATA):
        raise SavepointError(f"{storage.url(METADATA)} does not exist: {uri} is not a complete savepoint "
                             "or retained checkpoint")
    try:
        metadata = json.loads(storage.read(METADATA))
    except ValueError as exc:
        raise SavepointError(f"{storage.url(METADATA)} is corrupt: {exc}") from exc
    if metadata.get("format") != FORMAT:
        raise SavepointError(f"{storage.url(METADATA)}: unknown savepoint format {metadata.get('format')!r}")
    if key is not None and not integrity.signature_ok(metadata, key):
        state = "is not signed" if "signature" not in metadata else "does not match its signature"
        raise SavepointError(
            f"{storage.url(METADATA)} {state} under this keyspan's savepoint key: it was altered, or written "
            "where another key is configured. Nothing was read from it. If you trust it, set "
            "KEYSPAN_SAVEPOINT_KEY to the key of the keyspan that wrote it (its <workdir>/savepoint.key)")
    metadata["uri"] = storage.uri
    if verify:
        try:
            integrity.verify_manifest(_state_storage(metadata), metadata["state"])
        except integrity.UnreadableCheckpoint as exc:
            raise SavepointError(f"savepoint {storage.uri} cannot be restored: {exc}") from None
    return metadata


def _state_storage(metadata: dict) -> Storage:
    """Where the metadata's relative state paths start: the savepoint's own folder, or, for a retained
    checkpoint, the job's checkpoint storage above it."""
    root = metadata["uri"]
    if metadata.get("state_root") == "..":
        root = posixpath.dirname(root.rstrip("/"))
    return Storage(root)


def restored_manifest(metadata: dict) -> dict[str, list[dict]]:
    """The savepoint's state files, addressed by absolute URL, as a checkpoint manifest."""
    storage = _state_storage(metadata)
    return {uid: [{**h, "path": h["path"] if "://" in h["path"] else storage.url(h["path"])} for h in handles]
            for uid, handles in metadata["state"].items()}


# --- savepoints written by the State Processor API -------------------------------------------------

def write_state_file(target_uri: str, uid: str, name: str, sections, meta: dict | None = None) -> dict:
    """One key-group state file of a savepoint being written (``statefile`` format, path relative to
    the savepoint); returns path, size and checksum for its handle."""
    return statefile.write(Storage(target_uri), posixpath.join("state", safe_name(uid), name), sections, meta)


def write_operator_state_file(target_uri: str, uid: str, name: str, payload: bytes) -> dict:
    """One operator subtask's operator state (a file with the one non-key-group section)."""
    return statefile.write_section(Storage(target_uri), posixpath.join("state", safe_name(uid), name), payload,
                                   meta={"kind": "operator"})


def write_derived_savepoint(target_uri: str, *, state: dict[str, list[dict]], operators: list[dict],
                            max_parallelism: int, parallelism: int, base: dict | None, operations: list[str],
                            job_id: str | None = None, job_name: str | None = None,
                            key: bytes | None = None) -> str:
    """The metadata of a savepoint made offline from ``base`` (a loaded savepoint, or None for a new
    one). Handles with a relative path were written into ``target_uri`` already; those with an
    absolute URL (the base's files) are copied in, so the result is self-contained. The metadata is
    written last (signed with ``key``), as in ``write_savepoint``; ``operations`` says what was done,
    for the version tree."""
    target = Storage(target_uri)
    placed: dict[str, list[dict]] = {}
    for uid, handles in state.items():
        placed[uid] = []
        for h in handles:
            if "://" in h["path"]:
                src_storage, src_rel = statefile.resolve(target, h["path"])
                rel = posixpath.join("state", safe_name(uid), posixpath.basename(src_rel))
                src_storage.copy_file(src_rel, target, rel)
                h = {**h, "path": rel}
            placed[uid].append(h)
    base = base or {}
    metadata = {
        "format": FORMAT,
        "job_id": job_id or base.get("job_id"),
        "job_name": job_name or base.get("job_name"),
        "epoch": base.get("epoch", 0),
        "created_at": time.time(),
        "max_parallelism": max_parallelism,
        "parallelism": parallelism,
        "code_version": base.get("code_version"),
        "restored_from": f"savepoint:{base['uri']}" if base.get("uri") else None,
        "source_offsets": base.get("source_offsets") or {},
        "operators": operators,
        "event_time": base.get("event_time") or {},
        "state": placed,
        "derived_from": base.get("uri"),
        "operations": list(operations),
    }
    if base.get("job_file"):
        Storage(base["uri"]).copy_file(base["job_file"], target, "job.py")
        metadata["job_file"] = "job.py"
    _write_metadata(target, metadata, key)
    return target.uri
