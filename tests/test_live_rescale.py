"""Live rescale (issue 17): the parallelism of a running job changes between two epochs, in the same
driver and Spark session, with exactly-once state, output identical to a run never rescaled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from keyspan.checkpoint import stats as checkpoint_stats
from keyspan.checkpoint.metadata import MetadataStore
from keyspan.datastream import StreamExecutionEnvironment
from keyspan.io.storage import Storage
from keyspan.rest.auth import auth_headers
from keyspan.runtime import options as run_options
from keyspan.runtime.worker import state_io

pytestmark = pytest.mark.timeout(1200)  # whole jobs on Spark, several drivers: minutes on a loaded machine
JOBS = Path(__file__).parent / "jobs"
sys.path.insert(0, str(JOBS))
import live_rescale_job  # noqa: E402
from job_processes import committed_epoch, start_job  # noqa: E402


def _lines(out: Path) -> list:
    """Every published line of the FileSink's output folder (its finished part files)."""
    lines = []
    for path in out.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            lines += [json.loads(line) for line in path.read_text().splitlines() if line]
    return sorted(lines, key=json.dumps)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, spark):
    """The output of a run that is never rescaled (parallelism 2)."""
    root = tmp_path_factory.mktemp("reference")
    run_options.install(run_options.RunOptions(workdir=str(root / ".keyspan"), rest_api=False))
    try:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        live_rescale_job.build(env, str(root / "out"))
        env.execute("live-rescale-reference")
    finally:
        run_options.install(run_options.RunOptions())
    lines = _lines(root / "out")
    assert len([x for x in lines if x[0] == "rec"]) == live_rescale_job.RECORDS
    assert {x[0] for x in lines} == {"rec", "et", "pt"}
    return lines


def _api(store: MetadataStore, job_id: str, timeout: float = 120) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        url = (store.get_job(job_id) or {}).get("api_url")
        if url:
            return url
        time.sleep(0.1)
    raise AssertionError(f"job '{job_id}' never registered its API")


def _wait_epoch(store: MetadataStore, job_id: str, epoch: int, timeout: float = 180) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        latest = store.latest_checkpoint(job_id)
        if latest is not None and latest["epoch"] >= epoch:
            return latest
        time.sleep(0.05)
    raise AssertionError(f"job '{job_id}' did not commit epoch {epoch}")


def _rescale(url: str, job_id: str, workdir: str, parallelism: int, **body) -> httpx.Response:
    return httpx.post(f"{url}/jobs/{job_id}/rescale", json={"parallelism": parallelism, **body},
                      headers=auth_headers(workdir), timeout=300)


@pytest.mark.parametrize("in_driver", [0, 1000], ids=["spark-jobs", "epochs-in-driver"])
def test_live_rescale_2_4_1_keeps_state_session_and_output(env, workdir, spark, reference, in_driver):
    """Also with every epoch run in the driver (``set_small_epochs_in_driver``): every state kind, timers
    of both domains, operator list and broadcast state give the output of the reference run of Spark jobs."""
    out = workdir / "out"
    env.set_small_epochs_in_driver(in_driver)
    live_rescale_job.build(env, str(out))
    box = {}
    thread = threading.Thread(target=lambda: box.update(result=env.execute("live-rescale")), daemon=True)
    thread.start()
    options = run_options.current()
    store = MetadataStore(options.metadata())
    url = _api(store, "live-rescale")
    headers = auth_headers(options.workdir)

    status = httpx.get(f"{url}/jobs/live-rescale", headers=headers).json()
    assert status["parallelism"] == 2
    before = (status["driver-pid"], status["spark-application-id"])
    assert before == (os.getpid(), spark.sparkContext.applicationId)

    first = _wait_epoch(store, "live-rescale", 1)
    up = _rescale(url, "live-rescale", options.workdir, 4, reason="test: scale up")
    assert up.status_code == 200, up.text
    up = up.json()
    assert (up["done"], up["from"], up["to"]) == (True, 2, 4) and up["epoch"] > first["epoch"]
    assert up["pause_ms"] > 0 and up["moved"] > 0 and up["bytes_restored"] > 0
    at_four = store.latest_checkpoint("live-rescale")
    assert at_four["parallelism"] == 4
    assert httpx.get(f"{url}/jobs/live-rescale", headers=headers).json()["parallelism"] == 4

    refused = _rescale(url, "live-rescale", options.workdir, 129)
    assert refused.status_code == 409 and "max parallelism" in refused.json()["detail"]

    _wait_epoch(store, "live-rescale", up["epoch"] + 1)
    down = _rescale(url, "live-rescale", options.workdir, 1, reason="test: scale down")
    assert down.status_code == 200, down.text
    down = down.json()
    assert (down["from"], down["to"]) == (4, 1) and down["epoch"] > up["epoch"]
    status = httpx.get(f"{url}/jobs/live-rescale", headers=headers).json()
    assert (status["driver-pid"], status["spark-application-id"]) == before  # same driver, same Spark app
    metrics = httpx.get(f"{url}/metrics", headers=headers).text
    assert 'keyspan_numRescales_total{job="live-rescale"} 2.0' in metrics
    assert 'keyspan_lastRescalePause{job="live-rescale"}' in metrics

    thread.join(300)
    assert "result" in box, "the job did not finish"
    assert spark.sparkContext.applicationId == before[1]
    assert {p["tasks.in_driver"] for p in box["result"].epoch_phases} == {bool(in_driver)}
    assert _lines(out) == reference  # exactly the output of the run never rescaled

    checkpoints = store.list_checkpoints("live-rescale")
    parallelisms = [c["parallelism"] for c in checkpoints]
    assert parallelisms[0] == 2 and 4 in parallelisms and parallelisms[-1] == 1
    assert len({c["run_id"] for c in checkpoints}) == 1  # one run: no restart
    rows = checkpoint_stats.rescale_history(store, "live-rescale")
    assert [(r["from_parallelism"], r["to_parallelism"], r["reason"]) for r in rows] == [
        (2, 4, "test: scale up"), (4, 1, "test: scale down")]

    # operator list state: the per-subtask tallies, split and merged twice, still add up
    storage = Storage(options.checkpoint_root()).child("live-rescale")
    last = store.latest_checkpoint("live-rescale")
    handles = [h for h in last["manifest"]["tally"] if h["kind"] == "operator"]
    tallies = [v for s in state_io.load_operator_snapshots(storage, handles) for v in s["list"]["passed"]["values"]]
    assert sum(tallies) == len(reference)


def test_kill_during_live_switch_recovers_exactly_once(workdir, reference):
    """SIGKILL the driver while the first epoch at the new parallelism runs; a restart finishes the
    job with exactly the output of a clean run."""
    out, marker = workdir / "out", workdir / "switched"
    env = {"LIVE_RESCALE_OUTPUT": str(out), live_rescale_job.PAUSE_AT: "4", "LIVE_RESCALE_MARKER": str(marker)}
    wd = workdir / "wd"
    job = JOBS / "live_rescale_job.py"
    proc = start_job(job, wd, env=env, extra=["-p", "2"])
    try:
        deadline = time.time() + 180
        while committed_epoch(wd) < 1 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        store = MetadataStore(run_options.RunOptions(workdir=str(wd)).metadata())
        url = _api(store, "live-rescale")
        answer = _rescale(url, "live-rescale", str(wd), 4, timeout_s=0)
        assert answer.status_code == 202, answer.text
        while not marker.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the first epoch at parallelism 4 never started"
        before_kill = committed_epoch(wd)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert store.latest_checkpoint("live-rescale")["parallelism"] == 2  # the epoch at 4 never committed
    visible = _lines(out)
    assert all(line in reference for line in visible) and len(visible) < len(reference)

    again = start_job(job, wd, env={"LIVE_RESCALE_OUTPUT": str(out)}, extra=["-p", "2"])
    try:
        _, err = again.communicate(timeout=900)
    finally:
        if again.poll() is None:
            os.killpg(again.pid, signal.SIGKILL)
    assert again.returncode == 0, err[-3000:]
    assert f"resuming job 'live-rescale' from checkpoint {before_kill}" in err
    assert _lines(out) == reference


def test_live_rescale_on_the_standalone_cluster(spark_cluster, tmp_path, reference):
    """The same job on the loopback standalone cluster (two workers): rescaled live 2→3 by
    ``keyspan rescale`` while it runs, with the output of the run never rescaled, in one Spark application."""
    out, wd = tmp_path / "out", tmp_path / "wd"
    proc = start_job(JOBS / "live_rescale_job.py", wd, env={"LIVE_RESCALE_OUTPUT": str(out)}, extra=[
        "-p", "2", "--master", spark_cluster.master_url, "--allow-local-storage", "--no-spark-ui",
        "--conf", "spark.executor.memory=512m", "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0"])
    try:
        deadline = time.time() + 240
        while committed_epoch(wd) < 1 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        store = MetadataStore(run_options.RunOptions(workdir=str(wd)).metadata())
        url = _api(store, "live-rescale")
        app = httpx.get(f"{url}/jobs/live-rescale", headers=auth_headers(str(wd))).json()["spark-application-id"]
        cli = subprocess.run([sys.executable, "-m", "keyspan", "rescale", "live-rescale", "-p", "3", "--workdir",
                              str(wd)], capture_output=True, text=True, timeout=600)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert "rescaled job 'live-rescale' live from parallelism 2 to 3" in " ".join(cli.stdout.split())
        assert httpx.get(f"{url}/jobs/live-rescale", headers=auth_headers(str(wd))).json()[
            "spark-application-id"] == app
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert {c["parallelism"] for c in store.list_checkpoints("live-rescale")} == {2, 3}
    assert _lines(out) == reference
