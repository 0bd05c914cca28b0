"""``GET /metrics``: the job's metrics in Prometheus' text format."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


def metrics_router(registry, guard) -> APIRouter:
    router = APIRouter()

    @router.get("/metrics", dependencies=[Depends(guard.read)])
    def metrics():
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return router
