"""``JobClient`` as in ``pyflink.common.job_client``: what ``env.execute_async`` returns to follow and
control a job running in a background thread."""

from __future__ import annotations

import time
from concurrent.futures import Future

from keyspan.common.completable_future import CompletableFuture
from keyspan.common.job_id import JobID
from keyspan.common.job_status import JobStatus


class JobClient:
    """A job started by ``execute_async``. ``runner`` is the runtime's job runner (``JobRunner``);
    ``done`` resolves to its ``JobExecutionResult`` when the run ends."""

    def __init__(self, runner, done: Future):
        self._runner = runner
        self._done = done
        self._cancelled = False

    def get_job_id(self) -> JobID:
        return JobID(self._runner.job_id)

    def get_job_status(self) -> CompletableFuture:
        return CompletableFuture._of(self._status())

    def _status(self) -> JobStatus:
        if not self._done.done():
            if self._cancelled:
                return JobStatus.CANCELLING
            return JobStatus.RUNNING if self._runner.query is not None else JobStatus.CREATED
        if self._done.exception() is not None:
            return JobStatus.FAILED
        return JobStatus.CANCELED if self._cancelled else JobStatus.FINISHED

    def cancel(self) -> CompletableFuture:
        """Stop after the current epoch commits (no savepoint); its checkpoints stay, as in Flink."""
        self._cancelled = True
        self._runner.control.request_stop(savepoint=False, target=None)

        def stopped():
            self._done.exception()  # waits for the run to end; a failure shows in get_job_status()
        return CompletableFuture._run(stopped)

    def trigger_savepoint(self, savepoint_directory: str | None = None) -> CompletableFuture:
        """A savepoint of the latest committed checkpoint (waits for the first one); its location."""
        return CompletableFuture._run(lambda: self._when_checkpointed(
            lambda: self._runner.take_savepoint(savepoint_directory)))

    def stop_with_savepoint(self, advance_to_end_of_event_time: bool = False,
                            savepoint_directory: str | None = None) -> CompletableFuture:
        """Stop at the next epoch boundary with a savepoint; with ``advance_to_end_of_event_time``
        every event-time timer fires first (Flink's ``--drain``). Resolves to the savepoint's location."""

        def stop():
            request = self._when_checkpointed(lambda: self._runner.control.request_stop(
                savepoint=True, target=savepoint_directory, drain=advance_to_end_of_event_time))
            self._done.exception()  # the run ends once the stop is done
            if request.get("error"):
                raise RuntimeError(f"job '{self._runner.job_id}': stop with savepoint failed: {request['error']}")
            return request.get("path")
        return CompletableFuture._run(stop)

    def get_job_execution_result(self) -> CompletableFuture:
        return CompletableFuture(self._done)

    def get_accumulators(self) -> CompletableFuture:
        """Empty, as for any PyFlink Python job: Python functions have no accumulators."""
        return CompletableFuture._of({})

    def _when_checkpointed(self, action):
        while self._runner.committed is None:
            if self._done.done():
                self._done.result()  # raises the run's failure
                raise RuntimeError(f"job '{self._runner.job_id}' ended before its first checkpoint")
            time.sleep(0.05)
        return action()
