"""``keyspan state``: the State Processor API for the common cases — query a running job's state,
dump a savepoint's state, bootstrap state from a table, change a savepoint's max parallelism."""

from __future__ import annotations

import datetime
import json
import os
import traceback
from typing import Optional

import typer
from rich.console import Console

from keyspan.runtime import options as run_options

state_app = typer.Typer(no_args_is_help=True, help="Read, write and query keyed state (State Processor API).")
err = Console(stderr=True)
WORKDIR_HELP = "keyspan's local folder (metadata store, checkpoints)"


def register(app: typer.Typer) -> None:
    app.add_typer(state_app, name="state")


def _options(workdir: Optional[str], metadata_url: Optional[str]) -> run_options.RunOptions:
    opts = run_options.RunOptions()
    if workdir:
        opts.workdir = workdir
    if metadata_url:
        opts.metadata_url = metadata_url
    return opts


def _fail(opts: run_options.RunOptions, exc: BaseException, what: str):
    """A short message on the terminal; the trace in <workdir>/logs/state.log."""
    log = os.path.join(os.path.abspath(opts.workdir), "logs", "state.log")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "a") as f:
        f.write(f"--- {datetime.datetime.now().isoformat()} keyspan state {what}\n{traceback.format_exc()}\n")
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    err.print(f"[red]keyspan state {what}: {message}[/red]\n(full trace in {log})", highlight=False)
    raise typer.Exit(1)


def _spark(master: Optional[str]):
    from keyspan.runtime.session import get_or_create_spark, prepare_session

    spark = get_or_create_spark(2, master)
    prepare_session(spark)
    return spark


@state_app.command()
def get(
    job: str = typer.Argument(..., help="job name, id, or job file"),
    uid: str = typer.Option(..., "--uid", help="operator uid"),
    state: str = typer.Option(..., "--state", help="keyed state name"),
    key: str = typer.Option(..., "--key", help="the key: JSON (42, \"a\", [\"a\", 1]) or plain text"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help=WORKDIR_HELP),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
):
    """Print a key's value as of the job's last committed checkpoint (asks the running driver; reads the
    checkpoint files directly when the job is not running)."""
    import httpx

    from keyspan.checkpoint.metadata import MetadataStore
    from keyspan.io.storage import Storage
    from keyspan.rest.auth import auth_headers
    from keyspan.runtime import queryable_state

    opts = _options(workdir, metadata_url)
    store = MetadataStore(opts.metadata())
    info = store.find_job(job)
    if info is None:
        err.print(f"[red]keyspan state get: no job '{job}' in {store.describe()}[/red]")
        raise typer.Exit(2)
    job_id = info["job_id"]
    try:
        if info.get("api_url"):
            answer = httpx.get(f"{info['api_url']}/jobs/{job_id}/state/{uid}/{state}", params={"key": key},
                               headers=auth_headers(opts.workdir), timeout=30)
            if answer.status_code == 404:
                err.print(f"[red]keyspan state get: {answer.json()['detail']}[/red]", highlight=False)
                raise typer.Exit(1)
            answer.raise_for_status()
            result = answer.json()
        else:
            checkpoint = store.latest_checkpoint(job_id)
            if checkpoint is None:
                raise queryable_state.StateQueryError(f"job '{job_id}' has no committed checkpoint")
            result = queryable_state.query(Storage(opts.checkpoint_root()).child(job_id), checkpoint, job_id, uid,
                                           state, key)
            result = {**result, "key": queryable_state.jsonable(result["key"]),
                      "value": queryable_state.jsonable(result["value"])}
    except queryable_state.StateQueryError as exc:
        err.print(f"[red]keyspan state get: {exc}[/red]", highlight=False)
        raise typer.Exit(1)
    except typer.Exit:
        raise
    except Exception as exc:  # noqa: BLE001 — short message, trace in the log
        _fail(opts, exc, "get")
    typer.echo(json.dumps(result))


@state_app.command()
def dump(
    path: str = typer.Argument(..., help="savepoint directory"),
    out: str = typer.Argument(..., help="output directory (one sub-directory per state when --state is not given)"),
    uid: str = typer.Option(..., "--uid", help="operator uid"),
    state: Optional[str] = typer.Option(None, "--state", help="one keyed state (default: all, and the timers)"),
    fmt: str = typer.Option("parquet", "--format", help="parquet | jsonl"),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default: local)"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help=WORKDIR_HELP),
):
    """Write an operator's keyed state as Parquet or JSON lines, read in parallel by Spark tasks."""
    if fmt not in ("parquet", "jsonl"):
        err.print(f"[red]keyspan state dump: --format must be parquet or jsonl, not {fmt!r}[/red]")
        raise typer.Exit(2)
    opts = _options(workdir, None)
    try:
        from keyspan.state_processor import SavepointReader

        reader = SavepointReader.read(_spark(master), path)
        states = [state] if state else [d["name"] for d in reader.operators().get(uid, [])]
        if not states:
            raise LookupError(f"savepoint {path} has no keyed state for operator '{uid}' (operators: "
                              f"{', '.join(sorted(reader.operators())) or 'none'})")
        for name in states:
            timers = name.startswith("__ks_timers")
            df = reader.read_timers(uid) if timers else reader.read_keyed_state(uid, state=name)
            target = out if state else os.path.join(out, "timers" if timers else name)
            _write(df, target, fmt)
            err.print(f"{'timers' if timers else name}: {target}")
    except Exception as exc:  # noqa: BLE001 — short message, trace in the log
        _fail(opts, exc, "dump")


def _write(df, target: str, fmt: str) -> None:
    if fmt == "parquet":
        df.write.mode("errorifexists").parquet(target)
        return
    binary = [f.name for f in df.schema.fields if f.dataType.simpleString() == "binary"]

    def lines(batches):
        import pyarrow as pa

        from keyspan.runtime.queryable_state import jsonable
        from keyspan.state_processor import decode

        for b in batches:
            rows = b.to_pylist()
            yield pa.RecordBatch.from_pydict({"value": [
                json.dumps({k: jsonable(decode(v) if k in binary else v) for k, v in r.items()}) for r in rows]})

    df.mapInArrow(lines, "value string").write.mode("errorifexists").text(target)


@state_app.command()
def rekey(
    path: str = typer.Argument(..., help="savepoint directory"),
    out: str = typer.Argument(..., help="where the new savepoint goes"),
    max_parallelism: int = typer.Option(..., "--max-parallelism", help="the new max parallelism"),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default: local)"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help=WORKDIR_HELP),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
):
    """Write a copy of a savepoint with another max parallelism: every key moves to its new key group, so
    the job can then run at any parallelism up to it. The source savepoint is not changed."""
    opts = _options(workdir, metadata_url)
    try:
        from keyspan.state_processor import SavepointWriter

        written = SavepointWriter.from_existing_savepoint(_spark(master), path) \
            .change_max_parallelism(max_parallelism).write(out, metadata_url=opts.metadata())
    except Exception as exc:  # noqa: BLE001 — short message, trace in the log
        _fail(opts, exc, "rekey")
    typer.echo(written)


@state_app.command()
def bootstrap(
    table: str = typer.Argument(..., help="input rows: a Parquet, CSV (with header) or JSON-lines file or directory"),
    out: str = typer.Argument(..., help="where the new savepoint goes"),
    uid: str = typer.Option(..., "--uid", help="operator uid the state is for"),
    state: str = typer.Option(..., "--state", help="keyed state name"),
    key: str = typer.Option(..., "--key", help="the key column"),
    value: str = typer.Option(..., "--value", help="the value column"),
    kind: str = typer.Option("value", "--kind", help="value (last row of a key wins) | list (rows in order)"),
    input_format: str = typer.Option("parquet", "--input-format", help="parquet | csv | json"),
    max_parallelism: int = typer.Option(128, "--max-parallelism", help="of the new savepoint"),
    base: Optional[str] = typer.Option(None, "--from", help="add to (or replace the operator in) this savepoint"),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default: local)"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help=WORKDIR_HELP),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
):
    """Bootstrap one keyed state of one operator from a table: one value, or a list, per key."""
    if kind not in ("value", "list") or input_format not in ("parquet", "csv", "json"):
        err.print("[red]keyspan state bootstrap: --kind is value or list; --input-format parquet, csv or json[/red]")
        raise typer.Exit(2)
    opts = _options(workdir, metadata_url)
    try:
        from keyspan.state_processor import ColumnBootstrapFunction, OperatorTransformation, SavepointWriter

        spark = _spark(master)
        reader = spark.read.option("header", "true").option("inferSchema", "true")
        df = getattr(reader, input_format)(table)
        for column in (key, value):
            if column not in df.columns:
                raise LookupError(f"{table} has no column '{column}' (columns: {', '.join(df.columns)})")
        function = ColumnBootstrapFunction(state, kind, value)
        transformation = OperatorTransformation.bootstrap_with(df).key_by(key).transform(function)
        writer = SavepointWriter.from_existing_savepoint(spark, base) if base else \
            SavepointWriter.new_savepoint(spark, max_parallelism)
        written = writer.with_operator(uid, transformation).write(out, metadata_url=opts.metadata())
    except Exception as exc:  # noqa: BLE001 — short message, trace in the log
        _fail(opts, exc, "bootstrap")
    typer.echo(written)
