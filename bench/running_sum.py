"""Running sum per key: keyspan vs Spark's transformWithStateInPandas vs a bare mapInArrow loop.

Same process, same SparkSession, same Parquet events, same streaming source (one file per
micro-batch, so every run checkpoints every ~100k events) and the same available-now trigger.

    python bench/running_sum.py [--events 1000000] [--keys 10000] [--files 10] [--repeats 3]
    python bench/running_sum.py --warmup-events 1000000   # both engines warmed by a full-size run first
    python bench/running_sum.py --master spark://HOST:7077 [--events ...]   # keyspan on a cluster vs local mode
    python bench/running_sum.py --pyflink [--pyflink-python /work/pyflink-venv/bin/python]  # + Flink
    python bench/running_sum.py --breakdown   # + where a micro-batch's time goes, keyspan vs the bare loop

Each run's CPU seconds are printed by process kind (Linux): the JVM (of which its JIT compiler
threads), the Python workers and the driver.

``--pyflink`` also runs the same events (as CSV) on Apache Flink through PyFlink, in the separate venv
that has ``apache-flink`` (see bench/pyflink_peer.py): the running sum as a Python
``KeyedProcessFunction`` in thread mode and in process mode, and as Flink SQL ``GROUP BY``.

keyspan: from_spark → key_by(key) → KeyedProcessFunction with ValueState → DiscardingSink, a
checkpoint (state delta files + metadata commit) every epoch; its final state is read back from
the last checkpoint and compared with the expected sums. transformWithStateInPandas: ValueState
per key in Spark's RocksDB state store. mapInArrow: repartition by key + a Python dict per
worker, no persistence at all (the bare limit), started with keyspan's query settings (Arrow batches
cut by record count alone, Spark's logs written through Hadoop's FileSystem: ``keyspan.runtime.session.query_settings``),
so that the limit runs as keyspan's own query does. The peers use Spark's noop sink.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.baselines import (  # noqa: E402
    WARM_UP_EVENTS,
    cpu_seconds,
    cpu_spent,
    expected_sums,
    format_cpu,
    generate_events,
    make_spark,
    require_transform_with_state,
    run_map_in_arrow,
    run_transform_with_state,
    warm_up,
    warm_up_shape,
)
from keyspan.checkpoint.reader import latest_keyed_state  # noqa: E402
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment  # noqa: E402
from keyspan.datastream.connectors.file_system import DiscardingSink  # noqa: E402
from keyspan.datastream.state import ValueStateDescriptor  # noqa: E402
from keyspan.runtime import options  # noqa: E402


class RunningSum(KeyedProcessFunction):
    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_element(self, value, ctx):
        total = (self.total.value() or 0) + value.value
        self.total.update(total)
        yield value.key, total


class Nothing(KeyedProcessFunction):
    """The same job with no user work: what keyspan costs around the user's function."""

    def process_element(self, value, ctx):
        return None


def run_keyspan(spark, directory: str, workdir: str, job: str, files_per_trigger: int = 1,
                function: KeyedProcessFunction | None = None) -> dict:
    options.install(options.RunOptions(workdir=workdir, fresh=True))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(int(spark.conf.get("spark.sql.shuffle.partitions")))
    events = spark.readStream.schema("key long, value long").option("maxFilesPerTrigger", files_per_trigger) \
        .parquet(directory)
    (env.from_spark(events, bounded=True).key_by(lambda r: r.key)
        .process(function or RunningSum()).uid("running-sum").sink_to(DiscardingSink()))
    start = time.perf_counter()
    result = env.execute(job)
    seconds = time.perf_counter() - start
    return {"events": result.records, "seconds": seconds, "rate": result.records / seconds,
            "epochs": result.epochs, "phases": result.epoch_phases, "spark": result.spark_progress}


def breakdown(spark, data: str, work: str) -> None:
    """Where a micro-batch's time goes (medians, first batch left out): the bare mapInArrow loop,
    keyspan with a function that does nothing, and keyspan's running sum, on the same events."""
    from bench.baselines import OUTPUT_SCHEMA_DDL, _make_running_sum_fn, _stream_source
    from keyspan.runtime.session import query_settings

    med = lambda xs: statistics.median(xs[1:]) if len(xs) > 1 else float("nan")  # noqa: E731
    with query_settings(spark, local_logs=True):  # as keyspan's own query runs (its logs in a local folder too)
        query = (_stream_source(spark, data, 1).repartition(2, "key")
                 .mapInArrow(_make_running_sum_fn(uuid.uuid4().hex), OUTPUT_SCHEMA_DDL)
                 .writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", os.path.join(work, "breakdown-arrow")).start())
    start = time.perf_counter()
    query.awaitTermination()
    seconds = time.perf_counter() - start
    batches = [dict(p.durationMs) for p in query.recentProgress]
    print("\nper micro-batch (median ms)        total  Spark job  Spark's own   Python  state files  commit  awaited")
    print(f"mapInArrow, no state saved         {med([b['triggerExecution'] for b in batches]):>5.0f}  "
          f"{med([b['addBatch'] for b in batches]):>9.0f}  "
          f"{med([b['triggerExecution'] - b['addBatch'] for b in batches]):>11.0f}   ({seconds:.1f} s in all)")
    for name, function in (("keyspan, a function doing nothing", Nothing()), ("keyspan running sum", RunningSum())):
        r = run_keyspan(spark, data, os.path.join(work, f"breakdown-{name[-7:]}"), f"breakdown-{name[-7:]}",
                        function=function)
        ph, sp = r["phases"], r["spark"]
        print(f"{name:<34} {med([b['triggerExecution'] for b in sp]):>5.0f}  "
              f"{med([p['tasks'] * 1000 for p in ph]):>9.0f}  "
              f"{med([(b['triggerExecution'] - b['addBatch']) for b in sp]):>11.0f}  "
              f"{med([p['tasks.busy'] * 1000 for p in ph]):>7.0f}  {med([p['tasks.snapshot'] * 1000 for p in ph]):>11.0f}"
              f"  {med([p['commit'] * 1000 for p in ph]):>6.0f}  {med([p.get('commit.wait', 0) * 1000 for p in ph]):>7.0f}"
              f"   ({r['seconds']:.1f} s in all, {r['epochs']} epochs)")
    print("Spark job: keyspan's stages up to the driver holding every task's report (mapInArrow: its addBatch); "
          "Python: the slowest task's record processing; state files: the slowest task's checkpoint writes; "
          "commit: the driver's checkpoint commit, which runs while Spark logs the batch; awaited: how long the "
          "next epoch waited for it")


def measure_on(master: str, args) -> dict:
    """keyspan alone on ``master`` (its own process: one SparkContext per process), median rate of
    ``--repeats`` runs after a warm-up, state verified. The data and checkpoints sit in a local temp
    folder: with a loopback cluster every executor shares this host's disk."""
    from keyspan.runtime.session import get_or_create_spark

    os.environ["KEYSPAN_ALLOW_LOCAL_STORAGE"] = "true"
    work = tempfile.mkdtemp(prefix="keyspan-bench-")
    try:
        data = generate_events(os.path.join(work, "events"), args.events, args.keys, args.files, 7)
        spark = get_or_create_spark(2, master, {"spark.executor.memory": "1g", "spark.ui.enabled": "false",
                                                "spark.scheduler.minRegisteredResourcesRatio": "1.0"})
        warm = generate_events(os.path.join(work, "warmup-events"), 20_000, 1_000, 2, 1)
        run_keyspan(spark, warm, os.path.join(work, "ks-warm"), "warm")  # JVM, codegen, Python workers
        rates = []
        for i in range(args.repeats):
            r = run_keyspan(spark, data, os.path.join(work, f"ks-{i}"), f"running-sum-{i}")
            state = latest_keyed_state(options.current().metadata(), options.current().checkpoint_root(),
                                       f"running-sum-{i}", "running-sum")["total"]
            assert state == expected_sums(data), "keyspan's checkpointed state differs from the expected sums"
            rates.append(r["rate"])
        spark.stop()
        return {"master": master, "rate": statistics.median(rates), "epochs": r["epochs"]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare_masters(args) -> None:
    """Local mode and ``--master``, each in a fresh driver process, side by side."""
    results = []
    for master in ("local[2]", args.master):
        cmd = [sys.executable, os.path.abspath(__file__), "--measure-on", master, "--events", str(args.events),
               "--keys", str(args.keys), "--files", str(args.files), "--repeats", str(args.repeats)]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)  # its log goes to stderr
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{args.events:,} events, {args.keys:,} keys, {args.files} epochs, parallelism 2 (median of "
          f"{args.repeats}, state verified)")
    for r in results:
        print(f"keyspan on {r['master']:<28} {r['rate']:>12,.0f} events/s")


PYFLINK_PYTHON = "/work/pyflink-venv/bin/python"
PYFLINK_MODES = {"thread": "PyFlink KeyedProcessFunction, thread mode",
                 "process": "PyFlink KeyedProcessFunction, process mode",
                 "sql": "Flink SQL GROUP BY (JVM, no Python)"}


def run_pyflink(python: str, parquet_dir: str, work: str, modes: list[str]) -> dict:
    """Each mode of bench/pyflink_peer.py in the PyFlink venv, on a CSV copy of the same events; the
    Python modes' output (every key's running sums) is read back and checked against the expected sums."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    csv_dir = os.path.join(work, "events-csv")
    os.makedirs(csv_dir, exist_ok=True)
    for name in sorted(os.listdir(parquet_dir)):
        if name.endswith(".parquet"):
            pcsv.write_csv(pq.read_table(os.path.join(parquet_dir, name)),
                           os.path.join(csv_dir, name.replace(".parquet", ".csv")),
                           pcsv.WriteOptions(include_header=False))
    events = sum(pq.ParquetFile(f).metadata.num_rows for f in glob.glob(os.path.join(parquet_dir, "*.parquet")))
    expected = expected_sums(parquet_dir)
    results = {}
    for mode in modes:
        out = tempfile.mkdtemp(prefix=f"pyflink-{mode}-", dir=work)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyflink_peer.py")
        done = subprocess.run([python, script, "--input", csv_dir, "--events", str(events), "--mode", mode,
                               "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            print(f"PyFlink {mode} mode failed (exit {done.returncode}); its last output:\n"
                  + "\n".join(done.stderr.splitlines()[-15:]), file=sys.stderr)
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        if mode != "sql":
            r["verified"] = _pyflink_sums(os.path.join(out, "sums")) == expected
            assert r["verified"], f"PyFlink {mode} mode: the last running sum per key differs from the expected sums"
        results[mode] = r
        print(f"PyFlink {mode}: {r['rate']:,.0f} events/s (job {r['seconds']:.1f} s, wall {r['wall_seconds']:.1f} s)",
              flush=True)
    return results


def _pyflink_sums(directory: str) -> dict:
    """The largest running sum per key in the CSV files Flink wrote (values >= 1: the largest is the last)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    files = [f for f in glob.glob(os.path.join(directory, "**", "*"), recursive=True) if os.path.isfile(f)]
    files += [f for f in glob.glob(os.path.join(directory, "**", ".*"), recursive=True) if os.path.isfile(f)]
    tables = [pcsv.read_csv(f, pcsv.ReadOptions(column_names=["key", "total"])) for f in files
              if os.path.getsize(f) and not f.endswith(".crc")]
    agg = pa.concat_tables(tables).group_by("key").aggregate([("total", "max")])
    return dict(zip(agg.column("key").to_pylist(), agg.column("total_max").to_pylist()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-tws", action="store_true")
    ap.add_argument("--warmup-events", type=int, default=WARM_UP_EVENTS,
                    help="events of the warm-up run; as many as --events measures both engines warm")
    ap.add_argument("--pyflink", action="store_true", help="also run the PyFlink peers (bench/pyflink_peer.py)")
    ap.add_argument("--pyflink-python", default=PYFLINK_PYTHON, help="the python of a venv with apache-flink")
    ap.add_argument("--pyflink-modes", nargs="+", default=list(PYFLINK_MODES), choices=list(PYFLINK_MODES))
    ap.add_argument("--breakdown", action="store_true", help="also print where a micro-batch's time goes")
    ap.add_argument("--master", help="also run keyspan on this Spark master and print its rate next to local mode")
    ap.add_argument("--measure-on", help=argparse.SUPPRESS)  # the child process of --master
    args = ap.parse_args()
    if args.measure_on:
        print(json.dumps(measure_on(args.measure_on, args)))
        return
    if args.master:
        compare_masters(args)
        return
    if not args.skip_tws:
        require_transform_with_state()
    work = tempfile.mkdtemp(prefix="keyspan-bench-")
    try:
        data = generate_events(os.path.join(work, "events"), args.events, args.keys, args.files, 7)
        spark = make_spark(cores=2)
        warm_up(spark, work, tws=not args.skip_tws)
        warm = os.path.join(work, "warmup-events")
        if args.warmup_events > WARM_UP_EVENTS:  # both engines once more, on as many events as asked
            warm = generate_events(os.path.join(work, "warm"), *warm_up_shape(args, args.files), 1)
            run_map_in_arrow(spark, warm, os.path.join(work, "ckpt-arrow-warm"), verify=False)
        run_keyspan(spark, warm, os.path.join(work, "ks-warm"), "warm")
        ks, arrow, epochs = [], [], []
        cpu = {"keyspan": [], "mapInArrow": []}  # CPU seconds of each run, by process kind

        def bare(i):
            before = cpu_seconds()
            arrow.append(run_map_in_arrow(spark, data, os.path.join(work, f"ckpt-arrow-{i}"), verify=False)["rate"])
            cpu["mapInArrow"].append(cpu_spent(before, cpu_seconds()))

        def keyspan(i):
            before = cpu_seconds()
            r = run_keyspan(spark, data, os.path.join(work, f"ks-{i}"), f"running-sum-{i}")
            cpu["keyspan"].append(cpu_spent(before, cpu_seconds()))
            ks.append(r["rate"])
            epochs.append(r["epochs"])
            state = latest_keyed_state(options.current().metadata(), options.current().checkpoint_root(),
                                       f"running-sum-{i}", "running-sum")["total"]
            assert state == expected_sums(data), "keyspan's checkpointed state differs from the expected sums"

        for i in range(args.repeats):
            # the JVM still compiles during the first full-size runs, and the later of two runs gains from
            # it: the two take turns at running first
            for engine in (bare, keyspan) if i % 2 == 0 else (keyspan, bare):
                engine(i)
            print(f"run {i}: keyspan {ks[-1]:,.0f} ev/s ({epochs[-1]} epochs, state verified)  "
                  f"mapInArrow {arrow[-1]:,.0f} ev/s  ratio {ks[-1] / arrow[-1]:.2f}"
                  f"{'' if i % 2 == 0 else '  (keyspan ran first)'}", flush=True)
            if cpu["keyspan"][-1]:
                print("  CPU: " + "; ".join(f"{n}: {format_cpu(c[-1])}" for n, c in cpu.items()), flush=True)
        flink = {}
        if args.pyflink:
            if os.path.exists(args.pyflink_python):
                flink = run_pyflink(args.pyflink_python, data, work, args.pyflink_modes)
            else:
                print(f"no PyFlink venv at {args.pyflink_python}: create one with\n  python3 -m venv /work/pyflink-venv"
                      f" && /work/pyflink-venv/bin/pip install apache-flink==2.3.0\nor pass --pyflink-python",
                      file=sys.stderr)
        tws = None
        if not args.skip_tws:
            tws = run_transform_with_state(spark, data, os.path.join(work, "ckpt-tws"), verify=False)["rate"]
        k, a = statistics.median(ks), statistics.median(arrow)
        print(f"\n{args.events:,} events, {args.keys:,} keys, {args.files} epochs, parallelism 2 (median of "
              f"{args.repeats})")
        print(f"keyspan                      {k:>12,.0f} events/s")
        print(f"mapInArrow (no state saved)  {a:>12,.0f} events/s   keyspan / bare limit = {k / a:.0%} (target >= 80%)")
        if args.repeats > 1:
            print("  per repeat: " + ", ".join(f"{x / y:.2f}" for x, y in zip(ks, arrow)))
        if cpu["keyspan"][0]:
            print("  CPU per run, medians: " + "; ".join(
                f"{n}: " + format_cpu({part: statistics.median(run[part] for run in c) for part in c[0]})
                for n, c in cpu.items()))
        if tws:
            print(f"transformWithStateInPandas   {tws:>12,.0f} events/s   keyspan / TWS = {k / tws:.1f}x (target >= 15x)")
        for mode, r in flink.items():
            goal = "  (goal >= 30x)" if mode == "thread" else ""
            print(f"{PYFLINK_MODES[mode]:<45} {r['rate']:>10,.0f} events/s   keyspan / it = {k / r['rate']:.2f}x{goal}")
        if args.breakdown:
            breakdown(spark, data, work)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
