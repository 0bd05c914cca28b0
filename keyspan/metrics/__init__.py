"""Metrics: PyFlink's ``pyflink.metrics`` names for user metrics (task side), the driver's
registry that adds up committed task reports, and its Prometheus exposition."""

from keyspan.metrics.metricbase import Counter, Distribution, Meter, Metric, MetricGroup, MetricGroupType

__all__ = ["Counter", "Distribution", "Meter", "Metric", "MetricGroup", "MetricGroupType"]
