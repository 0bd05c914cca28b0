"""The SparkSession keyspan runs on: the active one, or a local one configured for keyspan."""

from __future__ import annotations

import functools
import os
import shutil
import sys
from contextlib import contextmanager

from keyspan.common import logs


class JavaNotFoundError(RuntimeError):
    pass


log = logs.get_logger("runtime.session")


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


def is_single_host(master: str) -> bool:
    """``local[...]`` and ``local-cluster[...]`` run every executor on the driver's machine, so the
    driver's own disk is shared storage; any other master may place executors on other hosts."""
    return master.startswith("local")


def get_or_create_spark(parallelism: int = 2, master: str | None = None, conf: dict | None = None,
                        ui: bool = True, dependencies=None):
    """The active session, or a new one that keeps every setting already given — by ``spark-submit``
    (its ``--master``, ``--conf``, ``spark-defaults.conf``) or ``conf`` (``keyspan run --master/--conf``)
    — and only fills in what keyspan needs and nobody set. ``master`` is used only when none is set;
    ``dependencies`` (``env.add_jars``/``set_python_executable``) fill ``spark.jars`` and the workers' Python."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    logs.quiet_java_bridge()
    active = SparkSession.getActiveSession()
    if active is None and SparkContext._active_spark_context is not None:
        active = SparkSession.builder.getOrCreate()  # a user's SparkContext without a session yet
    if active is not None:
        return active
    check_java()
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = {k: str(v) for k, v in (conf or {}).items()}
    cores = max(2, parallelism)
    if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        if (conf.get("spark.master") or master or "local").startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode talks to itself on loopback only
        launch = SparkConf(loadDefaults=False)  # settings the driver JVM needs when it starts
        launch.setAll(conf.items())
        # without these, PySpark's launcher would settle them as for an interactive shell: master
        # local[*] (one attempt per task, no retries) and a console progress bar
        launch.setIfMissing("spark.master", master or f"local[{cores}]")
        launch.setIfMissing("spark.ui.showConsoleProgress", "false")
        launch.setIfMissing("spark.driver.extraJavaOptions", f"-Dlog4j2.level={logs.spark_level()}")
        launch.setIfMissing("spark.app.name", "keyspan")
        SparkContext._ensure_initialized(conf=launch)
    else:
        SparkContext._ensure_initialized()  # connect to spark-submit's JVM: its settings become visible
    spark_conf = SparkConf()  # everything already given: spark-submit's flags, spark-defaults.conf, the JVM's
    spark_conf.setAll(conf.items())
    if not spark_conf.contains("spark.master"):
        spark_conf.setMaster(master or f"local[{cores}]")
    resolved = spark_conf.get("spark.master")
    # workers must run the driver's interpreter (same packages) unless told otherwise (a shipped venv,
    # env.set_python_executable); PySpark takes the workers' interpreter from PYSPARK_PYTHON
    if not spark_conf.contains("spark.pyspark.python") and getattr(dependencies, "python_executable", None):
        spark_conf.set("spark.pyspark.python", dependencies.python_executable)
    if spark_conf.contains("spark.pyspark.python"):
        os.environ["PYSPARK_PYTHON"] = spark_conf.get("spark.pyspark.python")
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if dependencies is not None and dependencies.jars and not spark_conf.contains("spark.jars"):
        spark_conf.set("spark.jars", ",".join(dependencies.jars))
    defaults = {
        "spark.app.name": "keyspan",
        "spark.ui.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.sql.adaptive.enabled": "false",
        "spark.python.worker.reuse": "true",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    }
    if is_single_host(resolved) and os.path.abspath(os.environ["PYSPARK_PYTHON"]) == os.path.abspath(sys.executable):
        # the workers run this very Python, keyspan included: start them with PySpark's compiled files
        defaults["spark.python.daemon.module"] = "keyspan.runtime.worker.daemon"
    if not ui:
        spark_conf.set("spark.ui.enabled", "false")
    for key, value in defaults.items():
        spark_conf.setIfMissing(key, value)
    spark = SparkSession.builder.config(conf=spark_conf).getOrCreate()
    spark.sparkContext.setLogLevel(logs.spark_level())  # follows --log-level / KEYSPAN_LOG_LEVEL
    url = spark.sparkContext.uiWebUrl
    if url:
        print(f"keyspan: Spark UI at {url} (master {resolved})", file=sys.stderr)
    return spark


def prepare_session(spark) -> None:
    """Settings keyspan's plans rely on: one Spark partition is one subtask, so AQE must not coalesce.
    Also: when Spark's JVM dies mid-update, PySpark's accumulator server prints a Python trace to the
    terminal; the job fails with keyspan's own message, so that trace goes to keyspan's debug log."""
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, address: log.debug(
            "PySpark's accumulator server: the connection from %s ended mid-update", address, exc_info=True)


CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
FILE_SYSTEM_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
ARROW_MAX_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
ARROW_NO_BYTE_CAP = str(2**31 - 1)  # Spark's "no limit" for it: the one value that skips the size check


@contextmanager
def query_settings(spark, local_logs: bool):
    """Start keyspan's query with settings that pay in every micro-batch. Spark copies the session's
    settings into the query's own session when the query starts, so they are set around ``start()``
    and put back after: the user's other queries keep theirs, and a value the user set wins.

    * Spark's offset and commit logs on local disk (``local_logs``: the query's checkpoint location is
      a local path) written through Hadoop's ``FileSystem`` rather than its ``FileContext``. Without
      Hadoop's native library (pip's PySpark has none), every ``FileContext`` rename on the local
      disk runs a ``readlink`` process to look for symbolic links: 16–18 ms for each log Spark writes,
      twice per micro-batch, and once more for a file source's log. ``FileSystem`` renames the file
      without that, in 7–10 ms (it also writes Hadoop's small ``.crc`` checksum file next to each entry).
      On HDFS or object stores Spark's own choice stays.
    * Arrow batches to the Python workers cut by record count alone
      (``spark.sql.execution.arrow.maxRecordsPerBatch``, 10,000 by default), as before Spark 4.0.
      Spark 4's byte limit per batch makes the JVM measure the batch after every row it adds: a
      fifth of the executor threads' samples in a profile of the window benchmark (docs/benchmarks.md)."""
    conf = spark.conf
    settings = {}
    if local_logs and conf.get(CHECKPOINT_FILE_MANAGER, None) is None and _jvm_has(FILE_SYSTEM_MANAGER):
        settings[CHECKPOINT_FILE_MANAGER] = FILE_SYSTEM_MANAGER
    if conf.get(ARROW_MAX_BYTES, None) is None:
        settings[ARROW_MAX_BYTES] = ARROW_NO_BYTE_CAP
    for key, value in settings.items():
        conf.set(key, value)
    try:
        yield
    finally:
        for key in settings:
            conf.unset(key)


@functools.lru_cache(maxsize=None)
def _jvm_has(class_name: str) -> bool:
    """Whether the driver's Spark (a cluster's may differ from this PySpark) has the class. Its
    classpath does not change while this process lives: asked once, not at every run's start."""
    from pyspark import SparkContext

    try:
        SparkContext._jvm.java.lang.Class.forName(class_name)
    except Exception:  # noqa: BLE001 — py4j's wrapper of ClassNotFoundException
        return False
    return True


def mute_query_errors(query):
    """Keep Spark from logging the end of keyspan's own query as an ERROR with a Java trace while
    keyspan stops it: a batch Spark starts during a stop is refused on purpose (so that Spark does
    not log it as done), and that refusal ends the query with an error that is not one. Mutes only
    this query's execution logger; returns what puts its level back, once the query has ended."""
    from pyspark import SparkContext

    try:
        name = query._jsq.streamingQuery().getClass().getName()
        log4j = SparkContext._jvm.org.apache.logging.log4j
        previous = log4j.LogManager.getLogger(name).getLevel()
        log4j.core.config.Configurator.setLevel(name, log4j.Level.OFF)
    except Exception:  # noqa: BLE001 — a log level is cosmetic: a stop goes ahead without it
        return lambda: None
    return lambda: log4j.core.config.Configurator.setLevel(name, previous)


_SHIPPED: set[tuple] = set()  # (application id, what) already added to the SparkContext


def ship_dependencies(spark, dependencies, workdir: str) -> None:
    """Send what ``add_jars``/``add_python_file``/``add_python_archive``/``set_python_requirements``
    collected to the executors, once per SparkContext."""
    if dependencies is None:
        return
    sc = spark.sparkContext
    app = sc.applicationId

    def once(what, add):
        if (app, what) not in _SHIPPED:
            add()
            _SHIPPED.add((app, what))

    configured = set((sc.getConf().get("spark.jars") or "").split(","))
    for jar in dependencies.jars:
        if jar not in configured:
            once(("jar", jar), lambda jar=jar: sc._jsc.addJar(jar))
    for path in dependencies.python_files:
        once(("py", path), lambda path=path: sc.addPyFile(_zipped(path, workdir)))
    for path, target in dependencies.archives:
        spec = f"{path}#{target}" if target else path
        once(("archive", spec), lambda spec=spec: sc.addArchive(spec))
    if dependencies.requirements is not None:
        once(("requirements", dependencies.requirements),
             lambda: sc.addPyFile(_installed_requirements(*dependencies.requirements, workdir)))


def _zipped(path: str, workdir: str) -> str:
    """A directory ships as a zip of its contents (importable from the workers' path)."""
    if not os.path.isdir(path):
        return path
    out = os.path.join(os.path.abspath(workdir), "python-deps", os.path.basename(os.path.abspath(path)))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    return shutil.make_archive(out, "zip", os.path.dirname(os.path.abspath(path)), os.path.basename(os.path.abspath(path)))


def _installed_requirements(requirements: str, cache_dir: str | None, workdir: str) -> str:
    """``pip install --target`` into the workdir (offline from ``cache_dir`` if given), zipped:
    pure-Python packages import from it on every worker."""
    import subprocess

    target = os.path.join(os.path.abspath(workdir), "python-deps", "requirements")
    shutil.rmtree(target, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--target", target, "-r", requirements]
    if cache_dir:
        cmd += ["--no-index", "--find-links", cache_dir]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"set_python_requirements: pip could not install {requirements}: "
                           f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return shutil.make_archive(target, "zip", target)
