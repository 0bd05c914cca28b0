"""Reading committed keyed state outside a job (a small State Processor API): for inspection,
tests and benchmarks that check what a checkpoint really holds."""

from __future__ import annotations

from keyspan.checkpoint import statefile
from keyspan.checkpoint.manifest import restore_order
from keyspan.checkpoint.metadata import MetadataStore
from keyspan.io.storage import Storage
from keyspan.io import serde


def read_keyed_state(storage: Storage, manifest: dict, uid: str, max_parallelism: int) -> dict[str, dict]:
    """State name → {key: value} for one operator, as of the checkpoint whose manifest is given."""
    state: dict[str, dict] = {}
    all_groups = range(max_parallelism)
    for h in restore_order(manifest.get(uid, [])):
        for _kg, payload in statefile.read_key_groups(storage, h["path"], all_groups):
            for name, (puts, deletes) in serde.loads(payload).items():
                table = state.setdefault(name, {})
                table.update(puts)
                for key in deletes:
                    table.pop(key, None)
    return state


def latest_keyed_state(metadata_url: str, checkpoint_root: str, job_id: str, uid: str) -> dict[str, dict]:
    store = MetadataStore(metadata_url)
    checkpoint = store.latest_checkpoint(job_id)
    if checkpoint is None:
        raise LookupError(f"job '{job_id}' has no committed checkpoint")
    storage = Storage(checkpoint_root).child(job_id)
    return read_keyed_state(storage, checkpoint["manifest"], uid, checkpoint["max_parallelism"])


def key_group_payloads(storage: Storage, handles: list, key_group: int, stats: statefile.ReadStats | None = None):
    """The encoded sections of one key group, in the order a restore applies them (full snapshot,
    then deltas): reads only that key group's byte range of each file that covers it."""
    groups = range(key_group, key_group + 1)
    for h in restore_order(handles, groups):
        for _kg, payload in statefile.read_key_groups(storage, h["path"], groups, stats):
            yield payload


def key_group_state(storage: Storage, handles: list, key_group: int,
                    stats: statefile.ReadStats | None = None) -> dict[str, dict]:
    """State name → {key: stored value} of one key group as of the checkpoint ``handles`` belong to
    (one operator's manifest entry). Values are as stored: TTL values keep their timestamps."""
    state: dict[str, dict] = {}
    for payload in key_group_payloads(storage, handles, key_group, stats):
        for name, (puts, deletes) in serde.loads(payload).items():
            table = state.setdefault(name, {})
            table.update(puts)
            for key in deletes:
                table.pop(key, None)
    return state
