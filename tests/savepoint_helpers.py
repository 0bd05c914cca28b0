"""Running a job in a background thread and stopping it with a savepoint through the driver's API."""

from __future__ import annotations

import threading
import time

import httpx

from keyspan.checkpoint.metadata import MetadataStore
from keyspan.rest.auth import auth_headers
from keyspan.runtime import options as run_options


class BackgroundJob:
    def __init__(self, env, job_name: str):
        self.env = env
        self.job_name = job_name
        self.result = None
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.result = self.env.execute(self.job_name)
        except BaseException as exc:  # noqa: BLE001 — re-raised in join()
            self.error = exc

    def join(self, timeout=300):
        self.thread.join(timeout)
        if self.error is not None:
            raise self.error
        return self.result


def store() -> MetadataStore:
    return MetadataStore(run_options.current().metadata())


def wait_for_checkpoints(job_id: str, count: int, timeout: float = 180, job: "BackgroundJob | None" = None) -> int:
    """Wait until the job's current run has committed ``count`` checkpoints of its own (a restore
    point inherited from a savepoint does not count) and its API is up; returns the latest epoch."""
    deadline = time.time() + timeout
    s = store()
    while time.time() < deadline:
        if job is not None and not job.thread.is_alive():
            job.join()
            raise AssertionError(f"job {job_id} ended before {count} checkpoints")
        run = s.latest_run(job_id)
        info = s.get_job(job_id)
        if run is not None and info and info["api_url"]:
            own = [c for c in s.list_checkpoints(job_id) if c["run_id"] == run["run_id"]]
            if len(own) >= count:
                return own[-1]["epoch"]
        time.sleep(0.1)
    raise TimeoutError(f"job {job_id} did not reach {count} checkpoints")


def stop_with_savepoint(job_id: str, target: str | None = None, timeout: float = 120) -> str:
    api = store().get_job(job_id)["api_url"]
    trigger = httpx.post(f"{api}/jobs/{job_id}/stop", json={"savepoint": True, "target_directory": target},
                         headers=auth_headers(run_options.current().workdir), timeout=30).json()["request-id"]
    deadline = time.time() + timeout
    while time.time() < deadline:
        answer = httpx.get(f"{api}/jobs/{job_id}/savepoints/{trigger}", timeout=30).json()
        if answer["status"]["id"] == "COMPLETED":
            assert "location" in answer["operation"], answer
            return answer["operation"]["location"]
        time.sleep(0.1)
    raise TimeoutError("savepoint did not complete")


def use_options(**changes) -> None:
    """Install run options for the next execute(), keeping the test's workdir."""
    current = run_options.current()
    run_options.install(run_options.RunOptions(workdir=current.workdir, **changes))
