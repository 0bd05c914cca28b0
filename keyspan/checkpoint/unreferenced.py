"""State files that no checkpoint will ever read again: written by an epoch whose checkpoint never
committed (a failed checkpoint, a killed driver or task attempt), or left by a retired checkpoint
when the driver died before deleting them. Retention deletes only the files of checkpoints it
retires itself, so these stay until the user asks (``keyspan checkpoints JOB --unreferenced``).

A file counts only when its epoch is at most the newest committed one: a checkpoint lists every
file its state needs, so a file a retained checkpoint does not list is never listed by a later one,
and files of an epoch still running (a newer number) are left alone. Files of abandoned checkpoints
(kept for inspection after a fall back) count as listed."""

from __future__ import annotations

import json
from dataclasses import dataclass

from keyspan.checkpoint.handles import state_file_epoch
from keyspan.checkpoint.manifest import manifest_paths
from keyspan.checkpoint.metadata import MetadataStore
from keyspan.checkpoint.savepoint import ABANDONED
from keyspan.io.storage import Storage


@dataclass(frozen=True)
class UnreferencedFile:
    path: str  # relative to the job's checkpoint folder
    epoch: int
    size: int


def unreferenced_state_files(store: MetadataStore, storage: Storage, job_id: str) -> list[UnreferencedFile]:
    """The job's state files under ``storage`` (its checkpoint folder) that no retained or abandoned
    checkpoint lists, oldest epoch first; none when the store knows no checkpoint of the job."""
    retained = store.list_checkpoints(job_id, include_discarded=False)
    if not retained:
        return []  # with nothing to compare against, no file can be shown unused
    newest = retained[-1]["epoch"]
    manifests = [c["manifest"] for c in retained]
    for name in storage.list(ABANDONED):
        manifests.append(json.loads(storage.read(f"{ABANDONED}/{name}"))["manifest"])
    prefix = storage.uri.rstrip("/") + "/"
    listed = {p[len(prefix):] if p.startswith(prefix) else p for m in manifests for p in manifest_paths(m)}
    found = []
    for rel in storage.files_under("state"):
        path = f"state/{rel}"
        epoch = state_file_epoch(path)
        if epoch is not None and epoch <= newest and path not in listed:
            found.append(UnreferencedFile(path, epoch, storage.size(path)))
    return sorted(found, key=lambda f: (f.epoch, f.path))
