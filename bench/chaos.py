"""Chaos run (not a timed test): SIGKILL the driver, its JVM and its Python workers at random, at
least ``--kills`` times (a killed worker's task is retried by Spark; a killed driver or JVM is restarted), on a file-sourced keyed job, and flip a byte in the newest checkpoint once
while the driver is down; restart after every kill until the job finishes, then compare its output
with what the input implies and print the lost and duplicated lines (both must be 0).

    python bench/chaos.py [--kills 20] [--files 60] [--seed N]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = Path(__file__).parent / "chaos_job.py"


def children(pid: int) -> list[int]:
    """All descendants of ``pid`` (from /proc)."""
    kids: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids[ppid].append(int(entry))
    found, stack = [], [pid]
    while stack:
        for child in kids.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def targets(driver: int) -> dict[str, list[int]]:
    procs = children(driver)
    return {"driver": [driver],
            "jvm": [p for p in procs if "java" in cmdline(p).split(" ")[0]],
            "python worker": [p for p in procs if "pyspark.daemon" in cmdline(p) or "pyspark.worker" in cmdline(p)]}


def committed(workdir: Path) -> tuple[int, list[dict]]:
    try:
        with sqlite3.connect(workdir / "keyspan.db", timeout=5) as c:
            rows = c.execute("select epoch, manifest from checkpoints where discarded = 0 order by epoch").fetchall()
    except sqlite3.Error:
        return -1, []
    return (rows[-1][0] if rows else -1), [{"epoch": e, "manifest": json.loads(m)} for e, m in rows]


def corrupt_newest(workdir: Path) -> str | None:
    _, rows = committed(workdir)
    if len(rows) < 2:
        return None
    newest = {h["path"] for hs in rows[-1]["manifest"].values() for h in hs}
    older = {h["path"] for hs in rows[-2]["manifest"].values() for h in hs}
    only = sorted(newest - older)
    if not only:
        return None
    path = workdir / "checkpoints" / "chaos" / only[0]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return f"checkpoint {rows[-1]['epoch']}: {only[0]}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--files", type=int, default=60)
    ap.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="keyspan-chaos-"))
    inputs, output, workdir = base / "in", base / "out", base / "work"
    inputs.mkdir()
    expected = collections.Counter()
    seen = collections.Counter()
    for f in range(args.files):
        keys = [f"key-{rng.randrange(25):02d}" for _ in range(200)]
        (inputs / f"part-{f:04d}.txt").write_text("\n".join(f"{k},{f}" for k in keys) + "\n")
        for k in keys:
            seen[k] += 1
            expected[f"{k} {seen[k]}"] += 1
    env = dict(os.environ, CHAOS_INPUT=str(inputs), CHAOS_OUTPUT=str(output), KEYSPAN_LEASE_SECONDS="10",
               KEYSPAN_SPARK_MASTER="local[2,4]")  # task retries, as on a cluster
    cmd = [sys.executable, "-m", "keyspan", "run", str(JOB), "--workdir", str(workdir), "--no-progress"]
    kills = collections.Counter()
    corrupted = None
    restarts = 0
    started = time.time()
    print(f"chaos: seed {args.seed}, {args.files} files x 200 records, workdir {base}", flush=True)
    while True:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        restarts += 1
        while sum(kills.values()) < args.kills and proc.poll() is None:
            # wait until the run commits another epoch (Spark's start-up takes 10-60 s on a busy machine),
            # then kill at a random moment of the epochs that follow
            before = committed(workdir)[0]
            deadline = time.time() + 600
            while committed(workdir)[0] <= before and proc.poll() is None and time.time() < deadline:
                time.sleep(0.2)
            pause = time.time() + rng.uniform(0, 3)
            while time.time() < pause and proc.poll() is None:
                time.sleep(0.05)
            if proc.poll() is not None:
                break
            kind = rng.choice(["python worker", "python worker", "driver", "jvm"])
            pids = targets(proc.pid)[kind]
            if not pids:
                kind, pids = "driver", [proc.pid]
            os.kill(rng.choice(pids), signal.SIGKILL)
            kills[kind] += 1
            print(f"chaos: kill {sum(kills.values())}: {kind}; committed epoch {committed(workdir)[0]}", flush=True)
            if kind == "python worker":
                continue  # Spark retries the task (as on a cluster); the driver runs on
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of that driver's process group
            except ProcessLookupError:
                pass
            proc.wait()
            if corrupted is None and sum(kills.values()) >= args.kills // 2:
                corrupted = corrupt_newest(workdir)
                if corrupted:
                    print(f"chaos: corrupted {corrupted}", flush=True)
        if proc.returncode is not None and proc.returncode < 0:
            continue  # killed above: restart
        _, err = proc.communicate()
        if proc.returncode == 0:
            break
        print(f"chaos: run {restarts} exited {proc.returncode}: {err.strip().splitlines()[-3:]}", flush=True)
        if restarts > args.kills * 3 + 10:
            print("chaos: giving up", flush=True)
            return 2
    got = collections.Counter(line for p in output.iterdir() if p.is_file() for line in p.read_text().splitlines())
    lost = sum((expected - got).values())
    duplicated = sum((got - expected).values())
    print(f"chaos: {sum(kills.values())} kills ({dict(kills)}), {restarts} runs, corrupted "
          f"{corrupted or 'nothing (no checkpoint to corrupt)'}, {time.time() - started:.0f} s")
    print(f"chaos: expected {sum(expected.values())} lines, got {sum(got.values())}: lost {lost}, "
          f"duplicated {duplicated}")
    return 0 if lost == duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
