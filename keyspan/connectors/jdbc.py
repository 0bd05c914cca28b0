"""PyFlink's JDBC sink (``JdbcSink.sink(sql, type_info, connection_options, execution_options)``), written
through SQLAlchemy, exactly once.

Flink's JDBC sink flushes batches while the job runs and again at each checkpoint: at least once. keyspan's
tasks stage each epoch's rows in the job's checkpoint storage instead; once the epoch's checkpoint
commits, the driver writes them in one database transaction that also records the epoch in the table
``keyspan_jdbc_sink_epochs`` (one row per sink). Rows and record become visible together or not at all,
so after a crash the restarted driver sees which epochs were written and skips them: every row is
written once, with plain ``INSERT`` statements too.

URLs: ``jdbc:postgresql://host:port/db`` (psycopg 3, keyspan's ``postgres`` extra) and ``jdbc:sqlite:path``
are translated; an SQLAlchemy URL (``postgresql://...``, ``sqlite:///...``, or any other dialect whose
driver is installed) is used as it is.
"""

from __future__ import annotations

import posixpath
import time

from keyspan.connectors.sinks import StagingSink, StagingWriter, clean_up_to, incarnation, staged_records
from keyspan.io.storage import safe_name

STAGING = "jdbc-staging"
EPOCHS_TABLE = "keyspan_jdbc_sink_epochs"
_JDBC_DATABASES = ("postgresql", "sqlite")  # the jdbc: subprotocols translated to SQLAlchemy URLs


class JdbcConnectionOptions:
    """Where the sink writes: ``JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(...)...build()``."""

    def __init__(self, url: str, driver_name: str | None = None, user_name: str | None = None,
                 password: str | None = None):
        if not url:
            raise ValueError("JdbcConnectionOptions needs with_url(...)")
        self._url = url
        self._driver_name = driver_name
        self._user_name = user_name
        self._password = password
        sqlalchemy_url(self)  # a URL keyspan cannot write to fails here, before the job starts

    def get_db_url(self) -> str:
        return self._url

    def get_driver_name(self) -> str | None:
        """Kept as given: keyspan picks the Python driver from the URL."""
        return self._driver_name

    def get_user_name(self) -> str | None:
        return self._user_name

    def get_password(self) -> str | None:
        return self._password

    class JdbcConnectionOptionsBuilder:
        def __init__(self):
            self._url = self._driver_name = self._user_name = self._password = None

        def with_url(self, url: str) -> "JdbcConnectionOptions.JdbcConnectionOptionsBuilder":
            self._url = url
            return self

        def with_driver_name(self, driver_name: str) -> "JdbcConnectionOptions.JdbcConnectionOptionsBuilder":
            self._driver_name = driver_name
            return self

        def with_user_name(self, user_name: str) -> "JdbcConnectionOptions.JdbcConnectionOptionsBuilder":
            self._user_name = user_name
            return self

        def with_password(self, password: str) -> "JdbcConnectionOptions.JdbcConnectionOptionsBuilder":
            self._password = password
            return self

        def build(self) -> "JdbcConnectionOptions":
            return JdbcConnectionOptions(self._url, self._driver_name, self._user_name, self._password)


class JdbcExecutionOptions:
    """Flink's defaults: batches of 5,000 rows, 3 retries. The batch interval is kept but changes
    nothing: rows are written once per epoch, after its checkpoint commits."""

    def __init__(self, batch_interval_ms: int = 0, batch_size: int = 5000, max_retries: int = 3):
        if batch_size < 1:
            raise ValueError(f"batch size must be positive, got {batch_size}")
        if max_retries < 0:
            raise ValueError(f"max retries must not be negative, got {max_retries}")
        self._batch_interval_ms = batch_interval_ms
        self._batch_size = batch_size
        self._max_retries = max_retries

    def get_batch_interval_ms(self) -> int:
        return self._batch_interval_ms

    def get_batch_size(self) -> int:
        return self._batch_size

    def get_max_retries(self) -> int:
        return self._max_retries

    @staticmethod
    def defaults() -> "JdbcExecutionOptions":
        return JdbcExecutionOptions()

    @staticmethod
    def builder() -> "JdbcExecutionOptions.Builder":
        return JdbcExecutionOptions.Builder()

    class Builder:
        def __init__(self):
            self._options = {}

        def with_batch_size(self, size: int) -> "JdbcExecutionOptions.Builder":
            self._options["batch_size"] = size
            return self

        def with_batch_interval_ms(self, interval_ms: int) -> "JdbcExecutionOptions.Builder":
            self._options["batch_interval_ms"] = interval_ms
            return self

        def with_max_retries(self, max_retries: int) -> "JdbcExecutionOptions.Builder":
            self._options["max_retries"] = max_retries
            return self

        def build(self) -> "JdbcExecutionOptions":
            return JdbcExecutionOptions(**self._options)


class JdbcSink(StagingSink):
    """PyFlink's ``JdbcSink``: ``ds.add_sink(JdbcSink.sink(sql, type_info, connection_options))``. ``sql``
    is any DML statement with JDBC's ``?`` parameters, filled from each record's fields in order."""

    name = "JdbcSink"

    def __init__(self, sql: str, type_info, connection_options: JdbcConnectionOptions,
                 execution_options: JdbcExecutionOptions):
        self.sql = sql
        self.connection_options = connection_options
        self.execution_options = execution_options
        self.fields = len(type_info.get_field_types())  # the statement's parameters
        self.uid = None
        self.staging = None  # the job's checkpoint storage, where tasks stage their rows
        self._engine = None  # driver side

    @staticmethod
    def sink(sql: str, type_info, jdbc_connection_options: JdbcConnectionOptions,
             jdbc_execution_options: JdbcExecutionOptions | None = None) -> "JdbcSink":
        from keyspan.common.typeinfo import RowTypeInfo

        if not isinstance(type_info, RowTypeInfo):
            raise TypeError(f"JdbcSink.sink: type_info must be a RowTypeInfo (Types.ROW([...])) giving the "
                            f"statement's parameter types, got {type_info!r}")
        parameters = len(jdbc_parameters(sql))
        fields = len(type_info.get_field_types())
        if parameters != fields:
            raise ValueError(f"JdbcSink.sink: the statement has {parameters} '?' parameter(s) but the row type has "
                             f"{fields} field(s): {sql}")
        return JdbcSink(sql, type_info, jdbc_connection_options,
                        jdbc_execution_options or JdbcExecutionOptions.defaults())

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_engine"] = None
        return state

    def use_checkpoint_storage(self, storage, uid: str) -> None:
        """The runtime hands the job's checkpoint storage and the sink's uid to the sink (tasks and driver)."""
        self.uid = uid
        self.staging = storage.child(posixpath.join(STAGING, safe_name(uid)))

    # -- tasks -----------------------------------------------------------------------------------------
    def create_writer(self, subtask: int, epoch: int, token: str):
        return StagingWriter(self.staging, self._parameters, subtask, epoch, token, f"JDBC sink '{self.uid}'")

    def _parameters(self, record) -> tuple:
        """A record's fields (a ``Row`` or tuple is one) in the order of the statement's ``?``."""
        if not isinstance(record, (tuple, list)) or len(record) != self.fields:
            raise ValueError(f"JDBC sink '{self.uid}' takes rows of {self.fields} field(s), one per '?' of "
                             f"{self.sql!r}; got {record!r}")
        return tuple(record)

    # -- the driver, after the checkpoint committed ---------------------------------------------------------
    def publish(self, handles: list[dict]) -> None:
        if not handles:
            return
        from sqlalchemy.exc import DBAPIError

        epoch = handles[0]["epoch"]
        retries = self.execution_options.get_max_retries()
        for attempt in range(retries + 1):
            try:
                self._write_epoch(epoch, handles)
                break
            except DBAPIError as exc:
                if attempt == retries or not _transient(exc):
                    raise IOError(
                        f"JDBC sink '{self.uid}' could not write epoch {epoch} to {self._where()}: "
                        f"{str(exc.orig).strip().splitlines()[0]}; fix the table or the statement first") from exc
                self._dispose()
                time.sleep(min(attempt + 1, 5))  # as Flink's sink: a longer pause after each failed try
        clean_up_to(self.staging, epoch)

    def _write_epoch(self, epoch: int, handles: list[dict]) -> None:
        """The epoch's rows and its record in ``keyspan_jdbc_sink_epochs``, in one transaction, unless that
        record says this life of the job's checkpoints wrote the epoch already."""
        from sqlalchemy import insert, select, update

        engine, table = self._connect()
        life = incarnation(self.staging)
        statement = driver_sql(self.sql, engine.dialect.paramstyle)
        size = self.execution_options.get_batch_size()
        with engine.begin() as conn:
            row = conn.execute(select(table.c.incarnation, table.c.epoch)
                               .where(table.c.sink == self.staging.uri).with_for_update()).first()
            if row is not None and row.incarnation == life and row.epoch >= epoch:
                return
            batch = []
            for record in staged_records(self.staging, handles):
                batch.append(record)
                if len(batch) >= size:
                    conn.exec_driver_sql(statement, batch)
                    batch = []
            if batch:
                conn.exec_driver_sql(statement, batch)
            if row is None:
                conn.execute(insert(table).values(sink=self.staging.uri, incarnation=life, epoch=epoch))
            else:
                conn.execute(update(table).where(table.c.sink == self.staging.uri)
                             .values(incarnation=life, epoch=epoch))

    def _connect(self):
        if self._engine is None:
            from sqlalchemy import BigInteger, Column, MetaData, String, Table, create_engine

            try:
                engine = create_engine(sqlalchemy_url(self.connection_options), future=True, pool_pre_ping=True)
            except ModuleNotFoundError as exc:
                raise RuntimeError(f"JDBC sink '{self.uid}': writing to {self._where()} needs the Python package "
                                   f"'{exc.name}'; for PostgreSQL install keyspan with its postgres extra: "
                                   "pip install 'keyspan[postgres]'") from None
            table = Table(EPOCHS_TABLE, MetaData(), Column("sink", String(1024), primary_key=True),
                          Column("incarnation", String(64), nullable=False),
                          Column("epoch", BigInteger, nullable=False))
            table.create(engine, checkfirst=True)
            self._engine = engine, table
        return self._engine

    def _dispose(self) -> None:
        if self._engine is not None:
            self._engine[0].dispose()
        self._engine = None

    def _where(self) -> str:
        return sqlalchemy_url(self.connection_options).render_as_string(hide_password=True)


def _transient(exc) -> bool:
    """A failure worth another try: the connection broke, or the database refused for now."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    return exc.connection_invalidated or isinstance(exc, (OperationalError, InterfaceError))


def sqlalchemy_url(options: JdbcConnectionOptions):
    """The SQLAlchemy URL of a JDBC (or SQLAlchemy) URL, with the options' user and password."""
    from sqlalchemy.engine import make_url

    from keyspan.checkpoint.metadata import engine_url

    url = options.get_db_url()
    if url.startswith("jdbc:"):
        sub, _, rest = url[len("jdbc:"):].partition(":")
        if sub not in _JDBC_DATABASES:
            raise ValueError(f"JDBC URL {url!r}: keyspan translates jdbc:postgresql and jdbc:sqlite URLs; for "
                             f"another database give an SQLAlchemy URL (such as mysql+pymysql://host/db) and "
                             "install its Python driver")
        if sub == "sqlite":
            if not rest or rest == ":memory:":
                raise ValueError(f"JDBC URL {url!r}: an in-memory SQLite database is not shared between the job's "
                                 "processes; name a file (jdbc:sqlite:/path/to/file.db)")
            url = f"sqlite:///{rest}"
        else:
            url = f"postgresql:{rest}" if rest.startswith("//") else f"postgresql:///{rest}"
    try:
        parsed = make_url(engine_url(url))  # PostgreSQL through psycopg 3, as the metadata store
    except Exception as exc:  # noqa: BLE001 — SQLAlchemy's ArgumentError and friends: say which URL
        raise ValueError(f"JDBC sink: {options.get_db_url()!r} is not a database URL: {exc}") from None
    query = dict(parsed.query)  # JDBC puts the user and password in the query too
    user, password = query.pop("user", None), query.pop("password", None)
    return parsed.set(username=options.get_user_name() or user or parsed.username,
                      password=options.get_password() or password or parsed.password, query=query)


def jdbc_parameters(sql: str) -> list[int]:
    """Where JDBC's ``?`` parameters are: outside quoted strings, quoted names and comments."""
    found, i, n = [], 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"":
            end = i + 1
            while end < n:
                if sql[end] == c:
                    if end + 1 < n and sql[end + 1] == c:  # a doubled quote stays inside
                        end += 2
                        continue
                    break
                end += 1
            i = end + 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            if c == "?":
                found.append(i)
            i += 1
    return found


def driver_sql(sql: str, paramstyle: str) -> str:
    """The statement in the Python driver's parameter style: ``?`` for qmark drivers (sqlite3), ``%s``
    (every literal ``%`` doubled) for format drivers (psycopg)."""
    if paramstyle == "qmark":
        return sql
    if paramstyle not in ("format", "pyformat"):
        raise ValueError(f"JDBC sink: a driver with parameter style {paramstyle!r} is not supported")
    positions = set(jdbc_parameters(sql))
    return "".join("%s" if i in positions else ("%%" if c == "%" else c) for i, c in enumerate(sql))
