"""Queryable state: one key's value as of a committed checkpoint, read from the key's key group in the
checkpoint's files — never from a worker, so never a half-applied epoch."""

from __future__ import annotations

import json

from keyspan.checkpoint.reader import key_group_state
from keyspan.io import serde
from keyspan.state.keygroups import assign_to_key_group
from keyspan.state.ttl import unstamp


class StateQueryError(LookupError):
    """The operator, state or key is unknown; the message says which and what exists."""


def key_candidates(text: str) -> list:
    """A key given as text: its JSON value when it parses (``42`` → 42, ``["a", 1]`` → ("a", 1)), then
    the text itself, so ``k1`` and ``"k1"`` both find the string key."""
    candidates = []
    try:
        parsed = json.loads(text)
        candidates.append(tuple(parsed) if isinstance(parsed, list) else parsed)
    except ValueError:
        pass
    if text not in candidates:
        candidates.append(text)
    return candidates


def query(storage, checkpoint: dict, job_id: str, uid: str, state: str, key_text: str) -> dict:
    """{uid, state, key, key_group, epoch, value} of one key in checkpoint ``checkpoint``."""
    if uid not in checkpoint["manifest"]:
        raise StateQueryError(f"job '{job_id}' has no state for operator '{uid}' (operators with state: "
                              f"{', '.join(sorted(checkpoint['manifest'])) or 'none'})")
    described = {d["name"]: d for o in checkpoint["operators"] if o["uid"] == uid for d in o.get("states", [])}
    if state not in described:
        raise StateQueryError(f"operator '{uid}' of job '{job_id}' has no keyed state '{state}' (its states: "
                              f"{', '.join(n for n in sorted(described) if not n.startswith('__')) or 'none'})")
    kind = described[state]["kind"]
    for key in key_candidates(key_text):
        kg = assign_to_key_group(key, checkpoint["max_parallelism"])
        try:
            table = key_group_state(storage, checkpoint["manifest"][uid], kg).get(state, {})
        except (AttributeError, ImportError) as exc:
            needs = serde.missing_code(exc)
            if needs is None:
                raise
            raise StateQueryError(
                f"key group {kg} of operator '{uid}' in checkpoint {checkpoint['epoch']} holds {needs}: ask the "
                "job while it runs (it has its classes), or read the checkpoint in Python where they are defined "
                "(keyspan.state_processor.SavepointReader.read_checkpoint)") from exc
        if key in table:
            return {"uid": uid, "state": state, "kind": kind, "key": key, "key_group": kg,
                    "epoch": checkpoint["epoch"], "value": unstamp(kind, table[key])}
    raise StateQueryError(f"state '{state}' of operator '{uid}' has no value for key {key_text!r} as of "
                          f"checkpoint {checkpoint['epoch']}")


def jsonable(value):
    """A state value for a JSON answer: maps with non-string keys become [key, value] pairs, tuples
    lists, anything else JSON cannot hold its repr."""
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: jsonable(v) for k, v in value.items()}
        return [[jsonable(k), jsonable(v)] for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)
