"""The metadata store on a real PostgreSQL server (started on loopback by the ``postgres_server``
fixture): a job runs with it, and two drivers on two "hosts" (two workdirs, shared checkpoint and
savepoint storage) see the same jobs, checkpoints and savepoints and restore each other's savepoints.
A store that stops answering mid-run fails the job with its name, and the next run loses nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from keyspan.checkpoint.metadata import MetadataStore
from keyspan.cli.main import app
from keyspan.common import Encoder
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.state import ValueStateDescriptor
from keyspan.runtime import options as run_options

from job_processes import start_job
from savepoint_helpers import BackgroundJob, stop_with_savepoint, wait_for_checkpoints


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield f"{ctx.get_current_key()},{n}"


RECORDS = 1200


def _env(parallelism: int, out: Path) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.set_max_records_per_epoch(60)
    data = [(f"k{i % 9}", i) for i in range(RECORDS)]
    (env.from_collection(data).uid("src").key_by(lambda r: r[0]).process(Count()).uid("count")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()).uid("sink"))
    return env


def _expected() -> list[str]:
    counts: dict = {}
    for i in range(RECORDS):
        counts[f"k{i % 9}"] = counts.get(f"k{i % 9}", 0) + 1
    return sorted(f"{k},{n}" for k, total in counts.items() for n in range(1, total + 1))


def _lines(out: Path) -> list[str]:
    return sorted(line for p in out.iterdir() if p.is_file() for line in p.read_text().splitlines())


def _host(tmp: Path, name: str, url: str) -> run_options.RunOptions:
    """A driver on its own "host": its own workdir, the shared store and shared storage."""
    shared = tmp / "shared"
    return run_options.RunOptions(workdir=str(tmp / name), metadata_url=url,
                                  checkpoint_dir="file://" + str(shared / "checkpoints"))


def test_job_runs_with_postgres_metadata(workdir, postgres_url):
    run_options.install(run_options.RunOptions(workdir=str(workdir / ".keyspan"), metadata_url=postgres_url))
    out = workdir / "out"
    _env(2, out).execute("pg-count")
    assert _lines(out) == _expected()
    store = MetadataStore(postgres_url)
    assert store.engine.dialect.name == "postgresql"
    checkpoints = store.list_checkpoints("pg-count")
    assert len(checkpoints) >= RECORDS // 60 and store.latest_run("pg-count")["status"] == "FINISHED"
    assert (workdir / ".keyspan" / "keyspan.db").exists() is False  # nothing went to the SQLite default


def test_two_drivers_share_one_postgres_store(workdir, postgres_url, monkeypatch):
    monkeypatch.setenv("KEYSPAN_SAVEPOINT_DIR", "file://" + str(workdir / "shared" / "savepoints"))
    monkeypatch.setenv("KEYSPAN_SAVEPOINT_KEY", "one-key-for-every-host")  # hosts trust each other's savepoints
    out = workdir / "out"
    # host A runs the job at parallelism 2 and stops it with a savepoint halfway
    run_options.install(_host(workdir, "host-a", postgres_url))
    job = BackgroundJob(_env(2, out), "shared-job")
    wait_for_checkpoints("shared-job", 3, timeout=400, job=job)
    savepoint = stop_with_savepoint("shared-job")
    job.join()

    # host B sees the job, its checkpoints and the savepoint through the CLI
    cli = CliRunner()
    common = ["--workdir", str(workdir / "host-b"), "--metadata-url", postgres_url]
    listed = cli.invoke(app, ["list", *common])
    assert listed.exit_code == 0 and "shared-job" in listed.output, listed.output
    store = MetadataStore(postgres_url)
    epochs = [c["epoch"] for c in store.list_checkpoints("shared-job", include_discarded=False)]
    shown = cli.invoke(app, ["checkpoints", "shared-job", *common])
    assert shown.exit_code == 0 and all(str(e) in shown.output for e in epochs), shown.output
    saved = cli.invoke(app, ["savepoints", "shared-job", *common])
    assert saved.exit_code == 0 and "stop" in saved.output, saved.output
    assert [s["path"] for s in store.list_savepoints("shared-job")] == [savepoint]

    # host B restores host A's savepoint at parallelism 1 and finishes the job: output of an uninterrupted run
    options = _host(workdir, "host-b", postgres_url)
    options.savepoint_path = savepoint
    run_options.install(options)
    _env(1, out).execute("shared-job")
    assert _lines(out) == _expected()
    assert store.latest_run("shared-job")["parallelism"] == 1
    assert any(c["restored_from"] == f"savepoint:{savepoint}" for c in store.list_checkpoints("shared-job"))


def _counting_job_output(records: int = 2400, keys: int = 40) -> list[str]:
    """tests/jobs/counting_job.py's lines, worked out from its rule: a key's n-th record reports n and how
    many recent counts it keeps (one more each time, cut to 2 at every fifth)."""
    lines = []
    for k in range(keys):
        recent = 0
        for n in range(1, records // keys + 1):
            recent = 2 if n % 5 == 0 else recent + 1
            lines.append(json.dumps({"key": f"key-{k:03d}", "count": n, "recent": recent}))
    return sorted(lines)


def test_a_store_that_stops_answering_fails_the_job_by_name_and_the_next_run_loses_nothing(tmp_path, postgres_url):
    """The job's database stops taking connections mid-run (its open ones are cut): the driver names
    the store, and once it answers again the next run gives the output of a run nothing disturbed."""
    import psycopg

    job = Path(__file__).parent / "jobs" / "counting_job.py"
    work, out = tmp_path / "work", tmp_path / "out"
    env = {"COUNTING_JOB_OUTPUT": str(out), "COUNTING_JOB_PER_EPOCH": "100"}
    server, name = postgres_url.rsplit("/", 1)
    proc = start_job(job, work, env, extra=("--metadata-url", postgres_url))
    store = MetadataStore(postgres_url)
    deadline = time.time() + 120
    while (store.latest_checkpoint("counting") or {}).get("epoch", -1) < 2 and proc.poll() is None \
            and time.time() < deadline:
        time.sleep(0.1)
    store.engine.dispose()
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        admin.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
        _, err = proc.communicate(timeout=180)
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
    assert proc.returncode == 1, err[-3000:]
    shown = postgres_url.replace("postgresql://", "postgresql+psycopg://")
    assert f"job 'counting' failed: the metadata store {shown} did not answer" in err, err[-3000:]
    assert "running the job again resumes from the last checkpoint" in err and "Traceback" not in err

    rerun = start_job(job, work, env, extra=("--metadata-url", postgres_url))
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err[-3000:]
    assert "resuming job 'counting' from checkpoint" in err
    assert _lines(out) == _counting_job_output()
