"""Peer baselines for the "stateful running sum per key" benchmark.

This module measures the same workload on two Spark Structured Streaming
pipelines, so keyspan's own run (added by ``bench/running_sum.py``) has peers:

* ``run_transform_with_state`` -- PySpark's ``transformWithStateInPandas``
  (arbitrary state API v2) with a persistent ``ValueState`` per key in RocksDB.
  This is the "real" peer: durable, checkpointed keyed state.
* ``run_map_in_arrow`` -- ``repartition(key).mapInArrow`` with a plain Python
  dict per worker process.  No persistence, no fault tolerance; it is the
  "bare limit" of what a Python-in-Spark keyed running sum can do.

Both read the same Parquet files produced by ``generate_events`` with the same
streaming source (``maxFilesPerTrigger``) and ``trigger(availableNow=True)``,
and both use the same ``foreachBatch`` sink (one aggregate job per micro-batch
that returns row count and max running sum per key), so the sink cost is equal
and each run can be checked against ``expected_sums``.

Run ``python bench/baselines.py`` to generate 1,000,000 events / 10,000 keys in
a temp dir and print both rates.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import types
import uuid
from typing import Dict, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from keyspan.runtime.session import CHECKPOINT_FILE_MANAGER, FILE_SYSTEM_MANAGER

EVENT_SCHEMA_DDL = "key long, value long"
OUTPUT_SCHEMA_DDL = "key long, running_sum long"

_ROCKSDB_PROVIDER = (
    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
)


# --------------------------------------------------------------------------
# Spark session
# --------------------------------------------------------------------------


def make_spark(app_name: str = "keyspan-bench", cores: int = 2, unix_sockets: bool = False):
    """Create (or reuse) a local SparkSession ``local[cores]`` for the baselines.

    Why each setting:
    * ``PYSPARK_PYTHON`` / ``spark.pyspark.python`` = ``sys.executable``: Python
      workers must run the venv interpreter, otherwise ``import pyarrow`` fails
      inside tasks (Arrow UDFs, mapInArrow and TWS all need it).
    * ``spark.sql.streaming.stateStore.providerClass`` = RocksDB provider:
      with the default HDFS-backed store the query fails at its first batch
      with ``UNSUPPORTED_FEATURE.STORE_BACKEND_NOT_SUPPORTED_FOR_TWS`` ("Please
      use RocksDBStateStoreProvider"), checked on pyspark 4.3.0.
    * ``spark.sql.shuffle.partitions`` = cores: the default 200 would make every
      micro-batch run 200 tiny stateful tasks (and 200 RocksDB instances).
    * UI off and log level WARN: less noise and overhead for a benchmark.
    * ``unix_sockets``: ``spark.python.unix.domain.socket.enabled``, the JVM talking to its Python
      workers over Unix sockets instead of TCP (Spark's default, as in a session keyspan creates), which
      saved every Python task about 40 ms here (docs/deployment.md, "Python workers over Unix sockets").
    * ``spark.sql.streaming.checkpointFileManagerClass`` = Hadoop ``FileSystem``
      based, as keyspan's own query runs on local disk
      (``keyspan.runtime.session.query_settings``): every peer writes its
      offset and commit logs, and its state store files, without the
      ``readlink`` process per rename that Spark's default ``FileContext``
      costs here (no native Hadoop library), so the peers and keyspan pay the
      same for Spark's logs.
    * ``spark.python.daemon.module`` = keyspan's daemon, as in a local session keyspan creates: every
      Python worker (keyspan's and the Python peers') imports PySpark from its installed, compiled
      files instead of compiling ``pyspark.zip`` again (``keyspan.runtime.worker.daemon``).

    Note: the session takes ~9 s to start on the 2-core bench machine; this is
    not part of any measured time.
    """
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Streaming disables AQE anyway (and warns about it at every start()).
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.streaming.stateStore.providerClass", _ROCKSDB_PROVIDER)
        .config(CHECKPOINT_FILE_MANAGER, FILE_SYSTEM_MANAGER)
        # Python workers are reused across tasks (default, made explicit): the
        # mapInArrow baseline keeps its dict in the worker process.
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.daemon.module", "keyspan.runtime.worker.daemon")
        .config("spark.python.unix.domain.socket.enabled", str(unix_sockets).lower())
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    _quiet_tws_state_server(spark)
    # In case the session already existed (getOrCreate), make the runtime SQL
    # settings hold anyway.
    spark.conf.set("spark.sql.shuffle.partitions", str(cores))
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", _ROCKSDB_PROVIDER)
    spark.conf.set(CHECKPOINT_FILE_MANAGER, FILE_SYSTEM_MANAGER)
    return spark


def _quiet_tws_state_server(spark) -> None:
    """Silence the TWS state server's per-key WARN on ``ValueState.get()`` of a new key.

    In 4.3 ``TransformWithStateInPySparkStateServer`` logs "Value state sum
    doesn't contain a value." at WARN for every get() on a key without state:
    10,000 log lines in the first micro-batch here, which costs measurable time
    and buries the output.  Local mode: driver and executor share this JVM.
    """
    try:
        jvm = spark.sparkContext._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "org.apache.spark.sql.execution.python.streaming."
            "TransformWithStateInPySparkStateServer",
            jvm.org.apache.logging.log4j.Level.ERROR,
        )
    except Exception:  # pragma: no cover - logging tweak only
        pass


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------


def generate_events(
    directory: str,
    n_events: int = 1_000_000,
    n_keys: int = 10_000,
    n_files: int = 10,
    seed: int = 7,
) -> str:
    """Write ``n_events`` events as ``n_files`` Parquet files; return ``directory``.

    Columns: ``key: int64`` uniform in ``[0, n_keys)`` and ``value: int64`` in
    ``1..9``.  Deterministic for a given seed.  Files are named
    ``part-00000.parquet``, ... so lexical order == generation order, and they
    are written in that order (the Spark file source orders by modification
    time, then path), so ``maxFilesPerTrigger=1`` replays them in order.
    Values are >= 1, so every per-key running sum is strictly increasing and
    the max running sum seen for a key equals its final sum.
    """
    os.makedirs(directory, exist_ok=True)
    existing = [f for f in os.listdir(directory) if not f.startswith(".")]
    if existing:
        raise ValueError(f"{directory!r} is not empty; refusing to mix datasets")
    rng = np.random.default_rng(seed)
    bounds = np.linspace(0, n_events, n_files + 1).astype(np.int64)
    width = max(5, len(str(n_files - 1)))
    for i in range(n_files):
        n = int(bounds[i + 1] - bounds[i])
        keys = rng.integers(0, n_keys, size=n, dtype=np.int64)
        values = rng.integers(1, 10, size=n, dtype=np.int64)
        table = pa.table({"key": pa.array(keys), "value": pa.array(values)})
        path = os.path.join(directory, f"part-{i:0{width}d}.parquet")
        tmp = os.path.join(directory, f".tmp-{i:0{width}d}.parquet")
        pq.write_table(table, tmp)
        os.replace(tmp, path)  # atomic: the file source never sees partial files
    return directory


def expected_sums(directory: str) -> Dict[int, int]:
    """Final sum of ``value`` per ``key`` over all events (pyarrow group_by).

    Used as ground truth for every engine's final state.
    """
    table = pq.read_table(directory, columns=["key", "value"])
    agg = table.group_by("key").aggregate([("value", "sum")])
    return dict(zip(agg.column("key").to_pylist(), agg.column("value_sum").to_pylist()))


def count_events(directory: str) -> int:
    """Number of events in ``directory`` (from Parquet metadata, no data read)."""
    return sum(
        pq.ParquetFile(os.path.join(directory, f)).metadata.num_rows
        for f in sorted(os.listdir(directory))
        if f.endswith(".parquet") and not f.startswith(".")
    )


# --------------------------------------------------------------------------
# Shared streaming plumbing
# --------------------------------------------------------------------------


def _check_checkpoint_dir(checkpoint_dir: str) -> None:
    """A non-empty checkpoint would make the query resume (and process nothing)."""
    if os.path.isdir(checkpoint_dir) and os.listdir(checkpoint_dir):
        raise ValueError(
            f"checkpoint dir {checkpoint_dir!r} is not empty; use a fresh one per run"
        )


def _ship_this_module_by_value() -> None:
    """Make cloudpickle send this module's functions by value to Python workers.

    Imported as ``baselines`` (``python bench/running_sum.py`` puts ``bench/``
    on sys.path) or ``bench.baselines``, the functions would otherwise be
    pickled by reference and the workers -- whose sys.path does not contain
    ``bench/`` -- fail with ``ModuleNotFoundError: No module named 'baselines'``.
    """
    if __name__ != "__main__":  # __main__ is already pickled by value
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _stream_source(spark, directory: str, files_per_trigger: int):
    _ship_this_module_by_value()
    return (
        spark.readStream.schema(EVENT_SCHEMA_DDL)
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(directory)
    )


def _run_query(out_df, directory: str, checkpoint_dir: str, verify: bool = True) -> dict:
    """Run ``out_df`` (columns key, running_sum) to completion; time and verify it.

    With ``verify`` (default) the ``foreachBatch`` sink runs exactly ONE job per
    micro-batch, ``groupBy(key).agg(max, count)``: a second action on
    ``batch_df`` would re-execute the whole micro-batch (stateful operator
    included), so counting and verifying are fused.  The driver keeps the max
    running sum per key; values are >= 1, so that is the final sum, compared
    with ``expected_sums``.  ``verify=False`` uses the ``noop`` sink instead
    (pure engine cost, ``final_sums_ok=None``).

    ``seconds`` covers only ``start()`` .. ``awaitTermination()`` (query
    planning + all micro-batches), not session start-up or data generation.
    """
    from pyspark.sql import functions as F

    _check_checkpoint_dir(checkpoint_dir)
    n_events = count_events(directory)
    max_sum: Dict[int, int] = {}
    totals = {"rows": 0, "batches": 0}

    def sink(batch_df, batch_id):
        rows = (
            batch_df.groupBy("key")
            .agg(F.max("running_sum").alias("m"), F.count(F.lit(1)).alias("c"))
            .collect()
        )
        for r in rows:
            k, m = r["key"], r["m"]
            if m > max_sum.get(k, 0):
                max_sum[k] = m
            totals["rows"] += r["c"]
        totals["batches"] += 1

    writer = out_df.writeStream
    writer = writer.foreachBatch(sink) if verify else writer.format("noop")
    t0 = time.perf_counter()
    query = (
        writer.option("checkpointLocation", checkpoint_dir)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()  # raises StreamingQueryException on failure
    seconds = time.perf_counter() - t0

    progress = [p for p in query.recentProgress if p.numInputRows > 0]
    batch_ms = [int(p.durationMs.get("triggerExecution", -1)) for p in progress]
    if verify:
        final_ok = max_sum == expected_sums(directory)
        rows_out = totals["rows"]
    else:
        final_ok = None
        rows_out = sum(max(0, p.sink.numOutputRows) for p in progress)
    return {
        "events": n_events,
        "seconds": seconds,
        "rate": n_events / seconds if seconds > 0 else float("nan"),
        "final_sums_ok": final_ok,
        "rows_out": rows_out,
        "batches": len(progress),
        "batch_ms": batch_ms,
    }


# --------------------------------------------------------------------------
# Baseline 1: transformWithStateInPandas (durable keyed state in RocksDB)
# --------------------------------------------------------------------------


def _running_sum_processor_class():
    """Build the StatefulProcessor lazily so importing this module needs no pyspark."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class RunningSumProcessor(StatefulProcessor):
        """ValueState ``sum`` per key; emits (key, running_sum) for every input row.

        Within a micro-batch the running sum follows the row order Spark hands
        over (not guaranteed to be file order); the final sum per key is
        order-independent and is what gets verified.
        """

        def init(self, handle) -> None:
            self._sum = handle.getValueState("sum", "sum long")

        def handleInputRows(self, key, rows, timerValues) -> Iterator["pd.DataFrame"]:
            # One state round trip: get() returns None when the key has no state.
            current = self._sum.get()
            base = 0 if current is None else int(current[0])
            for pdf in rows:
                if len(pdf) == 0:
                    continue
                # numpy, not pandas Series ops: ~40 us instead of ~100 us per
                # call, and this runs once per key per micro-batch.
                running = pdf["value"].to_numpy().cumsum()
                running += base
                base = int(running[-1])
                yield pd.DataFrame(
                    {"key": pdf["key"].to_numpy(), "running_sum": running}, copy=False
                )
            self._sum.update((base,))

        def close(self) -> None:
            pass

    return RunningSumProcessor


def require_transform_with_state(skip_flag: str = "--skip-tws") -> None:
    """Stop with what to install when Spark's transformWithStateInPandas cannot run here: its Python
    runner imports grpc and protobuf, which PySpark does not install, and fails deep in Spark otherwise."""
    import importlib.util

    def installed(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # its parent package is missing
            return False

    missing = [name for name in ("grpc", "google.protobuf") if not installed(name)]
    if missing:
        raise SystemExit(f"transformWithStateInPandas needs {' and '.join(missing)}: pip install -e '.[bench]' "
                         f"(or leave that peer out with {skip_flag})")


def run_transform_with_state(
    spark,
    directory: str,
    checkpoint_dir: str,
    files_per_trigger: int = 1,
    *,
    verify: bool = True,
) -> dict:
    """Running sum per key with ``transformWithStateInPandas`` (the durable peer).

    ``groupBy("key").transformWithStateInPandas(..., outputMode="Update",
    timeMode="None")`` with a RocksDB-backed ``ValueState`` per key.  Requires
    the RocksDB state store provider (set by ``make_spark``).  Returns
    ``{"events", "seconds", "rate", "final_sums_ok", "rows_out", "batches",
    "batch_ms"}``;
    ``final_sums_ok`` compares the max running sum per key seen by the sink
    with ``expected_sums``.
    """
    require_transform_with_state()
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", _ROCKSDB_PROVIDER)
    processor_cls = _running_sum_processor_class()
    events = _stream_source(spark, directory, files_per_trigger)
    out = events.groupBy("key").transformWithStateInPandas(
        statefulProcessor=processor_cls(),
        outputStructType=OUTPUT_SCHEMA_DDL,
        outputMode="Update",
        timeMode="None",
    )
    return _run_query(out, directory, checkpoint_dir, verify)


# --------------------------------------------------------------------------
# Baseline 2: mapInArrow with a plain per-process dict (the bare limit)
# --------------------------------------------------------------------------

# Per-process running sums, keyed by run id.  The dict is kept in a synthetic
# module registered in sys.modules rather than in this module's globals: the
# function shipped to the worker is cloudpickled (by value when this file runs
# as __main__), and a by-value function gets a *fresh* globals dict on every
# task, which would silently reset the "state" at each micro-batch.
# sys.modules lives as long as the (reused) Python worker process.
_STATE_MODULE = "_keyspan_bench_state"


def _process_sums(run_id: str) -> Dict[int, int]:
    mod = sys.modules.get(_STATE_MODULE)
    if mod is None:
        mod = types.ModuleType(_STATE_MODULE)
        mod.sums = {}
        sys.modules[_STATE_MODULE] = mod
    return mod.sums.setdefault(run_id, {})


def _make_running_sum_fn(run_id: str):
    """mapInArrow function: per record ``d[k] = d.get(k, 0) + v``, emit (k, d[k])."""
    out_schema = pa.schema([("key", pa.int64()), ("running_sum", pa.int64())])

    def running_sum(batches):
        d = _process_sums(run_id)
        get = d.get
        for batch in batches:
            keys = batch.column(0).to_pylist()
            values = batch.column(1).to_pylist()
            sums = [0] * len(keys)
            for i, k in enumerate(keys):
                s = get(k, 0) + values[i]
                d[k] = s
                sums[i] = s
            yield pa.RecordBatch.from_arrays(
                [batch.column(0), pa.array(sums, type=pa.int64())], schema=out_schema
            )

    return running_sum


def run_map_in_arrow(
    spark,
    directory: str,
    checkpoint_dir: str,
    files_per_trigger: int = 1,
    *,
    verify: bool = True,
) -> dict:
    """The bare limit: ``repartition(cores, "key").mapInArrow`` + in-memory dict.

    No state store, no persistence, no fault tolerance: the running sums live
    in a dict inside each Python worker process.  Same source, trigger and sink
    as ``run_transform_with_state``; the query runs with keyspan's query settings
    (``keyspan.runtime.session.query_settings``: Arrow batches cut by record count,
    Spark's logs written through Hadoop's FileSystem), as keyspan's own query does.
    ``final_sums_ok`` only holds if every key kept landing in the same (reused)
    worker process across micro-batches -- report it, don't rely on it.
    """
    cores = int(spark.conf.get("spark.sql.shuffle.partitions"))
    fn = _make_running_sum_fn(uuid.uuid4().hex)
    events = _stream_source(spark, directory, files_per_trigger)
    out = events.repartition(cores, "key").mapInArrow(fn, OUTPUT_SCHEMA_DDL)
    from keyspan.runtime.session import query_settings

    with query_settings(spark, local_logs=True):  # Arrow batches and Spark's logs as in keyspan's own query: the same limit
        return _run_query(out, directory, checkpoint_dir, verify)


# --------------------------------------------------------------------------


WARM_UP_EVENTS = 20_000


def warm_up_shape(args, files: int) -> tuple[int, int, int]:
    """(events, keys, files) of the warm-up run before the measured ones: the JVM compiles most of a
    short run's code while it runs (docs/benchmarks.md, "The JVM compiles for most of a short run"), so
    ``--warmup-events`` as large as ``--events`` measures both engines warm."""
    events = args.warmup_events
    return events, min(args.keys, max(1_000, events // 100)), max(2, files * events // args.events)


def warm_up(spark, workdir: str, tws: bool = True) -> None:
    """Run both baselines once on a tiny dataset (20k events) and discard the result.

    The first streaming query in a fresh SparkSession pays one-off costs --
    JVM class loading/JIT, codegen, forking Python workers, loading RocksDB's
    native library -- measured at ~4-5 s here, which would otherwise be
    charged to whichever baseline happens to run first.  Give keyspan's run an
    equivalent warm-up.
    """
    data = generate_events(os.path.join(workdir, "warmup-events"), WARM_UP_EVENTS, 1_000, 2, 1)
    run_map_in_arrow(spark, data, os.path.join(workdir, "warmup-ckpt-arrow"))
    if tws:
        run_transform_with_state(spark, data, os.path.join(workdir, "warmup-ckpt-tws"))


def cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of this process ("driver"), of the Spark JVM it started ("jvm", of which its
    JIT compiler threads: "jvm JIT") and of the JVM's Python workers ("python workers"), read from
    ``/proc`` (Linux; empty elsewhere). The difference over a run says where a job spent its CPU,
    which on a busy 2-core machine wanders less than wall time. A process that ended during the run
    is missing from the later reading."""
    if not os.path.isdir("/proc/self"):
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    processes = {}  # pid → (parent pid, CPU seconds, command line)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            _, parent, seconds = _stat(f"/proc/{pid}/stat", tick)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        processes[int(pid)] = (parent, seconds, command)
    me = os.getpid()
    totals = {"driver": processes.get(me, (0, 0.0, ""))[1], "jvm": 0.0, "jvm JIT": 0.0, "python workers": 0.0}
    for pid, (parent, seconds, command) in processes.items():
        while parent not in (me, 0, 1):  # only processes this one started, directly or not
            parent = processes.get(parent, (0,))[0]
        if parent != me or pid == me:
            continue
        if "pyspark.worker" in command:  # the daemon (PySpark's or keyspan's) and its forked workers
            totals["python workers"] += seconds
        elif "java" in command.split(" ", 1)[0]:
            totals["jvm"] += seconds
            totals["jvm JIT"] += _jit_seconds(pid, tick)
    return totals


def _jit_seconds(pid: int, tick: int) -> float:
    """CPU seconds of a JVM's JIT compiler threads (HotSpot names them ``C1 CompilerThread0``, ``C2 …``):
    part of its total, spent compiling Spark's code to machine code rather than running it."""
    seconds = 0.0
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for thread in threads:
        try:
            name, _, cpu = _stat(f"/proc/{pid}/task/{thread}/stat", tick)
        except OSError:
            continue
        if "CompilerThre" in name:  # the kernel keeps 15 characters of a thread's name
            seconds += cpu
    return seconds


def _stat(path: str, tick: int) -> tuple[str, int, float]:
    """A process's or thread's name, parent pid and CPU seconds (user + system) from its ``stat`` file."""
    with open(path) as f:
        stat = f.read()
    fields = stat.rsplit(")", 1)[1].split()
    return stat[stat.index("(") + 1:stat.rindex(")")], int(fields[1]), (int(fields[11]) + int(fields[12])) / tick


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds spent between two ``cpu_seconds`` readings, by process kind (empty off Linux)."""
    return {name: after[name] - before[name] for name in ("jvm", "jvm JIT", "python workers", "driver") if name in after}


def spark_stages(spark, spans: list[tuple[float, float]]) -> list[dict[str, dict[str, float]]]:
    """What Spark's stages submitted in each (start, end) span (``time.time()``) cost, summed by their
    side of the exchange: "before" (stages that write a shuffle: reading the source, and for Spark's
    aggregation its partial aggregate) and "after" (stages that read it: keyspan's keyed Python stage,
    Spark's final aggregate and state store). Read once from Spark's status store, which keeps every
    stage's metrics whether or not its UI is on (``spark.ui.retainedStages`` of them)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    defaults = [getattr(store, f"stageList$default${i}")() for i in range(2, 6)]
    stages = store.stageList(None, *defaults)
    per_span = [{side: {"stages": 0, "wall s": 0.0, "task s": 0.0, "JVM CPU s": 0.0, "shuffle MB": 0.0}
                 for side in ("before", "after")} for _ in spans]
    for i in range(stages.size()):
        stage = stages.apply(i)
        submitted, completed = stage.submissionTime(), stage.completionTime()
        if submitted.isEmpty() or completed.isEmpty():
            continue
        began, ended = submitted.get().getTime() / 1000, completed.get().getTime() / 1000
        span = next((n for n, (start, end) in enumerate(spans) if start <= began < end), None)
        if span is None:
            continue
        written = stage.shuffleWriteBytes()
        side = per_span[span]["before" if written else "after"]
        side["stages"] += 1
        side["wall s"] += ended - began
        side["task s"] += stage.executorRunTime() / 1000
        side["JVM CPU s"] += stage.executorCpuTime() / 1e9
        side["shuffle MB"] += (written or stage.shuffleReadBytes()) / 1e6
    return per_span


def format_stages(sides: dict[str, dict[str, float]]) -> str:
    """``before the exchange: 10 stages, wall 0.42 s, tasks 0.55 s, JVM CPU 0.34 s, shuffle 16.1 MB; after …``."""
    return "; ".join(f"{side} the exchange: {int(p['stages'])} stages, wall {p['wall s']:.2f} s, tasks {p['task s']:.2f} s, "
                     f"JVM CPU {p['JVM CPU s']:.2f} s, shuffle {p['shuffle MB']:.1f} MB" for side, p in sides.items())


def format_cpu(spent: dict[str, float]) -> str:
    """``jvm 3.8 s (JIT 1.2 s), python workers 3.4 s, driver 0.2 s``."""
    return ", ".join(f"{name} {seconds:.1f} s" + (f" (JIT {spent['jvm JIT']:.1f} s)" if name == "jvm" and "jvm JIT" in spent
                                                  else "")
                     for name, seconds in spent.items() if name != "jvm JIT")


def _fmt(name: str, r: dict) -> str:
    return (
        f"{name:<28} {r['events']:>9,d} events in {r['seconds']:7.2f} s = "
        f"{r['rate']:>10,.0f} events/s  final_sums_ok={r['final_sums_ok']}  "
        f"rows_out={r['rows_out']:,d}  batches={r['batches']}  "
        f"batch_ms={r['batch_ms']}"
    )


if __name__ == "__main__":
    cores = 2
    work = tempfile.mkdtemp(prefix="keyspan-bench-")
    try:
        t0 = time.perf_counter()
        data = generate_events(os.path.join(work, "events"), 1_000_000, 10_000, 10, 7)
        print(f"generated 1,000,000 events / 10,000 keys / 10 files in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        t0 = time.perf_counter()
        spark = make_spark(cores=cores)
        print(f"spark session started in {time.perf_counter() - t0:.1f} s", flush=True)
        t0 = time.perf_counter()
        warm_up(spark, work)
        print(f"warm-up done in {time.perf_counter() - t0:.1f} s", flush=True)
        r_arrow = run_map_in_arrow(spark, data, os.path.join(work, "ckpt-arrow"))
        print(_fmt("mapInArrow (bare limit)", r_arrow), flush=True)
        r_tws = run_transform_with_state(spark, data, os.path.join(work, "ckpt-tws"))
        print(_fmt("transformWithStateInPandas", r_tws), flush=True)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
