"""Checkpoint statistics that outlive the driver: when each checkpoint started and ended, its size
(the bytes it wrote and the full state a restore reads), the failed checkpoints with their cause,
and the live rescales with their pause.

Kept in tables of their own beside the metadata store's, so the store's schema is untouched; the columns are the ones a later metadata schema version can take over (see docs/observability.md).
"""

from __future__ import annotations

import time

from sqlalchemy import (BigInteger, Column, Float, Integer, MetaData, String, Table, Text, bindparam, delete,
                        insert, select)

from keyspan.checkpoint.handles import is_catch_up
from keyspan.checkpoint.metadata import CHECKPOINT_HISTORY, checkpoints

_tables = MetaData()

checkpoint_stats = Table(
    "checkpoint_stats", _tables,
    Column("job_id", String(200), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("started_at", Float, nullable=False),
    Column("ended_at", Float, nullable=False),
    Column("duration_ms", Float, nullable=False),
    Column("bytes_written", BigInteger, nullable=False),
    Column("full_size", BigInteger, nullable=False),
)

checkpoint_failures = Table(
    "checkpoint_failures", _tables,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(200), nullable=False, index=True),
    Column("epoch", Integer, nullable=False),
    Column("failed_at", Float, nullable=False),
    Column("cause", Text, nullable=False),
)

rescales = Table(
    "rescales", _tables,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(200), nullable=False, index=True),
    Column("requested_at", Float, nullable=False),
    Column("epoch", Integer, nullable=False),  # the first epoch committed at the new parallelism
    Column("from_parallelism", Integer, nullable=False),
    Column("to_parallelism", Integer, nullable=False),
    Column("reason", Text),
    Column("pause_ms", Float, nullable=False),
    Column("key_groups_moved", Integer),
    Column("bytes_restored", BigInteger),
)

_READY: set[int] = set()
# the statements every epoch's commit runs, built once (SQLAlchemy then neither rebuilds nor compiles them)
_DELETE_STATS = delete(checkpoint_stats).where((checkpoint_stats.c.job_id == bindparam("stats_job")) &
                                               (checkpoint_stats.c.epoch == bindparam("stats_epoch")))
_INSERT_STATS = insert(checkpoint_stats)
_FORGET_STATS = delete(checkpoint_stats).where(  # of the checkpoints the commit forgot (CHECKPOINT_HISTORY)
    (checkpoint_stats.c.job_id == bindparam("stats_job")) & (checkpoint_stats.c.epoch < bindparam("stats_before")) &
    checkpoint_stats.c.epoch.not_in(select(checkpoints.c.epoch).where(
        (checkpoints.c.job_id == bindparam("stats_job")) & (checkpoints.c.epoch < bindparam("stats_before")))))


def _engine(store):
    engine = store.engine
    if id(engine) not in _READY:
        _tables.create_all(engine)
        _READY.add(id(engine))
    return engine


def full_state_size(manifest: dict) -> int:
    """Bytes of every state file a restore of the checkpoint reads."""
    return sum(h.get("bytes", 0) for handles in manifest.values() for h in handles if not is_catch_up(h))


def checkpoint_recorder(store, job_id: str, epoch: int, started_at: float, ended_at: float, bytes_written: int,
                        full_size: int):
    """The statements that record a checkpoint's statistics, as a function of a connection: the commit
    runs them in its own transaction, so whoever sees the checkpoint sees its duration and size, at
    no extra transaction (and fsync) per epoch."""
    _engine(store)  # the tables exist before the transaction

    def record(c) -> None:
        c.execute(_DELETE_STATS, dict(stats_job=job_id, stats_epoch=epoch))
        c.execute(_INSERT_STATS, dict(job_id=job_id, epoch=epoch, started_at=started_at, ended_at=ended_at,
                                      duration_ms=(ended_at - started_at) * 1000, bytes_written=bytes_written,
                                      full_size=full_size))
        c.execute(_FORGET_STATS, dict(stats_job=job_id, stats_before=epoch - CHECKPOINT_HISTORY))

    return record


def record_failure(store, job_id: str, epoch: int, cause: str) -> None:
    with _engine(store).begin() as c:
        c.execute(insert(checkpoint_failures).values(job_id=job_id, epoch=epoch, failed_at=time.time(),
                                                     cause=cause[:2000]))


def record_rescale(store, job_id: str, request: dict) -> None:
    """One row per live rescale: when it was asked for, why, and what it cost."""
    with _engine(store).begin() as c:
        c.execute(insert(rescales).values(
            job_id=job_id, requested_at=request["requested_at"], epoch=request["epoch"],
            from_parallelism=request["from"], to_parallelism=request["to"], reason=request.get("reason"),
            pause_ms=request["pause_ms"], key_groups_moved=request.get("moved"),
            bytes_restored=request.get("bytes_restored")))


def rescale_history(store, job_id: str) -> list[dict]:
    with _engine(store).connect() as c:
        return [dict(r) for r in c.execute(select(rescales).where(rescales.c.job_id == job_id)
                                           .order_by(rescales.c.id)).mappings()]


def checkpoint_history(store, job_id: str, limit: int = 200) -> list[dict]:
    """The newest ``limit`` checkpoints (oldest first) with their stats where they were recorded."""
    rows = store.recent_checkpoints(job_id, limit)
    if not rows:
        return []
    with _engine(store).connect() as c:
        stats = {r["epoch"]: dict(r) for r in c.execute(
            select(checkpoint_stats).where((checkpoint_stats.c.job_id == job_id) &
                                           (checkpoint_stats.c.epoch >= rows[0]["epoch"]))).mappings()}
    out = []
    for r in rows:
        s = stats.get(r["epoch"], {})
        out.append({"epoch": r["epoch"], "committed_at": r["created_at"], "parallelism": r["parallelism"],
                    "records": r["records"], "bytes_written": r["bytes_written"], "discarded": bool(r["discarded"]),
                    "published": bool(r["published"]), "restored_from": r.get("restored_from"),
                    "started_at": s.get("started_at"), "duration_ms": s.get("duration_ms"),
                    "full_size": s.get("full_size", full_state_size(r["manifest"] or {}) or None)})
    return out


def failed_checkpoints(store, job_id: str, limit: int = 100) -> list[dict]:
    with _engine(store).connect() as c:
        rows = c.execute(select(checkpoint_failures).where(checkpoint_failures.c.job_id == job_id)
                         .order_by(checkpoint_failures.c.id.desc()).limit(limit)).mappings()
        return [dict(r) for r in rows]
