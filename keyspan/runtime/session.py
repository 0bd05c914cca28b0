"""The SparkSession keyspan runs on: the active one, or a local one configured for keyspan."""

from __future__ import annotations

import os
import shutil
import sys

from keyspan.common import logs


class JavaNotFoundError(RuntimeError):
    pass


def check_java() -> str:
    """Spark needs a JVM; say exactly what to install instead of failing deep inside py4j."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.path.exists(os.path.join(java_home, "bin", "java")):
        return os.path.join(java_home, "bin", "java")
    found = shutil.which("java")
    if found:
        return found
    raise JavaNotFoundError(
        "keyspan runs on Apache Spark, which needs Java 17 or 21, and no `java` was found "
        "(JAVA_HOME is unset and `java` is not on PATH).\n"
        "Install a JDK, for example:\n"
        "  Debian/Ubuntu: sudo apt-get install -y openjdk-17-jdk-headless\n"
        "  macOS:         brew install openjdk@17\n"
        "then make sure `java -version` works (or set JAVA_HOME) and run the command again."
    )


def get_or_create_spark(parallelism: int = 2, master: str | None = None):
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    check_java()
    if master is None or master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode talks to itself on loopback only
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    cores = max(2, parallelism)
    builder = (
        SparkSession.builder.master(master or f"local[{cores}]")
        .appName("keyspan")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.level={logs.spark_level()}")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(logs.spark_level())  # follows --log-level / KEYSPAN_LOG_LEVEL
    return spark


def prepare_session(spark) -> None:
    """Settings keyspan's plans rely on: one Spark partition is one subtask, so AQE must not coalesce."""
    spark.conf.set("spark.sql.adaptive.enabled", "false")
