"""State far larger than the Python workers' memory cap: RocksDB should run it to completion, heap must not.

tests/jobs/big_state_job.py keeps BIG_STATE_KEYS × BIG_STATE_VALUE_BYTES (4000 × 100 kB = 400 MB) of
values in ValueState, 250 keys (25 MB) per epoch, in a subprocess (`python -m keyspan run`) whose
SparkSession sets ``spark.executor.pyspark.memory`` — PySpark's own cap: every Python worker calls
``resource.setrlimit(RLIMIT_AS, …)`` with it (pyspark/worker_util.py; the worker logs "Setting mem
limits to …", which the test checks, so the cap is known to apply in local mode).

Measured (2026-11-22, PySpark 4.3.0): under a 1600 MB RLIMIT_AS the heap backend fails once its dicts
hold ~150 MB of state (epoch 6: pickling the checkpoint raises MemoryError → StateSerializationError),
so the cap is real. The RocksDB backend fails too, at its first epoch: an idle keyspan Python worker with
rocksdict open already maps ~1.4 GB of virtual address space (VmSize; RSS ~150 MB), and RocksDB's
threads then cannot start ("terminate called without an active exception"). An address-space cap tight
enough to make 400 MB of state "10× the allowed memory" cannot even start RocksDB, and — read from
keyspan/state/rocksdb.py `full_sections` and checkpoint/statefile.py `write` — a full snapshot (the
compaction every few epochs) builds the subtask's whole encoded state in memory (dict of bytes, then
one joined buffer), so RocksDB's peak memory still grows with the state. Hence the RocksDB test is a
strict xfail that documents the gap; it starts passing (and must be un-marked) once both are fixed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).parent / "jobs" / "big_state_job.py"
KEYS, VALUE_BYTES = 4000, 100_000  # 400 MB of state
CAP = "1600m"                      # RLIMIT_AS of every Python worker


def _run(tmp_path: Path, backend: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, BIG_STATE_BACKEND=backend, BIG_STATE_WORKER_MEMORY=CAP, BIG_STATE_KEYS=str(KEYS),
               BIG_STATE_VALUE_BYTES=str(VALUE_BYTES), BIG_STATE_PER_EPOCH="250")
    return subprocess.run([sys.executable, "-m", "keyspan", "run", str(JOB), "--workdir", str(tmp_path / "w"),
                           "--no-progress"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)


def test_heap_backend_fails_under_the_worker_memory_cap(tmp_path):
    done = _run(tmp_path, "heap")
    assert "Setting mem limits to 1677721600" in done.stderr, "the RLIMIT_AS cap was not applied to the workers"
    assert done.returncode != 0, "400 MB of heap state fit under the cap: the cap is not real"
    assert "MemoryError" in done.stderr or "cannot be serialized" in done.stderr, done.stderr[-3000:]


@pytest.mark.xfail(strict=True, reason="RocksDB worker needs >1.6 GB address space to start its threads, and "
                   "full snapshots materialize the subtask's encoded state in memory (see module docstring)")
def test_rocksdb_backend_runs_state_ten_times_the_cap_to_completion(tmp_path):
    done = _run(tmp_path, "rocksdb")
    assert "Setting mem limits to 1677721600" in done.stderr
    assert done.returncode == 0, done.stderr[-3000:]
    sys.path.insert(0, str(JOB.parent))
    from keyspan.checkpoint.metadata import default_url
    from keyspan.checkpoint.reader import latest_keyed_state

    os.environ.setdefault("BIG_STATE_WORKER_MEMORY", CAP)
    workdir = tmp_path / "w"
    state = latest_keyed_state(default_url(str(workdir)), "file://" + str(workdir / "checkpoints"), "big-state",
                               "keep")["blob"]
    assert len(state) == KEYS
    import hashlib

    for key in (0, 1, 1234, KEYS - 1):
        digest = hashlib.sha256(str(key).encode()).digest()
        assert state[key] == (digest * (VALUE_BYTES // 32 + 1))[:VALUE_BYTES]
