"""What a checkpoint consists of: which state files a restore reads, in which order, when a subtask
rewrites its key groups as one full snapshot, and which files retention may delete."""

from __future__ import annotations

from keyspan.checkpoint.handles import DELTA, FULL, OPERATOR, Manifest, StateHandle, is_catch_up, is_keyed, overlaps


def next_manifest(previous: Manifest, new_handles: list[StateHandle]) -> Manifest:
    """The state files a restore of this checkpoint needs: per key group, the newest full snapshot
    and the deltas after it. Files fully shadowed by newer full snapshots drop out, except the deltas
    since the chain the newest full snapshot compacted began: they stay as catch-ups (restores skip
    them) until the next compaction. Operator state (a whole subtask's operator state per file)
    keeps only the newest file per subtask, and only those of the newest parallelism (every subtask
    writes one every epoch)."""
    manifest = {uid: list(handles) for uid, handles in previous.items()}
    for h in new_handles:
        manifest.setdefault(h["uid"], []).append(h)
    for uid, handles in manifest.items():
        newest_full: dict[int, StateHandle] = {}
        for h in handles:
            if h["kind"] == FULL:
                for kg in range(*h["kg"]):
                    if kg not in newest_full or newest_full[kg]["epoch"] < h["epoch"]:
                        newest_full[kg] = h
        keyed = []
        for h in handles:
            if not is_keyed(h):
                continue
            fulls = [newest_full.get(kg) for kg in range(*h["kg"])]
            if any(f is None or f["epoch"] <= h["epoch"] for f in fulls):
                keyed.append(h)
            elif h["kind"] == DELTA and all(f.get("catch_up_from", h["epoch"] + 1) <= h["epoch"] for f in fulls):
                keyed.append(h if is_catch_up(h) else {**h, "catch_up": True})
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
    checkpoint, oldest first; None when the cache must be rebuilt instead: a full snapshot after
    ``version`` whose compacted chain began after it (the deltas in between are gone), or one
    written without its epoch's delta (after a rescale)."""
    newer = [h for h in handles if is_keyed(h) and h["epoch"] > version and overlaps(h, key_groups)]
    deltas = {(h["epoch"], tuple(h["kg"])) for h in newer if h["kind"] == DELTA}
    for h in newer:
        if h["kind"] != FULL:
            continue
        chain_start, kg = h.get("catch_up_from"), tuple(h["kg"])
        # every epoch after ``version`` up to the full snapshot has its delta listed
        if (chain_start is None or chain_start > version + 1 or (h["epoch"], kg) not in deltas
                or (chain_start == version + 1 and (chain_start, kg) not in deltas)):
            return None
    return sorted((h for h in newer if h["kind"] == DELTA), key=lambda h: h["epoch"])


def _chain(handles: list[StateHandle], key_groups: range) -> list[StateHandle]:
    """The range's own files that restores read, oldest first."""
    own = [key_groups.start, key_groups.stop]
    return sorted((h for h in handles if is_keyed(h) and not is_catch_up(h) and h["kg"] == own),
                  key=lambda h: h["epoch"])


def _base(chain: list[StateHandle]) -> StateHandle | None:
    fulls = [h for h in chain if h["kind"] == FULL]
    return fulls[-1] if fulls else (chain[0] if chain else None)


def compaction_base(handles: list[StateHandle], key_groups: range) -> StateHandle | None:
    """The range's newest full snapshot, or its first delta when it has none: where its chain of deltas starts."""
    return _base(_chain(handles, key_groups))


def full_snapshot_due(handles: list[StateHandle], key_groups: range, max_chain: int) -> bool:
    """Compact when the deltas since the last full snapshot outweigh it (or grow too many): the
    rewrite then costs about what the deltas cost, so an epoch's cost follows what it touched,
    not the total state, and a restore reads at most ~2× the state in a bounded number of files."""
    chain = _chain(handles, key_groups)
    base = _base(chain)
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
