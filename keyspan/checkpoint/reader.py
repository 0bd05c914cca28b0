"""Reading committed keyed state outside a job (a small State Processor API): for inspection,
tests and benchmarks that check what a checkpoint really holds."""

from __future__ import annotations

from keyspan.checkpoint import statefile
from keyspan.checkpoint.metadata import MetadataStore
from keyspan.io.storage import Storage
from keyspan.io import serde


def read_keyed_state(storage: Storage, manifest: dict, uid: str, max_parallelism: int) -> dict[str, dict]:
    """State name → {key: value} for one operator, as of the checkpoint whose manifest is given."""
    state: dict[str, dict] = {}
    all_groups = range(max_parallelism)
    for h in sorted(manifest.get(uid, []), key=lambda h: (h["epoch"], h["kind"] != "full")):
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
