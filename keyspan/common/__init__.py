"""PyFlink's ``pyflink.common`` names used by DataStream jobs."""

from keyspan.common.time import Duration, Time
from keyspan.common.typeinfo import Types
from keyspan.common.types import Row
from keyspan.common.serialization import Encoder, SimpleStringSchema
from keyspan.common.configuration import Configuration
from keyspan.common.execution_config import ExecutionConfig
from keyspan.common.job_execution_result import JobExecutionResult
from keyspan.common.job_client import CompletableFuture, JobClient, JobID
from keyspan.common.job_status import JobStatus
from keyspan.common.restart_strategy import RestartStrategies, RestartStrategyConfiguration
from keyspan.common.watermark_strategy import TimestampAssigner, WatermarkStrategy

__all__ = ["Row", "Types", "Duration", "Time", "Encoder", "SimpleStringSchema", "Configuration", "ExecutionConfig", "JobExecutionResult",
           "RestartStrategies", "RestartStrategyConfiguration",
           "TimestampAssigner", "WatermarkStrategy", "CompletableFuture", "JobClient", "JobID", "JobStatus"]
