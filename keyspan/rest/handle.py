"""What the REST API needs of a running job — all it may touch of the driver. The runtime implements
it (``keyspan.runtime.control.RunnerHandle``); the API never reads the driver loop's fields."""

from __future__ import annotations

from typing import Protocol


class JobHandle(Protocol):
    job_id: str
    job_name: str
    run_id: str | None  # the run this driver executes: a stale API address must not pass for it
    store: object  # the job's MetadataStore
    workdir: str
    metadata_url: str | None
    metrics: object  # keyspan.metrics.registry.JobMetrics
    registry: object  # the Prometheus registry of the job's metrics

    def status(self) -> dict:
        """Flink's job details: jid, name, state, parallelism, epochs, records, last-checkpoint."""

    def take_savepoint(self, target: str | None) -> str:
        """A savepoint of the latest committed checkpoint; returns its path."""

    def request_stop(self, savepoint: bool, target: str | None, drain: bool = False) -> dict:
        """Stop at the next epoch boundary; the returned dict gains ``done`` (and ``path``/``error``)."""

    def stop_request(self) -> dict | None:
        """The pending stop request, if any."""

    def request_rescale(self, parallelism: int, reason: str = "requested") -> dict:
        """Run at ``parallelism`` from the next epoch on; the returned dict gains ``done`` and either
        ``error`` or ``from``/``to``/``pause_ms`` once the first epoch at it committed."""

    def query_state(self, uid: str, state: str, key: str) -> dict:
        """A key's value in a keyed state as of the last committed checkpoint (JSON-ready); raises
        LookupError naming what is unknown."""
