"""Heap vs RocksDB keyed state: throughput, per-epoch checkpoint bytes and time (full vs delta)
vs state size, and peak RSS of Spark's Python workers.

One process, one SparkSession. For each state size S (keys) the same Parquet events
(``bench.baselines.generate_events``: ``events_per_key`` × S events on keys uniform in [0, S),
``--files`` files = epochs) run through the same job on both backends:

    from_spark → key_by(lambda r: r.key) → KeyedProcessFunction(ValueState running sum) → DiscardingSink

    python bench/state_backends.py [--sizes 100000 1000000] [--events-per-key 2] [--files 10]
    python bench/state_backends.py --shapes 100000:200000 1000000:2000000 10000:1000000  # keys:events
    python bench/state_backends.py --shapes 200000:1000000 --repeats 3  # alternating, ratio of medians
    python bench/state_backends.py --shapes 1000000:2000000 --repeats 3 --any-worker

``--shapes`` runs several (keys, events) shapes in one session; ``10000:1000000`` is the data of
bench/running_sum.py (10k keys, 1M events, seed 7), where each key is touched ~10 times per epoch.
For every shape the RocksDB ÷ heap throughput ratio is printed at the end. ``--repeats N`` runs
each backend N times, alternating, and divides the medians (the table shows the first repeat).

Per checkpoint the metadata store gives ``bytes_written`` and ``created_at`` (epoch time = commit to
commit; the first epoch's is from ``execute`` start, so it includes the query start); a checkpoint
is "full" when a manifest handle of its own epoch is a full snapshot, "delta" when all of its own
handles are deltas ("full+delta" when subtasks differ). The final state is read back from the last
checkpoint and compared with the expected sums. "State loading" is the slowest task's time loading
state before its records (``tasks.restore`` of ``JobExecutionResult.epoch_phases``): on RocksDB,
writing the worker's own last epoch into RocksDB, which waits until the task learns that the driver
committed that epoch. With ``--any-worker`` RocksDB also runs with
``set_python_worker_per_subtask(False)``: Spark then hands a subtask's task to any idle Python worker,
which first catches up from the other worker's delta files (or restores the subtask whole when its
copy predates the deltas the newest full snapshot folded); the ratio of the two is printed.

Peak RSS: before each run the peak-RSS counter (VmHWM) of every Python worker process under this
driver (cmdline contains ``pyspark.worker`` or ``pyspark/worker``) is reset by writing 5 to
``/proc/<pid>/clear_refs``; after the run VmHWM is read (before the session stops). Workers are
reused across runs and keyspan keeps operator instances (and a heap backend's dicts) cached in
them by run id, so "RSS at start" (the workers' resident memory when the run began) is shown too;
"growth" = peak − RSS at start, per worker, summed.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.baselines import cpu_seconds, cpu_spent, expected_sums, format_cpu, generate_events, make_spark  # noqa: E402
from bench.running_sum import RunningSum  # noqa: E402
from keyspan.checkpoint.metadata import MetadataStore  # noqa: E402
from keyspan.checkpoint.reader import latest_keyed_state  # noqa: E402
from keyspan.datastream import StreamExecutionEnvironment  # noqa: E402
from keyspan.datastream.connectors.file_system import DiscardingSink  # noqa: E402
from keyspan.runtime import options  # noqa: E402
from keyspan.state.heap import HashMapStateBackend  # noqa: E402
from keyspan.state.rocksdb import EmbeddedRocksDBStateBackend  # noqa: E402

BACKENDS = {"heap": HashMapStateBackend, "rocksdb": EmbeddedRocksDBStateBackend}


# ---------------------------------------------------------------- Python worker memory (/proc)

def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(name))
    return tree


def python_workers() -> list[int]:
    """Descendants of this driver whose cmdline is a PySpark daemon or worker."""
    tree, found, todo = _children(), [], [os.getpid()]
    while todo:
        for child in tree.get(todo.pop(), []):
            todo.append(child)
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "pyspark.worker" in cmd or "pyspark/worker" in cmd:
                found.append(child)
    return found


def _status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peaks() -> dict[int, int]:
    """Reset VmHWM of every Python worker (clear_refs 5); return pid → current RSS (kB)."""
    start = {}
    for pid in python_workers():
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        rss = _status_kb(pid, "VmRSS")
        if rss is not None:
            start[pid] = rss
    return start


def read_peaks(start: dict[int, int]) -> dict:
    peaks = {pid: hwm for pid in python_workers() if (hwm := _status_kb(pid, "VmHWM")) is not None}
    return {"workers": len(peaks), "max_peak_mb": max(peaks.values(), default=0) / 1024,
            "sum_peak_mb": sum(peaks.values()) / 1024,
            "sum_start_mb": sum(start.get(pid, 0) for pid in peaks) / 1024,
            "sum_growth_mb": sum(max(0, hwm - start.get(pid, 0)) for pid, hwm in peaks.items()) / 1024}


# ---------------------------------------------------------------- the job

def run(spark, backend: str, data: str, workdir: str, job: str, worker_per_subtask: bool = True) -> dict:
    options.install(options.RunOptions(workdir=workdir, fresh=True))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_python_worker_per_subtask(worker_per_subtask)
    env.set_state_backend(BACKENDS[backend]())
    env.get_checkpoint_config().set_num_retained_checkpoints(10_000)  # keep every manifest to classify it
    events = spark.readStream.schema("key long, value long").option("maxFilesPerTrigger", 1).parquet(data)
    (env.from_spark(events, bounded=True).key_by(lambda r: r.key)
        .process(RunningSum()).uid("sum").sink_to(DiscardingSink()))
    rss_start = reset_peaks()
    cpu = cpu_seconds()
    t0, wall0 = time.perf_counter(), time.time()
    result = env.execute(job)
    seconds = time.perf_counter() - t0
    cpu = cpu_spent(cpu, cpu_seconds())
    mem = read_peaks(rss_start)
    checkpoints = MetadataStore(options.current().metadata()).list_checkpoints(job)
    restore = {p["epoch"]: p.get("tasks.restore", 0) for p in result.epoch_phases}
    epochs, prev = [], wall0
    for c in checkpoints:
        own = [h for handles in c["manifest"].values() for h in handles
               if h.get("epoch") == c["epoch"] and h.get("kind") in ("full", "delta")]
        kinds = {h["kind"] for h in own}
        kind = "full+delta" if kinds == {"full", "delta"} else (kinds.pop() if kinds else "none")
        epochs.append({"epoch": c["epoch"], "kind": kind, "bytes": c["bytes_written"],
                       "full_bytes": sum(h.get("bytes", 0) for h in own if h["kind"] == "full"),
                       "delta_bytes": sum(h.get("bytes", 0) for h in own if h["kind"] == "delta"),
                       "seconds": c["created_at"] - prev, "restore": restore.get(c["epoch"], 0)})
        prev = c["created_at"]
    return {"events": result.records, "seconds": seconds, "rate": result.records / seconds,
            "epochs": epochs, "mem": mem, "cpu": cpu}


def _mean(xs):
    return statistics.mean(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--events-per-key", type=int, default=2)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--shapes", nargs="+", metavar="KEYS:EVENTS",
                    help="(keys, events) shapes to run instead of --sizes × --events-per-key")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs per backend and shape, alternating RocksDB and heap; the ratio is of the medians")
    ap.add_argument("--any-worker", action="store_true",
                    help="also run RocksDB with set_python_worker_per_subtask(False) (Spark hands each task to any "
                         "idle Python worker), alternating with the others, and print the ratio")
    args = ap.parse_args()
    shapes = ([tuple(int(x) for x in shape.split(":")) for shape in args.shapes] if args.shapes
              else [(size, size * args.events_per_key) for size in args.sizes])
    work = tempfile.mkdtemp(prefix="keyspan-backends-")
    rows, rates, workers_cpu = [], {}, {}
    try:
        spark = make_spark(cores=2)
        warm = generate_events(os.path.join(work, "warm"), 20_000, 2_000, 2, 1)
        for b in BACKENDS:
            run(spark, b, warm, os.path.join(work, f"wd-warm-{b}"), f"warm-{b}")
        for size, n_events in shapes:
            data = generate_events(os.path.join(work, f"events-{size}-{n_events}"), n_events, size, args.files, 7)
            expected = None if args.no_verify else expected_sums(data)
            # rocksdb first: its RSS is then not measured on top of heap dicts; alternating, so that
            # neither backend always runs on a colder JVM
            variants = [("rocksdb", True), ("heap", True)] + ([("rocksdb", False)] if args.any_worker else [])
            for repeat, (b, own) in itertools.product(range(args.repeats), variants):
                name = b if own else f"{b}, any worker"
                job = f"backends-{b}{'' if own else '-any'}-{size}-{n_events}-{repeat}"
                r = run(spark, b, data, os.path.join(work, f"wd-{job}"), job, worker_per_subtask=own)
                if expected is not None:
                    state = latest_keyed_state(options.current().metadata(), options.current().checkpoint_root(),
                                               job, "sum")["total"]
                    assert state == expected, f"{job}: checkpointed state differs from the expected sums"
                rates.setdefault((size, n_events), {}).setdefault(name, []).append(r["rate"])
                workers_cpu.setdefault((size, n_events), {}).setdefault(name, []).append(r["cpu"].get("python workers"))
                if repeat:
                    print(f"{name} {size:,} keys, {n_events:,} events, repeat {repeat + 1}: {r['rate']:,.0f} events/s "
                          f"(CPU: {format_cpu(r['cpu'])})", flush=True)
                    continue
                r.update(backend=name, size=size, n_events=n_events, keys=len(expected) if expected else None)
                rows.append(r)
                print(f"\n{name} {size:,} keys, {n_events:,} events: {r['events']:,} in {r['seconds']:.1f} s = "
                      f"{r['rate']:,.0f} "
                      f"events/s{'' if expected is None else ', state verified'}; python workers: "
                      f"{r['mem']['workers']} procs, peak max {r['mem']['max_peak_mb']:.0f} MB, sum of peaks "
                      f"{r['mem']['sum_peak_mb']:.0f} MB (sum RSS at start {r['mem']['sum_start_mb']:.0f} MB); "
                      f"CPU: {format_cpu(r['cpu'])}", flush=True)
                print("  epoch  kind        bytes written   (in full files / delta files)   epoch time   "
                      "state loading (slowest task)")
                for e in r["epochs"]:
                    print(f"  {e['epoch']:>5}  {e['kind']:<10} {e['bytes']:>14,}   ({e['full_bytes']:>12,} / "
                          f"{e['delta_bytes']:>12,})   {e['seconds'] * 1000:8.0f} ms   {e['restore'] * 1000:8.0f} ms")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{datetime.date.today()}  python bench/state_backends.py --shapes "
          f"{' '.join(f'{k}:{n}' for k, n in shapes)} --files {args.files} --repeats {args.repeats}")
    print("| backend | state keys | events | events/s | epochs full / delta | bytes per full ckpt "
          "| bytes per delta ckpt "
          "| epoch time full | epoch time delta | worker peak RSS max / sum (MB) | sum RSS at start → growth (MB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        # the first epoch includes the query start; leave it out of the time means
        full = [e for e in r["epochs"] if "full" in e["kind"]]
        delta = [e for e in r["epochs"] if e["kind"] == "delta"]
        m = r["mem"]
        print(f"| {r['backend']} | {r['keys'] or r['size']:,} | {r['n_events']:,} | {r['rate']:,.0f} "
              f"| {len(full)} / {len(delta)} "
              f"| {_mean([e['bytes'] for e in full]):,.0f} | {_mean([e['bytes'] for e in delta]):,.0f} "
              f"| {_mean([e['seconds'] for e in full if e['epoch'] != r['epochs'][0]['epoch']]) * 1000:,.0f} ms "
              f"| {_mean([e['seconds'] for e in delta if e['epoch'] != r['epochs'][0]['epoch']]) * 1000:,.0f} ms "
              f"| {m['max_peak_mb']:,.0f} / {m['sum_peak_mb']:,.0f} "
              f"| {m['sum_start_mb']:,.0f} → +{m['sum_growth_mb']:,.0f} |")
    for (size, n_events), rate in rates.items():
        if "rocksdb" in rate and "heap" in rate:
            rocks, heap = statistics.median(rate["rocksdb"]), statistics.median(rate["heap"])
            each = ", ".join(f"{r / h:.2f}" for r, h in zip(rate["rocksdb"], rate["heap"]))
            print(f"{size:,} keys, {n_events:,} events: RocksDB / heap throughput = {rocks / heap:.2f} "
                  f"(target >= 0.6)" + (f"; medians of {args.repeats}: RocksDB {rocks:,.0f}, heap {heap:,.0f} "
                                         f"events/s; per repeat {each}" if args.repeats > 1 else ""))
        if "rocksdb, any worker" in rate:
            own, anyw = statistics.median(rate["rocksdb"]), statistics.median(rate["rocksdb, any worker"])
            each = ", ".join(f"{o / a:.2f}" for o, a in zip(rate["rocksdb"], rate["rocksdb, any worker"]))
            cpu = workers_cpu[(size, n_events)]
            cpu_note = (f"; Python workers' CPU per run, medians: {statistics.median(cpu['rocksdb']):.1f} s against "
                        f"{statistics.median(cpu['rocksdb, any worker']):.1f} s"
                        if None not in cpu["rocksdb"] + cpu["rocksdb, any worker"] else "")
            print(f"{size:,} keys, {n_events:,} events: RocksDB, a Python worker per subtask / any worker = "
                  f"{own / anyw:.2f} ({own:,.0f} / {anyw:,.0f} events/s; per repeat {each}{cpu_note})")


if __name__ == "__main__":
    main()
