"""The autoscaler's policy on synthetic epoch metrics (pure Python, no Spark): a simulated job whose
subtasks each process ``capacity`` records per busy second, fed by input that arrives at a given
rate; the policy's decisions are applied at the next epoch, as the driver's live rescale does."""

from __future__ import annotations

import random
import sys

import pytest

from keyspan.common.configuration import Configuration
from keyspan.runtime.autoscaler import AutoscalerOptions, AutoscalerPolicy, EpochSample, parse_bounds

FAST = dict(stabilization_interval_s=5, metrics_window_s=5, catch_up_duration_s=20, scale_up_grace_period_s=15,
            scale_down_interval_s=5)


def simulate(policy, rates, capacity=200.0, parallelism=1, backlog=0, blocked=()):
    """One epoch per second; ``rates[t]`` records arrive in second t; an epoch processes what is
    there up to parallelism × capacity. Epochs in ``blocked`` read nothing (the source is cut off) and
    commit nothing. Returns per-epoch (t, parallelism, backlog) and the decisions."""
    trace, decisions = [], []
    for t, rate in enumerate(rates):
        backlog += rate
        if t in blocked:
            trace.append((t, parallelism, backlog))
            continue
        done = int(min(backlog, parallelism * capacity))
        backlog -= done
        busy = done / capacity / parallelism  # of the busiest subtask (the load is spread evenly)
        sample = EpochSample(at=float(t), parallelism=parallelism, source_records=done, backlog=backlog,
                             stages={0: (done, busy), 1: (done, busy * 0.5)}, epoch_s=0.5, interval_s=1.0)
        trace.append((t, parallelism, backlog))
        decision = policy.observe(sample)
        if decision is not None and decision.action != "hold":
            decisions.append((t, decision))
            parallelism = decision.desired
    return trace, decisions


def policy(low=1, high=8, **overrides):
    options = AutoscalerOptions(enabled=True, min_parallelism=low, max_parallelism=high, **{**FAST, **overrides})
    return AutoscalerPolicy(options, max_parallelism=128)


def test_scales_up_within_bounded_epochs_then_down_after_catching_up():
    # 60 s cut off while 300 records/s keep arriving (the outage), then 300/s with 200/s per subtask
    rates = [300] * 300
    outage = set(range(0, 60))
    trace, decisions = simulate(policy(), rates, parallelism=1, blocked=outage)
    ups = [(t, d) for t, d in decisions if d.action == "scale-up"]
    downs = [(t, d) for t, d in decisions if d.action == "scale-down"]
    assert ups, f"never scaled up: {trace[-5:]}"
    first_up, up = ups[0]
    # bounded: the stabilization interval plus one metrics window (and a couple of epochs) after the lift
    assert 60 <= first_up <= 60 + 5 + 5 + 2, first_up
    assert up.current == 1 and up.desired > 3  # sized for the input (300/s at 70 % of 200/s = 3) plus catch-up
    assert up.inputs["backlog"] > 10_000 and "true rate/subtask/s" in up.inputs
    caught_up = next(t for t, p, b in trace if t > first_up and b == 0)
    assert downs and all(t > caught_up for t, _ in downs), (caught_up, downs)
    final = trace[-1][1]
    assert final == 3, trace[-20:]  # the steady-state size: ceil(300 / (200 × 0.7))
    assert trace[-1][2] < 400  # and it keeps up


def test_never_beyond_bounds():
    trace, decisions = simulate(policy(low=2, high=4), [300] * 60 + [2000] * 120 + [0] * 200, parallelism=2)
    assert all(2 <= p <= 4 for _, p, _ in trace)
    assert any(d.desired == 4 for _, d in decisions)  # it wanted more than 4 and got the bound
    assert trace[-1][1] == 2  # idle: back to the lower bound
    with pytest.raises(ValueError, match="max parallelism 1 is below its min parallelism 3"):
        AutoscalerOptions(min_parallelism=3, max_parallelism=1).check()


def test_never_flaps_under_steady_load():
    rng = random.Random(7)
    rates = [int(300 * rng.uniform(0.85, 1.15)) for _ in range(600)]  # ±15 % noise around 300/s
    for start in (2, 3):  # inside the utilization band at either size: it holds
        trace, decisions = simulate(policy(), rates, parallelism=start)
        assert decisions == [], decisions
        assert trace[-1][1] == start
    trace, decisions = simulate(policy(), rates, parallelism=8)  # oversized: one step down, then still
    assert len(decisions) <= 2 and all(d.action == "scale-down" for _, d in decisions), decisions
    changes = sum(1 for a, b in zip(trace, trace[1:]) if a[1] != b[1])
    assert changes == len(decisions)
    assert trace[-1][1] in (2, 3)


def test_cooldown_after_scale_up_holds_scale_down():
    # a burst, then no input at all: the scale-down must wait for the grace period after the scale-up
    rates = [3000] * 12 + [0] * 120
    trace, decisions = simulate(policy(scale_up_grace_period_s=40), rates, parallelism=1)
    up_t = next(t for t, d in decisions if d.action == "scale-up")
    down_t = next(t for t, d in decisions if d.action == "scale-down")
    assert down_t - up_t >= 40
    assert all(d.action != "scale-up" for t, d in decisions if t > up_t)


def test_scale_down_waits_for_the_interval_and_takes_the_largest_request():
    p = policy(scale_down_interval_s=8, scale_up_grace_period_s=0)
    trace, decisions = simulate(p, [100] * 100, parallelism=6)
    down_t, down = next((t, d) for t, d in decisions if d.action == "scale-down")
    # stabilization (5) + window (5) before the first evaluation, then 8 s of asking
    assert down_t >= 5 + 5 + 8
    assert down.desired == max(1, 6 - int(6 * 0.6))  # scale-down.max-factor 0.6 limits one step


def test_configuration_keys_and_cli_bounds():
    conf = Configuration()
    for k, v in {"job.autoscaler.enabled": "true", "job.autoscaler.vertex.min-parallelism": "2",
                 "job.autoscaler.max-parallelism": "6", "job.autoscaler.target.utilization": "0.6",
                 "job.autoscaler.target.utilization.boundary": "0.2", "job.autoscaler.metrics.window": "30 s",
                 "job.autoscaler.stabilization.interval": "1 min", "job.autoscaler.catch-up.duration": "5 min",
                 "job.autoscaler.scale-up.grace-period": "2 min", "job.autoscaler.scale-down.interval": "45 s",
                 "pipeline.name": "ignored"}.items():
        conf.set_string(k, v)
    o = AutoscalerOptions.from_configuration(conf.to_dict())
    assert (o.enabled, o.min_parallelism, o.max_parallelism) == (True, 2, 6)
    assert (o.metrics_window_s, o.stabilization_interval_s, o.catch_up_duration_s) == (30, 60, 300)
    assert (o.scale_up_grace_period_s, o.scale_down_interval_s) == (120, 45)
    assert o.upper_utilization == pytest.approx(0.8) and o.lower_utilization == pytest.approx(0.4)
    with pytest.raises(ValueError, match="unknown configuration key 'job.autoscaler.target-utilization'"):
        AutoscalerOptions.from_configuration({"job.autoscaler.target-utilization": "0.5"}, "j")
    with pytest.raises(ValueError, match="'job.autoscaler.metrics.window'.*duration"):
        AutoscalerOptions.from_configuration({"job.autoscaler.metrics.window": "soon"}, "j")
    assert parse_bounds("1..8") == (1, 8) and parse_bounds("3") == (3, 3)
    with pytest.raises(ValueError, match="need 1 <= MIN <= MAX"):
        parse_bounds("8..1")


def test_env_configure_keeps_the_autoscaler_keys():
    from keyspan.datastream import StreamExecutionEnvironment

    conf = Configuration().set_string("job.autoscaler.enabled", "true").set_string(
        "job.autoscaler.max-parallelism", "4")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    assert env.get_configuration().get_string("job.autoscaler.max-parallelism") == "4"


# -- end to end on real Spark: the running job rescales itself live ---------------------------------

def _demo():
    """examples/catch_up_demo.py as a module; its classes travel to the Spark workers by value."""
    import importlib.util
    import os

    import cloudpickle

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "catch_up_demo.py")
    spec = importlib.util.spec_from_file_location("catch_up_demo", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["catch_up_demo"] = module  # cloudpickle ships registered modules by value
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    return module


def test_backlog_scales_the_running_job_up_live_with_exact_output(workdir, spark):
    """The outage's backlog makes the autoscaler rescale the running job live, within its bounds, and
    every impression is counted once. (Scaling back down is pinned by the policy tests above; on a
    loaded 2-core machine a run short enough for CI does not reliably reach it.)"""
    demo = _demo()
    # 40 impressions/s, cut off for 15 s once running, stopped 90 s later; 20 ms of waiting per
    # impression (50/s per subtask: one cannot keep up); large epochs, so Spark's per-epoch
    # overhead does not dominate
    r = demo.run(rate=40, outage=15, after=90, campaigns=16, cost_ms=20, low=1, high=3, lead=0, max_per_epoch=2000,
                 job_name="autoscale-e2e",
                 settings={"metrics.window": "2 s", "stabilization.interval": "2 s", "catch-up.duration": "5 s",
                           "scale-up.grace-period": "4 s", "scale-down.interval": "2 s"})
    assert r["total"] > 0 and r["received"] == r["total"] and r["latest"] == r["expected"], "books do not balance"
    ups = [d for d in r["decisions"] if d["action"] == "scale-up"]
    downs = [d for d in r["decisions"] if d["action"] == "scale-down"]
    assert ups and ups[0]["at"] >= r["lifted_at"] - 1, r["decisions"]  # the backlog, not the outage, scaled it
    assert all(d["at"] > ups[0]["at"] and d["to"] < d["from"] for d in downs), r["decisions"]
    seen = [p["parallelism"] for p in r["curve"]]
    assert max(seen) > 1 and max(seen) <= 3 and min(seen) >= 1  # applied live, never beyond the bounds
    # the switch happened in this driver and this Spark session, between epochs of one run
    from pyspark.sql import SparkSession

    assert SparkSession.getActiveSession() is spark


def test_advisory_mode_reports_decisions_without_rescaling(workdir, spark):
    """``scaling.enabled = false``: the autoscaler watches a real run, records its curve and reports
    its decisions (metrics, Prometheus), and the job keeps its parallelism."""
    from prometheus_client import generate_latest

    from keyspan.metrics.prometheus import job_registry

    demo = _demo()
    r = demo.run(rate=60, outage=0, after=4, campaigns=8, cost_ms=0, low=1, high=1, fixed=1, lead=0,
                 job_name="autoscale-advisory", settings={"metrics.window": "1 s", "stabilization.interval": "0 s"})
    assert r["received"] == r["total"] and r["latest"] == r["expected"]
    assert r["curve"] and all(p["parallelism"] == 1 for p in r["curve"])
    assert all(p["backlog"] is not None and p["backlog"] >= 0 for p in r["curve"])
    assert sum(p["records"] for p in r["curve"]) == r["total"]
    assert r["decisions"] == []  # bounds 1..1: nothing to decide but holds
    text = generate_latest(job_registry(r["metrics"])).decode()
    assert 'keyspan_autoscaler_currentParallelism{job="autoscale-advisory"} 1.0' in text
    assert 'keyspan_autoscaler_maxParallelism{job="autoscale-advisory"} 1.0' in text


def test_bad_settings_stop_the_job_before_it_starts(tmp_path):
    """A mistyped key or bound fails fast with a line naming it (no Spark started)."""
    import subprocess

    from keyspan.datastream import StreamExecutionEnvironment
    from keyspan.runtime.executor import JobExecutionError, JobRunner
    from keyspan.runtime.options import RunOptions

    env = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_string("job.autoscaler.scale-down.intervall", "10 s"))
    env.from_collection([1, 2]).print()
    with pytest.raises(JobExecutionError, match="unknown configuration key 'job.autoscaler.scale-down.intervall'"):
        JobRunner(env, env.get_transformations(), "bad-autoscaler", RunOptions(workdir=str(tmp_path / "wd")))
    job = tmp_path / "job.py"
    job.write_text("raise SystemExit('the job must not run')\n")
    run = subprocess.run([sys.executable, "-m", "keyspan", "run", str(job), "--autoscale", "4..2"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 2 and "--autoscale '4..2': need 1 <= MIN <= MAX" in run.stderr, run.stderr
