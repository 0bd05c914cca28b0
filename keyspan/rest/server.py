"""The running driver's HTTP API (Flink's REST shapes): trigger savepoints, stop with a savepoint,
rescale live.

It listens on loopback by default; its URL is recorded in the metadata store so that
``keyspan savepoint|stop|rescale JOB`` can find a running job by name.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid

import uvicorn
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import JSONResponse
from pydantic import AliasChoices, BaseModel, Field

from keyspan.common.logs import get_logger
from keyspan.common.settings import load as load_settings
from keyspan.rest.auth import TokenGuard, ensure_token, is_loopback
from keyspan.rest.dashboard import RescaleRequest, dashboard_router
from keyspan.rest.handle import JobHandle
from keyspan.rest.metrics_route import metrics_router
from keyspan.rest.overview import flink_checkpoints, flink_exceptions, job_row, live_summary

log = get_logger("keyspan.rest")


class SavepointRequest(BaseModel):
    """Flink's body (``target-directory``, ``cancel-job``); keyspan's older snake_case names still work."""
    target_directory: str | None = Field(None, validation_alias=AliasChoices("target-directory", "target_directory"))
    cancel_job: bool = Field(False, validation_alias=AliasChoices("cancel-job", "cancel_job"))


class StopRequest(BaseModel):
    """Flink's body (``targetDirectory``, ``drain``: fire every event-time timer and window, by moving the
    watermarks to the end, before the final savepoint)."""
    target_directory: str | None = Field(None, validation_alias=AliasChoices("targetDirectory", "target-directory",
                                                                             "target_directory"))
    savepoint: bool = True
    drain: bool = False


def build_app(job: JobHandle, guard: TokenGuard) -> FastAPI:
    app = FastAPI(title="keyspan job API")
    triggers: dict[str, dict] = {}
    mutating = [Depends(guard.require)]
    reading = [Depends(guard.read)]

    def live(job_id: str):
        return {**job.metrics.summary(), "run_id": job.run_id} if job_id == job.job_id else None

    app.include_router(metrics_router(job.registry, guard))
    app.include_router(dashboard_router(job.store, guard, job.workdir, job.metadata_url, live))

    def check(job_id: str):
        if job_id != job.job_id:
            raise HTTPException(404, f"no running job '{job_id}' here (this driver runs '{job.job_id}')")

    @app.get("/jobs", dependencies=reading)
    def jobs():
        """Flink's job list: every job of the metadata store, with its status."""
        rows = [job_row(job.store, j, live(j["job_id"]) or live_summary(job.store, j))
                for j in job.store.list_jobs()]
        return {"jobs": [{"id": r["id"], "name": r["name"], "status": r["status"]} for r in rows]}

    @app.get("/jobs/{job_id}/checkpoints", dependencies=reading)
    def checkpoints(job_id: str):
        check(job_id)
        return flink_checkpoints(job.store, job_id)

    @app.get("/jobs/{job_id}/exceptions", dependencies=reading)
    def exceptions(job_id: str):
        check(job_id)
        return flink_exceptions(job.store, job_id)

    @app.get("/jobs/{job_id}", dependencies=reading)
    def job_status(job_id: str):
        check(job_id)
        return job.status()

    @app.post("/jobs/{job_id}/savepoints", dependencies=mutating)
    def trigger_savepoint(job_id: str, body: SavepointRequest | None = None):
        check(job_id)
        body = body or SavepointRequest()
        trigger = uuid.uuid4().hex
        if body.cancel_job:
            triggers[trigger] = job.request_stop(True, body.target_directory)
            return {"request-id": trigger}
        state = triggers[trigger] = {"done": False}

        def work():
            try:
                state["path"] = job.take_savepoint(body.target_directory)
            except Exception as exc:  # noqa: BLE001 — reported to the caller
                state["error"] = str(exc)
            state["done"] = True

        threading.Thread(target=work, daemon=True, name=f"savepoint-{trigger[:6]}").start()
        return {"request-id": trigger}

    @app.get("/jobs/{job_id}/savepoints/{trigger}", dependencies=reading)
    def savepoint_status(job_id: str, trigger: str):
        check(job_id)
        state = triggers.get(trigger)
        if state is None:
            raise HTTPException(404, f"no savepoint trigger {trigger}")
        if not state.get("done"):
            return {"status": {"id": "IN_PROGRESS"}}
        operation = {"failure-cause": state["error"]} if "error" in state else {"location": state.get("path")}
        state["fetched"] = True
        return {"status": {"id": "COMPLETED"}, "operation": operation}

    @app.post("/jobs/{job_id}/stop", dependencies=mutating)
    def stop(job_id: str, body: StopRequest | None = None):
        check(job_id)
        body = body or StopRequest()
        trigger = uuid.uuid4().hex
        triggers[trigger] = job.request_stop(body.savepoint, body.target_directory, body.drain)
        return {"request-id": trigger}

    @app.post("/jobs/{job_id}/rescale", dependencies=mutating)
    def rescale(job_id: str, body: RescaleRequest):
        """Live rescale: the job runs at the new parallelism from the next epoch on, in this driver.
        Answers once the first epoch at the new parallelism committed (200: ``from``, ``to``,
        ``pause_ms``), or 409 with the reason it was refused, or 202 if ``timeout_s`` passed first."""
        check(job_id)
        request = job.request_rescale(body.parallelism, body.reason)
        deadline = time.time() + body.timeout_s
        while not request["done"] and time.time() < deadline:
            time.sleep(0.05)
        if request.get("error"):
            raise HTTPException(409, request["error"])
        return JSONResponse(dict(request), status_code=200 if request["done"] else 202)

    @app.get("/jobs/{job_id}/state/{uid}/{state}", dependencies=reading)
    def queryable_state(job_id: str, uid: str, state: str, key: str):
        """Queryable state: the key's value as of the last committed epoch (``key`` as JSON or text)."""
        check(job_id)
        try:
            return job.query_state(uid, state, key)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from None

    return app


class ApiServer:
    def __init__(self, job: JobHandle):
        settings = load_settings()
        host, port = settings.rest_bind, settings.rest_port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
        self.url = f"http://{shown}:{self.sock.getsockname()[1]}"
        token = ensure_token(job.workdir, settings.rest_token)
        guard = TokenGuard(token, open_reads=settings.rest_open_reads and is_loopback(host))
        config = uvicorn.Config(build_app(job, guard), log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True,
                                       name="keyspan-api")
        self.thread.start()
        self.job = job
        job.store.set_api_url(job.job_id, self.url)
        log.info(f"dashboard: {self.url}/ui/job/{job.job_id}#token={token}")

    def close(self) -> None:
        """Outstanding stop/savepoint answers stay readable until the CLI had a chance to poll them.

        The port is free when this returns (the next run may bind it); requests under way finish in
        the server's thread. uvicorn notices ``should_exit`` at its next tick and then lets open
        connections drain, 0.1 s each: waiting for that added 120-190 ms to the end of every run."""
        request = self.job.stop_request()
        deadline = time.time() + 10
        while request is not None and not request.get("fetched") and time.time() < deadline:
            time.sleep(0.05)
        try:
            self.job.store.set_api_url(self.job.job_id, None)
        except Exception as exc:  # noqa: BLE001 — the store may be why the run ends: its own failure is reported
            log.warning("could not clear job '%s''s API address in the metadata store: %s",
                        self.job.job_id, str(exc).splitlines()[0])
        self.server.should_exit = True
        if not (self.server.started and self._stop_listening()):
            self.thread.join(timeout=5)
        self.sock.close()

    def _stop_listening(self) -> bool:
        """Close the listening sockets in the server's event loop, now; False if that loop is gone."""
        closed = threading.Event()

        def stop() -> None:
            for server in self.server.servers:
                server.close()
            closed.set()

        try:
            self.server.servers[0].get_loop().call_soon_threadsafe(stop)
        except (IndexError, RuntimeError):  # no server yet, or its loop already closed
            return False
        while not closed.wait(0.01):
            if not self.thread.is_alive():  # the loop ended before running ``stop``: its shutdown closed them
                return False
        return True


def start_api(job: JobHandle) -> ApiServer:
    return ApiServer(job)
