"""Drivers as real processes for the crash tests: start a job with `keyspan run`, see how far it has
committed, and SIGKILL it at random moments inside an epoch until a run finishes."""

from __future__ import annotations

import os
import random
import runpy
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from keyspan.runtime import options as run_options


def start_job(job: Path, workdir: Path, env: dict | None = None, extra=()) -> subprocess.Popen:
    """`keyspan run JOB` in its own process group (so a SIGKILL takes its JVM and workers too)."""
    cmd = [sys.executable, "-m", "keyspan", "run", str(job), "--workdir", str(workdir), "--no-progress", *extra]
    return subprocess.Popen(cmd, env=dict(os.environ, **(env or {})), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def run_here(job: Path, workdir: Path, env: dict | None = None) -> None:
    """Run JOB to the end in this process, on the test session's Spark: a crash test's failure-free
    reference run, without starting a driver JVM of its own."""
    saved_env = {k: os.environ.get(k) for k in env or {}}
    saved_options = run_options.current()
    os.environ.update(env or {})
    run_options.install(run_options.RunOptions(workdir=str(workdir), job_file=str(job), fresh=True))
    try:
        runpy.run_path(str(job), run_name="__main__")
    finally:
        run_options.install(saved_options)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def committed_epoch(workdir: Path) -> int:
    """The newest committed checkpoint in the workdir's SQLite metadata store (-1: none yet)."""
    db = workdir / "keyspan.db"
    if not db.exists():
        return -1
    try:
        with sqlite3.connect(db, timeout=5) as c:
            row = c.execute("select max(epoch) from checkpoints").fetchone()
            return -1 if row[0] is None else row[0]
    except sqlite3.Error:
        return -1


def finished_runs(workdir: Path) -> int:
    """How many runs in the workdir's metadata store ended with the whole bounded input done."""
    try:
        with sqlite3.connect(workdir / "keyspan.db", timeout=5) as c:
            return c.execute("select count(*) from runs where status = 'FINISHED'").fetchone()[0]
    except sqlite3.Error:
        return 0


def crash_seed() -> int:
    """``KEYSPAN_CRASH_SEED`` replays a failing run's kill moments."""
    return int(os.environ.get("KEYSPAN_CRASH_SEED", random.randrange(1 << 30)))


def run_with_kills(start, workdir: Path, kills: int, seed: int, *, epochs_between=(1, 3), jitter_s=0.6,
                   wait_s=120, finish_timeout=300, after_kill=None, max_runs=12) -> str:
    """Run ``start()`` again and again: each of the first ``kills`` runs is SIGKILLed a random
    number of committed epochs after it started plus a random moment, so the kill lands anywhere
    inside an epoch (or its publication); ``after_kill()`` checks what may be visible then. The run
    after the last kill must finish; returns its stderr."""
    rng = random.Random(seed)
    done = 0
    for _ in range(max_runs):
        proc = start()
        if done < kills:
            target = committed_epoch(workdir) + rng.randint(*epochs_between)
            deadline = time.time() + wait_s
            while proc.poll() is None and committed_epoch(workdir) < target and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0, jitter_s))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                done += 1
                # a kill after the run ended leaves a finished job, which the next run starts over:
                # the job needs more epochs for this many kills, not a different engine
                assert not finished_runs(workdir), (
                    f"seed {seed}: kill {done} landed after the job had finished; give the test job more epochs")
                if after_kill is not None:
                    after_kill()
                continue
        _, err = proc.communicate(timeout=finish_timeout)
        assert proc.returncode == 0, f"seed {seed}: {err[-3000:]}"
        assert done == kills, f"seed {seed}: the job finished before it could be killed {kills} times"
        return err
    raise AssertionError(f"seed {seed}: no run finished in {max_runs} starts")
