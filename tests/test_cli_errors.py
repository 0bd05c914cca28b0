"""Errors a person can read: a failing job prints a few lines on the terminal (job, operator,
record, why, what next) and the full Spark/Java/Python trace goes to a log file under the workdir
whose path the message gives."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

FAILING_JOB = '''
from keyspan.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.from_collection([1, 2, 0, 4]).uid("numbers").map(lambda x: 10 // x).name("divide").uid("divide").print()
env.execute("divider")
'''

BROKEN_JOB = '''
from keyspan.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(0)
'''


def _run(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    job = tmp_path / "job.py"
    job.write_text(source)
    return subprocess.run([sys.executable, "-m", "keyspan", "run", str(job), "--workdir", str(tmp_path / "w"),
                           "--no-progress"], capture_output=True, text=True, timeout=400, cwd=tmp_path,
                          env=dict(os.environ))


SPARK_BANNER = ("WARNING: Using incubator modules", "Setting default log level", "To adjust logging level",
                "keyspan: dashboard")


def _ours(err: str) -> list[str]:
    """stderr without the JVM's start-up banner and the dashboard address."""
    return [line for line in err.strip().splitlines() if not line.startswith(SPARK_BANNER)]


def _log_path(err: str) -> Path:
    match = re.search(r"[Ff]ull trace: (\S+\.log)", err)
    assert match, err
    return Path(match.group(1))


def test_a_failing_user_function_prints_a_few_lines_and_logs_the_trace(tmp_path):
    done = _run(tmp_path, FAILING_JOB)
    assert done.returncode == 1
    err = done.stderr.strip()
    assert "divider" in err and "divide" in err and "ZeroDivisionError" in err, err[-3000:]
    assert len(_ours(err)) <= 4, err
    assert "at org.apache" not in err and "Traceback" not in err
    log = _log_path(err)
    assert log.is_relative_to(tmp_path / "w" / "logs")
    assert "Traceback" in log.read_text() and "ZeroDivisionError" in log.read_text()


def test_a_job_file_that_fails_while_building_names_its_line(tmp_path):
    done = _run(tmp_path, BROKEN_JOB)
    assert done.returncode == 1
    err = done.stderr.strip()
    assert "job.py failed at line 5" in err, err
    assert len(_ours(err)) <= 3 and "Traceback" not in err, err
    assert "Traceback" in _log_path(err).read_text()


UNPICKLABLE_JOB = '''
import threading
from keyspan.datastream import MapFunction, StreamExecutionEnvironment


class Guarded(MapFunction):
    def __init__(self):
        self.lock = threading.Lock()  # belongs in open(): Spark ships the function pickled

    def map(self, value):
        return value


env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([1, 2]).uid("numbers").map(Guarded()).name("guarded").uid("guarded").print()
env.execute("unpicklable")
'''


def test_a_function_that_cannot_be_pickled_is_named_with_what_to_do(tmp_path):
    done = _run(tmp_path, UNPICKLABLE_JOB)
    assert done.returncode == 1
    err = done.stderr.strip()
    assert ("operator 'guarded' (uid guarded): its function cannot be pickled (TypeError: cannot pickle "
            "'_thread.lock' object)" in err and "in open() instead of __init__" in err), err
    assert len(_ours(err)) <= 3 and "Traceback" not in err, err


PIDS_JOB = '''
import os
from keyspan.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.set_max_records_per_epoch(5)
env.set_small_epochs_in_driver(0)
env.from_collection(list(range(20))).uid("numbers").key_by(lambda x: x % 3).map(
    lambda x: ("ran-in", x, os.getpid())).uid("pids").print()
env.execute("pids")
'''


def test_run_sets_the_jobs_configuration_keys_with_D(tmp_path):
    """``-D key=value`` (Flink's flag) wins over the job's own setting: the job turns small epochs in the
    driver off, ``-D`` turns them on, and every record is then processed by the driver process."""
    job = tmp_path / "job.py"
    job.write_text(PIDS_JOB)

    def run(*flags):
        proc = subprocess.Popen([sys.executable, "-m", "keyspan", "run", str(job), "--workdir", str(tmp_path / "w"),
                                 "--no-progress", "--fresh", *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=tmp_path, env=dict(os.environ))
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, err[-2000:]
        ran = {int(x): int(pid) for x, pid in re.findall(r"'ran-in', (\d+), (\d+)", out)}
        assert sorted(ran) == list(range(20)), out[-2000:]
        return proc.pid, set(ran.values())

    driver, pids = run()
    assert driver not in pids
    driver, pids = run("-D", "keyspan.small-epochs-in-driver.max-records=1000", "-Dexecution.checkpointing.interval=1s")
    assert pids == {driver}


def test_an_unknown_or_malformed_D_key_is_refused_before_the_job_starts(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(PIDS_JOB)
    for flag, says in (("-Dno.such.key=1", "-D no.such.key: not a configuration key keyspan reads"),
                       ("-Dparallelism.default", "-D 'parallelism.default' is not key=value")):
        r = subprocess.run([sys.executable, "-m", "keyspan", "run", str(job), "--workdir", str(tmp_path / "w"), flag],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path, env=dict(os.environ))
        assert r.returncode == 2 and says in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_a_relaunch_keeps_the_D_keys_and_an_older_launch_without_them_still_works():
    from keyspan.cli.main import launch_command

    launch = {"job_file": "/jobs/job.py", "workdir": "/w", "restart_delay": 10.0, "conf": [], "spark_ui": True,
              "allow_local_storage": False, "args": []}
    assert "-D" not in launch_command(launch)  # stored before -D existed
    cmd = launch_command({**launch, "define": ["state.backend.type=rocksdb", "pipeline.max-parallelism=256"]},
                         parallelism=4)
    assert cmd[cmd.index("-D"):cmd.index("-D") + 4] == ["-D", "state.backend.type=rocksdb", "-D",
                                                         "pipeline.max-parallelism=256"]
    assert cmd[-2:] == ["--parallelism", "4"]


MEMORY_HOG_JOB = '''
from keyspan.datastream import StreamExecutionEnvironment, KeyedProcessFunction
from keyspan.datastream.state import ValueStateDescriptor

class Hold(KeyedProcessFunction):
    def open(self, runtime_context):
        self.held = runtime_context.get_state(ValueStateDescriptor("held"))

    def process_element(self, value, ctx):
        self.held.update("x" * SIZE + str(value))
        yield value, len(self.held.value())

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.from_collection(list(range(12))).uid("numbers").key_by(lambda v: v).process(Hold()).uid("hold").print()
env.execute("hog")
'''


def test_a_python_worker_out_of_memory_names_the_limit_and_what_to_change(tmp_path):
    """Spark caps its Python workers' address space with spark.executor.pyspark.memory. Past it, the
    heap backend's state raises MemoryError, and RocksDB aborts the worker as it opens; both stop the
    job with the limit named and what to change, and the next run without the cap loses nothing."""
    def run(size: int, *flags: str) -> subprocess.CompletedProcess:
        job = tmp_path / "job.py"
        job.write_text(MEMORY_HOG_JOB.replace("SIZE", str(size)))
        return subprocess.run([sys.executable, "-m", "keyspan", "run", str(job), "--workdir", str(tmp_path / "w"),
                               "--no-progress", *flags], capture_output=True, text=True, timeout=400, cwd=tmp_path)

    what_to_do = ("of address space (spark.executor.pyspark.memory), and a worker takes about 400 MB of it once pyarrow "
                  "and PySpark are loaded")
    heap = run(30_000_000, "--fresh", "--conf", "spark.executor.pyspark.memory=800m")
    assert heap.returncode == 1
    assert "job 'hog' failed:" in heap.stderr and "MemoryError" in heap.stderr, heap.stderr[-3000:]
    assert f"Spark's Python workers may use 800m {what_to_do}" in heap.stderr
    assert "raise it (1g or more) or unset it" in heap.stderr and "Traceback" not in heap.stderr

    rocksdb = run(10, "--fresh", "-D", "state.backend.type=rocksdb", "--conf", "spark.executor.pyspark.memory=500m")
    assert rocksdb.returncode == 1
    assert f"Spark's Python workers may use 500m {what_to_do} (RocksDB aborts the worker" in rocksdb.stderr, \
        rocksdb.stderr[-3000:]
    assert "raise it (1g or more) or unset it" in rocksdb.stderr and "Traceback" not in rocksdb.stderr

    again = run(10, "-D", "state.backend.type=rocksdb")
    assert again.returncode == 0, again.stderr[-3000:]
    printed = [line for line in again.stdout.splitlines() if line.startswith("(")]
    assert sorted(printed) == sorted(f"({v}, {10 + len(str(v))})" for v in range(12))


def test_the_source_process_spark_hangs_up_on_exits_without_a_traceback(tmp_path):
    """A query stopped while the process running its source's reader waits for a call closes that
    process's socket, and PySpark's runner used to die of it with a traceback in the driver's terminal.
    Spark's JVM cannot be made to hang up at that moment on demand, so the test plays the JVM's end of
    the socket (PySpark 4.3's protocol) up to the reader's creation, then resets the connection."""
    import pickle
    import secrets
    import socket
    import struct

    from pyspark.sql.types import BinaryType, StructField, StructType

    from keyspan.connectors.sources import SPARK_SOURCE_RUNNER, CollectionSource, KeyspanDataSource, encode_reader
    from keyspan.io.storage import Storage

    def framed(data: bytes) -> bytes:
        return struct.pack("!i", len(data)) + data

    def read_int(conn) -> int:
        return struct.unpack("!i", conn.recv(4, socket.MSG_WAITALL))[0]

    reader = CollectionSource([1, 2, 3]).reader(Storage(f"file://{tmp_path}"), "numbers", "numbers")
    source = KeyspanDataSource({"reader": encode_reader(reader)})
    schema = StructType([StructField("payload", BinaryType())])
    secret = secrets.token_hex(16)
    with socket.create_server(("127.0.0.1", 0)) as server:
        env = {**os.environ, "PYTHON_WORKER_FACTORY_PORT": str(server.getsockname()[1]),
               "PYTHON_WORKER_FACTORY_SECRET": secret}
        runner = subprocess.Popen([sys.executable, "-m", SPARK_SOURCE_RUNNER], env=env, stderr=subprocess.PIPE,
                                  text=True)
        server.settimeout(60)
        conn, _ = server.accept()
        with conn:
            assert conn.recv(4 + len(secret), socket.MSG_WAITALL) == framed(secret.encode())
            conn.sendall(framed(b"ok"))
            read_int(conn)  # the runner's pid
            conn.sendall(framed(f"{sys.version_info[0]}.{sys.version_info[1]}".encode()) + framed(str(tmp_path).encode())
                         + struct.pack("!i", 0) + framed(pickle.dumps(source))
                         + framed(schema.json().encode()) + struct.pack("!i", 1024))
            assert read_int(conn) == 0, "the runner could not create the reader"
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        _, err = runner.communicate(timeout=60)
    assert "Traceback" not in err, err
