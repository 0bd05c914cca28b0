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


_SESSION: list = []


def pytest_sessionstart(session):
    _SESSION.append(session)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Ends the test process with pytest's verdict once pytest is done, running the exit handlers but
    not the interpreter's module teardown. One test process loads a JVM bridge, RocksDB, librdkafka,
    Arrow, a web server and their threads; tearing all of them down in the interpreter's own order
    crashed CI once with a segmentation fault after every test had passed (exit code 139), which
    would turn a green run red. Spark's Python workers end the same way (``os._exit``)."""
    if not _SESSION:
        return
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(_SESSION[0].exitstatus))


# -- servers the cluster tests start on loopback: PostgreSQL and a Spark standalone cluster ---------

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
    from spark_cluster import free_port

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


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """One Spark standalone cluster (master + 2 workers, 1 core each, on loopback) per test session."""
    from spark_cluster import SparkCluster

    cluster = SparkCluster(str(tmp_path_factory.mktemp("spark-cluster")))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """A real Kafka-wire broker (noida-db) on loopback for the whole session, stopped by its PID;
    yields its bootstrap address. Skips, saying why, where the noida-db binary cannot run."""
    import shutil
    import signal
    import socket
    import subprocess
    import time

    binary = shutil.which("noida-db") or os.path.join(os.path.dirname(sys.executable), "noida-db")
    if not os.path.exists(binary):
        pytest.skip("noida-db (the test Kafka broker, in keyspan's test extra) is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp_path_factory.mktemp("kafka")
    log = open(data / "broker.log", "w")
    # its own process group: the noida-db command is a launcher whose broker runs as a child process
    proc = subprocess.Popen([binary, "start", "--data-dir", str(data / "data"), "--host", "127.0.0.1",
                             "--only", "kafka", "--kafka-port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                pytest.skip(f"noida-db did not start: {(data / 'broker.log').read_text()[-500:]}")
            time.sleep(0.05)
    yield f"127.0.0.1:{port}"
    from keyspan.connectors.kafka.clients import close_all

    close_all()  # this process's clients leave while the broker still answers
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    log.close()
