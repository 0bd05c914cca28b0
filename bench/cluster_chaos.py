"""Chaos on a Spark standalone cluster: kill executor JVMs, Python workers, whole worker daemons and
the driver at random while a keyed job runs, and check that not one output line is lost or doubled.

    python bench/cluster_chaos.py [--kills 20] [--seed 7]

Starts its own cluster on loopback (PySpark's ``bin/spark-class``: master + 2 workers, 1 core each),
and runs ``tests/jobs/cluster_job.py`` (lines ``key,value`` from a monitored folder → running count per
key → FileSink) with ``keyspan run --master spark://… --restart-attempts 1000``, while a feeder adds
one input file every 1.5 s. Each kill waits for the job to commit a checkpoint newer than the one
committed when it struck (the recovery time). A killed worker daemon comes back 2 s later (the host
rebooting); a killed driver is started again with the same command (what systemd or Kubernetes do).
Then the feeder stops, the job drains, and its output is compared line by line with the expected
running counts. Prints kills, restarts, lost and duplicated lines, and the recovery time per kill.
Checkpoints go to a folder every process of the one host shares (``--allow-local-storage``).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from keyspan.checkpoint.metadata import MetadataStore, default_url  # noqa: E402
from spark_cluster import SparkCluster  # noqa: E402

JOB = os.path.join(ROOT, "tests", "jobs", "cluster_job.py")
KINDS = ("python worker", "executor JVM", "worker daemon", "driver")
JOB_ID = "cluster-count"


def _tree() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(name))
    return kids


def _descendants(pid: int, kids: dict[int, list[int]]) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Chaos:
    def __init__(self, cluster: SparkCluster, work: str, kills: int, seed: int, records_per_file: int = 120):
        self.cluster = cluster
        self.work = work
        self.kills_wanted = kills
        self.random = random.Random(seed)
        self.records_per_file = records_per_file
        self.input = os.path.join(work, "in")
        self.output = os.path.join(work, "out")
        self.workdir = os.path.join(work, ".keyspan")
        os.makedirs(self.input, exist_ok=True)
        self.records: list[tuple[str, int]] = []
        self.files = 0
        self.driver: subprocess.Popen | None = None
        self.driver_starts = 0
        self.log = os.path.join(work, "driver.log")
        self.kills: list[dict] = []
        self.feeding = threading.Event()
        self.store: MetadataStore | None = None

    # -- the job ------------------------------------------------------------------------------
    def _command(self) -> list[str]:
        return [sys.executable, "-m", "keyspan", "run", JOB, "--master", self.cluster.master_url, "--no-progress",
                "--workdir", self.workdir, "--allow-local-storage", "--restart-attempts", "1000",
                "--restart-delay", "1", "--no-spark-ui", "--conf", "spark.executor.memory=512m",
                "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
                "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=30s"]

    def start_driver(self) -> None:
        env = dict(os.environ, CLUSTER_JOB_INPUT=self.input, CLUSTER_JOB_OUTPUT=self.output,
                   CLUSTER_JOB_CONTINUOUS="1", SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
        env.pop("PYSPARK_GATEWAY_PORT", None)
        with open(self.log, "ab") as log:
            self.driver = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True, env=env, cwd=ROOT)
        self.driver_starts += 1

    def add_file(self) -> None:
        start = len(self.records)
        batch = [(f"key-{i % 37:02d}", i) for i in range(start, start + self.records_per_file)]
        name = f"{self.files:06d}.txt"
        hidden = os.path.join(self.input, f".{name}.tmp")  # the source skips names starting with "." (as Flink's)
        with open(hidden, "w") as f:
            f.writelines(f"{k},{v}\n" for k, v in batch)
        os.replace(hidden, os.path.join(self.input, name))  # a file appears whole
        self.records += batch
        self.files += 1

    def _feed(self) -> None:
        while self.feeding.is_set():
            self.add_file()
            time.sleep(1.5)

    def committed_epoch(self) -> int:
        if self.store is None:
            if not os.path.exists(os.path.join(self.workdir, "keyspan.db")):
                return -1
            self.store = MetadataStore(default_url(self.workdir))
        latest = self.store.latest_checkpoint(JOB_ID)
        return latest["epoch"] if latest else -1

    def output_lines(self) -> list[str]:
        lines = []
        if os.path.isdir(self.output):
            for name in os.listdir(self.output):
                path = os.path.join(self.output, name)
                if os.path.isfile(path):
                    with open(path) as f:
                        lines += f.read().splitlines()
        return lines

    def expected_lines(self) -> list[str]:
        counts: dict = collections.Counter()
        out = []
        for k, _ in self.records:
            counts[k] += 1
            out.append(f"{k},{counts[k]}")
        return out

    def keep_driver_alive(self) -> None:
        """What systemd's Restart=always does: a driver that exited is started again."""
        if self.driver is not None and self.driver.poll() is not None:
            self.start_driver()

    # -- kills --------------------------------------------------------------------------------
    def _cluster_pids(self, marker: str) -> list[int]:
        kids = _tree()
        pids = []
        for name, proc in self.cluster.procs.items():
            if name.startswith("worker-"):
                pids += [p for p in _descendants(proc.pid, kids) if marker in _cmdline(p)]
        return pids

    def kill(self, kind: str) -> str | None:
        if kind == "driver":
            os.killpg(self.driver.pid, signal.SIGKILL)
            self.driver.wait()
            self.start_driver()
            return f"driver pid {self.driver.pid}"
        if kind == "worker daemon":
            name = self.random.choice(sorted(n for n in self.cluster.procs if n.startswith("worker-")))
            self.cluster.kill(name)  # the worker and its executor with it
            threading.Timer(2.0, self.cluster.start_worker, args=(int(name.split("-")[1]),)).start()
            return name
        marker = "CoarseGrainedExecutorBackend" if kind == "executor JVM" else "pyspark"
        pids = self._cluster_pids(marker)
        if kind == "python worker":  # a forked worker running a task if there is one, else the daemon
            kids = _tree()
            forked = [p for p in pids if any(c in pids for c in kids.get(p, []))]
            busy = [c for p in forked for c in kids.get(p, []) if c in pids]
            pids = busy or pids
        if not pids:
            return None
        pid = self.random.choice(pids)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return f"pid {pid}"

    def wait_for_recovery(self, epoch: int, timeout: float = 240) -> float | None:
        start = time.time()
        while time.time() - start < timeout:
            self.keep_driver_alive()
            if self.committed_epoch() > epoch:
                return time.time() - start
            time.sleep(0.2)
        return None

    def run(self) -> dict:
        self.add_file()
        self.start_driver()
        self.feeding.set()
        feeder = threading.Thread(target=self._feed, daemon=True)
        feeder.start()
        if self.wait_for_recovery(-1, timeout=300) is None:
            raise RuntimeError(f"the job never committed a checkpoint; see {self.log}")
        kinds = list(KINDS)
        self.random.shuffle(kinds)  # every kind at least once, then at random
        kinds += [self.random.choice(KINDS) for _ in range(max(0, self.kills_wanted - len(kinds)))]
        for kind in kinds[: max(self.kills_wanted, 1)]:
            time.sleep(self.random.uniform(1.0, 4.0))
            self.keep_driver_alive()
            epoch = self.committed_epoch()
            struck = time.time()
            target = self.kill(kind)
            if target is None:  # nothing of that kind alive right now (e.g. between tasks): kill an executor
                kind, target = "executor JVM", self.kill("executor JVM")
            recovery = self.wait_for_recovery(epoch)
            self.kills.append({"kind": kind, "target": target, "at": struck, "recovery_s": recovery})
            print(f"kill {len(self.kills):>2}: {kind:<14} {target or '-':<28} recovered in "
                  f"{'-' if recovery is None else f'{recovery:5.1f} s'}", flush=True)
        self.feeding.clear()
        feeder.join()
        expected = collections.Counter(self.expected_lines())
        deadline = time.time() + 300
        while time.time() < deadline and collections.Counter(self.output_lines()) != expected:
            self.keep_driver_alive()
            time.sleep(0.5)
        got = collections.Counter(self.output_lines())
        self.stop()
        return {
            "kills": self.kills,
            "records": len(self.records),
            "lost": sum((expected - got).values()),
            "duplicated": sum((got - expected).values()),
            "driver_starts": self.driver_starts,
            "runs": len(self.store.list_runs(JOB_ID)) if self.store else 0,
            "restarts_in_driver": self._log_restarts(),
        }

    def _log_restarts(self) -> int:
        with open(self.log, errors="replace") as f:
            return sum(1 for line in f if "from its latest checkpoint in" in line)

    def stop(self) -> None:
        if self.driver is not None and self.driver.poll() is None:
            subprocess.run([sys.executable, "-m", "keyspan", "stop", JOB_ID, "--workdir", self.workdir],
                           capture_output=True, timeout=120)
            try:
                self.driver.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.driver.pid, signal.SIGKILL)
                self.driver.wait()


def report(result: dict) -> None:
    by_kind = collections.Counter(k["kind"] for k in result["kills"])
    print(f"\nkills: {len(result['kills'])} ({', '.join(f'{n} {kind}' for kind, n in sorted(by_kind.items()))})")
    print(f"restarts: {result['restarts_in_driver']} by the restart strategy in a driver, "
          f"{result['driver_starts'] - 1} driver re-runs; {result['runs']} runs in the metadata store")
    print(f"records: {result['records']}; lost output lines: {result['lost']}; "
          f"duplicated output lines: {result['duplicated']}")
    for kind in KINDS:
        times = [k["recovery_s"] for k in result["kills"] if k["kind"] == kind and k["recovery_s"] is not None]
        if times:
            print(f"recovery after {kind:<14} median {sorted(times)[len(times) // 2]:5.1f} s, max {max(times):5.1f} s")
    failed = [k for k in result["kills"] if k["recovery_s"] is None]
    if failed:
        print(f"{len(failed)} kill(s) without a new checkpoint within the timeout")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, output)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="keyspan-chaos-")
    cluster = SparkCluster(os.path.join(work, "cluster"))
    try:
        result = Chaos(cluster, work, args.kills, args.seed).run()
        report(result)
        return 0 if result["lost"] == 0 and result["duplicated"] == 0 else 1
    finally:
        cluster.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work folder: {work}")


if __name__ == "__main__":
    sys.exit(main())
