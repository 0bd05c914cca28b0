"""PyFlink-compatible DataStream API: ``from keyspan.datastream import ...`` replaces ``pyflink.datastream``."""

from keyspan.datastream.checkpoint_config import CheckpointConfig, CheckpointingMode
from keyspan.datastream.data_stream import DataStream, DataStreamSink, KeyedStream
from keyspan.datastream.functions import (
    AggregateFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
    SinkFunction,
    TimeDomain,
)
from keyspan.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend
from keyspan.datastream.stream_execution_environment import JobExecutionResult, StreamExecutionEnvironment

__all__ = [
    "AggregateFunction", "CheckpointConfig", "CheckpointingMode", "DataStream", "DataStreamSink",
    "EmbeddedRocksDBStateBackend", "FilterFunction", "FlatMapFunction", "HashMapStateBackend",
    "JobExecutionResult", "KeySelector",
    "KeyedProcessFunction", "KeyedStream", "MapFunction", "ProcessFunction", "ReduceFunction",
    "RuntimeContext", "SinkFunction", "StreamExecutionEnvironment", "TimeDomain",
]
