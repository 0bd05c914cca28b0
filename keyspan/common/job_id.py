"""``JobID`` as in ``pyflink.common.job_id``: a job's identity, as ``JobClient.get_job_id`` returns it."""

from __future__ import annotations


class JobID:
    def __init__(self, job_id: str):
        self._id = job_id

    def to_hex_string(self) -> str:
        return self._id

    def __str__(self):
        return self._id

    def __repr__(self):
        return f"JobID({self._id!r})"

    def __eq__(self, other):
        return isinstance(other, JobID) and other._id == self._id

    def __hash__(self):
        return hash(self._id)
