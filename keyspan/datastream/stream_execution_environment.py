"""``StreamExecutionEnvironment``: builds the job graph; ``execute`` runs it on Spark."""

from __future__ import annotations

import itertools

from keyspan.common.execution_config import ExecutionConfig
from keyspan.common.job_execution_result import JobExecutionResult
from keyspan.datastream.checkpoint_config import CheckpointConfig
from keyspan.datastream.time_characteristic import TimeCharacteristic
from keyspan.datastream.data_stream import DataStream
from keyspan.datastream.transformation import OperatorKind, Transformation
from keyspan.state.heap import HashMapStateBackend
from keyspan.state.keygroups import DEFAULT_MAX_PARALLELISM, check_parallelism


class StreamExecutionEnvironment:
    def __init__(self):
        self._transformations: list[Transformation] = []
        self._ids = itertools.count(1)
        self._parallelism = 1
        self._max_parallelism = DEFAULT_MAX_PARALLELISM
        self._checkpoint_config = CheckpointConfig()
        self._state_backend = HashMapStateBackend()
        self._max_records_per_epoch: int | None = None
        self._spark = None
        self._config = ExecutionConfig()
        self._time_characteristic = TimeCharacteristic.EventTime

    @staticmethod
    def get_execution_environment(configuration=None) -> "StreamExecutionEnvironment":
        env = StreamExecutionEnvironment()
        if configuration is not None:
            parallelism = configuration.get_integer("parallelism.default", 0)
            if parallelism:
                env.set_parallelism(parallelism)
        return env

    # configuration ------------------------------------------------------------------------
    def set_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        if parallelism < 1:
            raise ValueError(f"parallelism must be at least 1, got {parallelism}")
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

    def set_state_backend(self, state_backend) -> "StreamExecutionEnvironment":
        self._state_backend = state_backend
        return self

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
        t = self._add_transformation(OperatorKind.SOURCE, source_name, [], output_type=type_info, spec=source)
        t.spec.watermark_strategy = watermark_strategy
        return DataStream(self, t)

    def add_source(self, source_func, source_name: str = "Custom Source", type_info=None) -> DataStream:
        """PyFlink's legacy entry for source functions such as ``FlinkKafkaConsumer``."""
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
        from keyspan.runtime.executor import JobRunner

        return JobRunner(self, job_name or "keyspan-job", run_options.current()).run()

    def _execute_fresh(self, job_name: str) -> JobExecutionResult:
        """``execute_and_collect`` hands results to this process only, so it never resumes an old run."""
        from keyspan.runtime import options as run_options
        from keyspan.runtime.executor import JobRunner

        return JobRunner(self, job_name, run_options.current(), fresh=True).run()
