"""``keyspan ui``: the dashboard of every job in a metadata store, without a driver (stopped jobs
show their checkpoint history; running ones their live metrics, fetched from their drivers)."""

from __future__ import annotations

from typing import Optional

import typer


def ui(
    workdir: Optional[str] = typer.Option(None, "--workdir", help="keyspan's local folder"),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url"),
    bind: Optional[str] = typer.Option(None, "--bind", help="address to listen on (default rest_bind: 127.0.0.1)"),
    port: int = typer.Option(8081, "--port", help="port to listen on (Flink's dashboard port by default)"),
):
    """Serve the web dashboard of all jobs in the metadata store."""
    import uvicorn
    from fastapi import FastAPI

    from keyspan.checkpoint.metadata import MetadataStore, default_url
    from keyspan.common.settings import load
    from keyspan.rest.auth import TokenGuard, auth_headers, ensure_token, is_loopback
    from keyspan.rest.dashboard import dashboard_router

    settings = load(workdir=workdir, metadata_url=metadata_url, rest_bind=bind)
    store = MetadataStore(settings.metadata_url or default_url(settings.workdir))
    token = ensure_token(settings.workdir, settings.rest_token)
    guard = TokenGuard(token, open_reads=settings.rest_open_reads and is_loopback(settings.rest_bind))
    app = FastAPI(title="keyspan dashboard")
    app.include_router(dashboard_router(store, guard, settings.workdir, settings.metadata_url,
                                        proxy_headers=auth_headers(settings.workdir, settings.rest_token)))
    typer.echo(f"keyspan dashboard: http://{settings.rest_bind}:{port}/#token={token}", err=True)
    uvicorn.run(app, host=settings.rest_bind, port=port, log_level="warning")


def register(app: typer.Typer) -> None:
    app.command("ui")(ui)
