"""keyspan's State Processor API: read, bootstrap, modify and re-key savepoints as Spark DataFrames
(Flink's ``org.apache.flink.state.api`` names in Python style). See docs/state-processor.md."""

from keyspan.state_processor.datasource import KeyspanStateDataSource, register as register_data_source
from keyspan.state_processor.functions import (
    BroadcastStateBootstrapFunction,
    ColumnBootstrapFunction,
    KeyedStateBootstrapFunction,
    KeyedStateReaderFunction,
    OperatorIdentifier,
    StateBootstrapFunction,
)
from keyspan.state_processor.reader import SavepointReader
from keyspan.state_processor.tasks import decode
from keyspan.state_processor.writer import (
    KeyedOperatorTransformation,
    OneInputOperatorTransformation,
    OperatorTransformation,
    SavepointWriter,
    StateBootstrapTransformation,
)

__all__ = [
    "BroadcastStateBootstrapFunction",
    "ColumnBootstrapFunction",
    "KeyedOperatorTransformation",
    "KeyedStateBootstrapFunction",
    "KeyedStateReaderFunction",
    "KeyspanStateDataSource",
    "OneInputOperatorTransformation",
    "OperatorIdentifier",
    "OperatorTransformation",
    "SavepointReader",
    "SavepointWriter",
    "StateBootstrapFunction",
    "StateBootstrapTransformation",
    "decode",
    "register_data_source",
]
