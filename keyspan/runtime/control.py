"""The driver loop's controls: stop and rescale requests from outside (REST, CLI, an autoscaler)
acted on between epochs, and the ``JobHandle`` the REST API uses instead of reading the runner's fields."""

from __future__ import annotations

import os
import threading
import time


class JobControl:
    """Requests from outside the driver loop that the loop acts on between epochs."""

    def __init__(self):
        self.stop_request: dict | None = None
        self.stopped = False
        self.stop_claimed = threading.Event()  # set once the loop stops the query: no epoch starts after it
        self._lock = threading.Lock()
        self._rescale: dict | None = None  # the rescale request not yet applied
        self.rescale_requested = threading.Event()  # set while a rescale waits: the loop asks for an epoch

    def request_stop(self, savepoint: bool, target: str | None, drain: bool = False) -> dict:
        if self.stop_request is None:
            self.stop_request = {"savepoint": savepoint, "target": target, "done": False, "drain": drain}
        return self.stop_request

    def stop_due(self, in_epoch: bool) -> bool:
        """Stop at an epoch boundary: the current epoch finishes and commits first."""
        return self.stop_request is not None and not self.stopped and not in_epoch

    def claim_stop(self) -> None:
        self.stopped = True
        self.stop_claimed.set()

    def hold_epoch_for_stop(self, timeout: float = 5.0) -> None:
        """An epoch about to start while a stop waits gives the loop time to claim it. Spark starts
        the next batch of a backlog at once, so without this a stop could miss every gap between
        epochs until the input ends."""
        if self.stop_request is not None and not self.stopped:
            self.stop_claimed.wait(timeout)

    def request_rescale(self, parallelism: int, reason: str = "requested") -> dict:
        """Ask for ``parallelism`` from the next epoch on (thread-safe). The returned dict gains
        ``done`` and either ``error`` or ``from``/``to``/``pause_ms`` once the first epoch at the new
        parallelism committed; a newer request replaces one not yet applied."""
        request = {"parallelism": int(parallelism), "reason": reason, "requested_at": time.time(), "done": False}
        with self._lock:
            older, self._rescale = self._rescale, request
            self.rescale_requested.set()
        if older is not None:
            older.update(done=True, error=f"superseded by a request for parallelism {parallelism}")
        return request

    def take_rescale(self) -> dict | None:
        """The pending rescale request, handed to the loop once (at an epoch boundary)."""
        with self._lock:
            request, self._rescale = self._rescale, None
            self.rescale_requested.clear()
        return request

    def cancel_rescale(self, why: str) -> None:
        """The run ends before a pending rescale could apply."""
        request = self.take_rescale()
        if request is not None:
            request.update(done=True, error=why)


class RunnerHandle:
    """``keyspan.rest.handle.JobHandle`` for a running ``JobRunner``."""

    def __init__(self, runner):
        self._runner = runner
        self.job_id = runner.job_id
        self.job_name = runner.job_name
        self.store = runner.store
        self.workdir = runner.options.workdir
        self.metadata_url = runner.options.metadata_url
        self.metrics = runner.observer.metrics
        self.registry = runner.observer.registry

    @property
    def run_id(self) -> str | None:
        return self._runner.run_info["run_id"] if self._runner.run_info else None

    def status(self) -> dict:
        runner = self._runner
        committed = runner.committed
        return {"jid": runner.job_id, "name": runner.job_name,
                "state": "STOPPING" if runner.control.stop_request else "RUNNING",
                "parallelism": runner.parallelism, "epochs": runner.progress.epochs,
                "records": runner.progress.records, "last-checkpoint": committed["epoch"] if committed else None,
                "driver-pid": os.getpid(), "spark-application-id": runner.application_id}

    def take_savepoint(self, target: str | None) -> str:
        return self._runner.take_savepoint(target)

    def request_stop(self, savepoint: bool, target: str | None, drain: bool = False) -> dict:
        return self._runner.control.request_stop(savepoint, target, drain)

    def stop_request(self) -> dict | None:
        return self._runner.control.stop_request

    def request_rescale(self, parallelism: int, reason: str = "requested") -> dict:
        return self._runner.control.request_rescale(parallelism, reason)

    def query_state(self, uid: str, state: str, key: str) -> dict:
        """One key's value as of the last committed checkpoint (files kept while they are read)."""
        from keyspan.runtime import queryable_state

        runner = self._runner
        with runner.coordinator.files_lock:
            checkpoint = runner.committed
            if checkpoint is None:
                raise queryable_state.StateQueryError(f"job '{runner.job_id}' has no committed checkpoint yet")
            answer = queryable_state.query(runner.storage, checkpoint, runner.job_id, uid, state, key)
        return {**answer, "key": queryable_state.jsonable(answer["key"]),
                "value": queryable_state.jsonable(answer["value"])}
