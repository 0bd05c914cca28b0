"""Between state and checkpoint files: a task's snapshot of its operators' state after an epoch, and
the restores of a subtask's key groups and operator state. ``state`` and ``checkpoint`` never import
each other; this module is where they meet."""

from __future__ import annotations

import pickle

from keyspan.checkpoint import statefile
from keyspan.checkpoint.handles import DELTA, FULL, OPERATOR, StateHandle, state_file_name
from keyspan.checkpoint.manifest import compaction_base, full_snapshot_due, restore_order
from keyspan.io import serde
from keyspan.state import operator as operator_state


def restore_keyed(backend, handles: list[StateHandle], key_groups: range, storage) -> int:
    """Apply the committed files of ``key_groups`` to ``backend``; returns the bytes read."""
    return apply_keyed(backend, restore_order(handles, key_groups), key_groups, storage)


def apply_keyed(backend, files: list[StateHandle], key_groups: range, storage, watched: dict | None = None) -> int:
    """Apply ``files`` (a restore's or a catch-up's, in their order) to ``backend``, one key group at
    a time; returns the bytes read. ``watched``: see ``keyspan.state.backend.note_puts``."""
    stats = statefile.ReadStats()
    for h in files:
        try:
            for kg, payload in statefile.read_key_groups(storage, h["path"], key_groups, stats):
                backend.restore_payload(kg, payload, watched)
                del payload  # not held while the next key group is read
        except statefile.CorruptStateFile:
            raise
        except (AttributeError, ImportError) as exc:  # a class or module the state's objects need may be gone
            _name_missing_code(exc, h)
            raise
        except (pickle.UnpicklingError, ValueError, EOFError, OSError, KeyError, IndexError, TypeError) as exc:
            raise statefile.CorruptStateFile(
                f"state file {h['path']} of operator '{h['uid']}' (epoch {h['epoch']}) cannot be decoded: "
                f"{type(exc).__name__}: {exc}") from exc
    return stats.bytes_read


def _name_missing_code(exc: Exception, h: StateHandle) -> None:
    """When a state file's objects need a class or module this program lacks, raises what is missing
    and what to do; returns otherwise."""
    needs = serde.missing_code(exc)
    if needs is not None:
        raise serde.StateSerializationError(
            f"state file {h['path']} of operator '{h['uid']}' (epoch {h['epoch']}) holds {needs}: define it again "
            "as it was when the state was written (under its old name: an alias to a renamed class works if its "
            "fields are the same), then run the job again. Nothing was lost: the checkpoint is unchanged") from exc


def load_operator_snapshots(storage, handles: list[StateHandle],
                            stats: statefile.ReadStats | None = None) -> list[dict]:
    """One operator's operator-state files (of the newest parallelism) → old subtask i's snapshot."""
    handles = [h for h in handles if h["kind"] == OPERATOR]
    if not handles:
        return []
    old_parallelism = max(h["parallelism"] for h in handles)
    snapshots = [operator_state.empty_snapshot() for _ in range(old_parallelism)]
    for h in handles:
        if h["parallelism"] == old_parallelism:
            try:
                snapshots[h["subtask"]] = operator_state.decode(statefile.read_section(storage, h["path"], stats))
            except (AttributeError, ImportError) as exc:
                _name_missing_code(exc, h)
                raise
    return snapshots


def restore_operator_state(storage, handles: list[StateHandle], subtask: int, parallelism: int,
                           stats: statefile.ReadStats) -> dict | None:
    """The operator state one new subtask starts with: every old subtask's snapshot, redistributed
    as Flink does (see ``keyspan.state.operator``)."""
    return operator_state.restore_subtask(load_operator_snapshots(storage, handles, stats), subtask, parallelism)


def snapshot(instances, ctx, subtask: int, parallelism: int, token: str) -> tuple[list[StateHandle], dict]:
    """Write the epoch's state of every operator instance under names unique to this attempt: operator
    state whole, keyed state as a delta of what the epoch changed or — when compaction is due or the
    parallelism changed — a full snapshot of the subtask's key groups. A compaction's full snapshot
    comes with the epoch's delta as well (``catch_up``), and keeps the deltas of the chain it
    compacted listed (``catch_up_from``): a worker that cached the subtask during that chain applies
    deltas instead of rebuilding the whole subtask from the full snapshot. The files are not fsynced
    here: the driver's commit does that for every file of the epoch, while Spark logs the batch
    (``CheckpointCoordinator.commit``), which keeps it out of the epoch's time."""
    handles: list[StateHandle] = []
    tokens = {}
    epoch = ctx.epoch
    for inst in instances:
        uid = inst.op.uid
        tokens[f"{uid}/{subtask}"] = token
        if inst.operator_state is not None:
            rel = state_file_name(uid, epoch, subtask, token, OPERATOR)
            payload = operator_state.encode(inst.operator_state.snapshot(), inst.op.name)
            written = statefile.write_section(ctx.storage, rel, payload, meta={"kind": OPERATOR}, sync=False)
            # kg: an empty key-group range — the file holds no key group, keyed restores skip it
            handles.append(StateHandle(uid=uid, kind=OPERATOR, epoch=epoch, kg=[0, 0], subtask=subtask,
                                       parallelism=parallelism, **written))
        if inst.backend is None:
            continue
        committed = ctx.manifest.get(uid, [])
        full = ctx.full_all or full_snapshot_due(committed, inst.key_groups, ctx.max_chain)
        kg = [inst.key_groups.start, inst.key_groups.stop]
        catch_up = {}
        if not ctx.full_all:  # after a rescale no worker holds these key groups: nothing to catch up
            sections = inst.backend.delta_sections()
            if full or sections:
                written = statefile.write(ctx.storage, state_file_name(uid, epoch, subtask, token, DELTA), sections,
                                          sync=False)
                handles.append(StateHandle(uid=uid, kind=DELTA, epoch=epoch, kg=kg, subtask=subtask, **written,
                                           **({"catch_up": True} if full else {})))
            if full:
                catch_up = {"catch_up_from": compaction_base(committed, inst.key_groups)["epoch"]}
        if full:
            written = statefile.write(ctx.storage, state_file_name(uid, epoch, subtask, token, FULL),
                                      inst.backend.full_sections(), sync=False)
            handles.append(StateHandle(uid=uid, kind=FULL, epoch=epoch, kg=kg, subtask=subtask, **written, **catch_up))
    return handles, tokens
