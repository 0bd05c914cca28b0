"""``keyspan list``, ``keyspan status JOB``, and the options every command shares (``--version``,
``--log-level``)."""

from __future__ import annotations

import datetime
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from keyspan.common.formatting import human_bytes

err = Console(stderr=True)


def _out() -> Console:
    import sys

    return Console(width=None if sys.stdout.isatty() else 200)


def _when(t: float | None) -> str:
    return datetime.datetime.fromtimestamp(t).isoformat(sep=" ", timespec="seconds") if t else "-"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"


def _store(workdir: Optional[str], metadata_url: Optional[str]):
    from keyspan.checkpoint.metadata import MetadataStore, default_url
    from keyspan.common.settings import load

    settings = load(workdir=workdir, metadata_url=metadata_url)
    return MetadataStore(settings.metadata_url or default_url(settings.workdir)), settings


def not_running(store, job_id: str) -> str:
    """The message for a job whose driver does not answer (stopped, or killed with its API address left)."""
    from keyspan.rest.overview import last_seen

    seen = last_seen(store, job_id)
    return f"job '{job_id}' is not running (last seen {_when(seen)})"


def list_jobs(
    workdir: Optional[str] = typer.Option(None, "--workdir", help="keyspan's local folder"),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
):
    """List the jobs of the metadata store: status, parallelism, last checkpoint, age, API URL."""
    from keyspan.rest.auth import auth_headers
    from keyspan.rest.overview import job_row, live_summary

    store, settings = _store(workdir, metadata_url)
    headers = auth_headers(settings.workdir, settings.rest_token)
    table = Table(title=f"jobs in {store.describe()}")
    for col in ("job", "status", "parallelism", "last checkpoint", "age", "API URL"):
        table.add_column(col)
    jobs = store.list_jobs()
    for job in jobs:
        row = job_row(store, job, live_summary(store, job, headers))
        status = row["status"] if row["status"] != "NOT RUNNING" else f"NOT RUNNING (last seen {_when(row['last_seen'])})"
        checkpoint = "-" if row["last_checkpoint"] is None else \
            f"{row['last_checkpoint']} ({_when(row['last_checkpoint_at'])})"
        table.add_row(row["id"], status, str(row["parallelism"] or "-"), checkpoint, _age(row["age_s"]),
                      row["api_url"] or "-")
    _out().print(table if jobs else "no jobs yet")


def status(
    job: str = typer.Argument(..., help="job name, id, or job file"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help="keyspan's local folder"),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
):
    """A job's rates, watermarks, lag and last checkpoints."""
    from keyspan.checkpoint import stats as checkpoint_stats
    from keyspan.rest.auth import auth_headers
    from keyspan.rest.overview import live_summary

    store, settings = _store(workdir, metadata_url)
    info = store.find_job(job)
    if info is None:
        known = ", ".join(j["job_id"] for j in store.list_jobs()) or "none"
        err.print(f"[red]keyspan: no job '{job}' in {store.describe()} (known jobs: {known})[/red]")
        raise typer.Exit(2)
    job_id = info["job_id"]
    out = _out()
    live = live_summary(store, info, auth_headers(settings.workdir, settings.rest_token))
    if live is None:
        run = store.latest_run(job_id) or {}
        ended = run.get("status") in ("FINISHED", "STOPPED", "FAILED")
        out.print(f"job '{job_id}' {run['status']} at {_when(run.get('ended_at'))}" if ended else not_running(store, job_id))
        if run.get("error"):
            out.print(f"error: {run['error']}")
    else:
        cp = live["last_checkpoint"] or {}
        out.print(f"job '{job_id}' RUNNING at {info['api_url']}  (dashboard: {info['api_url']}/ui/job/{job_id})")
        out.print(f"records/s {live['records_per_second']:,.0f}   records {live['records']:,}   epochs {live['epochs']:,}"
                  f"   last epoch {live['last_epoch_ms'] or 0:,.0f} ms   failed checkpoints {live['failed_checkpoints']}")
        marks = Table(title="watermarks")
        for col in ("source", "watermark", "lag"):
            marks.add_column(col)
        for uid, wm in live["watermarks"].items():
            lag = live["watermark_lag_ms"].get(uid)
            marks.add_row(uid, "-" if wm is None else _when(wm / 1000),
                          "-" if lag is None else f"{lag / 1000:,.1f} s")
        if live["watermarks"]:
            out.print(marks)
        for uid, b in live["backlog"].items():
            out.print(f"source {uid}: {b['count']:,} {b['unit']} not read yet")
        ops = Table(title="operators")
        for col in ("operator chain", "parallelism", "records in", "records out", "records/s"):
            ops.add_column(col)
        for o in live["operators"]:
            ops.add_row(o["name"], str(o["parallelism"]), f"{o['records_in']:,}", f"{o['records_out']:,}",
                        f"{o['records_per_second']:,.0f}")
        out.print(ops)
        if cp:
            out.print(f"last checkpoint {cp['epoch']}: {cp['duration_ms']:,.0f} ms, {human_bytes(cp['size'])} written, "
                      f"full state {human_bytes(cp['full_size'])}")
    history = checkpoint_stats.checkpoint_history(store, job_id, limit=5)
    table = Table(title="last checkpoints")
    for col in ("epoch", "committed at", "duration", "written", "full size", "records"):
        table.add_column(col)
    for c in reversed(history):
        table.add_row(str(c["epoch"]), _when(c["committed_at"]),
                      "-" if c["duration_ms"] is None else f"{c['duration_ms']:,.0f} ms", human_bytes(c["bytes_written"]),
                      human_bytes(c["full_size"]), str(c["records"]))
    out.print(table)
    for f in checkpoint_stats.failed_checkpoints(store, job_id, limit=3):
        out.print(f"[red]checkpoint of epoch {f['epoch']} failed at {_when(f['failed_at'])}: {f['cause']}[/red]")


def _version(value: bool):
    if value:
        from keyspan import __version__

        typer.echo(f"keyspan {__version__}")
        raise typer.Exit()


def root_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print the version"),
    log_level: Optional[str] = typer.Option(None, "--log-level", envvar="KEYSPAN_LOG_LEVEL",
                                            help="DEBUG, INFO, WARNING or ERROR (Spark's log level follows)"),
):
    """keyspan: Flink's state model on Spark. Run PyFlink-style jobs with exactly-once state."""
    from keyspan.common import logs

    try:
        logs.configure(log_level)
    except ValueError as exc:
        err.print(f"[red]keyspan: {exc}[/red]")
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.callback()(root_options)
    app.command("list")(list_jobs)
    app.command("status")(status)


