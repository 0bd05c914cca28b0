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
