"""The columnar fast path of known aggregations (docs/aggregations.md) against Spark's own
streaming aggregations, on the same Parquet events in one process and one SparkSession.

    python bench/fast_aggregation.py [--events 1000000] [--keys 10000] [--files 10] [--repeats 1]
                                     [--skip-sum] [--skip-windows] [--window-source spark|file] [--pyflink]
                                     [--any-worker] [--your-function] [--python-workers-over-unix-sockets]

1. Rolling sum per key. keyspan: ``from_spark`` (one file per epoch) → ``key_by(key).sum("value")`` →
   DiscardingSink, a checkpoint every epoch; one output per event (Flink's semantics); the final
   state is read back from the last checkpoint and compared with the expected sums. Run with the
   fast path and with ``set_vectorized_aggregation(False)`` (every record through Python). Spark:
   ``groupBy("key").agg(sum("value"))`` in update mode to the noop sink (one row per key changed
   in a batch — less output than keyspan's one row per event), same source and trigger.
   Also printed: events/s per core, next to Flink's published 720 k events/s/core for keyed
   grouping (seed 003; its hardware is not this machine's). With ``--pyflink``, Flink SQL's
   ``GROUP BY key`` on a CSV copy of the same events runs too (``bench/pyflink_peer.py --mode sql``,
   in the venv of ``--pyflink-python``; see bench/running_sum.py).
2. Tumbling 1-minute event-time windows, sum and count per key (``bench/windowed.py``'s data and
   Spark peer: ``withWatermark(5 s).groupBy(window, key)`` in append mode). keyspan: ``from_spark``
   over Spark's Parquet stream, as the peer reads it (2 files per epoch) → bounded out-of-orderness
   5 s with the timestamp from column ``ts`` → ``key_by(key)`` → ``window(...).aggregate(
   SumAndCount("value"), KeyAndWindow())`` on the fast path and on the per-record path
   (``--window-source file``: keyspan's FileSource, read in a Python source stage, instead). The
   timed runs drop the window results in the task (``DiscardingSink``), as Spark's peer drops its
   rows in the noop sink; before them, one untimed run of each variant on the same data delivers
   every window result to this process after its checkpoint commits, where they are checked against
   the expected sums and counts (delivering 101,504 results to the driver cost keyspan about 9 % of
   a run). Spark's emitted row count is checked against its watermark rule in every run. ``--any-worker``
   also runs the fast path with ``set_python_worker_per_subtask(False)`` (Spark hands each task to any
   idle Python worker, which first applies what the other worker changed). ``--your-function`` also
   runs the windows with ``SumCount``, the same sum and count as a plain-Python
   ``AggregateFunction``: folded a chunk at a time (the folding path) and record by record. Each run's CPU
   seconds are printed too, split between the Spark JVM, its Python workers and this process
   (``bench.baselines.cpu_seconds``, Linux): they show which side of the job the time goes to. So do
   Spark's stage metrics of each run, printed last (``bench.baselines.spark_stages``): the stages
   before the exchange (reading, routing, for Spark its partial aggregate) and after it (keyspan's
   keyed Python stage; Spark's final aggregate and state store). ``--python-workers-over-unix-sockets``:
   the JVM talks to its Python workers over Unix sockets instead of TCP, Spark's default.

3. ``--operator-only``: the aggregation step alone, without Spark — the rolling-sum operator over
   the same events in chunks of 16 k records, on the heap backend, per-record (``process_element``
   per record) vs columnar (``process_batch`` per chunk) vs Arrow (``process_columns`` on Arrow
   columns in chunks of 64 k, as a keyed stage fed by a Spark source gets them); CPU seconds of this process
   (``time.process_time``), so a busy machine disturbs it less than the end-to-end runs. The
   same for the tumbling-window sum-and-count operator (``process_element`` vs ``process_batch`` vs
   ``process_columns``), then every window fired through the worker's timer service as a task fires them (windows/CPU-s),
   then ``SumCount``, and a window keeping every record (``process``/``apply``), record by record
   against the folding path in chunks of 16 k and 64 k.
   Python's garbage collector runs as in a task (``keyspan.common.garbage.streaming_records``): with
   Python's defaults a young collection every 700 allocations would be measured too.

Other engineers' jobs share this machine: the load average (``uptime``) is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.baselines import (  # noqa: E402
    WARM_UP_EVENTS, cpu_seconds, cpu_spent, expected_sums, format_cpu, format_stages, generate_events, make_spark,
    spark_stages, warm_up_shape,
)
from bench.windowed import (  # noqa: E402
    BASE_MS as BASE, HDFS, MINUTE, KeyAndWindow, Results, SumCount, differences, generate, run_spark, ts_of,
)
from keyspan.checkpoint.reader import latest_keyed_state  # noqa: E402
from keyspan.common import Duration, Time, WatermarkStrategy  # noqa: E402
from keyspan.datastream import StreamExecutionEnvironment, TumblingEventTimeWindows  # noqa: E402
from keyspan.datastream.window import EventTimeTrigger  # noqa: E402
from keyspan.datastream.aggregates import Avg  # noqa: E402
from keyspan.datastream.connectors.file_system import DiscardingSink, FileSource, StreamFormat  # noqa: E402
from keyspan.runtime import options  # noqa: E402

FLINK_KEYED_PER_CORE = 720_000  # seed 003: Flink's published keyed-grouping throughput per core


class SumAndCount(Avg):
    """``Avg``'s accumulator (sum, count) as the result: sum and count of a field in one pass."""

    def get_result(self, accumulator):
        return accumulator


def vectorized(result) -> int:
    """Records that took a chunk path: columnar (the operators' ``numRecordsVectorized`` metric) or
    folded (``numRecordsFolded``)."""
    return sum(m["value"] for m in result.metrics.user_metrics()
               if m["name"] in ("numRecordsVectorized", "numRecordsFolded"))


def load() -> str:
    return "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg())


# --- rolling sum ----------------------------------------------------------------------------------------

def run_keyspan_sum(spark, directory: str, workdir: str, job: str, vectorize: bool) -> dict:
    options.install(options.RunOptions(workdir=workdir, fresh=True, rest_api=False))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(int(spark.conf.get("spark.sql.shuffle.partitions")))
    env.set_vectorized_aggregation(vectorize)
    events = spark.readStream.schema("key long, value long").option("maxFilesPerTrigger", 1).parquet(directory)
    env.from_spark(events, bounded=True).key_by(lambda r: r.key).sum("value").uid("sum").sink_to(DiscardingSink())
    start = time.perf_counter()
    result = env.execute(job)
    seconds = time.perf_counter() - start
    state = latest_keyed_state(options.current().metadata(), options.current().checkpoint_root(), job,
                               "sum")["_reduce_state"]
    return {"rate": result.records / seconds, "events": result.records, "epochs": result.epochs,
            "sums": {k: v.value for k, v in state.items()}, "vectorized": vectorized(result)}


def run_spark_sum(spark, directory: str, checkpoint: str) -> dict:
    from pyspark.sql import functions as F

    events = spark.readStream.schema("key long, value long").option("maxFilesPerTrigger", 1).parquet(directory)
    out = events.groupBy("key").agg(F.sum("value").alias("total"))
    start = time.perf_counter()
    query = out.writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint) \
        .trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - start
    events_in = sum(p.numInputRows for p in query.recentProgress)
    return {"rate": events_in / seconds, "events": events_in}


def rolling_sum(spark, args, work: str) -> None:
    data = generate_events(os.path.join(work, "events"), args.events, args.keys, args.files, 7)
    expected = expected_sums(data)
    warm = generate_events(os.path.join(work, "warm"), *warm_up_shape(args, args.files), 1)
    for vectorize in (True, False):
        run_keyspan_sum(spark, warm, os.path.join(work, f"ks-warm-{vectorize}"), f"warm-{vectorize}", vectorize)
    run_spark_sum(spark, warm, os.path.join(work, "sp-warm"))
    rates = {"fast": [], "per-record": [], "spark": []}
    for i in range(args.repeats):
        for name, vectorize in (("fast", True), ("per-record", False)):
            r = run_keyspan_sum(spark, data, os.path.join(work, f"ks-{name}-{i}"), f"sum-{name}-{i}", vectorize)
            assert r["events"] == args.events and r["sums"] == expected, f"{name}: state differs from the expected sums"
            assert vectorize or r["vectorized"] == 0, r["vectorized"]
            print(f"  {name}: {r['vectorized']:,} of {r['events']:,} records on a chunk path (columnar or folded)", flush=True)
            rates[name].append(r["rate"])
        p = run_spark_sum(spark, data, os.path.join(work, f"sp-{i}"))
        assert p["events"] == args.events, p
        rates["spark"].append(p["rate"])
        print(f"run {i}: " + "  ".join(f"{n} {v[-1]:,.0f} ev/s" for n, v in rates.items()) + f"  ({load()})",
              flush=True)
    if args.pyflink:  # Flink's JVM aggregation on a CSV copy of the same events, once per repeat
        from bench.running_sum import run_pyflink

        rates["flink-sql"] = [run_pyflink(args.pyflink_python, data, work, ["sql"])["sql"]["rate"]
                              for _ in range(args.repeats)]
    m = {n: statistics.median(v) for n, v in rates.items()}
    cores = int(spark.conf.get("spark.sql.shuffle.partitions"))
    print(f"\nKeyedStream.sum: {args.events:,} events, {args.keys:,} keys, {args.files} epochs, parallelism {cores}, "
          f"final state verified (median of {args.repeats}; {load()})")
    print(f"keyspan fast path        {m['fast']:>10,.0f} events/s  = {m['fast'] / cores:>9,.0f} /core "
          f"(Flink published: {FLINK_KEYED_PER_CORE:,} /core, ratio {m['fast'] / cores / FLINK_KEYED_PER_CORE:.2f})")
    print(f"keyspan per-record path  {m['per-record']:>10,.0f} events/s")
    print(f"Spark groupBy(key).sum() {m['spark']:>10,.0f} events/s")
    print(f"fast / Spark = {m['fast'] / m['spark']:.2f}x   per-record / Spark = {m['per-record'] / m['spark']:.2f}x   "
          f"fast / per-record = {m['fast'] / m['per-record']:.2f}x", flush=True)
    if "flink-sql" in m:
        print(f"Flink SQL GROUP BY (JVM) {m['flink-sql']:>10,.0f} events/s   fast / Flink SQL = "
              f"{m['fast'] / m['flink-sql']:.2f}x", flush=True)


# --- tumbling windows -------------------------------------------------------------------------------------

def run_keyspan_windows(spark, directory: str, workdir: str, job: str, vectorize: bool, source: str = "spark",
                        worker_per_subtask: bool = True, collect: bool = True, yours: bool = False) -> dict:
    """``collect``: every window result delivered to a sink in this process (for checking them);
    otherwise dropped in the task, as Spark's peer drops its rows in the noop sink. ``yours``: the
    aggregate is ``SumCount`` (plain Python) instead of keyspan's columnar ``SumAndCount``."""
    options.install(options.RunOptions(workdir=workdir, fresh=True, rest_api=False))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(int(spark.conf.get("spark.sql.shuffle.partitions")))
    env.set_vectorized_aggregation(vectorize)
    env.set_python_worker_per_subtask(worker_per_subtask)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5)).with_timestamp_assigner(ts_of)
    if source == "file":
        files = FileSource.for_record_stream_format(StreamFormat.parquet_format(), directory) \
            .set_max_files_per_epoch(2).build()
        timed = env.from_source(files, strategy, "events")
    else:
        events = spark.readStream.schema("key long, ts long, value long").option("maxFilesPerTrigger", 2) \
            .parquet(directory)
        timed = env.from_spark(events, bounded=True).assign_timestamps_and_watermarks(strategy)
    results = (timed.key_by(lambda r: r.key)
               .window(TumblingEventTimeWindows.of(Time.minutes(1)))
               .aggregate(SumCount() if yours else SumAndCount("value"), KeyAndWindow()).uid("windows"))
    sink = Results()
    if collect:
        results.add_sink(sink)
    else:
        results.sink_to(DiscardingSink())
    start = time.perf_counter()
    result = env.execute(job)
    seconds = time.perf_counter() - start
    return {"rate": result.records / seconds, "events": result.records, "windows": sink.windows if collect else None,
            "vectorized": vectorized(result)}


def windows(spark, args, work: str) -> None:
    data_dir = os.path.join(work, "window-events")
    data = generate(data_dir, args.events, args.keys, args.files * 2)
    expected = data["expected"]
    spark_expected = sum(1 for w in expected if w[1] + MINUTE <= data["max_ts"] - 5_000)
    warm = os.path.join(work, "window-warm")
    generate(warm, *warm_up_shape(args, args.files * 2), seed=1)
    for vectorize in (True, False):
        run_keyspan_windows(spark, warm, os.path.join(work, f"ksw-warm-{vectorize}"), f"w-warm-{vectorize}", vectorize,
                            args.window_source)
    run_spark(spark, warm, os.path.join(work, "spw-warm"), HDFS)
    # (name, fast paths on, a Python worker per subtask, your own AggregateFunction)
    variants = [("fast", True, True, False), ("per-record", False, True, False)]
    if args.your_function:
        variants += [("yours, folded", True, True, True), ("yours, per record", False, True, True)]
    if args.any_worker:
        variants.append(("fast, any worker", True, False, False))
    rates = {**{name: [] for name, *_ in variants}, "spark": []}
    cpu = {name: [] for name in rates}  # CPU seconds of each run, by process kind
    spans = {name: [] for name in rates}  # (start, end) of each timed run, for Spark's stage metrics
    def job_name(variant: str, run) -> str:
        return f"windows-{variant.replace(', ', '-').replace(' ', '-')}-{run}"

    for name, vectorize, own, yours in variants:  # untimed: the same job on the same data, its windows checked
        job = job_name(name, "checked")
        r = run_keyspan_windows(spark, data_dir, os.path.join(work, job), job, vectorize, args.window_source, own,
                                yours=yours)
        assert r["windows"] == expected, \
            f"{name}: window results differ from the expected sums and counts: {differences(r['windows'], expected)}"
    for i in range(args.repeats):
        for name, vectorize, own, yours in variants:
            before, began = cpu_seconds(), time.time()
            job = job_name(name, i)
            r = run_keyspan_windows(spark, data_dir, os.path.join(work, job), job, vectorize, args.window_source, own,
                                    collect=False, yours=yours)
            cpu[name].append(cpu_spent(before, cpu_seconds()))
            spans[name].append((began, time.time()))
            assert r["events"] == args.events, f"{name}: {r['events']:,} events read"
            assert (r["vectorized"] > 0) == vectorize, f"{name}: {r['vectorized']} records took the fast path"
            print(f"  {name}: {r['vectorized']:,} of {r['events']:,} records on a chunk path (columnar or folded)", flush=True)
            rates[name].append(r["rate"])
        before, began = cpu_seconds(), time.time()
        p = run_spark(spark, data_dir, os.path.join(work, f"spw-{i}"), HDFS, 2)
        cpu["spark"].append(cpu_spent(before, cpu_seconds()))
        spans["spark"].append((began, time.time()))
        assert p["events"] == args.events and p["rows_out"] == spark_expected, p
        rates["spark"].append(p["rate"])
        print(f"run {i}: " + "  ".join(f"{n} {v[-1]:,.0f} ev/s" for n, v in rates.items()) + f"  ({load()})",
              flush=True)
        if cpu["spark"][-1]:
            print("  CPU: " + "; ".join(f"{n}: {format_cpu(c[-1])}" for n, c in cpu.items()), flush=True)
    m = {n: statistics.median(v) for n, v in rates.items()}
    print(f"\ntumbling 1-minute windows, sum and count per key ({args.window_source} source): {args.events:,} events, "
          f"{args.keys:,} keys, "
          f"{len(expected):,} windows checked in one untimed run of each variant; the timed runs drop their output, "
          f"as Spark's noop sink does (median of {args.repeats}; {load()})")
    print(f"keyspan fast path                   {m['fast']:>10,.0f} events/s   / Spark = {m['fast'] / m['spark']:.2f}x")
    print(f"keyspan per-record path             {m['per-record']:>10,.0f} events/s   / Spark = "
          f"{m['per-record'] / m['spark']:.2f}x")
    if args.your_function:
        print(f"your AggregateFunction, folded      {m['yours, folded']:>10,.0f} events/s   / Spark = "
              f"{m['yours, folded'] / m['spark']:.2f}x   (folded / per record = "
              f"{m['yours, folded'] / m['yours, per record']:.2f}x)")
        print(f"your AggregateFunction, per record  {m['yours, per record']:>10,.0f} events/s   / Spark = "
              f"{m['yours, per record'] / m['spark']:.2f}x")
    if args.any_worker:
        print(f"keyspan fast path, any worker       {m['fast, any worker']:>10,.0f} events/s   / Spark = "
              f"{m['fast, any worker'] / m['spark']:.2f}x   (a Python worker per subtask / any worker = "
              f"{m['fast'] / m['fast, any worker']:.2f})")
    print(f"Spark groupBy(window, key), HDFS    {m['spark']:>10,.0f} events/s", flush=True)
    if cpu["spark"][-1]:  # where each run spent its CPU (median over the runs), which a busy machine moves less
        print("CPU per run (median): " + "; ".join(
            f"{n}: " + format_cpu({part: statistics.median(run[part] for run in c) for part in c[0]})
            for n, c in cpu.items()), flush=True)
    print("Spark's stages per run (median; before the exchange: reading the source, and Spark's partial aggregate; "
          "after it: keyspan's keyed stage with its Python workers, Spark's final aggregate and state store):")
    stage_costs = iter(spark_stages(spark, [span for runs in spans.values() for span in runs]))
    for name, runs in spans.items():
        per_run = [next(stage_costs) for _ in runs]
        print(f"  {name}: " + format_stages({side: {part: statistics.median(r[side][part] for r in per_run)
                                                    for part in per_run[0][side]} for side in per_run[0]}), flush=True)


# --- the operator alone ------------------------------------------------------------------------------------

def operator_only(args) -> None:
    import numpy as np
    import pyarrow as pa

    from keyspan.common.types import Row
    from keyspan.datastream.data_stream import _KeyedReduce
    from keyspan.datastream.aggregates import RollingAggregation
    from keyspan.runtime.operators.vectorized import RollingAggregateOperator
    from keyspan.runtime.protocol import COLUMN_CHUNK
    from keyspan.state.heap import HeapKeyedStateBackend
    from keyspan.state.keygroups import assign_to_key_group

    class RuntimeContext:
        def __init__(self, backend):
            self.backend = backend

        def get_state(self, descriptor):
            return self.backend.get_state(descriptor)

    rng = np.random.default_rng(7)
    keys = rng.integers(0, args.keys, size=args.events).tolist()
    values = rng.integers(1, 10, size=args.events).tolist()
    records = [Row(key=k, value=v) for k, v in zip(keys, values)]
    kg_of = {k: assign_to_key_group(k, 128) for k in set(keys)}
    kgs = [kg_of[k] for k in keys]
    chunk = 16_384
    results = {}
    for name in ("per-record", "columnar", "arrow"):
        backend = HeapKeyedStateBackend("sum", range(0, 128))
        op = _KeyedReduce(RollingAggregation("sum", "value"))
        if name != "per-record":
            op = RollingAggregateOperator(op)
            fallback = 0 if name == "columnar" else fallback
        op.open(RuntimeContext(backend))
        out = 0
        if name == "arrow":  # Spark's Arrow columns as a keyed stage receives them, COLUMN_CHUNK rows at a time
            table = pa.RecordBatch.from_pydict({"key": pa.array(keys, pa.int64()), "value": pa.array(values, pa.int64())})
            kg_column = np.array(kgs, dtype=np.int32)
            row_cls = type(records[0])
            start = time.process_time()
            for lo in range(0, len(records), COLUMN_CHUNK):
                batch = table.slice(lo, COLUMN_CHUNK)
                outputs, _ = op.process_columns(backend, None, kg_column[lo:lo + COLUMN_CHUNK], [batch.column(0)],
                                                batch, row_cls, None)
                out += outputs.num_rows
            seconds = time.process_time() - start
            assert out == len(records)
            backend.current_key, backend.current_key_group = keys[-1], kgs[-1]
            results[name] = (len(records) / seconds, op._per_record._state.value())
            continue
        start = time.process_time()
        for lo in range(0, len(records), chunk):
            ks, gs, rs = keys[lo:lo + chunk], kgs[lo:lo + chunk], records[lo:lo + chunk]
            if name == "columnar":
                result = op.process_batch(backend, None, gs, ks, rs, None)
                if result is None:  # declined (keys barely repeat): the per-record path runs the chunk
                    fallback += len(rs)
                    for k, g, r in zip(ks, gs, rs):
                        backend.current_key = k
                        backend.current_key_group = g
                        for _ in op.process_element(r, None):
                            out += 1
                else:
                    out += len(result[0])
            else:
                for k, g, r in zip(ks, gs, rs):
                    backend.current_key = k
                    backend.current_key_group = g
                    for _ in op.process_element(r, None):
                        out += 1
        seconds = time.process_time() - start
        assert out == len(records)
        backend.current_key, backend.current_key_group = keys[-1], kgs[-1]
        results[name] = (len(records) / seconds, op._state.value() if name == "per-record" else op._per_record._state.value())
    assert results["per-record"][1] == results["columnar"][1] == results["arrow"][1]
    per, col, arrow = results["per-record"][0], results["columnar"][0], results["arrow"][0]
    print(f"rolling sum operator alone: {args.events:,} events, {args.keys:,} keys, chunks of {chunk:,}, heap state, "
          f"CPU time ({load()})")
    print(f"per-record  {per:>12,.0f} events/CPU-s\ncolumnar    {col:>12,.0f} events/CPU-s   "
          f"columnar / per-record = {col / per:.2f}x ({fallback:,} records declined to the per-record path)")
    print(f"arrow       {arrow:>12,.0f} events/CPU-s   arrow / per-record = {arrow / per:.2f}x (Arrow columns in and "
          f"out, chunks of {COLUMN_CHUNK:,})", flush=True)
    window_operator_only(records, keys, kgs, chunk)


def window_operator_only(records, keys, kgs, chunk) -> None:
    """Tumbling 1-minute windows, sum and count per key, the window operator alone: per-record
    ``process_element`` vs ``process_batch``, then every window fired as a task fires them (in bulk,
    ``fire_window_ends``, over the worker's timer service); same panes and results on both."""
    import numpy as np
    import pyarrow as pa

    from keyspan.common.types import named_row_class
    from keyspan.datastream.functions import TimeDomain
    from keyspan.datastream.window import WindowOperationDescriptor
    from keyspan.runtime.protocol import COLUMN_CHUNK
    from keyspan.runtime.operators.vectorized import FoldingWindowOperator, VectorizedWindowOperator
    from keyspan.runtime.operators.window import WindowOperator
    from keyspan.runtime.worker.task import FIRING_BATCH
    from keyspan.runtime.worker.timers import TimerService
    from keyspan.state.api import EVENT_TIME, AggregatingStateDescriptor, ListStateDescriptor
    from keyspan.state.heap import HeapKeyedStateBackend

    class Context:
        def __init__(self, backend, timers):
            self.backend, self.timers, self.ts = backend, timers, None
            self._backend, self._cell, self.firing = backend, [None], None  # as the task's on_timer context has them
            self._present_key = None

        def timer_service(self):
            return self.timers

        def get_current_key(self):
            return self.backend.current_key

        def timestamp(self):
            return self.ts

        def time_domain(self):
            return TimeDomain.EVENT_TIME

    class RuntimeContext:
        def __init__(self, backend):
            self.backend = backend

        def get_state(self, descriptor):
            return self.backend.get_state(descriptor)

        get_map_state = get_state

    def opened(cls, descriptor):
        """A window operator of class ``cls`` opened on a fresh heap backend: (backend, timers, ctx, operator)."""
        backend = HeapKeyedStateBackend("windows", range(0, 128))
        timers = TimerService(backend)
        op = cls(descriptor)
        op.open(RuntimeContext(backend))
        return backend, timers, Context(backend, timers), op

    stamps = [BASE + i * 600_000 // len(records) for i in range(len(records))]  # 10 minutes of event time
    descriptor = WindowOperationDescriptor(TumblingEventTimeWindows.of(Time.minutes(1)), EventTimeTrigger(), 0, None,
                                           AggregatingStateDescriptor("window-contents", SumAndCount("value")),
                                           None, True)
    rates, firing, fired = {}, {}, {}
    # the Arrow columns of a Spark source as the keyed stage receives them, COLUMN_CHUNK rows at a time
    table = pa.RecordBatch.from_pydict({"key": pa.array(keys, pa.int64()), "ts": pa.array(stamps, pa.int64()),
                                        "value": pa.array([r.value for r in records], pa.int64())})
    row_cls = named_row_class(("key", "ts", "value"))
    kg_column, ts_column = np.array(kgs, dtype=np.int32), np.array(stamps, dtype=np.int64)
    for name, cls in (("per-record", WindowOperator), ("columnar", VectorizedWindowOperator),
                      ("arrow", VectorizedWindowOperator)):
        backend, timers, ctx, op = opened(cls, descriptor)
        start = time.process_time()
        for lo in range(0, len(records), COLUMN_CHUNK if name == "arrow" else chunk):
            if name == "arrow":
                batch = table.slice(lo, COLUMN_CHUNK)
                assert op.process_columns(backend, ctx, kg_column[lo:lo + COLUMN_CHUNK], [batch.column(0)], batch,
                                          row_cls, ts_column[lo:lo + COLUMN_CHUNK]) == (None, [])
                continue
            ks, gs, rs, ts = keys[lo:lo + chunk], kgs[lo:lo + chunk], records[lo:lo + chunk], stamps[lo:lo + chunk]
            if name == "columnar":
                assert op.process_batch(backend, ctx, gs, ks, rs, ts)[2] == []
            else:
                for k, g, r, t in zip(ks, gs, rs, ts):
                    backend.current_key, backend.current_key_group, ctx.ts = k, g, t
                    for _ in op.process_element(r, ctx):
                        pass
        rates[name] = len(records) / (time.process_time() - start)
        results = []
        start = time.process_time()
        fire_window_ends = op.event_time_firing  # as a task fires them: in bulk where the operator can
        if fire_window_ends is not None:
            while fire_window_ends(timers, stamps[-1] + MINUTE, ctx, results.append, FIRING_BATCH):
                pass
        while (ts := timers.pop_due(EVENT_TIME, stamps[-1] + MINUTE)) is not None:
            results.extend(op.on_timer(ts, ctx))
        firing[name] = len(results) / (time.process_time() - start)
        fired[name] = sorted(results)
    assert fired["per-record"] == fired["columnar"] == fired["arrow"]
    per, col, arrow = rates["per-record"], rates["columnar"], rates["arrow"]
    print(f"tumbling 1-minute window sum and count, window operator alone ({len(fired['columnar']):,} windows):")
    print(f"per-record  {per:>12,.0f} events/CPU-s\ncolumnar    {col:>12,.0f} events/CPU-s   "
          f"columnar / per-record = {col / per:.2f}x\narrow       {arrow:>12,.0f} events/CPU-s   "
          f"arrow / per-record = {arrow / per:.2f}x (Arrow columns in, chunks of {COLUMN_CHUNK:,})")
    print(f"firing      {statistics.median(firing.values()):>12,.0f} windows/CPU-s (every window fired as a task fires "
          f"them, median of the three runs)", flush=True)
    yours = WindowOperationDescriptor(TumblingEventTimeWindows.of(Time.minutes(1)), EventTimeTrigger(), 0, None,
                                      AggregatingStateDescriptor("window-contents", SumCount()), None, True)
    kept = WindowOperationDescriptor(TumblingEventTimeWindows.of(Time.minutes(1)), EventTimeTrigger(), 0, None,
                                     ListStateDescriptor("window-contents"), None, False)
    big = COLUMN_CHUNK  # the chunks of a Spark source keyed in the JVM; an exchange's are of 16,384
    kept_fired = {}
    for name, descriptor, cls, size in (
            ("your function, per record", yours, WindowOperator, chunk),
            ("your function, folded", yours, FoldingWindowOperator, chunk),
            ("your function, folded", yours, FoldingWindowOperator, big),
            ("every record kept, per record", kept, WindowOperator, chunk),
            ("every record kept, folded", kept, FoldingWindowOperator, chunk),
            ("every record kept, folded", kept, FoldingWindowOperator, big)):
        backend, timers, ctx, op = opened(cls, descriptor)
        start = time.process_time()
        for lo in range(0, len(records), size):
            ks, gs, rs, ts = keys[lo:lo + size], kgs[lo:lo + size], records[lo:lo + size], stamps[lo:lo + size]
            if cls is FoldingWindowOperator:
                assert op.process_batch(backend, ctx, gs, ks, rs, ts)[2] == []
                continue
            for k, g, r, t in zip(ks, gs, rs, ts):
                backend.current_key, backend.current_key_group, ctx.ts = k, g, t
                for _ in op.process_element(r, ctx):
                    pass
        rate = len(records) / (time.process_time() - start)
        results = []
        while op.fire_window_ends(timers, stamps[-1] + MINUTE, ctx, results.append, FIRING_BATCH):
            pass
        if descriptor is yours:
            assert sorted(results) == fired["per-record"], name
        else:  # the windows' records as lists, in the order they were added
            assert kept_fired.setdefault("fired", results) == results, name
        if cls is WindowOperator:
            per_record_rate = rate
        what = "SumCount: plain Python add" if descriptor is yours else "a list of the window's records"
        print(f"{name:<30}{rate:>12,.0f} events/CPU-s   / per record = {rate / per_record_rate:.2f}x "
              f"({what}; chunks of {size:,})", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=10, help="epochs of the rolling sum (the windows read twice as many files, 2 per epoch)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--warmup-events", type=int, default=WARM_UP_EVENTS,
                    help="events of the warm-up run before the measured ones (set it to --events to measure a warm JVM)")
    ap.add_argument("--skip-sum", action="store_true")
    ap.add_argument("--skip-windows", action="store_true")
    ap.add_argument("--your-function", action="store_true",
                    help="also run the windows with your own plain-Python AggregateFunction (SumCount), folded "
                         "a chunk at a time and record by record")
    ap.add_argument("--any-worker", action="store_true",
                    help="also run the windows' fast path with set_python_worker_per_subtask(False): Spark hands each "
                         "task to any idle Python worker")
    ap.add_argument("--window-source", choices=("spark", "file"), default="spark",
                    help="the windows' source: from_spark over Spark's Parquet stream, or keyspan's FileSource")
    ap.add_argument("--operator-only", action="store_true", help="only the aggregation step, without Spark")
    ap.add_argument("--pyflink", action="store_true", help="also run the rolling sum as Flink SQL GROUP BY "
                    "(bench/pyflink_peer.py, in a venv with apache-flink)")
    ap.add_argument("--pyflink-python", default="/work/pyflink-venv/bin/python",
                    help="the python of a venv with apache-flink")
    ap.add_argument("--python-workers-over-unix-sockets", action="store_true",
                    help="spark.python.unix.domain.socket.enabled: the JVM talks to its Python workers over Unix "
                         "sockets instead of TCP, Spark's default (docs/deployment.md)")
    args = ap.parse_args()
    if args.operator_only:
        from keyspan.common.garbage import streaming_records

        with streaming_records():
            operator_only(args)
        return
    work = tempfile.mkdtemp(prefix="keyspan-fastagg-")
    try:
        spark = make_spark(cores=2, unix_sockets=args.python_workers_over_unix_sockets)
        if not args.skip_sum:
            rolling_sum(spark, args, work)
        if not args.skip_windows:
            windows(spark, args, work)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
