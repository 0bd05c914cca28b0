"""keyspan: Apache Flink's state model on Apache Spark, behind a PyFlink-compatible API."""

__version__ = "0.1.0"
