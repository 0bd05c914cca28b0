"""What the dashboard, ``GET /jobs`` and ``keyspan list|status`` show about jobs, read from the
metadata store (so it works without a driver) plus, for a running job, its driver's live metrics."""

from __future__ import annotations

import time

import httpx

from keyspan.checkpoint import stats as checkpoint_stats


def live_summary(store, job: dict, headers: dict | None = None, timeout: float = 1.0) -> dict | None:
    """The running driver's metrics, or None when no driver of the job's latest run answers at its API
    address. The run id is compared because a killed driver leaves its address behind, and the port
    may since serve a driver of the same job id from another workdir."""
    api_url = job.get("api_url")
    if not api_url:
        return None
    try:
        answer = httpx.get(f"{api_url}/ui/api/jobs/{job['job_id']}/live", headers=headers or {}, timeout=timeout)
    except httpx.HTTPError:
        return None
    if answer.status_code != 200:
        return None
    summary = answer.json()
    run = store.latest_run(job["job_id"]) or {}
    return summary if run.get("run_id") and summary.get("run_id") == run["run_id"] else None


def last_seen(store, job_id: str) -> float | None:
    """When the job last did something: its latest checkpoint, else the start or end of its last run."""
    checkpoint = store.latest_checkpoint(job_id)
    run = store.latest_run(job_id) or {}
    times = [t for t in (checkpoint and checkpoint["created_at"], run.get("started_at"), run.get("ended_at")) if t]
    return max(times) if times else None


def job_row(store, job: dict, live: dict | None) -> dict:
    job_id = job["job_id"]
    run = store.latest_run(job_id) or {}
    checkpoint = store.latest_checkpoint(job_id)
    status = run.get("status", "CREATED")
    if live is not None:
        status = "RUNNING"
    elif status == "RUNNING":
        status = "NOT RUNNING"  # the run never ended cleanly: the driver is gone
    return {"id": job_id, "name": job["name"], "status": status, "parallelism": run.get("parallelism"),
            "last_checkpoint": checkpoint["epoch"] if checkpoint else None,
            "last_checkpoint_at": checkpoint["created_at"] if checkpoint else None,
            "started_at": run.get("started_at"), "created_at": job["created_at"],
            "age_s": time.time() - run["started_at"] if run.get("started_at") else None,
            "api_url": job.get("api_url") if live is not None else None, "last_seen": last_seen(store, job_id),
            "error": run.get("error")}


def job_detail(store, job_id: str, live: dict | None) -> dict | None:
    job = store.get_job(job_id)
    if job is None:
        return None
    savepoints = store.list_savepoints(job_id)
    return {**job_row(store, job, live), "live": live,
            "runs": store.list_runs(job_id),
            "checkpoints": checkpoint_stats.checkpoint_history(store, job_id),
            "failed_checkpoints": checkpoint_stats.failed_checkpoints(store, job_id),
            "savepoints": [{**s, "parent": _parent(s.get("restored_from"))} for s in savepoints],
            "operators": (store.latest_checkpoint(job_id) or {}).get("operators") or []}


def _parent(restored_from: str | None) -> str | None:
    """The savepoint a savepoint's run was restored from (its parent in the lineage tree)."""
    if restored_from and restored_from.startswith("savepoint:"):
        return restored_from[len("savepoint:"):]
    return None


def flink_checkpoints(store, job_id: str) -> dict:
    """``GET /jobs/:id/checkpoints`` in Flink's shape (counts, latest, history)."""
    history = checkpoint_stats.checkpoint_history(store, job_id)
    failures = checkpoint_stats.failed_checkpoints(store, job_id)

    def entry(c: dict) -> dict:
        started = c["started_at"] or c["committed_at"]
        return {"id": c["epoch"], "status": "COMPLETED", "is_savepoint": False,
                "trigger_timestamp": int(started * 1000), "latest_ack_timestamp": int(c["committed_at"] * 1000),
                "end_to_end_duration": int(c["duration_ms"] or 0), "checkpointed_size": c["bytes_written"],
                "state_size": c["full_size"], "num_subtasks": c["parallelism"], "discarded": c["discarded"],
                "records": c["records"]}

    completed = [entry(c) for c in history]
    failed = [{"id": f["epoch"], "status": "FAILED", "failure_timestamp": int(f["failed_at"] * 1000),
               "failure_message": f["cause"]} for f in failures]
    run = store.latest_run(job_id) or {}
    restored = run.get("restored_from")
    return {"counts": {"completed": len(completed), "failed": len(failed), "in_progress": 0,
                       "total": len(completed) + len(failed), "restored": 1 if restored else 0},
            "latest": {"completed": completed[-1] if completed else None, "failed": failed[0] if failed else None,
                       "restored": {"external_path": restored} if restored else None, "savepoint": None},
            "history": list(reversed(completed))[:50] + failed[:50]}


def flink_exceptions(store, job_id: str) -> dict:
    """``GET /jobs/:id/exceptions`` in Flink's shape: failed runs and failed checkpoints, newest first."""
    entries = [{"exceptionName": "JobFailure", "stacktrace": r["error"], "timestamp": int((r["ended_at"] or 0) * 1000),
                "taskName": None} for r in store.list_runs(job_id) if r.get("error")]
    entries += [{"exceptionName": "CheckpointFailure", "stacktrace": f["cause"], "timestamp": int(f["failed_at"] * 1000),
                 "taskName": None, "checkpoint": f["epoch"]} for f in checkpoint_stats.failed_checkpoints(store, job_id)]
    entries.sort(key=lambda e: e["timestamp"], reverse=True)
    root = entries[0] if entries else None
    return {"root-exception": root["stacktrace"] if root else None, "timestamp": root["timestamp"] if root else None,
            "all-exceptions": entries, "truncated": False, "exceptionHistory": {"entries": entries, "truncated": False}}
