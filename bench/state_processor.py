"""State Processor API: dump a savepoint's keyed state to Parquet and bootstrap it back, with the
bytes each Spark task read; compared with Spark's own ``format("statestore")`` reader on a
``transformWithStateInPandas`` query holding the same keys and values, in the same run.

    python bench/state_processor.py --size-mb 1024 [--value-bytes 1000] [--tasks 8]

Steps (each timed):
1. bootstrap: a savepoint with one value state of ``size`` bytes (keys ``k<i>``, string values: a hash repeated to the value size)
   from a generated DataFrame (``OperatorTransformation...key_by("key").transform(...)``);
2. dump: ``SavepointReader.read_keyed_state`` → Parquet, with the bytes each read task read
   (a task reads only its key-group range of each state file: ≈ total / tasks);
3. bootstrap back: the Parquet dump → a new savepoint (checked: same keys and values);
4. Spark: a ``transformWithStateInPandas`` query stores the same keys/values in a ValueState (RocksDB
   state store), then ``spark.read.format("statestore")`` reads them back — the read is timed.
Needs the ``bench`` extra (grpcio, protobuf) for step 4.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.baselines import require_transform_with_state  # noqa: E402
from keyspan.common import Types  # noqa: E402
from keyspan.state_processor import (  # noqa: E402
    ColumnBootstrapFunction,
    OperatorTransformation,
    SavepointReader,
    SavepointWriter,
)

MB = 1 << 20


def _size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _spark(cores: int, partitions: int):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    return (SparkSession.builder.master(f"local[{cores}]").appName("state-processor-bench")
            .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(partitions))
            .config("spark.sql.streaming.stateStore.providerClass",
                    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
            .getOrCreate())


def _storing_processor():
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class Store(StatefulProcessor):
        """Keeps each key's value in ValueState ``v`` (what the keyspan savepoint holds)."""

        def init(self, handle):
            self.v = handle.getValueState("v", "value string")

        def handleInputRows(self, key, rows, timerValues):
            for pdf in rows:
                self.v.update((pdf["value"].iloc[-1],))
            yield pd.DataFrame({"key": [key[0]]})

        def close(self):
            pass

    return Store


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024, help="keyed state to write and read (default 1024)")
    ap.add_argument("--value-bytes", type=int, default=1000)
    ap.add_argument("--tasks", type=int, default=8, help="read tasks (key-group ranges)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--skip-spark", action="store_true", help="skip the statestore comparison")
    args = ap.parse_args()
    if not args.skip_spark:
        require_transform_with_state("--skip-spark")
    keys = args.size_mb * MB // args.value_bytes
    work = tempfile.mkdtemp(prefix="ks-sp-bench-")
    spark = _spark(args.cores, args.tasks)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        from pyspark.sql import functions as F

        n = args.value_bytes
        generated = spark.range(0, keys, 1, args.tasks).select(
            F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
            F.expr(f"substr(repeat(sha2(cast(id as string), 256), {n // 64 + 1}), 1, {n})").alias("value"))
        print(f"{keys:,} keys x {args.value_bytes} B values (~{args.size_mb} MB), {args.tasks} tasks, "
              f"local[{args.cores}]", flush=True)

        t = time.time()
        first = SavepointWriter.new_savepoint(spark, 128).with_operator(
            "op", OperatorTransformation.bootstrap_with(generated).key_by("key")
            .transform(ColumnBootstrapFunction("v", "value", "value"))).write(os.path.join(work, "sp1"))
        t_boot = time.time() - t
        state_bytes = _size(os.path.join(work, "sp1", "state"))
        print(f"bootstrap (generated rows)   {t_boot:8.1f} s   savepoint state {state_bytes / MB:,.0f} MB "
              f"({state_bytes / MB / t_boot:,.1f} MB/s)", flush=True)

        reader = SavepointReader.read(spark, first)
        t = time.time()
        reader.read_keyed_state("op", state="v", value_type=Types.STRING(), tasks=args.tasks) \
            .select("key", "value").write.parquet(os.path.join(work, "dump"))
        t_dump = time.time() - t
        per_task = reader.bytes_read.value
        print(f"dump to Parquet              {t_dump:8.1f} s   {state_bytes / MB / t_dump:,.1f} MB/s, "
              f"Parquet {_size(os.path.join(work, 'dump')) / MB:,.0f} MB", flush=True)
        print(f"  bytes read per task (MB): {', '.join(f'{per_task[i] / MB:.1f}' for i in sorted(per_task))}; "
              f"total/tasks = {state_bytes / args.tasks / MB:.1f}; max/ideal = "
              f"{max(per_task.values()) / (state_bytes / args.tasks):.2f}", flush=True)

        dumped = spark.read.parquet(os.path.join(work, "dump"))
        t = time.time()
        back = SavepointWriter.new_savepoint(spark, 128).with_operator(
            "op", OperatorTransformation.bootstrap_with(dumped).key_by("key")
            .transform(ColumnBootstrapFunction("v", "value", "value"))).write(os.path.join(work, "sp2"))
        t_back = time.time() - t
        print(f"bootstrap back from Parquet  {t_back:8.1f} s   {state_bytes / MB / t_back:,.1f} MB/s", flush=True)
        again = SavepointReader.read(spark, back).read_keyed_state("op", state="v", value_type=Types.STRING())
        diff = again.select("key", "value").exceptAll(dumped).count() + dumped.exceptAll(again.select("key", "value")).count()
        print(f"  round trip: {'identical' if diff == 0 else f'{diff} rows differ'}", flush=True)

        if args.skip_spark:
            return
        try:
            src = os.path.join(work, "dump")
            checkpoint = os.path.join(work, "tws")
            t = time.time()
            query = (spark.readStream.schema("key string, value string").parquet(src).groupBy("key")
                     .transformWithStateInPandas(statefulProcessor=_storing_processor()(), outputStructType="key string",
                                                 outputMode="Update", timeMode="None")
                     .writeStream.format("noop").option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
            query.awaitTermination()
            t_ingest = time.time() - t
            store_bytes = _size(os.path.join(checkpoint, "state"))
            print(f"Spark TWS ingest (setup)     {t_ingest:8.1f} s   state store {store_bytes / MB:,.0f} MB on disk", flush=True)
            t = time.time()
            rows = spark.read.format("statestore").option("path", checkpoint).option("stateVarName", "v").load()
            rows.select("key", "value").write.format("noop").mode("overwrite").save()
            t_read = time.time() - t
            count = spark.read.format("statestore").option("path", checkpoint).option("stateVarName", "v").load().count()
            print(f"Spark statestore read        {t_read:8.1f} s   {count:,} rows, {args.tasks} partitions "
                  f"(state store {store_bytes / MB / max(t_read, 1e-9):,.1f} MB/s on disk)", flush=True)
            t = time.time()
            reader.read_keyed_state("op", state="v", value_type=Types.STRING(), tasks=args.tasks) \
                .select("key", "value").write.format("noop").mode("overwrite").save()
            t_ks = time.time() - t
            print(f"keyspan-state read (same)    {t_ks:8.1f} s   {keys:,} rows, {args.tasks} tasks; "
                  f"statestore / keyspan = {t_read / t_ks:.2f}x", flush=True)
        except Exception as exc:  # noqa: BLE001 — the peer failing (e.g. on an overloaded machine) is a result too
            print(f"Spark transformWithStateInPandas / statestore step failed: {str(exc).splitlines()[0][:300]}",
                  flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
