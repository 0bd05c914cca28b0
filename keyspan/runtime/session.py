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


def get_or_create_spark(parallelism: int = 2, master: str | None = None, dependencies=None):
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
        .config("spark.pyspark.python", getattr(dependencies, "python_executable", None) or sys.executable)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.level={logs.spark_level()}")
    )
    if dependencies is not None and dependencies.jars:
        builder = builder.config("spark.jars", ",".join(dependencies.jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(logs.spark_level())  # follows --log-level / KEYSPAN_LOG_LEVEL
    return spark


def prepare_session(spark) -> None:
    """Settings keyspan's plans rely on: one Spark partition is one subtask, so AQE must not coalesce."""
    spark.conf.set("spark.sql.adaptive.enabled", "false")


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
