"""``JobExecutionResult`` (PyFlink's ``pyflink.common.job_execution_result``): what ``execute()`` returns."""

from __future__ import annotations


class JobExecutionResult:
    def __init__(self, job_id: str, job_name: str, net_runtime_ms: int, epochs: int, records: int,
                 last_checkpoint: int | None):
        self._job_id = job_id
        self._job_name = job_name
        self._net_runtime = net_runtime_ms
        self.epochs = epochs
        self.records = records
        self.last_checkpoint = last_checkpoint

    def get_job_id(self) -> str:
        return self._job_id

    def get_job_name(self) -> str:
        return self._job_name

    def get_net_runtime(self) -> int:
        return self._net_runtime

    def get_accumulator_result(self, accumulator_name: str):
        """None: PyFlink's Python functions have no accumulators (metrics are in ``result.metrics``)."""
        return self.get_all_accumulator_results().get(accumulator_name)

    def get_all_accumulator_results(self) -> dict:
        return {}

    def __repr__(self):
        return (f"JobExecutionResult(job={self._job_id!r}, epochs={self.epochs}, records={self.records}, "
                f"last_checkpoint={self.last_checkpoint}, runtime_ms={self._net_runtime})")
