"""Integrity of what a restore reads: every state file is checked against the sha256 its handle
recorded, and the metadata of a savepoint or retained checkpoint carries an HMAC, so nothing is
unpickled from a file keyspan did not write (or that changed since).

The HMAC key is ``KEYSPAN_SAVEPOINT_KEY`` (or ``savepoint_key`` in keyspan.toml) when set, otherwise
a random key generated once into ``<workdir>/savepoint.key``. Savepoints signed with one key are
restorable wherever the same key is configured; anything else is refused before it is read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets

from keyspan.checkpoint import statefile
from keyspan.common.settings import load as load_settings
from keyspan.io.storage import Storage

KEY_FILE = "savepoint.key"


class UnreadableCheckpoint(IOError):
    """A checkpoint a restore must not use; the message names the file and why."""


def signing_key(workdir: str) -> bytes:
    """The key that signs and verifies savepoint and checkpoint metadata (see the module docstring)."""
    configured = load_settings().savepoint_key
    if configured:
        return configured.encode()
    path = os.path.join(os.path.abspath(workdir), KEY_FILE)
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another driver made it a moment ago
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
    with open(path) as f:
        return f.read().strip().encode()


def _digest(metadata: dict, key: bytes) -> str:
    body = {k: v for k, v in metadata.items() if k not in ("signature", "uri")}
    return hmac.new(key, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def sign(metadata: dict, key: bytes) -> dict:
    return {**metadata, "signature": _digest(metadata, key)}


def signature_ok(metadata: dict, key: bytes) -> bool:
    return hmac.compare_digest(str(metadata.get("signature", "")), _digest(metadata, key))


def verify_manifest(storage: Storage, manifest: dict) -> None:
    """Every file the checkpoint lists exists with its recorded checksum; raises
    ``UnreadableCheckpoint`` naming the first file that does not. Reads each file once, in pieces."""
    for uid, handles in manifest.items():
        for h in handles:
            file_storage, rel = statefile.resolve(storage, h["path"])
            try:
                statefile.verify(file_storage, rel, h["sha256"])
            except statefile.CorruptStateFile as exc:
                raise UnreadableCheckpoint(f"{exc} (operator '{uid}')") from None


def newest_intact(storage: Storage, checkpoints: list[dict]) -> tuple[dict | None, list[tuple[int, str]]]:
    """The newest of ``checkpoints`` whose files are all intact, and (epoch, why) of every newer one
    that is not."""
    rejected = []
    for checkpoint in sorted(checkpoints, key=lambda c: c["epoch"], reverse=True):
        try:
            verify_manifest(storage, checkpoint["manifest"])
        except UnreadableCheckpoint as exc:
            rejected.append((checkpoint["epoch"], str(exc)))
            continue
        return checkpoint, rejected
    return None, rejected
