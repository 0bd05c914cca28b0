"""The logical job graph: what the DataStream API builds and the runtime's planner compiles to Spark."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Transformation:
    """One operator of the job: its kind, user function, inputs and identity."""

    id: int
    kind: str  # source | map | flat_map | filter | process | keyed_process | union | sink
    name: str
    inputs: list["Transformation"] = field(default_factory=list)
    function: Any = None
    key_selector: Any = None  # for keyed kinds: the KeyedStream's selector
    output_type: Any = None
    parallelism: int | None = None
    uid: str | None = None
    spec: Any = None  # a source or sink spec

    def __repr__(self):
        return f"<{self.kind} '{self.name}' #{self.id}>"


def assign_uids(transformations: list[Transformation]) -> dict[int, tuple[str, bool]]:
    """Operator id → (uid, generated?). A generated uid hashes the operator's place in the graph,
    so it is the same on every run of an unchanged job (Flink's auto-generated operator ids)."""
    result: dict[int, tuple[str, bool]] = {}
    seen: dict[str, int] = {}
    for t in sorted(transformations, key=lambda t: t.id):
        if t.uid:
            if t.uid in seen:
                raise ValueError(f"operator uid '{t.uid}' is used twice (operators '{t.name}' and another): "
                                 "a uid must be unique in the job")
            seen[t.uid] = t.id
            result[t.id] = (t.uid, False)
            continue
        parents = ",".join(result[i.id][0] for i in t.inputs)
        base = hashlib.sha1(f"{parents}|{t.kind}|{t.name}".encode()).hexdigest()[:12]
        uid = f"auto-{base}"
        n = 1
        while uid in seen:
            n += 1
            uid = f"auto-{base}-{n}"
        seen[uid] = t.id
        result[t.id] = (uid, True)
    return result
