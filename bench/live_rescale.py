"""Rescale pause, live vs ``--restart``: time from the request to the first epoch committed at the new
parallelism, for a running job with 10 MB / 100 MB (/ 1 GB) of keyed state.

    python bench/live_rescale.py [--sizes-mb 10 100 1000] [--skip-over-s 900]

Per size: ``keyspan run bench/live_rescale_job.py -p 2`` (its own driver and Spark session) builds
the state, then (1) a live rescale 2→4 (``POST /jobs/{id}/rescale``), (2) a live rescale back to 2,
(3) ``keyspan rescale -p 4 --restart`` (stop with a savepoint, new driver, restore). Printed: the
state size, each pause, the key groups that changed subtask, the state bytes restored, and the
restart/live ratio. A size whose state would take longer than ``--skip-over-s`` to build is skipped,
saying so.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from keyspan.checkpoint.metadata import MetadataStore, default_url  # noqa: E402
from keyspan.rest.auth import auth_headers  # noqa: E402

JOB = "live-rescale-bench"
PER_EPOCH = 20000


def _wait(what: str, check, timeout: float = 1800, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the job exited ({proc.returncode}) while waiting for {what}: {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def _keyspan(*args, **kw):
    return subprocess.run([sys.executable, "-m", "keyspan", *args], capture_output=True, text=True, **kw)


def bench(mb: int) -> dict:
    work = tempfile.mkdtemp(prefix="keyspan-live-rescale-")
    wd = os.path.join(work, "wd")
    env = dict(os.environ, LIVE_BENCH_KEYS=str(mb * 1000), LIVE_BENCH_PER_EPOCH=str(PER_EPOCH),
               LIVE_BENCH_OUTPUT=os.path.join(work, "out"))
    proc = subprocess.Popen([sys.executable, "-m", "keyspan", "run", os.path.join(ROOT, "bench", "live_rescale_job.py"),
                             "-p", "2", "--workdir", wd, "--no-progress", "--no-spark-ui"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    store = MetadataStore(default_url(wd))
    headers = lambda: auth_headers(wd)  # noqa: E731 — the token exists once the driver started
    try:
        built = mb * 1000 // PER_EPOCH + 2
        started = time.time()
        latest = _wait("the state", lambda: (c := store.latest_checkpoint(JOB)) and c["epoch"] >= built and c, proc=proc)
        build_s = time.time() - started
        state = sum(h["bytes"] for hs in latest["manifest"].values() for h in hs)
        url = store.get_job(JOB)["api_url"]
        rows = {}
        for to in (4, 2):
            answer = httpx.post(f"{url}/jobs/{JOB}/rescale", json={"parallelism": to, "reason": "bench"},
                                headers=headers(), timeout=1800)
            answer.raise_for_status()
            rows[to] = answer.json()
        old_run = store.latest_run(JOB)["run_id"]
        start = time.time()
        restart = _keyspan("rescale", JOB, "-p", "4", "--restart", "--workdir", wd, env=env, timeout=1800)
        if restart.returncode != 0:
            raise SystemExit(f"keyspan rescale --restart failed: {restart.stderr[-2000:]}")
        _wait("the first epoch after the restart", lambda: any(
            c["run_id"] != old_run and c["parallelism"] == 4 and c["run_id"] != "savepoint"
            for c in store.list_checkpoints(JOB)[-3:]))
        restart_s = time.time() - start
        return {"state": state, "live": rows[4], "back": rows[2], "restart_s": restart_s, "build_s": build_s}
    finally:
        _keyspan("stop", JOB, "--workdir", wd, timeout=300)
        lease = store.engine.connect().exec_driver_sql(f"select pid from leases where job_id = '{JOB}'").fetchone()
        for pid in {proc.pid, lease[0] if lease else None} - {None}:
            try:
                os.killpg(pid, signal.SIGKILL)  # the drivers this bench started, if stop left them
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--skip-over-s", type=float, default=900, help="skip sizes whose state takes longer to build")
    args = ap.parse_args()
    print(f"load: {os.getloadavg()[0]:.1f} (1-min average, {os.cpu_count()} cores)", flush=True)
    print(f"{'state MB':>8} {'live 2->4 ms':>12} {'live 4->2 ms':>12} {'restart 2->4 ms':>15} {'restart/live':>12} "
          f"{'kg moved':>8} {'restored MB':>11}", flush=True)
    per_mb_s = None
    for mb in args.sizes_mb:
        if per_mb_s is not None and per_mb_s * mb > args.skip_over_s:
            print(f"{mb:>8} skipped: building its state would take ~{per_mb_s * mb:.0f} s (> --skip-over-s)", flush=True)
            continue
        r = bench(mb)
        per_mb_s = r["build_s"] / mb
        live = r["live"]
        print(f"{r['state'] / 1e6:8.1f} {live['pause_ms']:12.0f} {r['back']['pause_ms']:12.0f} "
              f"{r['restart_s'] * 1000:15.0f} {r['restart_s'] * 1000 / live['pause_ms']:12.1f} {live['moved']:>8} "
              f"{live['bytes_restored'] / 1e6:11.1f}", flush=True)


if __name__ == "__main__":
    main()
