"""The base of sinks that write in the job's tasks (PyFlink's ``pyflink.datastream.connectors.Sink``),
and the staged output of the exactly-once ones."""

from __future__ import annotations

import uuid

from keyspan.io import serde


class Sink:
    """A sink for ``sink_to`` whose tasks write the records: each task of an epoch writes through the
    writer ``create_writer`` gives it, and what the writers staged becomes visible (``publish``) only
    once the epoch's checkpoint commits."""

    name = "Sink"
    runs_in_task = True
    compacts = False  # True: output may wait past its checkpoint (FileSink.enable_compact)

    def create_writer(self, subtask: int, epoch: int, token: str):
        raise NotImplementedError

    def sync_staged(self, handles: list[dict]) -> None:
        """Makes an epoch's staged output survive a machine crash, before its checkpoint commits: the
        tasks stage it without waiting for the disk (``Storage.sync_files``)."""

    def publish(self, handles: list[dict]) -> None:
        """Makes an epoch's staged output visible; runs again for the same handles after a crash."""

    def checkpoint_committed(self, epoch: int) -> None:
        """A sink that ``compacts``: after every checkpoint, output of earlier ones may become visible."""

    def end_of_input(self) -> None:
        """A sink that ``compacts``: a bounded job ended, so whatever output waits becomes visible."""


class StagingSink(Sink):
    """A sink whose tasks stage their records through ``StagingWriter`` in ``staging``, a folder of
    the job's checkpoint storage (set by its ``use_checkpoint_storage``)."""

    staging = None

    def sync_staged(self, handles: list[dict]) -> None:
        if self.staging is not None:
            self.staging.sync_files([h["staged"] for h in handles])


class StagingWriter:
    """An exactly-once sink's task: the epoch's records, serialized, staged in the job's checkpoint
    storage under a name unique to the attempt, for the driver to publish after the commit."""

    def __init__(self, staging, serialize, subtask: int, epoch: int, token: str, what: str):
        self.staging = staging
        self.serialize = serialize
        self.subtask = subtask
        self.epoch = epoch
        self.token = token
        self.what = what
        self.records: list = []

    def write(self, value) -> None:
        self.records.append(self.serialize(value))

    def finish(self) -> dict | None:
        if not self.records:
            return None
        if self.staging is None:
            raise RuntimeError(f"{self.what}: exactly-once output needs the job's checkpoint storage to stage it")
        name = f"e{self.epoch:010d}-s{self.subtask:04d}-{self.token}"
        self.staging.write(name, serde.dumps(self.records), sync=False)  # the commit syncs it (sync_staged)
        return {"staged": name, "epoch": self.epoch, "subtask": self.subtask, "records": len(self.records)}


def staged_records(staging, handles: list[dict]):
    """The records of an epoch's handles, subtask by subtask, in the order the tasks wrote them."""
    for h in sorted(handles, key=lambda h: (h["subtask"], h["staged"])):
        yield from serde.loads(staging.read(h["staged"]))


def incarnation(staging) -> str:
    """Names this life of the job's checkpoints: ``--fresh`` (or a restore) starts epochs over, and an
    epoch number published by an earlier life must not hide the new one's output."""
    if not staging.exists("incarnation"):
        staging.write("incarnation", uuid.uuid4().hex.encode())
    return staging.read("incarnation").decode()


def clean_up_to(staging, epoch: int) -> None:
    """Staged files of published epochs, and of failed attempts of them, are no longer needed."""
    for name in staging.list(""):
        if name.startswith("e") and name[1:11].isdigit() and int(name[1:11]) <= epoch:
            staging.delete(name)
