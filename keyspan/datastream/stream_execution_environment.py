"""``StreamExecutionEnvironment``: builds the job graph; ``execute`` runs it on Spark."""

from __future__ import annotations

import copy
import itertools

from keyspan.common.configuration import Configuration
from keyspan.common.execution_config import ExecutionConfig
from keyspan.common.io import InputFormat
from keyspan.common.job_execution_result import JobExecutionResult
from keyspan.datastream.checkpoint_config import CheckpointConfig
from keyspan.datastream.execution_mode import RuntimeExecutionMode
from keyspan.datastream.time_characteristic import TimeCharacteristic
from keyspan.datastream.data_stream import DataStream
from keyspan.datastream.transformation import (
    VIRTUAL_KINDS,
    OperatorKind,
    Transformation,
    execution_plan,
    with_inputs,
)
from keyspan.state.heap import HashMapStateBackend
from keyspan.state.keygroups import DEFAULT_MAX_PARALLELISM, check_parallelism

DEFAULT_SMALL_EPOCHS_READ_IN_DRIVER = 5_000  # records; a few ms of the driver's time (docs/benchmarks.md)


class PythonDependencies:
    """Files a job needs on Spark's executors, set through the environment's add_* methods."""

    def __init__(self):
        self.jars: list[str] = []
        self.python_files: list[str] = []
        self.archives: list[tuple[str, str | None]] = []
        self.requirements: tuple[str, str | None] | None = None
        self.python_executable: str | None = None


class StreamExecutionEnvironment:
    def __init__(self):
        self._transformations: list[Transformation] = []
        self._ids = itertools.count(1)
        self._parallelism = 1
        self._max_parallelism = DEFAULT_MAX_PARALLELISM
        self._checkpoint_config = CheckpointConfig()
        self._state_backend = HashMapStateBackend()
        self._max_records_per_epoch: int | None = None
        self._small_epochs_in_driver = 0
        self._small_epochs_read_in_driver = DEFAULT_SMALL_EPOCHS_READ_IN_DRIVER
        self._spark = None
        self._config = ExecutionConfig(self)
        self._time_characteristic = TimeCharacteristic.EventTime
        self._runtime_mode = RuntimeExecutionMode.STREAMING
        self._dependencies = PythonDependencies()
        self._buffer_timeout = 100
        self._chaining = True
        self._vectorized_aggregation = True
        self._python_worker_per_subtask = True
        self._default_savepoint_dir: str | None = None
        self._restart_strategy = None
        self._configuration = Configuration()  # every key given to configure(), also those only the runtime reads

    @staticmethod
    def get_execution_environment(configuration=None) -> "StreamExecutionEnvironment":
        env = StreamExecutionEnvironment()
        if configuration is not None:
            env.configure(configuration)
        return env

    def configure(self, configuration) -> "StreamExecutionEnvironment":
        """Apply the keys of a ``Configuration`` that keyspan supports (docs/compatibility.md lists
        them); a key that is not set leaves its setting untouched, other keys are ignored."""
        from keyspan.datastream.configuration_keys import apply

        apply(self, configuration)
        data = configuration.to_dict() if hasattr(configuration, "to_dict") else dict(configuration)
        for key, value in data.items():
            self._configuration.set_string(key, value)
        return self

    def get_configuration(self) -> Configuration:
        """A copy of the keys given to ``configure`` (Flink's ``getConfiguration``); the runtime reads
        the ones only it acts on from here, such as ``job.autoscaler.*``."""
        return Configuration(self._configuration)

    # configuration ------------------------------------------------------------------------
    def set_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        """As Flink's: ``ExecutionConfig.PARALLELISM_DEFAULT`` (-1) goes back to the default (1),
        ``PARALLELISM_UNKNOWN`` (-2) changes nothing."""
        if parallelism == ExecutionConfig.PARALLELISM_UNKNOWN:
            return self
        if parallelism < 1 and parallelism != ExecutionConfig.PARALLELISM_DEFAULT:
            raise ValueError(f"Parallelism must be at least one, or ExecutionConfig.PARALLELISM_DEFAULT "
                             f"(use system default), got {parallelism}")
        self._parallelism = int(parallelism)
        return self

    def get_parallelism(self) -> int:
        return self._parallelism

    def set_max_parallelism(self, max_parallelism: int) -> "StreamExecutionEnvironment":
        check_parallelism(1, max_parallelism)
        self._max_parallelism = int(max_parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self._max_parallelism

    def enable_checkpointing(self, interval: int, mode=None) -> "StreamExecutionEnvironment":
        self._checkpoint_config.set_checkpoint_interval(interval)
        if mode is not None:
            self._checkpoint_config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        return self._checkpoint_config

    def get_checkpointing_mode(self):
        return self._checkpoint_config.get_checkpointing_mode()

    get_checkpointing_consistency_mode = get_checkpointing_mode

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self._checkpoint_config.is_unaligned_checkpoints_enabled()

    def is_force_unaligned_checkpoints(self) -> bool:
        return self._checkpoint_config.is_force_unaligned_checkpoints()

    def set_default_savepoint_directory(self, directory: str) -> "StreamExecutionEnvironment":
        """Where savepoints go when no target is given (else KEYSPAN_SAVEPOINT_DIR or the workdir)."""
        self._default_savepoint_dir = directory
        return self

    def get_default_savepoint_directory(self) -> str | None:
        return self._default_savepoint_dir

    def set_default_local_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        """keyspan has one parallelism setting: this sets it (Spark's local mode runs it)."""
        return self.set_parallelism(parallelism)

    def get_default_local_parallelism(self) -> int:
        """The parallelism operators without their own run at."""
        return 1 if self._parallelism == ExecutionConfig.PARALLELISM_DEFAULT else self._parallelism

    def is_chaining_of_operators_with_different_max_parallelism_enabled(self) -> bool:
        return True  # every operator is keyed with the job's max parallelism

    def get_config(self) -> ExecutionConfig:
        return self._config

    def set_stream_time_characteristic(self, characteristic: TimeCharacteristic) -> "StreamExecutionEnvironment":
        """Deprecated in Flink and accepted here: streams with a WatermarkStrategy run in event time."""
        if not isinstance(characteristic, TimeCharacteristic):
            raise TypeError(f"expected a TimeCharacteristic, got {characteristic!r}")
        self._time_characteristic = characteristic
        return self

    def get_stream_time_characteristic(self) -> TimeCharacteristic:
        return self._time_characteristic

    def get_checkpoint_interval(self) -> int:
        return self._checkpoint_config.interval_ms

    def set_restart_strategy(self, restart_strategy_configuration) -> "StreamExecutionEnvironment":
        """How the driver restarts the job from its latest checkpoint after a failure (PyFlink's
        ``RestartStrategies``); without one, ``keyspan run --restart-attempts`` decides."""
        from keyspan.common.restart_strategy import RestartStrategyConfiguration

        if not isinstance(restart_strategy_configuration, RestartStrategyConfiguration):
            raise TypeError(f"expected a RestartStrategies configuration, got {restart_strategy_configuration!r}")
        self._restart_strategy = restart_strategy_configuration
        return self

    def get_restart_strategy(self):
        """The strategy set with ``set_restart_strategy`` (fall-back restart when none was set)."""
        from keyspan.common.restart_strategy import RestartStrategies

        return self._restart_strategy or RestartStrategies.fall_back_restart()

    def set_state_backend(self, state_backend) -> "StreamExecutionEnvironment":
        """A legacy backend's checkpoint directory (``FsStateBackend(uri)``) becomes the checkpoint storage."""
        self._state_backend = state_backend
        path = getattr(state_backend, "checkpoint_path", None)
        if path:
            self._checkpoint_config.set_checkpoint_storage_dir(path)
        return self

    def set_runtime_mode(self, execution_mode: RuntimeExecutionMode) -> "StreamExecutionEnvironment":
        """BATCH runs a bounded job's whole input as one epoch; see ``RuntimeExecutionMode``."""
        if not isinstance(execution_mode, RuntimeExecutionMode):
            raise TypeError(f"set_runtime_mode needs a RuntimeExecutionMode, got {execution_mode!r}")
        self._runtime_mode = execution_mode
        return self

    def get_runtime_mode(self) -> RuntimeExecutionMode:
        return self._runtime_mode

    # no-ops: Spark schedules and shuffles --------------------------------------------------
    def set_buffer_timeout(self, timeout_millis: int) -> "StreamExecutionEnvironment":
        """Accepted: records leave a stage in chunks at the end of each epoch; the epoch trigger
        interval (``enable_checkpointing``) is what bounds latency."""
        self._buffer_timeout = int(timeout_millis)
        return self

    def get_buffer_timeout(self) -> int:
        return self._buffer_timeout

    def disable_operator_chaining(self) -> "StreamExecutionEnvironment":
        """Every operator gets its own stage (its own Spark task), as ``disable_chaining`` on each."""
        self._chaining = False
        return self

    def is_chaining_enabled(self) -> bool:
        return self._chaining

    def set_vectorized_aggregation(self, enabled: bool) -> "StreamExecutionEnvironment":
        """keyspan: run known aggregations (``KeyedStream.sum`` …, windows with ``keyspan.datastream.aggregates``)
        a chunk of records at a time (on by default); off, every record goes through Python one by one.
        Results and state are the same either way (docs/aggregations.md)."""
        self._vectorized_aggregation = bool(enabled)
        return self

    def is_vectorized_aggregation_enabled(self) -> bool:
        return self._vectorized_aggregation

    def set_python_worker_per_subtask(self, enabled: bool) -> "StreamExecutionEnvironment":
        """keyspan: give each subtask of the job's last keyed operators Python workers of its own (on by
        default; with more subtasks than an executor has cores, they share that many pools of workers),
        so a subtask's state stays in the process that ran its last epoch. Off, Spark gives a task to
        any idle Python worker, which then first applies what other workers changed since it last ran
        the subtask. On costs a second set of Python workers, about one per core (docs/deployment.md)."""
        self._python_worker_per_subtask = bool(enabled)
        return self

    def is_python_worker_per_subtask_enabled(self) -> bool:
        return self._python_worker_per_subtask

    def register_slot_sharing_group(self, slot_sharing_group) -> "StreamExecutionEnvironment":
        """Accepted: Spark places tasks; there are no slots to share."""
        return self

    # dependencies shipped to Spark executors ----------------------------------------------
    def add_jars(self, *jars_path: str) -> "StreamExecutionEnvironment":
        """Jars for Spark (``spark.jars``): a Spark source's JVM connector, for example."""
        self._dependencies.jars.extend(jars_path)
        return self

    def add_classpaths(self, *classpaths: str) -> "StreamExecutionEnvironment":
        """Classpath URLs, passed to Spark like ``add_jars`` (``spark.jars``)."""
        self._dependencies.jars.extend(classpaths)
        return self

    def add_python_file(self, file_path: str) -> "StreamExecutionEnvironment":
        """A .py, .zip or .egg file (or a directory, zipped) for the Python workers (``SparkContext.addPyFile``)."""
        self._dependencies.python_files.append(file_path)
        return self

    def add_python_archive(self, archive_path: str, target_dir: str | None = None) -> "StreamExecutionEnvironment":
        """An archive unpacked in every executor's working directory, under ``target_dir`` if given
        (``SparkContext.addArchive(path#target_dir)``)."""
        self._dependencies.archives.append((archive_path, target_dir))
        return self

    def set_python_requirements(self, requirements_file_path: str,
                                requirements_cache_dir: str | None = None) -> "StreamExecutionEnvironment":
        """Pip-installs the requirements (from ``requirements_cache_dir`` only, if given) into a
        directory that is shipped to the Python workers as a zip on their path (pure-Python packages)."""
        self._dependencies.requirements = (requirements_file_path, requirements_cache_dir)
        return self

    def set_python_executable(self, python_exec: str) -> "StreamExecutionEnvironment":
        """The Python the workers run (``spark.pyspark.python``), unless PYSPARK_PYTHON or a session already set it."""
        self._dependencies.python_executable = python_exec
        return self

    def get_python_dependencies(self) -> "PythonDependencies":
        """keyspan: what add_jars/add_python_file/... collected (the runtime ships it to Spark)."""
        return self._dependencies

    def get_state_backend(self):
        return self._state_backend

    def set_max_records_per_epoch(self, records: int) -> "StreamExecutionEnvironment":
        """keyspan: cap how many records a keyspan source admits per epoch (micro-batch)."""
        if records < 1:
            raise ValueError("max records per epoch must be >= 1")
        self._max_records_per_epoch = int(records)
        return self

    def get_max_records_per_epoch(self) -> int | None:
        return self._max_records_per_epoch

    def set_small_epochs_in_driver(self, max_records: int) -> "StreamExecutionEnvironment":
        """keyspan: run an epoch whose input holds at most ``max_records`` records in the driver process
        instead of as Spark jobs (0, the default: never). Spark's jobs cost an epoch a few hundred ms
        whatever it holds; a small epoch takes the driver a few ms, so results of a small stream arrive
        sooner. Same results, checkpoints and guarantees; the driver then holds the state of the
        subtasks it ran. Only for jobs whose sources are all keyspan sources (docs/architecture.md)."""
        if max_records < 0:
            raise ValueError("max records of an epoch run in the driver must be >= 0 (0: never)")
        self._small_epochs_in_driver = int(max_records)
        return self

    def get_small_epochs_in_driver(self) -> int:
        return self._small_epochs_in_driver

    def set_small_epochs_read_in_driver(self, max_records: int) -> "StreamExecutionEnvironment":
        """keyspan: the driver reads an epoch's input of at most ``max_records`` records itself and runs
        the operators chained to the sources, then hands each subtask of the next operators its records
        directly (by default 5,000; 0: never). Those operators, and the keyed state, still run as Spark
        tasks, but Spark runs one stage per epoch instead of two and an exchange: about half an epoch's
        fixed cost, which sets the latency of a small stream. Same results, checkpoints and guarantees.
        Only for jobs whose sources are all keyspan sources and whose sources feed a ``key_by`` or other
        repartitioning (docs/architecture.md)."""
        if max_records < 0:
            raise ValueError("max records of an epoch whose input the driver reads must be >= 0 (0: never)")
        self._small_epochs_read_in_driver = int(max_records)
        return self

    def get_small_epochs_read_in_driver(self) -> int:
        return self._small_epochs_read_in_driver

    def set_spark_session(self, spark) -> "StreamExecutionEnvironment":
        """keyspan: run on this SparkSession instead of the active (or a new local) one."""
        self._spark = spark
        return self

    def get_spark_session(self):
        """The SparkSession set with ``set_spark_session`` (None: the active or a new local one)."""
        return self._spark

    def get_transformations(self) -> list[Transformation]:
        """keyspan: the job graph built so far, in the order it was built (what ``execute`` runs)."""
        return list(self._transformations)

    def _take_transformations(self, collected: Transformation | None = None) -> list[Transformation]:
        """The job graph, handed to the run that ``execute`` starts. As in PyFlink, the environment is
        then empty: the next ``execute`` runs what was built after this one, with the streams it reads
        (a source this job ran runs again there), and none of this job's other operators.
        ``execute_and_collect`` gives its collect sink: as in PyFlink, its job runs only that sink and
        the streams it reads, and drops every other operator built so far, unrun."""
        job = with_inputs([collected] if collected is not None else self._transformations)
        if not self._config.has_auto_generated_uids_enabled():
            self._check_uids(job)
        self._transformations = []
        return job

    @staticmethod
    def _check_uids(job: list[Transformation]) -> None:
        """With ``get_config().disable_auto_generated_uids()``, every operator the job built needs a uid,
        as in Flink (the collect sink ``execute_and_collect`` adds holds no state and is left out)."""
        from keyspan.connectors.driver_sinks import CollectSink

        for t in job:
            if t.kind not in VIRTUAL_KINDS and not t.uid and not isinstance(t.spec, CollectSink):
                raise ValueError(
                    f"Auto generated UIDs have been disabled but no UID or hash has been assigned to operator "
                    f"{t.name}: give it one with .uid(...) (a uid ties the operator to its state in checkpoints "
                    "and savepoints), or call env.get_config().enable_auto_generated_uids()")

    # sources ---------------------------------------------------------------------------
    def _add_transformation(self, kind, name, inputs, function=None, output_type=None, key_selector=None,
                            spec=None) -> Transformation:
        t = Transformation(next(self._ids), kind, name, list(inputs), function=function, key_selector=key_selector,
                           output_type=output_type, spec=spec)
        self._transformations.append(t)
        return t

    def from_collection(self, collection, type_info=None) -> DataStream:
        from keyspan.connectors.sources import CollectionSource

        spec = CollectionSource(list(collection), type_info)
        return DataStream(self, self._add_transformation(OperatorKind.SOURCE, "Collection Source", [], output_type=type_info,
                                                         spec=spec))

    def from_source(self, source, watermark_strategy=None, source_name: str = "Source", type_info=None) -> DataStream:
        if type_info is None and hasattr(source, "get_produced_type"):  # as Flink asks a source for its type
            type_info = source.get_produced_type()
        # each stream reads its own copy of the source with its own strategy: one source object may feed
        # several streams (as in PyFlink), and the strategy's later changes do not reach this stream
        spec = copy.copy(source)
        spec.watermark_strategy = copy.copy(watermark_strategy)
        return DataStream(self, self._add_transformation(OperatorKind.SOURCE, source_name, [], output_type=type_info,
                                                         spec=spec))

    def add_source(self, source_func, source_name: str = "Custom Source", type_info=None) -> DataStream:
        """PyFlink's legacy entry for source functions such as ``FlinkKafkaConsumer``; a Java
        SourceFunction has no keyspan counterpart."""
        if not hasattr(source_func, "reader"):
            raise NotImplementedError(
                f"not supported by keyspan: add_source({type(source_func).__name__}) takes a Java SourceFunction; "
                "use env.from_source(...) with a keyspan source (FileSource, KafkaSource, NumberSequenceSource), "
                "env.from_collection(...) or env.from_spark(spark.readStream...) instead")
        return self.from_source(source_func, None, source_name, type_info)

    def from_spark(self, dataframe, source_name: str = "Spark Source", bounded: bool = False) -> DataStream:
        """keyspan: any Spark streaming DataFrame becomes a DataStream of ``Row`` records; ``bounded``
        processes what is available at start (Spark's availableNow trigger) and then finishes."""
        from keyspan.connectors.sources import SparkSource

        if not dataframe.isStreaming:
            raise ValueError("from_spark needs a streaming DataFrame (spark.readStream...); "
                             "use from_collection for bounded in-memory data")
        return DataStream(self, self._add_transformation(OperatorKind.SOURCE, source_name, [], spec=SparkSource(dataframe, bounded)))

    # execution -------------------------------------------------------------------------
    def execute(self, job_name: str | None = None) -> JobExecutionResult:
        """Run the job; continues from its latest checkpoint if its last run was interrupted."""
        from keyspan.runtime import options as run_options
        from keyspan.runtime.executor import run_with_restarts

        return run_with_restarts(self, self._take_transformations(), job_name or "keyspan-job", run_options.current())

    def execute_async(self, job_name: str = "Flink Streaming Job"):
        """Start the job in a background thread; the ``JobClient`` follows and controls it."""
        return self._start_async(job_name, fresh=False)

    def _start_async(self, job_name: str, fresh: bool, collected: Transformation | None = None):
        from concurrent.futures import Future
        import threading

        from keyspan.common.job_client import JobClient
        from keyspan.runtime import options as run_options
        from keyspan.runtime.executor import JobRunner

        runner = JobRunner(self, self._take_transformations(collected), job_name, run_options.current(), fresh=fresh)
        done: Future = Future()

        def run():
            try:
                done.set_result(runner.run())
            except BaseException as exc:  # noqa: BLE001 — handed to the JobClient's futures
                done.set_exception(exc)
        threading.Thread(target=run, name=f"keyspan-{job_name}", daemon=True).start()
        return JobClient(runner, done)

    def _execute_fresh(self, job_name: str, collected: Transformation) -> JobExecutionResult:
        """``execute_and_collect`` hands results to this process only, so it never resumes an old run."""
        from keyspan.runtime import options as run_options
        from keyspan.runtime.executor import run_with_restarts

        return run_with_restarts(self, self._take_transformations(collected), job_name, run_options.current(),
                                 fresh=True)

    def get_execution_plan(self) -> str:
        """The job graph as JSON shaped like Flink's (``nodes`` with id, type, pact, contents,
        parallelism and ``predecessors`` with ship_strategy)."""
        return execution_plan(with_inputs(self._transformations), self.get_default_local_parallelism())

    def close(self) -> None:
        """Nothing to release: the SparkSession outlives the environment."""

    # not supported ----------------------------------------------------------------------
    def register_cached_file(self, file_path: str, name: str, executable: bool = False):
        raise NotImplementedError(
            f"not supported by keyspan: register_cached_file('{name}'), Flink's distributed cache for Java "
            "functions; ship files that Python functions read with env.add_python_file(...)")

    def create_input(self, input_format, type_info=None) -> DataStream:
        """A bounded stream of an input format's records: keyspan's ``AvroInputFormat``."""
        if not isinstance(input_format, InputFormat):
            raise NotImplementedError(
                f"not supported by keyspan: create_input({type(input_format).__name__}) takes a Java InputFormat; "
                f"use AvroInputFormat, env.from_source(FileSource...) or env.from_spark(...) instead")
        return self.from_source(input_format.file_source(), None, "Custom Source",
                                type_info or input_format.get_produced_type())

    def enable_changelog_state_backend(self, enabled: bool) -> "StreamExecutionEnvironment":
        """Accepted: keyspan's checkpoints are already incremental (each epoch writes its changes)."""
        return self

    def is_changelog_state_backend_enabled(self) -> bool:
        return False
