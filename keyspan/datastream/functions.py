"""User function interfaces, named as in ``pyflink.datastream.functions``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum


class Function(ABC):
    def open(self, runtime_context: "RuntimeContext") -> None:
        pass

    def close(self) -> None:
        pass


class MapFunction(Function):
    @abstractmethod
    def map(self, value): ...


class FlatMapFunction(Function):
    @abstractmethod
    def flat_map(self, value): ...


class FilterFunction(Function):
    @abstractmethod
    def filter(self, value) -> bool: ...


class ReduceFunction(Function):
    @abstractmethod
    def reduce(self, value1, value2): ...


class KeySelector(Function):
    @abstractmethod
    def get_key(self, value): ...


class SinkFunction(Function):
    """A Python sink: ``invoke`` runs on the driver for each record of a committed epoch."""

    @abstractmethod
    def invoke(self, value, context) -> None: ...


class AggregateFunction(Function):
    @abstractmethod
    def create_accumulator(self): ...

    @abstractmethod
    def add(self, value, accumulator): ...

    @abstractmethod
    def get_result(self, accumulator): ...

    def merge(self, acc_a, acc_b):
        raise NotImplementedError(f"{type(self).__name__} does not implement merge")


class TimeDomain(Enum):
    EVENT_TIME = 0
    PROCESSING_TIME = 1


class RuntimeContext(ABC):
    """What an operator instance knows about itself and where its state lives."""

    @abstractmethod
    def get_task_name(self) -> str: ...

    @abstractmethod
    def get_number_of_parallel_subtasks(self) -> int: ...

    @abstractmethod
    def get_max_number_of_parallel_subtasks(self) -> int: ...

    @abstractmethod
    def get_index_of_this_subtask(self) -> int: ...

    @abstractmethod
    def get_attempt_number(self) -> int: ...

    @abstractmethod
    def get_task_name_with_subtasks(self) -> str: ...

    @abstractmethod
    def get_job_parameter(self, key: str, default_value: str): ...

    @abstractmethod
    def get_state(self, state_descriptor): ...

    @abstractmethod
    def get_list_state(self, state_descriptor): ...

    @abstractmethod
    def get_map_state(self, state_descriptor): ...

    @abstractmethod
    def get_reducing_state(self, state_descriptor): ...

    @abstractmethod
    def get_aggregating_state(self, state_descriptor): ...


class ProcessFunction(Function):
    class Context(ABC):
        @abstractmethod
        def timestamp(self) -> int: ...

        @abstractmethod
        def timer_service(self): ...

    @abstractmethod
    def process_element(self, value, ctx: "ProcessFunction.Context"): ...


class KeyedProcessFunction(Function):
    class Context(ABC):
        @abstractmethod
        def get_current_key(self): ...

        @abstractmethod
        def timestamp(self) -> int: ...

        @abstractmethod
        def timer_service(self): ...

    class OnTimerContext(Context):
        @abstractmethod
        def time_domain(self) -> TimeDomain: ...

    @abstractmethod
    def process_element(self, value, ctx: "KeyedProcessFunction.Context"): ...

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.OnTimerContext"):
        pass
