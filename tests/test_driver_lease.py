"""One driver per job: a second `keyspan run` of a running job is refused naming the first; once the
first is SIGKILLed the next one takes over and the output equals a failure-free run's; a driver
whose lease was taken over can never commit again (fencing token checked in the commit's own
transaction, as are the checkpoint's statistics); the metadata store records its schema version."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from keyspan.checkpoint import metadata as md
from keyspan.checkpoint import stats as checkpoint_stats
from keyspan.checkpoint.metadata import Fenced, LeaseHeld, MetadataStore

JOB = Path(__file__).parent / "jobs" / "counting_job.py"


def _row(epoch: int) -> dict:
    return dict(job_id="j", epoch=epoch, run_id="r", parallelism=1, max_parallelism=128, source_offsets={},
                manifest={}, tokens={}, sinks={}, operators=[], bytes_written=0, records=0)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """The metadata store on SQLite (a file) and on a real PostgreSQL server (conftest's postgres_url)."""
    if request.param == "sqlite":
        return "sqlite:///" + str(tmp_path / "m.db")
    return request.getfixturevalue("postgres_url")


def test_stale_lease_holder_can_never_commit_again(store_url):
    store = MetadataStore(store_url)
    first = store.claim_lease("j", "host-a", 111, duration=0.5)
    store.commit_checkpoint(fence=first, **_row(0))
    with pytest.raises(LeaseHeld, match=r"pid 111 on host host-a holds it since"):
        store.claim_lease("j", "host-b", 222, duration=0.5)
    time.sleep(0.7)  # host-a stops heartbeating: its lease expires
    second = store.claim_lease("j", "host-b", 222, duration=30)
    assert second.token == first.token + 1
    with pytest.raises(Fenced, match="taken over by driver pid 222 on host host-b"):
        store.commit_checkpoint(fence=first, also=_stats(store, 1, 100.0), **_row(1))
    with pytest.raises(Fenced):
        first.check()  # what a driver does before publishing output
    assert store.latest_checkpoint("j")["epoch"] == 0, "the fenced commit left nothing behind"
    assert [c["duration_ms"] for c in checkpoint_stats.checkpoint_history(store, "j")] == [None], \
        "nor its statistics (they are written in the commit's transaction)"
    store.commit_checkpoint(fence=second, also=_stats(store, 1, 250.0), **_row(1))
    assert store.latest_checkpoint("j")["epoch"] == 1
    assert [c["duration_ms"] for c in checkpoint_stats.checkpoint_history(store, "j")] == [None, 250.0]


def _stats(store, epoch: int, duration_ms: float):
    return checkpoint_stats.checkpoint_recorder(store, "j", epoch, 1000.0, 1000.0 + duration_ms / 1000, 0, 0)


def test_schema_version_is_recorded(store_url):
    store = MetadataStore(store_url)
    with store.engine.connect() as c:
        assert c.execute(select(md.schema_version.c.version)).scalar() == md.SCHEMA_VERSION


def _run(workdir: Path, output: Path, metadata_url: str | None = None):
    """A driver; with ``metadata_url`` (a shared store) also shared checkpoint storage and savepoint key,
    as drivers on several hosts have."""
    env = dict(os.environ, COUNTING_JOB_OUTPUT=str(output), COUNTING_JOB_RECORDS="1600", COUNTING_JOB_PER_EPOCH="100",
               KEYSPAN_LEASE_SECONDS="6")
    cmd = [sys.executable, "-m", "keyspan", "run", str(JOB), "--workdir", str(workdir), "--no-progress"]
    if metadata_url:
        cmd += ["--metadata-url", metadata_url, "--checkpoint-dir", f"file://{output.parent / 'shared-checkpoints'}"]
        env["KEYSPAN_SAVEPOINT_KEY"] = "shared-by-every-host"
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _committed(workdir: Path, metadata_url: str | None = None) -> int:
    try:
        latest = MetadataStore(metadata_url or "sqlite:///" + str(workdir / "keyspan.db")).latest_checkpoint("counting")
    except Exception:  # noqa: BLE001 — the store may not exist yet
        return -1
    return -1 if latest is None else latest["epoch"]


def _expected() -> Counter:
    """counting_job's lines for 1600 records over 40 keys, computed as the job computes them."""
    import json

    lines = Counter()
    for key in range(40):
        recent = []
        for n in range(1, 41):
            recent.append(n)
            if n % 5 == 0:
                recent = recent[-2:]
            lines[json.dumps({"key": f"key-{key:03d}", "count": n, "recent": len(recent)})] += 1
    return lines


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_second_driver_is_refused_and_takes_over_after_sigkill(tmp_path, request, store):
    """On PostgreSQL the second and third drivers run from another workdir: another host sharing the store."""
    workdir, output = tmp_path / "work", tmp_path / "out"
    url = request.getfixturevalue("postgres_url") if store == "postgresql" else None
    other = tmp_path / "other-host" if url else workdir
    first = _run(workdir, output, url)
    deadline = time.time() + 240
    while _committed(workdir, url) < 1 and first.poll() is None and time.time() < deadline:
        time.sleep(0.3)
    assert first.poll() is None, first.communicate()[1][-2000:]
    second = _run(other, output, url)
    _, err = second.communicate(timeout=240)
    assert second.returncode != 0
    assert f"pid {first.pid} on host {socket.gethostname()}" in err and "already running" in err, err[-2000:]
    assert len(err.strip().splitlines()) <= 6, err  # a few readable lines, no trace
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    third = _run(other, output, url)
    _, err = third.communicate(timeout=400)
    assert third.returncode == 0, err[-3000:]
    got = Counter(line for p in output.iterdir() if p.is_file() for line in p.read_text().splitlines())
    assert got == _expected()


def _pause_outside_a_write(pid: int, db: Path) -> None:
    """SIGSTOP the driver's process group at a moment it holds no SQLite write lock (a process frozen
    inside a write transaction blocks every SQLite writer until it dies: that is SQLite, not fencing)."""
    import sqlite3

    for _ in range(50):
        os.killpg(pid, signal.SIGSTOP)
        try:
            with sqlite3.connect(db, timeout=0.5) as c:
                c.execute("BEGIN IMMEDIATE")
                c.rollback()
            return
        except sqlite3.OperationalError:
            os.killpg(pid, signal.SIGCONT)
            time.sleep(0.3)
    raise AssertionError("the driver never paused outside a metadata write")


def test_a_paused_driver_that_wakes_after_a_takeover_commits_and_publishes_nothing(tmp_path):
    workdir, output = tmp_path / "work", tmp_path / "out"
    first = _run(workdir, output)
    deadline = time.time() + 240
    while _committed(workdir) < 1 and first.poll() is None and time.time() < deadline:
        time.sleep(0.3)
    assert first.poll() is None, first.communicate()[1][-2000:]
    _pause_outside_a_write(first.pid, workdir / "keyspan.db")  # a stopped VM, a long pause: no heartbeats
    try:
        time.sleep(7)  # > KEYSPAN_LEASE_SECONDS: the paused driver's claim expires
        second = _run(workdir, output)
        _, err = second.communicate(timeout=400)
        assert second.returncode == 0, err[-3000:]
        committed_by_second = _committed(workdir)
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    _, err = first.communicate(timeout=240)
    assert first.returncode != 0
    assert "taken over" in err, err[-3000:]
    assert _committed(workdir) == committed_by_second, "the stale driver committed after the takeover"
    got = Counter(line for p in output.iterdir() if p.is_file() for line in p.read_text().splitlines())
    assert got == _expected()
