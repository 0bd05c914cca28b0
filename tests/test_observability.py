"""Seeing and steering a running job: Prometheus metrics scraped during a real run, PyFlink user
metrics that a task retry does not double-count, the dashboard in headless Chromium, ``keyspan
list|status``, Flink's REST bodies, the bearer token, and a killed driver's stale address."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment

JOB = Path(__file__).parent / "jobs" / "metrics_job.py"
JOB_ID = "metrics-job"
ARTIFACTS = Path(os.environ.get("KEYSPAN_TEST_ARTIFACTS", Path(__file__).parent.parent / "test-artifacts"))


# --- user metrics and task retries (in-process) ---------------------------------------------------

class CountAndFailOnce(KeyedProcessFunction):
    """Counts every record with a PyFlink counter, and fails once mid-epoch after counting some."""

    def __init__(self, marker: str, poison: int):
        self.marker = marker
        self.poison = poison

    def open(self, runtime_context):
        self.records = runtime_context.get_metrics_group().add_group("test").counter("records")

    def process_element(self, value, ctx):
        self.records.inc()
        if value[1] == self.poison and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("injected task failure")
        yield value


def test_user_counter_counts_each_record_once_despite_a_task_retry(env, workdir):
    env.set_max_records_per_epoch(40)
    data = [(f"k{i % 3}", i) for i in range(120)]
    marker = str(workdir / "failed-once")
    env.from_collection(data).key_by(lambda r: r[0]).process(CountAndFailOnce(marker, poison=57)).uid("counting") \
        .print()
    result = env.execute("user-metrics")
    assert os.path.exists(marker), "the failure was not injected"
    counters = [m for m in result.metrics.user_metrics() if m["name"] == "records"]
    assert {m["scope"][0] for m in counters} == {"test"} and {m["operator"] for m in counters} == {"counting"}
    assert sum(m["value"] for m in counters) == len(data)


class AskTheApi(KeyedProcessFunction):
    """Reads the driver's job list through its REST API while the job runs."""

    def __init__(self, port: int):
        self.port = port

    def process_element(self, value, ctx):
        deadline = time.time() + 30
        while True:
            try:
                jobs = httpx.get(f"http://127.0.0.1:{self.port}/jobs", timeout=5).json()
                break
            except httpx.HTTPError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        yield value[0], sorted(j["id"] for j in jobs["jobs"])


def test_the_api_port_is_free_when_a_run_returns(workdir, monkeypatch):
    """A run's API answers while it runs and has closed its port when ``execute`` returns, so the next
    run can listen on the same fixed port at once."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("KEYSPAN_REST_PORT", str(port))
    for run in range(2):
        env = StreamExecutionEnvironment.get_execution_environment()
        stream = env.from_collection([("a", 1)]).key_by(lambda r: r[0]).process(AskTheApi(port)).uid("ask")
        with stream.execute_and_collect(f"api-port-{run}") as results:
            seen = list(results)
        assert [key for key, _ in seen] == ["a"] and f"api-port-{run}" in seen[0][1], seen
        with socket.socket() as s:  # nothing listens there any more (binding would fail with EADDRINUSE)
            s.bind(("127.0.0.1", port))


# --- a running job in its own driver process ----------------------------------------------------

def _db(workdir: Path, sql: str):
    with sqlite3.connect(workdir / "keyspan.db", timeout=10) as c:
        return c.execute(sql).fetchall()


def _wait(predicate, timeout=180, what="condition", ignore=()):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (sqlite3.Error, httpx.HTTPError, *ignore):
            pass
        time.sleep(0.2)
    raise TimeoutError(what)


def _keyspan(*args, workdir, cwd, timeout=120):
    return subprocess.run([sys.executable, "-m", "keyspan", *args, "--workdir", str(workdir)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def _start(workdir: Path, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "keyspan", "run", str(JOB), "--workdir", str(workdir)],
                            cwd=cwd, stdout=subprocess.DEVNULL, stderr=open(cwd / "driver.log", "ab"),
                            start_new_session=True)


def _api_url(workdir: Path) -> str:
    return _wait(lambda: _db(workdir, f"select api_url from jobs where job_id = '{JOB_ID}'")[0][0],
                 what="the driver's API", ignore=(IndexError,))  # the store exists before the job is registered


class RunningJob:
    def __init__(self, root: Path):
        self.root = root
        self.workdir = root / "wd"
        self.proc = _start(self.workdir, root)
        self.url = _api_url(self.workdir)
        self.token = (self.workdir / "api-token").read_text().strip()
        self.auth = {"Authorization": f"Bearer {self.token}"}
        _wait(lambda: _db(self.workdir, "select count(*) from checkpoints")[0][0] >= 2, what="first checkpoints")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    running = RunningJob(tmp_path_factory.mktemp("observability"))
    yield running
    if running.proc.poll() is None:
        os.killpg(running.proc.pid, signal.SIGKILL)


def _scrape(job) -> dict:
    text = httpx.get(f"{job.url}/metrics", timeout=10).text
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values.setdefault(sample.name, []).append((sample.labels, sample.value))
    return values


def _total(values, name) -> float:
    return sum(v for _, v in values.get(name, []))


def test_metrics_endpoint_shows_counters_advancing_and_checkpoint_durations(job):
    first = _scrape(job)
    second = _wait(lambda: (lambda s: s if _total(s, "keyspan_numberOfCompletedCheckpoints_total") >
                            _total(first, "keyspan_numberOfCompletedCheckpoints_total") + 2 else None)(_scrape(job)),
                   what="more checkpoints")
    for name in ("keyspan_numRecordsIn_total", "keyspan_numRecordsOut_total", "keyspan_jobNumRecordsIn_total", "keyspan_user_seen_total",
                 "keyspan_user_events_total", "keyspan_user_value_count"):
        assert _total(second, name) > _total(first, name) > 0, name
    assert _total(second, "keyspan_lastCheckpointDuration") > 0
    assert _total(second, "keyspan_lastEpochDuration") > 0
    assert _total(second, "keyspan_lastCheckpointSize") > 0
    assert {labels["subtask"] for labels, _ in second["keyspan_numRecordsIn_total"]} == {"0", "1"}
    assert {labels["operator"] for labels, _ in second["keyspan_numRecordsIn_total"]} == {"numbers", "count"}
    assert second["keyspan_currentInputWatermark"][0][1] > 1_700_000_000_000
    (labels, pending), = second["keyspan_pendingRecords"]
    assert labels["source"] == "numbers" and pending == 30_000 - _total(second, "keyspan_jobNumRecordsIn_total")
    assert {labels["shape"] for labels, _ in second["keyspan_user_value_count"]} == {"values"}
    # what the source chain sent is what the keyed chain received, and the user counter counted it
    sent = {labels["operator"]: 0 for labels, _ in second["keyspan_numRecordsOut_total"]}
    for labels, v in second["keyspan_numRecordsOut_total"]:
        sent[labels["operator"]] += v
    received = sum(v for labels, v in second["keyspan_numRecordsIn_total"] if labels["operator"] == "count")
    assert sent["numbers"] == received and sent["count"] == 0  # the sink is chained: nothing leaves
    by_subtask = {labels["subtask"]: v for labels, v in second["keyspan_numRecordsIn_total"]
                  if labels["operator"] == "count"}
    user = {labels["subtask"]: v for labels, v in second["keyspan_user_seen_total"]}
    assert user == by_subtask


def test_mutating_rest_calls_need_the_token(job):
    for method, path, body in (("POST", "savepoints", {}), ("POST", "stop", {"drain": False}),
                               ("POST", "rescaling", {"parallelism": 3}), ("POST", "rescale", {"parallelism": 3})):
        answer = httpx.request(method, f"{job.url}/jobs/{JOB_ID}/{path}", json=body, timeout=10)
        assert answer.status_code == 401, (path, answer.text)
        wrong = httpx.request(method, f"{job.url}/jobs/{JOB_ID}/{path}", json=body, timeout=10,
                              headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401
    assert httpx.get(f"{job.url}/jobs/{JOB_ID}", timeout=10).status_code == 200  # reads are open on loopback
    assert oct((job.workdir / "api-token").stat().st_mode & 0o777) == "0o600"


def _savepoint_via(job, path: str, body: dict) -> str:
    """POST a savepoint or stop with ``body`` and wait for the savepoint's location."""
    trigger = httpx.post(f"{job.url}/jobs/{JOB_ID}/{path}", json=body, headers=job.auth, timeout=10).json()
    return _await_savepoint(job, trigger["request-id"])


def _await_savepoint(job, trigger: str) -> str:
    def done():
        answer = httpx.get(f"{job.url}/jobs/{JOB_ID}/savepoints/{trigger}", timeout=10).json()
        return answer if answer["status"]["id"] == "COMPLETED" else None
    operation = _wait(done, what="the savepoint")["operation"]
    assert "failure-cause" not in operation, operation
    return operation["location"]


def test_rest_takes_flink_bodies_and_lists_jobs_checkpoints_exceptions(job):
    target = job.root / "flink-savepoints"
    location = _savepoint_via(job, "savepoints", {"target-directory": f"file://{target}", "cancel-job": False})
    assert location.startswith(f"file://{target}") and any(target.iterdir())
    assert job.proc.poll() is None  # cancel-job false: still running
    jobs = httpx.get(f"{job.url}/jobs", timeout=10).json()["jobs"]
    assert {"id": JOB_ID, "name": JOB_ID, "status": "RUNNING"} in jobs
    checkpoints = httpx.get(f"{job.url}/jobs/{JOB_ID}/checkpoints", timeout=10).json()
    assert checkpoints["counts"]["completed"] >= 2 and checkpoints["counts"]["failed"] == 0
    latest = checkpoints["latest"]["completed"]
    assert latest["end_to_end_duration"] > 0 and latest["checkpointed_size"] > 0 and latest["state_size"] > 0
    exceptions = httpx.get(f"{job.url}/jobs/{JOB_ID}/exceptions", timeout=10).json()
    assert exceptions["root-exception"] is None and exceptions["all-exceptions"] == []
    assert job.proc.poll() is None


def test_dashboard_in_headless_chromium(job):
    driver_path = shutil.which("chromedriver")
    if driver_path is None:
        pytest.skip("chromedriver is not installed (Debian: apt-get install -y chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,1400"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(driver_path), options=options)

    def until(predicate, what):  # the page redraws every second: an element may go stale under us
        return _wait(predicate, what=what, ignore=(StaleElementReferenceException,))

    def text_of(selector):
        return " ".join(e.text for e in browser.find_elements(By.CSS_SELECTOR, selector))

    try:
        browser.get(f"{job.url}/ui/job/{JOB_ID}#token={job.token}")

        def number(element_id):
            text = browser.find_element(By.ID, element_id).text.replace(",", "")
            return int(text) if text.isdigit() else None

        first = until(lambda: number("records"), "the records number")
        second = until(lambda: (lambda n: n if n and n > first else None)(number("records")), "records to move")
        assert second > first
        until(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#checkpoints tr.checkpoint")) >= 2, "checkpoints")
        until(lambda: browser.find_elements(By.CSS_SELECTOR, "#plot-rate polyline"), "the throughput plot")
        until(lambda: "count per key" in text_of("#operators tr.operator"), "the operator table")
        time.sleep(3)  # a few more points on the plots for the screenshot
        browser.save_screenshot(str(ARTIFACTS / "dashboard-job.png"))

        browser.find_element(By.ID, "btn-savepoint").click()
        message = until(lambda: (lambda t: t if "savepoint written" in t else None)(
            browser.find_element(By.ID, "message").text), "the savepoint button's answer")
        path = message.split("savepoint written: ", 1)[1].strip()
        assert path in [s for (s,) in _db(job.workdir, "select path from savepoints")]
        until(lambda: path in text_of("#savepoints li"), "the savepoint in the list")
        browser.execute_script("document.getElementById('checkpoints-section').scrollIntoView()")
        browser.save_screenshot(str(ARTIFACTS / "dashboard-checkpoints.png"))
        browser.get(f"{job.url}/")
        until(lambda: JOB_ID in text_of("#jobs") and "RUNNING" in text_of("#jobs"), "the job list")
    finally:
        browser.quit()


def test_list_and_status_of_a_running_job(job):
    listing = _keyspan("list", workdir=job.workdir, cwd=job.root)
    assert listing.returncode == 0, listing.stderr
    line = next(line for line in listing.stdout.splitlines() if JOB_ID in line)
    assert "RUNNING" in line and job.url in line and " 2 " in line
    status = _keyspan("status", JOB_ID, workdir=job.workdir, cwd=job.root)
    assert status.returncode == 0, status.stderr
    for text in ("RUNNING", "records/s", "watermarks", "count per key", "last checkpoints", "ms",
                 "source numbers:", "records not read yet"):
        assert text in status.stdout, (text, status.stdout)


def test_a_stale_address_served_by_another_workdirs_driver_of_the_same_job_is_not_running(job):
    """A driver of the same job id in another workdir is killed, and its address is now served by the
    module's running driver (as when the port is reused): the other workdir must not see it as its own."""
    other = job.root / "other-wd"
    proc = _start(other, job.root)
    try:
        _api_url(other)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    with sqlite3.connect(other / "keyspan.db", timeout=10) as c:
        c.execute("update jobs set api_url = ? where job_id = ?", (job.url, JOB_ID))
    savepoints_before = _db(job.workdir, "select count(*) from savepoints")[0][0]

    line = next(line for line in _keyspan("list", workdir=other, cwd=job.root).stdout.splitlines() if JOB_ID in line)
    assert "NOT RUNNING (last seen" in line and job.url not in line
    for args in (("status", JOB_ID), ("savepoint", JOB_ID)):
        answer = _keyspan(*args, workdir=other, cwd=job.root)
        assert f"job '{JOB_ID}' is not running (last seen" in answer.stdout + answer.stderr, answer
    assert _db(job.workdir, "select count(*) from savepoints")[0][0] == savepoints_before
    # its own workdir still sees it running
    assert "RUNNING" in _keyspan("status", JOB_ID, workdir=job.workdir, cwd=job.root).stdout


def test_stop_with_drain_then_a_killed_driver_is_reported_not_running(job):
    target = job.root / "stop-savepoints"
    location = _savepoint_via(job, "stop", {"targetDirectory": f"file://{target}", "drain": True})
    assert location.startswith(f"file://{target}")
    assert job.proc.wait(timeout=120) == 0
    # drain: the watermarks went to the end before the final savepoint, as after the end of bounded input
    (epoch, marks), = _db(job.workdir, "select epoch, event_time from checkpoints order by epoch desc limit 1")
    assert json.loads(marks) and all(m["wm"] == 2 ** 63 - 1 for m in json.loads(marks).values())
    assert _db(job.workdir, f"select epoch from savepoints where path = '{location}'")[0][0] == epoch
    assert "STOPPED" in _keyspan("list", workdir=job.workdir, cwd=job.root).stdout

    # a driver killed with SIGKILL leaves its API address behind
    job.proc = _start(job.workdir, job.root)
    _api_url(job.workdir)
    os.killpg(job.proc.pid, signal.SIGKILL)
    job.proc.wait(timeout=30)
    assert _db(job.workdir, f"select api_url from jobs where job_id = '{JOB_ID}'")[0][0]  # stale
    for args in (("status", JOB_ID), ("savepoint", JOB_ID)):
        answer = _keyspan(*args, workdir=job.workdir, cwd=job.root)
        text = answer.stdout + answer.stderr
        assert f"job '{JOB_ID}' is not running (last seen" in text, text
        assert "Traceback" not in text
    assert "NOT RUNNING (last seen" in _keyspan("list", workdir=job.workdir, cwd=job.root).stdout


def test_keyspan_ui_serves_every_job_without_a_driver(job):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ui = subprocess.Popen([sys.executable, "-m", "keyspan", "ui", "--port", str(port), "--workdir", str(job.workdir)],
                          cwd=job.root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        jobs = _wait(lambda: httpx.get(f"{base}/ui/api/jobs", timeout=5).json(), what="keyspan ui")
        assert [j["id"] for j in jobs] == [JOB_ID] and jobs[0]["status"] != "RUNNING"
        detail = httpx.get(f"{base}/ui/api/jobs/{JOB_ID}", timeout=5).json()
        assert len(detail["checkpoints"]) >= 2 and all(c["duration_ms"] > 0 for c in detail["checkpoints"][1:])
        assert len(detail["savepoints"]) >= 3  # REST body, dashboard button, stop
        assert "keyspan" in httpx.get(f"{base}/ui/job/{JOB_ID}", timeout=5).text
        assert httpx.post(f"{base}/jobs/{JOB_ID}/savepoints", json={}, timeout=5).status_code == 401
    finally:
        ui.terminate()
        ui.wait(timeout=30)


# --- without Spark ----------------------------------------------------------------------------

def test_metric_groups_follow_pyflink():
    from keyspan.metrics import metricbase

    root = metricbase.operator_group("op-under-test", 0)
    value_group = root.add_group("shape", "values")
    assert value_group.get_all_variables() == {"shape": "values"}
    assert root.add_group("a").get_metric_identifier("n") == "a.n"
    counter = root.add_group("a").counter("n")
    assert counter is root.add_group("a").counter("n")  # open() on another worker gets the same metric
    counter.inc(); counter.inc(4); counter.dec()
    assert counter.get_count() == 4
    assert root.gauge("g", lambda: 7) is None  # PyFlink's gauge returns nothing
    snapshot = metricbase.take_epoch_snapshot(["op-under-test"], 0)
    assert {(tuple(m["scope"]), m["name"], m["value"]) for m in snapshot} == {(("a",), "n", 4), ((), "g", 7)}
    assert counter.get_count() == 0  # the next epoch reports its own increments


def test_progress_without_a_terminal_logs_one_line_every_n_epochs(caplog):
    import io
    import logging

    from keyspan.runtime.progress_display import ProgressDisplay

    display = ProgressDisplay(True, every=3, stream=io.StringIO())
    with caplog.at_level(logging.INFO, logger="keyspan.progress"):
        logging.getLogger("keyspan").propagate = True
        for _ in range(7):
            display.epochs += 1
            display.records += 10
            display.update()
        display.done()
    lines = [r.getMessage() for r in caplog.records if r.name == "keyspan.progress"]
    assert [line.split()[1] for line in lines] == ["3", "6", "7"]
    assert display.live is None and "\r" not in display.stream.getvalue()


def test_settings_layer_file_then_environment_then_flags(tmp_path, monkeypatch):
    from keyspan.common.settings import load

    (tmp_path / "keyspan.toml").write_text('workdir = "/from/file"\nrest_port = 9000\nlog_level = "DEBUG"\n')
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith("KEYSPAN_")]:
        monkeypatch.delenv(name)
    assert (load().workdir, load().rest_port, load().log_level) == ("/from/file", 9000, "DEBUG")
    monkeypatch.setenv("KEYSPAN_REST_PORT", "9100")
    monkeypatch.setenv("KEYSPAN_HOME", "/from/env")  # the older name of the workdir variable still works
    assert (load().workdir, load().rest_port) == ("/from/env", 9100)
    assert load(workdir="/from/flag", rest_port=None).workdir == "/from/flag"
    other = tmp_path / "elsewhere.toml"
    other.write_text('checkpoint_dir = "s3://bucket/cp"\n')
    monkeypatch.setenv("KEYSPAN_CONFIG", str(other))
    assert load().checkpoint_dir == "s3://bucket/cp" and load().log_level == "INFO"
