"""The web dashboard: pages and their JSON, served by a running driver's API and by ``keyspan ui``.

Pages and assets ship inside the package (no CDN). The JSON comes from the metadata store, plus the
live metrics of running drivers. Buttons call the job API (savepoint, stop with savepoint, rescale)
with the bearer token the page got in its address (``#token=…``, printed by the driver and by
``keyspan ui``) or asks for once.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from importlib import resources

import httpx
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from pydantic import BaseModel, Field

from keyspan.rest.overview import job_detail, job_row, live_summary

STATIC = resources.files("keyspan.rest") / "static"


class RescaleRequest(BaseModel):
    """Body of ``POST /jobs/{id}/rescale`` (live) and of the dashboard's ``/rescaling`` (restart)."""
    parallelism: int = Field(..., ge=1)
    reason: str = "requested"  # recorded with the rescale (an autoscaler says why)
    timeout_s: float = Field(300.0, ge=0)  # live: how long the call waits for the outcome


def _page(name: str) -> HTMLResponse:
    return HTMLResponse((STATIC / name).read_text(encoding="utf-8"))


def dashboard_router(store, guard, workdir: str, metadata_url: str | None, live=None,
                     proxy_headers: dict | None = None) -> APIRouter:
    """``live(job_id)``: this process's live metrics of a job it runs (else None, and the job's own
    driver is asked). ``proxy_headers``: set in ``keyspan ui``, which forwards savepoint/stop calls to
    the job's driver with these headers (its token)."""
    router = APIRouter()

    def live_of(job: dict) -> dict | None:
        mine = live(job["job_id"]) if live else None
        return mine if mine is not None else live_summary(store, job, proxy_headers)

    def job_or_404(job_id: str) -> dict:
        job = store.get_job(job_id)
        if job is None:
            raise HTTPException(404, f"no job '{job_id}' in the metadata store {store.describe()}")
        return job

    @router.get("/", include_in_schema=False)
    def index():
        return _page("index.html")

    @router.get("/ui/job/{job_id}", include_in_schema=False)
    def job_page(job_id: str):
        job_or_404(job_id)
        return _page("job.html")

    @router.get("/ui/static/{name}", include_in_schema=False)
    def asset(name: str):
        path = STATIC / name
        if "/" in name or not path.is_file():
            raise HTTPException(404, f"no asset {name}")
        return FileResponse(str(path))

    @router.get("/ui/api/jobs", dependencies=[Depends(guard.read)])
    def jobs_json():
        return [job_row(store, job, live_of(job)) for job in store.list_jobs()]

    @router.get("/ui/api/jobs/{job_id}", dependencies=[Depends(guard.read)])
    def job_json(job_id: str):
        job = job_or_404(job_id)
        return job_detail(store, job_id, live_of(job))

    @router.get("/ui/api/jobs/{job_id}/live", dependencies=[Depends(guard.read)])
    def live_json(job_id: str):
        summary = live(job_id) if live else None
        if summary is None:
            raise HTTPException(404, f"job '{job_id}' does not run in this process")
        return summary

    @router.post("/jobs/{job_id}/rescaling", dependencies=[Depends(guard.require)])
    def rescale(job_id: str, body: RescaleRequest):
        """Stop with a savepoint and restart at the new parallelism: ``keyspan rescale --restart``, run
        detached (it outlives the driver it stops); the button uses it only where no driver answers."""
        job_or_404(job_id)
        log = os.path.join(os.path.abspath(workdir), "logs", f"rescale-{job_id}-{uuid.uuid4().hex[:6]}.log")
        os.makedirs(os.path.dirname(log), exist_ok=True)
        cmd = [sys.executable, "-m", "keyspan", "rescale", job_id, "-p", str(body.parallelism), "--restart",
               "--workdir", os.path.abspath(workdir)]
        if metadata_url:
            cmd += ["--metadata-url", metadata_url]
        with open(log, "ab") as logf:
            subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        return {"request-id": os.path.basename(log), "log": log}

    if proxy_headers is not None:
        async def forward(job_id: str, request: Request, path: str):
            job = job_or_404(job_id)
            if not job.get("api_url"):
                raise HTTPException(409, f"job '{job_id}' is not running (no driver API registered)")
            if await asyncio.to_thread(live_summary, store, job, proxy_headers, 10) is None:
                raise HTTPException(409, f"job '{job_id}' is not running: no driver of its latest run answers at "
                                         f"{job['api_url']}")
            try:
                async with httpx.AsyncClient(timeout=30) as client:
                    answer = await client.request(request.method, f"{job['api_url']}/jobs/{job_id}/{path}",
                                                  content=await request.body(), headers={
                                                      **proxy_headers, "content-type": "application/json"})
            except httpx.HTTPError as exc:
                raise HTTPException(502, f"job '{job_id}' is not running: its driver at {job['api_url']} does not "
                                         f"answer ({type(exc).__name__})") from None
            return JSONResponse(answer.json(), status_code=answer.status_code)

        @router.post("/jobs/{job_id}/savepoints", dependencies=[Depends(guard.require)])
        async def savepoint(job_id: str, request: Request):
            return await forward(job_id, request, "savepoints")

        @router.get("/jobs/{job_id}/savepoints/{trigger}", dependencies=[Depends(guard.read)])
        async def savepoint_status(job_id: str, trigger: str, request: Request):
            return await forward(job_id, request, f"savepoints/{trigger}")

        @router.post("/jobs/{job_id}/stop", dependencies=[Depends(guard.require)])
        async def stop(job_id: str, request: Request):
            return await forward(job_id, request, "stop")

        @router.post("/jobs/{job_id}/rescale", dependencies=[Depends(guard.require)])
        async def rescale_live(job_id: str, request: Request):
            return await forward(job_id, request, "rescale")

    return router
