"""A memory cap for Spark's Python workers that RocksDB can live under: a watchdog on resident memory.

Why not PySpark's own cap. ``spark.executor.pyspark.memory`` makes every Python worker call
``setrlimit(RLIMIT_AS, cap)``. RLIMIT_AS limits *address space*, not memory: a keyspan worker with
rocksdict open maps ~0.7–1.4 GB of address space (thread stacks, the allocator's per-thread arena
reservations, shared libraries) while ~130 MB of it is resident, so a cap small enough to mean
anything stops RocksDB's background threads from starting at all. Nor is there a cgroup to use
(the machine's memory cgroup belongs to whatever runs the session, and nothing here may move
Spark's processes between cgroups).

What this does instead. ``WorkerMemoryCap(root_pid, cap_bytes)`` runs a thread in the test (or
benchmark) process that, every ``interval`` seconds (default 50 ms), finds the PySpark Python
processes among the descendants of ``root_pid`` (the ``keyspan run`` subprocess → its JVM →
``pyspark.daemon`` → the forked workers; recognised by their command line) and reads each one's
``VmHWM`` from ``/proc/<pid>/status`` — the kernel's own high-water mark of the process's resident
set, so a peak between two samples is not missed: it shows at the next sample. A process whose
peak is above the cap is killed with SIGKILL at once; Spark then fails the task ("Python worker
exited unexpectedly"), and in local mode (no task retries) the job. Every kill is recorded in
``violations``; ``peaks`` holds each process's highest VmHWM seen.

So the verdict is exact (no process of the tree ever had more than ``cap`` resident, or the run
is marked as violating), while enforcement lags by at most one interval (the process may briefly
go above the cap before it dies). Resident memory is what RSS always means: anonymous memory plus
the file-backed pages the process has mapped (its share of Python, pyarrow and rocksdict's shared
libraries included); the page cache of files the worker reads and writes (RocksDB's SST files,
checkpoint files) is not part of any process's RSS. Linux only.
"""

from __future__ import annotations

import os
import signal
import threading
import time

WORKER_MARKERS = ("pyspark.daemon", "pyspark/daemon.py", "pyspark.worker", "pyspark/worker.py")


def _tree(root: int) -> list[int]:
    """``root``'s descendants (not root itself), from one pass over /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _is_python_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return any(m in cmd for m in WORKER_MARKERS)


def status_kb(pid: int, *fields: str) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in fields:
                    out[key] = int(value.split()[0])
    except (OSError, ValueError):
        pass
    return out


class WorkerMemoryCap:
    """Kill any PySpark Python process under ``root_pid`` whose resident memory peak (VmHWM)
    exceeds ``cap_bytes``; record peaks and violations. Use as a context manager or start()/stop().
    ``kill=False`` only watches (a benchmark measuring peaks)."""

    def __init__(self, root_pid: int, cap_bytes: int, interval: float = 0.05, kill: bool = True):
        self.root_pid = root_pid
        self.cap_bytes = int(cap_bytes)
        self.interval = interval
        self.kill = kill
        self.peaks: dict[int, int] = {}  # pid → highest VmHWM seen, bytes
        self.violations: list[dict] = []
        self.samples = 0
        self._workers: set[int] = set()
        self._others: set[int] = set()  # descendants that are not Python workers (the JVM, ...)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> "WorkerMemoryCap":
        self._thread = threading.Thread(target=self._run, name="worker-memory-cap", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise RuntimeError("the worker memory watchdog failed") from self.error

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- results -----------------------------------------------------------------------------------
    @property
    def max_peak(self) -> int:
        """The highest resident memory any Python worker had, in bytes (0: none seen)."""
        return max(self.peaks.values(), default=0)

    @property
    def workers_seen(self) -> int:
        return len(self.peaks)

    def summary(self) -> str:
        peaks = ", ".join(f"{pid}: {b / 2**20:.0f} MB" for pid, b in sorted(self.peaks.items()))
        return (f"cap {self.cap_bytes / 2**20:.0f} MB, {self.workers_seen} Python worker processes, peak RSS "
                f"{self.max_peak / 2**20:.0f} MB ({peaks}), {len(self.violations)} killed, {self.samples} samples")

    # -- the loop ----------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                self.sample()
                if self._stop.wait(self.interval):
                    self.sample()
                    return
        except BaseException as exc:  # noqa: BLE001 — reported by stop()
            self.error = exc

    def sample(self) -> None:
        for pid in _tree(self.root_pid):
            if pid in self._workers or pid in self._others:
                continue
            (self._workers if _is_python_worker(pid) else self._others).add(pid)
        self.samples += 1
        for pid in list(self._workers):
            st = status_kb(pid, "VmHWM")
            if "VmHWM" not in st:  # gone
                self._workers.discard(pid)
                continue
            hwm = st["VmHWM"] * 1024
            if hwm > self.peaks.get(pid, 0):
                self.peaks[pid] = hwm
            if hwm > self.cap_bytes and not any(v["pid"] == pid for v in self.violations):
                self.violations.append({"pid": pid, "peak_bytes": hwm, "at": time.time()})
                if self.kill:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
