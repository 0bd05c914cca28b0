"""One SparkSession for the whole test session (it takes seconds to start); a fresh keyspan
workdir (metadata store, checkpoints, Spark offset logs) for every test."""

from __future__ import annotations

import os
import sys

import pytest

from keyspan.runtime import options as run_options
from keyspan.runtime.session import get_or_create_spark

# local[2,3]: two cores, and up to three attempts per task as on a cluster, so injected task
# failures are retried by Spark instead of failing the job.
TEST_MASTER = "local[2,3]"


@pytest.fixture(scope="session")
def spark():
    session = get_or_create_spark(2, master=TEST_MASTER, ui=False)
    yield session
    session.stop()


@pytest.fixture
def workdir(tmp_path, spark):
    options = run_options.RunOptions(workdir=str(tmp_path / ".keyspan"))
    run_options.install(options)
    yield tmp_path
    run_options.install(run_options.RunOptions())


@pytest.fixture
def env(workdir):
    from keyspan.datastream import StreamExecutionEnvironment

    e = StreamExecutionEnvironment.get_execution_environment()
    e.set_parallelism(2)
    return e


@pytest.fixture(scope="session")
def python():
    return sys.executable


def pytest_configure(config):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


# -- servers the cluster tests start on loopback: PostgreSQL and a Spark standalone cluster ---------

def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _postgres_bin() -> str | None:
    import glob
    import shutil

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    path = found[-1] if found else shutil.which("pg_ctl")
    return os.path.dirname(path) if path else None


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server on 127.0.0.1 (initdb + pg_ctl in a temp dir, a free port) for the whole
    test session; yields the SQLAlchemy URL of its ``postgres`` database."""
    import shutil
    import subprocess
    import tempfile

    bindir = _postgres_bin()
    if bindir is None:
        reason = "PostgreSQL server binaries (initdb, pg_ctl) are not installed: apt-get install postgresql"
        print(f"\nSKIP: {reason}")
        pytest.skip(reason)
    base = tempfile.mkdtemp(prefix="keyspan-pg-")
    as_user = []
    if os.geteuid() == 0:  # initdb refuses to run as root: the server runs as Debian's postgres user
        shutil.chown(base, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = os.path.join(base, "data"), free_port()
    subprocess.run(as_user + [f"{bindir}/initdb", "-D", data, "-U", "keyspan", "--auth=trust", "-E", "UTF8",
                              "--no-sync"], check=True, capture_output=True)
    subprocess.run(as_user + [f"{bindir}/pg_ctl", "-D", data, "-l", os.path.join(base, "server.log"), "-w",
                              "-t", "60", "-o", f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off",
                              "start"], check=True, capture_output=True)
    try:
        yield f"postgresql://keyspan@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(as_user + [f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh database on the session's PostgreSQL server (each test its own metadata store)."""
    import uuid

    import psycopg

    name = f"ks_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_server, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    return postgres_server.rsplit("/", 1)[0] + "/" + name


class SparkCluster:
    """A Spark standalone cluster from PySpark's own ``bin/spark-class``: one master, ``workers``
    workers with one core each, all on 127.0.0.1."""

    def __init__(self, base: str, workers: int = 2):
        import subprocess

        import pyspark

        self.base = base
        self.spark_home = os.path.dirname(pyspark.__file__)
        self.port, self.webui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.webui_url = f"http://127.0.0.1:{self.webui_port}"
        self.env = dict(os.environ, SPARK_HOME=self.spark_home, SPARK_LOCAL_IP="127.0.0.1",
                        PYSPARK_PYTHON=sys.executable, SPARK_LOG_DIR=os.path.join(base, "logs"))
        self.procs: dict[str, subprocess.Popen] = {}
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.webui_port))
        self.wait(lambda s: s.get("status") == "ALIVE", "the master")
        for i in range(workers):
            self.start_worker(i)
        self.wait(lambda s: self.alive_workers(s) >= workers, f"{workers} workers")

    def _start(self, name: str, cls: str, *args: str):
        import subprocess

        log = open(os.path.join(self.base, f"{name}.log"), "ab")
        self.procs[name] = subprocess.Popen([os.path.join(self.spark_home, "bin", "spark-class"), cls, *args],
                                            env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def start_worker(self, i: int) -> None:
        work = os.path.join(self.base, f"worker-{i}")
        os.makedirs(work, exist_ok=True)
        self._start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                    "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", work, self.master_url)

    def state(self) -> dict:
        import httpx

        try:
            return httpx.get(f"{self.webui_url}/json/", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return {}

    @staticmethod
    def alive_workers(state: dict) -> int:
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def wait(self, ready, what: str, timeout: float = 90) -> dict:
        import time

        deadline = time.time() + timeout
        while time.time() < deadline:
            state = self.state()
            if state and ready(state):
                return state
            time.sleep(0.3)
        raise TimeoutError(f"Spark standalone cluster: {what} not up after {timeout} s (logs in {self.base})")

    def kill(self, name: str) -> None:
        import signal

        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    def stop(self) -> None:
        for name in list(self.procs):
            self.kill(name)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """One Spark standalone cluster (master + 2 workers, 1 core each, on loopback) per test session."""
    cluster = SparkCluster(str(tmp_path_factory.mktemp("spark-cluster")))
    try:
        yield cluster
    finally:
        cluster.stop()
