"""``keyspan`` command line: run jobs, list their checkpoints."""

from __future__ import annotations

import datetime
import json
import os
import runpy
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from keyspan.cli import jobs as jobs_cli, ui as ui_cli  # observability
from keyspan.cli import state as state_cli  # state processor
from keyspan.common.settings import load as load_settings  # observability
from keyspan.datastream.configuration_keys import SUPPORTED as CONFIGURATION_KEYS
from keyspan.rest.auth import auth_headers  # observability
from keyspan.runtime import options as run_options
from keyspan.runtime.autoscaler import PREFIX as AUTOSCALER_KEYS, parse_bounds  # autoscaler: --autoscale MIN..MAX

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="keyspan: Flink's state model on Spark. Run PyFlink-style jobs with exactly-once state.")
err = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 200)  # piped output: no truncated table cells

jobs_cli.register(app)  # observability: list, status, --version, --log-level
ui_cli.register(app)  # observability: keyspan ui
state_cli.register(app)  # state processor: keyspan state get|dump|bootstrap|rekey
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
    from_savepoint: Optional[str] = typer.Option(None, "--fromSavepoint", "-s",
                                                 help="restore the job's state from this savepoint"),
    allow_non_restored_state: bool = typer.Option(False, "--allow-non-restored-state", "-n",
                                                  help="drop savepoint state of operators the job no longer has"),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL (spark://, yarn, k8s://, "
                                         "local[N]); default: spark-submit's, KEYSPAN_SPARK_MASTER, or local"),
    conf: Optional[List[str]] = typer.Option(None, "--conf", help="a Spark setting k=v (repeatable)"),
    define: Optional[List[str]] = typer.Option(None, "-D", help="a Flink configuration key of the job, "
                                               "key=value (repeatable; e.g. -D execution.checkpointing.interval="
                                               "10s); it wins over the job's own setting"),
    spark_ui: bool = typer.Option(True, "--spark-ui/--no-spark-ui", help="start Spark's web UI (its URL is printed)"),
    allow_local_storage: bool = typer.Option(False, "--allow-local-storage", help="accept file:// checkpoint and "
                                             "savepoint paths with a multi-host master (a mount all hosts share)"),
    restart_attempts: Optional[int] = typer.Option(None, "--restart-attempts", help="restart a failed run from "
                                                   "its latest checkpoint up to N times (unless the job sets "
                                                   "its own restart strategy)"),
    restart_delay: float = typer.Option(10.0, "--restart-delay", help="seconds to wait before each restart"),
    autoscale: Optional[str] = typer.Option(None, "--autoscale", help="let keyspan rescale the running job "
                                            "between MIN..MAX subtasks as its backlog and load change "
                                            "(docs/autoscaling.md)"),
    detached: bool = typer.Option(False, "--detached", "-d", help="run in the background: print the job id and "
                                  "the log file (under the workdir) and return"),
):
    """Run JOB.py; resumes from the job's latest checkpoint unless --fresh (or -s SAVEPOINT)."""
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
    spark_conf = _key_values(conf, "--conf", "spark.executor.memory=2g")
    if master:
        spark_conf["spark.master"] = master
    configuration = _key_values(define, "-D", "execution.checkpointing.interval=10s")
    unknown = [k for k in configuration if k not in CONFIGURATION_KEYS and not k.startswith(AUTOSCALER_KEYS)]
    if unknown:
        err.print(f"keyspan: -D {', '.join(unknown)}: not a configuration key keyspan reads; "
                  "the keys are listed in docs/compatibility.md (configure)", style="red", highlight=False,
                  markup=False)
        raise typer.Exit(2)
    try:
        bounds = parse_bounds(autoscale) if autoscale is not None else None
    except ValueError as exc:
        err.print(f"keyspan: {exc}", style="red", highlight=False, markup=False)
        raise typer.Exit(2)
    opts = _options(workdir, metadata_url, parallelism=parallelism, checkpoint_dir=checkpoint_dir,
                    fresh=fresh, job_file=os.path.abspath(job), progress=progress and not detached,
                    savepoint_path=from_savepoint, allow_non_restored_state=allow_non_restored_state,
                    spark_conf=spark_conf, configuration=configuration, spark_ui=spark_ui,
                    restart_attempts=restart_attempts,
                    restart_delay_s=restart_delay, code_dir=os.path.dirname(os.path.abspath(job)),
                    autoscale=bounds)
    opts.allow_local_storage = opts.allow_local_storage or allow_local_storage
    opts.launch = {"job_file": os.path.abspath(job), "args": list(ctx.args), "cwd": os.getcwd(),
                   "code_dir": opts.code_dir, "workdir": os.path.abspath(opts.workdir),
                   "metadata_url": metadata_url, "checkpoint_dir": checkpoint_dir, "conf": list(conf or []),
                   "define": list(define or []),
                   "master": master, "spark_ui": spark_ui, "allow_local_storage": allow_local_storage,
                   "restart_attempts": restart_attempts, "restart_delay": restart_delay, "autoscale": autoscale}
    if detached:
        _run_detached(opts, fresh=fresh, from_savepoint=from_savepoint, parallelism=parallelism,
                      allow_non_restored_state=allow_non_restored_state)
        return
    run_options.install(opts)
    sys.argv = [job] + list(ctx.args)
    sys.path.insert(0, opts.code_dir)
    try:
        runpy.run_path(job, run_name="__main__")
    except JobExecutionError as exc:
        err.print(str(exc), style="red", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1)
    except (KeyboardInterrupt, SystemExit, typer.Exit):
        raise
    except Exception as exc:  # noqa: BLE001 — the job file itself failed (building the job, a bad argument)
        from keyspan.common.logs import write_failure_log

        log = write_failure_log(run_options.current().workdir, os.path.basename(job), exc)
        where = _job_frame(exc, job)
        err.print(f"keyspan: job file {job} failed{where}: {type(exc).__name__}: {str(exc)[:500]}\n"
                  f"Nothing was committed by this failure. Full trace: {log}", style="red", highlight=False,
                  markup=False, soft_wrap=True)
        raise typer.Exit(1)


def _job_frame(exc: BaseException, job: str) -> str:
    """" at line N" of the job file's innermost frame in the failure's trace, if it is there."""
    import traceback

    path = os.path.abspath(job)
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == path]
    return f" at line {lines[-1]}" if lines else ""


def _key_values(items: list[str] | None, flag: str, example: str) -> dict[str, str]:
    """The ``key=value`` items of a repeatable flag; a short error and exit 2 on one that is not."""
    pairs = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            err.print(f"keyspan: {flag} {item!r} is not key=value (e.g. {flag} {example})", style="red",
                      highlight=False, markup=False)
            raise typer.Exit(2)
        pairs[key.strip()] = value
    return pairs


def launch_command(launch: dict, job_file: str | None = None, **flags) -> list[str]:
    """The ``keyspan run`` command line of a stored launch (see ``run``), with ``flags`` added
    (``parallelism=4``, ``fromSavepoint=...``; True means a bare flag)."""
    cmd = [sys.executable, "-m", "keyspan", "run", job_file or launch["job_file"], "--workdir", launch["workdir"],
           "--no-progress", "--restart-delay", str(launch["restart_delay"])]
    for flag in ("metadata_url", "checkpoint_dir", "master", "restart_attempts", "autoscale"):
        if launch.get(flag) is not None:
            cmd += ["--" + flag.replace("_", "-"), str(launch[flag])]
    for item in launch["conf"]:
        cmd += ["--conf", item]
    for item in launch.get("define", []):  # runs launched before -D existed have none
        cmd += ["-D", item]
    if not launch["spark_ui"]:
        cmd.append("--no-spark-ui")
    if launch["allow_local_storage"]:
        cmd.append("--allow-local-storage")
    for flag, value in flags.items():
        if value is None or value is False:
            continue
        name = "--" + (flag if flag == "fromSavepoint" else flag.replace("_", "-"))
        cmd += [name] if value is True else [name, str(value)]
    return cmd + (["--", *launch["args"]] if launch["args"] else [])


def _start_driver(cmd: list[str], log: str, launch: dict) -> subprocess.Popen:
    """A driver in its own session, output to ``log``, in the job's folder and import path."""
    os.makedirs(os.path.dirname(log), exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (launch["code_dir"], env.get("PYTHONPATH")) if p)
    with open(log, "ab") as logf:
        return subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=launch["cwd"], env=env)


def _run_detached(opts: run_options.RunOptions, **flags) -> None:
    """``keyspan run -d``: start the driver in the background and return once the job registered."""
    from keyspan.checkpoint.metadata import MetadataStore

    launch = opts.launch
    stem = os.path.splitext(os.path.basename(launch["job_file"]))[0]
    log = os.path.join(launch["workdir"], "logs", f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log")
    started = time.time()
    proc = _start_driver(launch_command(launch, **flags), log, launch)
    store = MetadataStore(opts.metadata())
    while time.time() - started < 120:
        job = next((j for j in store.list_jobs() if j["job_file"] == launch["job_file"]), None)
        run = store.latest_run(job["job_id"]) if job else None
        if run and run["started_at"] >= started:
            out.print(f"job {job['job_id']} started in the background (pid {proc.pid})\nlog: {log}")
            return
        if proc.poll() is not None:
            err.print(f"[red]keyspan: the job exited with code {proc.returncode} before it started; see {log}[/red]")
            raise typer.Exit(1)
        time.sleep(0.2)
    out.print(f"job file {launch['job_file']} started in the background (pid {proc.pid}), not registered yet\n"
              f"log: {log}")


def _job_or_exit(store, job: str) -> dict:
    found = store.find_job(job)
    if found is None:
        known = ", ".join(j["job_id"] for j in store.list_jobs()) or "none"
        err.print(f"[red]keyspan: no job '{job}' in {store.describe()} (known jobs: {known})[/red]")
        raise typer.Exit(2)
    return found


@app.command()
def checkpoints(
    job: str = typer.Argument(..., help="job name, id, or job file"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help=WORKDIR_HELP),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
    all_: bool = typer.Option(False, "--all", help="include discarded (no longer retained) checkpoints"),
    unreferenced: bool = typer.Option(False, "--unreferenced", help="list the state files no retained checkpoint "
                                      "lists (left by epochs that never committed) instead"),
    delete_unreferenced: bool = typer.Option(False, "--delete-unreferenced", help="delete those files, naming each"),
    checkpoint_dir: Optional[str] = typer.Option(None, "--checkpoint-dir", help="the job's checkpoint storage URI, if "
                                                 "it ran with --checkpoint-dir; default <workdir>/checkpoints"),
):
    """List the job's completed checkpoints, newest last."""
    from keyspan.checkpoint.metadata import MetadataStore

    opts = _options(workdir, metadata_url, **({"checkpoint_dir": checkpoint_dir} if checkpoint_dir else {}))
    store = MetadataStore(opts.metadata())
    info = _job_or_exit(store, job)
    if unreferenced or delete_unreferenced:
        from keyspan.io.storage import Storage

        _unreferenced_files(store, Storage(opts.checkpoint_root()).child(info["job_id"]), info["job_id"],
                            delete_unreferenced)
        return
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


def _unreferenced_files(store, storage, job_id: str, delete: bool) -> None:
    from keyspan.checkpoint.unreferenced import unreferenced_state_files

    files = unreferenced_state_files(store, storage, job_id)
    total = sum(f.size for f in files)
    if not files:
        out.print(f"no unreferenced state files under {storage.uri}")
        return
    for f in files:
        out.print(f"{'deleting' if delete else 'unreferenced'} {storage.url(f.path)} (epoch {f.epoch}, {f.size:,} bytes)",
                  highlight=False)
    if delete:
        storage.delete_files([f.path for f in files])
    out.print(f"{'deleted' if delete else 'found'} {len(files)} state file(s), {total:,} bytes, that no retained "
              f"checkpoint of job '{job_id}' lists" + ("" if delete else "; --delete-unreferenced deletes them"),
              highlight=False)


def _api(store, job: str, opts) -> tuple[dict, str]:
    """The job and its running driver's API address; exits when no driver of the job's latest run
    answers there (a savepoint or stop must never reach another workdir's driver of the same job id)."""
    from keyspan.rest.overview import live_summary

    info = _job_or_exit(store, job)
    if not info.get("api_url"):
        err.print(f"[red]keyspan: job '{info['job_id']}' is not running (no driver API registered)[/red]")
        raise typer.Exit(2)
    if live_summary(store, info, auth_headers(opts.workdir, load_settings().rest_token), timeout=10) is None:
        err.print(f"[red]keyspan: {jobs_cli.not_running(store, info['job_id'])}[/red]")
        raise typer.Exit(2)
    return info, info["api_url"]


def _await_trigger(api_url: str, job_id: str, trigger: str, timeout: float = 600) -> str:
    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        answer = httpx.get(f"{api_url}/jobs/{job_id}/savepoints/{trigger}", timeout=10).json()
        if answer["status"]["id"] == "COMPLETED":
            operation = answer["operation"]
            if "failure-cause" in operation:
                err.print(f"[red]keyspan: savepoint failed: {operation['failure-cause']}[/red]")
                raise typer.Exit(1)
            return operation.get("location")
        time.sleep(0.2)
    err.print("[red]keyspan: timed out waiting for the savepoint[/red]")
    raise typer.Exit(1)


@app.command()
def savepoint(
    job: str = typer.Argument(..., help="job name, id, or job file"),
    target: Optional[str] = typer.Argument(None, help="savepoint directory URI (default <workdir>/savepoints/JOB/…)"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help=WORKDIR_HELP),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
):
    """Take a savepoint of a running job; prints its path once complete."""
    out.print(_trigger(job, "savepoints", {"target_directory": target}, workdir, metadata_url))


def _trigger(job, endpoint: str, body: dict, workdir, metadata_url) -> str | None:
    """POST to a running job's API and wait for the savepoint/stop it triggered."""
    import httpx

    from keyspan.checkpoint.metadata import MetadataStore

    opts = _options(workdir, metadata_url)
    store = MetadataStore(opts.metadata())
    info, api_url = _api(store, job, opts)
    try:  # observability: the token, and a dead driver's stale address
        answer = httpx.post(f"{api_url}/jobs/{info['job_id']}/{endpoint}", json=body, timeout=30,
                            headers=auth_headers(opts.workdir, load_settings().rest_token))
    except httpx.TransportError:
        err.print(f"[red]keyspan: {jobs_cli.not_running(store, info['job_id'])}[/red]")
        raise typer.Exit(2)
    if answer.status_code != 200:
        err.print(f"[red]keyspan: {answer.json().get('detail', answer.text)}[/red]")
        raise typer.Exit(1)
    return _await_trigger(api_url, info["job_id"], answer.json()["request-id"])


def _stop(job, savepoint_flag, target, workdir, metadata_url) -> str | None:
    return _trigger(job, "stop", {"savepoint": savepoint_flag, "target_directory": target}, workdir, metadata_url)


@app.command()
def stop(
    job: str = typer.Argument(..., help="job name, id, or job file"),
    with_savepoint: bool = typer.Option(False, "--savepoint", "-s", help="take a savepoint at the stop"),
    target: Optional[str] = typer.Argument(None, help="savepoint directory URI"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help=WORKDIR_HELP),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
):
    """Finish the current epoch and stop the job (with --savepoint: take a savepoint at that cut)."""
    path = _stop(job, with_savepoint, target, workdir, metadata_url)
    out.print(path if path else "stopped")


@app.command()
def cancel(
    job: str = typer.Argument(..., help="job name, id, or job file"),
    with_savepoint: bool = typer.Option(False, "--withSavepoint", "-s", help="take a savepoint first"),
    target: Optional[str] = typer.Argument(None, help="savepoint directory URI"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help=WORKDIR_HELP),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
):
    """Alias of stop (Flink's `cancel -s`)."""
    path = _stop(job, with_savepoint, target, workdir, metadata_url)
    out.print(path if path else "cancelled")


@app.command()
def savepoints(
    job: str = typer.Argument(..., help="job name, id, or job file"),
    tree: bool = typer.Option(False, "--tree", help="draw the version tree: which savepoint or checkpoint each "
                              "run was restored from, with code versions"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help=WORKDIR_HELP),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
):
    """List the job's savepoints (keyspan never deletes them)."""
    from keyspan.checkpoint.metadata import MetadataStore

    store = MetadataStore(_options(workdir, metadata_url).metadata())
    info = _job_or_exit(store, job)
    rows = store.list_savepoints(info["job_id"])
    if tree:
        out.print(_lineage_tree(info["job_id"], rows, store.list_runs(info["job_id"])))
        return
    table = Table(title=f"savepoints of job '{info['job_id']}'")
    for col in ("path", "epoch", "taken at", "parallelism", "code version", "trigger", "run restored from"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["path"], str(r["epoch"]), datetime.datetime.fromtimestamp(r["created_at"]).isoformat(
            timespec="seconds"), str(r["parallelism"]), r["code_version"] or "-", r["trigger"], r["restored_from"] or "-")
    out.print(table)
    if not rows:
        out.print("no savepoints yet")


def _lineage_tree(job_id: str, savepoints_rows: list[dict], runs: list[dict]):
    """Seed 002's version tree: savepoints hang under the savepoint their run was restored from."""
    from rich.tree import Tree

    root = Tree(f"job '{job_id}'")
    nodes = {}
    for sp in sorted(savepoints_rows, key=lambda r: r["created_at"]):
        parent_ref = (sp["restored_from"] or "").removeprefix("savepoint:")
        parent = nodes.get(parent_ref, root)
        label = (f"{sp['path']}  [dim]epoch {sp['epoch']}, p={sp['parallelism']}, code {sp['code_version'] or '-'}, "
                 f"{sp['trigger']}[/dim]" + (f"\n{sp['operations']}" if sp.get("operations") else ""))
        nodes[sp["path"]] = parent.add(label)
    for run in runs:
        ref = (run["restored_from"] or "").removeprefix("savepoint:")
        if ref in nodes:
            nodes[ref].add(f"[cyan]run {run['run_id']}[/cyan] p={run['parallelism']} code "
                           f"{run['code_version'] or '-'} {run['status']}")
    return root


@app.command()
def rescale(
    job: str = typer.Argument(..., help="job name, id, or job file"),
    parallelism: int = typer.Option(..., "--parallelism", "-p", help="the new parallelism"),
    restart: bool = typer.Option(False, "--restart", help="stop with a savepoint and start a new driver at the "
                                 "new parallelism, instead of switching the running driver live"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help=WORKDIR_HELP),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
    log: Optional[str] = typer.Option(None, "--log", help="--restart: where the restarted driver writes its output"),
):
    """Rescale a running job. Live by default: the running driver finishes its epoch and runs the next
    ones at the new parallelism, in the same Spark session. --restart: stop with a savepoint, restart
    from it at the new parallelism (with the options, arguments and folder the job was started with)."""
    from keyspan.checkpoint.metadata import MetadataStore

    opts = _options(workdir, metadata_url)
    store = MetadataStore(opts.metadata())
    info, api_url = _api(store, job, opts)
    job_id = info["job_id"]
    if not restart:
        if _live_rescale(store, info, api_url, parallelism, opts):
            return
        err.print(f"keyspan: the driver of job '{job_id}' has no live rescale API (an older keyspan); rescaling "
                  "with --restart instead: stop with a savepoint, start again at the new parallelism")
    old_run = store.latest_run(job_id)
    t0 = time.time()
    path = _stop(job, True, None, workdir, metadata_url)
    t1 = time.time()
    while (store.latest_run(job_id) or {}).get("status") == "RUNNING" and time.time() - t1 < 300:
        time.sleep(0.2)
    t2 = time.time()
    launch = _stored_launch(info) or {
        "job_file": info["job_file"], "args": [], "cwd": os.getcwd(), "code_dir": os.path.dirname(info["job_file"]),
        "workdir": os.path.abspath(opts.workdir), "metadata_url": metadata_url, "checkpoint_dir": None, "conf": [],
        "master": None, "spark_ui": True, "allow_local_storage": False, "restart_attempts": None,
        "restart_delay": 10.0}  # a job started by env.execute() outside `keyspan run`
    log = log or os.path.join(launch["workdir"], "logs", f"{job_id}-{int(t2)}.log")
    cmd = launch_command(launch, _job_file_from_storage(info, launch["job_file"]), fromSavepoint=path,
                         parallelism=parallelism)
    proc = _start_driver(cmd, log, launch)
    while time.time() - t2 < 300:
        run = store.latest_run(job_id)
        if run and run["run_id"] != old_run["run_id"] and (store.get_job(job_id) or {}).get("api_url"):
            break
        if proc.poll() is not None:
            err.print(f"[red]keyspan: the restarted job exited with {proc.returncode}; see {log}[/red]")
            raise typer.Exit(1)
        time.sleep(0.2)
    t3 = time.time()
    table = Table(title=f"rescaled job '{job_id}' to parallelism {parallelism}")
    table.add_column("step")
    table.add_column("seconds", justify="right")
    table.add_row("stop with savepoint", f"{t1 - t0:.2f}")
    table.add_row("old driver exit", f"{t2 - t1:.2f}")
    table.add_row("restart from savepoint (API up)", f"{t3 - t2:.2f}")
    table.add_row("total", f"{t3 - t0:.2f}")
    out.print(table)
    out.print(f"savepoint: {path}\nnew driver pid {proc.pid}, log: {log}")


def _live_rescale(store, info: dict, api_url: str, parallelism: int, opts) -> bool:
    """Ask the running driver to switch parallelism between two epochs and wait for the outcome;
    False if its API has no live rescale."""
    import httpx

    job_id = info["job_id"]
    try:
        answer = httpx.post(f"{api_url}/jobs/{job_id}/rescale", json={"parallelism": parallelism,
                                                                     "reason": "keyspan rescale"},
                            timeout=330, headers=auth_headers(opts.workdir, load_settings().rest_token))
    except httpx.TransportError:
        err.print(f"[red]keyspan: {jobs_cli.not_running(store, job_id)}[/red]")
        raise typer.Exit(2)
    if answer.status_code in (404, 405) and answer.json().get("detail") in ("Not Found", "Method Not Allowed"):
        return False
    if answer.status_code == 202:
        err.print(f"[red]keyspan: job '{job_id}' has not committed an epoch at parallelism {parallelism} yet; "
                  f"`keyspan status {job_id}` shows when it does[/red]")
        raise typer.Exit(1)
    if answer.status_code != 200:
        err.print(f"[red]keyspan: {answer.json().get('detail', answer.text)}[/red]")
        raise typer.Exit(1)
    result = answer.json()
    table = Table(title=f"rescaled job '{job_id}' live from parallelism {result['from']} to {result['to']}")
    for col in ("first epoch at new parallelism", "pause (ms)", "key groups moved", "state restored (bytes)"):
        table.add_column(col, justify="right")
    table.add_row(str(result.get("epoch")), f"{result['pause_ms']:.0f}", str(result.get("moved", 0)),
                  str(result.get("bytes_restored", 0)))
    out.print(table)
    return True


def _stored_launch(info: dict) -> dict | None:
    """How `keyspan run` last started the job (options, arguments, folder), stored beside its code."""
    from keyspan.io.storage import Storage

    copy = info.get("job_copy")
    if not copy:
        return None
    folder = Storage(copy.rsplit("/", 1)[0])
    return json.loads(folder.read("launch.json")) if folder.exists("launch.json") else None


def _job_file_from_storage(info: dict, original: str | None = None) -> str:
    """The job's code as keyspan stored it: the original file while it still holds that code (so it
    runs among its sibling files), else a copy fetched from storage."""
    import hashlib

    from keyspan.io.storage import Storage

    copy = info.get("job_copy")
    if not copy:
        return info["job_file"]
    if original and os.path.isfile(original):
        with open(original, "rb") as f:
            if copy.endswith(f"/{hashlib.sha256(f.read()).hexdigest()[:16]}.py"):
                return original
    parent, name = copy.rsplit("/", 1)
    if copy.startswith("file://"):
        return copy[len("file://"):]
    local = os.path.join(tempfile.mkdtemp(prefix="keyspan-job-"), name)
    with open(local, "wb") as f:
        f.write(Storage(parent).read(name))
    return local


def main():
    try:
        app()
    except Exception as exc:
        from keyspan.checkpoint.metadata import SchemaTooNew, StoreUnreadable

        if not isinstance(exc, (StoreUnreadable, SchemaTooNew)):
            raise
        err.print(f"keyspan: {exc}", style="red", highlight=False, markup=False, soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
