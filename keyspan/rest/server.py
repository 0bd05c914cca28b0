"""The running driver's HTTP API (Flink's REST shapes): trigger savepoints, stop with a savepoint.

It listens on loopback by default; its URL is recorded in the metadata store so that
``keyspan savepoint|stop|rescale JOB`` can find a running job by name.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid

import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel


class SavepointRequest(BaseModel):
    target_directory: str | None = None
    cancel_job: bool = False

    model_config = {"populate_by_name": True}


class StopRequest(BaseModel):
    target_directory: str | None = None
    savepoint: bool = True
    drain: bool = False


def build_app(runner) -> FastAPI:
    app = FastAPI(title="keyspan job API")
    triggers: dict[str, dict] = {}

    def check(job_id: str):
        if job_id != runner.job_id:
            raise HTTPException(404, f"no running job '{job_id}' here (this driver runs '{runner.job_id}')")

    @app.get("/jobs/{job_id}")
    def job_status(job_id: str):
        check(job_id)
        committed = runner.committed
        return {"jid": runner.job_id, "name": runner.job_name,
                "state": "STOPPING" if runner.control.stop_request else "RUNNING",
                "parallelism": runner.parallelism, "epochs": runner.progress.epochs,
                "records": runner.progress.records, "last-checkpoint": committed["epoch"] if committed else None}

    @app.post("/jobs/{job_id}/savepoints")
    def trigger_savepoint(job_id: str, body: SavepointRequest | None = None):
        check(job_id)
        body = body or SavepointRequest()
        trigger = uuid.uuid4().hex
        if body.cancel_job:
            triggers[trigger] = runner.control.request_stop(True, body.target_directory)
            return {"request-id": trigger}
        state = triggers[trigger] = {"done": False}

        def work():
            try:
                state["path"] = runner.take_savepoint(body.target_directory)
            except Exception as exc:  # noqa: BLE001 — reported to the caller
                state["error"] = str(exc)
            state["done"] = True

        threading.Thread(target=work, daemon=True, name=f"savepoint-{trigger[:6]}").start()
        return {"request-id": trigger}

    @app.get("/jobs/{job_id}/savepoints/{trigger}")
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

    @app.post("/jobs/{job_id}/stop")
    def stop(job_id: str, body: StopRequest | None = None):
        check(job_id)
        body = body or StopRequest()
        trigger = uuid.uuid4().hex
        triggers[trigger] = runner.control.request_stop(body.savepoint, body.target_directory)
        return {"request-id": trigger}

    return app


class ApiServer:
    def __init__(self, runner, host: str = "127.0.0.1"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.url = f"http://{host}:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(build_app(runner), log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True,
                                       name="keyspan-api")
        self.thread.start()
        self.runner = runner
        runner.store.set_api_url(runner.job_id, self.url)

    def close(self) -> None:
        """Outstanding stop/savepoint answers stay readable until the CLI had a chance to poll them."""
        request = self.runner.control.stop_request
        deadline = time.time() + 10
        while request is not None and not request.get("fetched") and time.time() < deadline:
            time.sleep(0.05)
        self.runner.store.set_api_url(self.runner.job_id, None)
        self.server.should_exit = True
        self.thread.join(timeout=5)
        self.sock.close()


def start_api(runner) -> ApiServer:
    return ApiServer(runner)
