"""PyFlink-compatible DataStream API: ``from keyspan.datastream import ...`` replaces ``pyflink.datastream``."""

from keyspan.datastream.checkpoint_config import CheckpointConfig, CheckpointingMode
from keyspan.datastream.checkpoint_storage import (
    CheckpointStorage,
    CustomCheckpointStorage,
    FileSystemCheckpointStorage,
    JobManagerCheckpointStorage,
)
from keyspan.datastream.execution_mode import RuntimeExecutionMode
from keyspan.datastream.externalized_checkpoint_retention import (
    ExternalizedCheckpointCleanup,
    ExternalizedCheckpointRetention,
)
from keyspan.datastream.slot_sharing_group import MemorySize, SlotSharingGroup
from keyspan.datastream.output_tag import OutputTag
from keyspan.datastream.time_characteristic import TimeCharacteristic
from keyspan.datastream.timerservice import TimerService
from keyspan.datastream.data_stream import (
    BroadcastConnectedStream,
    BroadcastStream,
    CachedDataStream,
    ConnectedStreams,
    DataStream,
    DataStreamSink,
    KeyedStream,
)
from keyspan.datastream.functions import (
    AggregateFunction,
    BroadcastProcessFunction,
    CheckpointedFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    Partitioner,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
    SinkFunction,
    TimeDomain,
)
from keyspan.datastream.functions import (
    AllWindowFunction,
    KeyedStateStore,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
)
from keyspan.datastream.window import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    CountWindow,
    DynamicEventTimeSessionWindows,
    DynamicProcessingTimeSessionWindows,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindow,
    GlobalWindows,
    MergingWindowAssigner,
    NeverTrigger,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    PurgingTrigger,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    Window,
    WindowAssigner,
)
from keyspan.datastream.window_operator import AllWindowedStream, WindowedStream
from keyspan.datastream.state_backend import (
    CustomStateBackend,
    EmbeddedRocksDBStateBackend,
    FsStateBackend,
    HashMapStateBackend,
    MemoryStateBackend,
    PredefinedOptions,
    RocksDBStateBackend,
    StateBackend,
)
from keyspan.datastream.stream_execution_environment import JobExecutionResult, StreamExecutionEnvironment
from keyspan.datastream.functions import AsyncFunction, AsyncRetryPredicate, AsyncRetryStrategy
from keyspan.datastream.async_data_stream import AsyncDataStream
from keyspan.state.api import OperatorStateStore

__all__ = [
    "AggregateFunction", "AsyncDataStream", "AsyncFunction", "AsyncRetryPredicate", "AsyncRetryStrategy",
    "BroadcastConnectedStream", "BroadcastProcessFunction", "BroadcastStream", "CachedDataStream",
    "CheckpointConfig", "CheckpointedFunction", "CheckpointingMode", "CoFlatMapFunction", "CoMapFunction",
    "CoProcessFunction", "ConnectedStreams", "DataStream", "DataStreamSink", "KeyedCoProcessFunction", "Partitioner",
    "EmbeddedRocksDBStateBackend", "FilterFunction", "FlatMapFunction", "FunctionInitializationContext",
    "FunctionSnapshotContext", "HashMapStateBackend", "JobExecutionResult", "KeySelector",
    "KeyedBroadcastProcessFunction", "KeyedProcessFunction", "KeyedStream", "MapFunction", "OperatorStateStore",
    "ProcessFunction", "ReduceFunction", "RuntimeContext", "SinkFunction", "StreamExecutionEnvironment",
    "TimeDomain",
    # windows
    "AllWindowFunction", "AllWindowedStream", "ContinuousEventTimeTrigger", "ContinuousProcessingTimeTrigger",
    "CountSlidingWindowAssigner", "CountTrigger", "CountTumblingWindowAssigner", "CountWindow",
    "DynamicEventTimeSessionWindows", "DynamicProcessingTimeSessionWindows", "EventTimeSessionWindows",
    "EventTimeTrigger", "GlobalWindow", "GlobalWindows", "KeyedStateStore", "MergingWindowAssigner", "NeverTrigger",
    "ProcessAllWindowFunction", "ProcessWindowFunction", "ProcessingTimeSessionWindows", "ProcessingTimeTrigger",
    "PurgingTrigger", "SessionWindowTimeGapExtractor", "SlidingEventTimeWindows", "SlidingProcessingTimeWindows",
    "TimeWindow", "Trigger", "TriggerResult", "TumblingEventTimeWindows", "TumblingProcessingTimeWindows", "Window",
    "WindowAssigner", "WindowFunction", "WindowedStream", "OutputTag", "TimerService",
    "TimeCharacteristic",
    # execution, checkpointing and legacy names
    "CheckpointStorage", "CustomCheckpointStorage", "CustomStateBackend", "ExternalizedCheckpointCleanup",
    "ExternalizedCheckpointRetention", "FileSystemCheckpointStorage", "FsStateBackend", "JobManagerCheckpointStorage",
    "MemorySize", "MemoryStateBackend", "PredefinedOptions", "RocksDBStateBackend", "RuntimeExecutionMode",
    "SlotSharingGroup", "StateBackend",
]

from keyspan.common.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("keyspan.datastream", {
    "SourceFunction": "a SourceFunction runs in the JVM; use env.from_source(...) with a keyspan source, "
                      "env.from_collection(...) or env.from_spark(spark.readStream...) instead",
})
