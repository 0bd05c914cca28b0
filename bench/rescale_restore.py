"""Restore after rescaling 2→4: time and bytes read per subtask against state size.

    python bench/rescale_restore.py [--sizes-mb 10 100 1000]

For each size, a 2-subtask checkpoint of that much keyed state is written by the heap backend
into real key-group state files (what a job's checkpoint or savepoint holds), then each of the 4
new subtasks restores its key-group range exactly as a task does at the first epoch after a
rescale (``keyspan.runtime.worker.state_io.restore_keyed``). Printed: bytes each subtask read, the ideal
total/4, and the restore time per subtask.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keyspan.checkpoint import statefile  # noqa: E402
from keyspan.io.storage import Storage  # noqa: E402
from keyspan.runtime.worker.state_io import restore_keyed  # noqa: E402
from keyspan.state.api import ValueStateDescriptor  # noqa: E402
from keyspan.state.heap import HeapKeyedStateBackend  # noqa: E402
from keyspan.state.keygroups import (  # noqa: E402
    assign_to_key_group,
    compute_key_group_range_for_operator_index,
)

MAX_PARALLELISM = 128
VALUE_BYTES = 1000


def write_checkpoint(storage: Storage, size_bytes: int) -> tuple[list[dict], int]:
    keys = size_bytes // VALUE_BYTES
    handles = []
    for subtask in range(2):
        groups = compute_key_group_range_for_operator_index(MAX_PARALLELISM, 2, subtask)
        backend = HeapKeyedStateBackend("op", groups)
        state = backend.get_state(ValueStateDescriptor("v"))
        for k in range(keys):
            kg = assign_to_key_group(k, MAX_PARALLELISM)
            if kg in groups:
                backend.set_current_key(k, kg)
                state.update(os.urandom(VALUE_BYTES // 2).hex())
        h = statefile.write(storage, f"state/op/full-{subtask}", backend.full_sections())
        h.update(uid="op", kind="full", epoch=0, kg=[groups.start, groups.stop])
        handles.append(h)
        del backend
    return handles, sum(h["bytes"] for h in handles)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[10, 100, 1000])
    args = ap.parse_args()
    print(f"{'state':>8} {'subtask':>7} {'read MB':>9} {'ideal MB':>9} {'read/ideal':>10} {'restore s':>9}")
    for mb in args.sizes_mb:
        work = tempfile.mkdtemp(prefix="keyspan-restore-")
        try:
            storage = Storage(work)
            handles, total = write_checkpoint(storage, mb * 1_000_000)
            for subtask in range(4):
                groups = compute_key_group_range_for_operator_index(MAX_PARALLELISM, 4, subtask)
                backend = HeapKeyedStateBackend("op", groups)
                start = time.perf_counter()
                read = restore_keyed(backend, handles, groups, storage)
                seconds = time.perf_counter() - start
                print(f"{total / 1e6:7.0f}M {subtask:>7} {read / 1e6:9.2f} {total / 4e6:9.2f} "
                      f"{read / (total / 4):10.3f} {seconds:9.2f}", flush=True)
                del backend
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
