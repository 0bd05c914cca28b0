"""State ten times larger than the memory a Python worker may use: RocksDB runs it to completion, heap cannot.

The cap. Every PySpark Python process of the job (``python -m keyspan run`` in a subprocess → its
JVM → ``pyspark.daemon`` → workers) may have at most CAP (256 MiB) resident: a watchdog in this test
process (tests/worker_memory_cap.py) reads each process's VmHWM — the kernel's high-water mark of
its resident set, so no peak between samples goes unseen — every 50 ms and SIGKILLs a process that
went above the cap, which fails the Spark task and, in local mode (no task retries), the job. PySpark's
own cap (``spark.executor.pyspark.memory``) cannot be used: it is RLIMIT_AS, an address-space limit,
and a worker with rocksdict open maps 0.7–1.4 GB of address space (thread stacks, allocator arena
reservations, shared libraries) for ~150 MB resident, so RocksDB's threads cannot even start under
a cap that small (see the watchdog's docstring).

The job (tests/jobs/big_state_job.py): KEYS keys × VALUE_BYTES incompressible bytes of ValueState =
2.7 GB ≥ 10 × CAP, all held by one keyed subtask (parallelism 1, so one worker holds the whole
state), 2,000 keys per epoch. RocksDB gets 16 MiB per worker (``set_fixed_memory_per_slot``); its full
snapshots and deltas are built and pickled into the checkpoint file one key group at a time, so the
worker's peak stays near its idle footprint (~150 MB: Python, pyarrow, pandas, rocksdict) plus
RocksDB's budget plus one key group (~21 MB here). Measured (2026-11-22): peak ~212 MB, ~110 s under
load. The committed state is then read back from the last checkpoint, a key group at a time, and
every value checked.

The heap counterpart runs the same job under the same cap and must be killed: its dicts hold the
state in the worker.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from worker_memory_cap import WorkerMemoryCap  # noqa: E402

JOB = Path(__file__).parent / "jobs" / "big_state_job.py"
CAP = 256 * 2**20                          # resident memory any Python worker may have
KEYS, VALUE_BYTES = 27_000, 100_000        # 2.7 GB of state values
PER_EPOCH = 2_000
ROCKSDB_MEMORY = "16mb"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the cap reads /proc")


def _run(tmp_path: Path, backend: str, timeout: float) -> tuple[subprocess.CompletedProcess, WorkerMemoryCap]:
    env = dict(os.environ, BIG_STATE_BACKEND=backend, BIG_STATE_KEYS=str(KEYS), BIG_STATE_VALUE_BYTES=str(VALUE_BYTES),
               BIG_STATE_PER_EPOCH=str(PER_EPOCH), BIG_STATE_PARALLELISM="1", BIG_STATE_ROCKSDB_MEMORY=ROCKSDB_MEMORY,
               BIG_STATE_ROCKSDB_DIR=str(tmp_path / "rocksdb"))
    proc = subprocess.Popen([sys.executable, "-m", "keyspan", "run", str(JOB), "--workdir", str(tmp_path / "w"),
                             "--no-progress"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    cap = WorkerMemoryCap(proc.pid, CAP).start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    finally:
        cap.stop()
    print(f"{backend}: {cap.summary()}, exit code {proc.returncode}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), cap


def _read_back(workdir: Path) -> tuple[int, int]:
    """(keys, value bytes) of the last checkpoint of 'big-state', reading one key group at a time and
    checking every value against the job's ``value_of``."""
    from keyspan.checkpoint import statefile
    from keyspan.checkpoint.metadata import MetadataStore, default_url
    from keyspan.io.storage import Storage
    from keyspan.io import serde

    sys.path.insert(0, str(JOB.parent))
    os.environ["BIG_STATE_VALUE_BYTES"] = str(VALUE_BYTES)
    from big_state_job import value_of

    checkpoint = MetadataStore(default_url(str(workdir))).latest_checkpoint("big-state")
    storage = Storage("file://" + str(workdir / "checkpoints")).child("big-state")
    groups = range(checkpoint["max_parallelism"])
    seen: dict[int, int] = {}
    for h in sorted(checkpoint["manifest"]["keep"], key=lambda h: (h["epoch"], h["kind"] != "full")):
        for _kg, payload in statefile.read_key_groups(storage, h["path"], groups):
            for name, (puts, deletes) in serde.loads(payload).items():
                assert name == "value" and not deletes
                for key, value in puts.items():
                    assert value == value_of(key), f"wrong value for key {key}"
                    seen[key] = len(value)
            del payload
    return len(seen), sum(seen.values())


def test_heap_backend_is_killed_under_the_worker_memory_cap(tmp_path):
    done, cap = _run(tmp_path, "heap", timeout=300)
    assert cap.violations, f"2.7 GB of heap state fit under a {CAP >> 20} MiB cap: the cap is not real ({cap.summary()})"
    assert done.returncode != 0, "the job survived a worker killed for exceeding the cap"
    assert "exited unexpectedly" in done.stderr or "crashed" in done.stderr, done.stderr[-3000:]
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_rocksdb_backend_runs_state_ten_times_the_cap_to_completion(tmp_path):
    assert KEYS * VALUE_BYTES >= 10 * CAP
    started = time.monotonic()
    done, cap = _run(tmp_path, "rocksdb", timeout=480)
    seconds = time.monotonic() - started
    try:
        assert not cap.violations, f"a worker went above the cap: {cap.summary()}\n{done.stderr[-3000:]}"
        assert done.returncode == 0, done.stderr[-3000:]
        # the watchdog watched the workers that held the state: they exist and grew beyond idle
        assert cap.workers_seen >= 2 and cap.samples >= 20 and cap.max_peak > 150 * 2**20, cap.summary()
        assert cap.max_peak <= CAP
        keys, state_bytes = _read_back(tmp_path / "w")
        assert keys == KEYS
        assert state_bytes >= 10 * CAP
        print(json.dumps({"state_bytes": state_bytes, "cap_bytes": CAP, "state_over_cap": round(state_bytes / CAP, 2),
                          "peak_worker_rss_bytes": cap.max_peak, "seconds": round(seconds, 1)}))
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)
