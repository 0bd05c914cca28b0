"""The driver ↔ task protocol: what the driver tells every task of an epoch (``EpochContext``), the
shape of the rows tasks return, and how a failing user function is reported. The task's answer,
the ``TaskReport``, belongs to the checkpoint vocabulary (``keyspan.checkpoint.handles``)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from keyspan.io import serde

OUTPUT_SCHEMA = pa.schema([("_ks_exit", pa.int32()), ("_ks_sub", pa.int32()), ("_ks_ctl", pa.binary()),
                           ("payload", pa.binary())])
DRIVER_EXIT = -1  # rows for driver sinks (print, collect, add_sink)
CONTROL_EXIT = -2  # a terminal task's pickled TaskReport
FLUSH_RECORDS = 16384  # records an exit buffers before they leave as chunks
COLUMN_CHUNK = 65536  # rows of Arrow input a columnar operator takes at once
BROADCAST_CHUNK = "broadcast"  # in place of the key groups: an exchange chunk of a broadcast input
RECORD_PREVIEW = 300  # characters of a failing record shown in the error
EPOCH_CONTEXT_PROPERTY = "keyspan.epoch.context"  # the Spark local property that carries an epoch's EpochContext


@dataclass(frozen=True)
class TimeContext:
    """What every task needs to compute the watermarks after this epoch exactly as the driver will."""

    origins: dict[str, dict]  # watermark origin uid → bound, idleness, splits, sources
    state: dict  # the origins' time state of the last committed checkpoint
    now: int  # the epoch's wall-clock time (ms)
    finished: list[str]  # origins whose whole input is read by the end of this epoch
    splits: dict[str, list] = field(default_factory=dict)  # origin uid → the split names its source reads this epoch
    batch: bool = False  # BATCH execution mode: where the input has ended, processing time ends too


@dataclass(frozen=True)
class EpochContext:
    """Everything a task of one epoch is told by the driver. It travels as a Spark local property of the
    epoch's jobs (``EPOCH_CONTEXT_PROPERTY``), so a stage's function is built once per plan."""

    run_id: str
    epoch: int
    committed_epoch: int  # -1: nothing committed yet
    committed_tokens: dict[str, str]  # "uid/subtask" → the attempt token the driver committed
    manifest: dict  # the committed checkpoint's manifest (StateHandles per operator uid)
    storage: Any  # the job's checkpoint storage (keyspan.io.storage.Storage)
    backend: Any  # the state backend spec (HashMapStateBackend, EmbeddedRocksDBStateBackend)
    max_chain: int  # deltas after which a subtask writes a full snapshot
    full_all: bool  # parallelism changed: every subtask writes a full snapshot of its new range
    time: TimeContext
    job_parameters: dict = field(default_factory=dict)
    recent_tokens: dict[int, dict[str, str]] = field(default_factory=dict)  # epoch → committed tokens of the
    # run's last few epochs before ``committed_epoch``: a worker cache parked after one of them confirms by them
    reads: dict[int, list] = field(default_factory=dict)  # keyspan source stage id → the input partitions
    # its tasks read this epoch (task i the i-th)
    ended_runs: tuple = ()  # runs this driver process ended lately: workers free what they still cache for them
    state_kinds: dict[str, dict[str, str]] = field(default_factory=dict)  # operator uid → state name → kind, as
    # the committed checkpoint describes them: a restored state asked for as another kind is refused by name


def encode_context(ctx: EpochContext) -> str:
    """A local property is a string: the context pickled (cloudpickle: job parameters are the user's),
    in base64."""
    return base64.b64encode(serde.dumps_function(ctx)).decode("ascii")


def decode_context(text: str) -> EpochContext:
    return serde.loads(base64.b64decode(text))


class UserFunctionError(RuntimeError):
    """A user function raised; the message names the operator and shows the record."""

    MARKER = "keyspan.UserFunctionError: "


class RecordFailed(Exception):
    """A user function raised on ``record`` inside an operator that takes a chunk of records at once
    (the exception it raised is the cause): reported as a failure on that record (``user_error``)."""

    def __init__(self, record):
        super().__init__(record)
        self.record = record


def user_error(op, subtask: int, exc: BaseException, record=None, method: str | None = None) -> UserFunctionError:
    """The one error a failing user call becomes: operator (name, uid, subtask) and the record or call."""
    if method is None:
        text = repr(record)
        if len(text) > RECORD_PREVIEW:
            text = text[:RECORD_PREVIEW] + f"… ({len(text)} chars)"
        where = f"on record {text}"
    else:
        where = f"in {method}"
    return UserFunctionError(f"{UserFunctionError.MARKER}operator '{op.name}' (uid {op.uid}, subtask {subtask}) "
                             f"failed {where}: {_described(exc)}")


def _described(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, MemoryError):
        text += " (the Python worker ran out of memory)"
    return text
