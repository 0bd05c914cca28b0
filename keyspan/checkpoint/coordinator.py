"""The checkpoint coordinator on the driver: turns the control rows of an epoch's tasks into one
committed checkpoint, or refuses the epoch when they do not describe one consistent cut."""

from __future__ import annotations

from collections import deque

from keyspan.checkpoint.metadata import MetadataStore
from keyspan.io.storage import Storage
from keyspan.io import serde


class InconsistentEpoch(RuntimeError):
    """Two attempts of the same subtask both reached the driver: the epoch must run again."""


def collect_control(rows: list[bytes]) -> dict[tuple[int, int], dict]:
    """(stage, subtask) → that task's report, following forwarded upstream reports."""
    reports: dict[tuple[int, int], dict] = {}
    stack = list(rows)
    seen = set()
    while stack:
        raw = stack.pop()
        if raw in seen:
            continue
        seen.add(raw)
        report = serde.loads(raw)
        key = (report["stage"], report["subtask"])
        known = reports.get(key)
        if known is not None and known["token"] != report["token"]:
            raise InconsistentEpoch(
                f"stage {key[0]} subtask {key[1]}: attempts {known['token']} and {report['token']} both "
                "fed this epoch's output")
        reports[key] = report
        stack.extend(report["upstream"])
    return reports


def next_manifest(previous: dict[str, list[dict]], new_handles: list[dict]) -> dict[str, list[dict]]:
    """The state files a restore of this checkpoint needs: per key group, the newest full snapshot
    and the deltas after it. Files fully shadowed by newer full snapshots drop out. Operator state
    (kind "operator": a whole subtask's operator state per file) keeps only the newest file per
    subtask, and only those of the newest parallelism (every subtask writes one every epoch)."""
    manifest = {uid: list(handles) for uid, handles in previous.items()}
    for h in new_handles:
        manifest.setdefault(h["uid"], []).append(h)
    for uid, handles in manifest.items():
        keyed = [h for h in handles if h["kind"] != "operator"]
        newest_full: dict[int, int] = {}
        for h in keyed:
            if h["kind"] == "full":
                for kg in range(*h["kg"]):
                    if newest_full.get(kg, -1) < h["epoch"]:
                        newest_full[kg] = h["epoch"]
        keyed = [h for h in keyed if any(newest_full.get(kg, -1) <= h["epoch"] for kg in range(*h["kg"]))]
        manifest[uid] = keyed + _latest_operator_handles([h for h in handles if h["kind"] == "operator"])
    return manifest


def _latest_operator_handles(handles: list[dict]) -> list[dict]:
    if not handles:
        return []
    parallelism = max(handles, key=lambda h: h["epoch"])["parallelism"]
    latest: dict[int, dict] = {}
    for h in handles:
        if h["parallelism"] == parallelism and h["epoch"] >= latest.get(h["subtask"], {"epoch": -1})["epoch"]:
            latest[h["subtask"]] = h
    return [latest[s] for s in sorted(latest)]


def manifest_paths(manifest: dict[str, list[dict]]) -> set[str]:
    return {h["path"] for handles in manifest.values() for h in handles}


class Retention:
    """Keeps the last N checkpoints' files; deletes a file once no retained checkpoint lists it."""

    def __init__(self, store: MetadataStore, storage: Storage, job_id: str, retained: int):
        self.store = store
        self.storage = storage
        self.job_id = job_id
        self.retained = retained
        self.window: deque[tuple[int, set[str]]] = deque(
            (c["epoch"], manifest_paths(c["manifest"])) for c in store.list_checkpoints(job_id, include_discarded=False))

    def expiring(self, epoch: int, manifest: dict) -> tuple[list[int], set[str]]:
        """Checkpoints that drop out of the window once ``epoch`` commits, and the files only they
        list; the caller marks them discarded in the commit and deletes the files after it."""
        window = list(self.window) + [(epoch, manifest_paths(manifest))]
        dropped = window[: max(0, len(window) - self.retained)]
        kept = window[len(dropped):]
        live = set().union(*(paths for _, paths in kept))
        doomed = set().union(*(paths for _, paths in dropped)) - live if dropped else set()
        return [e for e, _ in dropped], {p for p in doomed if "://" not in p}  # savepoint files stay

    def committed(self, epoch: int, manifest: dict, doomed: set[str]) -> None:
        self.window.append((epoch, manifest_paths(manifest)))
        while len(self.window) > self.retained:
            self.window.popleft()
        for path in doomed:
            self.storage.delete(path)
