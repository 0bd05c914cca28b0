"""``keyspan`` command line: run jobs, list their checkpoints."""

from __future__ import annotations

import datetime
import os
import runpy
import sys
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from keyspan.runtime import options as run_options

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="keyspan: Flink's state model on Spark. Run PyFlink-style jobs with exactly-once state.")
err = Console(stderr=True)
out = Console()

WORKDIR_HELP = "keyspan's local folder (metadata store, Spark offset logs, default checkpoints)"


def _options(workdir: Optional[str], metadata_url: Optional[str], **kw) -> run_options.RunOptions:
    opts = run_options.RunOptions(**kw)
    if workdir:
        opts.workdir = workdir
    if metadata_url:
        opts.metadata_url = metadata_url
    return opts


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    ctx: typer.Context,
    job: str = typer.Argument(..., help="the job file (a Python script that builds a job and calls env.execute())"),
    parallelism: Optional[int] = typer.Option(None, "--parallelism", "-p", help="override the job's parallelism"),
    checkpoint_dir: Optional[str] = typer.Option(None, "--checkpoint-dir", help="checkpoint storage URI "
                                                 "(file://, s3://, hdfs://); default <workdir>/checkpoints"),
    fresh: bool = typer.Option(False, "--fresh", help="forget the job's checkpoints and start over"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help=WORKDIR_HELP),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url", help="SQLAlchemy URL of the metadata "
                                               "store (default: SQLite in the workdir)"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="live progress line on stderr"),
):
    """Run JOB.py; resumes from the job's latest checkpoint unless --fresh."""
    from keyspan.runtime.executor import JobExecutionError
    from keyspan.runtime.session import JavaNotFoundError, check_java

    if not os.path.isfile(job):
        err.print(f"[red]keyspan: job file {job} does not exist[/red]")
        raise typer.Exit(2)
    try:
        check_java()
    except JavaNotFoundError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2)
    run_options.install(_options(workdir, metadata_url, parallelism=parallelism, checkpoint_dir=checkpoint_dir,
                                 fresh=fresh, job_file=os.path.abspath(job), progress=progress))
    sys.argv = [job] + list(ctx.args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(job)))
    try:
        runpy.run_path(job, run_name="__main__")
    except JobExecutionError as exc:
        err.print(f"[red]{exc}[/red]", highlight=False)
        raise typer.Exit(1)


def _job_or_exit(store, job: str) -> dict:
    found = store.find_job(job)
    if found is None:
        known = ", ".join(j["job_id"] for j in store.list_jobs()) or "none"
        err.print(f"[red]keyspan: no job '{job}' in {store.url} (known jobs: {known})[/red]")
        raise typer.Exit(2)
    return found


@app.command()
def checkpoints(
    job: str = typer.Argument(..., help="job name, id, or job file"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help=WORKDIR_HELP),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
    all_: bool = typer.Option(False, "--all", help="include discarded (no longer retained) checkpoints"),
):
    """List the job's completed checkpoints, newest last."""
    from keyspan.checkpoint.metadata import MetadataStore

    opts = _options(workdir, metadata_url)
    store = MetadataStore(opts.metadata())
    info = _job_or_exit(store, job)
    rows = store.list_checkpoints(info["job_id"], include_discarded=all_)
    table = Table(title=f"checkpoints of job '{info['job_id']}'")
    for col in ("epoch", "committed at", "parallelism", "records", "bytes written", "state files", "published",
                "status"):
        table.add_column(col)
    for c in rows:
        files = sum(len(v) for v in c["manifest"].values())
        table.add_row(str(c["epoch"]), datetime.datetime.fromtimestamp(c["created_at"]).isoformat(timespec="seconds"),
                      str(c["parallelism"]), str(c["records"]), str(c["bytes_written"]), str(files),
                      "yes" if c["published"] else "no", "discarded" if c["discarded"] else "retained")
    out.print(table)
    if not rows:
        out.print("no checkpoints yet")


def main():
    app()


if __name__ == "__main__":
    main()
