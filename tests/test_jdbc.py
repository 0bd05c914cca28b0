"""PyFlink's JdbcSink: rows staged with the checkpoint and written after it commits, in one transaction
with the epoch's record, so each row reaches the database once, through driver SIGKILLs, repeated
publications and a database that refused the first try. Real SQLite files and a real PostgreSQL server."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy

from keyspan.common import Row, Types
from keyspan.datastream.connectors.jdbc import JdbcConnectionOptions, JdbcExecutionOptions, JdbcSink

JOB = Path(__file__).parent / "jobs" / "jdbc_counting_job.py"
ROW = Types.ROW([Types.STRING(), Types.INT()])
INSERT = "insert into counts (k, n) values (?, ?)"


def _options(url: str, **kw) -> JdbcConnectionOptions:
    builder = JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(url)
    for name, value in kw.items():
        builder = getattr(builder, f"with_{name}")(value)
    return builder.build()


def _rows(url: str) -> Counter:
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            return Counter(tuple(r) for r in conn.exec_driver_sql("select k, n from counts"))
    finally:
        engine.dispose()


def _create_table(url: str) -> None:
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.exec_driver_sql("create table counts (k varchar(20), n integer)")
    engine.dispose()


def _expected(records: int, keys: int) -> Counter:
    return Counter((f"key-{k:02d}", n) for k in range(keys) for n in range(1, records // keys + 1))


# --- the API, without Spark -----------------------------------------------------------------------------

def test_options_keep_pyflink_s_getters_and_flink_s_defaults():
    options = _options("jdbc:postgresql://db.example:5432/shop", driver_name="org.postgresql.Driver",
                       user_name="ann", password="secret")
    assert (options.get_db_url(), options.get_driver_name(), options.get_user_name(), options.get_password()) == (
        "jdbc:postgresql://db.example:5432/shop", "org.postgresql.Driver", "ann", "secret")
    defaults = JdbcExecutionOptions.defaults()
    assert (defaults.get_batch_size(), defaults.get_batch_interval_ms(), defaults.get_max_retries()) == (5000, 0, 3)
    built = JdbcExecutionOptions.builder().with_batch_size(200).with_batch_interval_ms(1000).with_max_retries(5).build()
    assert (built.get_batch_size(), built.get_batch_interval_ms(), built.get_max_retries()) == (200, 1000, 5)
    with pytest.raises(ValueError, match="max retries"):
        JdbcExecutionOptions.builder().with_max_retries(-1).build()


def test_jdbc_urls_become_sqlalchemy_urls_and_others_fail_before_the_job_starts(tmp_path):
    from keyspan.connectors.jdbc import sqlalchemy_url

    def url(jdbc, **kw):
        return sqlalchemy_url(_options(jdbc, **kw)).render_as_string(hide_password=False)

    assert url("jdbc:postgresql://h:5433/db", user_name="ann", password="pw") == "postgresql+psycopg://ann:pw@h:5433/db"
    assert url("jdbc:postgresql://h/db?user=bob&password=x&sslmode=require") == \
        "postgresql+psycopg://bob:x@h/db?sslmode=require"
    assert url("jdbc:postgresql:shop") == "postgresql+psycopg:///shop"
    assert url(f"jdbc:sqlite:{tmp_path}/out.db") == f"sqlite:///{tmp_path}/out.db"
    assert url("postgresql://ann@h/db") == "postgresql+psycopg://ann@h/db"  # an SQLAlchemy URL as it is
    with pytest.raises(ValueError, match="jdbc:mysql.*SQLAlchemy URL"):
        _options("jdbc:mysql://h/db")
    with pytest.raises(ValueError, match="in-memory SQLite"):
        _options("jdbc:sqlite::memory:")
    with pytest.raises(ValueError, match="with_url"):
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder().build()


def test_only_question_marks_outside_strings_and_comments_are_parameters():
    from keyspan.connectors.jdbc import driver_sql

    sql = "insert into t (a, b, c) values (?, '?it''s 100%', ?) -- why?\n/* or ? */ on conflict do nothing"
    assert driver_sql(sql, "qmark") == sql
    assert driver_sql(sql, "format") == ("insert into t (a, b, c) values (%s, '?it''s 100%%', %s) -- why?\n"
                                         "/* or ? */ on conflict do nothing")
    assert driver_sql('update "who?" set x = ? where y = ?', "pyformat") == 'update "who?" set x = %s where y = %s'


def test_the_sink_checks_its_row_type_against_the_statement(tmp_path):
    options = _options(f"jdbc:sqlite:{tmp_path}/x.db")
    with pytest.raises(ValueError, match="2 '\\?' parameter\\(s\\) but the row type has 3 field"):
        JdbcSink.sink(INSERT, Types.ROW([Types.STRING(), Types.INT(), Types.INT()]), options)
    with pytest.raises(TypeError, match="RowTypeInfo"):
        JdbcSink.sink(INSERT, Types.TUPLE([Types.STRING(), Types.INT()]), options)


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_an_epoch_is_written_once_however_often_it_is_published(tmp_path, database, request):
    """A restarted driver publishes again what it cannot know was published: the epoch's record in
    the same transaction makes the second time write nothing. A new life of the checkpoints
    (``--fresh``) starts epochs over, and its epoch 0 is written again."""
    from keyspan.io.storage import Storage

    url = f"sqlite:///{tmp_path}/out.db" if database == "sqlite" else request.getfixturevalue("postgres_url")
    _create_table(url)
    sink = JdbcSink.sink(INSERT, ROW, _options(url))
    storage = Storage(f"file://{tmp_path}/checkpoints")
    sink.use_checkpoint_storage(storage, "counts")

    def epoch(n: int, rows_by_subtask: dict) -> list[dict]:
        handles = []
        for subtask, rows in rows_by_subtask.items():
            writer = sink.create_writer(subtask, n, f"t{n}")
            for r in rows:
                writer.write(r)
            handles.append(writer.finish())
        return handles

    first = epoch(0, {0: [Row("a", 1), ("b", 1)], 1: [Row("c", 1)]})
    sink.publish(first)
    sink.publish(first)  # a restart after the commit: published again
    assert _rows(url) == Counter({("a", 1): 1, ("b", 1): 1, ("c", 1): 1})
    assert storage.child("jdbc-staging/counts").list("") == ["incarnation"]  # published epochs' files go
    second = epoch(1, {0: [Row("a", 2)]})
    sink.publish(second)
    sink.publish(epoch(0, {0: [Row("late", 1)]}))  # an epoch before the last written one: never again
    assert _rows(url) == Counter({("a", 1): 1, ("b", 1): 1, ("c", 1): 1, ("a", 2): 1})

    storage.child("jdbc-staging/counts").delete("incarnation")  # what --fresh does to the checkpoints
    sink.publish(epoch(0, {0: [Row("fresh", 1)]}))
    assert _rows(url)[("fresh", 1)] == 1
    with pytest.raises(ValueError, match="JDBC sink 'counts' takes rows of 2 field"):
        sink.create_writer(0, 2, "t").write(("a", 1, 2))


# --- jobs on Spark ----------------------------------------------------------------------------------------

def test_a_database_that_refuses_the_rows_fails_the_job_and_the_next_run_writes_them_once(env, tmp_path):
    """The first run's table is missing: the checkpoint commits, the write fails, and the job fails saying
    its output is kept. A restart tries that epoch first and fails the same way. With the table created,
    the next run writes the waiting epoch, then the rest: the table is what a run without the failure
    writes."""
    from keyspan.runtime.executor import JobExecutionError

    url = f"sqlite:///{tmp_path}/out.db"
    records, keys = 60, 4
    env.set_max_records_per_epoch(20)

    def build():
        from keyspan.datastream import KeyedProcessFunction
        from keyspan.datastream.state import ValueStateDescriptor

        class Count(KeyedProcessFunction):
            def open(self, runtime_context):
                self.n = runtime_context.get_state(ValueStateDescriptor("n", Types.INT()))

            def process_element(self, value, ctx):
                self.n.update((self.n.value() or 0) + 1)
                yield Row(ctx.get_current_key(), self.n.value())

        (env.from_collection([f"key-{i % keys:02d}" for i in range(records)], Types.STRING()).uid("events")
            .key_by(lambda v: v).process(Count(), output_type=ROW).uid("count")
            .add_sink(JdbcSink.sink(INSERT, ROW, _options(f"jdbc:sqlite:{tmp_path}/out.db"),
                                    JdbcExecutionOptions.builder().with_max_retries(0).build())).uid("counts"))

    build()
    with pytest.raises(JobExecutionError) as failure:
        env.execute("jdbc-refused")
    message = str(failure.value)
    assert "JDBC sink 'counts' could not write epoch 0" in message and "no such table: counts" in message
    assert "checkpoint is committed and its output is kept" in message and "fix the table" in message
    build()
    with pytest.raises(JobExecutionError, match="could not write epoch 0 .* no such table: counts"):
        env.execute("jdbc-refused")  # the restart tries the waiting epoch first, and fails the same way
    _create_table(url)
    build()
    env.execute("jdbc-refused")
    assert _rows(url) == _expected(records, keys)


@pytest.mark.timeout(1800)  # several driver starts (a JVM each) on a shared two-core machine
def test_a_job_writes_each_row_to_postgresql_once_despite_driver_sigkills(tmp_path, postgres_url):
    from job_processes import crash_seed, run_with_kills, start_job

    _create_table(postgres_url)
    records, keys = 1200, 30
    seed = crash_seed()
    work = tmp_path / "work"
    url = "jdbc:" + postgres_url

    def no_duplicates_so_far():
        rows = _rows(postgres_url)
        assert all(c == 1 for c in rows.values()), f"seed {seed}: a row written twice after a kill"
        assert set(rows) <= set(_expected(records, keys)), f"seed {seed}"

    err = run_with_kills(lambda: start_job(JOB, work, {"JDBC_JOB_URL": url}), work, 2, seed, epochs_between=(1, 3),
                         jitter_s=0.8, wait_s=400, finish_timeout=900, after_kill=no_duplicates_so_far, max_runs=8)
    assert "resuming job 'jdbc-counting' from checkpoint" in err
    assert _rows(postgres_url) == _expected(records, keys), f"seed {seed}"
