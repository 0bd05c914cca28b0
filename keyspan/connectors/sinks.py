"""The base of sinks that write in the job's tasks (PyFlink's ``pyflink.datastream.connectors.Sink``)."""

from __future__ import annotations


class Sink:
    """A sink for ``sink_to`` whose tasks write the records: each task of an epoch writes through the
    writer ``create_writer`` gives it, and what the writers staged becomes visible (``publish``) only
    once the epoch's checkpoint commits."""

    name = "Sink"
    runs_in_task = True
    compacts = False  # True: output may wait past its checkpoint (FileSink.enable_compact)

    def create_writer(self, subtask: int, epoch: int, token: str):
        raise NotImplementedError

    def publish(self, handles: list[dict]) -> None:
        """Makes an epoch's staged output visible; runs again for the same handles after a crash."""

    def checkpoint_committed(self, epoch: int) -> None:
        """A sink that ``compacts``: after every checkpoint, output of earlier ones may become visible."""

    def end_of_input(self) -> None:
        """A sink that ``compacts``: a bounded job ended, so whatever output waits becomes visible."""
