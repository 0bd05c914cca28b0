"""PyFlink's ``pyflink.metrics`` API (MetricGroup, Counter, Meter, Distribution) for keyspan tasks.

A task's metrics live in the Python worker that runs it. They count what *this attempt* of the
task did in its epoch: :func:`take_epoch_snapshot` turns them into a plain dict that travels to the
driver in the task's report, and resets them. The driver adds up only the reports of the attempts
it commits, so a task that Spark retries is never counted twice (the failed attempt's increments
are dropped with its report, and :func:`begin_epoch` clears what it left in the worker).
"""

from __future__ import annotations

import threading
from abc import ABC
from enum import Enum
from typing import Callable


class MetricGroupType(Enum):
    generic = 0
    key = 1
    value = 2


class Metric(ABC):
    """Base interface of a metric object."""


class Counter(Metric):
    """A count that can go up and down; the driver sums it over subtasks and epochs."""

    def __init__(self):
        self._count = 0

    def inc(self, n: int = 1):
        self._count += n

    def dec(self, n: int = 1):
        self._count -= n

    def get_count(self) -> int:
        return self._count


class Meter(Metric):
    """Events per second over ``time_span_in_seconds``; the driver computes the rate from the counts
    of the committed epochs."""

    def __init__(self, time_span_in_seconds: int = 60):
        self._count = 0
        self.time_span_in_seconds = time_span_in_seconds

    def mark_event(self, value: int = 1):
        self._count += value

    def get_count(self) -> int:
        return self._count


class Distribution(Metric):
    """Count, sum, min and max of the values passed to :meth:`update`."""

    def __init__(self):
        self._reset()

    def _reset(self):
        self.count = 0
        self.sum = 0
        self.min = None
        self.max = None

    def update(self, value: int):
        self.count += 1
        self.sum += value
        self.min = value if self.min is None else min(self.min, value)
        self.max = value if self.max is None else max(self.max, value)


class MetricGroup:
    """A named group of metrics (PyFlink's ``MetricGroup``). ``add_group(key, value)`` makes a
    key/value pair whose value becomes a label of every metric below it."""

    def __init__(self, parent: "MetricGroup | None", name: str | None,
                 group_type: MetricGroupType = MetricGroupType.generic, variables: dict | None = None):
        self._parent = parent
        self._name = name
        self._type = group_type
        self._variables = dict(variables or {})
        self._sub_groups: dict[tuple[str, MetricGroupType], MetricGroup] = {}
        self._metrics: dict[str, object] = {}

    # -- PyFlink's API ---------------------------------------------------------------------------
    def add_group(self, name: str, extra: str = None) -> "MetricGroup":
        if extra is None:
            return self._add_group(str(name), MetricGroupType.generic)
        return self._add_group(str(name), MetricGroupType.key)._add_group(str(extra), MetricGroupType.value)

    def counter(self, name: str) -> Counter:
        return self._register(name, Counter)

    def gauge(self, name: str, obj: Callable[[], int]) -> None:
        if not callable(obj):
            raise TypeError(f"gauge '{name}' needs a function returning its value, got {obj!r}")
        self._metrics[name] = obj

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter:
        return self._register(name, lambda: Meter(time_span_in_seconds))

    def distribution(self, name: str) -> Distribution:
        return self._register(name, Distribution)

    def get_scope_components(self) -> list:
        return (self._parent.get_scope_components() if self._parent is not None else []) + \
            ([self._name] if self._name is not None else [])

    def get_all_variables(self) -> dict:
        return dict(self._variables)

    def get_metric_identifier(self, metric_name: str) -> str:
        return ".".join(self.get_scope_components() + [metric_name])

    # -- keyspan -----------------------------------------------------------------------------------
    def _add_group(self, name: str, group_type: MetricGroupType) -> "MetricGroup":
        key = (name, group_type)
        group = self._sub_groups.get(key)
        if group is None:
            variables = dict(self._variables)
            if group_type is MetricGroupType.value:
                variables[self._name] = name
            group = self._sub_groups[key] = MetricGroup(self, name, group_type, variables)
        return group

    def _register(self, name: str, factory):
        """Asking twice for the same name gives the same metric (``open`` runs again on a new worker)."""
        metric = self._metrics.get(name)
        if metric is None:
            metric = self._metrics[name] = factory()
        return metric

    def _walk(self):
        yield self
        for group in self._sub_groups.values():
            yield from group._walk()

    def _user_scope(self) -> list[str]:
        """The scope below the task's root group; key/value pairs are labels, not name parts."""
        if self._parent is None:
            return []
        scope = self._parent._user_scope()
        return scope if self._type is not MetricGroupType.generic else scope + [self._name]


_ROOTS: dict[tuple[str, int], MetricGroup] = {}
_LOCK = threading.Lock()


def operator_group(operator_uid: str, subtask: int) -> MetricGroup:
    """The metric group ``RuntimeContext.get_metrics_group()`` returns for one operator subtask."""
    with _LOCK:
        root = _ROOTS.get((operator_uid, subtask))
        if root is None:
            root = _ROOTS[(operator_uid, subtask)] = MetricGroup(None, None)
        return root


def begin_epoch(operator_uids, subtask: int) -> None:
    """Forget what an earlier, failed attempt in this worker counted: only this attempt reports."""
    take_epoch_snapshot(operator_uids, subtask)


def take_epoch_snapshot(operator_uids, subtask: int) -> list[dict]:
    """This attempt's metric values as plain dicts (the task report carries them), counters reset.

    Each entry: ``{"operator", "subtask", "scope", "labels", "name", "type", ...values}``; counters
    and meters carry the increment of this epoch, gauges the current value, distributions
    count/sum/min/max of this epoch."""
    out = []
    with _LOCK:
        roots = [(uid, _ROOTS.get((uid, subtask))) for uid in operator_uids]
    for uid, root in roots:
        if root is None:
            continue
        for group in root._walk():
            base = {"operator": uid, "subtask": subtask, "scope": group._user_scope(),
                    "labels": group.get_all_variables()}
            for name, metric in group._metrics.items():
                entry = {**base, "name": name}
                if isinstance(metric, (Counter, Meter)):
                    entry.update(type="meter" if isinstance(metric, Meter) else "counter", value=metric._count)
                    metric._count = 0
                elif isinstance(metric, Distribution):
                    entry.update(type="distribution", count=metric.count, sum=metric.sum, min=metric.min,
                                 max=metric.max)
                    metric._reset()
                else:
                    try:
                        value = metric()
                    except Exception as exc:  # noqa: BLE001 — a broken gauge must not fail the epoch
                        value = None
                        entry["error"] = f"{type(exc).__name__}: {exc}"
                    entry.update(type="gauge", value=value)
                out.append(entry)
    return out
