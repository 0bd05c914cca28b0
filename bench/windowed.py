"""Event-time windows: aggregation throughput against Spark's own windowed aggregation, and the
end-to-end latency of window results at trigger intervals of 100 ms, 1 s and 5 s.

    python bench/windowed.py [--events 1000000] [--keys 10000] [--files 20] [--files-per-epoch 2]
                             [--repeats 3] [--source file|spark] [--spark-rocksdb]
                             [--intervals 100 1000 5000] [--latency-seconds 20] [--rate 2000]
                             [--file-every-ms 500] [--latency-keys 1000] [--window-ms 1000]
                             [--bound-ms 100] [--skip-throughput] [--skip-latency] [--skip-peer-latency]

Throughput. One process, one SparkSession, the same Parquet events (key, ts in epoch ms, value;
keys uniform over ``--keys``, event time rising over 10 minutes with up to 2 s of disorder) read
``--files-per-epoch`` files per micro-batch, to completion (available-now), by:

* keyspan: ``FileSource(parquet) + WatermarkStrategy.for_bounded_out_of_orderness(5 s) →
  key_by(key) → window(TumblingEventTimeWindows.of(Time.minutes(1))) → aggregate(sum and count,
  WindowFunction adding key and window start)``, a checkpoint every epoch; every window result is
  delivered to a driver sink after its checkpoint commits and checked against the expected sums
  and counts. (``--source spark``: ``from_spark`` over the peer's own Parquet stream +
  ``assign_timestamps_and_watermarks`` instead; its watermark does not reach Long.MAX at the end
  of input, so like Spark it leaves the last minute's windows unfired.)
* Spark: ``withWatermark("event_time", "5 seconds").groupBy(window("event_time", "1 minute"),
  "key").agg(sum, count)`` in append mode to the noop sink, with Spark's default (HDFS-backed)
  state store (and with RocksDB: ``--spark-rocksdb``). Spark never advances the watermark at the
  end of input, so its last windows are not emitted; the number of rows it emits is checked
  against that rule.

Latency. For each trigger interval: a fresh unbounded keyspan job (``FileSource...
monitor_continuously()``, ``env.enable_checkpointing(interval)``, watermark bound 100 ms, tumbling
1 s windows per key, sum and count) while a writer thread lands a JSON-lines file every
``--file-every-ms`` (written as a dot-file, then renamed into the folder) with ``--rate`` events/s
stamped with the wall clock. A driver sink records when each window result is delivered (after its
checkpoint commits). Reported: per event, its file landed → its window's result delivered (this
includes waiting for the window to end); per window, the window's end (wall clock: events carry the
time they were written) → its result delivered. The same for Spark's windowed aggregation over the
same kind of folder (file source, processingTime trigger, withWatermark 100 ms, append mode,
foreachBatch sink timing each batch's results once collected, i.e. just before Spark commits the
batch). Windows ending in the measured span only, after a warm-up.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.baselines import make_spark  # noqa: E402
from keyspan.common import Duration, Time, WatermarkStrategy  # noqa: E402
from keyspan.datastream import (  # noqa: E402
    AggregateFunction,
    SinkFunction,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    WindowFunction,
)
from keyspan.datastream.connectors.file_system import FileSource, StreamFormat  # noqa: E402
from keyspan.runtime import options  # noqa: E402

BASE_MS = 1_795_132_800_000  # 2026-11-20T00:00:00Z
MINUTE = 60_000


# --- throughput ---------------------------------------------------------------------------------------

def generate(directory: str, n_events: int, n_keys: int, n_files: int, span_ms: int = 10 * MINUTE,
             disorder_ms: int = 2_000, seed: int = 5) -> dict:
    """Parquet files ``part-NNNNN.parquet`` (key long, ts long ms, value long), event time rising
    over ``span_ms`` with up to ``disorder_ms`` of disorder. Returns the expected (key, window start)
    → (sum, count) for 1-minute windows."""
    rng = np.random.default_rng(seed)
    os.makedirs(directory)
    keys = rng.integers(0, n_keys, size=n_events, dtype=np.int64)
    ts = BASE_MS + (np.arange(n_events, dtype=np.int64) * span_ms) // n_events \
        - rng.integers(0, disorder_ms + 1, size=n_events, dtype=np.int64)
    values = rng.integers(1, 10, size=n_events, dtype=np.int64)
    bounds = np.linspace(0, n_events, n_files + 1).astype(np.int64)
    # Spark's file source reads files in order of modification time (milliseconds). Files written
    # within the same millisecond could be read out of order, and a later file read first makes
    # the earlier one's events late: they would be dropped, and the results would not be the
    # expected ones. Each file gets its own second.
    first_mtime_ns = time.time_ns() - n_files * 1_000_000_000
    for i in range(n_files):
        lo, hi = bounds[i], bounds[i + 1]
        tmp = os.path.join(directory, f".tmp-{i:05d}.parquet")
        pq.write_table(pa.table({"key": keys[lo:hi], "ts": ts[lo:hi], "value": values[lo:hi]}), tmp)
        path = os.path.join(directory, f"part-{i:05d}.parquet")
        os.replace(tmp, path)
        mtime = first_mtime_ns + i * 1_000_000_000
        os.utime(path, ns=(mtime, mtime))
    table = pa.table({"key": keys, "start": ts - (ts - BASE_MS) % MINUTE, "value": values})
    agg = table.group_by(["key", "start"]).aggregate([("value", "sum"), ("value", "count")])
    expected = {(k, s): (v, c) for k, s, v, c in zip(agg.column("key").to_pylist(), agg.column("start").to_pylist(),
                                                      agg.column("value_sum").to_pylist(),
                                                      agg.column("value_count").to_pylist())}
    return {"expected": expected, "max_ts": int(ts.max())}


class SumCount(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return accumulator[0] + value.value, accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator

    def merge(self, acc_a, acc_b):
        return acc_a[0] + acc_b[0], acc_a[1] + acc_b[1]


class KeyAndWindow(WindowFunction):
    def apply(self, key, window, inputs):
        for total, count in inputs:
            yield key, window.start, total, count


class Results(SinkFunction):
    def __init__(self):
        self.windows = {}

    def invoke(self, value, context):
        self.windows[(value[0], value[1])] = (value[2], value[3])


def differences(got: dict, expected: dict) -> str:
    """What a run's window results lack or hold beyond the expected ones, for an assertion message."""
    missing = [w for w in expected if w not in got]
    extra = [w for w in got if w not in expected]
    wrong = [(w, got[w], expected[w]) for w in expected if w in got and got[w] != expected[w]]
    return (f"{len(missing)} windows missing (e.g. {missing[:3]}), {len(extra)} unexpected (e.g. {extra[:3]}), "
            f"{len(wrong)} with other sums or counts (got, expected: {wrong[:3]})")


def ts_of(record, _):
    return record.ts


def run_keyspan(spark, directory: str, workdir: str, job: str, source: str = "file", per_epoch: int = 1) -> dict:
    """``source="file"``: keyspan's FileSource (Parquet read by pyarrow in the source task) with the
    watermark strategy at the source. ``"spark"``: ``from_spark`` over Spark's Parquet stream (the
    peer's reader) and ``assign_timestamps_and_watermarks``."""
    options.install(options.RunOptions(workdir=workdir, fresh=True, rest_api=False))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(int(spark.conf.get("spark.sql.shuffle.partitions")))
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5)).with_timestamp_assigner(ts_of)
    if source == "file":
        files = FileSource.for_record_stream_format(StreamFormat.parquet_format(), directory) \
            .set_max_files_per_epoch(per_epoch).build()
        timed = env.from_source(files, strategy, "events")
    else:
        events = spark.readStream.schema("key long, ts long, value long") \
            .option("maxFilesPerTrigger", per_epoch).parquet(directory)
        timed = env.from_spark(events, bounded=True).assign_timestamps_and_watermarks(strategy)
    sink = Results()
    (timed.key_by(lambda r: r.key)
        .window(TumblingEventTimeWindows.of(Time.minutes(1)))
        .aggregate(SumCount(), KeyAndWindow()).uid("windows")
        .add_sink(sink))
    start = time.perf_counter()
    result = env.execute(job)
    seconds = time.perf_counter() - start
    return {"events": result.records, "seconds": seconds, "rate": result.records / seconds, "epochs": result.epochs,
            "windows": sink.windows}


def run_spark(spark, directory: str, checkpoint: str, provider: str | None, per_epoch: int = 1) -> dict:
    from pyspark.sql import functions as F

    if provider:
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    events = spark.readStream.schema("key long, ts long, value long").option("maxFilesPerTrigger", per_epoch) \
        .parquet(directory)
    out = (events.withColumn("event_time", F.timestamp_millis("ts"))
           .withWatermark("event_time", "5 seconds")
           .groupBy(F.window("event_time", "1 minute"), "key")
           .agg(F.sum("value").alias("total"), F.count(F.lit(1)).alias("n")))
    start = time.perf_counter()
    query = out.writeStream.format("noop").outputMode("append").option("checkpointLocation", checkpoint) \
        .trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - start
    progress = query.recentProgress
    events_in = sum(p.numInputRows for p in progress)
    rows_out = sum(max(0, p.sink.numOutputRows) for p in progress)
    return {"events": events_in, "seconds": seconds, "rate": events_in / seconds, "rows_out": rows_out,
            "batches": sum(1 for p in progress if p.numInputRows > 0)}


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def throughput(spark, args, work: str) -> None:
    data_dir = os.path.join(work, "events")
    t0 = time.perf_counter()
    data = generate(data_dir, args.events, args.keys, args.files)
    expected = data["expected"]
    print(f"generated {args.events:,} events, {args.keys:,} keys, {len(expected):,} (key, minute) windows, "
          f"{args.files} files in {time.perf_counter() - t0:.1f} s", flush=True)
    # Spark emits a window once its watermark (max event time - 5 s, as of the previous batch)
    # passes the window's end; at the end of input the watermark stays where the data left it
    spark_wm = data["max_ts"] - 5_000
    emitted_at_end = {w: v for w, v in expected.items() if w[1] + MINUTE <= spark_wm}
    spark_expected = len(emitted_at_end)
    warm = os.path.join(work, "warm")
    generate(warm, 20_000, 1_000, 2, seed=1)
    run_keyspan(spark, warm, os.path.join(work, "ks-warm"), "windowed-warm")
    peers = [("HDFS", HDFS)] + ([("RocksDB", ROCKSDB)] if args.spark_rocksdb else [])
    for name, provider in peers:
        run_spark(spark, warm, os.path.join(work, f"sp-warm-{name}"), provider)
    ks, spark_rates = [], {name: [] for name, _ in peers}
    for i in range(args.repeats):
        r = run_keyspan(spark, data_dir, os.path.join(work, f"ks-{i}"), f"windowed-{i}", args.source,
                        args.files_per_epoch)
        want = expected if args.source == "file" else emitted_at_end
        assert r["windows"] == want, \
            f"keyspan's window results differ from the expected sums: {differences(r['windows'], want)}"
        ks.append(r["rate"])
        line = f"run {i}: keyspan {r['rate']:,.0f} ev/s ({r['epochs']} epochs, {len(r['windows']):,} windows verified)"
        for name, provider in peers:
            p = run_spark(spark, data_dir, os.path.join(work, f"sp-{name}-{i}"), provider, args.files_per_epoch)
            assert p["events"] == args.events and p["rows_out"] == spark_expected, p
            spark_rates[name].append(p["rate"])
            line += f"  Spark {name} state {p['rate']:,.0f} ev/s ({p['rows_out']:,} windows emitted, as expected)"
        print(line, flush=True)
    k = statistics.median(ks)
    print(f"\nthroughput: {args.events:,} events, {args.keys:,} keys, tumbling 1-minute event-time windows, "
          f"{args.files // args.files_per_epoch} epochs of {args.files_per_epoch} files, parallelism 2 "
          f"(median of {args.repeats})")
    print(f"keyspan                                  {k:>10,.0f} events/s")
    for name, rates in spark_rates.items():
        p = statistics.median(rates)
        print(f"Spark groupBy(window, key), {name + ' state':<13}{p:>10,.0f} events/s   keyspan / Spark = {k / p:.2f}x",
              flush=True)


# --- latency ------------------------------------------------------------------------------------------

class Writer(threading.Thread):
    """Lands a JSON-lines file of ``rate × period`` events every ``period_ms`` in ``folder`` (written
    as a dot-file, then renamed: both file sources ignore dot-files), events stamped with the wall
    clock minus up to 50 ms. Logs every event's (key, ts) with the time its file landed."""

    def __init__(self, folder: str, rate: int, period_ms: int, keys: int, seconds: float, seed: int = 3):
        super().__init__(daemon=True)
        self.folder, self.period, self.keys, self.seconds = folder, period_ms / 1000, keys, seconds
        self.per_file = max(1, round(rate * period_ms / 1000))
        self.rng = np.random.default_rng(seed)
        self.landed: list[tuple[float, np.ndarray, np.ndarray]] = []  # (landing time, keys, ts)
        self.started = None
        self.seq = 0

    def write_file(self) -> None:
        now_ms = int(time.time() * 1000)
        keys = self.rng.integers(0, self.keys, size=self.per_file)
        ts = now_ms - self.rng.integers(0, 51, size=self.per_file)
        values = self.rng.integers(1, 10, size=self.per_file)
        name = f"{self.seq:08d}.jsonl"
        tmp = os.path.join(self.folder, "." + name)
        with open(tmp, "w") as f:
            f.write("".join(f'{{"key": {k}, "ts": {t}, "value": {v}}}\n' for k, t, v in zip(keys, ts, values)))
        os.replace(tmp, os.path.join(self.folder, name))
        self.landed.append((time.time(), keys, ts))
        self.seq += 1

    def run(self):
        self.started = time.time()
        i = 0
        while time.time() < self.started + self.seconds:
            i += 1
            self.write_file()
            delay = self.started + i * self.period - time.time()
            if delay > 0:
                time.sleep(delay)


class Delivered(SinkFunction):
    """When each window result reached the driver (after its checkpoint committed)."""

    def __init__(self):
        self.at = {}

    def invoke(self, value, context):
        self.at[(value[0], value[1])] = time.time()


def latencies(writer: Writer, delivered: dict, window_ms: int, first_end: float, last_end: float) -> dict:
    """Per event: its file landed → its window's result delivered. Per window: the window's end →
    its result delivered (events are stamped with the wall clock, so a window's end is the moment
    its last event can land, give or take the 50 ms jitter). Only windows ending in [first_end,
    last_end] (wall-clock seconds) count."""
    per_event, windows = [], set()
    for landed, keys, ts in writer.landed:
        starts = ts - ts % window_ms
        for k, s in zip(keys.tolist(), starts.tolist()):
            if not (first_end <= (s + window_ms) / 1000 <= last_end):
                continue
            windows.add((k, s))
            if (k, s) in delivered:
                per_event.append(delivered[(k, s)] - landed)
    per_window = [delivered[w] - (w[1] + window_ms) / 1000 for w in windows if w in delivered]
    return {"event": np.array(per_event) * 1000, "window": np.array(per_window) * 1000, "windows": len(windows),
            "missing": sum(1 for w in windows if w not in delivered)}


def pct(a: np.ndarray) -> str:
    if len(a) == 0:
        return "n/a"
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return f"p50 {p50:>6,.0f}  p95 {p95:>6,.0f}  p99 {p99:>6,.0f} ms"


def stop_job(job_id: str) -> None:
    import httpx

    from keyspan.checkpoint.metadata import MetadataStore

    from keyspan.rest.auth import auth_headers

    api = MetadataStore(options.current().metadata()).get_job(job_id)["api_url"]
    httpx.post(f"{api}/jobs/{job_id}/stop", json={"savepoint": False}, timeout=30,
               headers=auth_headers(options.current().workdir)).raise_for_status()


def wait_until(condition, timeout: float, step: float = 0.1) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


def latency_keyspan(spark, interval_ms: int, args, work: str) -> dict:
    from keyspan.checkpoint.metadata import MetadataStore

    folder = os.path.join(work, f"ks-lat-{interval_ms}", "in")
    os.makedirs(folder)
    workdir = os.path.join(work, f"ks-lat-{interval_ms}", ".keyspan")
    options.install(options.RunOptions(workdir=workdir, fresh=True))
    job = f"windowed-latency-{interval_ms}"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(interval_ms)
    source = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), folder) \
        .monitor_continuously().build()
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(args.bound_ms)) \
        .with_timestamp_assigner(ts_of)
    sink = Delivered()
    (env.from_source(source, strategy, "events").uid("events")
        .key_by(lambda r: r.key)
        .window(TumblingEventTimeWindows.of(Time.milliseconds(args.window_ms)))
        .aggregate(SumCount(), KeyAndWindow()).uid("windows")
        .add_sink(sink))
    writer = Writer(folder, args.rate, args.file_every_ms, args.latency_keys, args.warmup + args.latency_seconds
                    + tail_seconds(interval_ms))
    writer.write_file()  # one file first, so the job's first (slow) epoch is over before measuring
    store = MetadataStore(options.current().metadata())
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", env.execute(job)), daemon=True)
    thread.start()
    if not wait_until(lambda: store.list_checkpoints(job) and (store.get_job(job) or {}).get("api_url"), 180):
        raise RuntimeError(f"{job}: no checkpoint within 180 s")
    return measure(writer, sink.at, interval_ms, args, lambda: stop_job(job), thread,
                   lambda t0, t1: [(c["created_at"], c["records"]) for c in store.list_checkpoints(job)
                                   if t0 <= c["created_at"] <= t1])


def tail_seconds(interval_ms: int) -> float:
    return max(3.0, 2 * interval_ms / 1000 + 2)


def measure(writer, delivered, interval_ms, args, stop, thread, commit_times) -> dict:
    writer.start()
    first_end = writer.started + args.warmup
    last_end = writer.started + args.warmup + args.latency_seconds
    writer.join()
    # every window ending in the measured span has its data and a later event: wait for its result
    wanted = set()
    for _, keys, ts in writer.landed:
        for k, s in zip(keys.tolist(), (ts - ts % args.window_ms).tolist()):
            if first_end <= (s + args.window_ms) / 1000 <= last_end:
                wanted.add((k, s))
    wait_until(lambda: wanted <= delivered.keys(), 60)
    stop()
    if thread is not None:
        thread.join(120)
    out = latencies(writer, delivered, args.window_ms, first_end, last_end)
    commits = commit_times(first_end, last_end)
    out["epoch_s"] = statistics.median(np.diff([t for t, _ in commits])) if len(commits) > 2 else float("nan")
    out["epoch_records"] = statistics.median([n for _, n in commits]) if commits else 0
    out["events"] = sum(len(k) for _, k, _ in writer.landed)
    return out


def latency_spark(spark, interval_ms: int, args, work: str) -> dict:
    from pyspark.sql import functions as F

    folder = os.path.join(work, f"sp-lat-{interval_ms}", "in")
    os.makedirs(folder)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", HDFS)
    delivered = {}

    def sink(batch_df, batch_id):
        rows = batch_df.select(F.unix_millis(F.col("window.start")).alias("s"), "key").collect()
        now = time.time()
        for r in rows:
            delivered[(r["key"], r["s"])] = now

    events = spark.readStream.schema("key long, ts long, value long").json(folder)
    out = (events.withColumn("event_time", F.timestamp_millis("ts"))
           .withWatermark("event_time", f"{args.bound_ms} milliseconds")
           .groupBy(F.window("event_time", f"{args.window_ms} milliseconds"), "key")
           .agg(F.sum("value").alias("total"), F.count(F.lit(1)).alias("n")))
    writer = Writer(folder, args.rate, args.file_every_ms, args.latency_keys, args.warmup + args.latency_seconds
                    + tail_seconds(interval_ms))
    writer.write_file()
    query = out.writeStream.foreachBatch(sink).outputMode("append") \
        .option("checkpointLocation", os.path.join(work, f"sp-lat-{interval_ms}", "ckpt")) \
        .trigger(processingTime=f"{interval_ms} milliseconds").start()
    if not wait_until(lambda: query.lastProgress is not None, 180):
        raise RuntimeError("Spark query made no progress within 180 s")

    def commit_times(t0, t1):
        ends = []
        for p in query.recentProgress:
            end = datetime_seconds(p.timestamp) + p.durationMs.get("triggerExecution", 0) / 1000
            if t0 <= end <= t1:
                ends.append((end, p.numInputRows))
        return sorted(ends)

    def stop():  # between batches: stopping a running batch makes Spark log errors
        wait_until(lambda: not query.status["isTriggerActive"], 10, 0.02)
        query.stop()

    return measure(writer, delivered, interval_ms, args, stop, None, commit_times)


def datetime_seconds(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def latency(spark, args, work: str) -> None:
    print(f"\nlatency: {args.rate:,} events/s over {args.latency_keys:,} keys, a file every {args.file_every_ms} ms, "
          f"tumbling {args.window_ms} ms windows, bound {args.bound_ms} ms, {args.latency_seconds} s measured "
          f"per run after {args.warmup} s of warm-up", flush=True)
    rows = []
    for interval in args.intervals:
        engines = [("keyspan", latency_keyspan)] + ([] if args.skip_peer_latency else [("Spark", latency_spark)])
        for name, fn in engines:
            r = fn(spark, interval, args, work)
            rows.append((interval, name, r))
            print(f"trigger {interval:>5} ms  {name:<8} event landed -> window result: {pct(r['event'])}   "
                  f"window end -> result: {pct(r['window'])}   ({r['windows']:,} windows, "
                  f"{r['missing']} not delivered; epochs: median {r['epoch_s'] * 1000:,.0f} ms apart, "
                  f"{r['epoch_records']:,.0f} records)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--files-per-epoch", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--source", choices=["file", "spark"], default="file")
    ap.add_argument("--spark-rocksdb", action="store_true", help="also run the Spark peer with RocksDB state")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-peer-latency", action="store_true")
    ap.add_argument("--intervals", type=int, nargs="+", default=[100, 1000, 5000], help="trigger intervals, ms")
    ap.add_argument("--latency-seconds", type=float, default=20, help="measured span per run")
    ap.add_argument("--warmup", type=float, default=3, help="seconds of steady input before measuring")
    ap.add_argument("--rate", type=int, default=2000, help="events/s written during the latency runs")
    ap.add_argument("--latency-keys", type=int, default=1000)
    ap.add_argument("--file-every-ms", type=int, default=500)
    ap.add_argument("--window-ms", type=int, default=1000)
    ap.add_argument("--bound-ms", type=int, default=100)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="keyspan-windowed-")
    try:
        spark = make_spark(cores=2)
        if not args.skip_throughput:
            throughput(spark, args, work)
        if not args.skip_latency:
            latency(spark, args, work)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
