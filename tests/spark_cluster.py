"""A Spark standalone cluster on loopback from PySpark's own ``bin/spark-class`` — for the cluster
tests (``spark_cluster`` fixture in conftest.py) and the cluster benchmarks under ``bench/``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SparkCluster:
    """A Spark standalone cluster from PySpark's own ``bin/spark-class``: one master, ``workers``
    workers with one core each, all on 127.0.0.1."""

    def __init__(self, base: str, workers: int = 2):
        import pyspark

        self.base = base
        os.makedirs(base, exist_ok=True)
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
        try:
            return httpx.get(f"{self.webui_url}/json/", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return {}

    @staticmethod
    def alive_workers(state: dict) -> int:
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def wait(self, ready, what: str, timeout: float = 90) -> dict:
        deadline = time.time() + timeout
        while time.time() < deadline:
            state = self.state()
            if state and ready(state):
                return state
            time.sleep(0.3)
        raise TimeoutError(f"Spark standalone cluster: {what} not up after {timeout} s (logs in {self.base})")

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    def stop(self) -> None:
        for name in list(self.procs):
            self.kill(name)
