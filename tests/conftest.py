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
    session = get_or_create_spark(2, master=TEST_MASTER)
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
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    log.close()
