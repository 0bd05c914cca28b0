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
    BigInteger,
    JSON,
    Boolean,
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    create_engine,
    delete,
    event,
    insert,
    select,
    update,
)
from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError, ProgrammingError

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

# A retired checkpoint (its files deleted by retention) keeps a row of history (epoch, time, records,
# bytes) for `keyspan checkpoints --all`, the dashboard and the REST API, for this many epochs; older
# ones are deleted by the commit that passes them, so the store and its readers do not grow with a
# job's age. Retained checkpoints, and any whose output is not published yet, are always kept.
CHECKPOINT_HISTORY = 1000

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
    Column("bytes_written", BigInteger, nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("published", Boolean, nullable=False, default=False),
    Column("discarded", Boolean, nullable=False, default=False),
    Column("restored_from", Text),
    Column("code_version", String(64)),
    Column("event_time", JSON),  # watermark origins: watermark and per-split max timestamps (event_time.py)
    Column("sources", JSON),  # per source index: {"uid", "fingerprint"}, so a changed job maps its offsets
)

# One driver per job: the holder's claim, renewed by heartbeats; every checkpoint commit checks the
# token in its own transaction, so a driver whose lease was taken over can never commit again.
leases = Table(
    "leases",
    metadata,
    Column("job_id", String(200), primary_key=True),
    Column("token", Integer, nullable=False),  # fencing token: +1 at every claim
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("since", Float, nullable=False),
    Column("heartbeat", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
)

schema_version = Table(
    "schema_version",
    metadata,
    Column("id", Integer, primary_key=True),  # always 1: one row
    Column("version", Integer, nullable=False),
)


def _add_column(table: str, column: str, sql_type: str):
    """A migration step: add a column to a store created before it existed (portable DDL)."""
    def step(conn) -> None:
        from sqlalchemy import inspect, text

        if column not in {c["name"] for c in inspect(conn).get_columns(table)}:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}"))
    return step


def _widen_to_bigint(columns: list[tuple[str, str]]):
    """A migration step: byte and record counts past 2³¹ (PostgreSQL's INTEGER is 32-bit; SQLite's
    integers are 64-bit already)."""
    def step(conn) -> None:
        from sqlalchemy import inspect, text

        if conn.dialect.name != "postgresql":
            return
        inspector = inspect(conn)
        for table, column in columns:
            if inspector.has_table(table):
                conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE BIGINT"))
    return step


# version → the step that brings a store of the version before it up to it; new tables come from
# create_all, so steps only alter what existed
MIGRATIONS = {
    1: _add_column("checkpoints", "event_time", "JSON"),
    2: _add_column("checkpoints", "sources", "JSON"),
    3: _add_column("savepoints", "operations", "TEXT"),
    4: _widen_to_bigint([("checkpoints", "bytes_written"), ("checkpoints", "records"),
                         ("checkpoint_stats", "bytes_written"), ("checkpoint_stats", "full_size")]),
}
SCHEMA_VERSION = max(MIGRATIONS)


class SchemaTooNew(RuntimeError):
    pass


class StoreUnreadable(RuntimeError):
    """The store's database is damaged (e.g. a SQLite file with flipped bytes)."""


def _migrate(engine) -> None:
    """Bring the store's schema to ``SCHEMA_VERSION`` (a store without a version row is version 0)."""
    with engine.begin() as c:
        version = c.execute(select(schema_version.c.version).where(schema_version.c.id == 1)).scalar()
        if version is not None and version > SCHEMA_VERSION:
            raise SchemaTooNew(f"the metadata store {engine.url!r} has schema version {version}, newer than this "
                               f"keyspan knows ({SCHEMA_VERSION}): upgrade keyspan")
        if version == SCHEMA_VERSION:
            return
        for step in sorted(v for v in MIGRATIONS if v > (version or 0)):
            MIGRATIONS[step](c)
        if version is None:
            c.execute(insert(schema_version).values(id=1, version=SCHEMA_VERSION))
        else:
            c.execute(update(schema_version).where(schema_version.c.id == 1).values(version=SCHEMA_VERSION))


class LeaseHeld(RuntimeError):
    """Another driver holds the job's lease."""

    def __init__(self, job_id: str, holder: dict):
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder["since"]))
        left = max(0.0, holder["expires_at"] - time.time())
        super().__init__(
            f"job '{job_id}' is already running: driver pid {holder['pid']} on host {holder['host']} holds it "
            f"since {since}. Stop that driver first (keyspan stop/cancel, or kill it); if it died, its claim "
            f"expires {left:.0f} s after its last heartbeat and the job can be started again then")
        self.holder = holder


class Fenced(RuntimeError):
    """This driver's lease was taken over: it must not commit or publish anything more."""


def default_url(workdir: str) -> str:
    return "sqlite:///" + os.path.join(os.path.abspath(workdir), "keyspan.db")


_ENGINES: dict[str, object] = {}
_ENGINES_LOCK = threading.Lock()


def engine_url(url: str) -> str:
    """The SQLAlchemy URL for a store URL: ``postgresql://`` and ``postgres://`` (as PostgreSQL and
    its hosting services write them) use psycopg 3, the driver of keyspan's ``postgres`` extra."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def _create_engine(url: str):
    """An engine for the store URL, with a message saying what to install when its driver is missing."""
    try:
        engine = create_engine(engine_url(url), future=True, pool_pre_ping=not url.startswith("sqlite"))
    except ModuleNotFoundError as exc:
        raise RuntimeError(f"the metadata store {url} needs the Python package '{exc.name}'; for PostgreSQL "
                           "install keyspan with its postgres extra: pip install 'keyspan[postgres]'") from None
    if url.startswith("sqlite"):
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _engine(url: str):
    """One engine per URL per process; tables are created once, tolerating another process doing
    the same at the same moment."""
    with _ENGINES_LOCK:
        engine = _ENGINES.get(url)
        if engine is not None:
            return engine
        if url.startswith("sqlite:///"):
            os.makedirs(os.path.dirname(url[len("sqlite:///") :]) or ".", exist_ok=True)
        engine = _create_engine(url)
        for attempt in range(5):
            try:
                metadata.create_all(engine)
                _migrate(engine)
                break
            except (OperationalError, IntegrityError, ProgrammingError):  # another driver created them first
                if attempt == 4:
                    raise
                time.sleep(0.1 * (attempt + 1))
            except DatabaseError as exc:  # not a race: the database itself is damaged
                raise StoreUnreadable(
                    f"the metadata store {engine.url!r} cannot be read ({exc.orig}). Restore it from a backup, or "
                    "move it aside: the next run, with a new store, names the newest checkpoint to restore with -s"
                ) from exc
        _ENGINES[url] = engine
        return engine


class MetadataStore:
    def __init__(self, url: str):
        self.url = url
        self.engine = _engine(url)

    def describe(self) -> str:
        """The store's URL for messages: without its password."""
        return self.engine.url.render_as_string(hide_password=True)

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
    def commit_checkpoint(self, discard: list[int] = (), fence: "Lease | None" = None, also=None, **row) -> dict:
        """The atomic commit point of an epoch (and of the retention that follows from it); with a
        ``fence``, only while this driver still holds the job's lease (checked in the same transaction).
        ``also(connection)``: more statements for the same transaction (the checkpoint's statistics)."""
        values = dict(created_at=time.time(), published=not row.get("sinks"), discarded=False, **row)
        with self.engine.begin() as c:
            if fence is not None:
                fence.renew_in(c)
            c.execute(_INSERT_CHECKPOINT, values)  # values as parameters: the statement compiles once
            if discard:
                c.execute(update(checkpoints).where((checkpoints.c.job_id == row["job_id"]) &
                                                    checkpoints.c.epoch.in_(list(discard)))
                          .values(discarded=True, manifest={}, tokens={}))
            c.execute(_FORGET_RETIRED, dict(forget_job=row["job_id"], forget_before=row["epoch"] - CHECKPOINT_HISTORY))
            if also is not None:
                also(c)
        return values

    def abandon_checkpoints(self, job_id: str, epochs: list[int]) -> list[dict]:
        """Take checkpoints a restore cannot use out of the job's history (the caller keeps their rows
        next to their files); returns the rows, oldest first."""
        with self.engine.begin() as c:
            cond = (checkpoints.c.job_id == job_id) & checkpoints.c.epoch.in_(list(epochs))
            rows = [dict(r) for r in c.execute(select(checkpoints).where(cond).order_by(checkpoints.c.epoch))
                    .mappings()]
            c.execute(delete(checkpoints).where(cond))
        return rows

    # leases -------------------------------------------------------------------------------
    def claim_lease(self, job_id: str, host: str, pid: int, duration: float) -> "Lease":
        """Claim the job for this driver, or raise ``LeaseHeld`` naming the live holder. An expired
        claim (or one of a dead process on this host) is taken over with the next fencing token; a
        conditional update makes two drivers racing for it end with one winner."""
        for _ in range(20):
            now = time.time()
            with self.engine.begin() as c:
                row = c.execute(select(leases).where(leases.c.job_id == job_id)).mappings().first()
                values = dict(host=host, pid=pid, since=now, heartbeat=now, expires_at=now + duration)
                if row is None:
                    try:
                        c.execute(insert(leases).values(job_id=job_id, token=1, **values))
                    except IntegrityError:
                        continue
                    return Lease(self, job_id, 1, duration)
                if row["expires_at"] > now and not _claim_void(row, host, pid):
                    raise LeaseHeld(job_id, dict(row))
                done = c.execute(update(leases).where((leases.c.job_id == job_id) & (leases.c.token == row["token"]))
                                 .values(token=row["token"] + 1, **values))
                if done.rowcount == 1:
                    return Lease(self, job_id, row["token"] + 1, duration)
        raise LeaseHeld(job_id, dict(row))

    def lease_holder(self, job_id: str) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(select(leases).where(leases.c.job_id == job_id)).mappings().first()
            return dict(row) if row else None

    def mark_published(self, job_id: str, epoch: int) -> None:
        with self.engine.begin() as c:
            c.execute(update(checkpoints).where((checkpoints.c.job_id == job_id) & (checkpoints.c.epoch == epoch))
                      .values(published=True))

    def latest_checkpoint(self, job_id: str) -> dict | None:
        recent = self.recent_checkpoints(job_id, 1)
        return recent[0] if recent else None

    def recent_checkpoints(self, job_id: str, limit: int) -> list[dict]:
        """The newest ``limit`` checkpoint rows, retired ones included, oldest first."""
        with self.engine.connect() as c:
            rows = c.execute(select(checkpoints).where(checkpoints.c.job_id == job_id)
                             .order_by(checkpoints.c.epoch.desc()).limit(limit)).mappings()
            return [dict(r) for r in rows][::-1]

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


class Lease:
    """This driver's claim on a job: ``renew`` is the heartbeat, ``check`` guards publishing, and a
    commit renews it inside its own transaction (``renew_in``). All raise ``Fenced`` once another
    driver took the job over."""

    def __init__(self, store: MetadataStore, job_id: str, token: int, duration: float):
        self.store = store
        self.job_id = job_id
        self.token = token
        self.duration = duration

    def renew_in(self, conn) -> None:
        now = time.time()
        done = conn.execute(_RENEW_LEASE, dict(lease_job=self.job_id, lease_token=self.token, heartbeat=now,
                                               expires_at=now + self.duration))
        if done.rowcount != 1:
            holder = conn.execute(select(leases).where(leases.c.job_id == self.job_id)).mappings().first()
            who = f"driver pid {holder['pid']} on host {holder['host']}" if holder else "another driver"
            raise Fenced(f"job '{self.job_id}' was taken over by {who} (this driver's lease expired): this "
                         "driver stops without committing or publishing anything more")

    def renew(self) -> None:
        with self.store.engine.begin() as c:
            self.renew_in(c)

    check = renew

    def release(self) -> None:
        with self.store.engine.begin() as c:
            c.execute(update(leases).where((leases.c.job_id == self.job_id) & (leases.c.token == self.token))
                      .values(expires_at=0.0))


# statements of every epoch's commit, built once: SQLAlchemy then skips rebuilding and compiling them
_INSERT_CHECKPOINT = insert(checkpoints)
_FORGET_RETIRED = delete(checkpoints).where(
    (checkpoints.c.job_id == bindparam("forget_job")) & (checkpoints.c.epoch < bindparam("forget_before")) &
    (checkpoints.c.discarded == True) & (checkpoints.c.published == True))  # noqa: E712
_RENEW_LEASE = update(leases).where((leases.c.job_id == bindparam("lease_job")) &
                                    (leases.c.token == bindparam("lease_token")))


def _claim_void(row, host: str, pid: int) -> bool:
    """A claim of this very process (an earlier run of it) or of a process on this host that is gone
    needs no waiting for its expiry."""
    if row["host"] != host:
        return False
    if row["pid"] == pid:
        return True
    try:
        os.kill(row["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _sqlite_pragmas(dbapi_connection, _record):
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()

