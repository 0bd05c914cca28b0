"""End-to-end latency of a keyed running sum, event landed → its result delivered after its
checkpoint committed, and where each epoch's time goes.

    python bench/latency.py [--intervals 100 1000 5000] [--rate 2000] [--file-every-ms 100] [--seconds 20] [--floor]
                            [--read-in-driver 5000 0] [--small-epochs-in-driver 0 5000]
                            [--python-workers-over-unix-sockets]

For each trigger interval a fresh unbounded job: ``FileSource.monitor_continuously()`` over JSON
lines → ``key_by(key)`` → a ``KeyedProcessFunction`` with ``ValueState`` (running sum) → a driver
sink that notes when each record's result arrives; a driver sink is handed an epoch's results only
after that epoch's checkpoint committed. A writer thread lands a file of ``rate × file-every-ms``
events every ``file-every-ms`` (dot-file, then rename). Latency per event = its result's arrival −
its file's landing, for every event of the measured span (after a warm-up).

The breakdown, per epoch (medians over the measured span): Spark's own work for the micro-batch
(``triggerExecution`` − ``addBatch``: offsets, source listing, planning, its offset and commit logs),
keyspan's tasks (the stages' Spark jobs up to the driver's collect of their reports), the commit
(the metadata transaction with the checkpoint's statistics, the checkpoint's ``_metadata.json``,
publishing, retention) and the delivery to driver sinks, which run while Spark logs the batch, and how
long the next epoch waited for them; and the wait between one batch's end and the next trigger.

``--floor`` then times Spark alone: the epoch's two Python stages and exchange as plain Spark jobs on
the same number of rows (also with their workers acknowledging the JVM's writes at once, as
keyspan's do, and as one such stage: an epoch whose input the driver read), and a streaming query
that does nothing at the last trigger, whose per-batch time is Spark's own bookkeeping (planning,
offset log, commit log).

``--python-workers-over-unix-sockets`` runs the session with the JVM talking to its Python workers
over Unix sockets instead of TCP, Spark's default (docs/deployment.md).
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.baselines import make_spark  # noqa: E402
from bench.windowed import Writer, pct, stop_job, wait_until  # noqa: E402
from keyspan.checkpoint.metadata import MetadataStore  # noqa: E402
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment  # noqa: E402
from keyspan.datastream.connectors.file_system import FileSource, StreamFormat  # noqa: E402
from keyspan.datastream.functions import SinkFunction  # noqa: E402
from keyspan.datastream.state import ValueStateDescriptor  # noqa: E402
from keyspan.runtime import options  # noqa: E402
from keyspan.runtime.session import query_settings  # noqa: E402
from keyspan.runtime.worker.acks import acknowledging  # noqa: E402


class RunningSum(KeyedProcessFunction):
    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_element(self, value, ctx):
        total = (self.total.value() or 0) + value.value
        self.total.update(total)
        yield value.key, value.ts, total


class Delivered(SinkFunction):
    """When each event's result reached the driver (after its checkpoint committed)."""

    def __init__(self):
        self.at = {}

    def invoke(self, value, context):
        self.at[(value[0], value[1])] = time.time()


def run(spark, interval_ms: int, args, work: str, in_driver: int = 0, read_in_driver: int = 5000) -> dict:
    base = os.path.join(work, f"lat-{interval_ms}-{in_driver}-{read_in_driver}")
    folder = os.path.join(base, "in")
    os.makedirs(folder)
    options.install(options.RunOptions(workdir=os.path.join(base, ".keyspan"), fresh=True))
    job = f"latency-{interval_ms}"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(interval_ms)
    env.set_small_epochs_in_driver(in_driver)
    env.set_small_epochs_read_in_driver(read_in_driver)
    source = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), folder).monitor_continuously().build()
    sink = Delivered()
    (env.from_source(source, None, "events").uid("events").key_by(lambda r: r.key)
        .process(RunningSum()).uid("sum").add_sink(sink))
    writer = Writer(folder, args.rate, args.file_every_ms, args.keys, args.warmup + args.seconds + 1)
    writer.write_file()  # the job's first (slow) epoch is over before measuring
    store = MetadataStore(options.current().metadata())
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", env.execute(job)), daemon=True)
    thread.start()
    if not wait_until(lambda: store.list_checkpoints(job) and (store.get_job(job) or {}).get("api_url"), 180):
        raise RuntimeError(f"{job}: no checkpoint within 180 s")
    writer.start()
    writer.join()
    t0, t1 = writer.started + args.warmup, writer.started + args.warmup + args.seconds
    wanted = [(landed, keys, ts) for landed, keys, ts in writer.landed if t0 <= landed <= t1]
    wait_until(lambda: all((int(k), int(t)) in sink.at for _, keys, ts in wanted[-3:] for k, t in zip(keys, ts)), 60)
    stop_job(job)
    thread.join(120)
    result = outcome.get("result")
    lat, missing = [], 0
    for landed, keys, ts in wanted:
        for k, t in zip(keys.tolist(), ts.tolist()):
            at = sink.at.get((k, t))
            if at is None:
                missing += 1
            else:
                lat.append(at - landed)
    phases = [p for p in (result.epoch_phases if result else []) if t0 <= p["start"] <= t1]
    spark_ms = [d for d in (result.spark_progress if result else []) if d.get("addBatch") is not None]
    starts = [p["start"] for p in phases]
    return {"latency": np.array(lat) * 1000, "missing": missing, "events": sum(len(k) for _, k, _ in wanted),
            "phases": phases, "spark": spark_ms[-len(phases):] if phases else [],
            "apart": statistics.median(np.diff(starts)) if len(starts) > 2 else float("nan")}


def breakdown(r: dict) -> str:
    med = lambda xs: statistics.median(xs) * 1000 if xs else float("nan")  # noqa: E731
    ph = r["phases"]
    wait = lambda p: p.get("commit.wait", 0)  # noqa: E731 — waiting for the previous epoch's commit
    commit = [f"{k.split('.')[1]} {med([p[k] for p in ph if k in p]):.0f}" for k in
              ("commit.sync_files", "commit.metadata", "commit.checkpoint_file", "commit.publish", "commit.retention")]
    spark = r["spark"]
    own = [(d.get("triggerExecution", 0) - d.get("addBatch", 0)) / 1000 for d in spark]
    detail = {k: med([d.get(k, 0) / 1000 for d in spark]) for k in ("latestOffset", "queryPlanning", "walCommit",
                                                                       "commitOffsets", "getBatch")}
    epoch = med([wait(p) + p["tasks"] for p in ph])
    tasks = [f"{k.split('.')[1]} {med([p[k] for p in ph if k in p]):.0f}" for k in ("tasks.restore", "tasks.busy", "tasks.snapshot")]
    # checkpoint overhead an epoch pays: the slowest task's state-file writes plus the wait for the
    # previous commit (the commit itself runs while Spark logs the batch and plans the next)
    share = statistics.median([(p.get("tasks.snapshot", 0) + wait(p)) / (wait(p) + p["tasks"])
                               for p in ph]) if ph else 0
    driver = sum(1 for p in ph if p.get("tasks.in_driver"))
    read = sum(1 for p in ph if p.get("tasks.read_in_driver"))
    return (f"    {driver} of {len(ph)} epochs ran in the driver, {read} read their input there; per epoch (median ms): keyspan epoch {epoch:.0f} = previous commit awaited "
            f"{med([wait(p) for p in ph]):.0f}, tasks {med([p['tasks'] for p in ph]):.0f} "
            f"[{', '.join(tasks)}]; then, while Spark logs the batch: commit {med([p['commit'] for p in ph]):.0f} "
            f"[{', '.join(commit)}], deliver {med([p['deliver'] for p in ph]):.0f}\n"
            f"    Spark's own per batch {med(own):.0f} ms ("
            + ", ".join(f"{k} {v:.0f}" for k, v in detail.items())
            + f"); batches start {r['apart'] * 1000:.0f} ms apart; checkpointing (state files + commit awaited) "
            f"is {share:.0%} of an epoch")


def _identity(batches):
    yield from batches


_identity_acknowledging = acknowledging(_identity)  # as keyspan's tasks acknowledge the JVM's writes


ACKNOWLEDGING = "the same, workers acknowledging at once"
ONE_ACKNOWLEDGING = "one Python stage, its workers acknowledging at once"


def spark_floor(spark, rows: int, repeats: int = 60) -> dict:
    """What Spark itself takes, warm, for an epoch's shape with no keyspan in it: the same rows through
    a JVM-only exchange, through one Python ``mapInArrow`` stage, and through two with an exchange
    between them (keyspan's source stage, key-group exchange and keyed stage), and the last with its
    workers acknowledging at once, as keyspan's do (docs/benchmarks.md); and one stage acknowledging at
    once, the shape of an epoch whose input the driver read. Median of the last half."""
    df = spark.range(rows, numPartitions=2).selectExpr("id", "cast(id % 2 as int) as sub")
    shapes = {
        "JVM only, with an exchange": lambda: df.repartition(2, "sub").collect(),
        "one Python stage": lambda: df.mapInArrow(_identity, df.schema).collect(),
        "two Python stages and an exchange": lambda: df.mapInArrow(_identity, df.schema).repartitionById(2, "sub")
        .mapInArrow(_identity, df.schema).collect(),
        ACKNOWLEDGING: lambda: df.mapInArrow(_identity_acknowledging, df.schema).repartitionById(2, "sub")
        .mapInArrow(_identity_acknowledging, df.schema).collect(),
        ONE_ACKNOWLEDGING: lambda: df.mapInArrow(_identity_acknowledging, df.schema).collect(),
    }
    floor = {}
    for name, job in shapes.items():
        took = []
        for _ in range(repeats):
            started = time.perf_counter()
            job()
            took.append(time.perf_counter() - started)
        floor[name] = statistics.median(took[repeats // 2:]) * 1000
    return floor


_SPARK_STEPS = ("queryPlanning", "walCommit", "addBatch", "commitOffsets")


def spark_empty_batches(spark, interval_ms: int, rate: int, work: str, seconds: float = 12) -> dict:
    """Spark's own part of a micro-batch with nothing in it: a rate source at the same events/s into a
    ``foreachBatch`` that returns at once, its offset and commit logs written as keyspan's are
    (``query_settings``), at the same trigger. What no change in keyspan can take out of "Spark's own
    per batch". Medians, first batches left out."""
    with query_settings(spark, local_logs=True):  # a local temp folder, as keyspan's own runs here
        query = (spark.readStream.format("rate").option("rowsPerSecond", rate).load().writeStream
                 .foreachBatch(lambda df, batch_id: None).trigger(processingTime=f"{interval_ms} milliseconds")
                 .option("checkpointLocation", os.path.join(work, f"empty-{interval_ms}")).start())
    time.sleep(seconds)
    query.stop()
    batches = [dict(p.durationMs) for p in query.recentProgress][3:]
    return {k: statistics.median(b.get(k, 0) for b in batches) for k in ("triggerExecution", *_SPARK_STEPS)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--intervals", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--rate", type=int, default=2000, help="events per second")
    ap.add_argument("--file-every-ms", type=int, default=100)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20, help="measured span per interval")
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--small-epochs-in-driver", type=int, nargs="+", default=[0], metavar="RECORDS",
                    help="run each trigger with env.set_small_epochs_in_driver(RECORDS), for each value given "
                         "(0: every epoch as Spark jobs)")
    ap.add_argument("--floor", action="store_true",
                    help="then time Spark alone on an epoch's shape (same rows, no keyspan) and compare")
    ap.add_argument("--read-in-driver", type=int, nargs="+", default=[5000], metavar="RECORDS",
                    help="run each trigger with env.set_small_epochs_read_in_driver(RECORDS), for each value given "
                         "(0: the driver never reads an epoch's input; 5,000 is the default)")
    ap.add_argument("--python-workers-over-unix-sockets", action="store_true",
                    help="spark.python.unix.domain.socket.enabled: the JVM talks to its Python workers over Unix "
                         "sockets instead of TCP, Spark's default (docs/deployment.md)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="keyspan-latency-")
    try:
        spark = make_spark(cores=2, unix_sockets=args.python_workers_over_unix_sockets)
        print(f"{args.rate:,} events/s over {args.keys:,} keys, a file every {args.file_every_ms} ms; running sum "
              f"per key, results delivered after each checkpoint commits; {args.seconds:.0f} s measured after "
              f"{args.warmup:.0f} s warm-up", flush=True)
        for interval in args.intervals:
            for in_driver, read_in_driver in itertools.product(args.small_epochs_in_driver, args.read_in_driver):
                r = run(spark, interval, args, work, in_driver, read_in_driver)
                mode = (f", epochs of <= {in_driver:,} records in the driver" if in_driver else "") + (
                    f", input of <= {read_in_driver:,} records read in the driver" if read_in_driver
                    else ", no input read in the driver")
                print(f"trigger {interval:>5} ms{mode}: event landed -> result {pct(r['latency'])}  "
                      f"({r['events']:,} events, {r['missing']} not delivered)\n{breakdown(r)}", flush=True)
        if args.floor:  # against the last trigger's epochs
            tasks = statistics.median(p["tasks"] for p in r["phases"]) * 1000 if r["phases"] else float("nan")
            rows = max(1, r["events"] // max(1, len(r["phases"])))  # an epoch's records
            floor = spark_floor(spark, rows)
            print(f"Spark alone on an epoch's shape ({rows:,} rows, warm, median ms): "
                  + "; ".join(f"{name} {ms:.0f}" for name, ms in floor.items())
                  + f"\n    keyspan's tasks at the last trigger took {tasks:.0f} ms: "
                  f"{tasks / floor['two Python stages and an exchange']:.2f}x Spark alone on the same shape, "
                  f"{tasks / floor[ACKNOWLEDGING]:.2f}x with its workers acknowledging at once, "
                  f"{tasks / floor[ONE_ACKNOWLEDGING]:.2f}x one stage acknowledging at once", flush=True)
            empty = spark_empty_batches(spark, args.intervals[-1], args.rate, work)
            print(f"Spark alone, a query that does nothing at the {args.intervals[-1]} ms trigger: "
                  f"{empty['triggerExecution']:.0f} ms per batch ("
                  + ", ".join(f"{k} {empty[k]:.0f}" for k in _SPARK_STEPS) + ")", flush=True)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
