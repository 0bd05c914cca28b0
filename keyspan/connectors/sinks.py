"""The base of sinks that write in the job's tasks (PyFlink's ``pyflink.datastream.connectors.Sink``)."""

from __future__ import annotations


class Sink:
    """A sink for ``sink_to`` whose tasks write the records: each task of an epoch writes through the
    writer ``create_writer`` gives it, and what the writers staged becomes visible (``publish``) only
    once the epoch's checkpoint commits."""

    name = "Sink"
    runs_in_task = True

    def create_writer(self, subtask: int, epoch: int, token: str):
        raise NotImplementedError

    def publish(self, handles: list[dict]) -> None:
        """Makes an epoch's staged output visible; runs again for the same handles after a crash."""
