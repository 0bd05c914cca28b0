"""What a checkpoint consists of: which state files a restore reads, in which order, when a subtask
rewrites its key groups as one full snapshot, and which files retention may delete."""

from __future__ import annotations

from keyspan.checkpoint.handles import DELTA, FULL, OPERATOR, Manifest, StateHandle, is_catch_up, is_keyed, overlaps


def next_manifest(previous: Manifest, new_handles: list[StateHandle]) -> Manifest:
    """The state files a restore of this checkpoint needs: per key group, the newest full snapshot
    and the deltas after it. Files fully shadowed by newer full snapshots drop out. Operator state
    (a whole subtask's operator state per file) keeps only the newest file per subtask, and only
    those of the newest parallelism (every subtask writes one every epoch)."""
    manifest = {uid: list(handles) for uid, handles in previous.items()}
    for h in new_handles:
        manifest.setdefault(h["uid"], []).append(h)
    for uid, handles in manifest.items():
        keyed = [h for h in handles if is_keyed(h)]
        newest_full: dict[int, int] = {}
        for h in keyed:
            if h["kind"] == FULL:
                for kg in range(*h["kg"]):
                    if newest_full.get(kg, -1) < h["epoch"]:
                        newest_full[kg] = h["epoch"]
        keyed = [h for h in keyed if any(newest_full.get(kg, -1) <= h["epoch"] for kg in range(*h["kg"]))]
        manifest[uid] = keyed + _latest_operator_handles([h for h in handles if h["kind"] == OPERATOR])
    return manifest


def _latest_operator_handles(handles: list[StateHandle]) -> list[StateHandle]:
    if not handles:
        return []
    parallelism = max(handles, key=lambda h: h["epoch"])["parallelism"]
    latest: dict[int, StateHandle] = {}
    for h in handles:
        if h["parallelism"] == parallelism and h["epoch"] >= latest.get(h["subtask"], {"epoch": -1})["epoch"]:
            latest[h["subtask"]] = h
    return [latest[s] for s in sorted(latest)]


def restore_order(handles: list[StateHandle], key_groups: range | None = None) -> list[StateHandle]:
    """The keyed files to apply, oldest first and a full snapshot before the deltas of its epoch;
    only those touching ``key_groups`` when given."""
    chosen = [h for h in handles if is_keyed(h) and not is_catch_up(h)
              and (key_groups is None or overlaps(h, key_groups))]
    return sorted(chosen, key=lambda h: (h["epoch"], h["kind"] != FULL))


def catch_up_order(handles: list[StateHandle], key_groups: range, version: int) -> list[StateHandle] | None:
    """The deltas that bring a worker's cached ``key_groups``, as of epoch ``version``, to the
    checkpoint, oldest first; None when the cache must be rebuilt instead. A full snapshot drops the
    deltas before it from the manifest, so a cache catches up across one only when that snapshot
    is of the epoch right after the cache's, and only from the snapshot's catch-up delta."""
    newer = [h for h in handles if is_keyed(h) and h["epoch"] > version and overlaps(h, key_groups)]
    covered = {(h["epoch"], tuple(h["kg"])) for h in newer if is_catch_up(h)}
    for h in newer:
        if h["kind"] == FULL and (h["epoch"] != version + 1 or (h["epoch"], tuple(h["kg"])) not in covered):
            return None
    return sorted((h for h in newer if h["kind"] == DELTA), key=lambda h: h["epoch"])


def full_snapshot_due(handles: list[StateHandle], key_groups: range, max_chain: int) -> bool:
    """Compact when the deltas since the last full snapshot outweigh it (or grow too many): the
    rewrite then costs about what the deltas cost, so an epoch's cost follows what it touched,
    not the total state, and a restore reads at most ~2× the state in a bounded number of files."""
    chain = sorted((h for h in handles if is_keyed(h) and h["kg"] == [key_groups.start, key_groups.stop]),
                   key=lambda h: h["epoch"])
    fulls = [h for h in chain if h["kind"] == FULL]
    base = fulls[-1] if fulls else (chain[0] if chain else None)  # a first delta serves as the base
    if base is None:
        return False
    deltas = [h for h in chain if h["epoch"] > base["epoch"]]
    if not deltas:
        return False
    if len(deltas) >= max_chain:
        return True
    return sum(h["bytes"] for h in deltas) >= base["bytes"]


def manifest_paths(manifest: Manifest) -> set[str]:
    return {h["path"] for handles in manifest.values() for h in handles}
