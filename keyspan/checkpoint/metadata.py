"""The metadata store: jobs, runs and committed checkpoints (SQLite by default, PostgreSQL by URL).

A checkpoint row is the commit point of an epoch (seed 000's "latest checkpoint and where it
lives"): it is inserted in one transaction after every task of the epoch succeeded, so a
reader sees the epoch's offsets, state handles and sink files together or not at all.
"""

from __future__ import annotations

import os
import threading
import time

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    delete,
    event,
    insert,
    select,
    update,
)
from sqlalchemy.exc import OperationalError

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("job_id", String(200), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("job_file", Text),
    Column("code_version", String(64)),
    Column("max_parallelism", Integer),
    Column("api_url", Text),
    Column("job_copy", Text),
)

savepoints = Table(
    "savepoints",
    metadata,
    Column("path", String(1000), primary_key=True),
    Column("job_id", String(200), nullable=False, index=True),
    Column("epoch", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("parallelism", Integer, nullable=False),
    Column("code_version", String(64)),
    Column("restored_from", Text),
    Column("trigger", String(32), nullable=False),
    Column("operations", Text),  # a savepoint derived offline: what was done (State Processor API)
)

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("job_id", String(200), nullable=False, index=True),
    Column("started_at", Float, nullable=False),
    Column("ended_at", Float),
    Column("status", String(32), nullable=False),
    Column("parallelism", Integer, nullable=False),
    Column("epoch_base", Integer, nullable=False),
    Column("spark_checkpoint", Text, nullable=False),
    Column("restored_from", Text),
    Column("code_version", String(64)),
    Column("fingerprint", String(64)),
    Column("error", Text),
)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("job_id", String(200), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("parallelism", Integer, nullable=False),
    Column("max_parallelism", Integer, nullable=False),
    Column("source_offsets", JSON),
    Column("manifest", JSON, nullable=False),
    Column("tokens", JSON, nullable=False),
    Column("sinks", JSON, nullable=False),
    Column("operators", JSON, nullable=False),
    Column("bytes_written", Integer, nullable=False),
    Column("records", Integer, nullable=False),
    Column("published", Boolean, nullable=False, default=False),
    Column("discarded", Boolean, nullable=False, default=False),
    Column("restored_from", Text),
    Column("code_version", String(64)),
    Column("event_time", JSON),  # watermark origins: watermark and per-split max timestamps (event_time.py)
)

# columns added after the first release: (table, column, SQL type) added to stores created before them
_ADDED_COLUMNS = [("checkpoints", "event_time", "JSON"), ("savepoints", "operations", "TEXT")]


def _add_missing_columns(engine) -> None:
    from sqlalchemy import inspect, text

    inspector = inspect(engine)
    for table, column, sql_type in _ADDED_COLUMNS:
        if column not in {c["name"] for c in inspector.get_columns(table)}:
            with engine.begin() as c:
                c.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}"))


def default_url(workdir: str) -> str:
    return "sqlite:///" + os.path.join(os.path.abspath(workdir), "keyspan.db")


_ENGINES: dict[str, object] = {}
_ENGINES_LOCK = threading.Lock()


def _engine(url: str):
    """One engine per URL per process; tables are created once, tolerating another process doing
    the same at the same moment."""
    with _ENGINES_LOCK:
        engine = _ENGINES.get(url)
        if engine is not None:
            return engine
        if url.startswith("sqlite:///"):
            os.makedirs(os.path.dirname(url[len("sqlite:///") :]) or ".", exist_ok=True)
        engine = create_engine(url, future=True)
        if url.startswith("sqlite"):
            event.listen(engine, "connect", _sqlite_pragmas)
        for attempt in range(5):
            try:
                metadata.create_all(engine)
                _add_missing_columns(engine)
                break
            except OperationalError:
                if attempt == 4:
                    raise
                time.sleep(0.1 * (attempt + 1))
        _ENGINES[url] = engine
        return engine


class MetadataStore:
    def __init__(self, url: str):
        self.url = url
        self.engine = _engine(url)

    # jobs -------------------------------------------------------------------------------
    def register_job(self, job_id: str, name: str, job_file: str | None, code_version: str | None,
                     max_parallelism: int) -> None:
        with self.engine.begin() as c:
            row = c.execute(select(jobs).where(jobs.c.job_id == job_id)).first()
            values = dict(name=name, job_file=job_file, code_version=code_version, max_parallelism=max_parallelism)
            if row is None:
                c.execute(insert(jobs).values(job_id=job_id, created_at=time.time(), **values))
            else:
                c.execute(update(jobs).where(jobs.c.job_id == job_id).values(**values))

    def get_job(self, job_id: str) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(select(jobs).where(jobs.c.job_id == job_id)).mappings().first()
            return dict(row) if row else None

    def list_jobs(self) -> list[dict]:
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(select(jobs).order_by(jobs.c.created_at)).mappings()]

    def find_job(self, name_or_file: str) -> dict | None:
        """A job by id, name or the path of its job file."""
        path = os.path.abspath(name_or_file)
        for job in self.list_jobs():
            if name_or_file in (job["job_id"], job["name"]) or job["job_file"] == path:
                return job
        return None

    def set_job_copy(self, job_id: str, uri: str) -> None:
        with self.engine.begin() as c:
            c.execute(update(jobs).where(jobs.c.job_id == job_id).values(job_copy=uri))

    def add_savepoint(self, **row) -> None:
        with self.engine.begin() as c:
            c.execute(insert(savepoints).values(created_at=time.time(), **row))

    def list_savepoints(self, job_id: str | None = None) -> list[dict]:
        q = select(savepoints).order_by(savepoints.c.created_at)
        if job_id is not None:
            q = q.where(savepoints.c.job_id == job_id)
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(q).mappings()]

    def list_runs(self, job_id: str) -> list[dict]:
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(select(runs).where(runs.c.job_id == job_id)
                                               .order_by(runs.c.started_at)).mappings()]

    def set_api_url(self, job_id: str, url: str | None) -> None:
        with self.engine.begin() as c:
            c.execute(update(jobs).where(jobs.c.job_id == job_id).values(api_url=url))

    def forget_job(self, job_id: str) -> None:
        """``--fresh``: drop the job's runs and checkpoints (state files are deleted by the caller)."""
        with self.engine.begin() as c:
            c.execute(delete(checkpoints).where(checkpoints.c.job_id == job_id))
            c.execute(delete(runs).where(runs.c.job_id == job_id))

    # runs -------------------------------------------------------------------------------
    def start_run(self, run_id: str, job_id: str, parallelism: int, epoch_base: int, spark_checkpoint: str,
                  restored_from: str | None, code_version: str | None, fingerprint: str) -> None:
        with self.engine.begin() as c:
            c.execute(insert(runs).values(
                run_id=run_id, job_id=job_id, started_at=time.time(), status="RUNNING", parallelism=parallelism,
                epoch_base=epoch_base, spark_checkpoint=spark_checkpoint, restored_from=restored_from,
                code_version=code_version, fingerprint=fingerprint))

    def end_run(self, run_id: str, status: str, error: str | None = None) -> None:
        with self.engine.begin() as c:
            c.execute(update(runs).where(runs.c.run_id == run_id).values(status=status, ended_at=time.time(),
                                                                          error=error))

    def latest_run(self, job_id: str) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(select(runs).where(runs.c.job_id == job_id).order_by(runs.c.started_at.desc())
                            ).mappings().first()
            return dict(row) if row else None

    def shift_epoch_base(self, run_id: str, by: int) -> None:
        with self.engine.begin() as c:
            c.execute(update(runs).where(runs.c.run_id == run_id).values(epoch_base=runs.c.epoch_base + by))

    def resume_run(self, run_id: str) -> None:
        with self.engine.begin() as c:
            c.execute(update(runs).where(runs.c.run_id == run_id).values(status="RUNNING", ended_at=None, error=None))

    # checkpoints --------------------------------------------------------------------------
    def commit_checkpoint(self, discard: list[int] = (), **row) -> dict:
        """The atomic commit point of an epoch (and of the retention that follows from it)."""
        values = dict(created_at=time.time(), published=not row.get("sinks"), discarded=False, **row)
        with self.engine.begin() as c:
            c.execute(insert(checkpoints).values(**values))
            if discard:
                c.execute(update(checkpoints).where((checkpoints.c.job_id == row["job_id"]) &
                                                    checkpoints.c.epoch.in_(list(discard)))
                          .values(discarded=True, manifest={}, tokens={}))
        return values

    def mark_published(self, job_id: str, epoch: int) -> None:
        with self.engine.begin() as c:
            c.execute(update(checkpoints).where((checkpoints.c.job_id == job_id) & (checkpoints.c.epoch == epoch))
                      .values(published=True))

    def latest_checkpoint(self, job_id: str) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(select(checkpoints).where(checkpoints.c.job_id == job_id)
                            .order_by(checkpoints.c.epoch.desc())).mappings().first()
            return dict(row) if row else None

    def get_checkpoint(self, job_id: str, epoch: int) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(select(checkpoints).where((checkpoints.c.job_id == job_id) &
                                                      (checkpoints.c.epoch == epoch))).mappings().first()
            return dict(row) if row else None

    def list_checkpoints(self, job_id: str, include_discarded: bool = True) -> list[dict]:
        q = select(checkpoints).where(checkpoints.c.job_id == job_id)
        if not include_discarded:
            q = q.where(checkpoints.c.discarded == False)  # noqa: E712
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(q.order_by(checkpoints.c.epoch)).mappings()]

    def unpublished_checkpoints(self, job_id: str) -> list[dict]:
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(
                select(checkpoints).where((checkpoints.c.job_id == job_id) & (checkpoints.c.published == False))  # noqa: E712
                .order_by(checkpoints.c.epoch)).mappings()]


def _sqlite_pragmas(dbapi_connection, _record):
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()

