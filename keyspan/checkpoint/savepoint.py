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

from keyspan.checkpoint import statefile
from keyspan.io.storage import Storage

FORMAT = "keyspan-savepoint/1"
METADATA = "_metadata.json"


class SavepointError(ValueError):
    """A savepoint that cannot be restored; the message names the file or operator."""


def default_target(workdir_savepoints: str, job_id: str, epoch: int) -> str:
    return posixpath.join(workdir_savepoints, job_id, f"savepoint-{epoch:010d}-{uuid.uuid4().hex[:6]}")


def write_savepoint(job_storage: Storage, checkpoint: dict, target_uri: str, *, job_name: str,
                    job_file_bytes: bytes | None, extra: dict | None = None) -> str:
    """Copy the checkpoint's state files into ``target_uri`` and write the metadata last, so a
    half-written savepoint has no ``_metadata.json`` and is never mistaken for a complete one."""
    target = Storage(target_uri)
    state: dict[str, list[dict]] = {}
    for uid, handles in checkpoint["manifest"].items():
        copied = []
        for h in handles:
            src_storage, src_rel = statefile.resolve(job_storage, h["path"])
            rel = posixpath.join("state", _safe(uid), posixpath.basename(src_rel))
            src_storage.copy_file(src_rel, target, rel)  # in pieces: a large state file is never held whole
            copied.append({**h, "path": rel})
        state[uid] = copied
    metadata = {
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
        "operators": checkpoint["operators"],
        "event_time": checkpoint.get("event_time") or {},
        "state": state,
        **(extra or {}),
    }
    if job_file_bytes is not None:
        target.write("job.py", job_file_bytes)
        metadata["job_file"] = "job.py"
    target.write(METADATA, json.dumps(metadata, indent=1, sort_keys=True).encode())
    return target.uri


def load_savepoint(uri: str, verify: bool = True) -> dict:
    """Read and validate a savepoint: every file present with its recorded checksum."""
    storage = Storage(uri)
    if not storage.exists(METADATA):
        raise SavepointError(f"{storage.url(METADATA)} does not exist: {uri} is not a complete savepoint")
    try:
        metadata = json.loads(storage.read(METADATA))
    except ValueError as exc:
        raise SavepointError(f"{storage.url(METADATA)} is corrupt: {exc}") from exc
    if metadata.get("format") != FORMAT:
        raise SavepointError(f"{storage.url(METADATA)}: unknown savepoint format {metadata.get('format')!r}")
    if verify:
        for handles in metadata["state"].values():
            for h in handles:
                try:
                    statefile.verify(storage, h["path"], h["sha256"])
                except statefile.CorruptStateFile as exc:
                    raise SavepointError(f"savepoint {storage.uri} cannot be restored: {exc}") from exc
    metadata["uri"] = storage.uri
    return metadata


def restored_manifest(metadata: dict) -> dict[str, list[dict]]:
    """The savepoint's state files, addressed by absolute URL, as a checkpoint manifest."""
    storage = Storage(metadata["uri"])
    return {uid: [{**h, "path": storage.url(h["path"])} for h in handles] for uid, handles in metadata["state"].items()}


def _safe(uid: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in uid)


# --- savepoints written by the State Processor API -------------------------------------------------

def write_state_file(target_uri: str, uid: str, name: str, sections, meta: dict | None = None) -> dict:
    """One key-group state file of a savepoint being written (``statefile`` format, path relative to
    the savepoint); returns path, size and checksum for its handle."""
    return statefile.write(Storage(target_uri), posixpath.join("state", _safe(uid), name), sections, meta)


def write_operator_state_file(target_uri: str, uid: str, name: str, payload: bytes) -> dict:
    """One operator subtask's operator state (a file with the one non-key-group section)."""
    return statefile.write_section(Storage(target_uri), posixpath.join("state", _safe(uid), name), payload,
                                   meta={"kind": "operator"})


def write_derived_savepoint(target_uri: str, *, state: dict[str, list[dict]], operators: list[dict],
                            max_parallelism: int, parallelism: int, base: dict | None, operations: list[str],
                            job_id: str | None = None, job_name: str | None = None) -> str:
    """The metadata of a savepoint made offline from ``base`` (a loaded savepoint, or None for a new
    one). Handles with a relative path were written into ``target_uri`` already; those with an
    absolute URL (the base's files) are copied in, so the result is self-contained. The metadata is
    written last, as in ``write_savepoint``; ``operations`` says what was done, for the version tree."""
    target = Storage(target_uri)
    placed: dict[str, list[dict]] = {}
    for uid, handles in state.items():
        placed[uid] = []
        for h in handles:
            if "://" in h["path"]:
                src_storage, src_rel = statefile.resolve(target, h["path"])
                rel = posixpath.join("state", _safe(uid), posixpath.basename(src_rel))
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
    target.write(METADATA, json.dumps(metadata, indent=1, sort_keys=True).encode())
    return target.uri
