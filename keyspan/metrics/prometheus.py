"""Prometheus exposition of a job's metrics under Flink's metric names (``flink_``-style names with
a ``keyspan_`` prefix), labelled by job, operator and subtask; user metrics under ``keyspan_user_``."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


def _name(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", text)


class JobCollector:
    def __init__(self, metrics):
        self.metrics = metrics

    def collect(self):
        s = self.metrics.summary()
        job = s["job"]

        def gauge(name, doc, value, labels=None, extra=None):
            g = GaugeMetricFamily(f"keyspan_{name}", doc, labels=["job", *(labels or [])])
            if value is not None:
                g.add_metric([job], value)
            for lv, v in (extra or []):
                if v is not None:
                    g.add_metric([job, *lv], v)
            return g

        task_labels = ["job", "operator", "name", "subtask"]
        families = [
            (CounterMetricFamily("keyspan_numRecordsIn", "records into the operator chain of a task",
                                 labels=task_labels), "records_in"),
            (GaugeMetricFamily("keyspan_numRecordsInPerSecond", "current input rate of a task", labels=task_labels),
             "records_per_second"),
            (CounterMetricFamily("keyspan_numRecordsOut", "records a task sent downstream (or to a driver sink)",
                                 labels=task_labels), "records_out"),
            (GaugeMetricFamily("keyspan_numRecordsOutPerSecond", "current output rate of a task", labels=task_labels),
             "records_out_per_second"),
        ]
        for op in s["operators"]:
            for st in op["subtasks"]:
                labels = [job, op["operator"], op["name"], str(st["subtask"])]
                for family, field in families:
                    family.add_metric(labels, st[field])
        for family, _ in families:
            yield family
        yield _counter("keyspan_jobNumRecordsIn", "records read by the job's sources", job, s["records"])
        yield gauge("numRecordsInPerSecondTotal", "current rate of records read by the job", s["records_per_second"])
        yield _counter("keyspan_epochs", "committed epochs", job, s["epochs"])
        yield gauge("lastEpochDuration", "milliseconds the last epoch took, start to commit", s["last_epoch_ms"])
        cp = s["last_checkpoint"] or {}
        yield gauge("lastCheckpointDuration", "milliseconds of the last completed checkpoint", cp.get("duration_ms"))
        yield gauge("lastCheckpointSize", "bytes the last checkpoint wrote (its delta)", cp.get("size"))
        yield gauge("lastCheckpointFullSize", "bytes of state a restore of the last checkpoint reads",
                    cp.get("full_size"))
        yield _counter("keyspan_numberOfCompletedCheckpoints", "completed checkpoints", job,
                       s["completed_checkpoints"])
        yield _counter("keyspan_numberOfFailedCheckpoints", "failed checkpoints", job, s["failed_checkpoints"])
        yield gauge("restoreDuration", "milliseconds the run's first epoch took after restoring state", s["restore_ms"])
        yield _counter("keyspan_numRestarts", "restarts of the job", job, s["restarts"])
        yield _counter("keyspan_numEpochsInDriver", "committed epochs the driver ran itself instead of Spark jobs "
                       "(set_small_epochs_in_driver)", job, s["epochs_in_driver"])
        yield _counter("keyspan_numRescales", "live rescales of the running job", job, s["rescales"])
        yield gauge("lastRescalePause", "milliseconds from the last live rescale request to the first epoch "
                    "committed at the new parallelism", s["last_rescale_pause_ms"])
        yield gauge("currentInputWatermark", "watermark of a source (watermark origin), epoch milliseconds",
                    None, ["source"], [([uid], wm) for uid, wm in s["watermarks"].items()])
        yield gauge("watermarkLag", "wall clock minus watermark, milliseconds", None, ["source"],
                    [([uid], lag) for uid, lag in s["watermark_lag_ms"].items()])
        for unit in ("records", "files"):
            yield gauge(f"pending{unit.title()}", f"{unit} the source has not read yet (where it knows)", None,
                        ["source"], [([uid], b["count"]) for uid, b in s["backlog"].items() if b["unit"] == unit])
        yield gauge("stateSize", "bytes of an operator's state in the latest checkpoint", None, ["operator"],
                    [([uid], n) for uid, n in s["state_size"].items()])
        if s["autoscaler"]:
            yield from _autoscaler_families(job, s["autoscaler"])
        yield from _user_families(job, self.metrics.user_metrics())


def _autoscaler_families(job: str, a: dict):
    """The autoscaler's view: the parallelism it wants next to the one running, its bounds, how
    often it rescaled, and its last decision (action and reason as labels)."""
    for name, doc, value in (("currentParallelism", "parallelism the job runs at", a["current"]),
                             ("desiredParallelism", "parallelism the autoscaler last decided on", a["desired"]),
                             ("minParallelism", "the autoscaler's lower bound", a["min"]),
                             ("maxParallelism", "the autoscaler's upper bound", a["max"])):
        g = GaugeMetricFamily(f"keyspan_autoscaler_{name}", doc, labels=["job"])
        g.add_metric([job], value)
        yield g
    yield _counter("keyspan_autoscaler_scalings", "rescales the autoscaler decided on", job, a["scalings"])
    last = a["last"]
    if last is not None:
        g = GaugeMetricFamily("keyspan_autoscaler_lastDecision", "the autoscaler's last decision (1), by action "
                              "and reason; the value of the gauge is the parallelism it chose",
                              labels=["job", "action", "reason"])
        g.add_metric([job, last["action"], last["reason"]], last["to"])
        yield g


def _counter(name, doc, job, value):
    c = CounterMetricFamily(name, doc, labels=["job"])
    c.add_metric([job], value)
    return c


def _user_families(job, entries):
    families = {}
    for e in entries:
        label_names = ["job", "operator", "subtask", *sorted(_name(k) for k in e["labels"])]
        label_values = [job, e["operator"], str(e["subtask"]),
                        *[str(v) for _, v in sorted((_name(k), v) for k, v in e["labels"].items())]]
        base = "keyspan_user_" + "_".join(_name(p) for p in [*e["scope"], e["name"]])
        if e["type"] == "distribution":
            for field in ("count", "sum", "min", "max"):
                if e[field] is not None:
                    fam = families.setdefault((f"{base}_{field}", tuple(label_names)), GaugeMetricFamily(
                        f"{base}_{field}", f"user distribution {e['name']} ({field})", labels=label_names))
                    fam.add_metric(label_values, e[field])
            continue
        if e["type"] == "gauge" and not isinstance(e.get("value"), (int, float)):
            continue
        kind = CounterMetricFamily if e["type"] in ("counter", "meter") and e["value"] >= 0 else GaugeMetricFamily
        fam = families.setdefault((base, tuple(label_names)), kind(base, f"user {e['type']} {e['name']}",
                                                                    labels=label_names))
        fam.add_metric(label_values, e["value"])
        if e["type"] == "meter":
            fam_rate = families.setdefault((base + "_rate", tuple(label_names)), GaugeMetricFamily(
                base + "_rate", f"user meter {e['name']} (events per second)", labels=label_names))
            fam_rate.add_metric(label_values, e.get("rate", 0.0))
    yield from families.values()


def job_registry(metrics) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(metrics))
    return registry
