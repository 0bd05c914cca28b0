"""The checkpoint vocabulary shared by tasks, the coordinator, savepoints and readers: state handles
and the task report.

A ``StateHandle`` names one state file of a checkpoint: it is what a task reports, what the
manifest lists and what restores read. It is persisted as JSON (metadata store, savepoint
``_metadata.json``), so it is typed as a ``TypedDict``: the same dict on disk and in memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, NotRequired, TypedDict

FULL = "full"  # every key group of the range, as of the epoch
DELTA = "delta"  # only the keys the epoch changed (puts and deletes)
OPERATOR = "operator"  # one operator subtask's operator state (list, union, broadcast)

HandleKind = Literal["full", "delta", "operator"]


class StateHandle(TypedDict):
    uid: str  # operator uid
    kind: HandleKind
    epoch: int
    kg: list[int]  # [first, end) key-group range; [0, 0] for operator state
    subtask: int
    path: str  # relative to the job's checkpoint storage, or an absolute URL (restored savepoints)
    bytes: int
    sha256: str
    parallelism: NotRequired[int]  # operator state: the parallelism that wrote it
    catch_up: NotRequired[bool]  # a delta a full snapshot shadows, listed only for worker catch-ups: restores skip it
    catch_up_from: NotRequired[int]  # a full snapshot: the range's deltas from this epoch on stay listed as catch-ups


Manifest = dict[str, list[StateHandle]]  # operator uid → the files a restore of the checkpoint reads


def state_file_name(uid: str, epoch: int, subtask: int, token: str, kind: HandleKind) -> str:
    """Where one task attempt writes a state file, relative to the job's checkpoint folder: the
    attempt's ``token`` keeps a retried or concurrent attempt from overwriting another's file."""
    return f"state/{uid}/e{epoch:010d}-s{subtask:04d}-{token}.{kind}"


_STATE_FILE_NAME = re.compile(r"state/[^/]+/e(\d{10})-s\d{4}-[0-9a-f]+\.(?:full|delta|operator)")


def state_file_epoch(path: str) -> int | None:
    """The epoch that wrote a ``state_file_name`` path; None for any other path."""
    match = _STATE_FILE_NAME.fullmatch(path)
    return int(match.group(1)) if match else None


def is_keyed(handle: StateHandle) -> bool:
    return handle["kind"] != OPERATOR


def is_catch_up(handle: StateHandle) -> bool:
    """Whether the file is a delta that a full snapshot of its epoch or a later one holds already.
    Such deltas stay listed until the next compaction so that a worker whose cached state predates
    the full snapshot catches up instead of loading the whole range; restores read the full
    snapshot instead, and savepoints leave them out."""
    return handle.get("catch_up", False)


def overlaps(handle: StateHandle, key_groups: range) -> bool:
    lo, hi = handle["kg"]
    return lo < key_groups.stop and hi > key_groups.start


@dataclass(slots=True)
class TaskReport:
    """What one task attempt reports at the end of its epoch (the control row): the files it wrote,
    under a token unique to the attempt, and what the driver needs to commit and to follow time."""

    stage: int
    subtask: int
    token: str  # unique to the attempt: the coordinator commits exactly the attempts it received
    attempt: int
    handles: list[StateHandle]
    tokens: dict[str, str]  # "uid/subtask" → token, for the worker caches to settle on
    sinks: list[dict]  # staged sink output, published after the commit
    records: int  # records read
    records_out: int
    restored_bytes: int
    upstream: list[bytes]  # the pickled reports of the upstream attempts whose output this task read
    states: dict[str, list[dict]] = field(default_factory=dict)  # uid → keyed state descriptors
    splits: dict[str, dict] = field(default_factory=dict)  # watermark origin uid → {split: max timestamp}
    next_timer: int | None = None  # earliest pending processing-time timer
    metrics: list = field(default_factory=list)  # user and operator metric snapshots
    busy_ms: float = 0.0  # processing records and firing timers (not restore, input wait, snapshot)
    timers: bool = False  # a keyed operator holds timers: the end of bounded input must fire them
    snapshot_ms: float = 0.0  # writing the epoch's state files: the tasks' share of a checkpoint's cost
    restore_ms: float = 0.0  # loading its operators' state: a first restore, or catching up on another worker's epochs
