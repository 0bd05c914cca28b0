"""A sink that drops records (Flink's ``DiscardingSink``): for benchmarks and side-effect-only jobs."""

from __future__ import annotations

from keyspan.connectors.sinks import Sink


class DiscardingSink(Sink):
    name = "Discarding Sink"

    def create_writer(self, subtask: int, epoch: int, token: str) -> "_Discard":
        return _Discard()

    def publish(self, handles: list[dict]) -> None:
        pass


class _Discard:
    def write(self, value) -> None:
        pass

    def write_columns(self, batch) -> None:
        pass

    def finish(self) -> None:
        return None
