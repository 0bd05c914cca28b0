"""The driver loop's controls: stop requests from outside (REST, CLI) acted on between epochs, and
the ``JobHandle`` the REST API uses instead of reading the runner's fields."""

from __future__ import annotations


class JobControl:
    """Requests from outside the driver loop that the loop acts on between epochs."""

    def __init__(self):
        self.stop_request: dict | None = None
        self.stopped = False

    def request_stop(self, savepoint: bool, target: str | None, drain: bool = False) -> dict:
        if self.stop_request is None:
            self.stop_request = {"savepoint": savepoint, "target": target, "done": False, "drain": drain}
        return self.stop_request

    def stop_due(self, in_epoch: bool) -> bool:
        """Stop at an epoch boundary: the current epoch finishes and commits first."""
        return self.stop_request is not None and not self.stopped and not in_epoch


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

    def status(self) -> dict:
        runner = self._runner
        committed = runner.committed
        return {"jid": runner.job_id, "name": runner.job_name,
                "state": "STOPPING" if runner.control.stop_request else "RUNNING",
                "parallelism": runner.parallelism, "epochs": runner.progress.epochs,
                "records": runner.progress.records, "last-checkpoint": committed["epoch"] if committed else None}

    def take_savepoint(self, target: str | None) -> str:
        return self._runner.take_savepoint(target)

    def request_stop(self, savepoint: bool, target: str | None, drain: bool = False) -> dict:
        return self._runner.control.request_stop(savepoint, target, drain)

    def stop_request(self) -> dict | None:
        return self._runner.control.stop_request

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
