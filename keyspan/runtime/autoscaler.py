"""The autoscaler: picks the job's parallelism from its own metrics and rescales it live.

Modelled on the Flink Kubernetes operator's autoscaler (same option names under ``job.autoscaler.``,
same formula), but it acts between two epochs of the running job instead of restarting it:

* true processing rate of a stage = records it processed / seconds its busiest subtask was busy (the
  busiest subtask limits the stage, as in Flink since FLINK-30652); per subtask: that / parallelism;
* target rate = input rate (records read + growth of the backlog, per second) + backlog / catch-up duration;
* a stage scales up when its capacity (true rate × parallelism) is below the target rate at the upper
  utilization bound, down when above it at the lower bound, and holds in between (the hysteresis band);
* new parallelism = ceil(target rate / (true rate per subtask × target utilization)), limited by the
  scale-up/scale-down max factors and by [min, max]; the job takes the largest its stages ask for.

Decisions wait for a full metrics window after the stabilization interval that follows every rescale,
a scale-down waits out the scale-up grace period and must be asked for over a whole scale-down
interval (it then takes the largest parallelism asked for in that interval), so a steady load never
flaps. ``AutoscalerPolicy`` is pure (samples in, decisions out); ``JobAutoscaler`` feeds it from the
driver's committed epochs and hands its decisions to the driver's live-rescale control.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from dataclasses import dataclass, field

from keyspan.common import logs

log = logs.get_logger("keyspan.autoscaler")

PREFIX = "job.autoscaler."


def _duration_s(key: str, text: str) -> float:
    from keyspan.datastream.configuration_keys import duration_ms

    return duration_ms(key, text) / 1000


def _fraction(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"configuration key '{key}': cannot read {text!r} as a number (e.g. 0.7)") from None
    if not 0 <= value <= 1:
        raise ValueError(f"configuration key '{key}': {value} is not between 0 and 1")
    return value


def _positive_int(key: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"configuration key '{key}': cannot read {text!r} as a whole number") from None
    if value < 1:
        raise ValueError(f"configuration key '{key}': must be at least 1, got {value}")
    return value


def _bool(key: str, text: str) -> bool:
    if str(text).lower() not in ("true", "false"):
        raise ValueError(f"configuration key '{key}': {text!r} is not true or false")
    return str(text).lower() == "true"


def _factor(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"configuration key '{key}': cannot read {text!r} as a number") from None
    if value <= 0:
        raise ValueError(f"configuration key '{key}': must be above 0, got {value}")
    return value


@dataclass
class AutoscalerOptions:
    """The ``job.autoscaler.*`` settings (durations in seconds). Defaults are shorter than Flink's:
    a live rescale costs about one epoch, not a restart."""

    enabled: bool = False
    scaling_enabled: bool = True  # false: decide and report, but never rescale (Flink's advisory mode)
    min_parallelism: int = 1
    max_parallelism: int | None = None  # None: the job's max parallelism
    target_utilization: float = 0.7
    utilization_boundary: float = 0.3
    utilization_max: float | None = None  # explicit upper bound of the band (else target + boundary)
    utilization_min: float | None = None  # explicit lower bound of the band (else target - boundary)
    metrics_window_s: float = 10.0
    stabilization_interval_s: float = 10.0
    catch_up_duration_s: float = 60.0
    scale_up_grace_period_s: float = 30.0
    scale_down_interval_s: float = 10.0
    scale_up_max_factor: float = 100000.0
    scale_down_max_factor: float = 0.6

    KEYS = {  # key after ``job.autoscaler.`` → (field, parser); Flink's spellings, with its vertex.* aliases
        "enabled": ("enabled", _bool),
        "scaling.enabled": ("scaling_enabled", _bool),
        "min-parallelism": ("min_parallelism", _positive_int),
        "vertex.min-parallelism": ("min_parallelism", _positive_int),
        "max-parallelism": ("max_parallelism", _positive_int),
        "vertex.max-parallelism": ("max_parallelism", _positive_int),
        "target.utilization": ("target_utilization", _fraction),
        "target.utilization.boundary": ("utilization_boundary", _fraction),
        "utilization.max": ("utilization_max", _fraction),
        "utilization.min": ("utilization_min", _fraction),
        "metrics.window": ("metrics_window_s", _duration_s),
        "stabilization.interval": ("stabilization_interval_s", _duration_s),
        "catch-up.duration": ("catch_up_duration_s", _duration_s),
        "scale-up.grace-period": ("scale_up_grace_period_s", _duration_s),
        "scale-down.interval": ("scale_down_interval_s", _duration_s),
        "scale-up.max-factor": ("scale_up_max_factor", _factor),
        "scale-down.max-factor": ("scale_down_max_factor", _fraction),
    }

    @classmethod
    def from_configuration(cls, values: dict[str, str], job_id: str = "job") -> "AutoscalerOptions":
        """Read the ``job.autoscaler.*`` keys of a job's configuration; an unknown one is an error
        (a typo would otherwise silently leave a default in place)."""
        options = cls()
        for key, value in values.items():
            if not key.startswith(PREFIX):
                continue
            name = key[len(PREFIX):]
            if name not in cls.KEYS:
                known = ", ".join(PREFIX + k for k in cls.KEYS)
                raise ValueError(f"job '{job_id}': unknown configuration key '{key}'; the autoscaler reads {known}")
            attr, parse = cls.KEYS[name]
            setattr(options, attr, parse(key, value))
        options.check(job_id)
        return options

    def with_bounds(self, low: int, high: int) -> "AutoscalerOptions":
        """``keyspan run --autoscale LOW..HIGH``: enabled, with these bounds."""
        self.enabled, self.min_parallelism, self.max_parallelism = True, low, high
        return self

    def check(self, job_id: str = "job") -> None:
        if self.max_parallelism is not None and self.max_parallelism < self.min_parallelism:
            raise ValueError(f"job '{job_id}': autoscaler max parallelism {self.max_parallelism} is below its "
                             f"min parallelism {self.min_parallelism}")
        if not 0 < self.target_utilization <= 1:
            raise ValueError(f"job '{job_id}': job.autoscaler.target.utilization must be above 0 and at most 1")

    @property
    def upper_utilization(self) -> float:
        return self.utilization_max if self.utilization_max is not None else \
            min(1.0, self.target_utilization + self.utilization_boundary)

    @property
    def lower_utilization(self) -> float:
        return self.utilization_min if self.utilization_min is not None else \
            max(0.0, self.target_utilization - self.utilization_boundary)


def parse_bounds(text: str) -> tuple[int, int]:
    """``MIN..MAX`` (or one number N for N..N) of ``--autoscale``."""
    low, sep, high = str(text).partition("..")
    try:
        bounds = (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        raise ValueError(f"--autoscale {text!r}: write the bounds as MIN..MAX, e.g. --autoscale 1..8") from None
    if bounds[0] < 1 or bounds[1] < bounds[0]:
        raise ValueError(f"--autoscale {text!r}: need 1 <= MIN <= MAX, e.g. --autoscale 1..8")
    return bounds


@dataclass
class EpochSample:
    """What one committed epoch tells the autoscaler."""

    at: float  # wall clock (s) when the epoch committed
    parallelism: int  # the job's parallelism during the epoch
    source_records: int  # records the sources read in the epoch
    backlog: int | None  # records the sources have not read yet, after the epoch (None: unknown)
    stages: dict[int, tuple[int, float]]  # stage → (records processed, busy seconds of its busiest subtask)
    epoch_s: float = 0.0  # the epoch's duration, start to commit
    interval_s: float = 0.0  # the trigger interval


@dataclass
class Decision:
    at: float
    current: int
    desired: int
    action: str  # "scale-up", "scale-down" or "hold"
    reason: str
    inputs: dict = field(default_factory=dict)

    def line(self, job_id: str) -> str:
        i = self.inputs
        facts = ", ".join(f"{k} {_fmt(v)}" for k, v in i.items())
        verb = {"scale-up": f"scale up {self.current} -> {self.desired}",
                "scale-down": f"scale down {self.current} -> {self.desired}"}.get(self.action, f"hold at {self.current}")
        return f"keyspan autoscaler: job '{job_id}': {verb}: {self.reason} ({facts})"

    def to_dict(self) -> dict:
        return {"at": self.at, "from": self.current, "to": self.desired, "action": self.action,
                "reason": self.reason, "inputs": dict(self.inputs)}


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


class AutoscalerPolicy:
    """Samples in, decisions out; no clock or Spark of its own (time comes with the samples)."""

    def __init__(self, options: AutoscalerOptions, max_parallelism: int):
        self.options = options
        self.high = min(options.max_parallelism or max_parallelism, max_parallelism)
        self.low = min(options.min_parallelism, self.high)
        self.window: deque[EpochSample] = deque()
        self.parallelism: int | None = None
        self.stable_from: float | None = None  # samples count from here (after the last rescale settled)
        self.last_scale_up: float | None = None
        self.down_asked: list[tuple[float, int]] = []  # scale-downs asked for since the first of them
        self.last: Decision | None = None

    def rescaled(self, at: float) -> None:
        """The job now runs at another parallelism: metrics of the old one no longer apply."""
        self.window.clear()
        self.down_asked.clear()
        self.stable_from = at + self.options.stabilization_interval_s

    def observe(self, sample: EpochSample) -> Decision | None:
        """Add an epoch; return a decision when the window allows one (a hold, or a new parallelism)."""
        if self.parallelism != sample.parallelism:
            if self.parallelism is not None and sample.parallelism > self.parallelism:
                self.last_scale_up = sample.at
            self.parallelism = sample.parallelism
            self.rescaled(sample.at)
        if sample.at < self.stable_from:
            return None
        self.window.append(sample)
        while len(self.window) > 1 and self.window[1].at <= sample.at - self.options.metrics_window_s:
            self.window.popleft()
        if len(self.window) < 2 or self.window[-1].at - self.window[0].at < self.options.metrics_window_s * 0.999:
            return None
        self.last = self._decide()
        return self.last

    def _decide(self) -> Decision:
        o = self.options
        p = self.parallelism
        first, samples = self.window[0], list(self.window)[1:]  # rates over the time after the first epoch
        span = samples[-1].at - first.at
        read = sum(s.source_records for s in samples)
        backlog = samples[-1].backlog
        growth = (backlog - first.backlog) if backlog is not None and first.backlog is not None else 0
        input_rate = max(0.0, (read + growth) / span)
        catch_up = (backlog or 0) / o.catch_up_duration_s if o.catch_up_duration_s > 0 else 0.0
        target_rate = input_rate + catch_up
        epoch_s = sum(s.epoch_s for s in samples) / len(samples)
        inputs = {"input rate/s": input_rate, "backlog": backlog if backlog is not None else "unknown",
                  "target rate/s": target_rate, "epoch s": epoch_s, "interval s": samples[-1].interval_s}
        wanted = []  # (stage, desired parallelism, utilization, true rate per subtask)
        for stage in samples[-1].stages:
            records = sum(s.stages.get(stage, (0, 0.0))[0] for s in samples)
            busy = sum(s.stages.get(stage, (0, 0.0))[1] for s in samples)  # of the busiest subtask
            if records == 0 or busy <= 0:
                continue
            capacity = records / busy  # what the stage handles at full load
            true_rate = capacity / p  # per subtask
            stage_target = target_rate * (records / read) if read else target_rate
            utilization = busy / span
            too_slow = capacity < stage_target / o.upper_utilization  # would run above the band
            too_idle = capacity > stage_target / max(o.lower_utilization, 1e-9)  # would run below it
            desired = math.ceil(stage_target / (true_rate * o.target_utilization)) if too_slow or too_idle else p
            wanted.append((stage, desired, utilization, true_rate))
        if not wanted:
            if read == 0 and not backlog:
                desired, why = self.low, "idle: no input and no backlog"
            else:
                return Decision(samples[-1].at, p, p, "hold", "no busy time measured yet", inputs)
        else:
            stage, desired, utilization, true_rate = max(wanted, key=lambda w: w[1])
            inputs.update({"bottleneck stage": stage, "busy ratio": utilization, "true rate/subtask/s": true_rate})
            why = (f"stage {stage} at {utilization:.0%} busy; capacity {true_rate * p:,.0f}/s vs target "
                   f"{target_rate:,.0f}/s")
        desired = min(desired, max(p + 1, math.floor(p * o.scale_up_max_factor)))
        desired = max(desired, math.ceil(p * (1 - o.scale_down_max_factor)))
        desired = max(self.low, min(self.high, desired))
        at = samples[-1].at
        if desired > p:
            self.down_asked.clear()
            return Decision(at, p, desired, "scale-up", why, inputs)
        if desired == p:
            self.down_asked.clear()
            return Decision(at, p, p, "hold", f"within the utilization band ({why})" if wanted else why, inputs)
        if self.last_scale_up is not None and at - self.last_scale_up < o.scale_up_grace_period_s:
            return Decision(at, p, p, "hold", f"would scale down to {desired} but the scale-up grace period "
                            f"({o.scale_up_grace_period_s:g} s) has not passed", inputs)
        self.down_asked.append((at, desired))
        if at - self.down_asked[0][0] < o.scale_down_interval_s:
            return Decision(at, p, p, "hold", f"would scale down to {desired}; waiting out the scale-down interval "
                            f"({o.scale_down_interval_s:g} s)", inputs)
        desired = max(d for _, d in self.down_asked)
        self.down_asked.clear()
        if desired >= p:
            return Decision(at, p, p, "hold", why, inputs)
        return Decision(at, p, desired, "scale-down", why, inputs)


class JobAutoscaler:
    """Feeds the policy from the driver's committed epochs, reports every decision (log, stderr,
    metrics), and asks the driver to rescale between epochs."""

    def __init__(self, runner, options: AutoscalerOptions, metrics):
        self.runner = runner
        self.metrics = metrics  # the job's JobMetrics: the status goes to the API, dashboard and Prometheus
        self.options = options
        self.policy = AutoscalerPolicy(options, runner.max_parallelism)
        self.pending: dict | None = None  # the rescale request not yet carried out
        self.decisions: list[dict] = []  # every change it asked for (the demo's and the dashboard's history)
        self.curve: deque = deque(maxlen=2000)  # per epoch: time, parallelism, backlog (the lag curve)
        self.last: Decision | None = None
        self._last_reported: tuple | None = None
        self._report_status()

    def epoch_committed(self, sample: EpochSample) -> None:
        self.curve.append({"t": sample.at, "parallelism": sample.parallelism, "backlog": sample.backlog,
                           "records": sample.source_records})
        try:
            if self.pending is not None:
                if not self.pending.get("done"):
                    return  # the job is switching; its next epochs belong to the new parallelism
                if self.pending.get("error"):
                    print(f"keyspan autoscaler: job '{self.runner.job_id}': rescale failed: "
                          f"{self.pending['error']}", file=sys.stderr)
                self.pending = None
            decision = self.policy.observe(sample)
            if decision is not None:
                self._act(decision)
        finally:
            self._report_status()

    def _act(self, decision: Decision) -> None:
        self.last = decision
        self._report(decision)
        if decision.action != "hold" and self.options.scaling_enabled:
            self.pending = self.runner.control.request_rescale(decision.desired, reason=f"autoscaler: {decision.reason}")

    def _report(self, decision: Decision) -> None:
        line = decision.line(self.runner.job_id)
        key = (decision.action, decision.desired, decision.reason.split(" (")[0])
        if decision.action != "hold":
            entry = decision.to_dict()
            entry["applied"] = self.options.scaling_enabled
            self.decisions.append(entry)
            log.info(line)
            print(line, file=sys.stderr)
        elif key != self._last_reported:  # a hold is logged when it changes, not every epoch
            log.info(line)
        self._last_reported = key

    def _report_status(self) -> None:
        decision = self.last
        self.metrics.set_autoscaler({
            "enabled": True, "scaling": self.options.scaling_enabled, "min": self.policy.low,
            "max": self.policy.high, "current": self.runner.parallelism,
            "desired": decision.desired if decision else self.runner.parallelism,
            "last": decision.to_dict() if decision else None, "scalings": len(self.decisions),
            "decisions": self.decisions[-50:], "curve": list(self.curve)})


def sample_of(runner, reports: dict, started: float, ended: float) -> EpochSample:
    """The autoscaler's view of a committed epoch: records and the busiest subtask's busy time per
    stage from the task reports, what the sources read and still have to read (in records; a file
    source's backlog, counted in files, makes it unknown)."""
    stages: dict[int, list] = {}
    source_stages = {s.plan.stage_id for s in runner.plan.stages if s.source is not None}
    read = 0
    for (stage, _), report in reports.items():
        entry = stages.setdefault(stage, [0, 0.0])
        entry[0] += report.records
        entry[1] = max(entry[1], report.busy_ms / 1000)
        if stage in source_stages:
            read += report.records
    backlog = runner.observer.metrics.backlog  # recorded by the observer for this epoch just before
    counts = [b["count"] for b in backlog.values() if b["unit"] == "records"]
    known = counts and len(counts) == len(backlog)
    interval = max(runner.checkpoint_config.interval_ms, runner.checkpoint_config.min_pause_ms) / 1000
    return EpochSample(at=ended, parallelism=runner.parallelism, source_records=read,
                       backlog=sum(counts) if known else None,
                       stages={k: (v[0], v[1]) for k, v in stages.items()}, epoch_s=ended - started,
                       interval_s=interval)


def options_for(env, run_options, job_id: str) -> AutoscalerOptions | None:
    """The job's autoscaler settings if its configuration or ``--autoscale`` turns it on (the flag's
    bounds win over the job's)."""
    options = AutoscalerOptions.from_configuration(env.get_configuration().to_dict(), job_id)
    if run_options.autoscale:
        options.with_bounds(*run_options.autoscale)
    return options if options.enabled else None
