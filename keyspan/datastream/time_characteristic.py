"""``TimeCharacteristic`` as in ``pyflink.datastream.time_characteristic`` (deprecated in Flink, still
common in jobs): keyspan always runs event time when a stream has timestamps and watermarks, so
setting it changes nothing."""

from enum import Enum


class TimeCharacteristic(Enum):
    ProcessingTime = 0
    IngestionTime = 1
    EventTime = 2
