"""The keyspan command line on real processes: run, checkpoints, one-click rescale --restart 2→4→1 of a
running job with output equal to a run that was never rescaled, and the missing-Java message."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

JOB = Path(__file__).parent / "jobs" / "counting_job.py"


def _env(output: Path) -> dict:
    return dict(os.environ, COUNTING_JOB_OUTPUT=str(output), COUNTING_JOB_RECORDS="3000",
                COUNTING_JOB_PER_EPOCH="60")


def _keyspan(*args, env, cwd, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "keyspan", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _db(workdir: Path, sql: str):
    with sqlite3.connect(workdir / "keyspan.db", timeout=10) as c:
        return c.execute(sql).fetchall()


def _wait(predicate, timeout=240, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if predicate():
                return
        except (sqlite3.Error, IndexError):  # the store exists before its first rows do
            pass
        time.sleep(0.2)
    raise TimeoutError(what)


def _lines(out: Path) -> list[str]:
    return sorted(line for p in out.iterdir() if p.is_file() for line in p.read_text().splitlines())


def test_run_checkpoints_and_one_click_rescale_2_4_1(tmp_path):
    clean_out = tmp_path / "clean-out"
    done = _keyspan("run", str(JOB), "--workdir", str(tmp_path / "clean"), "--no-progress", env=_env(clean_out),
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    listing = _keyspan("checkpoints", "counting", "--workdir", str(tmp_path / "clean"), env=_env(clean_out),
                       cwd=tmp_path)
    assert listing.returncode == 0 and "retained" in listing.stdout
    reference = _lines(clean_out)

    work, out = tmp_path / "work", tmp_path / "out"
    env = _env(out)
    first = subprocess.Popen([sys.executable, "-m", "keyspan", "run", str(JOB), "--workdir", str(work),
                              "--no-progress"], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: _db(work, "select count(*) from checkpoints")[0][0] >= 4, what="first checkpoints")
        up = _keyspan("rescale", "counting", "--parallelism", "4", "--restart", "--workdir", str(work), env=env, cwd=tmp_path)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "stop with savepoint" in up.stdout and "restart from savepoint" in up.stdout
        assert first.wait(timeout=60) == 0
        _wait(lambda: _db(work, "select max(parallelism) from checkpoints")[0][0] == 4
              and _db(work, "select count(*) from checkpoints where parallelism = 4")[0][0] >= 4,
              what="checkpoints at parallelism 4")
        down = _keyspan("rescale", "counting", "-p", "1", "--restart", "--workdir", str(work), env=env, cwd=tmp_path)
        assert down.returncode == 0, down.stdout + down.stderr
        _wait(lambda: _db(work, "select status from runs order by started_at desc limit 1")[0][0] == "FINISHED",
              timeout=300, what="the rescaled job to finish")
    finally:
        if first.poll() is None:
            first.kill()
    parallelisms = {p for (p,) in _db(work, "select distinct parallelism from checkpoints")}
    assert parallelisms >= {4, 1}
    assert _lines(out) == reference
    tree = _keyspan("savepoints", "counting", "--tree", "--workdir", str(work), env=env, cwd=tmp_path)
    assert tree.returncode == 0 and tree.stdout.count("savepoint-") >= 2


def test_missing_java_is_reported_with_what_to_install(tmp_path):
    env = dict(os.environ, PATH="/nonexistent", COUNTING_JOB_OUTPUT=str(tmp_path / "o"))
    env.pop("JAVA_HOME", None)
    done = _keyspan("run", str(JOB), "--workdir", str(tmp_path), env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert "needs Java 17" in done.stderr and "openjdk-17" in done.stderr
