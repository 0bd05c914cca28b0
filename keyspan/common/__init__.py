"""PyFlink's ``pyflink.common`` names used by DataStream jobs."""

from keyspan.common.time import Duration, Instant, Time
from keyspan.common.typeinfo import TypeInformation, Types
from keyspan.common.types import Row, RowKind
from keyspan.common.serialization import (
    ByteArraySchema, DeserializationSchema, Encoder, SerializationSchema, SimpleStringSchema,
)
# PyFlink still offers the row formats here, for jobs written before they moved to pyflink.datastream.formats
from keyspan.common.serialization import (  # noqa: F401
    AvroRowDeserializationSchema, AvroRowSerializationSchema, CsvRowDeserializationSchema, CsvRowSerializationSchema,
    JsonRowDeserializationSchema, JsonRowSerializationSchema,
)
from keyspan.common.configuration import Configuration
from keyspan.common.execution_config import ExecutionConfig
from keyspan.common.job_execution_result import JobExecutionResult
from keyspan.common.completable_future import CompletableFuture
from keyspan.common.job_client import JobClient
from keyspan.common.job_id import JobID
from keyspan.common.job_status import JobStatus
from keyspan.common.restart_strategy import RestartStrategies, RestartStrategyConfiguration
from keyspan.common.watermark_strategy import TimestampAssigner, WatermarkStrategy

__all__ = ["Row", "RowKind", "Types", "TypeInformation", "Duration", "Instant", "Time", "Encoder", "SerializationSchema",
           "DeserializationSchema", "SimpleStringSchema", "ByteArraySchema", "Configuration", "ExecutionConfig", "JobExecutionResult",
           "RestartStrategies", "RestartStrategyConfiguration",
           "TimestampAssigner", "WatermarkStrategy", "CompletableFuture", "JobClient", "JobID", "JobStatus"]

from keyspan.common.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("keyspan.common", {
    "ExecutionMode": "a batch-only setting of Flink's DataSet runtime; use "
                     "env.set_runtime_mode(RuntimeExecutionMode.BATCH) (keyspan.datastream) instead",
    "InputDependencyConstraint": "a batch-only scheduling setting of Flink's DataSet runtime; keyspan's "
                                 "epochs schedule every stage as Spark jobs",
    "ConfigOption": "typed options of Flink's JVM configuration; set an option by its key with "
                    "Configuration.set_string/set_integer/set_boolean or keyspan run -D key=value instead",
    "ConfigOptions": "typed options of Flink's JVM configuration; set an option by its key with "
                     "Configuration.set_string/set_integer/set_boolean or keyspan run -D key=value instead",
    "TypeSerializer": "records are pickled by Python; declare record types with Types (keyspan.common) instead",
    "AssignerWithPeriodicWatermarksWrapper": "it wraps a JVM watermark assigner; use "
                                             "WatermarkStrategy.for_bounded_out_of_orderness(...)"
                                             ".with_timestamp_assigner(...) instead",
})
