"""RocksDB state many times larger than the Python workers' memory cap: peak worker RSS, throughput,
checkpoint times and bytes, and restores of GBs of state under the same cap.

    python bench/rocksdb_memory.py [--state-gb 5] [--value-bytes 100000] [--per-epoch 5000]
                                   [--cap-mb 256] [--rocksdb-memory 16mb] [--parallelism 1]
                                   [--max-parallelism 128] [--interrupt-after 0]

The job is tests/jobs/big_state_job.py (every key keeps ``value_bytes`` of incompressible bytes in
ValueState; ``--per-epoch`` keys per epoch), run with ``python -m keyspan run`` in a subprocess, as
tests/test_rocksdb_memory.py runs it, under the same cap: tests/worker_memory_cap.py reads VmHWM
(the kernel's peak resident set) of every PySpark Python process of the job every 50 ms and kills
any above ``--cap-mb`` (MiB), which fails the job. With ``--parallelism 1`` one worker holds the
whole state, so state / cap is the ratio per worker; with more, each worker holds ~1/p of it.

Printed: state (keys × value bytes, and what the last checkpoint holds), peak RSS of every Python
process, wall time and records/s and state MB/s, and per checkpoint (from the metadata store; the
job keeps every checkpoint so each can be classified) its kind (full/delta), bytes written and epoch
time (commit to commit).

Restores. With ``--interrupt-after N`` the whole job (driver, JVM, workers) is killed once N
checkpoints are committed and ``keyspan run`` is started again: it resumes from the latest
checkpoint, so its worker restores the state written so far — under the same cap — and runs to
the end; that run's peak RSS and time are printed apart. Last, the final checkpoint is restored
into a fresh RocksDB backend in a child Python process (``keyspan.runtime.worker.state_io.restore_keyed``, as a task
restores; outside Spark, no cap) whose time and peak RSS are printed too. A restore holds about
three of the largest key group (the payload read, its decoded section, the previous payload):
state ÷ ``--max-parallelism`` per key group.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from worker_memory_cap import WorkerMemoryCap  # noqa: E402

JOB = os.path.join(ROOT, "tests", "jobs", "big_state_job.py")

RESTORE = r"""
import json, os, sys, time
def status(*fields):
    out = {}
    for line in open(f"/proc/{os.getpid()}/status"):
        k, _, v = line.partition(":")
        if k in fields:
            out[k] = int(v.split()[0]) * 1024
    return out
from keyspan.checkpoint.metadata import MetadataStore, default_url
from keyspan.io.storage import Storage
from keyspan.runtime.worker.state_io import restore_keyed
from keyspan.state.rocksdb import EmbeddedRocksDBStateBackend
workdir, memory, rocks_dir = sys.argv[1:4]
checkpoint = MetadataStore(default_url(workdir)).latest_checkpoint("big-state")
storage = Storage("file://" + os.path.join(workdir, "checkpoints")).child("big-state")
spec = EmbeddedRocksDBStateBackend()
spec.get_memory_configuration().set_fixed_memory_per_slot(memory)
groups = range(checkpoint["max_parallelism"])
backend = spec.create_keyed_backend("keep", groups, local_dir=rocks_dir)
before = status("VmRSS")["VmRSS"]
t = time.perf_counter()
read = restore_keyed(backend, checkpoint["manifest"]["keep"], groups, storage)
backend.confirm()
seconds = time.perf_counter() - t
entries = backend.key_count()
print(json.dumps({"seconds": seconds, "bytes_read": read, "entries": entries, "rss_before": before,
                  "peak_rss": status("VmHWM")["VmHWM"]}))
backend.close()
"""


def _classify(checkpoints: list[dict], started: float) -> list[dict]:
    epochs, prev = [], started
    for c in checkpoints:
        own = [h for handles in c["manifest"].values() for h in handles
               if h.get("epoch") == c["epoch"] and h.get("kind") in ("full", "delta")]
        kinds = {h["kind"] for h in own}
        kind = "full+delta" if kinds == {"full", "delta"} else (kinds.pop() if kinds else "none")
        epochs.append({"epoch": c["epoch"], "kind": kind, "bytes": c["bytes_written"],
                       "seconds": c["created_at"] - prev})
        prev = c["created_at"]
    return epochs


def _run(cmd, env, cwd, cap, store=None, stop_after=0):
    """Run ``cmd`` under the cap; with ``stop_after``, kill its whole process group once that many
    checkpoints are committed. Returns (exit code, stderr, watchdog, seconds, interrupted)."""
    started = time.time()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    err_lines: list[str] = []

    def drain():
        for line in proc.stderr:
            err_lines.append(line)
            del err_lines[:-200]

    import threading

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    interrupted = False
    with WorkerMemoryCap(proc.pid, cap) as watchdog:
        while proc.poll() is None:
            time.sleep(0.5)
            if stop_after and store is not None and len(store.list_checkpoints("big-state")) >= stop_after:
                os.killpg(proc.pid, signal.SIGKILL)
                interrupted = True
                proc.wait()
                # the JVM and workers are in the group too; wait until the workers are gone
                time.sleep(2)
    reader.join(timeout=10)
    return proc.returncode, "".join(err_lines), watchdog, time.time() - started, interrupted


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--state-gb", type=float, default=5.0, help="state values, 10^9 bytes")
    ap.add_argument("--value-bytes", type=int, default=100_000)
    ap.add_argument("--per-epoch", type=int, default=5_000)
    ap.add_argument("--cap-mb", type=int, default=256, help="resident memory cap per Python worker, MiB")
    ap.add_argument("--rocksdb-memory", default="16mb", help="set_fixed_memory_per_slot")
    ap.add_argument("--parallelism", type=int, default=1)
    ap.add_argument("--max-parallelism", type=int, default=128)
    ap.add_argument("--interrupt-after", type=int, default=0,
                    help="kill the job after this many checkpoints and resume it (0: no interruption)")
    ap.add_argument("--workdir", default=None, help="default: a temp dir, deleted afterwards")
    args = ap.parse_args()
    keys = int(args.state_gb * 1e9 // args.value_bytes)
    state_bytes = keys * args.value_bytes
    cap = args.cap_mb * 2**20
    work = args.workdir or tempfile.mkdtemp(prefix="keyspan-rocksdb-memory-")
    workdir, rocks_dir = os.path.join(work, "w"), os.path.join(work, "rocksdb")
    env = dict(os.environ, BIG_STATE_BACKEND="rocksdb", BIG_STATE_KEYS=str(keys),
               BIG_STATE_VALUE_BYTES=str(args.value_bytes), BIG_STATE_PER_EPOCH=str(args.per_epoch),
               BIG_STATE_PARALLELISM=str(args.parallelism), BIG_STATE_ROCKSDB_MEMORY=args.rocksdb_memory,
               BIG_STATE_ROCKSDB_DIR=rocks_dir, BIG_STATE_MAX_PARALLELISM=str(args.max_parallelism),
               BIG_STATE_RETAINED="100000")
    print(f"state {state_bytes / 1e9:.2f} GB ({keys:,} keys x {args.value_bytes:,} B) = "
          f"{state_bytes / cap:.1f} x the {args.cap_mb} MiB cap per Python worker; parallelism {args.parallelism}, "
          f"max parallelism {args.max_parallelism} ({state_bytes / args.max_parallelism / 1e6:.0f} MB per key group), "
          f"{args.per_epoch:,} keys per epoch, RocksDB memory {args.rocksdb_memory} per worker", flush=True)
    cmd = [sys.executable, "-m", "keyspan", "run", JOB, "--workdir", workdir, "--no-progress"]
    os.makedirs(workdir, exist_ok=True)
    try:
        from keyspan.checkpoint.metadata import MetadataStore, default_url

        store = MetadataStore(default_url(workdir))
        load0 = os.getloadavg()[0]
        started = time.time()
        runs = []
        code, err, watchdog, seconds, interrupted = _run(cmd, env, work, cap, store, args.interrupt_after)
        runs.append(("first run" + (" (killed on purpose)" if interrupted else ""), watchdog, seconds))
        print(f"{runs[-1][0]}: exit code {code}, {seconds:.1f} s; {watchdog.summary()}", flush=True)
        if watchdog.violations or (code != 0 and not interrupted):
            print(err[-4000:])
            sys.exit(1)
        resumed_from = None
        if interrupted:
            resumed_from = store.latest_checkpoint("big-state")
            code, err, watchdog, seconds, _ = _run(cmd, env, work, cap)
            runs.append((f"resumed run (restores epoch {resumed_from['epoch']}: "
                         f"{sum(h['bytes'] for h in resumed_from['manifest']['keep']) / 1e9:.2f} GB)", watchdog, seconds))
            print(f"{runs[-1][0]}: exit code {code}, {seconds:.1f} s; {watchdog.summary()}", flush=True)
            if code != 0 or watchdog.violations:
                print(err[-4000:])
                sys.exit(1)
        total_seconds = time.time() - started
        load1 = os.getloadavg()[0]
        peak = max(w.max_peak for _, w, _ in runs)

        checkpoints = store.list_checkpoints("big-state")
        epochs = _classify(checkpoints, started)
        last = store.latest_checkpoint("big-state")
        held = sum(h["bytes"] for h in last["manifest"]["keep"])
        written = sum(e["bytes"] for e in epochs)
        # the first epoch of a run includes starting Spark and the query (and a resumed run's restore)
        firsts = {epochs[0]["epoch"]} | ({resumed_from["epoch"] + 1} if resumed_from else set())
        steady = [e for e in epochs if e["epoch"] not in firsts]
        full = [e for e in steady if "full" in e["kind"]]
        delta = [e for e in steady if e["kind"] == "delta"]
        print(f"{keys:,} records in {total_seconds:.1f} s (load average {load0:.1f} -> {load1:.1f}, including Spark "
              f"start{' twice and the kill' if resumed_from else ''}): {keys / total_seconds:,.0f} records/s, "
              f"{state_bytes / 1e6 / total_seconds:,.1f} MB/s of state")
        print(f"last checkpoint holds {held / 1e9:.2f} GB in {len(last['manifest']['keep'])} files; "
              f"{written / 1e9:.2f} GB written over {len(epochs)} checkpoints")
        print("  epoch  kind        bytes written   epoch time")
        for e in epochs:
            note = "  (first epoch of a run)" if e["epoch"] in firsts else ""
            print(f"  {e['epoch']:>5}  {e['kind']:<10} {e['bytes']:>14,}   {e['seconds'] * 1000:9,.0f} ms{note}")
        mean = lambda xs: statistics.mean(xs) if xs else float("nan")  # noqa: E731
        print(f"epochs with a full snapshot: {len(full)}, mean {mean([e['seconds'] for e in full]) * 1000:,.0f} ms, "
              f"{mean([e['bytes'] for e in full]) / 1e9:.2f} GB; delta-only: {len(delta)}, mean "
              f"{mean([e['seconds'] for e in delta]) * 1000:,.0f} ms, {mean([e['bytes'] for e in delta]) / 1e6:,.0f} MB")

        shutil.rmtree(rocks_dir, ignore_errors=True)
        r = subprocess.run([sys.executable, "-c", RESTORE, workdir, args.rocksdb_memory, rocks_dir],
                           capture_output=True, text=True, check=True)
        restore = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"restore of the last checkpoint into a fresh RocksDB (one process, outside Spark): "
              f"{restore['bytes_read'] / 1e9:.2f} GB read in {restore['seconds']:.1f} s, {restore['entries']:,} "
              f"entries, RSS {restore['rss_before'] / 2**20:.0f} MiB before -> peak {restore['peak_rss'] / 2**20:.0f} MiB")

        print(f"\n{datetime.date.today()}  python bench/rocksdb_memory.py --state-gb {args.state_gb:g} --value-bytes "
              f"{args.value_bytes} --per-epoch {args.per_epoch} --cap-mb {args.cap_mb} --rocksdb-memory "
              f"{args.rocksdb_memory} --parallelism {args.parallelism} --max-parallelism {args.max_parallelism} "
              f"--interrupt-after {args.interrupt_after}")
        print("| state | cap per worker | state / cap | peak worker RSS | records/s | MB/s | epochs full / delta "
              "| epoch time with full / delta only | checkpoint bytes written | restore in the resumed run "
              "| restore outside Spark |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
        resumed = (f"{sum(h['bytes'] for h in resumed_from['manifest']['keep']) / 1e9:.2f} GB, peak "
                   f"{runs[-1][1].max_peak / 2**20:.0f} MiB" if resumed_from else "—")
        print(f"| {state_bytes / 1e9:.2f} GB | {args.cap_mb} MiB | {state_bytes / cap:.1f}× "
              f"| {peak / 2**20:.0f} MiB | {keys / total_seconds:,.0f} | {state_bytes / 1e6 / total_seconds:,.1f} "
              f"| {len(full)} / {len(delta)} | {mean([e['seconds'] for e in full]):.1f} s / "
              f"{mean([e['seconds'] for e in delta]):.1f} s | {written / 1e9:.2f} GB | {resumed} "
              f"| {restore['bytes_read'] / 1e9:.2f} GB in {restore['seconds']:.0f} s, peak "
              f"{restore['peak_rss'] / 2**20:.0f} MiB |")
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
