"""Exactly-once under failure: SIGKILL the whole driver (with its JVM and Python workers) at random
moments and restart; a task attempt that fails mid-epoch is retried without double counting."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest
from job_processes import committed_epoch, crash_seed, run_here, run_with_kills, start_job
from keyspan.datastream import KeyedProcessFunction
from keyspan.datastream.state import MapStateDescriptor, ValueStateDescriptor
from keyspan.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend

JOB = Path(__file__).parent / "jobs" / "counting_job.py"


def _job_env(output: Path, in_driver: int = 0) -> dict:
    # 24 epochs of 100: three kills, each up to 3 epochs plus a moment into a run, land well before the end
    return {"COUNTING_JOB_OUTPUT": str(output), "COUNTING_JOB_PER_EPOCH": "100", "COUNTING_JOB_IN_DRIVER": str(in_driver)}


def _run_job(workdir: Path, output: Path, in_driver: int = 0):
    return start_job(JOB, workdir, _job_env(output, in_driver))


def _output(output: Path) -> dict[str, list[str]]:
    """Published files only (staged output under .staging is invisible)."""
    if not output.exists():
        return {}
    return {p.name: sorted(p.read_text().splitlines()) for p in output.iterdir() if p.is_file()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory, spark) -> dict[str, list[str]]:
    """The counting job's output from a run nothing disturbs (in this process: no driver to kill)."""
    base = tmp_path_factory.mktemp("clean")
    run_here(JOB, base / "work", _job_env(base / "out"))
    output = _output(base / "out")
    assert len(output) >= 8
    return output


def _hold_metadata_store(work: Path, proc, after_epoch: int = 2) -> tuple[sqlite3.Connection, int]:
    """Once the job committed and published ``after_epoch`` or later, take the write lock of its SQLite
    metadata store from this process: the driver's next commit waits for it. The lock is taken only
    between commits (the newest checkpoint marked published, the committer's last write), so the
    commit it blocks is the next epoch's. Returns the holding connection and the last epoch
    committed before it."""
    deadline = time.time() + 120
    while committed_epoch(work) < after_epoch and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    holder = sqlite3.connect(work / "keyspan.db", timeout=30, isolation_level=None)
    while proc.poll() is None and time.time() < deadline:
        holder.execute("BEGIN EXCLUSIVE")
        epoch, published = holder.execute(
            "select epoch, published from checkpoints order by epoch desc limit 1").fetchone()
        if published:
            return holder, epoch
        holder.execute("ROLLBACK")  # the committer is between the commit and its publishing: let it finish
        time.sleep(0.005)
    raise AssertionError("the job ended (or stalled) before the metadata store could be held between commits")


@pytest.mark.parametrize("in_driver", [0, 100], ids=["spark-jobs", "epochs-in-driver"])
def test_sigkill_driver_at_random_moments_gives_same_output_as_clean_run(tmp_path, reference, in_driver):
    """Also with every epoch run in the driver (``set_small_epochs_in_driver``), against the same clean
    run of Spark jobs."""
    seed = crash_seed()
    work, out = tmp_path / "crashy", tmp_path / "crashy-out"

    def only_committed_epochs_visible():  # every published file is a committed epoch's
        published = {int(name.split("-")[1]) for name in _output(out)}
        assert all(e <= committed_epoch(work) for e in published), f"seed {seed}"

    # epochs in the driver take milliseconds: kill sooner, or the 24 epochs end before the third kill
    pace = {"epochs_between": (1, 2), "jitter_s": 0.15} if in_driver else {}
    err = run_with_kills(lambda: _run_job(work, out, in_driver=in_driver), work, 3, seed,
                         after_kill=only_committed_epochs_visible, **pace)
    assert "resuming job 'counting' from checkpoint" in err
    assert _output(out) == reference, f"seed {seed}"
    counts = Counter()
    seen = {}
    for lines in reference.values():
        for line in lines:
            rec = json.loads(line)
            counts[rec["key"]] += 1
            seen.setdefault(rec["key"], set()).add(rec["count"])
    assert all(seen[k] == set(range(1, counts[k] + 1)) for k in counts)


def test_driver_killed_after_spark_logged_a_batch_whose_checkpoint_had_not_committed(tmp_path, reference):
    """An epoch's commit runs while Spark logs the batch as done and plans the next one. A second
    process holds the metadata store, so the commit waits; the driver is SIGKILLed once Spark's log
    is ahead of the last checkpoint. The restart runs that epoch again: the output is a clean run's."""
    work, out = tmp_path / "work", tmp_path / "out"
    proc = _run_job(work, out)
    holder, committed = _hold_metadata_store(work, proc)
    logged = lambda: [int(p.name) for p in work.glob("spark/counting/*/commits/*") if p.name.isdigit()]  # noqa: E731
    deadline = time.time() + 60
    while max(logged(), default=-1) <= committed and time.time() < deadline:
        time.sleep(0.01)
    ahead = max(logged(), default=-1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    holder.rollback()
    holder.close()
    assert ahead > committed, "Spark never logged a batch before its checkpoint committed"
    assert committed_epoch(work) == committed
    assert all(int(name.split("-")[1]) <= committed for name in _output(out))  # nothing uncommitted published

    rerun = _run_job(work, out)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err[-3000:]
    assert _output(out) == reference  # without running that epoch again, its records would be lost
    assert f"Spark logged epoch {committed + 1} as done but before its checkpoint committed" in err


def _spark_jvm(driver_pid: int) -> int | None:
    """The Spark JVM among the driver process's descendants (from /proc), or None before it starts."""
    parents = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            is_java = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0].endswith(b"java")
        except (OSError, IndexError, ValueError):
            continue
        if is_java:
            pid = int(entry)
            while pid in parents and pid != driver_pid:
                pid = parents[pid]
            if pid == driver_pid:
                return int(entry)
    return None


def test_spark_s_jvm_killed_mid_job_is_named_and_the_next_run_loses_nothing(tmp_path, reference):
    """SIGKILL only the driver's Spark JVM (as the system does when it runs out of memory): the driver
    says the JVM is gone, not py4j's "Connection refused", and the next run gives a clean run's output."""
    work, out = tmp_path / "work", tmp_path / "out"
    proc = _run_job(work, out)
    deadline = time.time() + 120
    while committed_epoch(work) < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    jvm = _spark_jvm(proc.pid)
    assert jvm is not None and proc.poll() is None, "the job ended before its JVM could be killed"
    os.kill(jvm, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-3000:]
    assert "job 'counting' failed: Spark's driver JVM stopped answering" in err, err[-3000:]
    assert "running the job again resumes from the last checkpoint" in err and "Traceback" not in err

    rerun = _run_job(work, out)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err[-3000:]
    assert _output(out) == reference


class FailOnce(KeyedProcessFunction):
    """Raises the first time it sees a given record, after having updated state for earlier ones,
    so the failed attempt's partial updates must not survive into the retry."""

    def __init__(self, marker: str, poison: int):
        self.marker = marker
        self.poison = poison

    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))
        self.per_value = runtime_context.get_map_state(MapStateDescriptor("per_value"))

    def process_element(self, value, ctx):
        self.total.update((self.total.value() or 0) + value[1])
        self.per_value.put(value[1], (self.per_value.get(value[1]) or 0) + 1)
        if value[1] == self.poison and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("injected task failure")
        yield ctx.get_current_key(), self.total.value(), sum(self.per_value.values())


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
def test_task_failure_mid_epoch_is_retried_without_double_counting(env, workdir, backend):
    """On RocksDB the failed attempt read its keys through the epoch cache (prefetched per chunk, kept
    from the previous epoch) and changed them there: its rollback must drop them from the cache too."""
    env.set_state_backend(backend())
    env.set_max_records_per_epoch(40)
    data = [(f"k{i % 3}", i) for i in range(120)]
    marker = str(workdir / "failed-once")
    out = env.from_collection(data).key_by(lambda r: r[0]).process(FailOnce(marker, poison=57)).execute_and_collect(
        limit=10_000)
    assert os.path.exists(marker), "the failure was not injected"
    finals = {}
    for key, total, count in out:
        finals[key] = max(finals.get(key, (0, 0)), (total, count))
    expected = {}
    for k, v in data:
        t, c = expected.get(k, (0, 0))
        expected[k] = (t + v, c + 1)
    assert finals == expected
    assert len(out) == len(data)


def test_results_another_process_took_from_spark_run_the_epoch_again(env, workdir, monkeypatch, capfd):
    """Spark serves an epoch's results to the first connection on a one-time local port; a process of
    an earlier driver on the same host, still calling the port it knew, can get there first (CI saw it:
    the job failed). Here a stray connection with the wrong secret takes two epochs' ports first: those
    epochs run again, and every running sum comes out once, as in a clean run."""
    import socket
    import struct

    from keyspan.runtime import spark_plan

    served_rows, strays = spark_plan._served_rows, []

    def stray_first(served):
        if len(strays) < 2:
            with socket.create_connection(("127.0.0.1", served[0]), timeout=30) as stray:
                stray.sendall(struct.pack("!i", 5) + b"wrong")
                stray.recv(16)  # Spark answers "err" and closes the port
            strays.append(served[0])
        return served_rows(served)

    monkeypatch.setattr(spark_plan, "_served_rows", stray_first)
    env.set_max_records_per_epoch(30)
    data = [(f"k{i % 3}", i) for i in range(90)]
    out = env.from_collection(data).key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + b[1])) \
        .execute_and_collect(limit=10_000)
    expected, totals = [], {}
    for key, value in data:
        totals[key] = totals.get(key, 0) + value
        expected.append((key, totals[key]))
    assert len(strays) == 2
    assert Counter(out) == Counter(expected)
    assert capfd.readouterr().err.count("runs again: Spark's results of the epoch could not be read") == 2
