"""Runs a job on Spark Structured Streaming: every micro-batch is an epoch, every epoch a checkpoint.

``JobRunner`` owns a run's lifecycle: resume, restore from a savepoint or start fresh; start the
query; stop with a savepoint; fail with a readable error. Inside ``foreachBatch`` each epoch runs
its stages on Spark (``spark_plan``), and the checkpoint coordinator turns the tasks' reports into
one committed checkpoint before sink output is published. An epoch that Spark replays after a
crash is recognised by its id and skipped if it already committed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time
import traceback
import uuid
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor

from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
from sqlalchemy.exc import OperationalError

from keyspan.checkpoint import integrity
from keyspan.checkpoint.coordinator import CheckpointCoordinator, CheckpointFailed, PublishFailed, storage_failure
from keyspan.checkpoint.metadata import Fenced, LeaseHeld, MetadataStore, SchemaTooNew, StoreUnreadable
from keyspan.checkpoint.savepoint import (
    ABANDONED,
    METADATA,
    SavepointError,
    checkpoint_dir,
    default_target,
    load_savepoint,
    restored_manifest,
    write_savepoint,
)
from keyspan.common import logs
from keyspan.common.clock import LONG_MAX, wall_clock_ms
from keyspan.common.job_execution_result import JobExecutionResult
from keyspan.common.logs import write_failure_log
from keyspan.common.settings import load as load_settings
from keyspan.connectors.dead_letter import PoisonRecordError
from keyspan.common.restart_strategy import RestartStrategies
from keyspan.connectors.sources import SourceRecordError
from keyspan.datastream.transformation import OperatorKind
from keyspan.io import serde
from keyspan.io.storage import Storage
from keyspan.rest.server import start_api
from keyspan.runtime import autoscaler, event_time
from keyspan.runtime import session as spark_session
from keyspan.runtime.control import JobControl, RunnerHandle
from keyspan.runtime.observe import JobObserver
from keyspan.runtime.planner import AdaptiveBatch, InputFormat, PhysicalPlan, compile_graph
from keyspan.runtime.progress_display import ProgressDisplay
from keyspan.runtime.protocol import EpochContext, TimeContext, UserFunctionError
from keyspan.runtime.spark_plan import SparkStages
from keyspan.state.keygroups import check_parallelism, compute_operator_index_for_key_group


log = logs.get_logger("keyspan.runtime")
RECENT_TOKEN_EPOCHS = 4  # a worker cache parked at most this many epochs ago confirms its changes and catches up
# Spark stops an executor's idle Python workers after a minute in which none of them ran a task; after
# this long without a task between epochs, the runner gives them one (SparkStages.touch_workers)
KEEP_WORKERS_SECONDS = 30
# Runs this driver process ended, newest last (at most ENDED_RUNS_KEPT): every epoch tells its tasks, so a
# Python worker frees what it still caches for them (an earlier job of a notebook's session) at once
ENDED_RUNS_KEPT = 32
_ended_runs: list[str] = []


def _mark_run(run_id: str, ended: bool) -> None:
    """Keep ``_ended_runs`` current: a run that ended goes last (the oldest fall off), one that resumed leaves."""
    if run_id in _ended_runs:
        _ended_runs.remove(run_id)
    if ended:
        _ended_runs.append(run_id)
        del _ended_runs[:-ENDED_RUNS_KEPT]


def _sentence(line: str) -> str:
    """``line`` ending as a sentence, for messages that go on after it."""
    return line if line.endswith((".", "?", "!")) else line + "."


class JobExecutionError(RuntimeError):
    """The job failed; nothing of the failing epoch was committed or published."""


def run_with_restarts(env, transformations: list, job_name: str, options, fresh: bool = False) -> JobExecutionResult:
    """Run the job; after a failure of a started run, run it again in this driver from its latest
    checkpoint as long as the restart strategy allows (the job's own, else ``--restart-attempts``)."""
    strategy = env.get_restart_strategy()
    if isinstance(strategy, RestartStrategies.FallbackRestartStrategyConfiguration):
        strategy = RestartStrategies.fixed_delay_restart(options.restart_attempts, int(options.restart_delay_s * 1000)) \
            if options.restart_attempts else RestartStrategies.no_restart()
    tracker = strategy.new_tracker()
    while True:
        runner = JobRunner(env, transformations, job_name, options, fresh=fresh)
        try:
            return runner.run()
        except JobExecutionError as exc:
            if runner.run_info is None:  # failed before a run started: a set-up error, not a failure to retry
                raise
            delay = tracker.on_failure(wall_clock_ms())
            if delay is None:
                if tracker.restarts:
                    exc.add_note(f"keyspan: gave up after {tracker.restarts} restart(s) ({strategy.get_description()})")
                raise
            first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
            log.warning("job '%s' failed: %s; restart %d from its latest checkpoint in %.1f s (%s)",
                        runner.job_id, first_line, tracker.restarts, delay / 1000, strategy.get_description())
            time.sleep(delay / 1000)
            fresh = False  # a restart continues what the failed run committed
            # ... at the parallelism it last ran with (a live rescale may have changed it)
            options = dataclasses.replace(options, fresh=False, savepoint_path=None, parallelism=runner.parallelism)


def job_id_for(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "job"
    return slug[:120]


def _job_file(options) -> str | None:
    if options.job_file:
        return os.path.abspath(options.job_file)
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if path else None


class JobRunner:
    def __init__(self, env, transformations: list, job_name: str, options, fresh: bool = False):
        """``transformations``: the job graph ``env`` built (``env`` gives the settings)."""
        if options.configuration:  # `keyspan run -D key=value`: over what the job's code set
            try:
                env.configure(options.configuration)
            except ValueError as exc:
                raise JobExecutionError(f"keyspan run -D: {exc}") from None
        self.env = env
        self.job_name = job_name
        self.options = options
        self.job_id = job_id_for(job_name)
        self.parallelism = options.parallelism or env.get_default_local_parallelism()  # the CLI's -p overrides the job's
        self.max_parallelism = env.get_max_parallelism()
        check_parallelism(self.parallelism, self.max_parallelism)
        self.checkpoint_config = env.get_checkpoint_config()
        try:
            self.store = MetadataStore(options.metadata())
        except (StoreUnreadable, SchemaTooNew) as exc:
            raise JobExecutionError(f"job '{self.job_id}' cannot start: {exc}") from None
        root = self.checkpoint_config.get_checkpoint_storage_dir() or options.checkpoint_root()
        self.checkpoint_root = Storage(root, self.checkpoint_config.get_checkpoint_storage_options())
        self.storage = self.checkpoint_root.child(self.job_id)
        self.job_file = _job_file(options)
        self.job_bytes = None  # read now: a restart may run from the copy that --fresh is about to replace
        if self.job_file and os.path.exists(self.job_file):
            self.job_bytes = Storage(os.path.dirname(self.job_file)).read(os.path.basename(self.job_file))
        self.code_version = hashlib.sha256(self.job_bytes).hexdigest()[:16] if self.job_bytes is not None else None
        self.transformations = transformations
        self.batch = _batch_mode(env, [t for t in transformations if t.kind == OperatorKind.SOURCE], self.job_id)
        self.plan = self._compile(self.parallelism)
        try:  # job.autoscaler.* and --autoscale: checked before anything starts; a batch job runs one epoch
            self.autoscale = autoscaler.options_for(env, options, self.job_id)
        except ValueError as exc:
            raise JobExecutionError(str(exc)) from None
        if self.batch:
            self.autoscale = None
        self.fingerprint = hashlib.sha256(json.dumps(
            [[(o["uid"], o["kind"]) for o in self.plan.operators], [t.spec.fingerprint() for t in self.plan.sources]]
        ).encode()).hexdigest()[:16]
        self.source_ids = [{"uid": next(s for s in self.plan.stages if s.source is t).plan.ops[0].uid,
                            "fingerprint": t.spec.fingerprint()} for t in self.plan.sources]
        self.progress = ProgressDisplay(options.progress)
        self.scratch = fresh  # execute_and_collect: a throwaway run whose checkpoints nobody restores
        self.fresh = fresh or options.fresh
        self.signing_key = integrity.signing_key(options.workdir)
        self.lease = None  # this driver's claim on the job (metadata store)
        self.replay: dict | None = None  # source index → end offsets of epochs replayed after a fallback
        self.control = JobControl()
        self.failure: BaseException | None = None
        self.recent_tokens: dict[int, dict] = {}  # epoch → committed tokens, the run's last few epochs
        self.restored_bytes: dict[tuple[int, int], int] = {}  # (stage, subtask) → state bytes its first epoch read
        self.committed: dict | None = None  # the latest committed checkpoint
        self.run_info: dict | None = None  # this run's row of the metadata store
        self.parallel_changed = False  # the first epoch after a parallelism change writes full snapshots
        self.timers_held = True  # whether the last committed epoch's keyed operators held timers (unknown yet)
        self.next_processing_timer: int | None = None  # the earliest one the last committed epoch left pending
        self.coordinator: CheckpointCoordinator | None = None
        self.stages: SparkStages | None = None
        self.observer: JobObserver | None = None
        self.query = None
        self.stream_schema = None  # the source stream's schema: an epoch without records is built from it
        self._logged_end = None  # (run id, batch id, end offsets) of the last batch: the next one's start
        self._in_epoch = False
        self._workers_used = time.monotonic()  # when a Spark task last ran in the Python workers
        self._touching: threading.Thread | None = None  # the thread running SparkStages.touch_workers
        self._unmute_query = None  # puts back the query's log level muted while keyspan stops it
        # a stop and the start of an epoch exclude each other: Spark's query.stop() interrupts the thread
        # an epoch's Spark jobs run on, and an epoch interrupted midway can leave the driver waiting forever
        self._epoch_gate = threading.Lock()
        # an epoch's commit runs while Spark logs the batch and plans the next one; the next epoch (or the
        # end of the run) waits for it, so tasks always start from the committed checkpoint
        self._committer: ThreadPoolExecutor | None = None
        self._committing: Future | None = None
        self._commit_error: BaseException | None = None
        self.rescaling: dict | None = None  # a live rescale applied, until its first epoch commits
        self.application_id = None  # the Spark application the run's epochs run in (a live rescale keeps it)
        self.on_cluster = False  # a master whose executors may run on other hosts (set with the session)

    # -- set-up ---------------------------------------------------------------------------------
    def _claim(self) -> None:
        """One driver per job: claim it in the metadata store, and keep the claim alive with
        heartbeats; losing it stops this driver's query (its commits are refused anyway)."""
        duration = load_settings().lease_seconds
        try:
            self.lease = self.store.claim_lease(self.job_id, socket.gethostname(), os.getpid(), duration)
        except LeaseHeld as exc:
            raise JobExecutionError(f"keyspan: {exc}") from None
        except OperationalError as exc:
            raise JobExecutionError(f"keyspan: job '{self.job_id}' cannot be claimed: the metadata store "
                                    f"{self.store.describe()} did not answer ({exc.orig}); is another process stuck "
                                    "holding it?") from None
        self._heartbeat_stop = threading.Event()

        def beat():
            while not self._heartbeat_stop.wait(duration / 3):
                try:
                    self.lease.renew()
                except Fenced as exc:
                    self.failure = exc
                    if self.query is not None:
                        self.query.stop()
                    return
                except Exception:  # noqa: BLE001 — a store hiccup: the next beat tries again
                    pass

        threading.Thread(target=beat, name=f"keyspan-lease-{self.job_id}", daemon=True).start()

    def _release(self) -> None:
        if self.lease is None or self._heartbeat_stop.is_set():
            return
        self._heartbeat_stop.set()
        try:
            self.lease.release()
        except Exception:  # noqa: BLE001 — the claim then simply expires
            pass

    def _start_over(self, reason: str) -> None:
        """Start the job from nothing. The checkpoints of earlier runs are moved aside, never deleted
        (only ``execute_and_collect``'s own throwaway checkpoints are)."""
        rows = self.store.list_checkpoints(self.job_id)
        if self.scratch or not (rows or self.storage.list("")):
            self.storage.delete("", recursive=True)
        else:
            moved = self._set_aside(rows)
            retained = [r["epoch"] for r in rows if not r["discarded"]]
            if retained:
                kept = (f"checkpoints {retained[0]}–{retained[-1]} were moved to {moved.uri} (restore one with "
                        f"`keyspan run -s {moved.uri}/chk-<epoch>`; delete that folder when no longer needed)")
            else:
                kept = f"files, which hold no committed checkpoint, were moved to {moved.uri} (delete that folder)"
            print(f"keyspan: job '{self.job_id}' starts from scratch: {reason}. Its {kept}", file=sys.stderr)
        self.store.forget_job(self.job_id)
        Storage(self._spark_dir_root()).delete("", recursive=True)

    def _set_aside(self, rows: list[dict]) -> Storage:
        """Move the job's checkpoint folder next to itself, with its checkpoint history in
        ``checkpoints.json``; returns where it went."""
        self.storage.write("checkpoints.json", json.dumps(rows, default=str, indent=1).encode())
        name = f"{self.job_id}.before-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
        if self.checkpoint_root.is_local:
            self.checkpoint_root.rename(self.job_id, name)
        else:
            self.storage.copy_tree("", self.checkpoint_root.child(name), "")
            self.storage.delete("", recursive=True)
        return self.checkpoint_root.child(name)

    def _spark_dir_root(self) -> str:
        """Where Spark keeps the offset logs of the job's runs: beside the checkpoints on a multi-host
        cluster, so a driver restarted on another host continues the run (Spark writes it through
        Hadoop, which has file:// and hdfs:// built in but needs extra jars for s3a://), else in the workdir."""
        if self.on_cluster and self.storage.protocol in ("file", "hdfs"):
            return self.storage.url("spark")
        return os.path.join(os.path.abspath(self.options.workdir), "spark", self.job_id)

    def _choose_run(self, latest_checkpoint, force_new: bool = False):
        """Resume the last run while its Spark offset log exists (and nothing forces a new run: a
        changed job, a fallback to an older checkpoint); otherwise start a new run that continues
        after the checkpoint restored."""
        run = self.store.latest_run(self.job_id)
        if not force_new and run and Storage(run["spark_checkpoint"]).exists("") and run["parallelism"] == self.parallelism:
            self._rewind_spark_log(run, latest_checkpoint)
            self.store.resume_run(run["run_id"])
            _mark_run(run["run_id"], ended=False)
            return run, False
        run_id = uuid.uuid4().hex[:12]
        base = latest_checkpoint["epoch"] + 1 if latest_checkpoint else 0
        spark_dir = Storage(self._spark_dir_root()).url(run_id)
        restored = f"checkpoint:{latest_checkpoint['epoch']}" if latest_checkpoint else None
        self.store.start_run(run_id, self.job_id, self.parallelism, base, spark_dir, restored, self.code_version,
                             self.fingerprint)
        return self.store.latest_run(self.job_id), True

    def _rewind_spark_log(self, run: dict, latest_checkpoint: dict | None) -> None:
        """Spark logs a batch as done when ``foreachBatch`` returns, and keyspan commits the epoch just
        after, while Spark plans the next batch: a driver that died in between left Spark's log ahead of
        the last checkpoint. Spark re-runs only a batch its log does not call done, so the entries after
        the checkpoint go; Spark then runs those batches again from the offsets it logged."""
        log_dir = Storage(run["spark_checkpoint"])
        last = (latest_checkpoint["epoch"] if latest_checkpoint else -1) - run["epoch_base"]  # its batch id
        ahead = {folder: [int(n) for n in log_dir.list(folder) if n.isdigit() and int(n) > last + keep]
                 for folder, keep in (("commits", 0), ("offsets", 1))}
        if not ahead["commits"]:
            return
        log_dir.delete_files(f"{folder}/{name}" for folder, batches in ahead.items() for batch in batches
                             for name in (batch, f".{batch}.crc"))  # Hadoop's checksum beside it, if any
        epochs = ", ".join(str(b + run["epoch_base"]) for b in sorted(ahead["commits"]))
        print(f"keyspan: job '{self.job_id}': the driver stopped after Spark logged epoch {epochs} as done but "
              "before its checkpoint committed; the epoch runs again", file=sys.stderr)

    def _finished_before(self) -> bool:
        """A bounded run that finished has nothing left to resume: running the job again starts over."""
        run = self.store.latest_run(self.job_id)
        return bool(run and run["status"] == "FINISHED" and self.store.latest_checkpoint(self.job_id) is not None)

    def _refuse_unknown_checkpoints(self) -> None:
        """A metadata store that knows no checkpoint of the job, over a checkpoint folder that holds some
        (the store was lost, or this is another one): starting from nothing would write over those
        checkpoints' restore points, so say how to restore them or set them aside instead."""
        if self.store.latest_checkpoint(self.job_id) is not None:
            return
        found = sorted(name for name in self.storage.list("") if re.fullmatch(r"chk-\d{10}", name)
                       and self.storage.exists(f"{name}/{METADATA}"))
        if found:
            newest = self.storage.url(found[-1])
            raise JobExecutionError(
                f"job '{self.job_id}': the metadata store ({self.store.describe()}) has no checkpoint of this job, "
                f"but its checkpoint folder {self.storage.uri} holds {len(found)} ({', '.join(found)}). If the "
                f"metadata store was lost or is another one, restore the newest: keyspan run -s {newest} "
                f"{self.job_file or 'JOB.py'}. To start from nothing instead, pass --fresh (the folder is moved "
                "aside, not deleted).")

    def _changed(self) -> bool:
        run = self.store.latest_run(self.job_id)
        return bool(run and run["fingerprint"] != self.fingerprint)

    def _restorable_checkpoint(self) -> dict | None:
        """The latest checkpoint whose files are all intact (checked here on the driver, before Spark
        starts). Newer ones that are not are taken out of the job's history (their rows kept in
        ``abandoned/`` beside their files), and the epochs after the one chosen are replayed ending
        at the same offsets as before, so their output files are rewritten, not duplicated."""
        candidates = self.store.list_checkpoints(self.job_id, include_discarded=False)
        if not candidates:
            return None
        chosen, rejected = integrity.newest_intact(self.storage, candidates)
        if not rejected:
            return chosen
        for epoch, why in rejected:
            print(f"keyspan: job '{self.job_id}': checkpoint {epoch} cannot be restored: {why}", file=sys.stderr)
        if chosen is None:
            raise JobExecutionError(
                f"job '{self.job_id}' cannot start: none of its retained checkpoints is intact (tried "
                f"{', '.join(str(e) for e, _ in rejected)}; see above). Restore a savepoint with -s, or start "
                "over with --fresh")
        newer = [c for c in candidates if c["epoch"] > chosen["epoch"]]
        for c in newer:
            self.storage.write(f"{ABANDONED}/{checkpoint_dir(c['epoch'])}.json", json.dumps(c, default=str).encode())
        self.store.abandon_checkpoints(self.job_id, [c["epoch"] for c in newer])
        self.replay = {str(i): [(c["source_offsets"] or {}).get(str(i)) for c in newer]
                       for i in range(len(self.plan.sources))}
        print(f"keyspan: job '{self.job_id}' falls back to checkpoint {chosen['epoch']}, the newest intact one, "
              f"and replays epochs {newer[0]['epoch']}–{newer[-1]['epoch']} from its offsets", file=sys.stderr)
        return chosen

    def _adopt_changed_job(self, latest: dict) -> dict:
        """Restore a job whose graph changed from its latest checkpoint by uid, as ``-s`` restores a
        savepoint: new operators start empty, state of operators the job no longer has is refused
        unless --allow-non-restored-state, and each source continues from its own recorded offsets."""
        uids = {o["uid"] for o in self.plan.operators}
        orphaned = sorted(uid for uid in latest["manifest"] if uid not in uids)
        if orphaned and not self.options.allow_non_restored_state:
            raise JobExecutionError(
                f"job '{self.job_id}' changed: checkpoint {latest['epoch']} has state for operator(s) "
                f"{', '.join(orphaned)} that the job no longer has. Give them their uid(...) back, or pass "
                "--allow-non-restored-state to drop that state (or --fresh to start over)")
        manifest = {uid: handles for uid, handles in latest["manifest"].items() if uid not in orphaned}
        offsets = self._map_offsets(latest)
        new = sorted(uids - set(latest["manifest"]))
        print(f"keyspan: job '{self.job_id}' changed since checkpoint {latest['epoch']}: restoring it by operator "
              f"uid" + (f"; dropping the state of {', '.join(orphaned)}" if orphaned else "") +
              (f"; operators without restored state: {', '.join(new)}" if new else ""), file=sys.stderr)
        return {**latest, "manifest": manifest, "source_offsets": offsets}

    def _map_offsets(self, latest: dict) -> dict:
        """Each source's offsets by its uid: the same input continues where it was, a new source
        starts at its beginning; a source whose input changed under the same uid cannot continue."""
        recorded = latest.get("sources")
        offsets = latest.get("source_offsets") or {}
        if recorded is None:
            if not offsets:
                return offsets
            raise JobExecutionError(
                f"job '{self.job_id}' changed, and checkpoint {latest['epoch']} does not record which source its "
                "offsets belong to (written by an older keyspan): restore a savepoint with -s, or start over "
                "with --fresh")
        mapped = {}
        for i, source in enumerate(self.source_ids):
            old = next((j for j, s in enumerate(recorded) if s["uid"] == source["uid"]), None)
            if old is None:
                mapped[str(i)] = None
            elif recorded[old]["fingerprint"] == source["fingerprint"]:
                mapped[str(i)] = offsets.get(str(old))
            else:
                raise JobExecutionError(
                    f"job '{self.job_id}': source '{source['uid']}' now reads other input than checkpoint "
                    f"{latest['epoch']} recorded offsets for, so it cannot continue from them. Start over with "
                    "--fresh, or give the new input a new uid(...) so it is read from its beginning")
        return mapped

    def _compile(self, parallelism: int) -> PhysicalPlan:
        return compile_graph(self.transformations, parallelism, self.max_parallelism,
                             chaining=self.env.is_chaining_enabled(),
                             vectorize=self.env.is_vectorized_aggregation_enabled(), batch=self.batch,
                             adaptive=adaptive_batch(self.env) if self.batch else None)

    # -- running ------------------------------------------------------------------------------
    def run(self) -> JobExecutionResult:
        self._claim()
        try:
            return self._run()
        finally:
            if self._committer is not None:
                self._committer.shutdown()  # a commit under way ends before the claim is released
            if self.stages is not None:
                self.stages.close()
            self._release()

    def _run(self) -> JobExecutionResult:
        started = time.time()
        plan = self.plan
        spark = self._spark_session()
        self._warn_generated_uids()
        savepoint = self._load_savepoint() if self.options.savepoint_path else None
        if self.fresh:
            self._start_over("--fresh was given" if self.options.fresh else "a collect run starts fresh")
        elif savepoint:
            self._start_over_from(savepoint)
        elif self._finished_before():
            self._start_over("its last run finished")
        else:
            self._refuse_unknown_checkpoints()
        self.store.register_job(self.job_id, self.job_name, self.job_file, self.code_version, self.max_parallelism)
        self._keep_job_file()
        if savepoint:
            self._commit_restore_point(savepoint)
        changed = savepoint is None and self._changed()
        latest = self._restorable_checkpoint()
        fell_back = self.replay is not None
        if latest is not None and changed:
            latest = self._adopt_changed_job(latest)
            self.replay = None
        if latest is not None and latest["max_parallelism"] != self.max_parallelism:
            raise JobExecutionError(
                f"job '{self.job_id}': checkpoint {latest['epoch']} was written with max parallelism "
                f"{latest['max_parallelism']}, the job now asks for {self.max_parallelism}. Max parallelism "
                "fixes the key groups for the life of the state; keep it, or start over with --fresh.")
        self.run_info, new_run = self._choose_run(latest, force_new=changed or fell_back)
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
        self.coordinator = CheckpointCoordinator(
            self.store, self.storage, self.job_id, retained=self.checkpoint_config.num_retained,
            tolerable_failures=self.checkpoint_config.tolerable_failures, expected=_expected_reports(plan),
            counted={s.plan.stage_id for s in plan.stages
                     if s.source is not None or s.plan.input_format == InputFormat.TYPED_KEYED},
            sinks=plan.task_sinks, operators=plan.operators, committed=latest, lease=self.lease,
            job_name=self.job_name, signing_key=self.signing_key)
        try:
            self.coordinator.publish_pending()
        except PublishFailed as exc:
            self._fail(exc)
        self.observer = JobObserver(self)

        dependencies = self.env.get_python_dependencies()
        spark_session.prepare_session(spark)
        spark_session.ship_dependencies(spark, dependencies, self.options.workdir)
        self.stages = SparkStages(plan, spark, self.env.get_max_records_per_epoch(), batch=self.batch,
                                  driver_max_records=self.env.get_small_epochs_in_driver(),
                                  driver_read_max_records=self.env.get_small_epochs_read_in_driver(),
                                  worker_per_subtask=self.env.is_python_worker_per_subtask_enabled())
        offsets = latest["source_offsets"] if (latest and new_run) else None
        if offsets is not None and not all(t.spec.restorable for t in plan.sources):
            raise JobExecutionError(
                f"job '{self.job_id}': a from_spark source resumes only from its own Spark offset log, which "
                "this run does not have (restored from a savepoint, rescaled, or the log was lost). Sources whose "
                "offsets live in keyspan's checkpoints restore from savepoints and rescale: from_collection, "
                "FileSource, KafkaSource (keyspan.datastream.connectors.kafka); use one of them instead of "
                "from_spark, or start over with --fresh")
        bounded = all(getattr(t.spec, "bounded", False) for t in plan.sources)
        try:
            stream = self.stages.source_stream(self.storage, self.parallelism, offsets,
                                               None if bounded else self._wake_file(), self.replay)
        except SourceRecordError as exc:  # e.g. a Kafka cluster that does not answer
            self._fail(exc)
        self.stream_schema = stream.schema
        writer = stream.writeStream.foreachBatch(self._run_epoch).option(
            "checkpointLocation", self.run_info["spark_checkpoint"]).queryName(f"keyspan-{self.job_id}")
        if bounded:
            writer = writer.trigger(availableNow=True)
        else:
            interval = max(self.checkpoint_config.interval_ms, self.checkpoint_config.min_pause_ms)
            writer = writer.trigger(processingTime=f"{interval} milliseconds")
        api = start_api(RunnerHandle(self)) if self.options.rest_api else None
        with spark_session.query_settings(spark, local_logs=Storage(self.run_info["spark_checkpoint"]).is_local):
            query = writer.start()
        self.query = query
        status = "FINISHED" if bounded else "STOPPED"
        try:
            while query.isActive:
                query.awaitTermination(0.2)
                self.progress.update()
                self._keep_workers()
                if self._commit_failed():  # no epoch runs to report it: stop as a failed epoch would
                    query.stop()
                    break
                if self.control.rescale_requested.is_set() and not bounded:
                    self._wake_now()  # an idle job runs an epoch for the rescale to apply at
                if self._claim_stop():
                    self._stop_with_savepoint()
                    status = "STOPPED"
                    break
            query.awaitTermination()
        except Exception as exc:  # noqa: BLE001 — Spark's wrapper of the epoch's own failure, if it stored one
            if not self.control.stopped:  # a batch Spark started while stopping ends the query with an error
                self._fail(self.failure or exc)
        finally:
            if self._unmute_query is not None:
                self._unmute_query()
            self.control.cancel_rescale(f"job '{self.job_id}' stopped before the rescale could apply")
            if self.rescaling is not None:
                self.rescaling.update(done=True, error=f"job '{self.job_id}' stopped before an epoch committed at "
                                                       f"parallelism {self.rescaling['to']}")
            self.progress.done()
            if api is not None:
                api.close()
            if self._touching is not None:  # a keep-alive job under way ends with the run
                spark.sparkContext.cancelJobGroup(self._touch_group())
                self._touching.join(KEEP_WORKERS_SECONDS)
        try:
            self._await_commit()
        except BaseException:  # noqa: BLE001 — kept in self.failure
            pass
        if self.failure is not None and (not self.control.stopped or self._commit_error is not None):
            self._fail(self.failure)  # a failed commit fails the job even when it was stopping
        if bounded and not self.control.stopped:
            try:
                if self._input_end_pending():
                    self._end_of_input()
                if self.committed is not None:
                    self.coordinator.end_of_input()  # output a compacting sink still holds back
            except Exception as exc:  # noqa: BLE001 — reported like any failed epoch
                self._fail(self.failure or exc)
        self._release()  # before the run shows as ended: whoever waits for that may start the job at once
        self.store.end_run(self.run_info["run_id"], status)
        _mark_run(self.run_info["run_id"], ended=True)
        last = self.committed["epoch"] if self.committed else None
        result = JobExecutionResult(self.job_id, self.job_name, int((time.time() - started) * 1000),
                                    self.progress.epochs, self.progress.records, last)
        result.restored_bytes = dict(self.restored_bytes)
        result.metrics = self.observer.metrics  # the job's metrics, user metrics included
        result.epoch_phases = list(self.observer.timeline)  # where recent epochs' time went (bench/latency.py)
        result.spark_progress = [dict(p.durationMs) for p in query.recentProgress]  # Spark's share of each batch
        return result

    def _spark_session(self):
        """The session given (the job's, the active one, spark-submit's) or a new one; on a multi-host
        cluster, checks that nothing the run writes lands on the driver's own disk, and ships the job's
        sibling modules to the executors."""
        conf = dict(self.options.spark_conf)
        cores = max(self.parallelism, self.autoscale.max_parallelism or 0) if self.autoscale else self.parallelism
        spark = self.env.get_spark_session() or spark_session.get_or_create_spark(
            cores, self.options.spark_master, conf, ui=self.options.spark_ui,
            dependencies=self.env.get_python_dependencies())
        master = spark.sparkContext.master
        self.application_id = spark.sparkContext.applicationId
        self.on_cluster = not spark_session.is_single_host(master)
        if self.on_cluster and not self.options.allow_local_storage:
            for what, uri in (("checkpoint storage", self.storage.uri), ("savepoint directory",
                                                                        self.options.savepoint_root())):
                if Storage(uri).is_local:
                    raise JobExecutionError(
                        f"job '{self.job_id}': {what} {uri} is on the driver's local disk, but Spark master "
                        f"{master} runs executors on other hosts that cannot read it. Use shared storage "
                        "(s3://, hdfs://), or pass --allow-local-storage (KEYSPAN_ALLOW_LOCAL_STORAGE=true) if "
                        "that path is a mount every host shares.")
        if self.on_cluster and self.options.code_dir:
            spark.sparkContext.addPyFile(_zip_modules(self.options.code_dir))
        return spark

    # -- savepoints ---------------------------------------------------------------------------------
    def _warn_generated_uids(self) -> None:
        stateful = [o for o in self.plan.operators if o["generated"] and (o["kind"] == OperatorKind.KEYED_PROCESS
                                                                        or o.get("stateful"))]
        if stateful:
            names = ", ".join(f"'{o['name']}' ({o['uid']})" for o in stateful)
            print(f"keyspan: warning: stateful operators without uid(...): {names}. Their state is keyed by an id "
                  "derived from their place in the graph; changing the job may orphan it in savepoints.",
                  file=sys.stderr)

    def _load_savepoint(self) -> dict:
        try:
            metadata = load_savepoint(self.options.savepoint_path, key=self.signing_key)
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

    def _start_over_from(self, savepoint: dict) -> None:
        """A restore from a savepoint (or retained checkpoint) begins a new history: the job's older
        checkpoints are moved aside, not deleted (also when the one restored is among them)."""
        inside = savepoint["uri"].startswith(self.storage.uri + "/")
        rows = self.store.list_checkpoints(self.job_id)
        if not (rows or self.storage.list("")):
            self.store.forget_job(self.job_id)
            return
        moved = self._set_aside(rows)
        if inside:
            savepoint["uri"] = moved.uri + savepoint["uri"][len(self.storage.uri):]
            savepoint["set_aside"] = moved.uri  # where its sources' own files went (_commit_restore_point)
        print(f"keyspan: job '{self.job_id}': its earlier checkpoints were moved to {moved.uri}", file=sys.stderr)
        self.store.forget_job(self.job_id)
        Storage(self._spark_dir_root()).delete("", recursive=True)

    def _state_keeping_readers(self, storage: Storage) -> dict:
        """Source index → a reader over the job's checkpoint ``storage``, for the sources whose readers
        keep more than offsets there (``KeyspanSource.keeps_state``)."""
        return {i: t.spec.reader(storage, source["uid"], t.name)
                for i, (t, source) in enumerate(zip(self.plan.sources, self.source_ids))
                if getattr(t.spec, "keeps_state", False)}

    def _source_state(self, readers: dict, offsets: dict | None) -> dict:
        """Source uid → what its reader keeps beside ``offsets`` (``SourceReader.savepoint_state``)."""
        kept = {}
        for i, reader in readers.items():
            state = reader.savepoint_state((offsets or {}).get(str(i)))
            if state is not None:
                kept[self.source_ids[i]["uid"]] = state
        return kept

    def _commit_restore_point(self, savepoint: dict) -> None:
        """The savepoint becomes the job's latest checkpoint; its files stay where they are (and are
        never deleted by keyspan). What its sources kept beside their offsets goes back first: from the
        savepoint, or, for a retained checkpoint, from the job's checkpoint storage set aside with it."""
        kept = savepoint.get("source_state")
        if kept is None and savepoint.get("set_aside"):
            kept = self._source_state(self._state_keeping_readers(Storage(savepoint["set_aside"])),
                                      savepoint["source_offsets"])
        for i, reader in self._state_keeping_readers(self.storage).items():
            if self.source_ids[i]["uid"] in (kept or {}):
                reader.restore_state(kept[self.source_ids[i]["uid"]])
        self.store.commit_checkpoint(
            job_id=self.job_id, epoch=savepoint["epoch"], run_id="savepoint", parallelism=savepoint["parallelism"],
            max_parallelism=savepoint["max_parallelism"], source_offsets=savepoint["source_offsets"],
            manifest=restored_manifest(savepoint), tokens={}, sinks={}, operators=savepoint["operators"],
            event_time=savepoint.get("event_time") or {}, sources=savepoint.get("sources"), fence=self.lease,
            bytes_written=0, records=0, restored_from=f"savepoint:{savepoint['uri']}",
            code_version=savepoint.get("code_version"))

    def _keep_job_file(self) -> None:
        """The job's code travels with its checkpoints, so a restart needs nothing else."""
        if self.job_bytes is None:
            return
        rel = f"job/{self.code_version}.py"
        try:  # the run's first write to its checkpoint storage
            if not self.storage.exists(rel):
                self.storage.write(rel, self.job_bytes)
        except OSError as exc:
            raise JobExecutionError(
                f"job '{self.job_id}' cannot write to its checkpoint storage {self.storage.uri} ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}). Check that the bucket or folder exists and "
                "that this process may write there, or give another --checkpoint-dir.") from exc
        self.store.set_job_copy(self.job_id, self.storage.url(rel))
        if self.options.launch is not None:  # how `keyspan run` started it: what `keyspan rescale` repeats
            self.storage.write("job/launch.json", json.dumps(self.options.launch).encode())

    def take_savepoint(self, target: str | None = None, trigger: str = "manual") -> str:
        """Materialise the latest committed checkpoint as a savepoint (a consistent cut by construction)."""
        with self.coordinator.files_lock:
            checkpoint = self.committed
            if checkpoint is None:
                raise JobExecutionError(f"job '{self.job_id}' has no committed checkpoint yet")
            root = self.env.get_default_savepoint_directory() or self.options.savepoint_root()
            target = target or default_target(root, self.job_id, checkpoint["epoch"])
            path = write_savepoint(self.storage, checkpoint, target, job_name=self.job_name,
                                   job_file_bytes=self.job_bytes, key=self.signing_key,
                                   extra={"restored_from": self.run_info.get("restored_from"),
                                          "source_state": self._source_state(self.stages.readers,
                                                                             checkpoint["source_offsets"])})
        self.store.add_savepoint(path=path, job_id=self.job_id, epoch=checkpoint["epoch"],
                                 parallelism=checkpoint["parallelism"], code_version=self.code_version,
                                 restored_from=self.run_info.get("restored_from"), trigger=trigger)
        return path

    def _claim_stop(self) -> bool:
        """Whether a requested stop goes ahead now, between two epochs; from here on no epoch starts."""
        with self._epoch_gate:
            if not self.control.stop_due(self._in_epoch):
                return False
            self._unmute_query = spark_session.mute_query_errors(self.query)  # before any batch is refused
            self.control.claim_stop()
            return True

    def _stop_with_savepoint(self) -> None:
        request = self.control.stop_request
        self.query.stop()
        try:
            self._await_commit()
        except Exception as exc:  # noqa: BLE001 — the job fails with it (self.failure); no savepoint then
            request.update(error=f"the last epoch's commit failed: {_summary(exc)}", done=True)
            return
        if request.get("drain") and self.committed is not None:  # Flink's stop --drain
            try:
                self._end_of_input()
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
        """Fail with a few readable lines (what failed, why, what to do); Spark's full Java and Python
        trace goes to a log file under the workdir, whose path the message ends with."""
        if not isinstance(exc, Fenced):  # the run row now belongs to the driver that took over
            try:
                self.store.end_run(self.run_info["run_id"], "FAILED", str(exc)[:2000])
            except Exception as store_exc:  # noqa: BLE001 — the store may be what failed: report the failure itself
                log.warning("could not record the failed run of job '%s' in the metadata store: %s", self.job_id,
                            str(store_exc).splitlines()[0])
            _mark_run(self.run_info["run_id"], ended=True)
        trace = write_failure_log(self.options.workdir, self.job_id, exc)

        def resumable(why: str) -> JobExecutionError:
            return JobExecutionError(f"job '{self.job_id}' failed: {why}\nNo state or output of the failing epoch was "
                                     f"committed; running the job again resumes from the last checkpoint."
                                     f"\nfull trace: {trace}")

        lost = _lost_jvm(exc)
        if lost is not None:  # whatever else failed with it, the JVM's end is the cause to report
            raise resumable(lost) from None
        text = str(exc)
        if PoisonRecordError.MARKER in text:  # an input record no format can read: where, why, and the log
            line = text[text.index(PoisonRecordError.MARKER) + len(PoisonRecordError.MARKER):].splitlines()[0]
            raise JobExecutionError(f"job '{self.job_id}' failed: {_sentence(line)}\nfull trace: {trace}") from None
        for marker in (UserFunctionError.MARKER, "StateSerializationError: ", "CorruptStateFile: ", SourceRecordError.MARKER):
            if marker in text:  # a user function, a state value, a state file or an input record at fault: say which
                line = _with_memory_hint(text[text.index(marker) + len(marker):].splitlines()[0], self._worker_memory_hint)
                raise JobExecutionError(f"job '{self.job_id}' failed: {_sentence(line)} No state or output of that epoch "
                                        f"was committed.\nfull trace: {trace}") from None
        if isinstance(exc, JobExecutionError):
            raise exc
        if isinstance(exc, (CheckpointFailed, Fenced)):
            raise JobExecutionError(f"{exc}\nfull trace: {trace}") from None
        if isinstance(exc, PublishFailed):
            raise JobExecutionError(f"job '{self.job_id}' failed: {exc}\nThe epoch's checkpoint is committed and "
                                    "its output is kept: running the job again publishes it first.\n"
                                    f"full trace: {trace}") from None
        unanswered = _store_unanswered(exc)
        if unanswered is not None:
            raise JobExecutionError(f"job '{self.job_id}' failed: the metadata store {self.store.describe()} did not "
                                    f"answer ({unanswered}). No state or output of the failing epoch was committed; "
                                    "once the store answers, running the job again resumes from the last checkpoint."
                                    f"\nfull trace: {trace}") from None
        raise resumable(_summary(exc, self._worker_memory_hint)) from None

    def _worker_memory_hint(self) -> str:
        """What to change when a Python worker ran out of memory, for this job's backend and Spark's cap."""
        from keyspan.state.rocksdb.backend import EmbeddedRocksDBStateBackend

        on_rocksdb = isinstance(self.env.get_state_backend(), EmbeddedRocksDBStateBackend)
        try:
            from pyspark.sql import SparkSession
            active = SparkSession.getActiveSession()
            cap = active.sparkContext.getConf().get("spark.executor.pyspark.memory") if active else None
        except Exception:  # noqa: BLE001 — a hint only; the JVM may be what ended
            cap = None
        if cap:
            return (f"Spark's Python workers may use {cap} of address space (spark.executor.pyspark.memory), and a "
                    "worker takes about 400 MB of it once pyarrow and PySpark are loaded"
                    + (" (RocksDB aborts the worker when it cannot reserve memory)" if on_rocksdb else "")
                    + ": raise it (1g or more) or unset it")
        if on_rocksdb:
            return "give Spark's executors or the machine more memory, or lower the RocksDB memory settings"
        return ("give Spark's executors or the machine more memory, or keep the state in RocksDB, which holds it "
                "on disk: -D state.backend.type=rocksdb")

    # -- one epoch ---------------------------------------------------------------------------------
    def _run_epoch(self, batch_df, batch_id: int) -> None:
        self.control.hold_epoch_for_stop()
        with self._epoch_gate:
            if self.control.stopped:
                # never return normally here: Spark would record the batch as done without its data
                raise RuntimeError(f"job '{self.job_id}' is stopping; epoch left for the next run")
            self._in_epoch = True
        try:
            waited = self._await_commit()
            request = self.control.take_rescale()
            if request is not None:
                self._rescale(request)
            epoch = self.run_info["epoch_base"] + batch_id
            if self.committed is not None and epoch <= self.committed["epoch"]:
                self.progress.skipped += 1
                return  # replayed by Spark after a crash; this epoch already committed
            start, offsets = self._batch_offsets(batch_id)
            self._process_epoch(batch_df, epoch, offsets, self.stages.input_partitions(start, offsets),
                                commit_wait=waited)
        finally:
            self._in_epoch = False

    def _await_commit(self) -> float:
        """Wait for the previous epoch's commit; its failure is raised here. Returns the seconds waited."""
        pending, self._committing = self._committing, None
        if pending is None:
            return 0.0
        started = time.perf_counter()
        pending.result()
        return time.perf_counter() - started

    def _commit_failed(self) -> bool:
        pending = self._committing
        return pending is not None and pending.done() and pending.exception() is not None

    def _end_of_input(self) -> None:
        """Bounded input that ended without every watermark origin seeing its end (a ``from_spark``
        source's offsets cannot tell): one more epoch without records, with every watermark at
        Long.MAX, fires the remaining event-time timers and windows, and the processing-time timers
        already due (in BATCH mode all of them; a bounded run whose keyed operators hold no such timers
        skips it). The run's Spark batches shift by one first, so a resumed run never maps a batch onto
        this epoch."""
        self.store.shift_epoch_base(self.run_info["run_id"], 1)
        self.run_info["epoch_base"] += 1
        empty = self.stages.spark.createDataFrame([], self.stream_schema)
        offsets = self.committed["source_offsets"]
        self._process_epoch(empty, self.committed["epoch"] + 1, offsets, self.stages.input_partitions(offsets, offsets),
                            end_of_input=True)
        self._await_commit()

    def _input_end_pending(self) -> bool:
        """Whether the end of a bounded input has timers left to fire: event-time ones, which the
        final watermark makes due, and processing-time ones already due. As in Flink, processing-time
        timers still in the future are dropped when the input ends, except in BATCH mode, where they
        all fire."""
        if self.committed is None or not self.timers_held or not any(s.plan.keyed for s in self.plan.stages):
            return False
        pending = self.next_processing_timer
        if pending is not None and (self.batch or pending <= wall_clock_ms()):
            return True
        marks = self.committed.get("event_time") or {}
        return any(marks.get(uid, {}).get("wm") != LONG_MAX for uid in self.plan.origins)

    def _process_epoch(self, batch_df, epoch: int, offsets, reads: dict, end_of_input: bool = False,
                       commit_wait: float = 0.0) -> None:
        """Run the epoch's tasks, then hand its commit to the committer thread: Spark logs the batch
        and plans the next one meanwhile, and the next epoch waits for the commit before it starts.
        ``reads``: the input partitions each keyspan source's stage reads (``SparkStages.input_partitions``)."""
        self._in_epoch = True
        self.observer.epoch_started(commit_wait)
        try:
            time_ctx = self._time_context(offsets, end_of_input)
            ctx = self._epoch_context(epoch, time_ctx, reads)
            driver_rows = []
            in_driver = [False, False]  # the epoch ran in the driver; the driver read its input

            def execute() -> list[bytes]:
                rows = self.stages.run(batch_df, ctx)
                driver_rows[:] = rows.driver
                in_driver[:] = rows.in_driver, rows.read_in_driver
                return rows.control

            reports = self.coordinator.run_epoch(epoch, execute, is_storage_failure=_storage_failure,
                                                 on_failure=self.observer.checkpoint_failed)
            self.observer.phase("tasks", **{  # the slowest task's state loading, record processing and state writes
                "tasks.restore": max((r.restore_ms for r in reports.values()), default=0) / 1000,
                "tasks.busy": max((r.busy_ms for r in reports.values()), default=0) / 1000,
                "tasks.snapshot": max((r.snapshot_ms for r in reports.values()), default=0) / 1000,
                "tasks.in_driver": in_driver[0], "tasks.read_in_driver": in_driver[1]})
            if not in_driver[0]:
                self._workers_used = time.monotonic()
            if self._committer is None:
                self._committer = ThreadPoolExecutor(1, thread_name_prefix=f"keyspan-commit-{self.job_id}")
            self._committing = self._committer.submit(self._commit, epoch, offsets, reports, driver_rows, time_ctx)
        except BaseException as exc:
            self._epoch_failed(exc)
            raise
        finally:
            self._in_epoch = False

    def _keep_workers(self) -> None:
        """Between epochs more than a minute apart, Spark would stop the Python workers that keep this
        job's operators and their state, and the next epoch would reload that state from the checkpoint
        into new workers: give the workers a task when they have had none for KEEP_WORKERS_SECONDS."""
        if self._in_epoch or time.monotonic() - self._workers_used < KEEP_WORKERS_SECONDS:
            return
        if self._touching is not None and self._touching.is_alive():
            return
        self._workers_used = time.monotonic()
        self._touching = threading.Thread(target=self._touch_workers, name=self._touch_group(), daemon=True)
        self._touching.start()

    def _touch_group(self) -> str:
        return f"keyspan-workers-{self.run_info['run_id']}"

    def _touch_workers(self) -> None:
        try:
            self.stages.touch_workers(self._touch_group(),
                                      f"keyspan: keep job '{self.job_id}'s Python workers between epochs")
        except Exception as exc:  # noqa: BLE001 — without it the next epoch only starts new workers
            if self.query is not None and not self.query.isActive:
                return  # cancelled at the end of the run
            log.warning("job '%s': could not keep Spark's Python workers between epochs (%s); the next epoch may "
                        "reload its state from the checkpoint", self.job_id, _summary(exc))

    def _epoch_failed(self, exc: BaseException) -> None:
        if not isinstance(self.failure, Fenced):  # losing the lease stops the query: that is the cause
            self.failure = exc
        if self.rescaling is not None:
            self.rescaling.update(done=True, error=f"the first epoch at parallelism {self.rescaling['to']} "
                                                   f"failed: {_summary(exc)}")
            self.rescaling = None

    def _epoch_context(self, epoch: int, time_ctx: TimeContext, reads: dict) -> EpochContext:
        committed = self.committed
        return EpochContext(
            run_id=self.run_info["run_id"], epoch=epoch,
            committed_epoch=committed["epoch"] if committed else -1,
            committed_tokens=committed["tokens"] if committed else {},
            manifest=committed["manifest"] if committed else {},
            storage=self.storage, backend=self.env.get_state_backend(),
            max_chain=self.checkpoint_config.max_delta_chain, full_all=self.parallel_changed, time=time_ctx,
            job_parameters=self.env.get_config().get_global_job_parameters(),
            recent_tokens=dict(self.recent_tokens), reads=reads, ended_runs=tuple(_ended_runs),
            state_kinds={o["uid"]: {d["name"]: d["kind"] for d in o["states"]}
                         for o in (committed or {}).get("operators") or () if o.get("states")})

    def _time_context(self, offsets, end_of_input: bool = False) -> TimeContext:
        """What every task needs to compute the watermarks after this epoch exactly as the driver will."""
        readers = self.stages.readers
        done = {int(i) for i, offset in (offsets or {}).items()
                if int(i) in readers and readers[int(i)].exhausted(offset)}
        finished = [uid for uid, o in self.plan.origins.items()
                    if end_of_input or (o["sources"] and set(o["sources"]) <= done)]
        # a source that names its splits (Kafka: the partitions of the epoch's offsets) gets per-split watermarks
        splits = {uid: names for uid, o in self.plan.origins.items() if o["source"] in readers
                  and (names := readers[o["source"]].splits((offsets or {}).get(str(o["source"])))) is not None}
        return TimeContext(origins=self.plan.origins, state=(self.committed or {}).get("event_time") or {},
                           now=wall_clock_ms(), finished=finished, splits=splits, batch=self.batch)

    def _wake_file(self) -> str:
        return os.path.join(os.path.abspath(self.options.workdir), "wake", f"{self.job_id}.json")

    def _schedule_wake(self, reports: dict, now: int) -> None:
        """Tell the sources when the job next needs an epoch without new records: the earliest pending
        processing-time timer, or an idle-split timeout that would let a watermark advance."""
        if all(getattr(t.spec, "bounded", False) for t in self.plan.sources):
            return
        wake = [r.next_timer for r in reports.values() if r.next_timer is not None]
        wake += [now + o["idleness_ms"] for o in self.plan.origins.values() if o["idleness_ms"]]
        path = self._wake_file()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"wake_at": min(wake) if wake else None}, f)
        os.replace(tmp, path)

    def _batch_offsets(self, batch_id: int) -> tuple[dict | None, dict | None]:
        """The offsets Spark's log holds for where the batch starts (None: where the stream started)
        and ends: its start is the end of the batch before, as Spark plans it."""
        start = None
        if batch_id:
            run, before, end = self._logged_end or (None, None, None)
            start = end if (run, before) == (self.run_info["run_id"], batch_id - 1) else self._read_offsets(batch_id - 1)
        end = self._read_offsets(batch_id)
        if self.stages.readers and (end is None or (batch_id and start is None)):
            missing = batch_id if end is None else batch_id - 1
            raise RuntimeError(f"job '{self.job_id}': Spark's offset log {self.run_info['spark_checkpoint']} has no "
                               f"readable entry for batch {missing}, so the epoch's input is unknown; nothing was "
                               "read or committed. Run the job again: it resumes from its last checkpoint")
        self._logged_end = (self.run_info["run_id"], batch_id, end)
        return start, end

    def _read_offsets(self, batch_id: int) -> dict | None:
        try:
            lines = Storage(self.run_info["spark_checkpoint"]).read(f"offsets/{batch_id}").decode().splitlines()
        except OSError:
            return None
        offsets = {}
        for i, line in enumerate(lines[2:]):
            offsets[str(i)] = json.loads(line) if line and line != "-" else None
        return offsets

    def _commit(self, epoch: int, offsets, reports: dict, driver_rows, time_ctx: TimeContext) -> None:
        try:
            self._commit_epoch(epoch, offsets, reports, driver_rows, time_ctx)
            self.observer.epoch_done(epoch)
        except BaseException as exc:
            self._commit_error = exc
            self._epoch_failed(exc)
            raise

    def _commit_epoch(self, epoch: int, offsets, reports: dict, driver_rows, time_ctx: TimeContext) -> None:
        splits: dict = {}
        for key, report in reports.items():
            if report.restored_bytes and self.progress.epochs == 0:
                # the run's restore; later reads are caches rebuilt on other workers or catch-ups
                self.restored_bytes[key] = report.restored_bytes
            event_time.merge_reports(splits, report.splits)
        self.committed = self.coordinator.commit(
            epoch, reports, with_commit=self.observer.committing, run_id=self.run_info["run_id"], parallelism=self.parallelism,
            max_parallelism=self.max_parallelism, source_offsets=offsets,
            restored_from=self.run_info["restored_from"], code_version=self.code_version, sources=self.source_ids,
            event_time=event_time.advance(time_ctx.origins, time_ctx.state, splits, time_ctx.now, time_ctx.finished,
                                          time_ctx.splits))
        self.observer.phase("commit", **self.coordinator.commit_seconds)
        self.recent_tokens[epoch] = self.committed["tokens"]
        self.recent_tokens.pop(epoch - RECENT_TOKEN_EPOCHS, None)
        self.parallel_changed = False
        self.timers_held = any(r.timers for r in reports.values())
        self.next_processing_timer = min((r.next_timer for r in reports.values() if r.next_timer is not None),
                                         default=None)
        self.stages.checkpointed(offsets)
        self.observer.committed(epoch, reports)
        if self.rescaling is not None:
            self._rescaled(epoch, reports)
        self._deliver(driver_rows)
        self._schedule_wake(reports, time_ctx.now)
        self.observer.phase("deliver")
        self.progress.epochs += 1
        self.progress.records += self.committed["records"]
        self.progress.last_checkpoint = epoch

    # -- live rescale ------------------------------------------------------------------------------
    def _rescale(self, request: dict) -> None:
        """Switch to the requested parallelism between two epochs, in this driver and Spark session:
        the plan is compiled again, and the next epoch's subtasks restore the key groups they now own
        (and redistributed operator state) from the committed checkpoint, as a restore would; that
        epoch writes full snapshots, so its checkpoint restores at any parallelism."""
        new, old = request["parallelism"], self.parallelism
        request.update({"from": old, "to": new, "wait_ms": (time.time() - request["requested_at"]) * 1000})
        if new == old:
            request.update(done=True, pause_ms=0.0, epoch=self.committed["epoch"] if self.committed else None)
            return
        try:
            check_parallelism(new, self.max_parallelism)
            plan = self._compile(new)
        except ValueError as exc:
            request.update(done=True, error=f"job '{self.job_id}' cannot run at parallelism {new}: {exc}")
            return
        request["moved"] = _moved_key_groups(self.plan, plan)
        self.plan, self.parallelism = plan, new
        self.stages.replan(plan)
        self.coordinator.expected = _expected_reports(plan)
        self.observer.replanned(plan)
        self.parallel_changed = True
        self.rescaling = request
        self._request_executors(new)
        print(f"keyspan: job '{self.job_id}': rescaling live from parallelism {old} to {new} ({request['reason']})",
              file=sys.stderr)

    def _rescaled(self, epoch: int, reports: dict) -> None:
        """The first epoch at the new parallelism committed: the rescale is done."""
        request, self.rescaling = self.rescaling, None
        restored = sum(r.restored_bytes for r in reports.values())
        request.update(done=True, epoch=epoch, pause_ms=(time.time() - request["requested_at"]) * 1000,
                       bytes_restored=restored)
        self.observer.rescaled(request)
        print(f"keyspan: job '{self.job_id}' runs at parallelism {request['to']} from epoch {epoch} (pause "
              f"{request['pause_ms']:.0f} ms, {request['moved']} key groups changed subtask, {restored} bytes "
              "of state restored)", file=sys.stderr)

    def _request_executors(self, parallelism: int) -> None:
        """With Spark dynamic allocation on a cluster, ask at once for as many executors as
        ``parallelism`` tasks need (``SparkContext.requestTotalExecutors``) rather than waiting for the
        allocation manager to see the new epoch's tasks pending. Without dynamic allocation a request
        would cap the application's executors, and a local master has nothing to ask for."""
        sc = self.stages.spark.sparkContext
        conf = sc.getConf()
        if not self.on_cluster or conf.get("spark.dynamicAllocation.enabled", "false").lower() != "true":
            return
        per_executor = max(1, int(conf.get("spark.executor.cores", "1")) // int(conf.get("spark.task.cpus", "1")))
        executors = -(-parallelism // per_executor)
        try:
            granted = sc._jsc.sc().requestTotalExecutors(executors, 0, sc._jvm.PythonUtils.toScalaMap({}))
        except Exception as exc:  # noqa: BLE001 — the epochs run on the executors there are
            log.warning("job '%s': asking Spark for %d executor(s) failed: %s", self.job_id, executors, exc)
            return
        log.info("job '%s': asked Spark for %d executor(s) for parallelism %d (accepted: %s)", self.job_id,
                 executors, parallelism, granted)

    def _wake_now(self) -> None:
        """Make the sources start an epoch at the next trigger even without new records."""
        path = self._wake_file()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"wake_at": wall_clock_ms()}, f)
        os.replace(tmp, path)

    def _deliver(self, driver_rows) -> None:
        by_sink: dict[int, dict[int, list]] = {}
        for subtask, payload in driver_rows:
            sink_index, records = serde.loads(payload)
            by_sink.setdefault(sink_index, {}).setdefault(subtask, []).extend(records)
        for sink_index, records_by_subtask in by_sink.items():
            spec = self.plan.driver_sinks[sink_index]
            spec.sink.deliver(spec.by_sink_subtask(records_by_subtask), spec.parallelism)


def _expected_reports(plan) -> list[tuple[int, int]]:
    """(stage, parallelism) of every stage each of whose subtasks must report for an epoch to commit."""
    return [(s.plan.stage_id, s.plan.parallelism) for s in plan.stages
            if s.source is None and s.plan.input_format != InputFormat.PUSHED_DOWN]


def _moved_key_groups(old_plan, new_plan) -> int:
    """Key groups of keyed stages whose owning subtask changes between the two plans."""
    moved = 0
    for before, after in zip(old_plan.stages, new_plan.stages):
        if not after.plan.keyed or before.plan.parallelism == after.plan.parallelism:
            continue
        m = after.plan.max_parallelism
        moved += sum(compute_operator_index_for_key_group(m, before.plan.parallelism, kg)
                     != compute_operator_index_for_key_group(m, after.plan.parallelism, kg) for kg in range(m))
    return moved


def adaptive_batch(env) -> AdaptiveBatch | None:
    """Flink's ``execution.batch.adaptive.auto-parallelism.*`` keys given to ``env.configure`` (None:
    turned off, every operator at the job's parallelism)."""
    from keyspan.datastream.configuration_keys import ADAPTIVE_BATCH, memory_bytes

    conf = env.get_configuration().to_dict()
    if conf.get(ADAPTIVE_BATCH + "enabled", "true").strip().lower() == "false":
        return None
    number = {name: int(conf[ADAPTIVE_BATCH + name]) for name in
              ("min-parallelism", "max-parallelism", "default-source-parallelism") if ADAPTIVE_BATCH + name in conf}
    volume = conf.get(ADAPTIVE_BATCH + "avg-data-volume-per-task")
    return AdaptiveBatch(min_parallelism=number.get("min-parallelism", 1),
                         max_parallelism=number.get("max-parallelism"),
                         source_parallelism=number.get("default-source-parallelism"),
                         **({"bytes_per_task": memory_bytes(ADAPTIVE_BATCH, volume)} if volume else {}))


def _batch_mode(env, sources: list, job_id: str) -> bool:
    """BATCH (or AUTOMATIC with only bounded sources): the whole input in one epoch."""
    from keyspan.datastream.execution_mode import RuntimeExecutionMode

    mode = env.get_runtime_mode()
    bounded = all(getattr(t.spec, "bounded", False) for t in sources)
    if mode == RuntimeExecutionMode.BATCH and not bounded:
        unbounded = [t.name for t in sources if not getattr(t.spec, "bounded", False)]
        raise JobExecutionError(f"job '{job_id}': BATCH execution mode needs bounded sources, but "
                                f"{', '.join(unbounded)} is unbounded; use RuntimeExecutionMode.STREAMING "
                                "(or AUTOMATIC), or make the source bounded")
    return mode == RuntimeExecutionMode.BATCH or (mode == RuntimeExecutionMode.AUTOMATIC and bounded)


def _summary(exc: BaseException, memory_hint=None) -> str:
    """The line of a (Spark-wrapped) failure that says what went wrong: the last Python error line of
    a task's trace, or the exception's own first line. ``memory_hint()`` says what to change when a
    Python worker ran out of memory."""
    text = str(exc)
    crash = re.search(r"Python worker exited unexpectedly \(crashed\)[^\n]*", text)
    if crash:  # the OS (or a memory cap) killed a worker: no Python error line says so
        why = "A worker that is killed mid-task most often ran out of memory"
        hint = (memory_hint() if memory_hint else
                "see the worker memory settings, or use EmbeddedRocksDBStateBackend for large state")
        return f"{_sentence(crash.group(0).strip())} {why}: {hint}"[:800]
    errors = [line.strip() for line in text.splitlines()
              if re.match(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)(: |$)", line)
              and not line.strip().startswith(("org.apache", "java.", "py4j", "scala."))]
    line = errors[-1] if errors else (text.strip().splitlines() or [type(exc).__name__])[0]
    return _with_memory_hint(line[:500], memory_hint)


def _with_memory_hint(line: str, memory_hint) -> str:
    """A failure line of a worker's MemoryError, with what to change."""
    if memory_hint is None or not re.search(r"\bMemoryError\b", line):
        return line
    if line.strip() == "MemoryError":
        line = "a Python worker ran out of memory (MemoryError)"
    return f"{line.rstrip('.')}: {memory_hint()}"


def _caused_by(exc: BaseException, what) -> BaseException | None:
    """The first exception in ``exc``'s chain of causes for which ``what(e)`` holds."""
    seen: BaseException | None = exc
    while seen is not None:
        if what(seen):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _store_unanswered(exc: BaseException) -> str | None:
    """What the database driver said, when the failure is the metadata store not answering."""
    found = _caused_by(exc, lambda e: isinstance(e, OperationalError))
    return None if found is None else (str(found.orig).splitlines() or [type(found.orig).__name__])[0]


def _lost_jvm(exc: BaseException) -> str | None:
    """py4j's words when Spark's JVM is gone ("Connection refused", "Answer from Java side is empty",
    or only "An error occurred while calling o283.mapInArrow") do not say that the JVM exited or was
    killed: say it."""
    found = _caused_by(exc, lambda e: isinstance(e, Py4JNetworkError) or (isinstance(e, ConnectionError) and any(
        "py4j" in frame.filename for frame in traceback.extract_tb(e.__traceback__))))
    if found is None:
        found = _caused_by(exc, lambda e: isinstance(e, Py4JError) and not isinstance(e, Py4JJavaError))
        # any other failure of a run whose JVM has exited (e.g. raised while an epoch lost its JVM) is that
        if not _jvm_exited(wait_s=1.0 if found is not None else 0.0):
            return None
        found = found or exc
    said = str(found).splitlines()[0] if str(found) else type(found).__name__
    return (f"Spark's driver JVM stopped answering ({said}): it exited or was killed; a JVM the system "
            "kills has most often run out of memory (raise spark.driver.memory)")


def _jvm_exited(wait_s: float = 1.0) -> bool:
    """Whether the Spark JVM this driver started has exited (waiting a moment: its socket closes
    just before the process ends)."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    deadline = time.monotonic() + wait_s
    while proc is not None:
        if proc.poll() is not None:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return False


def _zip_modules(code_dir: str) -> str:
    """The job folder's Python files in one zip for ``SparkContext.addPyFile``: executors on other
    hosts import the job's own modules from it."""
    code_dir = os.path.abspath(code_dir)
    fd, path = tempfile.mkstemp(prefix="keyspan-code-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for folder, dirs, files in os.walk(code_dir):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "venv", "node_modules")]
            for name in files:
                if name.endswith(".py"):
                    full = os.path.join(folder, name)
                    z.write(full, os.path.relpath(full, code_dir))
    return path


def _storage_failure(exc: BaseException) -> str | None:
    """A storage error inside a failed epoch, unless a user function failed (that is the user's to fix)."""
    text = f"{exc}\n" + "\n".join(getattr(exc, "__notes__", ()))
    return None if UserFunctionError.MARKER in text else storage_failure(exc)
