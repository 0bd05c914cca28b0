"""Runs a job on Spark Structured Streaming: every micro-batch is an epoch, every epoch a checkpoint.

Inside ``foreachBatch`` the driver builds the epoch's plan from the batch DataFrame, runs it with
one ``collect`` that returns only control rows (and driver-sink records), commits the checkpoint in
the metadata store, and only then publishes sink output. An epoch that Spark replays after a crash
is recognised by its id and skipped if it already committed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
import uuid
from functools import reduce

from keyspan.checkpoint.coordinator import InconsistentEpoch, Retention, collect_control, next_manifest
from keyspan.checkpoint.metadata import MetadataStore
from keyspan.common.job_execution_result import JobExecutionResult
from keyspan.checkpoint.savepoint import (
    SavepointError,
    default_target,
    load_savepoint,
    restored_manifest,
    write_savepoint,
)
from keyspan.io.storage import Storage
from keyspan.connectors.sources import KeyspanSource, SparkSource, source_dataframe
from keyspan.runtime import event_time
from keyspan.runtime import session as spark_session
from keyspan.rest.server import start_api
from keyspan.runtime.observe import JobObserver
from keyspan.runtime.progress_display import ProgressDisplay
from keyspan.runtime.planner import CONTROL_EXIT, DRIVER_EXIT, compile_graph
from keyspan.runtime.task import OUTPUT_DDL, UserFunctionError, make_stage_function
from keyspan.io import serde
from keyspan.state.keygroups import check_parallelism

EPOCH_ATTEMPTS = 3


class JobExecutionError(RuntimeError):
    """The job failed; nothing of the failing epoch was committed or published."""


def job_id_for(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "job"
    return slug[:120]


def _job_file(options) -> str | None:
    if options.job_file:
        return os.path.abspath(options.job_file)
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if path else None


class JobControl:
    """Requests from outside the driver loop (the REST API) that the loop acts on between epochs."""

    def __init__(self):
        self.stop_request: dict | None = None
        self.stopped = False

    def request_stop(self, savepoint: bool, target: str | None, drain: bool = False) -> dict:
        if self.stop_request is None:
            self.stop_request = {"savepoint": savepoint, "target": target, "done": False, "drain": drain}
        return self.stop_request

    def stop_due(self, in_epoch: bool) -> bool:
        """Stop at an epoch boundary: the current epoch finishes and commits first."""
        return self.stop_request is not None and not self.stopped and not in_epoch


class JobRunner:
    def __init__(self, env, job_name: str, options, fresh: bool = False):
        self.env = env
        self.job_name = job_name
        self.options = options
        self.job_id = job_id_for(job_name)
        self.parallelism = env.get_parallelism()
        self.max_parallelism = env.get_max_parallelism()
        check_parallelism(self.parallelism, self.max_parallelism)
        self.checkpoint_config = env.get_checkpoint_config()
        self.store = MetadataStore(options.metadata())
        root = self.checkpoint_config.get_checkpoint_storage_dir() or options.checkpoint_root()
        self.storage = Storage(root, self.checkpoint_config.get_checkpoint_storage_options()).child(self.job_id)
        self.job_file = _job_file(options)
        self.job_bytes = None  # read now: a restart may run from the copy that --fresh is about to replace
        if self.job_file and os.path.exists(self.job_file):
            with open(self.job_file, "rb") as f:
                self.job_bytes = f.read()
        self.code_version = hashlib.sha256(self.job_bytes).hexdigest()[:16] if self.job_bytes is not None else None
        self.progress = ProgressDisplay(options.progress)  # observability: replaces Progress
        self.failure: BaseException | None = None
        self.fresh = fresh or options.fresh
        self.control = JobControl()
        self._files_lock = threading.Lock()
        self._in_epoch = False
        self.checkpoint_failures = 0  # consecutive epochs whose checkpoint could not be written
        self.restored_bytes: dict[tuple[int, int], int] = {}  # (stage, subtask) → state bytes its first epoch read

    # -- set-up ---------------------------------------------------------------------------------
    def _start_fresh(self) -> None:
        self.store.forget_job(self.job_id)
        self.storage.delete("", recursive=True)
        shutil.rmtree(self._spark_dir_root(), ignore_errors=True)

    def _spark_dir_root(self) -> str:
        return os.path.join(os.path.abspath(self.options.workdir), "spark", self.job_id)

    def _choose_run(self, latest_checkpoint):
        """Resume the last run while its Spark offset log exists; otherwise start a new run that
        continues after the latest committed checkpoint."""
        run = self.store.latest_run(self.job_id)
        if run and os.path.isdir(run["spark_checkpoint"]) and run["parallelism"] == self.parallelism:
            self.store.resume_run(run["run_id"])
            return run, False
        run_id = uuid.uuid4().hex[:12]
        base = latest_checkpoint["epoch"] + 1 if latest_checkpoint else 0
        spark_dir = os.path.join(self._spark_dir_root(), run_id)
        restored = f"checkpoint:{latest_checkpoint['epoch']}" if latest_checkpoint else None
        self.store.start_run(run_id, self.job_id, self.parallelism, base, spark_dir, restored, self.code_version,
                             self.fingerprint)
        return self.store.latest_run(self.job_id), True

    def _must_start_over(self) -> str | None:
        """Why the job's last run cannot be continued, if it cannot: a bounded run that finished has
        nothing left to resume, and a job whose operators or input changed must not inherit offsets."""
        run = self.store.latest_run(self.job_id)
        if run is None:
            return None
        if run["status"] == "FINISHED":
            return None if self.store.latest_checkpoint(self.job_id) is None else "its last run finished"
        if run["fingerprint"] != self.fingerprint:
            return "its operators or input changed since its last checkpoint"
        return None

    # -- running ------------------------------------------------------------------------------
    def run(self):
        started = time.time()
        plan = compile_graph(self.env._transformations, self.parallelism, self.max_parallelism)
        self.plan = plan
        self.fingerprint = hashlib.sha256(json.dumps(
            [[(o["uid"], o["kind"]) for o in plan.operators], [t.spec.fingerprint() for t in plan.sources]]
        ).encode()).hexdigest()[:16]
        self._warn_generated_uids()
        savepoint = self._load_savepoint() if self.options.savepoint_path else None
        reason = None if (self.fresh or savepoint) else self._must_start_over()
        if reason:
            print(f"keyspan: job '{self.job_id}' starts from scratch: {reason}", file=sys.stderr)
        if self.fresh or reason or savepoint:
            self._start_fresh()
        self.store.register_job(self.job_id, self.job_name, self.job_file, self.code_version, self.max_parallelism)
        self._keep_job_file()
        if savepoint:
            self._commit_restore_point(savepoint)
        latest = self.store.latest_checkpoint(self.job_id)
        if latest is not None and latest["max_parallelism"] != self.max_parallelism:
            raise JobExecutionError(
                f"job '{self.job_id}': checkpoint {latest['epoch']} was written with max parallelism "
                f"{latest['max_parallelism']}, the job now asks for {self.max_parallelism}. Max parallelism "
                "fixes the key groups for the life of the state; keep it, or start over with --fresh.")
        self.run_info, new_run = self._choose_run(latest)
        if savepoint:
            print(f"keyspan: restoring job '{self.job_id}' from savepoint {savepoint['uri']} (epoch "
                  f"{savepoint['epoch']}, parallelism {savepoint['parallelism']} -> {self.parallelism})",
                  file=sys.stderr)
        elif latest is not None:
            print(f"keyspan: resuming job '{self.job_id}' from checkpoint {latest['epoch']} "
                  f"(epoch {latest['epoch']}, {latest['records']} records in that epoch, state at "
                  f"{self.storage.uri})", file=sys.stderr)
        self.committed = latest
        self.parallel_changed = latest is not None and latest["parallelism"] != self.parallelism
        self._publish_pending()
        self.retention = Retention(self.store, self.storage, self.job_id, self.checkpoint_config.num_retained)
        self.stage_code = {s.plan.stage_id: plan.digest(s.plan.stage_id) for s in plan.stages}
        self.observer = JobObserver(self)  # observability

        spark = self.env._spark or spark_session.get_or_create_spark(self.parallelism, self.options.spark_master)
        spark_session.prepare_session(spark)
        self.spark = spark
        offsets = latest["source_offsets"] if (latest and new_run) else None
        if offsets is not None and any(isinstance(t.spec, SparkSource) for t in plan.sources):
            raise JobExecutionError(
                f"job '{self.job_id}': a from_spark source resumes only from its own Spark offset log, which "
                "this run does not have (restored from a savepoint, or the log was lost); use a keyspan source "
                "(from_collection, FileSource) to restore from savepoints")
        stream = self._source_stream(spark, offsets)
        self.stream_schema = stream.schema  # observability: a drained stop's last epoch has no records
        writer = stream.writeStream.foreachBatch(self._run_epoch).option(
            "checkpointLocation", self.run_info["spark_checkpoint"]).queryName(f"keyspan-{self.job_id}")
        bounded = all(getattr(t.spec, "bounded", False) for t in plan.sources)
        if bounded:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.checkpoint_config.interval_ms} milliseconds")
        api = start_api(self) if self.options.rest_api else None
        query = writer.start()
        self.query = query
        status = "FINISHED" if bounded else "STOPPED"
        try:
            while query.isActive:
                query.awaitTermination(0.2)
                self.progress.update()
                if self.control.stop_due(self._in_epoch):
                    self._stop_with_savepoint()
                    status = "STOPPED"
                    break
            query.awaitTermination()
        except Exception as exc:  # noqa: BLE001 — reported below with the stored cause
            if not self.control.stopped:  # a batch Spark started while stopping ends the query with an error
                self._fail(exc)
        finally:
            self.progress.done()
            if api is not None:
                api.close()
        if self.failure is not None and not self.control.stopped:
            self._fail(self.failure)
        if bounded and not self.control.stopped and self._input_end_pending():
            try:
                self._end_of_input(stream.schema)
            except Exception as exc:  # noqa: BLE001 — reported like any failed epoch
                self._fail(self.failure or exc)
        self.store.end_run(self.run_info["run_id"], status)
        last = self.committed["epoch"] if self.committed else None
        result = JobExecutionResult(self.job_id, self.job_name, int((time.time() - started) * 1000),
                                    self.progress.epochs, self.progress.records, last)
        result.restored_bytes = dict(self.restored_bytes)
        result.metrics = self.observer.metrics  # observability: the job's metrics, user metrics included
        return result

    # -- savepoints ---------------------------------------------------------------------------------
    def _warn_generated_uids(self) -> None:
        stateful = [o for o in self.plan.operators if o["generated"] and (o["kind"] == "keyed_process"
                                                                        or o.get("stateful"))]
        if stateful:
            names = ", ".join(f"'{o['name']}' ({o['uid']})" for o in stateful)
            print(f"keyspan: warning: stateful operators without uid(...): {names}. Their state is keyed by an id "
                  "derived from their place in the graph; changing the job may orphan it in savepoints.",
                  file=sys.stderr)

    def _load_savepoint(self) -> dict:
        try:
            metadata = load_savepoint(self.options.savepoint_path)
        except SavepointError as exc:
            raise JobExecutionError(str(exc)) from None
        if metadata["max_parallelism"] != self.max_parallelism:
            raise JobExecutionError(
                f"savepoint {metadata['uri']} was taken with max parallelism {metadata['max_parallelism']}, the "
                f"job asks for {self.max_parallelism}: max parallelism fixes the key groups for the life of the "
                "state, so it cannot change on restore")
        uids = {o["uid"] for o in self.plan.operators}
        orphaned = sorted(uid for uid in metadata["state"] if uid not in uids)
        if orphaned and not self.options.allow_non_restored_state:
            raise JobExecutionError(
                f"savepoint {metadata['uri']} has state for operator(s) {', '.join(orphaned)} that the job no "
                "longer has; give them their uid(...) back, or pass --allow-non-restored-state to drop that state")
        for uid in orphaned:
            del metadata["state"][uid]
        return metadata

    def _commit_restore_point(self, savepoint: dict) -> None:
        """The savepoint becomes the job's latest checkpoint; its files stay where they are (and are
        never deleted by keyspan)."""
        self.store.commit_checkpoint(
            job_id=self.job_id, epoch=savepoint["epoch"], run_id="savepoint", parallelism=savepoint["parallelism"],
            max_parallelism=savepoint["max_parallelism"], source_offsets=savepoint["source_offsets"],
            manifest=restored_manifest(savepoint), tokens={}, sinks={}, operators=savepoint["operators"],
            event_time=savepoint.get("event_time") or {},
            bytes_written=0, records=0, restored_from=f"savepoint:{savepoint['uri']}",
            code_version=savepoint.get("code_version"))

    def _keep_job_file(self) -> None:
        """Seed 000: the job's code travels with its checkpoints, so a restart needs nothing else."""
        if self.job_bytes is None:
            return
        rel = f"job/{self.code_version}.py"
        if not self.storage.exists(rel):
            self.storage.write(rel, self.job_bytes)
        self.store.set_job_copy(self.job_id, self.storage.url(rel))

    def take_savepoint(self, target: str | None = None, trigger: str = "manual") -> str:
        """Materialise the latest committed checkpoint as a savepoint (a consistent cut by construction)."""
        with self._files_lock:
            checkpoint = self.committed
            if checkpoint is None:
                raise JobExecutionError(f"job '{self.job_id}' has no committed checkpoint yet")
            target = target or default_target(self.options.savepoint_root(), self.job_id, checkpoint["epoch"])
            path = write_savepoint(self.storage, checkpoint, target, job_name=self.job_name,
                                   job_file_bytes=self.job_bytes,
                                   extra={"restored_from": self.run_info.get("restored_from")})
        self.store.add_savepoint(path=path, job_id=self.job_id, epoch=checkpoint["epoch"],
                                 parallelism=checkpoint["parallelism"], code_version=self.code_version,
                                 restored_from=self.run_info.get("restored_from"), trigger=trigger)
        return path

    def _stop_with_savepoint(self) -> None:
        request = self.control.stop_request
        self.control.stopped = True
        self.query.stop()
        if request.get("drain") and self.committed is not None:  # observability: Flink's stop --drain
            try:
                self._end_of_input(self.stream_schema)
            except Exception as exc:  # noqa: BLE001 — reported through the API; no savepoint then
                request.update(error=f"drain failed: {exc}", done=True)
                return
        if request.get("savepoint"):
            try:
                request["path"] = self.take_savepoint(request.get("target"), trigger="stop")
                print(f"keyspan: stopped job '{self.job_id}' with savepoint {request['path']}", file=sys.stderr)
            except Exception as exc:  # noqa: BLE001 — reported through the API
                request["error"] = str(exc)
        request["done"] = True

    def stop(self) -> None:
        self.query.stop()

    def _fail(self, exc: BaseException):
        self.store.end_run(self.run_info["run_id"], "FAILED", str(exc)[:2000])
        text = str(exc)
        for marker in (UserFunctionError.MARKER, "StateSerializationError: "):
            if marker in text:  # a user function or a state value at fault: say which, not Spark's trace
                line = text[text.index(marker) + len(marker):].splitlines()[0]
                raise JobExecutionError(f"job '{self.job_id}' failed: {line}. No state or output of that epoch "
                                        "was committed.") from None
        if isinstance(exc, JobExecutionError):
            raise exc
        raise JobExecutionError(f"job '{self.job_id}' failed: {type(exc).__name__}: {text[:4000]}") from exc

    def _source_stream(self, spark, offsets):
        """One streaming DataFrame for the whole job: several sources are unioned and told apart by
        a ``_ks_src`` column, so every source advances in the same micro-batch (one consistent cut)."""
        self.source_columns = {}
        self.readers = {}
        bounded = all(getattr(t.spec, "bounded", False) for t in self.plan.sources)
        wake_file = None if bounded else self._wake_file()
        frames = []
        for i, t in enumerate(self.plan.sources):
            if isinstance(t.spec, SparkSource):
                df = t.spec.dataframe
            elif isinstance(t.spec, KeyspanSource):
                uid = next(o["uid"] for o in self.plan.operators if o["stage"] == self._stage_of_source(t))
                reader = t.spec.reader(self.storage, uid)
                start = offsets.get(str(i)) if offsets else None
                limit = t.spec.max_per_epoch or (self.env._max_records_per_epoch if reader.unit == "records" else None)
                df = source_dataframe(spark, reader, self.parallelism, limit, start, wake_file)
                self.readers[i] = reader
            else:
                raise TypeError(f"source '{t.name}' is not a keyspan source or Spark DataFrame: {t.spec!r}")
            self.source_columns[t.id] = df.columns
            frames.append((t, df))
        if len(frames) == 1:
            self.multi_source = False
            return frames[0][1]
        from pyspark.sql import functions as F

        self.multi_source = True
        self.source_index = {t.id: i for i, (t, _) in enumerate(frames)}
        tagged = [df.withColumn("_ks_src", F.lit(i)) for i, (_, df) in enumerate(frames)]
        return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), tagged)

    def _stage_of_source(self, t) -> int:
        return next(s.plan.stage_id for s in self.plan.stages if s.source is t)

    def _source_batch(self, batch_df, t):
        if not self.multi_source:
            return batch_df
        from pyspark.sql import functions as F

        return batch_df.filter(F.col("_ks_src") == self.source_index[t.id]).select(*self.source_columns[t.id])

    # -- one epoch ---------------------------------------------------------------------------------
    def _run_epoch(self, batch_df, batch_id: int) -> None:
        if self.control.stopped:
            # never return normally here: Spark would record the batch as done without its data
            raise RuntimeError(f"job '{self.job_id}' is stopping; epoch left for the next run")
        epoch = self.run_info["epoch_base"] + batch_id
        if self.committed is not None and epoch <= self.committed["epoch"]:
            self.progress.skipped += 1
            return  # replayed by Spark after a crash; this epoch already committed
        self._process_epoch(batch_df, epoch, self._read_offsets(batch_id))

    def _end_of_input(self, schema) -> None:
        """Bounded input that ended without every watermark origin seeing its end (a ``from_spark``
        source's offsets cannot tell): one more epoch without records, with every watermark at
        Long.MAX, fires the remaining event-time timers and windows. The run's Spark batches shift
        by one first, so a resumed run never maps a batch onto this epoch."""
        self.store.shift_epoch_base(self.run_info["run_id"], 1)
        self.run_info["epoch_base"] += 1
        empty = self.spark.createDataFrame([], schema)
        self._process_epoch(empty, self.committed["epoch"] + 1, self.committed["source_offsets"], end_of_input=True)

    def _input_end_pending(self) -> bool:
        if self.committed is None or not any(s.plan.keyed for s in self.plan.stages):
            return False
        marks = self.committed.get("event_time") or {}
        return any(marks.get(uid, {}).get("wm") != event_time.LONG_MAX for uid in self.plan.origins)

    def _process_epoch(self, batch_df, epoch: int, offsets, end_of_input: bool = False) -> None:
        self._in_epoch = True
        self.observer.epoch_started()  # observability
        try:
            inconsistent = 0
            while True:
                try:
                    rows = self._execute_epoch(batch_df, epoch, offsets, end_of_input)
                    reports = collect_control([r for r in rows["control"]])
                    self._check_complete(reports)
                    break
                except InconsistentEpoch:
                    inconsistent += 1
                    if inconsistent == EPOCH_ATTEMPTS:
                        raise
                except Exception as exc:  # noqa: BLE001 — only checkpoint storage failures are tolerated
                    self._checkpoint_failed(epoch, exc)
            self._commit(epoch, offsets, reports, rows["driver"], rows["time"])
            self.checkpoint_failures = 0
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            self._in_epoch = False

    def _checkpoint_failed(self, epoch: int, exc: Exception) -> None:
        """A checkpoint whose files could not be written fails without touching the previous one; the
        epoch runs again, until ``tolerable_checkpoint_failure_number`` consecutive failures."""
        cause = _storage_failure(exc)
        if cause is None:
            raise exc
        self.checkpoint_failures += 1
        self.observer.checkpoint_failed(epoch, cause)  # observability
        tolerable = self.checkpoint_config.tolerable_failures
        if self.checkpoint_failures > tolerable:
            raise JobExecutionError(
                f"job '{self.job_id}': checkpoint of epoch {epoch} failed {self.checkpoint_failures} time(s) in a row "
                f"(tolerable_checkpoint_failure_number = {tolerable}): {cause}") from None
        print(f"keyspan: checkpoint of epoch {epoch} failed ({cause}); failure {self.checkpoint_failures} of "
              f"{tolerable} tolerated, running the epoch again", file=sys.stderr)

    def _time_context(self, offsets, end_of_input: bool = False) -> dict:
        """What every task needs to compute the watermarks after this epoch exactly as the driver will."""
        done = {int(i) for i, offset in (offsets or {}).items()
                if int(i) in self.readers and self.readers[int(i)].exhausted(offset)}
        finished = [uid for uid, o in self.plan.origins.items()
                    if end_of_input or (o["sources"] and set(o["sources"]) <= done)]
        return {"origins": self.plan.origins, "state": (self.committed or {}).get("event_time") or {},
                "now": int(time.time() * 1000), "finished": finished}

    def _wake_file(self) -> str:
        return os.path.join(os.path.abspath(self.options.workdir), "wake", f"{self.job_id}.json")

    def _schedule_wake(self, reports: dict, now: int) -> None:
        """Tell the sources when the job next needs an epoch without new records: the earliest pending
        processing-time timer, or an idle-split timeout that would let a watermark advance."""
        if getattr(self, "readers", None) is None or all(getattr(t.spec, "bounded", False) for t in self.plan.sources):
            return
        wake = [r["next_timer"] for r in reports.values() if r.get("next_timer") is not None]
        wake += [now + o["idleness_ms"] for o in self.plan.origins.values() if o["idleness_ms"]]
        path = self._wake_file()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"wake_at": min(wake) if wake else None}, f)
        os.replace(tmp, path)

    def _execute_epoch(self, batch_df, epoch: int, offsets=None, end_of_input: bool = False) -> dict:
        from pyspark.sql import functions as F

        plan = self.plan
        committed = self.committed
        time_ctx = self._time_context(offsets, end_of_input)
        ectx = {
            "run_id": self.run_info["run_id"],
            "epoch": epoch,
            "committed_epoch": committed["epoch"] if committed else -1,
            "committed_tokens": committed["tokens"] if committed else {},
            "manifest": committed["manifest"] if committed else {},
            "storage": self.storage,
            "backend": self.env.get_state_backend(),
            "max_chain": self.checkpoint_config.max_delta_chain,
            "full_all": self.parallel_changed,
            "time": time_ctx,
            "job_parameters": self.env.get_config().get_global_job_parameters(),
        }
        outputs = {}
        consumers = {s.plan.stage_id: 0 for s in plan.stages}
        for s in plan.stages:
            for up, _ in s.inputs:
                consumers[up] += 1
            if not s.plan.has_downstream or any(e.kind == "driver" for e in s.plan.exits):
                consumers[s.plan.stage_id] += 1
        persisted = []
        for s in plan.stages:
            p = s.plan
            if p.input_format == "pushed_down":
                continue
            if s.source is not None:
                in_df = self._source_batch(batch_df, s.source)
            elif p.input_format == "typed_keyed":
                src = self._source_batch(batch_df, s.pushdown_source)
                kg = F.pmod(F.xxhash64(*[_jvm_key_column(src, c) for c in s.pushdown_columns]),
                            F.lit(self.max_parallelism)).cast("int")
                routed = src.select("*", kg.alias("_ks_kg")).withColumn(
                    "_ks_sub", F.expr(f"CAST(_ks_kg * {p.parallelism} DIV {p.max_parallelism} AS INT)"))
                heartbeat = self.spark.range(p.parallelism).select(
                    *[F.lit(None).cast(f.dataType).alias(f.name) for f in src.schema.fields],
                    F.lit(-1).alias("_ks_kg"), F.col("id").cast("int").alias("_ks_sub"))
                in_df = routed.unionByName(heartbeat).repartitionById(p.parallelism, "_ks_sub")
            else:
                parts = [outputs[up].filter(F.col("_ks_exit") == exit_id) for up, exit_id in s.inputs]
                if s.broadcast_inputs:
                    parts = _broadcast_first(parts, s)
                in_df = reduce(lambda a, b: a.union(b), parts).repartitionById(p.parallelism, "_ks_sub")
                if s.broadcast_inputs:
                    in_df = in_df.sortWithinPartitions("_ks_first", "_ks_seq").drop("_ks_first", "_ks_seq")
            code, digest = self.stage_code[p.stage_id]
            out = in_df.mapInArrow(make_stage_function(code, digest, ectx), OUTPUT_DDL)
            if consumers[p.stage_id] > 1:
                out = out.persist()
                persisted.append(out)
            outputs[p.stage_id] = out
        finals = []
        for s in plan.stages:
            if s.plan.stage_id not in outputs:
                continue
            out = outputs[s.plan.stage_id]
            if not s.plan.has_downstream:
                finals.append(out)
            elif any(e.kind == "driver" for e in s.plan.exits):
                finals.append(out.filter(F.col("_ks_exit") == DRIVER_EXIT))
        try:
            result = _collect_all([f.select("_ks_exit", "_ks_sub", "_ks_ctl", "payload") for f in finals])
        finally:
            for df in persisted:
                df.unpersist()
        control, driver = [], []
        for row in result:
            if row["_ks_exit"] == CONTROL_EXIT:
                control.append(bytes(row["_ks_ctl"]))
            elif row["_ks_exit"] == DRIVER_EXIT:
                driver.append((row["_ks_sub"], bytes(row["payload"])))
        return {"control": control, "driver": driver, "time": time_ctx}

    def _check_complete(self, reports) -> None:
        for s in self.plan.stages:
            if s.source is not None or s.plan.input_format == "pushed_down":
                continue
            missing = [i for i in range(s.plan.parallelism) if (s.plan.stage_id, i) not in reports]
            if missing:
                raise InconsistentEpoch(f"stage {s.plan.stage_id}: no report from subtasks {missing}")

    def _read_offsets(self, batch_id: int) -> dict | None:
        path = os.path.join(self.run_info["spark_checkpoint"], "offsets", str(batch_id))
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        offsets = {}
        for i, line in enumerate(lines[2:]):
            offsets[str(i)] = json.loads(line) if line and line != "-" else None
        return offsets

    def _commit(self, epoch: int, offsets, reports: dict, driver_rows, time_ctx: dict) -> None:
        handles, tokens, sinks = [], {}, {}
        splits: dict = {}
        records = 0
        bytes_written = 0
        for (stage_id, subtask), report in reports.items():
            if report.get("restored_bytes") and self.progress.epochs == 0:
                # the run's restore; later reads are caches rebuilt on other workers or catch-ups
                self.restored_bytes[(stage_id, subtask)] = report["restored_bytes"]
            handles.extend(report["handles"])
            tokens.update(report["tokens"])
            event_time.merge_reports(splits, report.get("splits", {}))
            for h in report["sinks"]:
                sinks.setdefault(h["sink"], []).append(h)
            if self.plan.stages[stage_id].source is not None or self.plan.stages[stage_id].plan.input_format == "typed_keyed":
                records += report["records"]
            bytes_written += sum(h["bytes"] for h in report["handles"])
        previous = self.committed["manifest"] if self.committed else {}
        manifest = next_manifest(previous, handles)
        operators = self._describe_operators(reports)
        self.observer.committing(epoch, bytes_written, manifest)  # observability
        with self._files_lock:
            discard, doomed = self.retention.expiring(epoch, manifest)
            self.committed = self.store.commit_checkpoint(
                discard=discard, job_id=self.job_id, epoch=epoch, run_id=self.run_info["run_id"],
                parallelism=self.parallelism, max_parallelism=self.max_parallelism, source_offsets=offsets,
                manifest=manifest, tokens=tokens, sinks=sinks, operators=operators,
                bytes_written=bytes_written, records=records, restored_from=self.run_info["restored_from"],
                code_version=self.code_version,
                event_time=event_time.advance(time_ctx["origins"], time_ctx["state"], splits, time_ctx["now"],
                                              time_ctx["finished"]))
        self.parallel_changed = False
        self.observer.committed(epoch, reports, bytes_written, manifest, records)  # observability
        if sinks:
            self._publish(self.committed)
        self._deliver(driver_rows)
        self._schedule_wake(reports, time_ctx["now"])
        with self._files_lock:
            self.retention.committed(epoch, manifest, doomed)
        self.progress.epochs += 1
        self.progress.records += records
        self.progress.last_checkpoint = epoch

    def _describe_operators(self, reports: dict) -> list[dict]:
        """Operators with the names and descriptors of their keyed states, as a savepoint records them."""
        known = {o["uid"]: o.get("states", []) for o in (self.committed or {}).get("operators", [])}
        for report in reports.values():
            for uid, states in report.get("states", {}).items():
                merged = {d["name"]: d for d in known.get(uid, [])}
                merged.update({d["name"]: d for d in states})
                known[uid] = sorted(merged.values(), key=lambda d: d["name"])
        return [{**o, "states": known.get(o["uid"], [])} for o in self.plan.operators]

    def _publish(self, checkpoint: dict) -> None:
        for uid, handles in checkpoint["sinks"].items():
            sink = self.plan.task_sinks.get(uid)
            if sink is None:
                raise JobExecutionError(f"checkpoint {checkpoint['epoch']} has output of sink '{uid}', which is no "
                                        "longer in the job; it cannot be published")
            sink.publish(handles)
        self.store.mark_published(self.job_id, checkpoint["epoch"])

    def _publish_pending(self) -> None:
        """Output of checkpoints that committed just before a crash is published on restart."""
        for checkpoint in self.store.unpublished_checkpoints(self.job_id):
            self._publish(checkpoint)

    def _deliver(self, driver_rows) -> None:
        by_sink: dict[int, dict[int, list]] = {}
        for subtask, payload in driver_rows:
            sink_index, records = serde.loads(payload)
            by_sink.setdefault(sink_index, {}).setdefault(subtask, []).extend(records)
        for sink_index, records_by_subtask in by_sink.items():
            sink, parallelism = self.plan.driver_sinks[sink_index]
            sink.deliver(records_by_subtask, parallelism)


def _storage_failure(exc: Exception) -> str | None:
    """The storage error inside a failed epoch (raised in a task or on the driver), if that is what it was."""
    text = f"{exc}\n" + "\n".join(getattr(exc, "__notes__", ()))
    if UserFunctionError.MARKER in text:
        return None
    for marker in ("StorageError: ", "keyspan storage: "):
        if marker in text:
            line = next(line for line in text.splitlines() if marker in line)
            if marker == "keyspan storage: ":  # the note names the file; the error is the line before it
                lines = text.splitlines()
                i = lines.index(line)
                return f"{lines[i - 1].strip()} ({line.strip()})" if i else line.strip()
            return line.strip()
    return None


def _collect_all(frames) -> list:
    """Each terminal stage is its own Spark job (run concurrently), never a union of stage outputs:
    under a union, a task's partition id would no longer be its subtask index."""
    if len(frames) == 1:
        return frames[0].collect()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(frames)) as pool:
        return [row for rows in pool.map(lambda f: f.collect(), frames) for row in rows]


def _broadcast_first(parts, stage):
    """Every subtask of a broadcast-process stage reads all broadcast-side rows of the epoch before the
    other rows; rows of one upstream task keep their order (a sequence number taken before the shuffle)."""
    from pyspark.sql import functions as F

    return [df.select("*", F.lit(0 if edge in stage.broadcast_inputs else 1).alias("_ks_first"),
                      F.monotonically_increasing_id().alias("_ks_seq"))
            for df, edge in zip(parts, stage.inputs)]


def _jvm_key_column(df, name):
    """Cast so Spark's xxhash64 sees the same bytes stable_hash hashes for the Python value."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    dtype = df.schema[name].dataType
    if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType)):
        return F.col(name).cast("long")
    if isinstance(dtype, T.FloatType):
        return F.col(name).cast("double")
    return F.col(name)
