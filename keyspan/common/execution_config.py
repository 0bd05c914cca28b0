"""``ExecutionConfig`` as in ``pyflink.common.execution_config``, for the settings jobs commonly touch."""

from __future__ import annotations


class ExecutionConfig:
    def __init__(self):
        self._auto_watermark_interval = 200
        self._global_job_parameters: dict[str, str] = {}

    def set_auto_watermark_interval(self, interval: int) -> "ExecutionConfig":
        """Accepted for compatibility: keyspan advances watermarks at every epoch boundary (see
        docs/event-time.md), so the epoch (trigger) interval plays this role."""
        if interval < 0:
            raise ValueError(f"auto watermark interval must not be negative, got {interval}")
        self._auto_watermark_interval = int(interval)
        return self

    def get_auto_watermark_interval(self) -> int:
        return self._auto_watermark_interval

    def set_global_job_parameters(self, global_job_parameters_dict: dict) -> "ExecutionConfig":
        self._global_job_parameters = {str(k): str(v) for k, v in global_job_parameters_dict.items()}
        return self

    def get_global_job_parameters(self) -> dict:
        return dict(self._global_job_parameters)
