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
