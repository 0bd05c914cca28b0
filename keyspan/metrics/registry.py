"""The driver's view of a running job's metrics, built from what the driver commits.

Every committed epoch adds its task reports (records, user metric snapshots) and its checkpoint
figures. Only reports of committed attempts ever reach :meth:`JobMetrics.epoch_committed`, so a
retried task counts once. Rates are the current ones (over the last epochs), not averages since
the start, and a short history feeds the dashboard's plots.
"""

from __future__ import annotations

import threading
import time
from collections import deque

LONG_MIN = -(2 ** 63)
LONG_MAX = 2 ** 63 - 1
RATE_WINDOW_S = 10.0  # records/s is measured over the epochs committed in the last few seconds


class JobMetrics:
    def __init__(self, job_id: str, stages: list[dict], history: int = 600):
        """``stages``: one dict per plan stage, ``{"stage", "operator", "name", "uids", "parallelism", "source"}``."""
        self.job_id = job_id
        self.stages = {s["stage"]: s for s in stages}
        self.lock = threading.Lock()
        self.started = time.time()
        self.records_in: dict[tuple[int, int], int] = {}  # (stage, subtask) → total
        self.records_out: dict[tuple[int, int], int] = {}
        self.recent: dict[tuple[int, int], deque] = {}  # (stage, subtask) → (time, records in) of recent epochs
        self.recent_out: dict[tuple[int, int], deque] = {}
        self.user: dict[tuple, dict] = {}  # (operator, subtask, scope, labels, name) → merged value
        self.epochs = 0
        self.epochs_in_driver = 0  # of them, epochs the driver ran itself (small epochs in the driver)
        self.records = 0
        self.last_epoch = None
        self.last_epoch_duration = None
        self.last_checkpoint = None  # {"epoch", "duration_ms", "size", "full_size", "at"}
        self.completed_checkpoints = 0
        self.failed_checkpoints = 0
        self.last_failure = None
        self.restore_ms = None
        self.restarts = 0
        self.rescales = 0  # live rescales applied in this driver
        self.last_rescale_pause_ms = None  # request to the first epoch committed at the new parallelism
        self.watermarks: dict[str, int] = {}
        self.backlog: dict[str, int] = {}
        self.state_size: dict[str, int] = {}  # operator uid → bytes of its state in the latest checkpoint
        self.history: deque = deque(maxlen=history)
        self.autoscaler: dict | None = None  # the autoscaler's bounds, current/desired parallelism, decisions
        self._recent_job: deque = deque()

    # -- recording (driver loop) -----------------------------------------------------------------
    def epoch_committed(self, epoch: int, reports: dict, started: float, ended: float, bytes_written: int,
                        manifest: dict, event_time: dict, records: int, in_driver: bool = False) -> None:
        with self.lock:
            for (stage, subtask), report in reports.items():
                n = report.records
                self.records_in[(stage, subtask)] = self.records_in.get((stage, subtask), 0) + n
                out = report.records_out
                self.records_out[(stage, subtask)] = self.records_out.get((stage, subtask), 0) + out
                for window, count in ((self.recent, n), (self.recent_out, out)):
                    recent = window.setdefault((stage, subtask), deque())
                    recent.append((ended, count))
                    _trim(recent, ended)
                for m in report.metrics:
                    self._merge_user(m)
            self.epochs += 1
            self.epochs_in_driver += in_driver
            self.records += records
            self._recent_job.append((ended, records))
            _trim(self._recent_job, ended)
            self.last_epoch = epoch
            self.last_epoch_duration = ended - started
            full = {}
            for uid, handles in manifest.items():
                full[uid] = sum(h.get("bytes", 0) for h in handles)
            self.state_size = full
            self.completed_checkpoints += 1
            self.last_checkpoint = {"epoch": epoch, "duration_ms": (ended - started) * 1000, "size": bytes_written,
                                    "full_size": sum(full.values()), "at": ended}
            self.watermarks = {uid: m.get("wm", LONG_MIN) for uid, m in (event_time or {}).items()}
            self.history.append({"t": ended, "epoch": epoch, "rate": self._job_rate(ended),
                                 "epoch_ms": (ended - started) * 1000, "size": bytes_written,
                                 "lag_ms": self.watermark_lag_ms(ended)})

    def checkpoint_failed(self, epoch: int, cause: str) -> None:
        with self.lock:
            self.failed_checkpoints += 1
            self.last_failure = {"epoch": epoch, "cause": cause, "at": time.time()}

    def restored(self, seconds: float) -> None:
        self.restore_ms = seconds * 1000

    def set_stages(self, stages: list[dict]) -> None:
        with self.lock:
            self.stages = {s["stage"]: s for s in stages}

    def rescaled(self, pause_ms: float) -> None:
        with self.lock:
            self.rescales += 1
            self.last_rescale_pause_ms = pause_ms

    def restarted(self) -> None:
        self.restarts += 1

    def set_backlog(self, source: str, count: int | None, unit: str = "records") -> None:
        """What a source has not read yet, in its unit (records, or files for a file source)."""
        if count is not None:
            self.backlog[source] = {"count": count, "unit": unit}

    def set_autoscaler(self, status: dict) -> None:
        with self.lock:
            self.autoscaler = status

    # -- reading (API threads) ---------------------------------------------------------------------
    def _merge_user(self, m: dict) -> None:
        key = (m["operator"], m["subtask"], tuple(m["scope"]), tuple(sorted(m["labels"].items())), m["name"])
        known = self.user.get(key)
        if m["type"] in ("counter", "meter"):
            total = (known["value"] if known else 0) + m["value"]
            entry = {**m, "value": total}
            if m["type"] == "meter":
                recent = known["recent"] if known else deque()
                recent.append((time.time(), m["value"]))
                _trim(recent, time.time())
                entry["recent"] = recent
        elif m["type"] == "distribution":
            entry = dict(known or {**m, "count": 0, "sum": 0, "min": None, "max": None})
            entry["count"] += m["count"]
            entry["sum"] += m["sum"]
            for f, pick in (("min", min), ("max", max)):
                if m[f] is not None:
                    entry[f] = m[f] if entry[f] is None else pick(entry[f], m[f])
        else:
            entry = m
        self.user[key] = entry

    def _job_rate(self, now: float) -> float:
        return _rate(self._recent_job, now)

    def watermark_lag_ms(self, now: float | None = None) -> dict[str, float]:
        """Wall clock minus watermark per origin (only origins whose watermark has started)."""
        now_ms = (now or time.time()) * 1000
        return {uid: max(0.0, now_ms - wm) for uid, wm in self.watermarks.items() if LONG_MIN < wm < LONG_MAX}

    def user_metrics(self) -> list[dict]:
        with self.lock:
            out = []
            for entry in self.user.values():
                e = {k: v for k, v in entry.items() if k != "recent"}
                if entry["type"] == "meter":
                    e["rate"] = _rate(entry["recent"], time.time())
                out.append(e)
            return out

    def summary(self) -> dict:
        """Everything the dashboard and ``keyspan status`` show, as plain JSON."""
        now = time.time()
        with self.lock:
            operators = []
            for stage, s in sorted(self.stages.items()):
                subtasks = [{"subtask": i, "records_in": self.records_in.get((stage, i), 0),
                             "records_out": self.records_out.get((stage, i), 0),
                             "records_per_second": _rate(self.recent.get((stage, i), ()), now),
                             "records_out_per_second": _rate(self.recent_out.get((stage, i), ()), now)}
                            for i in range(s["parallelism"])]
                totals = {f: sum(x[f] for x in subtasks) for f in subtasks[0] if f != "subtask"} if subtasks else {}
                operators.append({**s, **totals, "subtasks": subtasks})
            return {
                "job": self.job_id, "uptime_s": now - self.started, "epochs": self.epochs,
                "epochs_in_driver": self.epochs_in_driver, "records": self.records,
                "records_per_second": self._job_rate(now), "last_epoch": self.last_epoch,
                "last_epoch_ms": None if self.last_epoch_duration is None else self.last_epoch_duration * 1000,
                "last_checkpoint": self.last_checkpoint, "completed_checkpoints": self.completed_checkpoints,
                "failed_checkpoints": self.failed_checkpoints, "last_failure": self.last_failure,
                "restore_ms": self.restore_ms, "restarts": self.restarts,
                "rescales": self.rescales, "last_rescale_pause_ms": self.last_rescale_pause_ms,
                "watermarks": {uid: (None if wm in (LONG_MIN,) else wm) for uid, wm in self.watermarks.items()},
                "watermark_lag_ms": self.watermark_lag_ms(now), "backlog": dict(self.backlog),
                "state_size": dict(self.state_size), "operators": operators, "history": list(self.history),
                "autoscaler": self.autoscaler,
            }


def _trim(recent: deque, now: float) -> None:
    while len(recent) > 1 and recent[0][0] < now - RATE_WINDOW_S:
        recent.popleft()


def _rate(recent, now: float) -> float:
    """Records per second over the recent epochs: their records over the time since the one before
    the first (a single epoch: since it was recorded), so idle time lowers the rate."""
    recent = list(recent)
    if not recent:
        return 0.0
    if now - recent[-1][0] > RATE_WINDOW_S:
        return 0.0
    if len(recent) == 1:
        return 0.0
    span = max(now, recent[-1][0]) - recent[0][0]
    return sum(n for _, n in recent[1:]) / span if span > 0 else 0.0
